"""How the rackets move in one step: the original's ``_apply_translation_action_with_max_speed``,
``_check_boundaries`` and ``_apply_rotation_action_with_max_speed`` under Box2D's integrator (velocity += force
* DT / mass, then ``velocity /= 1 + DT * damping``, then position += DT * velocity), batched on feature-major
planes ``[2, B]`` (player 1, player 2)."""

from __future__ import annotations

import torch
from torch import Tensor

from envs.hockey.constants import (
    ANGULAR_DAMPING,
    ANGULAR_DAMPING_BRAKE,
    DT,
    FORCE_MULTIPLIER,
    GOAL_BOX_X,
    GOAL_HALF_WIDTH,
    MAX_ANGLE,
    MAX_PLAYER_SPEED,
    PLAYER_CENTROID_BEHIND,
    PLAYER_DAMPING,
    PLAYER_DAMPING_BRAKE,
    PLAYER_INERTIA,
    PLAYER_MASS,
    PLAYER_X_LIMITS,
    PLAYER_Y_LIMIT,
    POLYGON_SKIN,
    RACKET_VERTICES,
    TABLE_HALF_LENGTH,
    TABLE_HALF_WIDTH,
    TORQUE_MULTIPLIER,
    ZONE,
    damping_factor,
)

_ACCEL = DT * FORCE_MULTIPLIER / PLAYER_MASS  # velocity change of a full force over one step, m/s
_SPIN = DT * TORQUE_MULTIPLIER / PLAYER_INERTIA  # angular velocity change of a full torque, rad/s
_KEEP, _KEEP_BRAKE = damping_factor(PLAYER_DAMPING), damping_factor(PLAYER_DAMPING_BRAKE)
_KEEP_SPIN, _KEEP_SPIN_BRAKE = damping_factor(ANGULAR_DAMPING), damping_factor(ANGULAR_DAMPING_BRAKE)
_MOUTH_FIT = GOAL_HALF_WIDTH - 0.3  # |y| of a racket origin whose back (at most 0.4 m wide there) fits the mouth
_CORNERS: dict[torch.device, Tensor] = {}  # x, y of the racket's corners ([2, 7, 1, 1], own frame), per device
_ANGLE_SPRING = 0.1 * PLAYER_MASS / PLAYER_INERTIA  # the original's -0.1 * (angle, omega) * mass / DT torques


def _corners(device: torch.device) -> Tensor:
    """x, y of the racket's corners in its own frame, ``[2, 7, 1, 1]``, cached per device."""
    corners = _CORNERS.get(device)
    if corners is None:
        corners = _CORNERS[device] = torch.tensor(RACKET_VERTICES, device=device).t().reshape(2, 7, 1, 1)
    return corners


def _stop_at_walls(moved_x: Tensor, moved_y: Tensor, cos1: Tensor, sin1: Tensor) -> tuple[Tensor, Tensor]:
    """The racket origins ``own x, y`` ``[2, B]`` (own frame) clamped where the corners, turned by the angle (``cos1,
    sin1``), touch the end wall behind the racket or the long walls."""
    corners = _corners(moved_x.device)
    corner_x = corners[0] * cos1 - corners[1] * sin1  # own frame, [7, 2, B]
    corner_y = corners[0] * sin1 + corners[1] * cos1
    reach_back = (-corner_x).amax(0) + POLYGON_SKIN
    reach_y = TABLE_HALF_WIDTH - corner_y.abs().amax(0) - POLYGON_SKIN
    # in front of the goal mouth the racket's back fits into it, up to the goal box behind the end wall
    back_wall = TABLE_HALF_LENGTH + (moved_y.abs() < _MOUTH_FIT).float() * (GOAL_BOX_X - TABLE_HALF_LENGTH)
    own_x = torch.minimum(torch.maximum(moved_x, reach_back - back_wall), torch.zeros_like(moved_x))
    y = torch.maximum(torch.minimum(moved_y, reach_y), -reach_y)
    return own_x, y


def move_rackets(players: Tensor, action: Tensor, side: Tensor) -> tuple[Tensor, ...]:
    """One step of both rackets.

    Rules (the original's, in each player's own frame: x towards the opponent):
        * In the centre zone (own x > -``ZONE``) the x force is a spring that throws the racket back
          (``-2 v`` if it moves forward, ``- x v``, as velocity changes) and the damping is 20.
        * Elsewhere, below ``MAX_PLAYER_SPEED`` the action's force (``6000 * action``) acts with damping 5; at or
          above it the damping is 20 and the force acts only if it lowers the speed.
        * ``_check_boundaries``: a force component that pushes past own x = -3.5 (the goal line), past the centre,
          or past |y| = 2.8 is dropped and that velocity component set to 0; the walls stop the racket where
          its corners (turned by its angle) touch them (clamps, the velocity into the wall set to 0).
        * Rotation: torque ``400 * action`` with angular damping 2 while |angle| <= pi/3; beyond, a spring
          (``-0.1 (angle + omega if it turns further out) * mass / DT``) with angular damping 10.

    Args:
        players: ``[6, 2, B]`` x, y, angle, vx, vy, omega (world frame).
        action: ``[4, 2, B]`` each player's action in its own frame (x force, y force, torque, shoot), in [-1, 1].
        side: ``[2, 1]``: 1 for player 1, -1 for player 2 (whose own frame is the world rotated by pi).

    Returns:
        ``x, y, angle, vx, vy, omega``, each ``[2, B]``, world frame.
    """
    x0, y0, angle0, vx0, vy0, omega0 = players
    own_x, own_vx = x0 * side, vx0 * side
    fx, fy = action[0] * _ACCEL, action[1] * (_ACCEL * side)
    zone = (own_x > -ZONE).float()
    spring = -2.0 * own_vx * (own_vx > 0).float() - own_x * own_vx
    speed2 = vx0 * vx0 + vy0 * vy0
    fast = (speed2 >= MAX_PLAYER_SPEED**2).float() * (1.0 - zone)
    slower = ((own_vx + fx) ** 2 + (vy0 + fy) ** 2 < speed2).float()
    acts = 1.0 - fast * (1.0 - slower)  # whether the force (and its boundary check) is applied at all
    fx = fx * (1.0 - zone) + spring * zone
    out_x = (((own_x < PLAYER_X_LIMITS[0]) & (fx < 0)) | ((own_x > 0) & (fx > 0))).float() * acts
    out_y = (((y0 > PLAYER_Y_LIMIT) & (fy > 0)) | ((y0 < -PLAYER_Y_LIMIT) & (fy < 0))).float() * acts
    keep = _KEEP + ((zone + fast) > 0).float() * (_KEEP_BRAKE - _KEEP)
    own_vx = (own_vx * (1.0 - out_x) + fx * (1.0 - out_x) * acts) * keep
    vy = (vy0 * (1.0 - out_y) + fy * (1.0 - out_y) * acts) * keep
    beyond = (angle0.abs() > MAX_ANGLE).float()
    turn = action[2] * _SPIN * (1.0 - beyond)
    turn = turn - beyond * _ANGLE_SPRING * (omega0 * (angle0 * omega0 > 0).float() + angle0)
    omega = (omega0 + turn) * (_KEEP_SPIN + beyond * (_KEEP_SPIN_BRAKE - _KEEP_SPIN))
    angle = angle0 + omega * DT
    # the centroid moves with the velocity and the racket turns about it: the origin follows (own frame:
    # the centroid is PLAYER_CENTROID_BEHIND behind the origin along the facing direction)
    cos0, sin0, cos1, sin1 = torch.cos(angle0), torch.sin(angle0), torch.cos(angle), torch.sin(angle)
    moved_x = own_x + own_vx * DT + PLAYER_CENTROID_BEHIND * (cos1 - cos0)
    moved_y = y0 + vy * DT + PLAYER_CENTROID_BEHIND * side * (sin1 - sin0)
    own_x, y = _stop_at_walls(moved_x, moved_y, cos1, sin1)
    own_vx, vy = own_vx * (own_x == moved_x).float(), vy * (y == moved_y).float()
    return own_x * side, y, angle, own_vx * side, vy, omega
