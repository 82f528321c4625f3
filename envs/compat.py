"""The envs' uses of other libraries' private APIs, in one place. Each was written for the versions in
:data:`WRITTEN_FOR`; ``tests/test_compat.py`` fails when an installed version differs, so each use is read again
against the new release before the pins move.

Why each is private and still used: the public way is measurably slower on the step path
(:func:`new_tensordict`, :func:`get_entry`, :func:`set_entry`), or there is none (:func:`set_wrapper_generator`,
:func:`wrapped_gym_env`, :func:`class_recipe`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from tensordict import TensorDict, TensorDictBase

WRITTEN_FOR = {"tensordict": "0.14", "torchrl": "0.14", "gymnasium": "1.", "jsonargparse": "4.53"}


def new_tensordict(entries: dict[str, Any], batch_size, device=None) -> TensorDict:
    """``TensorDict(entries, batch_size, device)`` without its checks (``TensorDict._new_unsafe``): for entries
    built with that batch size and device already (an env step's output)."""
    return TensorDict._new_unsafe(entries, batch_size=batch_size, device=device)


def get_entry(tensordict: TensorDictBase, key: str, default=None):
    """``tensordict.get(key, default)`` for a plain string key, without key parsing (``_get_str``, as TorchRL's own
    calls do)."""
    return tensordict._get_str(key, default=default)


def set_entry(tensordict: TensorDictBase, key: str, value) -> None:
    """``tensordict.set(key, value)`` for a plain string key of a validated tensor, out of place (``_set_str``)."""
    tensordict._set_str(key, value, validated=True, inplace=False, non_blocking=False)


def set_wrapper_generator(layer, generator) -> None:
    """Give a gymnasium env or wrapper this numpy ``Generator`` without reseeding it (its ``_np_random``; the public
    ``np_random`` setter is not on every wrapper layer)."""
    layer._np_random = generator


def wrapped_gym_env(env):
    """The gymnasium env inside a TorchRL ``GymEnv`` (its ``_env``)."""
    return env._env


def class_recipe(factory):
    """A config's model recipe as a plain ``functools.partial(cls, **init_args)``. jsonargparse gives a
    ``Callable[[...], Class]`` key as ``partial(call_without_instantiate_context, <its instantiator>, cls,
    **init_args)``, and under LightningCLI that instantiator holds the whole CLI (the trainer and its callbacks):
    a config pickled into rollout worker processes carried them along, and failed on a callback's replay storage.
    The class and its arguments are the same; anything else is returned as it is."""
    if (isinstance(factory, partial) and getattr(factory.func, "__module__", "").startswith("jsonargparse")
            and len(factory.args) == 2 and isinstance(factory.args[1], type)):
        return partial(factory.args[1], **factory.keywords)
    return factory
