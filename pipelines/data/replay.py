"""The off-policy pipeline's replay buffer: its construction (a TorchRL ``TensorDictReplayBuffer`` on a
time-major ``[T, rows]`` storage), what a collected batch stores, and the priority updates of proportional
prioritised replay.

The buffer keeps what the algorithm module declares (``replay_keys``: its loss's inputs and the done flags)
and applies the module's ``replay_transform`` (e.g. n-step returns) on whole time slices per env row; a
multi-agent batch is stored as one row per (env, agent) (:func:`split_agents`). TorchRL's own
``PrioritizedSampler`` needs its C++ segment trees, which this stack's torchrl build lacks
("SumSegmentTreeFp32 is not available"); :class:`PrioritizedSampler` is the same algorithm in plain torch
and plugs into ``TensorDictReplayBuffer`` through TorchRL's ``Sampler`` interface.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from typing import Literal

import torch
from tensordict import NestedKey, TensorDict, TensorDictBase
from torch import Tensor
from torchrl.data import LazyMemmapStorage, LazyTensorStorage, TensorDictReplayBuffer
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.envs import Transform

from pipelines.compat import transform_buffer

_DONE_KEYS = ("done", "terminated", "truncated")


class PrioritizedSampler(Sampler):
    """Proportional prioritised experience replay (Schaul et al. 2016, "Prioritized Experience Replay",
    ICLR, sec. 3.3): item i is drawn with probability P(i) = p_i^alpha / sum_k p_k^alpha and weighted by
    w_i = (N P(i))^-beta / max_j w_j (eq. 1 and sec. 3.4); new items get the largest priority so far.

    Sampling is a multinomial over all filled slots, O(capacity) per batch (fine to about 1e6 slots).
    Works on ``LazyTensorStorage`` / ``LazyMemmapStorage`` with ``ndim=1``, or ``ndim=2`` with
    ``rows`` set: the storage is then ``[T, rows]`` (time-major), indexed ``(t, row)``, and the buffer's
    ``index`` entry is ``[N, 2]``.

    Args:
        max_capacity: the storage's capacity in items.
        rows: the second dim of a 2-D storage (items written per time step), or None for a 1-D one.
        alpha: priority exponent (0 = uniform). beta: importance-weight exponent (1 = full correction).
        eps: added to every |TD error| so that no item becomes undrawable.

    Raises:
        ValueError: alpha < 0, beta outside [0, 1] or eps <= 0.
    """

    def __init__(self, max_capacity: int, rows: int | None = None, alpha: float = 0.6, beta: float = 0.4,
                 eps: float = 1e-6) -> None:
        if alpha < 0 or not 0 <= beta <= 1 or eps <= 0:
            raise ValueError(f"prioritized replay: alpha >= 0, beta in [0, 1], eps > 0 required "
                             f"(got alpha={alpha}, beta={beta}, eps={eps})")
        self.alpha, self.beta, self.eps, self.rows = alpha, beta, eps, rows
        slots = max_capacity if rows is None else -(-max_capacity // rows) * rows  # whole time steps
        self._priority = torch.zeros(slots, dtype=torch.float64)  # p ** alpha per flat slot t * rows + row
        self._max = 1.0

    def _flat(self, index) -> Tensor:
        """Flat slot numbers of an index: ``[N]``, or ``(t, row)`` as a tuple or an ``[..., 2]`` tensor."""
        if isinstance(index, tuple):
            index = torch.stack([torch.as_tensor(i) for i in index], -1)
        index = torch.as_tensor(index)
        if self.rows is not None:
            index = index.reshape(-1, 2)
            return index[:, 0] * self.rows + index[:, 1]
        return index.reshape(-1)

    def extend(self, index) -> None:
        self._priority[self._flat(index)] = self._max ** self.alpha

    def add(self, index) -> None:
        self.extend(index)

    def sample(self, storage, batch_size: int) -> tuple[Tensor | tuple[Tensor, Tensor], dict]:
        n = len(storage)
        if n == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        p = self._priority[:n]  # the filled slots: a time-major storage fills whole time steps
        flat = torch.multinomial(p, batch_size, replacement=True)
        weight = (n * p[flat] / p.sum()).pow(-self.beta)
        info = {"priority_weight": (weight / weight.max()).float()}
        if self.rows is not None:
            return (flat // self.rows, flat % self.rows), info
        return flat, info

    def update_priority(self, index, priority, *, storage=None) -> None:
        """Set the priorities of ``index``'s items to ``|priority| + eps`` (e.g. the |TD error|)."""
        p = torch.as_tensor(priority, dtype=torch.float64).detach().reshape(-1).abs() + self.eps
        self._priority[self._flat(index)] = p ** self.alpha
        self._max = max(self._max, float(p.max()))

    def mark_update(self, index, *, storage=None) -> None:
        pass

    def _empty(self) -> None:
        self._priority.zero_()
        self._max = 1.0

    def state_dict(self) -> dict:
        return {"priority": self._priority.clone(), "max": self._max}

    def load_state_dict(self, state_dict: dict) -> None:
        self._priority.copy_(state_dict["priority"])
        self._max = float(state_dict["max"])

    def dumps(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        torch.save(self.state_dict(), os.path.join(path, "priority.pt"))

    def loads(self, path: str) -> None:
        self.load_state_dict(torch.load(os.path.join(path, "priority.pt"), weights_only=True))

    def __repr__(self) -> str:
        return f"PrioritizedSampler(rows={self.rows}, alpha={self.alpha}, beta={self.beta}, eps={self.eps})"


def make_replay_buffer(capacity: int, rows: int, batch_size: int, storage: Literal["tensor", "memmap"] = "tensor",
                       scratch_dir: str | None = None, prioritized: bool = False, alpha: float = 0.6,
                       beta: float = 0.4, transform: Transform | None = None) -> TensorDictReplayBuffer:
    """A replay buffer of time-contiguous ``[T, rows]`` slices (``ndim=2`` storage), so that ``transform``
    (e.g. TorchRL's ``MultiStepTransform``) sees whole trajectories per row.

    Args:
        capacity: transitions. rows: items written per time step (env rows, times agents).
        batch_size: transitions per sample.
        storage: ``tensor`` (``LazyTensorStorage``, in memory) or ``memmap`` (``LazyMemmapStorage``, on disk
            under ``scratch_dir``, a new temporary folder when null).
        prioritized: proportional prioritised replay (:class:`PrioritizedSampler`) with ``alpha``, ``beta``.
        transform: applied to what is stored.
    """
    if storage == "memmap":
        store = LazyMemmapStorage(capacity, scratch_dir=scratch_dir or tempfile.mkdtemp(prefix="replay_"), ndim=2)
    else:
        store = LazyTensorStorage(capacity, ndim=2)
    sampler = PrioritizedSampler(capacity, rows=rows, alpha=alpha, beta=beta) if prioritized else None
    return TensorDictReplayBuffer(storage=store, sampler=sampler, batch_size=batch_size, transform=transform)


def pending_steps(buffer: TensorDictReplayBuffer) -> dict:
    """The steps the buffer's transforms hold back until the next batch, as checkpoint data (nested dicts of
    tensors), by transform position: TorchRL's ``MultiStepTransform`` keeps each row's last ``n_steps`` steps
    (``_buffer``) to complete their n-step returns with the next batch; it does not save them itself."""
    state = {}
    for i, transform in enumerate(transforms(buffer)):
        held = transform_buffer(transform)
        if isinstance(held, TensorDictBase):
            state[str(i)] = {"data": held.to_dict(), "batch_size": list(held.batch_size)}
    return state


def transforms(buffer: TensorDictReplayBuffer) -> list:
    transform = getattr(buffer, "_transform", None)
    return list(getattr(transform, "transforms", [])) if transform is not None else []


def store(buffer: TensorDictReplayBuffer, batch: TensorDict, keys: Sequence[NestedKey] | None,
          num_agents: int | None) -> None:
    """Extend ``buffer`` with a collected ``[B, T]`` batch: its entries ``keys`` (all when None), one row per
    env, or per (env, agent) for a multi-agent env (:func:`split_agents`)."""
    if keys is not None:
        batch = batch.select(*keys, strict=False)
    buffer.extend(batch if num_agents is None else split_agents(batch, num_agents))


def update_priorities(buffer: TensorDictReplayBuffer, sample: TensorDict) -> None:
    """Give the items of a training sample the priority the module wrote under ``td_error`` (|TD error|).

    Raises:
        ValueError: the sample has no ``td_error`` (the module does not write one).
    """
    if "td_error" not in sample.keys():
        raise ValueError("data.replay_buffer.prioritized=true needs a module that writes each sampled item's |TD "
                         "error| under td_error (e.g. DQNModule)")
    buffer.update_priority(sample["index"], sample["td_error"])


def split_agents(batch: TensorDict, num_agents: int) -> TensorDict:
    """One row per (env, agent): a collected multi-agent batch ``[B, T]`` -> ``[B * R, T]``.

    The done flags (``done``, ``terminated``, ``truncated``) and the ``info`` and ``collector`` entries
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
        if inner[-1] in _DONE_KEYS or inner[0] in ("info", "collector"):  # [B, T, ...] -> [B, R, T, ...]
            value = value.unsqueeze(1).expand(b, num_agents, *value.shape[1:])
        elif value.ndim > 2 and value.shape[2] == num_agents:  # [B, T, R, ...] -> [B, R, T, ...]
            value = value.transpose(1, 2)
        else:
            raise ValueError(f"multi-agent batch entry {key} has shape {list(value.shape)}: expected the agent dim "
                             f"[B, T, R={num_agents}, ...] (only done flags, info and collector entries are shared)")
        out.set(key, value.reshape(b * num_agents, t, *value.shape[3:]))
    return out
