"""A trained module rebuilt from its checkpoint alone: the constructor arguments (and the networks' config) kept
as hyper-parameters, and a ``load_from_checkpoint`` that reads weights only and builds only what the import policy
(:mod:`modules.import_policy`) allows; :func:`read_checkpoint`, the one reader of checkpoint files."""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable

import lightning
import torch
from packaging.version import InvalidVersion, Version
from torch import Tensor, nn

from envs.restored import RestoredStateError
from modules.compat import given_hyperparameters
from modules.import_policy import check_named_objects, enforced


def read_checkpoint(path: str | os.PathLike, what: str) -> object:
    """``torch.load(path, weights_only=True)`` on the CPU: tensors and plain data, nothing in the file runs.

    Raises:
        ValueError: the file is truncated, corrupt, or holds objects other than tensors and plain data (names
            ``what`` and the file).
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated, random bytes, or a pickled object other than tensors and plain data
        raise ValueError(f"{what} {str(path)!r} is not a readable checkpoint: truncated, corrupt, or holding objects "
                         f"other than tensors and plain data (weights-only loading refused it: "
                         f"{type(err).__name__})") from None


def check_lightning_version(checkpoint: dict, path: str | os.PathLike) -> None:
    """The Lightning version a checkpoint records (``pytorch-lightning_version``, which picks Lightning's migrations
    of it), where it records one, must be a release from 2.0 up to the one installed: Lightning's own migrations
    fail with a traceback on others (a ``KeyError`` for ``0.0.1``, ``InvalidVersion`` for text).

    Raises:
        ValueError: names the file, the entry and the version.
    """
    if "pytorch-lightning_version" not in checkpoint:  # (Lightning migrates none: a file written by hand)
        return
    recorded = checkpoint["pytorch-lightning_version"]
    try:
        version = Version(recorded) if isinstance(recorded, str) else None
    except InvalidVersion:
        version = None
    if version is None or not Version("2.0") <= version <= Version(lightning.__version__):
        raise ValueError(f"{path}: pytorch-lightning_version={recorded!r} is not allowed: a Lightning release "
                         f"from 2.0 to {lightning.__version__} (the one installed) wrote this project's checkpoints")


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
        ``weights_only=True`` (tensors and plain data: nothing in it runs), and every object its hyper-parameters
        name (class paths at any depth, callables and classes given by name, Lightning's ``_instantiator``) must be
        allowed by the import policy (:func:`modules.import_policy.check_named_objects`, before anything is built;
        the policy is also enforced while jsonargparse builds, and the process's own settings are restored after).
        Called on a base class (``RLModule.load_from_checkpoint``), it builds the subclass the checkpoint was
        trained with. ``hparams_file`` is not taken (the checkpoint records the config).

        Raises:
            ValueError: an unreadable file or one that is no training checkpoint; a name the policy refuses (the
                key, its value and why); an ``hparams_file``; a checkpoint without the networks' config (a module
                built in Python rather than by ``pipelines.fit``: build it and use ``load_state_dict``).
        """
        if hparams_file is not None:
            raise ValueError(f"{checkpoint_path}: hparams_file is not taken (a checkpoint of pipelines.fit records its "
                             f"module's config; pass changed arguments as keywords)")
        checkpoint = read_checkpoint(checkpoint_path, "checkpoint")
        hparams = checkpoint.get("hyper_parameters", {}) if isinstance(checkpoint, dict) else None
        if not isinstance(hparams, dict) or "state_dict" not in checkpoint:
            raise ValueError(f"{checkpoint_path!r} is not a training checkpoint of pipelines.fit (no state_dict or "
                             f"hyper_parameters)")
        check_lightning_version(checkpoint, checkpoint_path)
        try:
            check_named_objects(hparams, "hyper_parameters")
        except ValueError as err:
            raise ValueError(f"{checkpoint_path}: {err}") from None
        for old, new in getattr(cls, "RENAMED_HPARAMS", {}).items():  # a checkpoint saved before a rename
            if old in hparams and new not in hparams and new not in kwargs:
                kwargs[new] = hparams[old]
        trained = _trained_class(str(hparams.get("_class_path", "")), checkpoint_path)
        if isinstance(trained, type) and trained is not cls and issubclass(trained, cls):  # e.g. RLModule.load_...
            return trained.load_from_checkpoint(checkpoint_path, map_location, hparams_file, strict, **kwargs)
        missing = [name for name, p in inspect.signature(cls.__init__).parameters.items()
                   if p.default is inspect.Parameter.empty and name != "self" and p.kind is p.POSITIONAL_OR_KEYWORD
                   and name not in hparams and name not in kwargs]
        if missing:
            raise ValueError(f"{checkpoint_path} records no config for {missing} (the module was not built by "
                             f"pipelines.fit): build the module and load the weights with load_state_dict")
        try:
            with enforced():  # what jsonargparse builds from the hyper-parameters (Lightning's instantiator)
                module = super().load_from_checkpoint(checkpoint_path, map_location=map_location, strict=strict,
                                                      weights_only=True, **kwargs)
        except RestoredStateError:  # (already names the entry)
            raise
        except Exception as err:  # an edited file, or one of another version: one line, not the build's traceback
            refused = _import_refusal(err)
            if refused is not None:
                raise ValueError(f"{checkpoint_path}: {refused}") from None
            raise ValueError(f"{checkpoint_path}: {_built_from(err)}") from err
        for name in set(hparams) - set(module.hparams) - set(kwargs):  # the networks' config, for the next save
            if not name.startswith("_") and name not in getattr(cls, "RENAMED_HPARAMS", {}):
                module.hparams[name] = hparams[name]
        return module.eval()


def _trained_class(class_path: str, checkpoint_path) -> type | None:
    """The class ``class_path`` (allowed by the import policy: checked before), imported; None for no path.

    Raises:
        ValueError: no such class.
    """
    module_name, _, name = class_path.rpartition(".")
    if not module_name:
        return None
    try:
        found = getattr(importlib.import_module(module_name), name, None)
    except ImportError:
        found = None
    if not isinstance(found, type):
        raise ValueError(f"{checkpoint_path}: hyper_parameters._class_path={class_path!r} is no class here")
    return found


def _built_from(err: BaseException) -> str:
    """The one-line reason a checkpoint's hyper-parameters or weights did not build its module (``err``'s first
    line, jsonargparse's nested report folded)."""
    return (f"the module cannot be built from its hyper_parameters and state_dict (was the file edited, or saved "
            f"by another version?): {type(err).__name__}: {' '.join(str(err).split())[:300]}")


def _import_refusal(err: BaseException) -> str | None:
    """jsonargparse's refusal of an import path somewhere in ``err``'s chain of causes (its ``ImportDenied``, an
    ``ImportError`` that is a ``ValueError``), in one line, or None."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, ImportError) and isinstance(err, ValueError):
            return " ".join(str(err).split())
        err = err.__cause__ or err.__context__
    return None


def meta_shapes(build: Callable[[], nn.Module]) -> dict[str, torch.Size] | None:
    """The shapes of the ``state_dict`` of the module ``build()`` makes, built on torch's ``meta`` device: no
    memory is taken and the random streams are left as they were, so a file or config asking for sizes that cannot
    fit is told before anything is allocated. None when the module cannot be built that way (a constructor that
    reads values back, for instance): then nothing can be said in advance.
    """
    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            module = build()
    except Exception:  # (meta tensors have no values: a constructor that reads one cannot be built this way)
        return None
    return {key: value.shape for key, value in module.state_dict().items()}


def weights_difference(shapes: dict[str, torch.Size], weights: dict[str, Tensor]) -> str | None:
    """The first difference between the ``state_dict`` shapes a module would have (:func:`meta_shapes`) and the
    ``weights`` a file holds (a key missing on either side, or another shape), or None when they fit."""
    for key, shape in shapes.items():
        if key not in weights:
            return f"no weights for {key}"
        if not isinstance(weights[key], Tensor) or weights[key].shape != shape:
            found = list(weights[key].shape) if isinstance(weights[key], Tensor) else type(weights[key]).__name__
            return f"{key} is {found} in the file, the config's network needs {list(shape)}"
    extra = sorted(set(weights) - set(shapes))
    return f"weights {extra[:3]} have no place in the config's network" if extra else None
