"""Constants of the original ``hockey_env.py`` in metres and seconds (the original's pixels / ``SCALE``), the
discrete action table, the mirror map of player 2's observation, and the names of modes and opponents."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

# ---------------------------------------------------------------- constants of the original, in metres and seconds
SCALE = 60.0  # pixels per metre
FPS = 50
DT = 1.0 / FPS
TABLE_HALF_LENGTH = 235.0 / SCALE  # inner face of the end walls (x), 3.917 m
TABLE_HALF_WIDTH = 200.0 / SCALE  # inner face of the long walls (y), 3.333 m
GOAL_HALF_WIDTH = 75.0 / SCALE  # GOAL_SIZE: the goal mouth is |y| < 1.25 m
GOAL_BOX_X = 245.0 / SCALE  # the goal boxes (the puck's goal sensor; a wall to the rackets) start at |x| = 4.083 m
PUCK_RADIUS = 13.0 / SCALE
PUCK_MASS = 7.0 * math.pi * PUCK_RADIUS**2  # density 7: 1.032 kg
RACKET_FACTOR = 1.2
# the original's RACKETPOLY * RACKETFACTOR / SCALE, counter-clockwise (as Box2D orders it), player 1's frame:
# x forward (the flat face at +0.1 m), y to the left; player 2's racket is the same shape in its own frame
RACKET_VERTICES = tuple((x * RACKET_FACTOR / SCALE, y * RACKET_FACTOR / SCALE)
                        for x, y in ((-18, 10), (-21, 0), (-18, -10), (-10, -20), (5, -20), (5, 20), (-10, 20)))
POLYGON_SKIN = 0.01  # Box2D's b2_polygonRadius (2 * linearSlop): a polygon collides as if this much larger
HOLD_OFFSET = 0.314  # a held puck's centre ahead of the holder's origin (measured in the original: 0.314 +- 0.001)
GOAL_X = (245.0 - 13.0) / SCALE  # |x| of the puck centre where it overlaps the goal sensor: a goal, 3.867 m
ZONE = 10.0 / 20  # W / 20: a racket closer than this to the centre line is sprung back
PLAYER_X_LIMITS = (-210.0 / SCALE, -ZONE)  # own frame: the goal line of _check_boundaries, the centre zone
PLAYER_Y_LIMIT = 4.0 - 1.2  # _check_boundaries: no force outwards past |y| = 2.8
PLAYER_START = (-3.0, 0.0)  # W / 5 in the own frame
MAX_ANGLE = math.pi / 3
MAX_TIME_KEEP_PUCK = 15
FORCE_MULTIPLIER = 6000.0
TORQUE_MULTIPLIER = 400.0
SHOT_SPEED = 60.0  # SHOOTFORCEMULTIPLIER * mass / DT applied for one step of DT: 60 m/s
MAX_PUCK_SPEED = 25.0
MAX_PLAYER_SPEED = 10.0  # m/s: from here on the racket brakes (the original's max_speed)
PLAYER_MASS = 58.0  # racket polygon area 0.348 m^2 x density 200 / 1.2
PLAYER_INERTIA = 3.7095  # about its centroid, kg m^2
PLAYER_CENTROID_BEHIND = 0.122375  # the centroid (about which Box2D turns the racket) is this far behind the origin
PLAYER_DAMPING = 5.0
PLAYER_DAMPING_BRAKE = 20.0  # at or above MAX_PLAYER_SPEED and in the centre zone
ANGULAR_DAMPING = 2.0
ANGULAR_DAMPING_BRAKE = 10.0  # beyond MAX_ANGLE
PUCK_DAMPING = 0.05
PUCK_DAMPING_FAST = 10.0  # above MAX_PUCK_SPEED
RESTITUTION = 0.95
RESTITUTION_THRESHOLD = 1.0  # Box2D's b2_velocityThreshold (m/s): slower impacts are inelastic
FRICTION_RACKET = math.sqrt(0.1 * 1.0)  # Box2D mixes the puck's 0.1 and the racket's 1.0 as sqrt(a * b)
FRICTION_WALL = 0.1  # puck 0.1, walls 0.1


def damping_factor(damping: float) -> float:
    """The velocity factor of one step of linear or angular damping in the original's Box2D (pybox2d 2.3.10:
    ``v *= clamp(1 - DT * damping, 0, 1)``, not the later ``1 / (1 + DT * damping)``)."""
    return min(max(1.0 - DT * damping, 0.0), 1.0)


# derived
PUCK_X_LIMIT = TABLE_HALF_LENGTH - PUCK_RADIUS
PUCK_Y_LIMIT = TABLE_HALF_WIDTH - PUCK_RADIUS
NO_LIMIT = 1e4
# closeness shaping of the original: -30 / (max_dist * max_timesteps / 2) per metre, max_dist = 250 / SCALE
CLOSENESS_PER_METRE_STEP = -30.0 / (250.0 / SCALE / 2.0)

MODES = ("NORMAL", "TRAIN_SHOOTING", "TRAIN_DEFENSE")
CONTACTS = ("swept", "discrete")
NORMAL, TRAIN_SHOOTING, TRAIN_DEFENSE = range(3)
OPPONENTS = ("static", "weak", "strong", "policy")
STATIC, WEAK, STRONG, POLICY = range(4)
OPPONENT_GAINS = {"weak": 0.5, "strong": 10.0}  # BasicOpponent's proportional gains
PHASE_STEP_MAX = 0.2  # BasicOpponent's wobble phase advances by uniform(0, 0.2) rad per step
INFO_KEYS = ("winner", "won", "lost", "drawn", "steps")
OBSERVATION_SIZE = 18
ACTION_SIZE = 4

# discrete_to_continous_action of the original (keep_mode): 0 nothing, 1 -x, 2 +x, 3 -y, 4 +y, 5 -angle,
# 6 +angle, 7 shoot; rows are [x force, y force, torque, shoot]
DISCRETE_ACTIONS = torch.tensor([
    [0.0, 0.0, 0.0, 0.0],
    [-1.0, 0.0, 0.0, 0.0],
    [1.0, 0.0, 0.0, 0.0],
    [0.0, -1.0, 0.0, 0.0],
    [0.0, 1.0, 0.0, 0.0],
    [0.0, 0.0, -1.0, 0.0],
    [0.0, 0.0, 1.0, 0.0],
    [0.0, 0.0, 0.0, 1.0],
])
NUM_DISCRETE_ACTIONS = DISCRETE_ACTIONS.shape[0]

# observation of player 2 from player 1's: swap the players' blocks and the holding times, negate positions and
# velocities (a point reflection through the table centre, i.e. a rotation by pi: angles and angular
# velocities are unchanged), as the original's obs_agent_two
MIRROR_INDEX = (6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 17, 16)
MIRROR_SIGN = (-1.0, -1.0, 1.0, -1.0, -1.0, 1.0) * 2 + (-1.0,) * 4 + (1.0, 1.0)

Mode = Literal["NORMAL", "TRAIN_SHOOTING", "TRAIN_DEFENSE"]
Opponent = Literal["static", "weak", "strong"]
OpponentPolicy = Callable[[Tensor], Tensor]


def discrete_to_continuous(action: Tensor) -> Tensor:
    """The original's ``discrete_to_continous_action`` (keep mode, 8 actions), batched.

    Args:
        action: int64 ``[*B]`` in ``[0, 8)``: 0 nothing, 1 / 2 x force -1 / +1, 3 / 4 y force -1 / +1,
            5 / 6 torque -1 / +1, 7 shoot.

    Returns:
        ``[*B, 4]`` float32 continuous action [x force, y force, torque, shoot].
    """
    table = DISCRETE_ACTIONS.to(action.device)
    return table.index_select(0, action.reshape(-1)).view(*action.shape, ACTION_SIZE)
