"""Environments and the one factory that builds any of them from its config."""

from __future__ import annotations

import torch
from torchrl.envs import ActionMask, Compose, EnvBase, RewardSum, TransformedEnv

from envs.config import EnvConfig


def make_env(config: EnvConfig, num_envs: int, seed: int, device: torch.device | str = "cpu") -> EnvBase:
    """Build ``config``'s env with ``num_envs`` rows seeded ``seed, seed + 1, ...`` plus the standard
    transforms: ``RewardSum`` (``episode_reward``, the undiscounted return of the running episode) and,
    where the env emits ``action_mask``, ``ActionMask`` (keeps ``action_spec``'s mask current, so
    ``rand_action`` and random rollouts respect it).

    Raises:
        ValueError: ``num_envs < 1``.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    base = config.make(num_envs=num_envs, seed=seed, device=device)
    transforms = [RewardSum()]
    if "action_mask" in base.observation_spec.keys():
        transforms.append(ActionMask())
    return TransformedEnv(base, Compose(*transforms))


__all__ = ["EnvConfig", "make_env"]
