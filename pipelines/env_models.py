"""The learned models of a run's env: built from the env config's recipe (``EnvConfig.new_models``, e.g. the DVRP
flexibility model) or read from the training checkpoints it names (``EnvConfig.model_checkpoints``, e.g. its neural
oracle's routing policy), then handed to every env the run makes (``envs.make_env(..., models=...)``). Envs never
read checkpoints; they take the models they are handed."""

from __future__ import annotations

import importlib
import os

from torch import nn

from envs import EnvConfig
from pipelines.checkpoints import read_checkpoint, weights_mismatch

_ENTRY_KEYS = ("class_path", "config", "weights_prefix")


def env_models(config: EnvConfig) -> dict[str, nn.Module]:
    """The learned models of a run's env, ``{name: model}``: those it trains beside the policy, freshly built
    (``config.new_models()``), and those read from checkpoint files (``config.model_checkpoints()``), each checked
    against what it was trained for (``config.check_model``). Every env of the run is handed these
    (``envs.make_env(..., models=...)``).

    Raises:
        FileNotFoundError, ValueError: as :func:`load_exported_model`, the config's ``new_models`` and
            ``check_model``.
    """
    models = config.new_models()
    for name, path in config.model_checkpoints().items():
        model, trained_for = load_exported_model(path, name)
        config.check_model(name, model, trained_for)
        models[name] = model
    return models


def load_exported_model(path: str, name: str) -> tuple[nn.Module, dict]:
    """Rebuild the model ``name`` that a training checkpoint exports (eval mode, on CPU).

    The checkpoint is a Lightning file whose module wrote ``checkpoint[name]`` = ``{class_path, config,
    [weights_prefix], <what it was trained for>}`` (e.g. ``modules.reinforce.REINFORCEModule``'s
    ``routing_policy``: the network's class path, constructor arguments, ``num_customers`` and
    ``num_vehicles``); the weights are the ``state_dict`` entries under ``weights_prefix`` (default
    ``policy.``). The file is read with ``weights_only=True`` (tensors and plain data: nothing in it runs), and
    the class it names must be an ``nn.Module`` of this project's ``modules`` package.

    Args:
        path: the checkpoint file. name: the exported model's entry.

    Returns:
        The model, and its record of what it was trained for (the entry without class path and config).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is unreadable (truncated, corrupt, or holding objects other than tensors and plain
            data), exports no model ``name``, names a class outside ``modules`` or one that is not an
            ``nn.Module``, or holds weights of other shapes.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path!r}: no such file (the checkpoint of {name})")
    checkpoint = read_checkpoint(path, f"the checkpoint of {name}")
    entry = checkpoint.get(name) if isinstance(checkpoint, dict) else None
    if not isinstance(entry, dict) or "state_dict" not in checkpoint:
        raise ValueError(f"{path!r} is not a {name} checkpoint (it has no {name!r} entry)")
    model = _model_class(path, entry.get("class_path"))(**entry["config"])
    prefix = entry.get("weights_prefix", "policy.")
    try:
        model.load_state_dict({k[len(prefix):]: v for k, v in checkpoint["state_dict"].items() if k.startswith(prefix)})
    except RuntimeError as err:
        raise weights_mismatch(err, path) or err from None
    return model.eval(), {k: v for k, v in entry.items() if k not in _ENTRY_KEYS}


def _model_class(path: str, class_path: object) -> type[nn.Module]:
    """The ``nn.Module`` class ``modules.<file>.<Class>`` a checkpoint names; nothing else is imported.

    Raises:
        ValueError: any other class path (names the file and the path).
    """
    module_name, _, class_name = class_path.rpartition(".") if isinstance(class_path, str) else ("", "", "")
    if module_name.startswith("modules.") and module_name.count(".") == 1 and module_name[8:].isidentifier():
        cls = getattr(importlib.import_module(module_name), class_name, None)
        if isinstance(cls, type) and issubclass(cls, nn.Module):
            return cls
    raise ValueError(f"{path!r} names model class {class_path!r}: only nn.Module classes of this project's "
                     "modules package (modules.<file>.<Class>) are loaded")
