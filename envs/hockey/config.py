"""Parameters of the hockey env (the ``env:`` section of a hockey run's YAML)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from envs.config import EnvConfig, require
from envs.hockey.constants import CONTACTS, MODES, OPPONENTS, Mode, Opponent
from envs.hockey.env import HockeyEnv


@dataclass(eq=False)
class HockeyConfig(EnvConfig):
    """Parameters of the hockey env; the defaults follow the original ``HockeyEnv_BasicOpponent``.

    Args:
        mode: ``NORMAL`` (a game from the centre, the puck starting on alternating sides), ``TRAIN_SHOOTING``
            (the puck starts in the agent's half, the opponent at a random place) or ``TRAIN_DEFENSE`` (the
            puck is shot at the agent's goal from the opponent's half). Changeable per row with
            :meth:`HockeyEnv.set_mode`.
        opponent: who drives player 2: ``static`` (does nothing), ``weak`` or ``strong`` (the scripted
            BasicOpponent). Changeable per row with :meth:`HockeyEnv.set_opponent` (also to ``policy``).
        discrete_actions: the agent's ``action`` is an int64 in ``[0, 8)`` (see :data:`DISCRETE_ACTIONS`,
            for DQN) instead of 4 floats in ``[-1, 1]``.
        keep_mode: a paddle that touches the puck holds it (the original's ``keep_mode``).
        contact: how a puck is found to touch a racket: ``swept`` (its path over the step is tested, so it never
            passes through a racket) or ``discrete`` (Box2D's test in the original: only where it ends the
            step; a fast puck can pass through a racket's corner). Kept to measure what the difference does
            (``benchmarks/hockey_fidelity.py``); train with ``swept``.
        max_steps: episode length limit in NORMAL mode (env steps; the episode is truncated as a draw there).
        max_steps_train: episode length limit in TRAIN_SHOOTING and TRAIN_DEFENSE (env steps).
        r_win: reward for a win (and minus it for a loss), >= 0.
        w_closeness: weight of the original's closeness shaping (minus the agent-puck distance while the
            puck is in the agent's half and not moving away; -30 summed over a half episode at 250/60 m),
            >= 0. The original's reward is win/loss + this term.
        w_touch: weight of the touch shaping (1 at the step the agent catches the puck), >= 0.
        w_direction: weight of the direction shaping (puck x velocity / (max_steps * 25)), >= 0.

    Raises:
        ValueError: a key out of its allowed range; the message names the key (``env.<key>``) and what is allowed.
    """

    evaluation_settings: ClassVar[dict[str, dict]] = {"weak": {"mode": "NORMAL", "opponent": "weak"},
                                                      "strong": {"mode": "NORMAL", "opponent": "strong"}}
    outcome_keys: ClassVar[tuple[str, ...]] = ("won", "drawn", "lost")

    mode: Mode = "NORMAL"
    opponent: Opponent = "weak"
    discrete_actions: bool = False
    keep_mode: bool = True
    contact: str = "swept"
    max_steps: int = 250
    max_steps_train: int = 80
    r_win: float = 10.0
    w_closeness: float = 1.0
    w_touch: float = 0.0
    w_direction: float = 0.0

    def __post_init__(self) -> None:
        """Check every key (before any work); the reward weights become floats."""
        require(self.mode in MODES, "mode", self.mode, f"one of {list(MODES)}")
        require(self.opponent in OPPONENTS[:3], "opponent", self.opponent,
                f"one of {list(OPPONENTS[:3])} (a learned 'policy' opponent is set on the env: set_opponent_policy)")
        require(isinstance(self.discrete_actions, bool), "discrete_actions", self.discrete_actions, "true or false")
        require(isinstance(self.keep_mode, bool), "keep_mode", self.keep_mode, "true or false")
        require(self.contact in CONTACTS, "contact", self.contact, f"one of {list(CONTACTS)}")
        require(isinstance(self.max_steps, int) and self.max_steps >= 1, "max_steps", self.max_steps, "an integer >= 1")
        require(isinstance(self.max_steps_train, int) and self.max_steps_train >= 1, "max_steps_train",
                self.max_steps_train, "an integer >= 1")
        for key in ("r_win", "w_closeness", "w_touch", "w_direction"):
            value = getattr(self, key)
            require(isinstance(value, (int, float)) and math.isfinite(value) and value >= 0, key, value,
                    "a finite number >= 0 (the sign is part of the term)")
            setattr(self, key, float(value))

    def make(self, num_envs: int, seed: int, device: torch.device | str = "cpu",
             models: dict | None = None) -> HockeyEnv:
        self.check_models(models)  # none
        return HockeyEnv(self, num_envs=num_envs, seed=seed, device=device)
