"""Episode-level data for construction policies trained on whole plans (REINFORCE, ``modules.reinforce``).

Instead of collector rollouts, each training step receives a batch of problem instances (a problem
TensorDict, :mod:`envs.routing.problem`); the module builds the plans in-graph (encoder once per instance)
and counts the construction steps as frames. Batch i of rank k holds the instances keyed
``episode_keys(seed + k * batch_size + j, i)``, j < batch_size, so a resumed run (the batch index is in
the checkpoint) sees the same data. A fixed validation set (keys far from the training seeds) serves
the module's evaluation and baseline test.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from jsonargparse.typing import PositiveInt
from tensordict import TensorDict

from envs import rng
from envs.restored import restored_number
from envs.vrptw.config import VRPTWConfig
from pipelines.data import RLDataModule

_VALIDATION_SEED = 1_000_000_000


class EpisodeDataModule(RLDataModule):
    """Batches of VRPTW instances until ``total_frames`` construction steps have been taken.

    Args:
        env: the VRPTW config (instance source, penalty).
        batch_size: instances per training step on each rank.
        total_frames: budget in construction steps, summed over ranks.
        eval_size: instances in the fixed validation set.
        seed: seed of instance row 0 on rank 0; null: the run's seed (``pipelines.fit`` sets it from
            ``seed_everything``; 0 when built in Python).
        device: device of the instance tensors; null (the default) follows the trainer's root device.

    Raises:
        ValueError: a non-positive size (the message names the key).
    """

    def __init__(self, env: VRPTWConfig, batch_size: PositiveInt = 512, total_frames: PositiveInt = 10_000_000,
                 eval_size: PositiveInt = 1024, seed: int | None = None, device: str | None = None) -> None:
        for key, value in (("batch_size", batch_size), ("total_frames", total_frames)):
            if value < 1:
                raise ValueError(f"data.{key} must be >= 1, got {value}")
        super().__init__(env=env, total_frames=total_frames, seed=seed, device=device)
        if eval_size < 2:
            raise ValueError(f"data.eval_size must be >= 2 (the baseline test needs pairs), got {eval_size}")
        self.batch_size = batch_size
        self.eval_size = eval_size
        self.batch_index = 0
        self._validation: TensorDict | None = None

    def setup(self, stage: str) -> None:
        """Nothing to build but the device: instances are drawn per batch (no env, no collector)."""
        self.resolve_device()

    def _problems(self, first_row: int, rows: int, episode: int) -> TensorDict:
        seeds = first_row + torch.arange(rows, dtype=torch.long)
        keys = rng.episode_keys(seeds, torch.full_like(seeds, episode))
        return self.env_config.source.sample(keys).to(self.device)

    def validation_problems(self) -> TensorDict:
        """The fixed validation set ``[eval_size]`` (the same on every rank and every call)."""
        if self._validation is None:
            self._validation = self._problems(self.seed + _VALIDATION_SEED, self.eval_size, 0)
        return self._validation

    def training_batches(self) -> Iterator[TensorDict]:
        module = self.trainer.lightning_module
        module.restore_rng()
        while module.collected_frames < self.total_frames:
            self.check_stop()
            batch = self._problems(self.seed + self.rank * self.batch_size, self.batch_size, self.batch_index)
            self.batch_index += 1
            yield batch
        self.trainer.should_stop = True

    @property
    def steps_per_batch(self) -> int:
        return 1

    @property
    def frames_per_batch(self) -> int:
        """Instances per training step on each rank: every instance takes at least one construction step, so the
        stream's ``num_batches`` (the budget over this) is an upper bound; the stream ends at the budget."""
        return self.batch_size

    @property
    def planned_frames(self) -> int:
        return self.total_frames

    def state_dict(self) -> dict:
        return {"batch_index": self.batch_index}

    def load_state_dict(self, state_dict: dict) -> None:
        self.batch_index = restored_number(state_dict.get("batch_index", 0), "EpisodeDataModule.batch_index", low=0)
