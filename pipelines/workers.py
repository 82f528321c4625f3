"""Rollout worker processes: the ``num_envs`` training envs stepped in ``workers`` processes by TorchRL's
``MultiSyncCollector``, the policy acting on CPU in each worker, the learner in this process.

The learner's calls on the training envs (curriculum settings, self-play opponents, embedding weights)
reach the workers' envs through :mod:`pipelines.mailbox` before the next batch.

A dead worker must stop the run with an error, never a hang. TorchRL 0.14 checks its workers while it
waits for their batches, but its synchronous shared-memory weight push waits for every worker's
acknowledgement with no time limit; :class:`_WatchedWeightSync` waits in one-second slices and checks
the worker processes between them.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from functools import partial

from tensordict import TensorDictBase
from torch import nn
from torchrl.collectors import MultiSyncCollector
from torchrl.weight_update import SharedMemWeightSyncScheme

from envs import EnvConfig, make_env
from pipelines.mailbox import Call, EnvCalls, Mailbox, MailboxReader, apply_calls


class _WatchedWeightSync(SharedMemWeightSyncScheme):
    """TorchRL's shared-memory weight push (the workers apply the new weights before their next
    rollout), whose wait for the workers' acknowledgements calls ``check`` every second."""

    check: Callable[[], None] | None = None  # set on the learner's copy once the workers run

    def _wait_for_ack(self, worker_ids=None, timeout=None) -> None:
        ids = list(self._ack_queues) if worker_ids is None else [worker_ids] if isinstance(worker_ids, int) else worker_ids
        for worker in ids:
            while True:
                try:
                    self._ack_queues[worker].get(timeout=1.0)
                    break
                except queue.Empty:
                    if self.check is not None:
                        self.check()


def make_worker_env(env_config: EnvConfig, num_envs: int, seed: int, mailbox: Mailbox, calls: list[Call]):
    """A worker's env: ``make_env``'s env that makes ``calls`` at once and then the calls posted to
    ``mailbox`` before each reset and step."""
    env = make_env(env_config, num_envs, seed, "cpu")
    apply_calls(env, calls)
    return env.append_transform(MailboxReader(mailbox))


class WorkerCollector:
    """``workers`` processes of ``num_envs / workers`` envs each, collecting ``frames_per_batch`` frames
    per batch with the latest policy weights.

    Row ``b`` of worker ``w`` is seeded ``first_seed + w * num_envs / workers + b``, like the same row of
    one in-process env of ``num_envs`` rows, so the workers' trajectories differ and a run is reproducible.

    Args:
        env_config: the env of every worker.
        num_envs: envs over all workers (a multiple of ``workers``).
        workers: worker processes (>= 1).
        first_seed: seed of row 0 of worker 0.
        policy: the collecting policy (its weights are copied to shared memory and pushed before each batch).
        frames_per_batch: frames per collected batch over all workers.
        calls: the learner's calls on the workers' envs (made so far, and from now on before each batch).
        **options: further ``MultiSyncCollector`` arguments (e.g. ``init_random_frames``).

    Yields:
        ``[num_envs, frames_per_batch / num_envs]`` batches (worker 0's rows first).

    Raises:
        RuntimeError: a worker process died (names the worker, its pid and exit code).
    """

    def __init__(self, env_config: EnvConfig, num_envs: int, workers: int, first_seed: int, policy: nn.Module,
                 frames_per_batch: int, calls: EnvCalls | None = None, **options) -> None:
        per = num_envs // workers
        self._calls = EnvCalls(workers, per) if calls is None else calls
        self._mailboxes = [Mailbox() for _ in range(workers)]
        make = [partial(make_worker_env, env_config, per, first_seed + w * per, self._mailboxes[w], self._calls.take(w))
                for w in range(workers)]
        self._sync = _WatchedWeightSync()
        self._collector = MultiSyncCollector(make, policy, frames_per_batch=frames_per_batch, total_frames=-1,
                                             device="cpu", weight_sync_schemes={"policy": self._sync}, **options)
        self._sync.check = self.check_workers

    @property
    def procs(self) -> list:
        """The worker processes."""
        return self._collector.procs

    def check_workers(self) -> None:
        """Raise if a worker process has died.

        Raises:
            RuntimeError: names the worker, its pid and exit code.
        """
        for i, proc in enumerate(self._collector.procs):
            if not proc.is_alive():
                raise RuntimeError(f"rollout worker {i} (pid {proc.pid}) process failed with exit code "
                                   f"{proc.exitcode}: the run stops (its checkpoints are kept)")

    def __iter__(self):
        iterator = iter(self._collector)
        while True:
            self.check_workers()
            self._collector.update_policy_weights_()  # the workers act with the latest weights
            for w, mailbox in enumerate(self._mailboxes):  # and their envs make the learner's calls first
                calls = self._calls.take(w)
                if calls:
                    mailbox.post(calls)
            batch: TensorDictBase = next(iterator)
            yield batch.reshape(-1, batch.shape[-1])  # [workers, envs per worker, T] -> [B, T]

    def shutdown(self) -> None:
        """Stop the workers (a dead one included)."""
        self._collector.shutdown()
        for mailbox in self._mailboxes:
            mailbox.close()
