"""Checks that stop a run before it trains on something wrong: hyper-parameters out of range at construction,
non-finite values in a collected batch, non-finite weights."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import Tensor

LEARNING_RATE = "a learning rate in (0, 1]"
DISCOUNT = "in [0, 1]"


def check_hparams(*rules: tuple[str, object, bool, str], section: str = "model") -> None:
    """Hyper-parameter checks at construction, before any work: each rule is ``(key, value, ok, allowed)``. A
    value is out of range unless ``ok`` (write ranges as chained comparisons such as ``0 < lr <= 1``, which are
    false for nan and for an infinity outside them).

    Args:
        section: the config section the keys belong to (``model``, or a callback's class name).

    Raises:
        ValueError: ``<section>.<key>=<value> is not allowed: <allowed>`` for the first rule that fails.
    """
    for key, value, ok, allowed in rules:
        if not ok:
            raise ValueError(f"{section}.{key}={value!r} is not allowed: {allowed}")


def nonfinite_weights(module: torch.nn.Module) -> list[str]:
    """The names of ``module``'s floating-point parameters and buffers that hold a nan or an infinity (one
    reduction per tensor, one read-back)."""
    tensors = [(k, v) for k, v in module.state_dict().items() if isinstance(v, Tensor) and v.is_floating_point()]
    if not tensors:
        return []
    finite = torch.stack([torch.isfinite(v).all() for _, v in tensors]).tolist()
    return [k for (k, _), ok in zip(tensors, finite, strict=True) if not ok]


def check_finite(batch: TensorDict) -> None:
    """Stop on a collected batch whose floating-point entries (observations, rewards) are not all finite: one
    reduction per entry and one read-back per batch.

    Raises:
        RuntimeError: names the first entry with a nan or an infinity (the run stops; its checkpoints are kept).
    """
    keys = [k for k, v in batch.items(True, True) if isinstance(v, Tensor) and v.is_floating_point()]
    if not keys:
        return
    finite = torch.stack([torch.isfinite(batch.get(k)).all() for k in keys])
    if bool(finite.all()):
        return
    bad = keys[int((~finite).nonzero()[0, 0])]
    raise RuntimeError(f"the env produced a non-finite value in {bad!r} (nan or inf): nothing is trained on it; "
                       f"the run stops (its checkpoints are kept)")
