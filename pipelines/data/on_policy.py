"""The on-policy data path: collected batches split into shuffled minibatches (PPO)."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from jsonargparse.typing import PositiveInt
from tensordict import TensorDict

from envs import EnvConfig
from pipelines.data.base import EnvDataModule
from pipelines.data.options import CollectorOptions


class OnPolicyDataModule(EnvDataModule):
    """On-policy pipeline: each collected batch (processed by ``module.on_collected``, e.g. GAE, then cut down to
    the entries the module's update reads, ``module.replay_keys()``) is split into the module's ``ppo_epochs``
    passes of shuffled minibatches of ``mini_batch_size`` frames, all handed to one training step as
    :class:`Minibatches` (K = ``ppo_epochs * frames_per_batch / mini_batch_size`` updates, in order: Lightning's
    per-step cost is paid once per collected batch, and only one minibatch is copied out of the batch at a time).

    Args:
        env: the environment's config (e.g. ``envs.dvrp.DVRPConfig``).
        collector: how the envs are stepped (:class:`~pipelines.data.options.CollectorOptions`: ``num_envs``,
            ``frames_per_batch``, ``workers``, ``mode``...).
        total_frames: the run's budget in frames, summed over ranks.
        seed: seed of env row 0 on rank 0; null: the run's seed.
        device: device the env and collector run on; null follows the trainer's root device.

    Raises:
        ValueError: as :class:`~pipelines.data.base.EnvDataModule`.
    """

    def __init__(self, env: EnvConfig, collector: CollectorOptions = CollectorOptions(),
                 total_frames: PositiveInt = 1_000_000, seed: int | None = None, device: str | None = None) -> None:
        super().__init__(env=env, collector=collector, total_frames=total_frames, seed=seed, device=device)

    @property
    def steps_per_batch(self) -> int:
        """Training steps per collected batch: one, of all its minibatch updates."""
        return 1

    def training_batches(self) -> Iterator[Minibatches]:
        """Per collected batch ``[N]``, its minibatches: the module's ``ppo_epochs`` shuffles, each split into
        ``N / mini_batch_size`` minibatches (a batch the module keeps as rows ``[B, T]``, a recurrent network's: its
        rows shuffled, ``mini_batch_size / T`` whole rows a minibatch). A minibatch of the whole batch
        (``mini_batch_size`` = N) is the batch itself, ``ppo_epochs`` times: the loss is a mean over its frames, so a
        shuffle would change only the order of a float sum, and copying the batch out costs more than the update's
        arithmetic on small networks."""
        module = self.trainer.lightning_module
        keys = module.replay_keys()  # (the loss's inputs: the minibatches carry only these)
        epochs, size = module.ppo_epochs, module.mini_batch_size
        for batch in self.batches():  # (a stop is checked before each collection: every batch collected is trained on)
            if keys is not None:
                batch = batch.select(*keys)
            if size == batch.numel():
                yield Minibatches(batch, None, epochs)
                continue
            # [N] frames, or a recurrent module's [B, T] rows (whole sequences: size / T rows a minibatch)
            per = size if batch.batch_dims == 1 else size // batch.shape[1]
            order = torch.stack([torch.randperm(batch.shape[0]) for _ in range(epochs)])
            yield Minibatches(batch, order.reshape(-1, per))


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
