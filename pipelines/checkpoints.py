"""Reading checkpoint files: the learned models an env needs (``EnvConfig.model_checkpoints``, e.g. the DVRP
neural oracle's routing policy), and a trained run for evaluation. Envs never read checkpoints; they take the
models they are handed (``EnvConfig.attach_model``)."""

from __future__ import annotations

import importlib
import os

import torch
from torch import nn

from envs import EnvConfig

_ENTRY_KEYS = ("class_path", "config", "weights_prefix")


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
        ValueError: the checkpoint exports no model ``name``, or names a class outside ``modules`` or one that
            is not an ``nn.Module``.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path!r}: no such file (the checkpoint of {name})")
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    entry = checkpoint.get(name) if isinstance(checkpoint, dict) else None
    if not isinstance(entry, dict) or "state_dict" not in checkpoint:
        raise ValueError(f"{path!r} is not a {name} checkpoint (it has no {name!r} entry)")
    model = _model_class(path, entry.get("class_path"))(**entry["config"])
    prefix = entry.get("weights_prefix", "policy.")
    model.load_state_dict({k[len(prefix):]: v for k, v in checkpoint["state_dict"].items() if k.startswith(prefix)})
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


def check_resume_checkpoint(path: str, model_class: str, data_class: str) -> None:
    """Check, before anything is built or written, that ``path`` is a training checkpoint of this config's kind:
    it exists, reads as tensors and plain data (``weights_only``), is a Lightning checkpoint, and was trained
    with the config's model class and data module class (as its ``hyper_parameters`` and data module entry
    record them).

    Args:
        path: the ``--ckpt_path`` file. model_class, data_class: the config's ``model`` and ``data`` class paths.

    Raises:
        ValueError: what is wrong, naming the file (and the classes it was trained with, when it records them).
    """
    if not os.path.isfile(path):
        raise ValueError(f"--ckpt_path={path!r}: no such file")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated, random bytes, or a pickled object other than tensors and plain data
        raise ValueError(f"--ckpt_path={path!r} is not a readable checkpoint: truncated, corrupt, or holding "
                         f"objects other than tensors and plain data (weights-only loading refused it: "
                         f"{type(err).__name__})") from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ValueError(f"--ckpt_path={path!r} is not a training checkpoint of pipelines.fit (no state_dict)")
    trained_model = (checkpoint.get("hyper_parameters") or {}).get("_class_path")
    if trained_model is not None and trained_model != model_class:
        raise ValueError(f"--ckpt_path={path!r} was trained with model {trained_model}; this config's model is "
                         f"{model_class}")
    data_name = data_class.rpartition(".")[2]
    trained_data = [k for k in checkpoint if isinstance(k, str) and k.endswith("DataModule")]
    if trained_data and data_name not in trained_data:
        raise ValueError(f"--ckpt_path={path!r} was trained with data module {trained_data[0]}; this config's data "
                         f"module is {data_class}")


def attach_env_models(config: EnvConfig) -> None:
    """Load every model ``config`` needs from a checkpoint (``config.model_checkpoints()``) and hand it over
    (``config.attach_model``), which checks what it was trained for.

    Raises:
        FileNotFoundError, ValueError: as :func:`load_exported_model` and the config's ``attach_model``.
    """
    for name, path in config.model_checkpoints().items():
        model, trained_for = load_exported_model(path, name)
        config.attach_model(name, model, trained_for)
