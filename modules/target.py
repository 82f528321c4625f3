"""Targets of the value-based losses: target networks (Mnih et al. 2015, Methods "target network"; Lillicrap et
al. 2016, "Continuous control with deep reinforcement learning", eq. 7 for the soft update), a frozen copy of a
network that a loss reads directly, with no parameter swapping per call; the TD(0) target value of a sampled
batch; and the (prioritised-replay weighted) batch mean the losses share."""

from __future__ import annotations

import copy
from typing import Literal

import torch
from tensordict import TensorDictBase
from torch import Tensor, nn
from torchrl.objectives.value.functional import td0_return_estimate

from modules.compat import lerp_


class TargetNetwork(nn.Module):
    """A frozen copy of ``source``, called like it, updated by :meth:`step` after every optimiser step.

    * ``hard``: the copy takes ``source``'s parameters and buffers after every ``interval``-th :meth:`step`
      (``counter`` counts the steps since the last copy: an owner that resumes training saves it).
    * ``soft``: Polyak averaging at every step, target <- (1 - tau) target + tau source.

    ``source`` is not registered as a submodule (its parameters stay its owner's), so a module holding both
    has each parameter once in its ``state_dict``.

    Args:
        source: the online network, already shaped (lazy layers initialised).
        update: ``hard`` or ``soft``. interval: hard copy period in steps (>= 1). tau: soft update rate in (0, 1].

    Raises:
        ValueError: an unknown ``update``, ``interval`` < 1 or ``tau`` outside (0, 1].
    """

    def __init__(self, source: nn.Module, update: Literal["hard", "soft"] = "soft", interval: int = 1,
                 tau: float = 0.005) -> None:
        super().__init__()
        if update not in ("hard", "soft"):
            raise ValueError(f"target update={update!r} is not allowed: one of hard, soft")
        if interval < 1 or not 0 < tau <= 1:
            raise ValueError(f"target update: interval >= 1 and tau in (0, 1] required (got {interval}, {tau})")
        self.network = copy.deepcopy(source).requires_grad_(False)
        self._source = (source,)  # a tuple: not a submodule
        self.update, self.interval, self.tau = update, int(interval), float(tau)
        self.counter = 0

    def forward(self, *args, **kwargs):
        return self.network(*args, **kwargs)

    def _pairs(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        source = self._source[0]
        return ([*self.network.parameters(), *self.network.buffers()],
                [*source.parameters(), *source.buffers()])

    @torch.no_grad()
    def copy_source(self) -> None:
        """Make the copy equal to ``source`` now."""
        for target, source in zip(*self._pairs(), strict=True):
            target.copy_(source)

    @torch.no_grad()
    def step(self) -> None:
        """The update after one optimiser step of ``source``."""
        if self.update == "soft":
            targets, sources = self._pairs()
            floats = [(t, s) for t, s in zip(targets, sources, strict=True) if t.is_floating_point()]
            lerp_([t for t, _ in floats], [s for _, s in floats], self.tau)
            return
        self.counter += 1
        if self.counter >= self.interval:
            self.copy_source()
            self.counter = 0


def td0_target(batch: TensorDictBase, next_value: Tensor, discount: float | Tensor) -> Tensor:
    """r + discount (1 - terminated) V(s') ``[N]`` (TorchRL's ``td0_return_estimate``) from ``next_value``
    ``[N, 1]``, the batch's ``("next", "reward")`` and ``("next", "terminated")`` (``("next", "done")`` if absent),
    ``[N, 1]`` each; ``discount`` is gamma, or gamma^k ``[N, 1]`` for n-step returns."""
    reward = batch.get(("next", "reward"))
    terminated = batch.get(("next", "terminated"), None)
    terminated = batch.get(("next", "done")) if terminated is None else terminated
    return td0_return_estimate(discount, next_value, reward, terminated).squeeze(-1)


def weighted_mean(loss: Tensor, weight: Tensor | None) -> Tensor:
    """The batch mean of ``loss`` ``[N]``, or with prioritised-replay weights ``[N]`` sum(w l) / sum(w) (TorchRL's
    weighted reduction)."""
    return loss.mean() if weight is None else (loss * weight).sum() / weight.sum()
