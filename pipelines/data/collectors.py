"""The collectors of the data path: the training envs stepped in this process (TorchRL ``Collector``) or in
rollout worker processes (TorchRL ``MultiSyncCollector``: ``[B, T]`` batches of the latest policy; or
``MultiAsyncCollector``: each worker's batch as soon as it is ready, its frames tagged with the policy version that
played them, :class:`VersionedPolicy`, from a copy of the learner's weights that changes only between batches,
:class:`PublishingAsyncCollector`).

Worker processes use TorchRL's mechanisms only: the policy's weights reach them through the collector's
shared-memory weight-sync scheme before every batch (``update_at_each_batch``), and named calls on their
envs through the collector's ``map_fn`` (:mod:`pipelines.env_control`). A fault ends the run, never hangs
it: TorchRL checks the worker processes while it waits for them, and a watchdog kills the workers when a
batch or a call takes longer than ``timeout_s`` (a stopped or stuck worker), so that check fires.

Worker processes start from a fork server (:func:`start_workers_from_forkserver`) that imported torch, tensordict
and TorchRL once: their pages are shared by every worker instead of loaded by each (with 8 game workers, about 175 MB
per worker (PSS) instead of 373 MB with ``spawn``, and no import of torch per worker at start-up).
"""

from __future__ import annotations

import contextlib
import copy
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn
from torchrl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector
from torchrl.envs import EnvBase, Transform, TransformedEnv
from torchrl.weight_update import SharedMemWeightSyncScheme

from envs import EnvConfig, make_env
from envs.policy_state import recurrent_env, recurrent_transforms
from pipelines.data.env_control import Call, apply_calls

SHUTDOWN_TIMEOUT_S = 5.0  # TorchRL asks workers to close, then terminates, then kills them within this time
# the fork server's one import (in a fresh interpreter with this process's sys.path: nothing of this process's state)
WORKER_PRELOAD = "pipelines.data.worker_server"


def start_workers_from_forkserver() -> None:
    """Make TorchRL's multi-process collectors start their workers from Python's fork server (``forkserver``,
    which TorchRL supports and reads from the global start method; ``import torchrl`` sets ``spawn``). The server is
    a fresh interpreter (not a fork of this process, so no threads or CUDA state are inherited) that imports
    what every worker needs once (:mod:`pipelines.data.worker_server`); each worker is a fork of it, sharing those
    pages copy-on-write. The workers get the environment variables of when the server started (the first worker run
    of this process)."""
    if multiprocessing.get_start_method(allow_none=True) != "forkserver":
        multiprocessing.set_start_method("forkserver", force=True)
        multiprocessing.set_forkserver_preload([WORKER_PRELOAD])


def local_collector(env: EnvBase, policy: nn.Module, frames_per_batch: int, **options) -> Collector:
    """TorchRL's ``Collector`` over the in-process training env (with a recurrent policy's ``is_init`` and states:
    :func:`envs.policy_state.recurrent_env`), on the env's device (``options``: e.g. ``init_random_frames``).
    Trajectory ids are not tracked (nothing reads them: 7% of a collected step)."""
    return Collector(recurrent_env(env, policy), policy, frames_per_batch=frames_per_batch, total_frames=-1,
                     device=env.device, auto_register_policy_transforms=False, trust_policy=True,
                     track_traj_ids=False, **options)


def make_worker_env(env_config: EnvConfig, env_models: dict[str, nn.Module], num_envs: int, seed: int,
                    calls: list[Call], transforms: Transform | None = None) -> EnvBase:
    """A worker's env (``make_env``'s, rows seeded ``seed, seed + 1, ...``) after the learner's calls made before
    the workers started, with ``transforms`` appended (a recurrent policy's,
    :func:`envs.policy_state.recurrent_transforms`). Runs in the worker process, whose torch RNG (the policy's
    exploration, random warm-up actions) it seeds with ``seed`` too, so a run with workers is reproducible and each
    worker draws its own stream."""
    torch.manual_seed(seed)
    env = make_env(env_config, num_envs, seed, "cpu", env_models)
    apply_calls(env, calls)
    return env if transforms is None else TransformedEnv(env, transforms.clone())


@contextlib.contextmanager
def watchdog(timeout_s: float, on_stall: Callable[[str], None], what: str) -> Iterator[None]:
    """Run the block; if it takes longer than ``timeout_s`` seconds, call ``on_stall(what)`` from a timer thread
    (which must make the block's wait fail, e.g. by killing the workers it waits on)."""
    timer = threading.Timer(timeout_s, on_stall, (what,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _process_state(pid: int) -> str:
    """The process's state letter from ``/proc`` (``T``: stopped), or ``?`` where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


class VersionedPolicy(TensorDictModuleBase):
    """A collector's policy that tags every frame with the version of the weights that played it: ``policy_version``
    ``[*B]`` int64, a buffer shared with the workers like the weights. The learner counts its training steps in
    :attr:`version` (:meth:`bump` after each); a batch's lag in training steps is ``version - policy_version``.

    Args:
        policy: the collecting policy (its weights are this module's, under ``policy.``).
    """

    def __init__(self, policy: TensorDictModuleBase) -> None:
        super().__init__()
        self.policy = policy
        self.in_keys = list(policy.in_keys)
        self.out_keys = [*policy.out_keys, "policy_version"]
        self.register_buffer("version", torch.zeros((), dtype=torch.int64))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict = self.policy(tensordict)
        tensordict.set("policy_version", self.version.expand(tensordict.batch_size).clone())
        return tensordict

    def bump(self) -> None:
        """One more training step done: frames collected from the next weight update on carry the new version."""
        self.version += 1


class PublishingAsyncCollector(MultiAsyncCollector):
    """TorchRL's ``MultiAsyncCollector`` whose workers play a copy of the learner's policy (the ``policy`` it is given,
    whose weights TorchRL's shared-memory scheme shares with them) that its weight update refreshes from ``source``,
    the learner's policy: TorchRL calls that update (``update_at_each_batch``) right before it tells a worker to
    collect its next batch, and nowhere else. The learner's optimiser steps never touch the copy, so with one worker
    batch k is played from start to end by the weights of when the learner received batch k - 1, and a run repeats
    bit for bit. With several workers the copy changes whenever a worker's batch arrives, also under the others.

    Args:
        source: the learner's policy (same structure as ``policy``). (the rest as ``MultiAsyncCollector``)
    """

    def __init__(self, *args, source: nn.Module, **kwargs) -> None:
        self._source = source  # (before TorchRL's constructor, which may update the weights)
        super().__init__(*args, **kwargs)

    def update_policy_weights_(self, policy_or_weights=None, **kwargs) -> None:
        """TorchRL's update, of the learner's weights (``source``) when it is given none."""
        super().update_policy_weights_(self._source if policy_or_weights is None else policy_or_weights, **kwargs)


class WorkerCollector:
    """``workers`` processes of ``num_envs / workers`` envs each (TorchRL ``MultiSyncCollector``), collecting
    ``frames_per_batch`` frames per batch with the latest policy weights, the policy acting on CPU there.

    Row ``b`` of worker ``w`` is seeded ``first_seed + w * num_envs / workers + b``, like the same row of one
    in-process env of ``num_envs`` rows, so the workers' trajectories differ; each worker's torch RNG (its
    exploration draws) is seeded with its row 0's seed, so a run is reproducible.

    Args:
        env_config: the env of every worker.
        env_models: the run's learned env models (``EnvConfig.new_models``), copied to every worker (new weights
            reach them through the env calls).
        num_envs: envs over all workers (a multiple of ``workers``).
        workers: worker processes (>= 1).
        first_seed: seed of row 0 of worker 0.
        policy: the collecting policy; its weights are shared with the workers and refreshed before each batch.
        frames_per_batch: frames per collected batch over all workers.
        timeout_s: the longest a batch or a call on the workers may take before the run stops (seconds).
        startup_calls: per worker, the calls its env makes right after it is built (before its first reset).
        asynchronous: :class:`PublishingAsyncCollector`: each worker collects on while the learner trains, and every
            batch is one worker's ``frames_per_batch`` frames, played by a copy of the weights taken when that
            worker's last batch reached the learner (the policy is a :class:`VersionedPolicy`, whose :meth:`bump` the
            learner calls after each training step; with one worker batch k carries version k - 1); else
            ``MultiSyncCollector``: all workers collect a batch together with the latest weights.
        **options: further collector arguments (e.g. ``init_random_frames``).

    Yields:
        ``[num_envs, frames_per_batch / num_envs]`` batches (worker 0's rows first); asynchronous:
        ``[num_envs / workers, frames_per_batch * workers / num_envs]`` batches of one worker's rows.

    Raises:
        RuntimeError: a worker process died, or sent no batch (or no answer to a call) within ``timeout_s``;
            the message names the worker.
    """

    def __init__(self, env_config: EnvConfig, env_models: dict[str, nn.Module], num_envs: int, workers: int,
                 first_seed: int, policy: nn.Module, frames_per_batch: int, timeout_s: float,
                 startup_calls: list[list[Call]] | None = None,
                 asynchronous: bool = False, **options) -> None:
        per = num_envs // workers
        calls = startup_calls or [[] for _ in range(workers)]
        make = [partial(make_worker_env, env_config, env_models, per, first_seed + w * per, calls[w],
                        recurrent_transforms(policy)) for w in range(workers)]
        self.timeout_s = timeout_s
        self._stall: str | None = None
        # sync=False: the workers' policy parameters are the shared buffer itself (synchronous: the learner's own
        # parameters, which it updates in place while the workers wait for their next batch; asynchronous: a copy
        # refreshed between batches); no acknowledgement to wait for (a dead worker's missing acknowledgement would
        # block the learner forever)
        self.asynchronous = asynchronous
        if asynchronous:  # the workers play a copy (``played``), refreshed from the learner's policy between batches
            self.policy = VersionedPolicy(policy)
            kind, played = partial(PublishingAsyncCollector, source=self.policy), copy.deepcopy(self.policy)
        else:
            self.policy, kind, played = policy, MultiSyncCollector, policy
        start_workers_from_forkserver()
        # the learner's torch threads: TorchRL leaves it cores - workers (1 with 8 workers on 2 cores), right when
        # both run at once (async); a synchronous learner updates while the workers wait, and keeps its own
        threads = {} if asynchronous else {"num_threads": torch.get_num_threads()}
        self._collector = kind(make, played, frames_per_batch=frames_per_batch, total_frames=-1, device="cpu",
                               update_at_each_batch=True,
                               weight_sync_schemes={"policy": SharedMemWeightSyncScheme(sync=False)}, **threads,
                               **options)
        self.pids = [proc.pid for proc in self._collector.procs]

    @property
    def procs(self) -> list:
        """The worker processes."""
        return self._collector.procs

    # ------------------------------------------------------------------ faults
    def _stalled(self, what: str) -> None:
        """The watchdog fired: name the stopped workers (all if none looks stopped) and kill every worker,
        so that TorchRL's worker check raises in the learner."""
        stopped = [w for w, pid in enumerate(self.pids) if _process_state(pid) in ("T", "t")]
        named = ", ".join(f"{w} (pid {self.pids[w]}{', stopped' if w in stopped else ''})"
                          for w in (stopped or range(len(self.pids))))
        self._stall = (f"rollout workers {named} gave no {what} within data.collector.worker_timeout_s="
                       f"{self.timeout_s:g} s: the run stops (its checkpoints are kept)")
        for pid in self.pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    @contextlib.contextmanager
    def _watch(self, what: str) -> Iterator[None]:
        """Run a wait on the workers under the watchdog; a worker fault becomes one ``RuntimeError`` naming it:
        TorchRL's check of the worker processes, or a message sent to a worker that died after that check (a closed
        pipe)."""
        try:
            with watchdog(self.timeout_s, self._stalled, what):
                yield
        except (RuntimeError, BrokenPipeError, ConnectionResetError, EOFError) as err:
            if self._stall is not None:
                raise RuntimeError(self._stall) from err
            deadline = time.monotonic() + SHUTDOWN_TIMEOUT_S  # a worker whose pipe closed is dead, maybe not yet reaped
            while True:
                workers = enumerate(zip(self.pids, self.procs, strict=True))
                ended = [(w, pid, proc.exitcode) for w, (pid, proc) in workers
                         if not proc._closed and proc.exitcode is not None]
                if ended or isinstance(err, RuntimeError) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            # the failed ones (others may have ended cleanly meanwhile: TorchRL closes the rest on an error)
            ended = [e for e in ended if e[2] != 0] or ended
            dead = [f"{w} (pid {pid}, exit code {code})" for w, pid, code in ended]
            raise RuntimeError(f"rollout worker {', '.join(dead) or '?'} died: {err} The run stops (its "
                               f"checkpoints are kept)") from err

    # ------------------------------------------------------------------ use
    def map_fn(self, method: str, args: list[tuple], kwargs: list[dict]) -> list:
        """``method`` (a dotted path from each worker's collector, e.g. ``env.base_env.configure``) called in
        every worker with its own arguments, between batches (TorchRL ``map_fn``); returns the results."""
        with self._watch(f"answer to {method}"):
            return self._collector.map_fn(method, args, kwargs)

    def __iter__(self) -> Iterator[TensorDictBase]:
        iterator = iter(self._collector)
        while True:
            with self._watch("batch"):
                batch = next(iterator)
            yield batch.reshape(-1, batch.shape[-1])  # [workers, envs per worker, T] -> [B, T] (async: one worker's)

    def trained(self) -> None:
        """The learner finished a training step on the last batch (asynchronous: the policy's version goes up)."""
        if self.asynchronous:
            self.policy.bump()

    def shutdown(self) -> None:
        """Stop the workers (dead or stopped ones included) within :data:`SHUTDOWN_TIMEOUT_S`."""
        for pid, proc in zip(self.pids, self.procs, strict=True):
            if not proc._closed and _process_state(pid) in ("T", "t"):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)  # a stopped process takes no SIGTERM
        self._collector.shutdown(timeout=SHUTDOWN_TIMEOUT_S, raise_on_error=False)
