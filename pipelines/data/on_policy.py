"""The on-policy data path: collected batches split into shuffled minibatches (PPO)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import torch
from jsonargparse.typing import PositiveFloat, PositiveInt
from tensordict import TensorDict

from envs import EnvConfig
from pipelines.data.base import RLDataModule, check
from pipelines.data.ray_collector import RayOptions


class OnPolicyDataModule(RLDataModule):
    """On-policy pipeline: each collected batch (processed by ``module.on_collected``, e.g. GAE, then cut down to
    the entries the module's update reads, ``module.replay_keys()``) is split into ``ppo_epochs`` passes of
    shuffled minibatches of ``mini_batch_size`` frames, all handed to one training step as :class:`Minibatches`
    (K = ``ppo_epochs * frames_per_batch / mini_batch_size`` updates, in order: Lightning's per-step cost is paid
    once per collected batch, and only one minibatch is copied out of the batch at a time).

    Args:
        ppo_epochs: passes over each collected batch.
        mini_batch_size: frames per minibatch (``frames_per_batch`` must be a multiple of it).

    The other arguments are as :class:`RLDataModule`'s.
    """

    def __init__(self, env: EnvConfig, num_envs: PositiveInt = 64, frames_per_batch: PositiveInt = 1920,
                 total_frames: PositiveInt = 1_000_000, ppo_epochs: PositiveInt = 4,
                 mini_batch_size: PositiveInt = 480, seed: int | None = None, device: str | None = None,
                 workers: int = 0,
                 worker_timeout_s: PositiveFloat = 300.0,
                 collector: Literal["sync", "async", "ray"] = "sync", ray: RayOptions | None = None,
                 compile_policy: bool = False, cudagraph_policy: bool = False) -> None:
        super().__init__(env, num_envs, frames_per_batch, total_frames, seed, device, workers, worker_timeout_s,
                         collector, ray, compile_policy, cudagraph_policy)
        check(ppo_epochs >= 1, f"data.ppo_epochs must be >= 1, got {ppo_epochs}")
        check(mini_batch_size >= 1 and frames_per_batch % mini_batch_size == 0,
              f"data.frames_per_batch={frames_per_batch} must be a multiple of data.mini_batch_size={mini_batch_size}")
        self.ppo_epochs = ppo_epochs
        self.mini_batch_size = mini_batch_size

    @property
    def steps_per_batch(self) -> int:
        """Training steps per collected batch: one, of all its minibatch updates."""
        return 1

    def training_batches(self) -> Iterator[Minibatches]:
        """Per collected batch ``[N]``, its minibatches: ``ppo_epochs`` shuffles, each split into
        ``N / mini_batch_size`` minibatches. A minibatch of the whole batch (``mini_batch_size`` = N) is the batch
        itself, ``ppo_epochs`` times: the loss is a mean over its frames, so a shuffle would change only the order
        of a float sum, and copying the batch out costs more than the update's arithmetic on small networks."""
        keys = self.trainer.lightning_module.replay_keys()  # (the loss's inputs: the minibatches carry only these)
        for batch in self.batches():  # (a stop is checked before each collection: every batch collected is trained on)
            if keys is not None:
                batch = batch.select(*keys)
            if self.mini_batch_size == batch.numel():
                yield Minibatches(batch, None, self.ppo_epochs)
                continue
            order = torch.stack([torch.randperm(batch.numel()) for _ in range(self.ppo_epochs)])
            yield Minibatches(batch, order.reshape(-1, self.mini_batch_size))


class Minibatches:
    """A collected batch ``[N]`` and the order of its minibatches ``[K, M]`` (frame indices): iterating gives
    ``data[index[k]]`` for k = 0 .. K-1, each made when it is read; without an index, ``data`` itself ``repeats``
    times (read-only: the updates must not write into it). ``to(device)`` moves both (Lightning calls it).

    Args:
        data: the batch ``[N]``. index: int64 ``[K, M]``, or None. repeats: K when ``index`` is None.
    """

    def __init__(self, data: TensorDict, index: torch.Tensor | None, repeats: int = 1) -> None:
        self.data, self.index, self.repeats = data, index, repeats

    def __len__(self) -> int:
        return self.repeats if self.index is None else self.index.shape[0]

    def __iter__(self) -> Iterator[TensorDict]:
        if self.index is None:
            yield from (self.data for _ in range(self.repeats))
            return
        for index in self.index:
            yield self.data[index]

    def to(self, device) -> Minibatches:
        return Minibatches(self.data.to(device), None if self.index is None else self.index.to(device), self.repeats)
