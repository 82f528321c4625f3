"""Checks of state read back from a checkpoint, made where it is restored: restored state is data, never names, and
every value is checked against what it restores (a tensor's shape, dtype, range and finiteness; a number's kind
and range; a generator's type) before it is used. A checkpoint is data a user may have downloaded or edited: a
restored value the run would not have written ends the run with :class:`RestoredStateError`, which names the entry,
instead of a NaN result, a traceback, or a run that goes on from a state it could never reach."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

# the numpy bit generators a restored generator state may name (looked up here, never by the state's own name)
BIT_GENERATORS = {cls.__name__: cls for cls in (np.random.PCG64, np.random.PCG64DXSM, np.random.MT19937,
                                                np.random.Philox, np.random.SFC64)}


# the largest magnitude a restored floating-point value may have: no state a run writes comes near it, and a value
# beyond it (1e300 in a CartPole state, 3e38 in a weight) overflows to infinity one operation later, far from its cause
MAX_MAGNITUDE = 1e30


class RestoredStateError(ValueError):
    """A checkpoint's state that does not fit what restores it (the message names the entry and what it must be).
    ``pipelines.fit`` ends the run with it in one line, exit status 2."""


def restored_tensor(value: object, key: str, like: Tensor | None = None, *, shape: tuple[int, ...] | None = None,
                    dtype: torch.dtype | None = None, low: float | None = None, high: float | None = None,
                    finite: bool = True) -> Tensor:
    """``value`` checked to be a tensor of ``like``'s (or ``shape``'s / ``dtype``'s) shape and dtype, finite (floating
    point, and with ``finite`` within :data:`MAX_MAGNITUDE`), and within ``[low, high]``.

    Raises:
        RestoredStateError: names ``key`` and what it must be.
    """
    if not isinstance(value, Tensor):
        raise RestoredStateError(f"{key} is {type(value).__name__}, not a tensor")
    shape = tuple(like.shape) if shape is None and like is not None else shape
    dtype = like.dtype if dtype is None and like is not None else dtype
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise RestoredStateError(f"{key} has shape {list(value.shape)}, this run's has {list(shape)}")
    if dtype is not None and value.dtype != dtype:
        raise RestoredStateError(f"{key} is {value.dtype}, this run's is {dtype}")
    if value.numel() == 0:
        return value
    if finite and value.is_floating_point() and not bool(torch.isfinite(value).all()):
        raise RestoredStateError(f"{key} holds a nan or an infinity")
    if finite and value.is_floating_point() and bool((value.abs() > MAX_MAGNITUDE).any()):
        raise RestoredStateError(f"{key} holds {value.abs().max().item():g}, beyond the {MAX_MAGNITUDE:g} no run's "
                                 f"state reaches")
    if value.dtype != torch.bool and ((low is not None and bool((value < low).any()))
                                      or (high is not None and bool((value > high).any()))):
        found = (value.min().item(), value.max().item())
        raise RestoredStateError(f"{key} ranges over [{found[0]:g}, {found[1]:g}], outside [{low}, {high}]")
    return value


def restored_number(value: object, key: str, *, integer: bool = True, low: float | None = None,
                    high: float | None = None, infinite: bool = False) -> int | float:
    """``value`` checked to be an integer (``integer``) or a real number (not nan; infinite only with ``infinite``;
    finite ones within :data:`MAX_MAGNITUDE`) within ``[low, high]``; bools are not numbers here.

    Raises:
        RestoredStateError: names ``key`` and what it must be.
    """
    kinds = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise RestoredStateError(f"{key}={value!r} is not {'an integer' if integer else 'a number'}")
    if not integer and (math.isnan(value) or (math.isinf(value) and not infinite)):
        raise RestoredStateError(f"{key}={value!r} is not a finite number")
    if integer and not -(2**63) <= value < 2**63:  # (no int64 holds it: a counter or seed no run reaches)
        raise RestoredStateError(f"{key}={value!r} is beyond a 64-bit integer")
    if not integer and not math.isinf(value) and abs(value) > MAX_MAGNITUDE:
        raise RestoredStateError(f"{key}={value!r} is beyond the {MAX_MAGNITUDE:g} no run's state reaches")
    if (low is not None and value < low) or (high is not None and value > high):
        raise RestoredStateError(f"{key}={value!r} is outside [{low}, {high}]")
    return value


def restored_mapping(value: object, key: str, required: tuple[str, ...] = ()) -> dict:
    """``value`` checked to be a dict holding ``required``.

    Raises:
        RestoredStateError: names ``key`` and the first missing entry.
    """
    if not isinstance(value, dict):
        raise RestoredStateError(f"{key} is {type(value).__name__}, not a mapping")
    missing = [name for name in required if name not in value]
    if missing:
        raise RestoredStateError(f"{key} has no {missing[0]!r}")
    return value


def restored_numpy_generator(value: object, key: str) -> np.random.Generator:
    """A numpy ``Generator`` at the state ``value`` (``bit_generator.state``), of one of the known bit generators
    (:data:`BIT_GENERATORS`): the state's name is looked up there, never resolved as an attribute.

    Raises:
        RestoredStateError: another name, or a state that bit generator refuses.
    """
    state = restored_mapping(value, key, ("bit_generator", "state"))
    bit_generator = BIT_GENERATORS.get(state["bit_generator"]) if isinstance(state["bit_generator"], str) else None
    if bit_generator is None:
        raise RestoredStateError(f"{key}.bit_generator={state['bit_generator']!r} is not allowed: one of "
                                 f"{', '.join(BIT_GENERATORS)}")
    generator = np.random.Generator(bit_generator())
    try:
        generator.bit_generator.state = value
    except Exception as err:  # (TypeError, ValueError, KeyError, IndexError, OverflowError: numpy's own checks)
        raise RestoredStateError(f"{key} is not a {state['bit_generator']} state ({err})") from None
    return generator


def restored_torch_rng(value: object, key: str) -> Tensor:
    """``value`` checked to be a CPU torch generator state (``torch.get_rng_state()``'s uint8 tensor and size).

    Raises:
        RestoredStateError: names ``key``.
    """
    state = restored_tensor(value, key, torch.get_rng_state())
    try:
        torch.Generator().set_state(state)  # (a generator of its own: the process's stream is left as it is)
    except RuntimeError as err:
        raise RestoredStateError(f"{key} is not a generator state ({err})") from None
    return state
