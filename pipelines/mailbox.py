"""Calls from the learner to the envs of the rollout worker processes: runtime settings (curriculum
phases), self-play opponents and their weights, embedding-model weights.

The learner queues calls (:class:`EnvCalls`); before each batch the worker collector posts each worker's
calls to its :class:`Mailbox` (a file-backed shared-memory block), and the worker env's
:class:`MailboxReader` transform applies them before its next reset or step. The workers wait between
batches (TorchRL's ``MultiSyncCollector`` sends them "continue"), so every call posted between two batches
applies from the first step of the next one, in the order it was made: a run with workers makes the same
calls at the same points as one with in-process envs.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import weakref
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.envs import Transform

Call = tuple[str, tuple, dict]  # (method path on the base env, args, kwargs)


class EnvCalls:
    """Calls on the base envs of ``workers`` worker processes of ``rows_per_worker`` rows each, queued
    until the worker collector delivers them (:meth:`take`).

    Args:
        workers: worker processes (>= 1).
        rows_per_worker: env rows per worker.
    """

    def __init__(self, workers: int, rows_per_worker: int) -> None:
        self.rows_per_worker = rows_per_worker
        self._pending: list[list[Call]] = [[] for _ in range(workers)]

    def call(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Queue ``base_env.<method>(*args, **kwargs)`` on every worker (``method`` may be a dotted path,
        e.g. ``config.embedding_model.load_state_dict``)."""
        for pending in self._pending:
            pending.append((method, args, kwargs))

    def call_rows(self, method: str, values: Sequence | torch.Tensor, **kwargs: Any) -> None:
        """Queue ``base_env.<method>(values[rows of worker w], **kwargs)`` on each worker ``w``.

        Raises:
            ValueError: ``values`` does not have one entry per env row of all workers.
        """
        per, total = self.rows_per_worker, self.rows_per_worker * len(self._pending)
        if len(values) != total:
            raise ValueError(f"{method}: got {len(values)} values for {total} env rows")
        for w, pending in enumerate(self._pending):
            pending.append((method, (values[w * per:(w + 1) * per],), kwargs))

    def take(self, worker: int) -> list[Call]:
        """The calls queued for ``worker`` since the last take (and forget them)."""
        calls, self._pending[worker] = self._pending[worker], []
        return calls


def apply_calls(env, calls: list[Call]) -> None:
    """Make ``calls`` on ``env``'s base env, in order."""
    base = getattr(env, "base_env", env)
    for method, args, kwargs in calls:
        target = base
        for name in method.split("."):
            target = getattr(target, name)
        target(*args, **kwargs)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class Mailbox:
    """One slot of pickled calls in a file-backed shared-memory block (``/dev/shm`` where it exists), which
    the learner writes (:meth:`post`) and one worker reads (:meth:`read`). Pickled into the worker, it maps
    the same file. The learner posts only while the worker waits for its next batch, and the worker reads
    each post before the batch is delivered, so one slot never loses a post.

    Args:
        capacity: the largest post in bytes (64 MiB: the file is sparse, only written pages use memory).
    """

    HEADER = 16  # int64 version (posts so far), int64 length of the last post

    def __init__(self, capacity: int = 64 << 20) -> None:
        fd, self.path = tempfile.mkstemp(prefix="rl-mailbox-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        os.ftruncate(fd, self.HEADER + capacity)
        os.close(fd)
        self.capacity = capacity
        self._map()
        self._finalizer = weakref.finalize(self, _unlink, self.path)  # the learner's copy owns the file

    def _map(self) -> None:
        self._bytes = torch.from_file(self.path, shared=True, size=self.HEADER + self.capacity, dtype=torch.uint8)
        self._header = self._bytes[:self.HEADER].view(torch.int64)

    def __getstate__(self) -> dict:
        return {"path": self.path, "capacity": self.capacity}

    def __setstate__(self, state: dict) -> None:
        self.path, self.capacity = state["path"], state["capacity"]
        self._map()

    def post(self, calls: list[Call]) -> None:
        """Write ``calls`` (replacing the last post, which the worker has read).

        Raises:
            ValueError: the pickled calls are larger than ``capacity``.
        """
        data = pickle.dumps(calls, protocol=pickle.HIGHEST_PROTOCOL)
        if len(data) > self.capacity:
            raise ValueError(f"env calls of {len(data)} bytes exceed the worker mailbox's {self.capacity} bytes")
        self._bytes[self.HEADER:self.HEADER + len(data)].copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        self._header[1] = len(data)
        self._header[0] += 1

    @property
    def version(self) -> int:
        """Posts so far."""
        return int(self._header[0])

    def read(self) -> list[Call]:
        """The calls of the last post."""
        length = int(self._header[1])
        return pickle.loads(self._bytes[self.HEADER:self.HEADER + length].numpy().tobytes())

    def close(self) -> None:
        """Delete the file (the learner's copy; workers that still map it keep their mapping)."""
        self._finalizer()


class MailboxReader(Transform):
    """Applies the calls posted to ``mailbox`` to the env's base env before each reset and step (a call
    applies once; reading costs one shared int64 when nothing is new).

    Args:
        mailbox: the worker's mailbox.
    """

    def __init__(self, mailbox: Mailbox) -> None:
        super().__init__()
        self.mailbox = mailbox
        self._seen = 0

    def _poll(self) -> None:
        version = self.mailbox.version
        if version != self._seen:
            apply_calls(self.parent, self.mailbox.read())
            self._seen = version

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._poll()
        return tensordict

    def _reset_env_preprocess(self, tensordict: TensorDictBase | None) -> TensorDictBase | None:
        self._poll()
        return tensordict

    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return tensordict_reset
