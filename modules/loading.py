"""A trained module rebuilt from its checkpoint alone: the constructor arguments (and the networks' config) kept
as hyper-parameters, and a ``load_from_checkpoint`` that reads weights only and imports nothing the checkpoint
names outside this package or the modules already imported."""

from __future__ import annotations

import importlib
import inspect
import sys

import torch

from modules.compat import given_hyperparameters


class CheckpointLoading:
    """The two methods :class:`modules.base.RLModule` has from here (a mixin before ``LightningModule``)."""

    def save_config(self, *networks: str) -> None:
        """Lightning's ``save_hyperparameters`` for the calling constructor, where the ``networks`` (``nn.Module``
        arguments) are kept as the config that built them: ``{class_path, init_args}`` as LightningCLI passes
        it, so :meth:`load_from_checkpoint` rebuilds the module from its checkpoint alone. A module built in
        Python (not by the CLI) keeps no record of them: a network object is no hyper-parameter."""
        given = given_hyperparameters()  # LightningCLI's config of this module, while the CLI builds it
        ignore = [n for n in networks if given is None or not isinstance(given.get(n), dict)]
        self.save_hyperparameters(ignore=ignore, frame=inspect.currentframe().f_back)

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path, map_location=None, hparams_file=None, strict=None, **kwargs):
        """A trained module from its checkpoint alone (``<Module>.load_from_checkpoint(".../last.ckpt")``): the
        constructor arguments and the networks' config from ``hyper_parameters``, the networks shaped on the
        env specs the checkpoint records (no env is built), then the weights; in eval mode. The file is read with
        ``weights_only=True`` (tensors and plain data: nothing in it runs), and every ``class_path`` it names
        must be a class of this package (``modules``) or of a module imported already (as Lightning requires of
        the module's own class). Called on a base class (``RLModule.load_from_checkpoint``), it builds the
        subclass the checkpoint was trained with.

        Raises:
            ValueError: a class path of a module not imported, or a checkpoint without the networks' config (a
                module built in Python rather than by ``pipelines.fit``: build it and use ``load_state_dict``).
        """
        checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
        hparams = checkpoint.get("hyper_parameters", {})
        for path in _class_paths(hparams):
            module_name = path.rpartition(".")[0]
            if module_name.split(".")[0] == __name__.split(".")[0]:  # this package's own code
                importlib.import_module(module_name)
            elif module_name not in sys.modules:
                raise ValueError(f"{checkpoint_path}: class path {path!r} is not of an imported module (import it "
                                 f"first if you trust this checkpoint)")
        for old, new in getattr(cls, "RENAMED_HPARAMS", {}).items():  # a checkpoint saved before a rename
            if old in hparams and new not in hparams and new not in kwargs:
                kwargs[new] = hparams[old]
        module_name, _, name = str(hparams.get("_class_path", "")).rpartition(".")
        trained = getattr(sys.modules.get(module_name), name, None)
        if isinstance(trained, type) and trained is not cls and issubclass(trained, cls):  # e.g. RLModule.load_...
            return trained.load_from_checkpoint(checkpoint_path, map_location, hparams_file, strict, **kwargs)
        missing = [name for name, p in inspect.signature(cls.__init__).parameters.items()
                   if p.default is inspect.Parameter.empty and name != "self" and p.kind is p.POSITIONAL_OR_KEYWORD
                   and name not in hparams and name not in kwargs]
        if missing:
            raise ValueError(f"{checkpoint_path} records no config for {missing} (the module was not built by "
                             f"pipelines.fit): build the module and load the weights with load_state_dict")
        module = super().load_from_checkpoint(checkpoint_path, map_location=map_location, hparams_file=hparams_file,
                                              strict=strict, weights_only=True, **kwargs)
        for name in set(hparams) - set(module.hparams) - set(kwargs):  # the networks' config, for the next save
            if not name.startswith("_") and name not in getattr(cls, "RENAMED_HPARAMS", {}):
                module.hparams[name] = hparams[name]
        return module.eval()


def _class_paths(value) -> list[str]:
    """Every ``class_path`` / ``_class_path`` string in a nested config."""
    if isinstance(value, dict):
        own = [v for k, v in value.items() if k in ("class_path", "_class_path") and isinstance(v, str)]
        return own + [p for v in value.values() for p in _class_paths(v)]
    if isinstance(value, (list, tuple)):
        return [p for v in value for p in _class_paths(v)]
    return []
