"""Puck against racket: the original's racket polygon, a swept (continuous-time) contact test and the impulse.

The racket is the original's ``RACKETPOLY`` times ``RACKETFACTOR`` / ``SCALE``: a convex heptagon 0.8 m tall
whose flat front face is 0.1 m ahead of the body origin and whose pointed back is 0.42 m behind it, in the
player's own frame (x towards the opponent, rotated by the racket's angle). The puck's centre touches the
racket when it is within ``ROUNDING`` (the puck's radius plus Box2D's polygon skin) of the polygon.

Batched over any leading shape: the functions take and return tensors of one shape (``[2, B]`` in the env: one
plane per player); the racket's 7 edges and 7 corners are a leading dim of size 7 inside.
"""

from __future__ import annotations

import torch
from torch import Tensor

from envs.hockey.constants import (
    FRICTION_RACKET,
    PLAYER_INERTIA,
    PLAYER_MASS,
    POLYGON_SKIN,
    PUCK_MASS,
    PUCK_RADIUS,
    RACKET_VERTICES,
    RESTITUTION,
    RESTITUTION_THRESHOLD,
)

ROUNDING = PUCK_RADIUS + POLYGON_SKIN
_INF = float("inf")
# no point farther than this from the racket's origin is within ROUNDING of it (its farthest corner + margin)
_REACH = max((x * x + y * y) ** 0.5 for x, y in RACKET_VERTICES) + ROUNDING + 1e-3


def _racket_features(device: torch.device) -> tuple[Tensor, ...]:
    """Corners ``vx, vy``, outward edge normals ``nx, ny``, edge directions ``tx, ty`` and edge lengths, ``[7, 1]``
    each (edge i runs from corner i to corner i + 1, counter-clockwise)."""
    v = torch.tensor(RACKET_VERTICES, dtype=torch.float32, device=device)
    edge = v.roll(-1, 0) - v
    length = edge.norm(dim=-1)
    t = edge / length.unsqueeze(-1)
    n = torch.stack([t[:, 1], -t[:, 0]], -1)  # counter-clockwise: the outward normal is the edge turned right
    return tuple(c.reshape(7, 1) for c in (v[:, 0], v[:, 1], n[:, 0], n[:, 1], t[:, 0], t[:, 1], length))


_FEATURES: dict[torch.device, tuple[Tensor, ...]] = {}


def racket_features(device: torch.device) -> tuple[Tensor, ...]:
    """:func:`_racket_features`, cached per device."""
    if device not in _FEATURES:
        _FEATURES[device] = _racket_features(device)
    return _FEATURES[device]


def _pick(feature: Tensor, index: Tensor) -> Tensor:
    """``feature[index]`` elementwise: ``feature`` ``[7, 1, ...]`` (one value per edge or corner), ``index`` int64
    ``S`` in ``[0, 7)``; returns ``S``."""
    return feature.expand(7, *index.shape).gather(0, index.unsqueeze(0)).squeeze(0)


def _start_inside(ax: Tensor, ay: Tensor, out0: Tensor, features: tuple[Tensor, ...]) -> tuple[Tensor, Tensor, Tensor]:
    """Whether a start ``a`` (shape ``S``) lies inside the rounded racket, and Box2D's polygon-circle normal there
    (the edge of largest separation, or the nearest corner of that edge beyond its ends).

    ``out0``: ``[7, *S]`` signed distance of the start from each edge's line; ``features``: the racket's
    :func:`racket_features` viewed as ``[7, 1, ...]``.
    """
    vx, vy, nx, ny, tx, ty, length = features
    separation, face = out0.max(0)
    fvx, fvy, ftx, fty, flen = (_pick(c, face) for c in (vx, vy, tx, ty, length))
    u = (ax - fvx) * ftx + (ay - fvy) * fty
    end_x, end_y = fvx + ftx * flen, fvy + fty * flen
    beyond_start, beyond_end = u < 0, u > flen
    px = torch.where(beyond_start, fvx, torch.where(beyond_end, end_x, ax))
    py = torch.where(beyond_start, fvy, torch.where(beyond_end, end_y, ay))
    off_x, off_y = ax - px, ay - py
    off = (off_x * off_x + off_y * off_y).sqrt()
    in_corner = (beyond_start | beyond_end) & (separation > 0)
    face_nx, face_ny = _pick(nx, face), _pick(ny, face)
    safe = off.clamp_min(1e-9)
    inside = torch.where(in_corner, off < ROUNDING, separation < ROUNDING)
    start_nx = torch.where(in_corner, off_x / safe, face_nx)
    start_ny = torch.where(in_corner, off_y / safe, face_ny)
    return inside, start_nx, start_ny


def sweep(ax: Tensor, ay: Tensor, dx: Tensor, dy: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """When the puck's centre, moving from ``a`` by ``d`` (racket frame, metres; the motion relative to the racket
    over one step), first comes within ``ROUNDING`` of the racket, and the outward normal there.

    The rounded racket is the union of the polygon, one slab of depth ``ROUNDING`` on each edge and a disc of
    radius ``ROUNDING`` on each corner, all convex, so the first entry is the earliest entry into one of them.
    A centre that starts inside (the racket swung into the puck, or a shot leaving its holder) touches at time
    0 with Box2D's normal for a circle overlapping a polygon: the edge of largest separation, or the nearest
    corner of that edge when the centre lies beyond the edge's ends.

    Args:
        ax: start x (m), shape ``S`` (e.g. ``[2, B]``), as ``ay``, ``dx`` and ``dy``.
        ay: start y (m).
        dx: displacement x (m).
        dy: displacement y (m).

    Returns:
        ``touch`` (bool ``S``), ``time`` (in ``[0, 1]``, fraction of the step; 1 where no touch) and the unit
        outward normal ``nx, ny`` at the touching point (racket frame).
    """
    vx, vy, nx, ny, tx, ty, length = racket_features(ax.device)
    shape = (7,) + (1,) * ax.dim()
    vx, vy, nx, ny, tx, ty, length = (c.view(shape) for c in (vx, vy, nx, ny, tx, ty, length))
    a_x, a_y, d_x, d_y = ax.unsqueeze(0), ay.unsqueeze(0), dx.unsqueeze(0), dy.unsqueeze(0)
    # ---- edges: cross the line at ROUNDING outside the edge, between the edge's ends
    wx, wy = a_x - vx, a_y - vy  # start relative to each corner [7, *S]
    out0 = wx * nx + wy * ny  # signed distance of the start from each edge's line
    rate = d_x * nx + d_y * ny
    t_edge = (ROUNDING - out0) / torch.where(rate < 0, rate, torch.full_like(rate, -1.0))
    along = (wx + d_x * t_edge) * tx + (wy + d_y * t_edge) * ty
    edge_ok = (rate < 0) & (out0 >= ROUNDING) & (t_edge <= 1.0) & (along >= 0) & (along <= length)
    t_edge = torch.where(edge_ok, t_edge, _INF)
    # ---- corners: enter the disc of radius ROUNDING around each corner
    dd = (d_x * d_x + d_y * d_y).clamp_min(1e-12)
    wd = wx * d_x + wy * d_y
    c = wx * wx + wy * wy - ROUNDING * ROUNDING
    disc = wd * wd - dd * c
    t_corner = (-wd - disc.clamp_min(0.0).sqrt()) / dd
    corner_ok = (wd < 0) & (c >= 0) & (disc >= 0) & (t_corner <= 1.0)
    t_corner = torch.where(corner_ok, t_corner.clamp_min(0.0), _INF)
    times = torch.cat([t_edge, t_corner])  # [14, *S]
    time, which = times.min(0)
    hit = time <= 1.0
    at_x, at_y = ax + dx * time.clamp_max(1.0), ay + dy * time.clamp_max(1.0)
    # normal: the edge's normal, or from the corner to the touching point
    edge, corner = which.clamp_max(6), (which - 7).clamp_min(0)
    is_edge = which < 7
    hit_nx = torch.where(is_edge, _pick(nx, edge), (at_x - _pick(vx, corner)) / ROUNDING)
    hit_ny = torch.where(is_edge, _pick(ny, edge), (at_y - _pick(vy, corner)) / ROUNDING)
    inside, start_nx, start_ny = _start_inside(ax, ay, out0, (vx, vy, nx, ny, tx, ty, length))
    touch = hit | inside
    time = torch.where(inside, torch.zeros_like(time), torch.where(hit, time, torch.ones_like(time)))
    return touch, time, torch.where(inside, start_nx, hit_nx), torch.where(inside, start_ny, hit_ny)


def sweep_near(ax: Tensor, ay: Tensor, dx: Tensor, dy: Tensor, also: Tensor | None = None,
               select: bool | None = None) -> tuple[Tensor, ...]:
    """:func:`sweep` on the elements whose path passes within reach of the racket (or flagged in ``also``), the
    others set to no touch (time 1, normal 0): the same result, at the cost of a path-to-origin distance for
    most elements (a puck is near a racket in a small share of the steps).

    Args:
        ax: as :func:`sweep`, one shape ``S`` for the four.
        ay: as :func:`sweep`.
        dx: as :func:`sweep`.
        dy: as :func:`sweep`.
        also: bool ``S``, elements to test whatever their distance, or None.
        select: sweep only the near elements, picked out with ``nonzero`` (a host read: a GPU stream waits for
            it), or sweep all and keep the near ones' answers; default: select on a CPU only.
    """
    dd = (dx * dx + dy * dy).clamp_min(1e-12)
    along = (-(ax * dx + ay * dy) / dd).clamp(0.0, 1.0)
    cx, cy = ax + dx * along, ay + dy * along
    near = cx * cx + cy * cy < _REACH**2
    if also is not None:
        near = near | also
    if not (ax.device.type == "cpu" if select is None else select):
        touch, time, nx, ny = sweep(ax, ay, dx, dy)
        return (touch & near, torch.where(near, time, 1.0), torch.where(near, nx, 0.0), torch.where(near, ny, 0.0))
    flat = near.reshape(-1).nonzero().squeeze(-1)
    touch = torch.zeros(ax.numel(), dtype=torch.bool, device=ax.device)
    time = torch.ones(ax.numel(), device=ax.device)
    nx, ny = torch.zeros(ax.numel(), device=ax.device), torch.zeros(ax.numel(), device=ax.device)
    if flat.numel():
        parts = sweep(*(v.reshape(-1).index_select(0, flat) for v in (ax, ay, dx, dy)))
        for whole, part in zip((touch, time, nx, ny), parts, strict=True):
            whole.index_copy_(0, flat, part)
    return tuple(v.view(ax.shape) for v in (touch, time, nx, ny))


def impulse(ux: Tensor, uy: Tensor, spin: Tensor, nx: Tensor, ny: Tensor, rx: Tensor, ry: Tensor) -> tuple[Tensor, ...]:
    """Box2D's contact impulse between the puck and a racket, solved exactly for one contact point.

    Nothing if they separate (``u . n >= 0``). Otherwise the normal impulse reverses the normal relative velocity
    with restitution ``RESTITUTION`` (0 below ``RESTITUTION_THRESHOLD``), and Coulomb friction
    (``FRICTION_RACKET`` times the normal impulse at most) stops the sliding of the puck's rim (its velocity plus
    its ``spin``) on the racket; both act on the puck (``PUCK_MASS``, a disc) and, opposite, on the racket
    (``PLAYER_MASS``, ``PLAYER_INERTIA`` about its centroid): a 48 m/s shot that is caught pushes the racket back
    by 1.5 m/s.

    All arguments have one shape ``S`` (``spin`` may broadcast).

    Args:
        ux: the puck's velocity relative to the touched point of the racket, x (m/s).
        uy: the same, y (m/s).
        spin: the puck's angular velocity (rad/s).
        nx: unit normal at the touched point, racket -> puck, x.
        ny: the same, y.
        rx: the touched point relative to the racket's centroid, x (m).
        ry: the same, y (m).

    Returns:
        The puck's velocity change ``dvx, dvy``, the racket's ``racket_dvx, racket_dvy`` (m/s), its angular
        velocity change ``racket_domega`` and the puck's ``dspin`` (rad/s), each ``S``.
    """
    approach = ux * nx + uy * ny
    closing = (approach < 0).float()
    bounce = (1.0 + RESTITUTION * (approach < -RESTITUTION_THRESHOLD).float()) * closing
    tx, ty = -ny, nx
    r_n, r_t = rx * ny - ry * nx, rx * ty - ry * tx  # r x n, r x t
    normal = -bounce * approach / (1.0 / PUCK_MASS + 1.0 / PLAYER_MASS + r_n * r_n / PLAYER_INERTIA)
    slide = ux * tx + uy * ty - spin * PUCK_RADIUS  # the puck's rim (at -PUCK_RADIUS * n) along t
    tangent = -slide / (3.0 / PUCK_MASS + 1.0 / PLAYER_MASS + r_t * r_t / PLAYER_INERTIA)
    limit = FRICTION_RACKET * normal
    tangent = torch.maximum(torch.minimum(tangent, limit), -limit)
    jx, jy = normal * nx + tangent * tx, normal * ny + tangent * ty  # impulse on the puck, N s
    return (jx / PUCK_MASS, jy / PUCK_MASS, -jx / PLAYER_MASS, -jy / PLAYER_MASS,
            -(rx * jy - ry * jx) / PLAYER_INERTIA, -tangent * (2.0 / (PUCK_MASS * PUCK_RADIUS)))


def distance_to_racket(px: Tensor, py: Tensor) -> Tensor:
    """Distance (metres) of points (racket frame, any shape ``S``) from the racket polygon, 0 inside."""
    vx, vy, nx, ny, tx, ty, length = racket_features(px.device)
    shape = (7,) + (1,) * px.dim()
    vx, vy, tx, ty, length = (c.view(shape) for c in (vx, vy, tx, ty, length))
    nx, ny = nx.view(shape), ny.view(shape)
    wx, wy = px.unsqueeze(0) - vx, py.unsqueeze(0) - vy
    inside = ((wx * nx + wy * ny) <= 0).all(0)
    u = ((wx * tx + wy * ty).clamp(min=torch.zeros_like(length), max=length))
    ex, ey = wx - tx * u, wy - ty * u
    distance = (ex * ex + ey * ey).sqrt().amin(0)
    return torch.where(inside, torch.zeros_like(distance), distance)
