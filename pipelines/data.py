"""The data pipeline: env + TorchRL collector -> the batches Lightning feeds to ``training_step``.

This is the only place that knows how data moves. The data module builds the env on every rank in
``setup`` (row seeds ``seed + rank * num_envs + b``, so ranks never share an instance stream) and the
collector lazily when training starts (after a checkpoint has been restored), driven by the
module's ``collector_policy``. The stream is an ``IterableDataset`` that collects, hands each batch
to ``module.on_collected`` and yields what the algorithm trains on:

* on-policy (:class:`OnPolicyDataModule`): each collected ``[B, T]`` batch, processed by the module
  (e.g. GAE), split into ``ppo_epochs`` shuffled passes of ``mini_batch_size`` minibatches;
* off-policy (:class:`OffPolicyDataModule`): each collected ``[B, T]`` batch extends a replay buffer
  (``TensorDictReplayBuffer``, through the module's ``replay_transform()``, e.g. n-step returns), then
  ``utd_ratio`` sampled batches are yielded (none during the ``init_random_frames`` warm-up).

The stream ends when ``total_frames`` (summed over ranks) have been collected, and stops the trainer.

Callbacks that need the raw collected data implement the optional hook
``on_batch_collected(trainer, pl_module, batch)``: it receives every collected ``[B, T]`` batch, on
every rank, before the module processes it (``callbacks.EmbeddingUpdate`` fills its outcome store so).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import Literal

import lightning as L
import torch
from jsonargparse.typing import PositiveInt
from tensordict import TensorDict
from torch import nn
from torch.utils.data import DataLoader, IterableDataset
from torchrl.collectors import Collector
from torchrl.data import LazyMemmapStorage, LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import EnvBase

from envs import EnvConfig, make_env
from pipelines.mailbox import EnvCalls
from pipelines.replay import PrioritizedSampler
from pipelines.workers import WorkerCollector


_DONE_KEYS = ("done", "terminated", "truncated")
# collected entries no loss trains on: statistics (logged from the batch before it is stored) and the
# collecting policy's outputs (recomputed by the loss); the replay buffer leaves them out
_NOT_REPLAYED = ("report", "episode_reward", "collector", "action_value", "chosen_action_value")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


class RLDataModule(L.LightningDataModule):
    """Env, collector and the frame budget of a run (shared by the on- and off-policy pipelines).

    Args:
        env: the environment's config (e.g. ``envs.dvrp.DVRPConfig``).
        num_envs: envs stepped as one batch on each rank (B).
        frames_per_batch: frames per collected batch on each rank (a multiple of ``num_envs``).
        total_frames: the run's budget in frames, summed over ranks.
        seed: seed of env row 0 on rank 0.
        device: device the env and collector run on.
        workers: 0 steps the ``num_envs`` envs as one batch in this process; N >= 1 runs them in N worker
            processes of ``num_envs / N`` envs each (:class:`pipelines.workers.WorkerCollector`: TorchRL
            ``MultiSyncCollector``, inference on CPU in the workers, weights pushed before every collection).
            Row b of worker w is seeded like row ``w * num_envs / N + b`` of the in-process env, so both
            collect the same episodes from the same policy. A worker that dies stops the run with a
            ``RuntimeError``. With workers, a resumed run restarts the envs' episode streams from their seeds.
            Calls on the training envs (:meth:`configure_env`, :meth:`set_opponents`,
            :meth:`set_opponent_policy`, :meth:`update_embedding`) are checked on this process's copy of the
            env and reach the workers' envs before the next batch (:mod:`pipelines.mailbox`).

    Raises:
        ValueError: a non-positive size, or ``frames_per_batch`` not a multiple of ``num_envs``
            (the message names the keys).
    """

    def __init__(self, env: EnvConfig, num_envs: PositiveInt = 64, frames_per_batch: PositiveInt = 1920,
                 total_frames: PositiveInt = 1_000_000, seed: int = 0, device: str = "cpu", workers: int = 0) -> None:
        super().__init__()
        _require(workers >= 0 and (workers == 0 or num_envs % workers == 0),
                 f"data.workers={workers} is not allowed: 0 (envs in this process) or a divisor of data.num_envs={num_envs}")
        _require(num_envs >= 1, f"data.num_envs must be >= 1, got {num_envs}")
        _require(frames_per_batch >= 1, f"data.frames_per_batch must be >= 1, got {frames_per_batch}")
        _require(total_frames >= 1, f"data.total_frames must be >= 1, got {total_frames}")
        _require(frames_per_batch % num_envs == 0, f"data.frames_per_batch={frames_per_batch} must be a multiple "
                                                   f"of data.num_envs={num_envs} (T = frames_per_batch / num_envs)")
        self.env_config = env
        self.num_envs = int(num_envs)  # plain ints: jsonargparse types would reach the checkpoint
        self.frames_per_batch = int(frames_per_batch)
        self.total_frames = int(total_frames)
        self.seed = seed
        self.device = device
        self.workers = int(workers)
        self._env_calls = EnvCalls(self.workers, self.num_envs // self.workers) if self.workers else None
        self.env: EnvBase | None = None
        self._collector: Collector | WorkerCollector | None = None

    # ------------------------------------------------------------------ envs
    @property
    def rank(self) -> int:
        return self.trainer.global_rank if self.trainer is not None else 0

    def setup(self, stage: str) -> None:
        if self.env is None:
            self.env = make_env(self.env_config, self.num_envs, self.seed + self.rank * self.num_envs, self.device)

    def make_eval_env(self, num_envs: int, seed: int) -> EnvBase:
        """A separate env for evaluation (same config, its own seeds)."""
        return make_env(self.env_config, num_envs, seed, self.device)

    @property
    def num_agents(self) -> int | None:
        """R of a multi-agent env (``env.num_agents``), else None."""
        return self.env_config.num_agents

    def agent_action_spec(self):
        """The action spec of one agent in one env: ``action_spec_unbatched``, without its leading agent
        dim for a multi-agent env."""
        self.setup("fit")
        spec = self.env.action_spec_unbatched
        return spec[0] if self.num_agents is not None else spec

    def _base_env(self, method: str, env: EnvBase | None = None) -> EnvBase:
        """The base env of ``env`` (default: the training envs, this process's copy with workers), which
        must have ``method``.

        Raises:
            ValueError: it has no such method.
        """
        env = self.env if env is None else env
        base = getattr(env, "base_env", env)
        if not hasattr(base, method):
            raise ValueError(f"env {type(base).__name__} has no method {method}: the call needs an env that has it")
        return base

    def configure_env(self, settings: dict, env: EnvBase | None = None) -> None:
        """Apply runtime ``settings`` (e.g. a curriculum phase's mode, opponent and reward weights) to the
        training envs, or to ``env``, through the base env's ``configure(**settings)``.

        Raises:
            ValueError: the env has no ``configure`` method, or rejects a setting.
        """
        self._base_env("configure", env).configure(**settings)
        if env is None and self.workers:
            self._env_calls.call("configure", **settings)

    def set_opponents(self, kinds: list[str]) -> None:
        """Set who each training env row meets from its next episode on (the env's ``set_opponent``).

        Args:
            kinds: one opponent name per row over all workers (``num_envs``), e.g. ``weak`` or ``policy``.

        Raises:
            ValueError: the env has no opponents, or rejects a name.
        """
        self._base_env("set_opponent").set_opponent(kinds)
        if self.workers:
            self._env_calls.call_rows("set_opponent", kinds)

    def set_opponent_policy(self, policy: nn.Module | None) -> None:
        """Set the module that plays the training envs' ``policy`` opponents (the env's
        ``set_opponent_policy``), with its current weights; with workers, call it again after changing them.

        Raises:
            ValueError: the env has no opponents.
        """
        self._base_env("set_opponent_policy").set_opponent_policy(policy)
        if self.workers:
            self._env_calls.call("set_opponent_policy", policy)

    def example_observation(self) -> TensorDict:
        """A zero observation ``[num_envs]`` of the env (every action allowed), to shape lazy layers."""
        self.setup("fit")
        td = self.env.observation_spec.zero()
        for key in td.keys(True, True):
            name = key[-1] if isinstance(key, tuple) else key
            if name == "action_mask":
                td[key] = torch.ones_like(td[key])
        return td

    def embedding_model(self) -> nn.Module | None:
        """The learned model the env's observations depend on (``env.embedding_model``), or None."""
        return self.env_config.embedding_model

    def update_embedding(self, state_dict: dict) -> None:
        """Load new weights into the embedding model: every env of this config (training and
        evaluation) uses them from its next episode on.

        Raises:
            ValueError: the env has no embedding model.
        """
        model = self.embedding_model()
        if model is None:
            raise ValueError("the env has no embedding model (e.g. set data.init_args.env.init_args.flexibility)")
        model.load_state_dict(state_dict)
        if self.workers:
            self._env_calls.call("config.embedding_model.load_state_dict", state_dict)

    def collector(self) -> Collector | WorkerCollector:
        """The collector (built on first use, so a restored checkpoint's env state is in place)."""
        if self._collector is None:
            policy = self.trainer.lightning_module.collector_policy
            if self.workers:
                self._collector = WorkerCollector(self.env_config, self.num_envs, self.workers,
                                                  self.seed + self.rank * self.num_envs, policy,
                                                  self.frames_per_batch, calls=self._env_calls,
                                                  **self._collector_options())
            else:
                self._collector = Collector(self.env, policy, frames_per_batch=self.frames_per_batch, total_frames=-1,
                                            device=self.device, auto_register_policy_transforms=False,
                                            trust_policy=True, **self._collector_options())
        return self._collector

    def _collector_options(self) -> dict:
        """Extra ``Collector`` arguments of a pipeline."""
        return {}

    def teardown(self, stage: str) -> None:
        if self._collector is not None:
            self._collector.shutdown()
            self._collector = None

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict:
        """The env's instance stream position (each row restarts the episode in progress on resume) and
        the embedding model's weights."""
        state = {}
        base = getattr(self.env, "base_env", self.env)
        if hasattr(base, "rng_state") and not self.workers:  # with workers the stepped envs live there
            state["env_rng"] = base.rng_state()
        if self.embedding_model() is not None:
            state["embedding_model"] = {k: v.detach().cpu().clone() for k, v in self.embedding_model().state_dict().items()}
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        if "embedding_model" in state_dict:
            self.update_embedding(state_dict["embedding_model"])
        base = getattr(self.env, "base_env", self.env)
        if "env_rng" in state_dict and hasattr(base, "load_rng_state"):
            rng = dict(state_dict["env_rng"])
            rng["row_seed"] = base.rng_state()["row_seed"]  # this rank's own rows
            if self.rank != 0:  # rank 0's instances: this rank's restarted episodes recompute theirs
                rng.pop("predictions", None)
                rng.pop("acceptance", None)
            base.load_rng_state(rng)

    # ------------------------------------------------------------------ stream
    def batches(self) -> Iterator:
        """Collected batches until the budget is met; then the trainer is told to stop."""
        module = self.trainer.lightning_module
        iterator = iter(self.collector())
        while module.collected_frames < self.total_frames:
            batch = next(iterator)
            for callback in self.trainer.callbacks:
                hook = getattr(callback, "on_batch_collected", None)
                if hook is not None:
                    hook(self.trainer, module, batch)
            yield module.on_collected(batch)
        self.trainer.should_stop = True

    def training_batches(self) -> Iterator[TensorDict]:
        """What ``training_step`` receives, in order (defined by the on- / off-policy pipelines)."""
        raise NotImplementedError

    @property
    def steps_per_batch(self) -> int:
        """Training steps per collected batch (defined by the on- / off-policy pipelines)."""
        raise NotImplementedError

    @property
    def num_batches(self) -> int:
        """Collected batches per rank in the whole run (``total_frames`` rounded up to whole batches)."""
        world = self.trainer.world_size if self.trainer is not None else 1
        return -(-self.total_frames // (self.frames_per_batch * world))

    @property
    def planned_frames(self) -> int:
        """Frames the run collects over all ranks: ``total_frames`` rounded up to whole batches."""
        world = self.trainer.world_size if self.trainer is not None else 1
        return self.num_batches * self.frames_per_batch * world

    def num_training_steps(self) -> int:
        """Training steps of the whole run: :attr:`num_batches` times :attr:`steps_per_batch`."""
        return self.num_batches * self.steps_per_batch

    def train_dataloader(self) -> DataLoader:
        # identity collate keeps TensorDicts intact; no workers: the collector lives with the live policy.
        # Its own generator: a DataLoader iterator otherwise draws a seed from the global RNG, which
        # would shift the (checkpointed) policy-sampling stream of a resumed run.
        return DataLoader(_Stream(self), batch_size=None, collate_fn=lambda x: x, num_workers=0,
                          generator=torch.Generator())


class _Stream(IterableDataset):
    """The training stream. It has a length (the run's training steps), so Lightning does not fetch
    ahead: nothing is collected before the previous step (and its checkpoint) is done, which keeps
    a resumed run on the same data and RNG stream as an uninterrupted one."""

    def __init__(self, data: RLDataModule) -> None:
        self.data = data

    def __iter__(self) -> Iterator:
        return self.data.training_batches()

    def __len__(self) -> int:
        return self.data.num_training_steps()


class OnPolicyDataModule(RLDataModule):
    """On-policy pipeline: each collected batch (processed by ``module.on_collected``, e.g. GAE) is
    split into ``ppo_epochs`` passes of shuffled minibatches of ``mini_batch_size`` frames.

    Args:
        ppo_epochs: passes over each collected batch.
        mini_batch_size: frames per minibatch (``frames_per_batch`` must be a multiple of it).
        (the rest as :class:`RLDataModule`)
    """

    def __init__(self, env: EnvConfig, num_envs: PositiveInt = 64, frames_per_batch: PositiveInt = 1920,
                 total_frames: PositiveInt = 1_000_000, ppo_epochs: PositiveInt = 4,
                 mini_batch_size: PositiveInt = 480, seed: int = 0, device: str = "cpu", workers: int = 0) -> None:
        super().__init__(env, num_envs, frames_per_batch, total_frames, seed, device, workers)
        _require(ppo_epochs >= 1, f"data.ppo_epochs must be >= 1, got {ppo_epochs}")
        _require(mini_batch_size >= 1 and frames_per_batch % mini_batch_size == 0,
                 f"data.frames_per_batch={frames_per_batch} must be a multiple of data.mini_batch_size={mini_batch_size}")
        self.ppo_epochs = ppo_epochs
        self.mini_batch_size = mini_batch_size

    @property
    def steps_per_batch(self) -> int:
        """Optimiser steps per collected batch (``ppo_epochs * frames_per_batch / mini_batch_size``)."""
        return self.ppo_epochs * (self.frames_per_batch // self.mini_batch_size)

    def training_batches(self) -> Iterator[TensorDict]:
        for batch in self.batches():
            for _ in range(self.ppo_epochs):
                for index in torch.randperm(batch.numel()).split(self.mini_batch_size):
                    yield batch[index]


class OffPolicyDataModule(RLDataModule):
    """Off-policy pipeline: collect ``frames_per_batch`` -> ``buffer.extend`` -> ``utd_ratio`` sampled
    batches of ``batch_size`` transitions per collected batch.

    The first ``init_random_frames`` frames (all ranks) are collected with uniformly random (masked)
    actions and train nothing. The buffer stores time-contiguous ``[B, T]`` slices
    (``ndim=2`` storage), so the module's ``replay_transform()`` (e.g. TorchRL's ``MultiStepTransform``
    for n-step returns) sees whole trajectories per env row. The buffer is part of the checkpoint.
    "Train every k env steps" is ``frames_per_batch = k * num_envs`` with ``utd_ratio = 1``. Statistics
    and the collecting policy's outputs (``report``, ``episode_reward``, ``collector``, ``action_value``,
    ``chosen_action_value``) are not stored.

    Multi-agent envs (``env.num_agents = R``) share one buffer: a collected ``[B, T]`` batch is stored
    as ``B * R`` rows of one agent's transitions each (:func:`split_agents`), so n-step returns are
    computed per (env, agent) and a sampled transition is one agent's, with its ``agent_id``.

    Args:
        buffer_size: capacity in transitions (per rank; one agent's transition counts one).
        batch_size: transitions per sampled batch.
        utd_ratio: sampled batches (optimiser steps) per collected batch.
        init_random_frames: random-action warm-up, in frames over all ranks.
        storage: ``tensor`` (``LazyTensorStorage``, in memory) or ``memmap`` (``LazyMemmapStorage``, on disk
            under ``scratch_dir``/rank<k>, for large buffers).
        scratch_dir: folder of the memmap storage (a temporary folder when null).
        prioritized: proportional prioritised replay (:class:`pipelines.replay.PrioritizedSampler`): after
            each training step the sampled items get the priority the module wrote under ``td_error``
            (the |TD error|); the loss weights items by ``priority_weight``.
        priority_alpha, priority_beta: the priority and importance-weight exponents (Schaul et al. 2016).
        (the rest as :class:`RLDataModule`)

    Raises:
        ValueError: a non-positive size or an unknown storage (the message names the key).
    """

    def __init__(self, env: EnvConfig, num_envs: PositiveInt = 8, frames_per_batch: PositiveInt = 32,
                 total_frames: PositiveInt = 100_000, buffer_size: PositiveInt = 100_000, batch_size: PositiveInt = 128,
                 utd_ratio: PositiveInt = 1, init_random_frames: int = 1000,
                 storage: Literal["tensor", "memmap"] = "tensor", scratch_dir: str | None = None,
                 prioritized: bool = False, priority_alpha: float = 0.6, priority_beta: float = 0.4, seed: int = 0,
                 device: str = "cpu", workers: int = 0) -> None:
        super().__init__(env, num_envs, frames_per_batch, total_frames, seed, device, workers)
        _require(buffer_size >= num_envs, f"data.buffer_size={buffer_size} must be >= data.num_envs={num_envs}")
        _require(batch_size >= 1, f"data.batch_size must be >= 1, got {batch_size}")
        _require(utd_ratio >= 1, f"data.utd_ratio must be >= 1, got {utd_ratio}")
        _require(init_random_frames >= 0, f"data.init_random_frames must be >= 0, got {init_random_frames}")
        _require(storage in ("tensor", "memmap"), f"data.storage={storage!r} is not allowed: one of tensor, memmap")
        _require(priority_alpha >= 0 and 0 <= priority_beta <= 1, f"data.priority_alpha >= 0 and data.priority_beta "
                                                                  f"in [0, 1] required, got {priority_alpha}, {priority_beta}")
        self.buffer_size = int(buffer_size)  # plain ints: the buffer's state (checkpoint) keeps them
        self.batch_size = int(batch_size)
        self.utd_ratio = int(utd_ratio)
        self.init_random_frames = init_random_frames
        self.storage = storage
        self.scratch_dir = scratch_dir
        self.prioritized = prioritized
        self.priority_alpha, self.priority_beta = float(priority_alpha), float(priority_beta)
        self.buffer: TensorDictReplayBuffer | None = None

    def setup(self, stage: str) -> None:
        super().setup(stage)
        if self.buffer is None:
            rows = self.num_envs * (self.num_agents or 1)
            _require(self.buffer_size >= rows, f"data.buffer_size={self.buffer_size} must be >= data.num_envs * "
                                               f"env.num_agents = {rows} (one row per env and agent)")
            if self.storage == "memmap":
                folder = os.path.join(self.scratch_dir or tempfile.mkdtemp(prefix="replay_"), f"rank{self.rank}")
                store = LazyMemmapStorage(self.buffer_size, scratch_dir=folder, ndim=2)
            else:
                store = LazyTensorStorage(self.buffer_size, ndim=2)
            module = self.trainer.lightning_module if self.trainer is not None else None
            transform = module.replay_transform() if hasattr(module, "replay_transform") else None
            steps = self.frames_per_batch // self.num_envs
            n_step = getattr(transform, "n_steps", 0)
            # the n-step transform holds n steps back; TorchRL 0.14's 2-D storage fails on 1-step slices
            _require(steps - n_step >= 2, f"data.frames_per_batch / data.num_envs = {steps} steps per env must be "
                                          f">= model.n_step + 2 = {n_step + 2} (the buffer's n-step transform holds "
                                          f"n steps back and TorchRL's 2-D storage needs slices of >= 2 steps)")
            sampler = (PrioritizedSampler(self.buffer_size, rows=rows, alpha=self.priority_alpha, beta=self.priority_beta)
                       if self.prioritized else None)
            self.buffer = TensorDictReplayBuffer(storage=store, sampler=sampler, batch_size=self.batch_size,
                                                 transform=transform)

    def _collector_options(self) -> dict:
        world = self.trainer.world_size
        done = self.trainer.lightning_module.collected_frames
        return {"init_random_frames": max(self.init_random_frames - done, 0) // world}

    @property
    def steps_per_batch(self) -> int:
        return self.utd_ratio

    def num_training_steps(self) -> int:
        """Sampled batches of the whole run: collected batches after the warm-up times ``utd_ratio``."""
        world = self.trainer.world_size if self.trainer is not None else 1
        warmup = self.init_random_frames // (self.frames_per_batch * world)  # batches with frames <= warm-up
        return max(self.num_batches - warmup, 0) * self.utd_ratio

    def training_batches(self) -> Iterator[TensorDict]:
        module = self.trainer.lightning_module
        for batch in self.batches():
            batch = batch.exclude(*_NOT_REPLAYED, *(("next", k) for k in _NOT_REPLAYED))
            self.buffer.extend(batch if self.num_agents is None else split_agents(batch, self.num_agents))
            if module.collected_frames <= self.init_random_frames:
                continue
            for _ in range(self.utd_ratio):
                sample = self.buffer.sample()
                yield sample  # the generator resumes after the training step on it (no fetch-ahead)
                if self.prioritized:
                    _require("td_error" in sample.keys(), "data.prioritized=true needs a module that writes each "
                                                          "sampled item's |TD error| under td_error (e.g. DQNModule)")
                    self.buffer.update_priority(sample["index"], sample["td_error"])

    def state_dict(self) -> dict:
        """The base state (env stream) plus the replay buffer's contents."""
        state = super().state_dict()
        if self.buffer is not None:
            state["replay_buffer"] = self.buffer.state_dict()
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        if "replay_buffer" in state_dict:
            self.buffer.load_state_dict(state_dict["replay_buffer"])


def split_agents(batch: TensorDict, num_agents: int) -> TensorDict:
    """One row per (env, agent): a collected multi-agent batch ``[B, T]`` -> ``[B * R, T]``.

    The done flags (``done``, ``terminated``, ``truncated``) and the ``report`` and ``collector`` entries
    are the env's: they are repeated for every agent. Every other entry has the agent dim
    (``[B, T, R, ...]``: observation, action, reward, action values, ...) and is split along it. Row
    ``b * R + i`` is agent i of env b, so an n-step return over a row is agent i's own, cut at its env's
    episode ends.

    Raises:
        ValueError: ``batch`` is not ``[B, T]``, or a per-agent entry has no agent dim of size R.
    """
    if batch.ndim != 2:
        raise ValueError(f"split_agents expects a collected [B, T] batch, got batch_size={list(batch.shape)}")
    b, t = batch.shape
    out = TensorDict(batch_size=[b * num_agents, t], device=batch.device)
    for key in batch.keys(True, True):
        key = key if isinstance(key, tuple) else (key,)
        value = batch.get(key)
        inner = key[1:] if key[0] == "next" else key
        if inner[-1] in _DONE_KEYS or inner[0] in ("report", "collector"):  # [B, T, ...] -> [B, R, T, ...]
            value = value.unsqueeze(1).expand(b, num_agents, *value.shape[1:])
        elif value.ndim > 2 and value.shape[2] == num_agents:  # [B, T, R, ...] -> [B, R, T, ...]
            value = value.transpose(1, 2)
        else:
            raise ValueError(f"multi-agent batch entry {key} has shape {list(value.shape)}: expected the agent dim "
                             f"[B, T, R={num_agents}, ...] (only done flags, report and collector entries are shared)")
        out.set(key, value.reshape(b * num_agents, t, *value.shape[3:]))
    return out
