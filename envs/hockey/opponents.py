"""The original's scripted ``BasicOpponent`` (weak / strong), batched: the function the env runs inside its step
on feature-major state (:func:`scripted_rows`), the row-major :func:`basic_opponent_action`, and a callable
player (:class:`BasicOpponent`) for self-play hooks, tests and evaluations."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from envs.hockey.constants import MAX_ANGLE, OPPONENT_GAINS, PHASE_STEP_MAX, SCALE

_BRAKE_XY, _BRAKE_ANGLE = 0.1, 1.0  # BasicOpponent's time_to_break per coordinate (x, y; angle)


def scripted_rows(obs: Tensor, gain: Tensor, phase: Tensor, shoot_ok: Tensor | bool) -> Tensor:
    """BasicOpponent's controller on feature-major observations ``obs`` ``[18, k]`` (rows may be strided views):
    ``gain`` ``[3, k]`` or ``[3, 1]`` (kp * [1, 1/5, 1/2]; 0 gives a zero action), ``phase`` ``[k]``; returns the
    action ``[4, k]``. See :func:`basic_opponent_action`."""
    x, y, puck_x, puck_y, puck_vx, puck_vy = obs[0], obs[1], obs[12], obs[13], obs[14], obs[15]
    dx, dy = x - puck_x, y - puck_y
    dist = (dx * dx + dy * dy).sqrt()
    slow = puck_vx < 30.0 / SCALE
    kick = slow & (x < puck_x) & (dy.abs() < 30.0 / SCALE)
    target_x = torch.where(kick, puck_x + 0.2, -210.0 / SCALE)
    target_y = torch.where(kick, puck_y + puck_vy * dist * 0.1, torch.where(slow, puck_y, 0.0))
    error = torch.stack([target_x - x, target_y - y, MAX_ANGLE * torch.sin(phase) - obs[2]])
    velocity = obs[3:6]
    time_to_target = (error / (velocity + 0.01)).abs()  # (compared with numbers: no constant copied to a GPU)
    need_break = torch.cat([time_to_target[:2] < _BRAKE_XY, time_to_target[2:] < _BRAKE_ANGLE]).float()
    action = (error * gain - velocity * need_break * (gain > 0) * 0.5).clamp(-1.0, 1.0)
    hold = obs[16]
    shoot = ((hold > 0) & (hold < 7) & shoot_ok).float()
    return torch.cat([action, shoot.unsqueeze(0)])


def basic_opponent_action(observation: Tensor, kp: float, phase: Tensor, keep_mode: bool = True) -> Tensor:
    """The original's ``BasicOpponent.act``, batched: PD control of the paddle to a target that depends on the puck.

    If the puck moves towards the own goal or slowly away (x velocity < 0.5 m/s), the target is a point just
    behind the puck (kick it) when the paddle is behind it and within 0.5 m in y, else the point (-3.5, puck y)
    (get behind the puck); otherwise the target is in front of the own goal, (-3.5, 0). The target angle is
    ``MAX_ANGLE * sin(phase)``. It shoots when it has held the puck for a while (0 < holding time < 7).
    The env runs the same code (:func:`scripted_rows`) on its feature-major state.

    Args:
        observation: ``[k, 18]`` in the player's own frame (``observation`` or ``observation_opponent``).
        kp: proportional gain, 0.5 (weak) or 10 (strong).
        phase: ``[k]`` the racket wobble phase (rad).
        keep_mode: whether the shoot entry may fire.

    Returns:
        ``[k, 4]`` action in ``[-1, 1]`` in the player's own frame.
    """
    gain = torch.tensor([[kp], [kp / 5], [kp / 2]], device=observation.device)
    return scripted_rows(observation.t(), gain, phase, keep_mode).t().contiguous()


class BasicOpponent:
    """A batched scripted player (the original's ``BasicOpponent``) as a callable ``observation [k, 18] -> action
    [k, 4]``: for :meth:`HockeyEnv.set_opponent_policy`, or to drive the agent in tests and evaluations.

    As the original, the racket's wobble phase starts uniform in ``[0, pi)`` and advances by a uniform draw in
    ``[0, 0.2)`` rad per call (one per row, from a generator seeded ``seed``; it restarts when ``k`` changes).

    Args:
        weak: gain 0.5 (weak) or 10 (strong).
        seed: seed of the phase draws.
    """

    def __init__(self, weak: bool = True, seed: int = 0) -> None:
        self.kp = OPPONENT_GAINS["weak" if weak else "strong"]
        self.generator = torch.Generator().manual_seed(seed)
        self.phase: Tensor | None = None

    def __call__(self, observation: Tensor) -> Tensor:
        k = observation.shape[0]
        if self.phase is None or self.phase.shape[0] != k:
            self.phase = torch.rand(k, generator=self.generator) * math.pi
        self.phase = self.phase + torch.rand(k, generator=self.generator) * PHASE_STEP_MAX
        return basic_opponent_action(observation, self.kp, self.phase.to(observation.device))
