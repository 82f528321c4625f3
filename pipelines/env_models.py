"""The learned models of a run's env: built from the env config's recipe (``EnvConfig.new_models``, e.g. the DVRP
flexibility model) or read from the training checkpoints it names (``EnvConfig.model_checkpoints``, e.g. its neural
oracle's routing policy), then handed to every env the run makes (``envs.make_env(..., models=...)``). Envs never
read checkpoints; they take the models they are handed."""

from __future__ import annotations

import importlib
import inspect
import os

from torch import nn

from envs import EnvConfig
from modules.import_policy import check_named_objects
from modules.loading import meta_shapes, read_checkpoint, weights_difference
from pipelines.checkpoints import weights_mismatch

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
    ``policy.``). The file is read with ``weights_only=True`` (tensors and plain data: nothing in it runs); the
    class it names must be allowed by the import policy (:mod:`modules.import_policy`) and be an ``nn.Module``
    defined in a file of this project's ``modules`` package (not one imported into it); ``config`` holds plain
    values of that class's named constructor arguments. The model is first built on the ``meta`` device and its
    weights' shapes compared with the file's, so a config asking for sizes the weights do not have is refused
    before any memory is taken.

    Args:
        path: the checkpoint file. name: the exported model's entry.

    Returns:
        The model, and its record of what it was trained for (the entry without class path and config).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is unreadable (truncated, corrupt, or holding objects other than tensors and plain
            data), exports no model ``name``, names another class or arguments that class does not take, or
            holds weights of other shapes (each names the file and the model).
    """
    what = f"the checkpoint of {name}"
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path!r}: no such file ({what})")
    checkpoint = read_checkpoint(path, what)
    entry = checkpoint.get(name) if isinstance(checkpoint, dict) else None
    if not isinstance(entry, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise ValueError(f"{path!r} is not a {name} checkpoint (it has no {name!r} entry)")
    cls = _model_class(path, name, entry.get("class_path"))
    config = _model_config(path, name, cls, entry.get("config"))
    prefix = entry.get("weights_prefix", "policy.")
    if not isinstance(prefix, str):
        raise ValueError(f"{path!r}: {name}.weights_prefix={prefix!r} is not a string")
    weights = {k[len(prefix):]: v for k, v in checkpoint["state_dict"].items() if k.startswith(prefix)}
    shapes = meta_shapes(lambda: cls(**config))
    difference = None if shapes is None else weights_difference(shapes, weights)
    if difference is not None:
        raise ValueError(f"{what} {path!r}: its weights do not fit the network its config asks for: {difference}")
    model = cls(**config)
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        raise weights_mismatch(err, path, what) or err from None
    return model.eval(), {k: v for k, v in entry.items() if k not in _ENTRY_KEYS}


def _model_class(path: str, name: str, class_path: object) -> type[nn.Module]:
    """The ``nn.Module`` class ``modules.<file>.<Class>`` a checkpoint names, defined in that file (a class another
    library defines and a ``modules`` file imports is refused); nothing outside the import policy is imported.

    Raises:
        ValueError: any other class path (names the file and the path).
    """
    refusal = ValueError(f"{path!r}: {name}.class_path={class_path!r} is not allowed: only nn.Module classes "
                         f"defined in this project's modules package (modules.<file>.<Class>) are loaded")
    module_name, _, class_name = class_path.rpartition(".") if isinstance(class_path, str) else ("", "", "")
    if not (module_name.startswith("modules.") and module_name.count(".") == 1 and module_name[8:].isidentifier()):
        raise refusal
    try:
        check_named_objects({"class_path": class_path}, name)
    except ValueError:
        raise refusal from None
    cls = getattr(importlib.import_module(module_name), class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module) and cls.__module__ == module_name):
        raise refusal
    return cls


def _model_config(path: str, name: str, cls: type, config: object) -> dict:
    """``config``, checked to be the named constructor arguments of ``cls`` with plain values (numbers, strings,
    booleans, None and lists of those): nothing in it names an object to build.

    Raises:
        ValueError: another value, or a key the constructor does not name (names the file and the key).
    """
    if not isinstance(config, dict):
        raise ValueError(f"{path!r}: {name}.config is not a mapping of constructor arguments")
    parameters = inspect.signature(cls.__init__).parameters
    named = {k for k, p in parameters.items() if k != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    for key, value in config.items():
        if key not in named:
            raise ValueError(f"{path!r}: {name}.config.{key} is not an argument of {cls.__name__} "
                             f"({', '.join(sorted(named))})")
        if not _plain(value):
            raise ValueError(f"{path!r}: {name}.config.{key}={value!r} is not allowed: numbers, strings, booleans, "
                             f"null and lists of those")
    return config


def _plain(value: object) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, (list, tuple)) and all(_plain(v) for v in value)
