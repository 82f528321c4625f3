"""A gymnasium env's episode in progress as checkpoint data (:func:`snapshot`) and back (:func:`restore`), for envs
whose whole state is plain attributes on the env and its wrappers (:data:`RESTORABLE_MODULES`). The snapshot is data,
never names: restoring checks it against the env the config built (its parameters equal, its state of the same kind
and finite, its generators of known types)."""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from envs.compat import set_wrapper_generator
from envs.restored import (
    RestoredStateError,
    restored_mapping,
    restored_number,
    restored_numpy_generator,
    restored_tensor,
)

# gymnasium envs whose whole state is plain attributes (numbers, arrays, the np_random generator) on the env and
# its wrappers, so that a snapshot of those restores the episode in progress exactly
RESTORABLE_MODULES = ("gymnasium.envs.classic_control.", "gymnasium.envs.toy_text.")
_SKIP = object()


def _plain(value: object) -> object:
    """``value`` as checkpoint data (numbers, strings, None, tensors for numeric arrays, lists of those), or
    ``_SKIP`` for anything else (spaces, specs, render surfaces...)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return value.item()
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return torch.from_numpy(value.copy())
    if isinstance(value, (tuple, list)):
        items = [_plain(v) for v in value]
        return _SKIP if any(i is _SKIP for i in items) else items
    return _SKIP


def _unplain(value: object, current: object, key: str) -> object:
    """The inverse of :func:`_plain` for an attribute that changes as the env plays (its state), shaped after the
    attribute's ``current`` value (array dtype and shape, tuple, kind of number), each value checked: the same kind
    as the current one, arrays of its shape, no nan or infinity.

    Raises:
        RestoredStateError: a value of another kind or shape, or not finite (names ``key``).
    """
    if isinstance(value, Tensor):
        if isinstance(current, np.ndarray):
            restored_tensor(value, key, shape=current.shape, dtype=value.dtype)
            if value.dtype.is_floating_point != (current.dtype.kind == "f"):
                raise RestoredStateError(f"{key} is {value.dtype}, this env's is {current.dtype}")
            return value.numpy().astype(current.dtype)
        if current is not None:
            raise RestoredStateError(f"{key} is a tensor, this env's is {type(current).__name__}")
        return restored_tensor(value, key).numpy().copy()
    if isinstance(value, list):
        if current is not None and not (isinstance(current, (tuple, list)) and len(current) == len(value)):
            raise RestoredStateError(f"{key} is a list of {len(value)}, this env's is {current!r}")
        parts = list(current) if current is not None else [None] * len(value)
        items = [_unplain(v, c, f"{key}[{i}]") for i, (v, c) in enumerate(zip(value, parts, strict=True))]
        return tuple(items) if isinstance(current, tuple) else items
    if value is None:
        return value
    if isinstance(value, str) or isinstance(current, str):
        if not (isinstance(value, str) and isinstance(current, str)):
            raise RestoredStateError(f"{key}={value!r}: this env's is {current!r}")
        return value
    if isinstance(current, (bool, np.bool_)) or isinstance(value, bool):
        if not (isinstance(value, bool) and (current is None or isinstance(current, (bool, np.bool_)))):
            raise RestoredStateError(f"{key}={value!r}: this env's is {current!r}")
        return value
    if current is not None and not isinstance(current, (int, float, np.number)):
        raise RestoredStateError(f"{key}={value!r}: this env's is {type(current).__name__}")
    counter = isinstance(current, (int, np.integer)) and not isinstance(current, bool)
    return restored_number(value, key, integer=counter,  # (an index or count of this env's: never below 0)
                           low=0 if counter and current >= 0 else None)


def _same(value: object, current: object) -> bool:
    """Whether the checkpoint data ``value`` is the plain form of ``current``."""
    if isinstance(value, Tensor) or isinstance(current, Tensor):
        return isinstance(value, Tensor) and isinstance(current, Tensor) and value.shape == current.shape and bool(
            torch.equal(value, current.to(value.dtype)))
    if isinstance(value, list) and isinstance(current, list):
        return len(value) == len(current) and all(_same(v, c) for v, c in zip(value, current, strict=True))
    return type(value) is type(current) and value == current


@functools.cache
def _state_attributes(cls: type) -> frozenset[str]:
    """The attributes the methods of ``cls`` (and of its bases) other than ``__init__`` assign (``self.x = ...``,
    read from their source): the env's state, which changes as it plays. Every other attribute is a parameter,
    set when the env is made (Pendulum's ``g``, ``max_torque``; ``TimeLimit``'s ``_max_episode_steps``)."""
    names = set()
    for klass in cls.__mro__:
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):  # (object, built-ins: no source)
            continue
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or function.name == "__init__":
                continue
            for node in ast.walk(function):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                    node, (ast.AugAssign, ast.AnnAssign)) else []
                names.update(t.attr for target in targets for t in ast.walk(target)
                             if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self")
    return frozenset(names)


def _layers(env: gym.Env | gym.vector.VectorEnv) -> list:
    """An env and the envs it wraps, outermost first."""
    layers = [env]
    while hasattr(layers[-1], "env"):
        layers.append(layers[-1].env)
    return layers


def snapshot(env: gym.Env | gym.vector.VectorEnv) -> list[dict]:
    """The plain attributes of ``env`` and every env it wraps (outermost first), and their ``np_random``
    generators' states (``_np_random``), as checkpoint data (tensors, numbers, strings)."""
    states = []
    for layer in _layers(env):
        state = {k: _plain(v) for k, v in vars(layer).items() if k not in ("_np_random", "_saved_kwargs")}
        state = {k: v for k, v in state.items() if v is not _SKIP}
        generator = vars(layer).get("_np_random")
        if isinstance(generator, np.random.Generator):
            state["_np_random"] = generator.bit_generator.state
        states.append(state)
    return states


def restore(env: gym.Env | gym.vector.VectorEnv, states: list[dict], where: str = "env state") -> None:
    """Set the attributes :func:`snapshot` took back on ``env`` and the envs it wraps. A snapshot is data, checked
    against the env the config built: its parameters (attributes only ``__init__`` sets) must equal this env's,
    its state (attributes the env's methods change) must be of the kind and shape of this env's and finite, its
    generators must be of a known numpy bit generator (:func:`envs.restored.restored_numpy_generator`), and it may
    name no attribute the env does not have.

    Raises:
        RestoredStateError: another stack of wrappers, another parameter (e.g. Pendulum's ``g``), a value of another
            kind, shape or not finite, an unknown generator or attribute (names ``where``, the layer and the key).
    """
    layers = _layers(env)
    if not isinstance(states, list) or len(layers) != len(states):
        raise RestoredStateError(f"{where}: state of {len(states) if isinstance(states, list) else 'no'} wrapper "
                                 f"layers, this env has {len(layers)}")
    for depth, (layer, state) in enumerate(zip(layers, states, strict=True)):
        prefix = f"{where}[{depth}] ({type(layer).__name__})"
        restored_mapping(state, prefix)
        dynamic, present = _state_attributes(type(layer)), vars(layer)
        updates = {}
        for key, value in state.items():
            name = f"{prefix}.{key}"
            if key == "_np_random":
                updates[key] = restored_numpy_generator(value, name)
            elif not isinstance(key, str) or key.startswith("__") or (key not in present and key not in dynamic):
                raise RestoredStateError(f"{name}: this env has no such attribute")
            elif key not in dynamic:  # a parameter: the config's, never the checkpoint's
                current = _plain(present[key])
                if current is not _SKIP and not _same(value, current):
                    raise RestoredStateError(f"{name}={value!r} differs from this run's env ({current!r}): an env's "
                                             f"parameters come from its config")
            else:
                updates[key] = _unplain(value, present.get(key), name)
                if (type(layer).__name__, key) == ("TimeLimit", "_elapsed_steps"):
                    restored_number(value, name, low=0, high=present["_max_episode_steps"])
        for key, value in updates.items():  # (nothing is set before the whole layer is checked)
            if key == "_np_random":
                set_wrapper_generator(layer, value)
            else:
                setattr(layer, key, value)
