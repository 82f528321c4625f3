"""The puck's stages of one step, after the rackets moved (:func:`~envs.hockey.rackets.move_rackets`): held or
shot (:func:`hold_puck`), free flight (:func:`fly_puck`), the racket it touches (:func:`touch_rackets`,
:func:`contacts`, :func:`collide`, :func:`catches`) and the walls and goals (:func:`walls_and_goals`).

Pure functions on the state planes of :class:`~envs.hockey.env.HockeyEnv`: ``[2, B]`` per player (player 1, player
2), ``[B]`` for the puck, world frame, metres, m/s, rad/s. Masks are 0/1 floats: ``a * m + b * (1 - m)`` selects
exactly (all values are finite).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from envs.hockey.constants import (
    DT,
    FRICTION_WALL,
    GOAL_HALF_WIDTH,
    GOAL_X,
    HOLD_OFFSET,
    MAX_PUCK_SPEED,
    NO_LIMIT,
    PLAYER_CENTROID_BEHIND,
    PUCK_DAMPING,
    PUCK_DAMPING_FAST,
    PUCK_RADIUS,
    PUCK_X_LIMIT,
    PUCK_Y_LIMIT,
    RACKET_VERTICES,
    RESTITUTION,
    RESTITUTION_THRESHOLD,
    SHOT_SPEED,
    damping_factor,
)
from envs.hockey.contact import impulse, sweep_near

FRONT_FROM_CENTROID = RACKET_VERTICES[4][0] + PLAYER_CENTROID_BEHIND  # the front face ahead of the centroid

Rackets = tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]  # x, y, angle, vx, vy, omega, [2, B] each
Puck = tuple[Tensor, Tensor, Tensor, Tensor]  # x, y, vx, vy, [B] each


class Holding(NamedTuple):
    """What :func:`hold_puck` leaves for the rest of the step."""

    rackets: Rackets  # after the held puck's push
    spin: Tensor  # [B] the puck's angular velocity
    hold: Tensor  # [2, B] steps left holding, after the countdown and the shots
    shoot: Tensor  # [2, B] 0/1: the racket shot its puck this step
    still: Tensor  # [B] 0/1: the puck stays held
    free: Tensor  # [B] 0/1: nobody held the puck at the step's start
    rim_x: Tensor  # [B] a held puck's place (0 where free)
    rim_y: Tensor
    vx: Tensor  # [B] a held puck's velocity (0 where free)
    vy: Tensor


class Touch(NamedTuple):
    """Where the puck's path over the step touches each racket (:func:`touch_rackets`), ``[2, B]`` each."""

    touch: Tensor  # bool: the path comes within reach of the racket
    when: Tensor  # fraction of the step at the touch (1 where none)
    hx: Tensor  # the puck's centre at the touch, racket frame
    hy: Tensor
    nx: Tensor  # unit normal at the touch, racket -> puck, world frame
    ny: Tensor
    ex: Tensor  # the racket frame's x axis (forward) in the world
    ey: Tensor
    qx: Tensor  # ... and its y axis
    qy: Tensor
    ox: Tensor  # the racket frame's origin in the world
    oy: Tensor


def puck_damping(kvx: Tensor, kvy: Tensor) -> Tensor:
    """The free puck's velocity factor ``[B]`` over the step: damping 0.05, or 10 above ``MAX_PUCK_SPEED``."""
    fast = (kvx * kvx + kvy * kvy > MAX_PUCK_SPEED**2).float()
    return damping_factor(PUCK_DAMPING) + fast * (damping_factor(PUCK_DAMPING_FAST) - damping_factor(PUCK_DAMPING))


def hold_puck(hold: Tensor, shoot_request: Tensor, rackets: Rackets, vx0: Tensor, vy0: Tensor, face_x: Tensor,
              face_y: Tensor, spin: Tensor) -> Holding:
    """Holding: count down, shoot at 1 or on request (``shoot_request > 0.5``), else the puck sits on the holder's
    rim, pinned to the racket's velocity at the step's start (``vx0, vy0``) and pushed by its change.

    ``face_x, face_y``: the rackets' facing direction after they moved (world frame, ``[2, B]``).
    """
    x, y, angle, vx, vy, omega = rackets
    held = (hold > 1).float()
    hold = hold - held
    shoot = held * ((hold <= 1) | (shoot_request > 0.5)).float()
    hold = hold * (1.0 - shoot)
    any_held, still = held[0] + held[1], (held[0] - shoot[0]) + (held[1] - shoot[1])  # [B] 0/1
    # a held puck sits on the front face; a shot leaves from the racket's origin, as the original's
    offset = HOLD_OFFSET * (held - shoot)
    rim_x, rim_y = (x + face_x * offset) * held, (y + face_y * offset) * held
    # the original pins a held puck on the racket with the racket's velocity at the step's start (plus a shot's
    # 60 m/s); the racket's change of velocity over the step then hits it (at the centre of the front face)
    kick = shoot * SHOT_SPEED
    pinned_vx = (vx0 + face_x * kick) * damping_factor(PUCK_DAMPING)
    pinned_vy = (vy0 + face_y * kick) * damping_factor(PUCK_DAMPING)
    front_x, front_y = face_x * FRONT_FROM_CENTROID, face_y * FRONT_FROM_CENTROID
    push = impulse(pinned_vx - (vx - omega * front_y), pinned_vy - (vy + omega * front_x), spin, face_x, face_y,
                   front_x, front_y)
    spin = spin + (push[5] * held).sum(0)
    hold_vx, hold_vy = (pinned_vx + push[0]) * held, (pinned_vy + push[1]) * held
    # (Box2D moves a body with its velocity after the impulses, so a push also moves the racket this step)
    vx, vy, omega = vx + push[2] * held, vy + push[3] * held, omega + push[4] * held
    x, y, angle = x + push[2] * held * DT, y + push[3] * held * DT, angle + push[4] * held * DT
    return Holding((x, y, angle, vx, vy, omega), spin, hold, shoot, still, 1.0 - any_held,
                   rim_x[0] + rim_x[1], rim_y[0] + rim_y[1], hold_vx[0] + hold_vx[1], hold_vy[0] + hold_vy[1])


def fly_puck(puck: Puck, kick: Tensor, damp: Tensor, holding: Holding) -> tuple[Puck, Tensor, Tensor]:
    """The puck's move over the step before any racket contact: a free puck gets ``kick`` ``[2, B]`` (a
    TRAIN_DEFENSE shot), is damped by ``damp`` and moves; a held one is where its holder put it.

    Returns:
        The moved puck ``x, y, vx, vy`` and its place at the step's start ``start_x, start_y``, ``[B]`` each.
    """
    kx, ky, kvx, kvy = puck
    free = holding.free
    start_x, start_y = kx * free + holding.rim_x, ky * free + holding.rim_y
    kvx = (kvx + kick[0]) * damp * free + holding.vx
    kvy = (kvy + kick[1]) * damp * free + holding.vy
    moving = (1.0 - holding.still) * DT
    kx, ky = start_x + kvx * moving, start_y + kvy * moving
    return (kx, ky, kvx, kvy), start_x, start_y


def touch_rackets(start_x: Tensor, start_y: Tensor, kx: Tensor, ky: Tensor, rackets: Rackets, x0: Tensor,
                  y0: Tensor, angle0: Tensor, side: Tensor, touching: Tensor, swept: bool) -> Touch:
    """Where the puck's path from ``start`` to ``k`` touches each racket, in the racket's own frame (x forward).

    ``swept``: the path relative to the racket at the step's end, from (start - old origin ``x0, y0``) to (end -
    origin); otherwise (``discrete``) the puck's start against the racket where it was (angle ``angle0``), as
    Box2D tests it. ``touching`` ``[2, B]``: the puck reached that racket in the last step (tested whatever its
    distance). ``side`` ``[2, 1]``: 1 for player 1, -1 for player 2.
    """
    x, y, angle = rackets[0], rackets[1], rackets[2]
    frame = angle if swept else angle0
    ex, ey, qx, qy = torch.cos(frame) * side, torch.sin(frame) * side, -torch.sin(frame), torch.cos(frame)
    ox, oy = (x, y) if swept else (x0, y0)
    r0x, r0y = start_x - x0, start_y - y0  # [2, B]
    r1x, r1y = kx - x, ky - y
    ax, ay = r0x * ex + r0y * ey, r0x * qx + r0y * qy
    bx, by = (r1x * ex + r1y * ey, r1x * qx + r1y * qy) if swept else (ax, ay)
    touch, when, lnx, lny = sweep_near(ax, ay, bx - ax, by - ay, touching > 0)
    hx, hy = ax + (bx - ax) * when, ay + (by - ay) * when  # the puck's centre at the touch, racket frame
    nx, ny = lnx * ex + lny * qx, lnx * ey + lny * qy  # world normal, racket -> puck
    return Touch(touch, when, hx, hy, nx, ny, ex, ey, qx, qy, ox, oy)


def contacts(touch: Touch, touching: Tensor, holding: Holding, swept: bool) -> tuple[Tensor, Tensor]:
    """Which racket the puck is in contact with this step and which one it arrives at, 0/1 ``[2, B]`` each.

    Box2D finds a new contact one step late: the step in which the puck reaches a racket ends with the puck
    there, and the next step is the contact: the catch (whatever the velocities, as the original's BeginContact)
    and the impulse (if they approach). ``swept``: the puck stops on the racket's surface where its path first
    touches it (it cannot pass through); ``discrete`` (Box2D's own test, kept for comparison): only a puck that
    ends the step overlapping the racket touches it, and it stays inside. A puck that starts the step inside a
    racket (it reached it, or the racket turned into it) is in contact. One racket per step, player 1 first.
    """
    reach = touch.touch.float() * (1.0 - holding.still) * (1.0 - holding.shoot)  # (a shot leaves its own racket)
    reach = torch.stack([reach[0], reach[1] * (1.0 - reach[0])])
    if swept:
        contact = reach * torch.maximum(touching, (touch.when <= 0).float())
        return contact, reach - contact
    return reach * (touch.when <= 0).float(), torch.zeros_like(reach)


def catches(contact: Tensor, side: Tensor, puck_vx0: Tensor, hold: Tensor, keep_mode: bool) -> Tensor:
    """0/1 ``[2, B]``: the racket in contact catches the puck: nobody holds it and it moved towards the racket's
    goal at the step's start (``puck_vx0``, as the original's catch rule reads it in Box2D's BeginContact)."""
    return contact * ((side * puck_vx0 < 0.1) & (hold[0] + hold[1] == 0)).float() * float(keep_mode)


def collide(touch: Touch, contact: Tensor, arrive: Tensor, face_x: Tensor, face_y: Tensor, rackets: Rackets,
            puck: Puck, start_x: Tensor, start_y: Tensor, spin: Tensor) -> tuple[Rackets, Puck, Tensor]:
    """Box2D's impulse between the puck and the racket in ``contact`` (acting on both), then the puck's place.

    A hit puck leaves the touching point (``swept``: on the racket where it is now) with its new velocity for the
    rest of the step; an arriving puck stops where its path touched the racket (which may go on into it).

    Returns:
        The rackets, the puck ``x, y, vx, vy`` and its spin after the contact.
    """
    x, y, angle, vx, vy, omega = rackets
    kx, ky, kvx, kvy = puck
    hx, hy, nx, ny, ex, ey, qx, qy = touch.hx, touch.hy, touch.nx, touch.ny, touch.ex, touch.ey, touch.qx, touch.qy
    px, py = hx * ex + hy * qx - nx * PUCK_RADIUS, hx * ey + hy * qy - ny * PUCK_RADIUS
    px, py = px + face_x * PLAYER_CENTROID_BEHIND, py + face_y * PLAYER_CENTROID_BEHIND  # from the centroid
    ux, uy = kvx - (vx - omega * py), kvy - (vy + omega * px)  # puck velocity relative to the touched point
    dvx, dvy, recoil_x, recoil_y, recoil_omega, dspin = impulse(ux, uy, spin, nx, ny, px, py)
    spin = spin + (dspin * contact).sum(0)
    arrive_vx, arrive_vy = kvx, kvy
    kvx, kvy = kvx + (dvx * contact).sum(0), kvy + (dvy * contact).sum(0)
    vx, vy, omega = vx + recoil_x * contact, vy + recoil_y * contact, omega + recoil_omega * contact
    x, y, angle = x + recoil_x * contact * DT, y + recoil_y * contact * DT, angle + recoil_omega * contact * DT
    rest_x, rest_y = touch.ox + hx * ex + hy * qx, touch.oy + hx * ey + hy * qy
    after = contact * ((1.0 - touch.when) * DT)
    until = (arrive * touch.when).sum(0) * DT
    placed = contact + arrive
    kx = kx * (1.0 - placed.sum(0)) + (rest_x * contact).sum(0) + kvx * after.sum(0)
    ky = ky * (1.0 - placed.sum(0)) + (rest_y * contact).sum(0) + kvy * after.sum(0)
    kx, ky = kx + (start_x + arrive_vx * until) * arrive.sum(0), ky + (start_y + arrive_vy * until) * arrive.sum(0)
    return (x, y, angle, vx, vy, omega), (kx, ky, kvx, kvy), spin


def bounce(position: Tensor, velocity: Tensor, across: Tensor, spin: Tensor, limit: Tensor | float,
           turn: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Reflect a puck coordinate ``[B]`` that is past ``+-limit`` back inside: ``position -> sign * (limit - e *
    overshoot)``, ``velocity -> -sign * e * |velocity|`` (``e`` = ``RESTITUTION``, 0 below
    ``RESTITUTION_THRESHOLD``); Box2D's friction impulse (``FRICTION_WALL``, at most stopping the sliding of the
    puck's rim on the wall) changes the velocity ``across`` (along the wall) and the puck's ``spin`` (rad/s).
    ``turn``: +1 for the end walls (x), -1 for the long walls (y): the sign of the rim's speed ``spin *
    PUCK_RADIUS`` along the wall at the wall of positive ``position``."""
    over = position.abs() - limit
    hit = (over > 0).float()
    sign = position.sign() * hit
    keep = 1.0 - hit
    speed = velocity.abs()
    e = RESTITUTION * (speed > RESTITUTION_THRESHOLD).float()
    slide = across + spin * (PUCK_RADIUS * turn) * sign
    rub = -torch.minimum(slide.abs() / 3.0, FRICTION_WALL * (1.0 + e) * speed) * slide.sign() * hit
    return (position * keep + sign * (limit - e * over), velocity * keep - sign * (e * speed), across + rub,
            spin + rub * (2.0 * turn / PUCK_RADIUS) * sign)


def walls_and_goals(puck: Puck, spin: Tensor) -> tuple[Puck, Tensor, Tensor]:
    """The puck off the walls (the end walls are open in the goal mouth), then the goals.

    Returns:
        The puck ``x, y, vx, vy``, its spin and ``winner`` ``[B]``: 1 past the goal line at x > 0 (player 1
        scored), -1 at x < 0, else 0.
    """
    kx, ky, kvx, kvy = puck
    mouth = (ky.abs() < GOAL_HALF_WIDTH).float()
    limit_x = PUCK_X_LIMIT + mouth * (NO_LIMIT - PUCK_X_LIMIT)
    kx, kvx, kvy, spin = bounce(kx, kvx, kvy, spin, limit_x, 1.0)
    ky, kvy, kvx, spin = bounce(ky, kvy, kvx, spin, PUCK_Y_LIMIT, -1.0)
    winner = kx.sign() * ((kx.abs() > GOAL_X).float() * mouth)  # [B]
    return (kx, ky, kvx, kvy), spin, winner
