"""Proportional prioritised replay for the off-policy pipeline's time-major ``[T, rows]`` storage.

TorchRL's own ``PrioritizedSampler`` needs its C++ segment trees, which this stack's torchrl build
lacks ("SumSegmentTreeFp32 is not available"); this sampler is the same algorithm in plain torch and
plugs into ``TensorDictReplayBuffer`` through TorchRL's ``Sampler`` interface.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor
from torchrl.data.replay_buffers.samplers import Sampler


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
        self.load_state_dict(torch.load(os.path.join(path, "priority.pt")))

    def __repr__(self) -> str:
        return f"PrioritizedSampler(rows={self.rows}, alpha={self.alpha}, beta={self.beta}, eps={self.eps})"
