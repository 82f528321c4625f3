"""Checks that stop a run before it trains on something wrong: hyper-parameters out of range at construction,
non-finite values in a collected batch, non-finite weights."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import Tensor

from envs.restored import MAX_MAGNITUDE, RestoredStateError

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


# the loss buffers that hold a setting of the config, not a trained value (TorchRL's names)
CONFIG_BUFFERS = ("gamma", "lmbda", "clip_epsilon", "entropy_coeff", "entropy_coef", "critic_coeff", "critic_coef",
                  "policy_noise", "noise_clip", "target_entropy")


def check_loaded_weights(weights: object, module: torch.nn.Module) -> None:
    """Check a checkpoint's ``state_dict`` before it is loaded into ``module``: tensors of the module's dtypes, with
    no nan anywhere and an infinity or a magnitude beyond :data:`~envs.restored.MAX_MAGNITUDE` only where ``module``
    holds the same value (e.g. an unbounded action's bound), an exploration rate ``eps`` in [0, 1]. Shapes and keys
    are left to ``load_state_dict``, which names them.

    Raises:
        RestoredStateError: names the first weight that is not a tensor, of another dtype, or not finite.
    """
    if weights is None:
        return
    if not isinstance(weights, dict):
        raise RestoredStateError(f"state_dict is {type(weights).__name__}, not a mapping of tensors")
    live = module.state_dict()
    for key, value in weights.items():
        if not isinstance(value, Tensor):
            raise RestoredStateError(f"state_dict.{key} is {type(value).__name__}, not a tensor")
        if isinstance(live.get(key), Tensor) and value.dtype != live[key].dtype:  # (load_state_dict casts silently)
            raise RestoredStateError(f"state_dict.{key} is {value.dtype}, this module's is {live[key].dtype}")
        if key.rpartition(".")[2] == "eps" and value.numel() == 1 and not 0 <= float(value) <= 1:
            raise RestoredStateError(f"state_dict.{key}={float(value)} is not an exploration rate in [0, 1]")
        if not value.is_floating_point():
            continue
        bad = ~torch.isfinite(value) | (value.abs() > MAX_MAGNITUDE)
        if not bool(bad.any()):
            continue
        own = live.get(key)
        if not (isinstance(own, Tensor) and own.shape == value.shape and torch.equal(value[bad], own[bad].to(value))):
            raise RestoredStateError(f"state_dict.{key} holds a nan, an infinity or a value beyond {MAX_MAGNITUDE:g} "
                                     f"(a trained weight never does)")


def keep_config_values(weights: dict, module: torch.nn.Module) -> None:
    """Put this module's own values (its config's) in place of a checkpoint's ``state_dict`` entries that are
    settings, not training state: the losses' buffers :data:`CONFIG_BUFFERS` (TorchRL keeps ``gamma`` and
    ``clip_epsilon`` as buffers, so a resumed run trained on the file's values, whatever its config said, and an
    edited file's ``gamma=50`` was used and saved again)."""
    live = module.state_dict()
    for key in list(weights):
        if key.rpartition(".")[2] in CONFIG_BUFFERS and isinstance(live.get(key), Tensor):
            weights[key] = live[key].detach().clone()


def check_finite(batch: TensorDict) -> None:
    """Stop on a collected batch whose floating-point entries (observations, rewards) are not all finite: one
    reduction per entry and one read-back per batch.

    Raises:
        RuntimeError: names the entry the env produced with a nan or an infinity (what the env returns, under
            ``next``, before what a policy computed from it: a NaN observation makes a NaN action), and the others
            (the run stops; its checkpoints are kept).
    """
    keys = [k for k, v in batch.items(True, True) if isinstance(v, Tensor) and v.is_floating_point()]
    if not keys:
        return
    finite = torch.stack([torch.isfinite(batch.get(k)).all() for k in keys])
    if bool(finite.all()):
        return
    bad = [keys[i] for i in (~finite).nonzero().flatten().tolist()]
    returned = {k[1:] if len(k) > 2 else k[1] for k in bad if isinstance(k, tuple) and k[0] == "next"}
    bad.sort(key=lambda k: 0 if isinstance(k, tuple) and k[0] == "next" else 1 if k in returned else 2)
    others = f" (and in {', '.join(map(repr, bad[1:4]))}{', ...' if len(bad) > 4 else ''})" if len(bad) > 1 else ""
    raise RuntimeError(f"the env produced a non-finite value in {bad[0]!r} (nan or inf){others}: nothing is trained "
                       f"on it; the run stops (its checkpoints are kept)")
