"""What a recurrent policy needs of the env it plays: TorchRL's ``InitTracker`` (``is_init``, True at an episode's
first step) and the ``TensorDictPrimer`` of its recurrent states (zeros at every reset, carried from step to step as
entries of the env's TensorDicts), found in the policy's modules by TorchRL (``get_primers_from_module``)."""

from __future__ import annotations

import torch
from torch import nn
from torchrl.envs import Compose, EnvBase, InitTracker, TensorDictPrimer, Transform, TransformedEnv
from torchrl.modules.utils import get_primers_from_module

from envs.restored import RestoredStateError, restored_mapping, restored_tensor


def recurrent_transforms(policy: object) -> Transform | None:
    """``InitTracker`` and the primer of ``policy``'s recurrent modules (e.g. TorchRL's ``LSTMModule``), as one
    transform; None for a policy without any (a feed-forward module, or a plain callable)."""
    if not isinstance(policy, nn.Module):
        return None
    primer = get_primers_from_module(policy, warn=False)
    return None if primer is None else Compose(InitTracker(init_key="is_init"), primer)


def recurrent_env(env: EnvBase, policy: object) -> EnvBase:
    """``env`` with :func:`recurrent_transforms` of ``policy`` appended (``env`` itself for a feed-forward policy)."""
    transforms = recurrent_transforms(policy)
    return env if transforms is None else TransformedEnv(env, transforms)


def carried_keys(policy: object) -> list:
    """The entries a recurrent ``policy``'s env carries from step to step for it (``is_init`` and its primer's
    states), which a resumed run must continue; ``[]`` for a feed-forward policy."""
    transforms = recurrent_transforms(policy)
    return [] if transforms is None else ["is_init", *_primed(transforms)]


def _primed(transform: Transform) -> list:
    """The entries the ``TensorDictPrimer`` s in ``transform`` (a ``Compose`` of any depth) give."""
    return list(_primer_specs(transform))


def _primer_specs(transform: Transform) -> dict:
    """The specs (one sample's) of the entries the ``TensorDictPrimer`` s in ``transform`` give, by key."""
    if isinstance(transform, Compose):
        return {key: spec for part in transform for key, spec in _primer_specs(part).items()}
    if not isinstance(transform, TensorDictPrimer):
        return {}
    return {key: transform.primers[key] for key in transform.primers.keys(True, True)}


def carried_states(policy: object) -> dict[str, tuple[torch.Size, torch.dtype]]:
    """The states a recurrent ``policy`` carries from step to step (its primer's entries, e.g. an LSTM's
    ``actor_hidden`` ``[1, H]``), by key: one sample's shape and dtype; ``{}`` for a feed-forward policy."""
    transforms = recurrent_transforms(policy)
    return {} if transforms is None else {key: (spec.shape, spec.dtype)
                                          for key, spec in _primer_specs(transforms).items()}


def checked_carry(carry: object, live: dict | None) -> dict:
    """A checkpoint's recurrent policy states (``policy_carry``) checked against the collector's own (``live``): the
    same entries, each of its shape and dtype, finite.

    Raises:
        RestoredStateError: names the first entry that differs.
    """
    live = live or {}
    carry = restored_mapping(carry, "policy_carry")
    if sorted(map(str, carry)) != sorted(map(str, live)):
        raise RestoredStateError(f"policy_carry holds {sorted(map(str, carry))}, this run's policy carries "
                                 f"{sorted(map(str, live))}")
    return {key: restored_tensor(value, f"policy_carry.{key}", live[key].cpu()) for key, value in carry.items()}
