"""Two-player air hockey as one natively batched TorchRL env, in pure torch tensors (no Box2D).

A reproduction of the Tübingen RL course's ``hockey_env.py`` (``HockeyEnv`` + ``BasicOpponent``, Martius lab,
``martius-lab/hockey-env``; earlier ``laser-hockey-env``): its table, goals, radii, masses, force / torque / shot
scales, speed limits, damping, ``MAX_TIME_KEEP_PUCK`` holding rule, modes, reward shaping, observation layout,
mirrored opponent observation (``obs_agent_two``), discrete action map and scripted ``BasicOpponent`` controller.
The package: :mod:`~envs.hockey.constants` (the original's constants, the discrete action table),
:mod:`~envs.hockey.opponents` (the batched scripted controller :func:`basic_opponent_action`, :class:`BasicOpponent`),
:mod:`~envs.hockey.rackets` (how the rackets move), :mod:`~envs.hockey.puck` (the puck's stages of a step: held,
in flight, against a racket, off the walls), :mod:`~envs.hockey.contact` (the racket polygon, the swept
puck-racket test and Box2D's impulse), :mod:`~envs.hockey.config` (:class:`HockeyConfig`, the ``env:`` section of a
run's YAML), :mod:`~envs.hockey.env` (:class:`HockeyEnv`, ``batch_size=[B]``) and :mod:`~envs.hockey.render`
(frame strips of a game).

Units: metres (the original's pixels / ``SCALE`` = 60), seconds, one env step = ``DT`` = 1/50 s. Coordinates
are centred on the table: x from the agent's (player 1's, left) goal to the opponent's (right) goal, y up.

What is reproduced from Box2D 2.3.10 as the original runs it (each checked against the original by playing both
from the same states, ``benchmarks/hockey_fidelity.py`` for the whole game):
    * Shapes: the racket is the original's polygon (``RACKET_VERTICES``, 0.8 m tall, flat face 0.1 m ahead of
      the origin, pointed back) plus Box2D's 0.01 m skin; the puck a disc of 13/60 m, 1.03 kg.
    * Rackets (:mod:`~envs.hockey.rackets`): forces, the speed rule (damping 5, or 20 with the force only
      slowing it at 10 m/s and above), the centre-zone spring, ``_check_boundaries``, the angle spring beyond
      pi/3, Box2D's damping ``v *= 1 - DT * c`` (pybox2d 2.3.10, not ``1 / (1 + DT * c)``) and turning about the
      centroid (0.122 m behind the origin). Under the same actions a racket's state matches the original's to
      3 decimals over 150 steps, until it touches a wall.
    * Contacts (:mod:`~envs.hockey.contact`): Box2D's impulse for one contact point, solved exactly: restitution
      0.95 (0 below 1 m/s), friction sqrt(0.1 * 1.0) against rackets and 0.1 against walls, the racket's mass
      and inertia (a caught 48 m/s shot pushes it back by 1.5 m/s), the puck's spin (friction spins it and
      its rim rubs at later contacts: bank shots depend on it). As in Box2D a new contact starts one step after
      the puck reaches a racket, and the catch reads the puck's velocity at the step's start. A held puck is
      pinned to the racket's velocity at the step's start and then hit by the racket's change of velocity.
    * The scripted ``BasicOpponent``, with the original's random wobble (phase uniform in [0, pi), then
      + uniform(0, 0.2) per step), drawn per row from the row's seed.

What is simplified, with its measured effect (W / D / L points in the six matchups of 1,000 games each of
``benchmarks/hockey_fidelity.py``, against the original's figures from 3,000 games):
    * Contact in continuous time (``contact: swept``, the default): the puck stops on the racket where its path
      first touches it, so it can never pass through one. Box2D tests dynamic bodies only at the end of each
      step: a fast puck's centre gets into the racket before the contact, and past its thin parts about once
      per 25 touches. ``contact: discrete`` reproduces that test: the two differ by at most 2 points in the
      matchups with the random agent and by up to 6.4 in weak against strong (both within 4.3 points of the
      original there).
    * Rackets do not collide with each other (the centre-zone spring keeps them about 0.1 m apart at the
      closest) and stop at the walls by a clamp (no torque from the wall: under the same actions a racket's
      state leaves the original's at its first wall contact); the end walls' slanted tips at the goal mouth
      are not modelled (a puck whose centre is within 1.25 m of the axis passes the end wall, as wide as the
      goal sensor). One racket contact per step, resolved before the walls. Their effect is within the
      figures above: every W, D and L within 4.3 points of the original's, mean steps within 6 %.
    * The original never resets its holding counters at a reset: a game that ends with a player holding the
      puck starts the next one with the puck teleported to that player. This env starts every game fresh
      (the original played with counters reset is the reference of ``benchmarks/hockey_fidelity.py``).
"""

from envs.hockey.config import HockeyConfig
from envs.hockey.constants import DISCRETE_ACTIONS, MODES, OPPONENTS, discrete_to_continuous
from envs.hockey.env import HockeyEnv
from envs.hockey.opponents import BasicOpponent, basic_opponent_action

__all__ = [
    "DISCRETE_ACTIONS", "MODES", "OPPONENTS", "BasicOpponent", "HockeyConfig", "HockeyEnv",
    "basic_opponent_action", "discrete_to_continuous",
]
