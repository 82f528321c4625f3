"""Two-player air hockey as one natively batched TorchRL env, in pure torch tensors (no Box2D).

A reproduction of the Tübingen RL course's ``hockey_env.py`` (``HockeyEnv`` + ``BasicOpponent``, Martius lab,
``martius-lab/hockey-env``; earlier ``laser-hockey-env``): its table, goals, radii, masses, force / torque / shot
scales, speed limits, damping, ``MAX_TIME_KEEP_PUCK`` holding rule, modes, reward shaping, observation layout,
mirrored opponent observation (``obs_agent_two``), discrete action map and scripted ``BasicOpponent`` controller.
The package: :mod:`~envs.hockey.constants` (the original's constants, the discrete action table),
:mod:`~envs.hockey.opponents` (the batched scripted controller :func:`basic_opponent_action`, :class:`BasicOpponent`),
:mod:`~envs.hockey.config` (:class:`HockeyConfig`, the ``env:`` section of a run's YAML), :mod:`~envs.hockey.env`
(:class:`HockeyEnv`, ``batch_size=[B]``) and :mod:`~envs.hockey.render` (frame strips of a game).

Units: metres (the original's pixels / ``SCALE`` = 60), seconds, one env step = ``DT`` = 1/50 s. Coordinates
are centred on the table: x from the agent's (player 1's, left) goal to the opponent's (right) goal, y up.

What is simplified against Box2D (the original):
    * Shapes: the paddles are circles of radius ``PLAYER_RADIUS`` = 0.3 m around the body origin (the original's
      racket is a 0.52 x 0.8 m heptagon whose flat face is 0.1 m ahead of the origin), the puck a circle of
      ``PUCK_RADIUS`` = 13/60 m as in the original. A paddle's angle therefore only sets the shooting direction.
    * Integration: one explicit step per env step with Box2D's order (velocity += force, then damping
      ``v /= 1 + DT * damping``, then position += ``DT`` v); no iterative contact solver.
    * Paddle vs puck: one impulse along the contact normal with restitution ``RESTITUTION`` = 0.95 (Box2D mixes
      the puck's 0.95 and the paddle's 0 to 0.95 too), the paddle counted as infinitely heavy (58 kg against
      1.03 kg: the paddle's velocity change is under 2 % in the original); no friction, no spin. Contact is
      tested on the puck's swept path relative to the paddle (so a 60 m/s shot cannot tunnel through a paddle)
      and the puck is put back on the paddle's rim. Paddles do not collide with each other (the centre zone
      keeps them more than a metre apart).
    * Walls: the puck bounces off the long walls and the end walls outside the goal mouth by reflection, normal
      velocity times -0.95, tangential kept. Goal posts are not modelled (the end wall is open for ``|y| <
      GOAL_HALF_WIDTH``).
    * Paddle limits: the original's soft braking at the centre zone and at its ``_check_boundaries`` lines is a
      hard clamp of the position to the same box (x in [-3.5, -0.5] in the player's own frame, |y| <= 2.8), with
      the velocity component into the limit zeroed; the original's speed-dependent damping (5, or 20 above
      10 m/s) is damping 5 plus a speed cap of ``MAX_PLAYER_SPEED`` = 10 m/s; the angle is clamped to
      ``MAX_ANGLE`` (the original pulls it back with a spring) with angular damping 2.
    * Holding: a held puck sits on the holder's rim in its facing direction (the original puts it on the body
      origin, inside the racket) and moves with the holder; a shot adds ``SHOT_SPEED`` = 60 m/s in the facing
      direction, which is what the original's ``SHOOTFORCEMULTIPLIER`` force gives in one Box2D step.
    * BasicOpponent: its phase (the racket's wobble) advances by 0.1 rad per step, the mean of the original's
      ``uniform(0, 0.2)`` draw; the initial phase is drawn per episode from the row's seed.
    * NORMAL mode alternates the side the puck starts on by episode index (even: the agent's side), as the
      original alternates ``one_starts``; the TRAIN_DEFENSE shot starts with its full 60 m/s velocity in the reset
      observation (the original applies the force during the first step).
"""

from envs.hockey.config import HockeyConfig
from envs.hockey.constants import DISCRETE_ACTIONS, MODES, OPPONENTS, discrete_to_continuous
from envs.hockey.env import HockeyEnv
from envs.hockey.opponents import BasicOpponent, basic_opponent_action

__all__ = [
    "DISCRETE_ACTIONS", "MODES", "OPPONENTS", "BasicOpponent", "HockeyConfig", "HockeyEnv",
    "basic_opponent_action", "discrete_to_continuous",
]
