"""Epsilon-greedy exploration schedules."""

from __future__ import annotations

import math
from typing import Literal

import lightning as L
from tensordict import TensorDict

from callbacks.base import RLCallback
from envs.restored import restored_number


class EpsilonDecay(RLCallback):
    """Sets the module's exploration rate (``pl_module.set_epsilon``) after every collected batch.

    * ``linear``: ``eps = eps_init - (eps_init - eps_end) * frames / annealing_frames``, per collected frame
      (all ranks), then ``eps_end``.
    * ``exponential``: ``eps = eps_init * decay_rate ** episodes`` per finished episode (counted over
      this rank's envs), floored at ``eps_end`` (e.g. 0.998 per episode).

    The episode count is in the checkpoint; the frame count is the module's. Logged as ``schedule/epsilon``.

    Args:
        schedule: ``linear`` or ``exponential``.
        eps_init: the start, in [0, 1].
        eps_end: the floor, in [0, eps_init].
        annealing_frames: frames of the linear decay.
        decay_rate: factor per episode of the exponential one.

    Raises:
        ValueError: an unknown schedule or a value out of range (the message names it).
    """

    def __init__(self, schedule: Literal["linear", "exponential"] = "linear", eps_init: float = 1.0,
                 eps_end: float = 0.05, annealing_frames: int = 100_000, decay_rate: float = 0.998) -> None:
        if schedule not in ("linear", "exponential"):
            raise ValueError(f"EpsilonDecay.schedule={schedule!r} is not allowed: one of linear, exponential")
        if not (0 <= eps_end <= eps_init <= 1) or annealing_frames < 1 or not 0 < decay_rate <= 1:
            raise ValueError(f"EpsilonDecay: 0 <= eps_end <= eps_init <= 1, annealing_frames >= 1, "
                             f"decay_rate in (0, 1] required (got {eps_end}, {eps_init}, {annealing_frames}, "
                             f"{decay_rate})")
        self.schedule = schedule
        self.eps_init = eps_init
        self.eps_end = eps_end
        self.annealing_frames = annealing_frames
        self.decay_rate = decay_rate
        self.episodes = 0

    def value(self, frames: int, episodes: int) -> float:
        """Epsilon after ``frames`` collected frames and ``episodes`` finished episodes."""
        if self.schedule == "linear":
            share = min(frames / self.annealing_frames, 1.0)
            return self.eps_init - (self.eps_init - self.eps_end) * share
        return max(self.eps_init * math.exp(episodes * math.log(self.decay_rate)), self.eps_end)

    def state_dict(self) -> dict:
        return {"episodes": self.episodes}

    def load_state_dict(self, state_dict: dict) -> None:
        self.episodes = restored_number(state_dict.get("episodes"), "EpsilonDecay.episodes", low=0)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pl_module.set_epsilon(self.value(pl_module.collected_frames, self.episodes))

    def on_batch_collected(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: TensorDict) -> None:
        self.episodes += int(batch["next", "done"].sum())
        pl_module.set_epsilon(self.value(pl_module.collected_frames, self.episodes))
