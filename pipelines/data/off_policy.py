"""The off-policy data path: collected batches into a replay buffer, sampled batches out (DQN, SAC)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator

from jsonargparse.typing import PositiveInt
from tensordict import TensorDict
from torchrl.data import TensorDictReplayBuffer

from envs import EnvConfig
from pipelines.data.base import EnvDataModule
from pipelines.data.options import CollectorOptions, ReplayOptions, require
from pipelines.data.replay import (
    make_replay_buffer,
    pending_steps,
    store,
    update_priorities,
)
from pipelines.data.replay_checks import check_replay_state, load_pending_steps

log = logging.getLogger(__name__)


class OffPolicyDataModule(EnvDataModule):
    """Off-policy pipeline: collect ``frames_per_batch`` -> ``buffer.extend`` -> ``utd_ratio`` sampled
    batches of ``batch_size`` transitions per collected batch, handed to the module's ``training_step`` as
    ``[K, batch_size]`` stacks of K updates (:meth:`training_batches`).

    The first ``init_random_frames`` frames (all ranks) are collected with uniformly random (masked)
    actions and train nothing. The buffer (:func:`pipelines.data.replay.make_replay_buffer`) stores time-contiguous
    ``[B, T]`` slices of the entries the module declares (``replay_keys``), so the module's
    ``replay_transform()`` (e.g. TorchRL's ``MultiStepTransform`` for n-step returns) sees whole trajectories
    per env row. The buffer is part of the checkpoint. "Train every k env steps" is
    ``frames_per_batch = k * num_envs`` with ``utd_ratio = 1``.

    With ``collector.workers: 1`` and ``collector.mode: async`` the worker collects the next batch while the learner
    trains on this one (TorchRL's ``MultiAsyncCollector``), so collection and updates use two cores at once. The
    worker plays a copy of the learner's weights taken when its last batch reached the learner
    (:class:`pipelines.data.collectors.PublishingAsyncCollector`): batch k is played by the weights after k - 1
    batches (each frame's ``policy_version``; ``time/policy_lag`` 1), whatever the timing, so such a run repeats bit
    for bit. It pays where collecting is a large share of large batches: the CartPole DQN peer run took 49.2 s
    against 56.0 s in one process (medians; docs/benchmarks.md, "Collecting while the learner trains").

    Multi-agent envs (``env.num_agents = R``) share one buffer: a collected ``[B, T]`` batch is stored
    as ``B * R`` rows of one agent's transitions each (:func:`pipelines.data.replay.split_agents`), so n-step
    returns are computed per (env, agent) and a sampled transition is one agent's, with its ``agent_id``.

    Args:
        env: the environment's config (e.g. ``envs.hockey.HockeyConfig``).
        collector: how the envs are stepped (:class:`~pipelines.data.options.CollectorOptions`).
        replay_buffer: the buffer, its warm-up and its sampling (:class:`~pipelines.data.options.ReplayOptions`:
            ``buffer_size``, ``batch_size``, ``utd_ratio``, ``init_random_frames``, ``storage``, ``prioritized``...).
        total_frames: the run's budget in frames, summed over ranks.
        seed: seed of env row 0 on rank 0; null: the run's seed.
        device: device the env and collector run on; null follows the trainer's root device.

    Raises:
        ValueError: as :class:`~pipelines.data.base.EnvDataModule`; ``collector.mode: async`` with more than one
            worker; ``buffer_size`` below ``num_envs``; at set-up, too few steps per batch for the module's n-step
            transform (the message names the key).
    """

    def __init__(self, env: EnvConfig, collector: CollectorOptions = CollectorOptions(),
                 replay_buffer: ReplayOptions = ReplayOptions(), total_frames: PositiveInt = 100_000,
                 seed: int | None = None, device: str | None = None) -> None:
        super().__init__(env=env, collector=collector, total_frames=total_frames, seed=seed, device=device)
        require(collector.mode != "async" or collector.workers == 1,
              f"data.collector.mode=async needs data.collector.workers=1 here, got {collector.workers}: the replay "
              "buffer stores every env row's steps in order, and with several workers an asynchronous batch holds "
              "one worker's rows (use workers: 1, or mode: sync or ray)")
        require(replay_buffer.buffer_size >= collector.num_envs,
              f"data.replay_buffer.buffer_size={replay_buffer.buffer_size} must be >= data.collector.num_envs="
              f"{collector.num_envs}")
        self.replay_options = replay_buffer
        self.buffer: TensorDictReplayBuffer | None = None
        self._own_scratch: str | None = None  # the memmap folder this data module chose in the run's folder

    @property
    def init_random_frames(self) -> int:
        """The random-action warm-up in frames over all ranks (``replay_buffer.init_random_frames``)."""
        return self.replay_options.init_random_frames

    def setup(self, stage: str) -> None:
        super().setup(stage)
        if self.buffer is None:
            options, rows = self.replay_options, self.num_envs * (self.num_agents or 1)
            require(options.buffer_size >= rows, f"data.replay_buffer.buffer_size={options.buffer_size} must be >= "
                                               f"data.collector.num_envs * env.num_agents = {rows} (one row per env "
                                               "and agent)")
            module = self.trainer.lightning_module if self.trainer is not None else None
            transform = module.replay_transform() if module is not None else None
            steps, n_steps = self.frames_per_batch // self.num_envs, getattr(transform, "n_steps", 0)
            # the n-step transform holds n steps back; TorchRL 0.14's 2-D storage fails on 1-step slices
            require(steps - n_steps >= 2, f"data.collector.frames_per_batch / data.collector.num_envs = {steps} steps "
                                       f"per env must be >= model.n_steps + 2 = {n_steps + 2} (the buffer's n-step "
                                       "transform holds n steps back and TorchRL's 2-D storage needs slices of >= 2 "
                                       "steps)")
            folder = None
            if options.storage == "memmap":
                folder = os.path.join(options.scratch_dir or self._run_scratch(), f"rank{self.rank}")
            sample_size = options.batch_size * (1 if options.prioritized else options.utd_ratio)  # training_batches
            self.buffer = make_replay_buffer(options.buffer_size, rows, sample_size, options.storage, folder,
                                             options.prioritized, options.priority_alpha, options.priority_beta,
                                             transform)

    def _run_scratch(self) -> str:
        """The memmap storage's folder when ``scratch_dir`` is null: ``replay`` in the run's folder (the trainer's
        log dir, else its ``default_root_dir``; a temporary folder outside a trainer), removed at the end of a
        run that finishes and kept after a fault (see :meth:`teardown` and :meth:`on_exception`)."""
        if self.trainer is None:
            return tempfile.mkdtemp(prefix="replay_")
        self._own_scratch = os.path.join(self.trainer.log_dir or self.trainer.default_root_dir, "replay")
        return self._own_scratch

    def teardown(self, stage: str) -> None:
        """The base's teardown, then the run's own memmap folder is removed (the run finished: its checkpoints
        hold the buffer)."""
        super().teardown(stage)
        if self._own_scratch is not None:
            shutil.rmtree(os.path.join(self._own_scratch, f"rank{self.rank}"), ignore_errors=True)
            with contextlib.suppress(OSError):  # the last rank out removes the folder
                os.rmdir(self._own_scratch)
            self._own_scratch = None

    def on_exception(self, exception: BaseException) -> None:
        """The base's handling, and the run's own memmap folder is kept and named (for a resume)."""
        super().on_exception(exception)
        if self._own_scratch is not None:
            log.warning("the replay buffer's memmap files are kept in %s", self._own_scratch)

    def clear_replay(self) -> None:
        """Empty the replay buffer (e.g. at a curriculum phase whose data should not mix with the last one's)."""
        self.buffer.empty()

    def _collector_options(self) -> dict:
        world = self.trainer.world_size
        done = self.trainer.lightning_module.collected_frames
        frames = max(self.init_random_frames - done, 0) // world
        # whole batches, as TorchRL collects them anyway (it warned on every run of a warm-up of 1000 in 256s)
        return {"init_random_frames": -(-frames // self.frames_per_batch) * self.frames_per_batch}

    @property
    def steps_per_batch(self) -> int:
        """Training steps per collected batch: one of ``utd_ratio`` updates with uniform sampling; ``utd_ratio``
        of one update each with prioritised replay (each update's priorities change the next sample)."""
        return self.replay_options.utd_ratio if self.replay_options.prioritized else 1

    def num_training_steps(self) -> int:
        """Training steps of the whole run: collected batches after the warm-up times :attr:`steps_per_batch`."""
        world = self.world_size
        warmup = self.init_random_frames // (self.frames_per_batch * world)  # batches with frames <= warm-up
        return max(self.num_batches - warmup, 0) * self.steps_per_batch

    def training_batches(self) -> Iterator[TensorDict]:
        """Sampled batches ``[K, batch_size]`` for K updates each: after every collected batch, one stack of all
        ``utd_ratio`` samples drawn at once (uniform sampling with replacement: the same distribution as
        ``utd_ratio`` draws, the buffer does not change in between), or, with prioritised replay, ``utd_ratio``
        stacks of one, the priorities updated after each."""
        module, options = self.trainer.lightning_module, self.replay_options
        for batch in self.batches():
            store(self.buffer, batch, module.replay_keys(), self.num_agents)
            if module.collected_frames <= self.init_random_frames:
                continue
            if not options.prioritized:  # (a stop is checked before each collection: every update of a batch is taken)
                yield self.buffer.sample().reshape(options.utd_ratio, options.batch_size)
                continue
            for _ in range(options.utd_ratio):
                # on the device the trainer moves batches to: a TensorDict without one (a buffer restored from a
                # checkpoint samples those) would reach training_step as a copy, and its td_error never back here
                sample = self.buffer.sample().unsqueeze(0).to(self.device)
                yield sample  # the generator resumes after the training step on it (no fetch-ahead)
                update_priorities(self.buffer, sample[0])

    def state_dict(self) -> dict:
        """The base state (env stream) plus the replay buffer's contents and the steps its n-step transform holds
        back."""
        state = super().state_dict()
        if self.buffer is not None:
            state["replay_buffer"] = self.buffer.state_dict()
            state["replay_pending"] = pending_steps(self.buffer)
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        if "replay_buffer" in state_dict:
            rows, specs = self.num_envs * (self.num_agents or 1), self.env_specs() if self.env is not None else None
            check_replay_state(state_dict["replay_buffer"], self.buffer, rows, specs)
            self.buffer.load_state_dict(state_dict["replay_buffer"])
            load_pending_steps(self.buffer, state_dict.get("replay_pending", {}), rows, specs)
