"""The on-policy data path: collected batches split into shuffled minibatches (PPO)."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from jsonargparse.typing import PositiveFloat, PositiveInt
from tensordict import TensorDict

from envs import EnvConfig
from pipelines.data.base import RLDataModule, check


class OnPolicyDataModule(RLDataModule):
    """On-policy pipeline: each collected batch (processed by ``module.on_collected``, e.g. GAE) is
    split into ``ppo_epochs`` passes of shuffled minibatches of ``mini_batch_size`` frames, all handed to one
    training step as a ``[K, mini_batch_size]`` stack (K = ``ppo_epochs * frames_per_batch / mini_batch_size``
    updates, in order: Lightning's per-step cost is paid once per collected batch).

    Args:
        ppo_epochs: passes over each collected batch.
        mini_batch_size: frames per minibatch (``frames_per_batch`` must be a multiple of it).
        (the rest as :class:`RLDataModule`)
    """

    def __init__(self, env: EnvConfig, num_envs: PositiveInt = 64, frames_per_batch: PositiveInt = 1920,
                 total_frames: PositiveInt = 1_000_000, ppo_epochs: PositiveInt = 4,
                 mini_batch_size: PositiveInt = 480, seed: int = 0, device: str = "cpu", workers: int = 0,
                 worker_timeout_s: PositiveFloat = 300.0) -> None:
        super().__init__(env, num_envs, frames_per_batch, total_frames, seed, device, workers, worker_timeout_s)
        check(ppo_epochs >= 1, f"data.ppo_epochs must be >= 1, got {ppo_epochs}")
        check(mini_batch_size >= 1 and frames_per_batch % mini_batch_size == 0,
              f"data.frames_per_batch={frames_per_batch} must be a multiple of data.mini_batch_size={mini_batch_size}")
        self.ppo_epochs = ppo_epochs
        self.mini_batch_size = mini_batch_size

    @property
    def steps_per_batch(self) -> int:
        """Training steps per collected batch: one, of all its minibatch updates."""
        return 1

    def training_batches(self) -> Iterator[TensorDict]:
        """Per collected batch ``[N]``, its minibatches ``[K, mini_batch_size]``: ``ppo_epochs`` shuffles, each
        split into ``N / mini_batch_size`` minibatches."""
        for batch in self.batches():
            self.check_stop()
            order = torch.stack([torch.randperm(batch.numel()) for _ in range(self.ppo_epochs)])
            yield batch[order.reshape(-1, self.mini_batch_size)]
