"""The base of the data modules: env, collector, calls on the training envs, resume state and the stream
of collected batches (see :mod:`pipelines.data`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import lightning as L
import torch
from jsonargparse.typing import PositiveFloat, PositiveInt
from tensordict import TensorDict
from torch import nn
from torch.utils.data import DataLoader, IterableDataset
from torchrl.envs import EnvBase

from envs import EnvConfig, EnvSpecs, make_env, unwrap
from pipelines.checkpoints import attach_env_models
from pipelines.data.collectors import WorkerCollector, local_collector
from pipelines.data.env_control import EnvControl, resolve
from pipelines.data.ray_collector import RayOptions, RayWorkerCollector, check_ray_installed


class StopRequested(Exception):
    """Training stops early at a step boundary because of a signal (SIGINT, SIGTERM); ``pipelines.fit`` turns
    it into a non-zero exit status."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(f"training stopped by {signal_name}")
        self.signal_name = signal_name


def check(ok: bool, message: str) -> None:
    """Raise ``ValueError(message)`` unless ``ok`` (checks of the ``data`` section's keys)."""
    if not ok:
        raise ValueError(message)


class RLDataModule(L.LightningDataModule):
    """Env, collector and the frame budget of a run (shared by the on- and off-policy pipelines).

    Args:
        env: the environment's config (e.g. ``envs.dvrp.DVRPConfig``); learned models it names in checkpoint
            files (``model_checkpoints``) are read here, before any work.
        num_envs: envs stepped as one batch on each rank (B).
        frames_per_batch: frames per collected batch on each rank (a multiple of ``num_envs``).
        total_frames: the run's budget in frames, summed over ranks.
        seed: seed of env row 0 on rank 0; null: the run's seed (``pipelines.fit`` sets it from ``seed_everything``;
            0 when built in Python).
        device: device the env and collector run on; null (the default) follows the trainer: its root device
            (``cuda:<k>`` on rank k of ``--trainer.accelerator=gpu``, else ``cpu``).
        workers: 0 steps the ``num_envs`` envs as one batch in this process; N >= 1 runs them in N worker
            processes of ``num_envs / N`` envs each (TorchRL ``MultiSyncCollector``, inference on CPU in the
            workers, weights shared before every collection). Row b of worker w is seeded like row
            ``w * num_envs / N + b`` of the in-process env, so both collect the same episodes from the same
            policy. With workers, a resumed run restarts the envs' episode streams from their seeds.
        worker_timeout_s: with workers, the longest a batch (or a call on the workers' envs) may take: a worker
            that is stopped or stuck longer stops the run with an error naming it (raise it for envs whose
            batches take longer).
        collector: with workers, ``sync`` (every batch is all workers' rows, collected with the latest weights:
            strictly on-policy), ``async`` (TorchRL ``MultiAsyncCollector``: workers collect on while the learner
            trains; each batch is one worker's ``frames_per_batch`` frames, and ``time/policy_lag`` logs how many
            training steps older than the learner's its frames' weights were, on average) or ``ray`` (the workers
            are Ray actors anywhere on a cluster, collecting in synchronous rounds with the latest weights:
            :mod:`pipelines.data.ray_collector`; needs the ray extra).
        ray: with ``collector: ray``, the cluster address, CPUs per actor and restarts
            (:class:`~pipelines.data.ray_collector.RayOptions`; null: a local Ray instance, 1 CPU per actor, no
            restarts).
        compile_policy: run the collector's policy through ``torch.compile`` (TorchRL's ``Collector`` option of
            that name; in-process envs only, ``workers: 0``). The update's own option is ``model.compile``.
        cudagraph_policy: replay the collector's policy as a CUDA graph (TorchRL's ``Collector`` option of that
            name: tensordict's ``CudaGraphModule``; in-process envs on a CUDA device only).

    Raises:
        ValueError: a non-positive size, ``frames_per_batch`` not a multiple of ``num_envs``, ``workers``
            not dividing ``num_envs``, ``collector: async`` or ``ray`` without workers, ``collector: ray`` without
            Ray installed (the message gives the install command), or ``ray`` options with another collector (the
            message names the keys); ``compile_policy`` or ``cudagraph_policy`` with workers, and at set-up
            ``cudagraph_policy`` on a device other than CUDA.
    """

    def __init__(self, env: EnvConfig, num_envs: PositiveInt = 64, frames_per_batch: PositiveInt = 1920,
                 total_frames: PositiveInt = 1_000_000, seed: int | None = None, device: str | None = None, workers: int = 0,
                 worker_timeout_s: PositiveFloat = 300.0, collector: Literal["sync", "async", "ray"] = "sync",
                 ray: RayOptions | None = None, compile_policy: bool = False, cudagraph_policy: bool = False) -> None:
        super().__init__()
        check(collector in ("sync", "async", "ray"),
              f"data.collector={collector!r} is not allowed: one of sync, async, ray")
        check(collector == "sync" or workers >= 1,
              f"data.collector={collector} needs rollout workers (data.workers >= 1): in-process envs collect in turn "
              "with training")
        check(ray is None or collector == "ray", "data.ray is set but data.collector is not ray (set data.collector: "
                                                 "ray, or remove data.ray)")
        if collector == "ray":
            check_ray_installed()
        check(workers >= 0 and (workers == 0 or num_envs % workers == 0),
              f"data.workers={workers} is not allowed: 0 (envs in this process) or a divisor of data.num_envs={num_envs}")
        check(num_envs >= 1, f"data.num_envs must be >= 1, got {num_envs}")
        check(frames_per_batch >= 1, f"data.frames_per_batch must be >= 1, got {frames_per_batch}")
        check(total_frames >= 1, f"data.total_frames must be >= 1, got {total_frames}")
        check(frames_per_batch % num_envs == 0, f"data.frames_per_batch={frames_per_batch} must be a multiple "
                                                f"of data.num_envs={num_envs} (T = frames_per_batch / num_envs)")
        check(worker_timeout_s > 0, f"data.worker_timeout_s must be > 0, got {worker_timeout_s}")
        for key, value in (("compile_policy", compile_policy), ("cudagraph_policy", cudagraph_policy)):
            check(not value or workers == 0, f"data.{key}=true needs in-process envs (data.workers: 0, got "
                                             f"{workers}): it applies to the in-process collector's policy")
        attach_env_models(env)
        self.env_config = env
        self.num_envs = int(num_envs)  # plain ints: jsonargparse types would reach the checkpoint
        self.frames_per_batch = int(frames_per_batch)
        self.total_frames = int(total_frames)
        self.seed = 0 if seed is None else int(seed)
        self.device = device
        self.workers = int(workers)
        self.worker_timeout_s = float(worker_timeout_s)
        self.asynchronous = collector == "async"
        self.ray = (ray or RayOptions()) if collector == "ray" else None
        self.policy_options = {key: True for key, value in (("compile_policy", compile_policy),
                                                             ("cudagraph_policy", cudagraph_policy)) if value}
        self.env: EnvBase | None = None
        self.control: EnvControl | None = None
        self.self_play: bool | None = None  # None: no callbacks.SelfPlay in the run (see set_self_play)
        self.stop_request: str | None = None  # the signal that asked training to stop (request_stop)
        self.expected_world_size = 1  # ranks, before the trainer is attached (check_budget)
        self._collector: Iterator | None = None

    # ------------------------------------------------------------------ envs
    @property
    def rank(self) -> int:
        return self.trainer.global_rank if self.trainer is not None else 0

    @property
    def first_seed(self) -> int:
        """Seed of this rank's env row 0."""
        return self.seed + self.rank * self.num_envs

    def resolve_device(self) -> None:
        """``device: null`` takes the trainer's root device (CPU outside a trainer)."""
        if self.device is None:
            self.device = str(self.trainer.strategy.root_device) if self.trainer is not None else "cpu"

    def check_device(self, device: str | torch.device) -> None:
        """Refuse options that the device the env will run on cannot take (``pipelines.fit`` calls this before
        anything is written; :meth:`setup` again).

        Raises:
            ValueError: ``cudagraph_policy`` on a device other than CUDA.
        """
        check("cudagraph_policy" not in self.policy_options or torch.device(device).type == "cuda",
              f"data.cudagraph_policy=true needs a CUDA device (--trainer.accelerator=gpu), got {device}")

    def setup(self, stage: str) -> None:
        self.resolve_device()
        self.check_device(self.device)
        if self.env is None:
            self.env = make_env(self.env_config, self.num_envs, self.first_seed, self.device)
            self.control = EnvControl(self.env, self.workers)

    @property
    def num_agents(self) -> int | None:
        """R of a multi-agent env (``env.num_agents``), else None."""
        return self.env_config.num_agents

    def env_specs(self) -> EnvSpecs:
        """The training env's specs, for the module's networks (after :meth:`setup`)."""
        return EnvSpecs.of(self.env, self.num_agents)

    def make_eval_env(self, num_envs: int, seed: int, settings: dict | None = None) -> EnvBase:
        """A separate env for evaluation (same config, its own seeds), with runtime ``settings`` applied
        through the env's ``configure`` (e.g. an opponent).

        Raises:
            ValueError: ``settings`` for an env without ``configure``, or settings it rejects.
        """
        env = make_env(self.env_config, num_envs, seed, self.device)
        if settings:
            resolve(env, "configure")(**settings)
        return env

    # ------------------------------------------------------------------ calls on the training envs
    def env_has(self, *methods: str) -> bool:
        """Whether the training env's base env has all ``methods`` (e.g. ``set_opponent``)."""
        return all(hasattr(unwrap(self.env), m) for m in methods)

    def set_self_play(self, on: bool) -> None:
        """Whether ``callbacks.SelfPlay`` draws the training envs' opponents after every batch (on) or the
        env's settings set them (off). SelfPlay sets its ``active`` at the start of a run, a curriculum phase
        its ``self_play``; the flag is in the checkpoint."""
        self.self_play = bool(on)

    def configure_env(self, settings: dict) -> None:
        """Apply runtime ``settings`` (e.g. a curriculum phase's mode, opponent and reward weights) to the
        training envs through the base env's ``configure(**settings)``.

        Raises:
            ValueError: the env has no ``configure`` method, or rejects a setting.
        """
        self.control.call("configure", **settings)

    def set_opponents(self, kinds: list[str]) -> None:
        """Set who each training env row meets from its next episode on (the env's ``set_opponent``).

        Args:
            kinds: one opponent name per row (``num_envs``), e.g. ``weak`` or ``policy``.

        Raises:
            ValueError: the env has no opponents, or rejects a name.
        """
        self.control.call_rows("set_opponent", kinds)

    def set_opponent_policy(self, policy: nn.Module | None) -> None:
        """Set the module that plays the training envs' ``policy`` opponents (the env's
        ``set_opponent_policy``), with its current weights; with workers, call it again after changing them.

        Raises:
            ValueError: the env has no opponents.
        """
        self.control.call("set_opponent_policy", policy)

    def embedding_model(self) -> nn.Module | None:
        """The learned model the env's observations depend on (``env.embedding_model``), or None."""
        return self.env_config.embedding_model

    def update_embedding(self, state_dict: dict) -> None:
        """Load new weights into the embedding model: every env of this config (training and evaluation,
        and the workers' envs) uses them from its next episode on.

        Raises:
            ValueError: the env has no embedding model.
        """
        if self.embedding_model() is None:
            raise ValueError("the env has no embedding model (e.g. set data.init_args.env.init_args.flexibility)")
        if self.control is None:  # before setup: the config's model (every env of the config shares it)
            self.embedding_model().load_state_dict(state_dict)
        else:  # the training env's config is the same object; workers hold copies
            self.control.call("config.embedding_model.load_state_dict", state_dict)

    # ------------------------------------------------------------------ collector
    def collector(self) -> Iterator[TensorDict]:
        """The collector (built on first use, so a restored checkpoint's env state is in place)."""
        if self._collector is None:
            policy = self.trainer.lightning_module.collector_policy
            if self.ray is not None:
                self._collector = RayWorkerCollector(self.env_config, self.num_envs, self.workers, self.first_seed,
                                                     policy, self.frames_per_batch, self.ray, self.worker_timeout_s,
                                                     self.control.startup_calls(), self.control.later_calls,
                                                     **self._collector_options())
                self.control.connect(self._collector, keep_calls=self.ray.max_restarts > 0)
            elif self.workers:
                self._collector = WorkerCollector(self.env_config, self.num_envs, self.workers, self.first_seed, policy,
                                                  self.frames_per_batch, self.worker_timeout_s,
                                                  self.control.startup_calls(), asynchronous=self.asynchronous,
                                                  **self._collector_options())
                self.control.connect(self._collector)
            else:
                self._collector = local_collector(self.env, policy, self.frames_per_batch,
                                                  **self.policy_options, **self._collector_options())
        return self._collector

    def _collector_options(self) -> dict:
        """Extra collector arguments of a pipeline."""
        return {}

    def shutdown_collector(self) -> None:
        """Stop the collector and its worker processes, if any."""
        if self._collector is not None:
            collector, self._collector = self._collector, None
            self.control.disconnect()
            collector.shutdown()

    def teardown(self, stage: str) -> None:
        self.shutdown_collector()

    def on_exception(self, exception: BaseException) -> None:
        """A fault or a signal in training: stop the workers at once (Lightning's teardown does not call
        :meth:`teardown` then, and a worker left waiting would keep the process alive)."""
        self.shutdown_collector()

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict:
        """The env's resume state (each row restarts the episode in progress on resume; in-process envs only)
        and the embedding model's weights."""
        state = {}
        base = unwrap(self.env)
        if hasattr(base, "resume_state") and not self.workers:  # with workers the stepped envs live there
            state["env_rng"] = base.resume_state()
        if self.embedding_model() is not None:
            state["embedding_model"] = {k: v.detach().cpu().clone() for k, v in self.embedding_model().state_dict().items()}
        if self.self_play is not None:
            state["self_play"] = self.self_play
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        if "self_play" in state_dict:
            self.self_play = bool(state_dict["self_play"])
        if "embedding_model" in state_dict:
            self.update_embedding(state_dict["embedding_model"])
        base = unwrap(self.env)
        if "env_rng" in state_dict and hasattr(base, "load_resume_state"):
            base.load_resume_state(state_dict["env_rng"], keep_row_seeds=True)  # rank 0's state, this rank's rows

    # ------------------------------------------------------------------ stream
    def request_stop(self, signal_name: str) -> None:
        """Stop training at the next step boundary (a signal handler's call: nothing is interrupted midway, so
        no library is left holding a lock or half a state)."""
        self.stop_request = signal_name

    def check_stop(self) -> None:
        """Called by the stream before every collection and every training step.

        Raises:
            StopRequested: :meth:`request_stop` was called, or the trainer received SIGTERM.
        """
        if self.stop_request is not None:
            raise StopRequested(self.stop_request)
        if self.trainer is not None and self.trainer.received_sigterm:
            raise StopRequested("SIGTERM")

    def batches(self) -> Iterator[TensorDict]:
        """Collected batches, processed by the module, until the budget is met; then the trainer is told to stop.

        Raises:
            StopRequested: a signal asked training to stop (see :meth:`check_stop`).
        """
        module = self.trainer.lightning_module
        iterator = iter(self.collector())
        module.restore_rng()  # (after the collector is built: a resumed run draws on from the checkpoint's state)
        collector = self.collector()
        while module.collected_frames < self.total_frames:
            self.check_stop()
            batch = next(iterator)
            for callback in self.trainer.callbacks:
                hook = getattr(callback, "on_batch_collected", None)
                if hook is not None:
                    hook(self.trainer, module, batch)
            version = batch.get("policy_version", None)
            batch = module.on_collected(batch)
            if version is not None:  # (recorded after on_collected, which writes the previous batch's metrics)
                module.record("time/policy_lag", (collector.policy.version - version).float().mean())
            yield batch
            if hasattr(collector, "trained"):  # (the training steps on that batch are done)
                collector.trained()
        self.trainer.should_stop = True

    def training_batches(self) -> Iterator[TensorDict]:
        """What ``training_step`` receives, in order (defined by the on- / off-policy pipelines)."""
        raise NotImplementedError

    @property
    def steps_per_batch(self) -> int:
        """Training steps per collected batch (defined by the on- / off-policy pipelines)."""
        raise NotImplementedError

    @property
    def world_size(self) -> int:
        """The ranks that collect (the trainer's world size; before the fit, :attr:`expected_world_size`)."""
        return self.trainer.world_size if self.trainer is not None else self.expected_world_size

    def check_budget(self, world_size: int) -> None:
        """Check, before any work, that ``total_frames`` gives at least one training step on ``world_size`` ranks.

        Raises:
            ValueError: no training step would run (names ``total_frames``, the batch and any warm-up).
        """
        self.expected_world_size = int(world_size)
        if self.num_training_steps() > 0:
            return
        warmup = getattr(self, "init_random_frames", 0)
        raise ValueError(f"data.init_args.total_frames={self.total_frames} gives no update: the run collects whole "
                         f"batches of data.init_args.frames_per_batch={self.frames_per_batch} frames per rank"
                         + (f" and updates after data.init_args.init_random_frames={warmup} frames" if warmup else "")
                         + f"; raise total_frames above {max(warmup, self.frames_per_batch * self.world_size)}")

    @property
    def num_batches(self) -> int:
        """Collected batches per rank in the whole run (``total_frames`` rounded up to whole batches)."""
        world = self.world_size
        return -(-self.total_frames // (self.frames_per_batch * world))

    @property
    def planned_frames(self) -> int:
        """Frames the run collects over all ranks: ``total_frames`` rounded up to whole batches."""
        world = self.world_size
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
