"""The options of the data path, one object per RL concern, each a dataclass that checks its own values when it is
built (so a config stops before any work, naming the key): how the collector steps the envs
(:class:`CollectorOptions`, ``data.collector``), the replay buffer and its sampling (:class:`ReplayOptions`,
``data.replay_buffer``) and where Ray actors run (:class:`RayOptions`, ``data.collector.ray``).

They are frozen: one built object is shared by a data module and its config, and no code changes it afterwards.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Literal

INSTALL_RAY = "pip install -e .[ray]"


def require(ok: bool, message: str) -> None:
    """Raise ``ValueError(message)`` unless ``ok`` (the checks of the ``data`` section's keys: the options' and the
    data modules'; the message names the key)."""
    if not ok:
        raise ValueError(message)


@dataclass(frozen=True)
class RayOptions:
    """Where the Ray actors of ``data.collector.mode: ray`` run (``data.collector.ray``).

    Args:
        address: the cluster to join: ``auto`` (the one this machine is part of, started with ``ray start``), a
            head node's ``host:port`` or ``ray://host:10001``; null starts a local Ray instance for the run.
        num_cpus: CPUs each actor reserves on its node (Ray's ``num_cpus``; may be fractional).
        max_restarts: how often Ray may restart an actor that died (each restart logged); past it the run stops.

    Raises:
        ValueError: ``num_cpus`` <= 0 or ``max_restarts`` < 0 (the message names the key).
    """

    address: str | None = None
    num_cpus: float = 1.0
    max_restarts: int = 0

    def __post_init__(self) -> None:
        require(self.num_cpus > 0, f"data.collector.ray.num_cpus={self.num_cpus} is not allowed: > 0 (CPUs per actor)")
        require(self.max_restarts >= 0, f"data.collector.ray.max_restarts={self.max_restarts} is not allowed: >= 0")


@dataclass(frozen=True)
class CollectorOptions:
    """How the training envs are stepped and batches collected (``data.collector``; TorchRL's collector options).

    Args:
        num_envs: envs stepped as one batch on each rank (B).
        frames_per_batch: frames per collected batch on each rank (a multiple of ``num_envs``: T =
            ``frames_per_batch / num_envs`` steps per env).
        workers: 0 steps the ``num_envs`` envs as one batch in this process; N >= 1 runs them in N worker
            processes of ``num_envs / N`` envs each (TorchRL ``MultiSyncCollector``, inference on CPU in the
            workers, weights shared before every collection). Row b of worker w is seeded like row
            ``w * num_envs / N + b`` of the in-process env, so both collect the same episodes from the same
            policy. With workers, a resumed run restarts the envs' episode streams from their seeds.
        mode: with workers, ``sync`` (every batch is all workers' rows, collected with the latest weights:
            strictly on-policy), ``async`` (TorchRL ``MultiAsyncCollector``: workers collect on while the learner
            trains; each batch is one worker's ``frames_per_batch`` frames, and ``time/policy_lag`` logs how many
            training steps older than the learner's its frames' weights were, on average) or ``ray`` (the workers
            are Ray actors anywhere on a cluster, collecting in synchronous rounds with the latest weights:
            :mod:`pipelines.data.ray_collector`; needs the ray extra).
        worker_timeout_s: with workers, the longest a batch (or a call on the workers' envs) may take, in seconds:
            a worker that is stopped or stuck longer stops the run with an error naming it (raise it for envs whose
            batches take longer).
        ray: with ``mode: ray``, the cluster address, CPUs per actor and restarts (:class:`RayOptions`; null: a
            local Ray instance, 1 CPU per actor, no restarts).
        compile_policy: run the collector's policy through ``torch.compile`` (TorchRL's ``Collector`` option of
            that name; in-process envs only, ``workers: 0``). The update's own option is ``model.compile``.
        cudagraph_policy: replay the collector's policy as a CUDA graph (TorchRL's ``Collector`` option of that
            name: tensordict's ``CudaGraphModule``; in-process envs on a CUDA device only, checked at set-up).

    Raises:
        ValueError: a non-positive size, ``frames_per_batch`` not a multiple of ``num_envs``, ``workers`` not
            dividing ``num_envs``, ``mode: async`` or ``ray`` without workers, ``mode: ray`` without Ray installed
            (the message gives the install command), ``ray`` options with another mode, or ``compile_policy`` /
            ``cudagraph_policy`` with workers (each message names the key).
    """

    num_envs: int = 8
    frames_per_batch: int = 256
    workers: int = 0
    mode: Literal["sync", "async", "ray"] = "sync"
    worker_timeout_s: float = 300.0
    ray: RayOptions | None = None
    compile_policy: bool = False
    cudagraph_policy: bool = False

    def __post_init__(self) -> None:
        key = "data.collector"
        require(self.num_envs >= 1, f"{key}.num_envs must be >= 1, got {self.num_envs}")
        require(self.frames_per_batch >= 1, f"{key}.frames_per_batch must be >= 1, got {self.frames_per_batch}")
        require(self.frames_per_batch % self.num_envs == 0,
                f"{key}.frames_per_batch={self.frames_per_batch} must be a multiple of {key}.num_envs="
                f"{self.num_envs} (T = frames_per_batch / num_envs)")
        require(self.workers >= 0 and (self.workers == 0 or self.num_envs % self.workers == 0),
                f"{key}.workers={self.workers} is not allowed: 0 (envs in this process) or a divisor of "
                f"{key}.num_envs={self.num_envs}")
        require(self.mode in ("sync", "async", "ray"), f"{key}.mode={self.mode!r} is not allowed: one of sync, "
                                                       "async, ray")
        require(self.mode == "sync" or self.workers >= 1,
                f"{key}.mode={self.mode} needs rollout workers ({key}.workers >= 1): in-process envs collect in turn "
                "with training")
        require(self.ray is None or self.mode == "ray",
                f"{key}.ray is set but {key}.mode is not ray (set {key}.mode: ray, or remove {key}.ray)")
        require(self.mode != "ray" or importlib.util.find_spec("ray") is not None,
                f"{key}.mode=ray needs Ray, which is not installed: {INSTALL_RAY} (the ray extra)")
        require(self.worker_timeout_s > 0, f"{key}.worker_timeout_s must be > 0, got {self.worker_timeout_s}")
        for name in ("compile_policy", "cudagraph_policy"):
            require(not getattr(self, name) or self.workers == 0,
                    f"{key}.{name}=true needs in-process envs ({key}.workers: 0, got {self.workers}): it applies to "
                    "the in-process collector's policy")

    @property
    def policy_options(self) -> dict[str, bool]:
        """TorchRL ``Collector`` keyword arguments for the in-process policy (``compile_policy`` /
        ``cudagraph_policy``, those set)."""
        return {name: True for name in ("compile_policy", "cudagraph_policy") if getattr(self, name)}

    @property
    def ray_options(self) -> RayOptions | None:
        """With ``mode: ray``, the Ray options (defaults where ``ray`` is null); else None."""
        return (self.ray or RayOptions()) if self.mode == "ray" else None


@dataclass(frozen=True)
class ReplayOptions:
    """The replay buffer of an off-policy run and how it is sampled (``data.replay_buffer``).

    Args:
        buffer_size: capacity in transitions (per rank; one agent's transition counts one).
        batch_size: transitions per sampled batch.
        utd_ratio: sampled batches (optimizer updates) per collected batch.
        init_random_frames: random-action warm-up, in frames over all ranks: these frames fill the buffer and
            train nothing.
        storage: ``tensor`` (TorchRL ``LazyTensorStorage``, in memory) or ``memmap`` (``LazyMemmapStorage``, on
            disk under ``scratch_dir``/rank<k>, for large buffers).
        scratch_dir: folder of the memmap storage; when null, ``replay/`` in the run's folder, removed when the run
            finishes and kept (and named in the log) after a fault.
        prioritized: proportional prioritised replay (:class:`pipelines.data.replay.PrioritizedSampler`): after
            each training step the sampled items get the priority the module wrote under ``td_error``
            (the |TD error|); the loss weights items by ``priority_weight``.
        priority_alpha: the priority exponent (Schaul et al. 2016, "Prioritized Experience Replay", eq. 1; 0 is
            uniform sampling).
        priority_beta: the importance-weight exponent (Schaul et al. 2016, section 3.4; 1 corrects the bias fully).

    Raises:
        ValueError: a non-positive size, a negative warm-up, an unknown storage, ``priority_alpha`` < 0 or
            ``priority_beta`` outside [0, 1] (each message names the key).
    """

    buffer_size: int = 100_000
    batch_size: int = 128
    utd_ratio: int = 1
    init_random_frames: int = 1000
    storage: Literal["tensor", "memmap"] = "tensor"
    scratch_dir: str | None = None
    prioritized: bool = False
    priority_alpha: float = 0.6
    priority_beta: float = 0.4

    def __post_init__(self) -> None:
        key = "data.replay_buffer"
        for name in ("buffer_size", "batch_size", "utd_ratio"):
            require(getattr(self, name) >= 1, f"{key}.{name} must be >= 1, got {getattr(self, name)}")
        require(self.batch_size <= self.buffer_size, f"{key}.batch_size={self.batch_size} is larger than "
                f"{key}.buffer_size={self.buffer_size}: a batch is sampled from the buffer's transitions")
        require(self.init_random_frames >= 0, f"{key}.init_random_frames must be >= 0, got {self.init_random_frames}")
        require(self.storage in ("tensor", "memmap"),
                f"{key}.storage={self.storage!r} is not allowed: one of tensor, memmap")
        require(self.priority_alpha >= 0, f"{key}.priority_alpha={self.priority_alpha} is not allowed: >= 0")
        require(0 <= self.priority_beta <= 1, f"{key}.priority_beta={self.priority_beta} is not allowed: in [0, 1]")
