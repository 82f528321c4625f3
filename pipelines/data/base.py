"""The base of the data modules: env, collector, calls on the training envs, resume state and the stream
of collected batches (see :mod:`pipelines.data`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import lightning as L
import torch
from jsonargparse.typing import PositiveFloat, PositiveInt
from tensordict import TensorDict
from torchrl.envs import EnvBase

from envs import EnvConfig, EnvSpecs, make_env, unwrap
from pipelines.checkpoints import attach_env_models
from pipelines.data.collectors import WorkerCollector, local_collector
from pipelines.data.env_control import EnvControl, TrainingEnvCalls, resolve
from pipelines.data.ray_collector import RayOptions, RayWorkerCollector, check_ray_installed
from pipelines.data.stream import FrameStream


def check(ok: bool, message: str) -> None:
    """Raise ``ValueError(message)`` unless ``ok`` (checks of the ``data`` section's keys)."""
    if not ok:
        raise ValueError(message)


class RLDataModule(TrainingEnvCalls, FrameStream, L.LightningDataModule):
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
                 total_frames: PositiveInt = 1_000_000, seed: int | None = None, device: str | None = None,
                 workers: int = 0,
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
              f"data.workers={workers} is not allowed: 0 (envs in this process) or a divisor of "
              f"data.num_envs={num_envs}")
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
            weights = self.embedding_model().state_dict()
            state["embedding_model"] = {k: v.detach().cpu().clone() for k, v in weights.items()}
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


