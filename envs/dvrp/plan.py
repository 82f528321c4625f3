"""The plan tensor of the insertion oracle and its local search: its channels, ``[9, L, M, B]`` (per position of every
route of every row: six node channels, then three derived by :func:`schedule`), the schedule arithmetic and the
cheapest insertion's (:func:`price`, :func:`insert`; Savelsbergh 1992, "The vehicle routing problem with time
windows: minimizing route duration", ORSA J. Computing 4(2))."""

from __future__ import annotations

import torch
from torch import Tensor


def schedule(x: Tensor, y: Tensor, ready: Tensor, due: Tensor, service: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Legs, earliest and latest service starts of routes given position-wise node data ``[L, ...]``.

    Position 0 is the start depot, a route's end depot follows its last customer, later positions are
    padding (depot coordinates, zero service, non-binding due time). With ``c_j = service_{j-1} +
    leg_{j-1}`` and ``C = cumsum(c)``, the forward recursion ``start_j = max(ready_j, start_{j-1} +
    c_j)`` is ``C_j + cummax(ready - C)_j`` and the backward one ``latest_j = min(due_j, latest_{j+1}
    - c_{j+1})`` is ``C_j + reverse-cummin(due - C)_j`` (Savelsbergh 1992): no loop over positions.

    Returns:
        ``leg`` (distance from position j to j + 1, 0 at the last), ``start``, ``latest``; each ``[L, ...]``.
    """
    dx, dy = x[1:] - x[:-1], y[1:] - y[:-1]
    leg = torch.sqrt(dx * dx + dy * dy)
    cum = torch.cumsum(torch.cat([torch.zeros_like(x[:1]), service[:-1] + leg], 0), 0)
    start = cum + torch.cummax(ready - cum, 0).values
    latest = cum + torch.cummin((due - cum).flip(0), 0).values.flip(0)
    return torch.cat([leg, torch.zeros_like(x[:1])], 0), start, latest


# channels of the plan tensor [channel, L, M, B]: six per node, then three derived by `schedule`
X, Y, READY, DUE, SERVICE, NODE, START, LATEST, LEG = range(9)

PAD_DUE = 1.0e6  # due time of padding positions past a route's end depot (never binding)
BIG = 1.0e15  # penalty per time unit of window violation in the vectorised feasibility test
FEASIBLE = 1.0e6  # a penalised insertion cost below this (km) is feasible


def _penalised(delta: Tensor, arrive: Tensor, bound: Tensor, start: Tensor, end: Tensor) -> Tensor:
    """Insertion cost raised by ``BIG`` per time unit of violation of the window [start, end]."""
    violation = torch.maximum(arrive - end, start - bound).clamp_min(0.0)
    return torch.add(delta, violation, alpha=BIG)


def price(plan: Tensor, length: Tensor, load: Tensor, capacity: Tensor, x: Tensor, y: Tensor, service: Tensor,
          demand: Tensor, ends: Tensor, margin: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Cheapest insertion of one request per row under W windows (the quote's arithmetic).

    Args:
        plan: ``[9, S, M, B]`` the positions in use of the plan. length / load / capacity: ``[M, B]`` (a
            vehicle out of the day's fleet has capacity -1).
        x: ``[B]`` the request's coordinate (km). y: ``[B]``. service: ``[B]``. demand: ``[B]``.
        ends: ``[2, W, B]`` window starts and ends.
        margin: safety margin (time units).

    Returns:
        ``delta`` (insertion cost), ``arrive`` (arrival at the request, ``BIG``-raised where the edge is
        unusable) and ``bound`` (latest service start there), each ``[S - 1, M, B]`` per edge, and the
        penalised cheapest cost per window ``[W, B]`` (>= ``FEASIBLE`` where no insertion is feasible).
    """
    dx, dy = plan[X] - x, plan[Y] - y
    du = torch.sqrt(dx * dx + dy * dy)  # [S, M, B]
    d_prev, d_next = du[:-1], du[1:]
    delta = d_prev + d_next - plan[LEG, :-1]  # [E, M, B]
    arrive = plan[START, :-1] + plan[SERVICE, :-1] + d_prev + margin
    bound = plan[LATEST, 1:] - service - d_next - margin
    fits = load + demand <= capacity  # [M, B]
    edges = torch.arange(plan.shape[1] - 1, device=plan.device).view(-1, 1, 1)
    edge_ok = (edges <= length) & fits & (arrive <= bound)
    # max(e, a) <= min(l, b) splits into the window-free a <= b (in edge_ok) and, per window,
    # a <= l and e <= b: the violation max(a - l, e - b) must be <= 0 (margins folded into a, b).
    # Float arithmetic instead of masks: torch.where on large tensors is several times slower here.
    arrive = torch.add(arrive, (~edge_ok).to(plan.dtype), alpha=BIG)
    best = _penalised(delta.unsqueeze(2), arrive.unsqueeze(2), bound.unsqueeze(2), ends[0], ends[1])
    return delta, arrive, bound, best.amin(dim=(0, 1))


def insert(plan: Tensor, length: Tensor, load: Tensor, delta: Tensor, arrive: Tensor, bound: Tensor,
           window: Tensor, accept: Tensor, column: Tensor, demand: Tensor) -> tuple[Tensor, ...]:
    """Insert the quoted request where ``accept`` (the commit's arithmetic).

    Every route of every row is rewritten: the chosen one gets the request at its cheapest feasible
    position, the others (and rows that did not accept) an insert position past the end. Blending with
    0/1 weights (``lerp`` is exact there) avoids row selection, gathers and host syncs.

    Args:
        plan: ``[9, S + 1, M, B]`` (one position more than quoted). length / load: ``[M, B]``.
        delta: ``[S - 1, M, B]`` from :func:`price`, as are ``arrive`` and ``bound``.
        arrive: ``[S - 1, M, B]``.
        bound: ``[S - 1, M, B]``.
        window: ``[2, B]`` the agreed window.
        accept: bool ``[B]``. column: ``[6, B]`` the request's node channels. demand: ``[B]``.

    Returns:
        the new plan slab, length, load, the plan-cost increase ``[B]`` and the rows whose accepted
        window had no feasible insertion (bool ``[B]``, must be all False).
    """
    cost = _penalised(delta, arrive, bound, window[0], window[1])  # [E, M, B]
    m = cost.shape[1]
    best, flat = cost.flatten(0, 1).min(0)
    edge, veh = flat // m, flat % m
    span = plan.shape[1]
    chosen = accept & (veh == torch.arange(m, device=veh.device).unsqueeze(-1))  # [M, B]
    pos = torch.where(chosen, edge + 1, span)
    j = torch.arange(span, device=plan.device).view(-1, 1, 1)
    node = plan[:START]  # [6, S + 1, M, B]
    shifted = torch.cat([node[:, :1], node[:, :-1]], 1)
    node = torch.lerp(node, shifted, (j > pos).to(plan.dtype))
    column = torch.cat([column[:READY], window, column[DUE + 1:]])
    node = torch.lerp(node, column[:, None, None, :].expand_as(node), (j == pos).to(plan.dtype))
    leg, start, latest = schedule(node[X], node[Y], node[READY], node[DUE], node[SERVICE])
    new = torch.cat([node, torch.stack([start, latest, leg])])
    increase = torch.where(accept, delta.flatten(0, 1).gather(0, flat.unsqueeze(0)).squeeze(0), 0.0)
    return new, length + chosen.long(), load + chosen * demand, increase, accept & (best >= FEASIBLE)
