"""Batched local search on the insertion oracle's plan tensor: every row of a batch improved at once, a fixed number
of passes, no host read, so it runs unchanged on a GPU and keeps every row in step.

A pass evaluates, for every row, three neighbourhoods of the classical VRPTW local search (Savelsbergh 1992, "The
vehicle routing problem with time windows: minimizing route duration", ORSA J. Computing 4(2); the moves of Vidal et
al. 2013, "A hybrid genetic algorithm with adaptive diversity management for a large class of vehicle routing
problems with time windows", Computers & Operations Research 40(1)):

* **relocate**: a customer, or a segment of 2-3 consecutive customers (or-opt), moved to another place in its own
  route or in another route;
* **exchange**: two customers of different routes swapped;
* **2-opt\\***: the tails of two routes swapped after a customer of each (a tail to an empty vehicle splits a route,
  one appended after the last customer of another joins two);
* **2-opt** (with ``reversal``): a segment of 2 to ``reversal`` customers of one route visited backwards, every
  window on the way checked by walking it (the cut-off's re-optimisation);

restricted to **granular neighbourhoods** (Toth and Vigo 2003; Vidal et al. 2013): a customer is only moved next to
one of its K most related customers in the plan, near in km and in time (:func:`neighbours`), or to the start of a
route, so a pass costs O(B·N·K), not O(B·N²·M²). The best improving move of each row
(its plan-cost decrease, km) is applied where it improves by more than a tolerance; rows without one keep their plan.
:func:`ruin_and_recreate` escapes the local optima this leaves (customers near one another taken out and put back by
cheapest insertion, then swept; kept where shorter).

Every move is checked with the forward / backward slack arithmetic of the insertion oracle
(:func:`envs.dvrp.plan.schedule`: earliest start ``START`` and latest start ``LATEST`` per position), with its safety
``margin`` on every comparison, so that every plan it returns is feasible in exact arithmetic (windows, capacity,
back at the depot by the horizon). A move within one route is judged on the route as it is (the earliest starts
before the move and the latest starts after it): conservative, never infeasible, as removing a customer never delays
a Euclidean route.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from envs.dvrp.plan import (
    DUE,
    FEASIBLE,
    LATEST,
    LEG,
    NODE,
    PAD_DUE,
    READY,
    SERVICE,
    START,
    X,
    Y,
    insert,
    price,
    schedule,
)

_IMPROVES = 1e-3  # km: a move must shorten the plan by more than this (float32 rounding of a move's km is below)
_OFF = 1.0e9  # the cost of a candidate that is not allowed


# weights of the time terms of the neighbourhoods' relatedness (Vidal et al. 2013, sec. 4.2, their gamma_WT and
# gamma_TW; 0.2 and 1.0 there). Measured with clairvoyant and ruins at the cut-off (2026-11-28): 0.5 and 2.0 gave
# 1513.1 on 32 N=30 days against 1502.4 for km alone and 1500.3 for 0.2 / 1.0; 1522.4 against 1517.4 on 128 days
WAIT_WEIGHT, LATE_WEIGHT = 0.5, 2.0


def neighbours(xy: Tensor, k: int, routed: Tensor | None = None, windows: Tensor | None = None,
               of: Tensor | None = None) -> Tensor:
    """Each customer's ``k`` most related other customers: int64 ``[K, N, B]`` from coordinates ``[B, N, 2]`` (km);
    with ``of`` (int64 ``[U, B]``), only those customers' ``[K, U, B]`` (O(B·U·N), not O(B·N²)).

    Related is near in km, and with ``windows`` (``[3, N, B]``: each customer's window start, end and service time)
    also in time: customer j after i costs ``d_ij + WAIT_WEIGHT * wait + LATE_WEIGHT * late`` (the least wait for
    j's window and the least lateness at it after serving i; Vidal et al. 2013's granular neighbourhoods), the
    cheaper order counts. With ``routed`` (bool ``[N, B]``) those in the plan come first (one not in it, refused or
    not arrived yet, takes no move: a neighbourhood of routed ones keeps all K candidates useful)."""
    b, n = xy.shape[0], xy.shape[1]
    if of is None:
        of = torch.arange(n, device=xy.device).view(-1, 1).expand(-1, b)
    rows = of.t()  # [B, U]
    related = torch.cdist(xy.gather(1, rows.unsqueeze(-1).expand(-1, -1, 2)), xy)  # [B, U, N]
    if windows is not None:
        ready, due, service = (w.t() for w in windows)  # [B, N] each
        r_i, d_i, s_i = (w.gather(1, rows).unsqueeze(2) for w in (ready, due, service))  # [B, U, 1]
        r_j, d_j, s_j = ready.unsqueeze(1), due.unsqueeze(1), service.unsqueeze(1)  # [B, 1, N]
        i_first = (WAIT_WEIGHT * (r_j - d_i - s_i - related).clamp_min(0.0)
                   + LATE_WEIGHT * (r_i + s_i + related - d_j).clamp_min(0.0))
        j_first = (WAIT_WEIGHT * (r_i - d_j - s_j - related).clamp_min(0.0)
                   + LATE_WEIGHT * (r_j + s_j + related - d_i).clamp_min(0.0))
        related = related + torch.minimum(i_first, j_first)
    if routed is not None:
        related = related + (~routed).t().unsqueeze(1) * _OFF
    related = related.scatter(2, rows.unsqueeze(2), torch.inf)  # never itself
    return related.topk(min(k, n - 1), dim=2, largest=False).indices.permute(2, 1, 0).contiguous()


def routed_windows(plan: Tensor, num_customers: int) -> tuple[Tensor, Tensor]:
    """The customers in the plan ``[9, L, M, B]`` (bool ``[N, B]``) and their windows as :func:`neighbours` takes
    them (``[3, N, B]``: agreed window start, end, service time; 0 for those not in it)."""
    node = plan[NODE].flatten(0, 1).long()  # [LM, B]
    index = node.where(node >= 0, num_customers)
    found = torch.zeros(num_customers + 1, plan.shape[-1], dtype=torch.bool, device=plan.device)
    routed = found.scatter(0, index, True)[:-1]
    channels = plan[READY:SERVICE + 1].flatten(1, 2)  # [3, LM, B] (READY, DUE, SERVICE: a slice, no index tensor)
    windows = torch.zeros(3, num_customers + 1, plan.shape[-1], dtype=plan.dtype, device=plan.device)
    return routed, windows.scatter(1, index.unsqueeze(0).expand(3, -1, -1), channels)[:, :-1]


def improve(plan: Tensor, length: Tensor, load: Tensor, capacity: Tensor, demand: Tensor, near: Tensor,
            passes: int, margin: float, focus: Tensor | None = None, segments: tuple[int, ...] = (1, 2, 3),
            reversal: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """``passes`` passes of the local search (see the module docstring) on every row, moving the customers
    ``focus`` (all by default).

    Args:
        plan: ``[9, L, M, B]`` the oracle's plan tensor (channels of :mod:`envs.dvrp.oracle`); NODE holds each
            customer's index in ``[0, N)``, -1 at depots and padding.
        length: int64 ``[M, B]`` customers per route. load: ``[M, B]``. capacity: ``[M, B]`` (-1 out of the day's
            fleet: nothing fits). demand: ``[N, B]`` each customer's demand. near: int64 ``[K, N, B]``
            (:func:`neighbours`). margin: the oracle's safety margin (time units).
        focus: int64 ``[U, B]``: the customers whose moves are tried (-1: none), e.g. the one just booked and its
            neighbours; a pass costs O(B·U·K) and applies one move per row.
        segments: the lengths of the segments a relocate moves (1: the customer alone; 2, 3: or-opt).
        reversal: the longest segment a 2-opt move within a route reverses (below 2: no such move); a pass costs
            O(B·U·K·reversal) more.

    Returns:
        The improved plan, lengths and loads (new tensors; the plan cost is the sum of its ``LEG`` channel).
    """
    if focus is None:
        focus = torch.arange(demand.shape[0], device=plan.device).view(-1, 1).expand(-1, plan.shape[-1])
    for _ in range(passes):
        plan, length, load = _one_pass(plan, length, load, capacity, demand, near, margin, focus, segments, reversal)
    return plan, length, load


def sweep(plan: Tensor, length: Tensor, load: Tensor, capacity: Tensor, demand: Tensor, near: Tensor,
          sweeps: int, margin: float, chunk: int = 8, segments: tuple[int, ...] = (1, 2, 3), reversal: int = 0
          ) -> tuple[Tensor, Tensor, Tensor]:
    """``sweeps`` sweeps over every customer, ``chunk`` customers per pass (one pass per chunk, in index order):
    N / chunk moves per row per sweep for the cost of one pass over all customers (which applies one). The
    re-optimisation of a whole plan (the day's cut-off). Arguments as :func:`improve`."""
    n, b = demand.shape
    ids = torch.arange(n, device=plan.device)
    for _ in range(sweeps):
        for first in range(0, n, chunk):
            focus = ids[first:first + chunk].view(-1, 1).expand(-1, b)
            plan, length, load = _one_pass(plan, length, load, capacity, demand, near, margin, focus, segments,
                                           reversal)
    return plan, length, load


def plan_cost(plan: Tensor) -> Tensor:
    """``[B]`` km of a plan: the sum of its legs."""
    return plan[LEG].sum(dim=(0, 1))


def _one_pass(plan: Tensor, length: Tensor, load: Tensor, capacity: Tensor, demand: Tensor, near: Tensor,
              margin: float, focus: Tensor, segments: tuple[int, ...], reversal: int = 0
              ) -> tuple[Tensor, Tensor, Tensor]:
    view = _View(plan, length, load, capacity, demand, near, focus)
    moves = [_relocate(view, margin, segments), _exchange(view, margin), _two_opt_star(view, margin)]
    if reversal >= 2:
        moves.append(_reverse(view, margin, reversal))
    costs = torch.stack([m[0] for m in moves])  # [kinds, B] each kind's best
    best, kind = costs.min(0)
    better = best < -_IMPROVES
    source = view.identity
    for index, (_, move_source) in enumerate(moves):
        source = torch.where(better & (kind == index), move_source(), source)
    new, new_length, new_load = view.rebuild(source)
    keep = plan_cost(new) < plan_cost(plan) - _IMPROVES / 2  # (the plan's own km, recomputed: never longer)
    return (torch.where(keep, new, plan), torch.where(keep, new_length, length), torch.where(keep, new_load, load))


# the per-customer features of a pass: the customer's own slot, its predecessor's and its successor's, its route's
(CX, CY, READY_, DUE_, SERVICE_, START_, LATEST_, LEG_, PX, PY, PSTART, PSERVICE, PLEG, NX, NY, NLATEST, DEMAND,
 ROUTE_LOAD, ROUTE_CAP, PREFIX) = range(20)


class _View:
    """One pass's view of the plan. Every slot ``(p, m)`` is flattened to ``s = p * M + m``; each customer's
    features (:data:`CX` ...) are gathered once into ``[F, N, B]`` (its own slot, the slots before and after it, its
    route's load and capacity, its route's load up to it), so a move's candidates read them with one gather from a
    table of N rows, and the per-route ones (the start depot, the first and last customer, the end depot) into
    ``[F, M, B]``."""

    def __init__(self, plan: Tensor, length: Tensor, load: Tensor, capacity: Tensor, demand: Tensor,
                 near: Tensor, focus: Tensor) -> None:
        _, big_l, m, b = plan.shape
        self.L, self.M, self.B, self.N, self.K, self.U = big_l, m, b, demand.shape[0], near.shape[0], focus.shape[0]
        device = plan.device
        self.flat = plan.reshape(9, big_l * m, b)
        slots = torch.arange(big_l * m, device=device).view(-1, 1)
        self.route_of, self.position_of = slots.remainder(m), slots.div(m, rounding_mode="floor")  # [LM, 1]
        self.identity = slots + torch.zeros(1, b, dtype=torch.long, device=device)
        node = plan[NODE].reshape(big_l * m, b).long()
        where = torch.full((self.N + 1, b), -1, dtype=torch.long, device=device)
        slot = where.scatter(0, node.where(node >= 0, self.N), self.identity)[:-1]  # [N, B]; -1: not routed
        route = slot.remainder(m)  # [N, B]
        self.slot_demand = demand.gather(0, node.clamp_min(0)) * (node >= 0)  # [LM, B]
        prefix = self.slot_demand.view(big_l, m, b).cumsum(0).view(big_l * m, b)
        own = self._at(slot)
        before, after = self._at(slot - m), self._at(slot + m)
        per_route = [load.gather(0, route), capacity.gather(0, route), prefix.gather(0, slot.clamp_min(0))]
        table = torch.stack([*(own[ch] for ch in (X, Y, READY, DUE, SERVICE, START, LATEST, LEG)),
                             *(before[ch] for ch in (X, Y, START, SERVICE, LEG)),
                             *(after[ch] for ch in (X, Y, LATEST)), demand, *per_route])  # [F, N, B]
        # the customers moved this pass (u, the focus) and their neighbours
        ids = focus.clamp_min(0)
        self.customers = _take(table, ids)  # [F, U, B]
        self.slot = slot.gather(0, ids).where(focus >= 0, -1)  # [U, B]
        self.routed, self.route = self.slot >= 0, self.slot.remainder(m)
        near = _take(near, ids)  # [K, U, B]
        self.near_slot, self.near_route = _take(torch.stack([slot, route]), near)  # [K, U, B] each
        self.neighbour = _take(table, near)  # [F, K, U, B]
        routes = torch.arange(m, device=device).view(-1, 1).expand(-1, b)
        self.end_slot = (length + 1) * m + routes  # [M, B]
        self.first, self.last = self._at(routes + m), self._at(length * m + routes)  # [9, M, B]
        self.start_depot, self.end_depot = self._at(routes), self._at(self.end_slot)
        self.load, self.capacity = load, capacity

    def _at(self, slot: Tensor) -> Tensor:
        """Every channel at ``slot`` (``[..., B]``; -1 reads slot 0): ``[9, ..., B]``."""
        return _take(self.flat, slot.clamp(0, self.L * self.M - 1))

    def rebuild(self, source: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The plan whose slot s holds the old slot ``source[s]`` (``[L * M, B]``), its schedule recomputed, with
        its lengths and loads."""
        node = _take(self.flat[:START], source).view(START, self.L, self.M, self.B)
        leg, start, latest = schedule(node[X], node[Y], node[READY], node[DUE], node[SERVICE])
        plan = torch.cat([node, torch.stack([start, latest, leg])])
        length = (plan[NODE] >= 0).sum(0)
        load = self.slot_demand.gather(0, source).view(self.L, self.M, self.B).sum(0)
        return plan, length, load


def _take(table: Tensor, index: Tensor) -> Tensor:
    """``table[:, index[..., b], b]`` for every channel: ``[C, *index.shape]`` from ``table`` ``[C, R, B]`` and int64
    ``index`` ``[..., B]`` in ``[0, R)``. One ``index_select`` of the flattened table (a ``gather`` with the index
    expanded over the channels took 2.5 times as long on one CPU thread)."""
    c, r, b = table.shape
    flat = index * b + torch.arange(b, device=index.device)
    return table.reshape(c, r * b).index_select(1, flat.reshape(-1)).view(c, *index.shape)


def _distance(xa: Tensor, ya: Tensor, xb: Tensor, yb: Tensor) -> Tensor:
    dx, dy = xa - xb, ya - yb
    return torch.sqrt(dx * dx + dy * dy)


def _fits(arrive: Tensor, bound: Tensor, ready: Tensor, due: Tensor) -> Tensor:
    """The insertion oracle's test: service can start in [ready, due] at ``arrive`` (margin included) or later,
    and by ``bound`` (the latest start that keeps the next node on time, margin included)."""
    return (torch.maximum(arrive, ready) <= torch.minimum(due, bound)) & (arrive <= bound)


def _pick(cost: Tensor, ok: Tensor) -> tuple[Tensor, Tensor]:
    """The best allowed candidate of each row: its cost ``[B]`` (``_OFF`` or more where none) and flat index ``[B]``."""
    best, index = torch.add(cost, (~ok).to(cost.dtype), alpha=_OFF).flatten(0, -2).min(0)  # (faster than a where)
    return best, index


def _segments(v: _View, k: int) -> dict[str, Tensor]:
    """The segments of ``k`` consecutive customers starting at each focus customer u (``[U, B]`` each): the first
    and last node's coordinates, the earliest-start arithmetic of the segment as a function of the arrival ``a`` at
    its first node (service at node i starts at ``max(a + shift_i, floor_i)``: it is on time while ``a <= latest``,
    and done at ``max(a + shift, floor) + service``), its demand, whether all k are customers, and the km taking it
    out of its route saves."""
    m, slot = v.M, v.slot
    nodes = [v._at(slot + i * m) for i in range(k + 1)]  # [9, U, B] each; the last one is the node after
    shift, floor = torch.zeros_like(nodes[0][X]), nodes[0][READY]
    latest = nodes[0][DUE]
    for prev, node in zip(nodes[:k - 1], nodes[1:k], strict=True):
        step = prev[SERVICE] + prev[LEG]
        shift, floor = shift + step, torch.maximum(floor + step, node[READY])
        latest = torch.minimum(latest, node[DUE] - shift)
    last, after, before = nodes[k - 1], nodes[k], v._at(slot - m)
    demand = v.slot_demand.gather(0, torch.stack([slot + i * m for i in range(k)]).clamp(0, v.L * m - 1).flatten(0, 1)
                                  ).view(k, *slot.shape).sum(0)
    whole = torch.stack([nodes[i][NODE] >= 0 for i in range(k)]).all(0) & (slot >= 0)
    gain = before[LEG] + last[LEG] - _distance(before[X], before[Y], after[X], after[Y])
    return dict(x=nodes[0][X], y=nodes[0][Y], x_last=last[X], y_last=last[Y], shift=shift, floor=floor,
                latest=latest, service=last[SERVICE], demand=demand, whole=whole, gain=gain)


def _relocate(v: _View, margin: float, lengths: tuple[int, ...]) -> tuple[Tensor, object]:
    """The best relocate of each row: a segment of ``k`` customers (k in ``lengths``: 1 the customer u, 2-3 or-opt)
    starting at u put after j, where j is a neighbour of u, the node before a neighbour, or a route's start depot
    (three groups of candidates, each ``[C, U, B]``, judged apart). Returns its cost change ``[B]`` and a maker of
    its slot map."""
    n, m = v.neighbour, v.M
    u_slot, u_route = v.slot.unsqueeze(0), v.route.unsqueeze(0)
    routes = torch.arange(m, device=n.device).view(-1, 1, 1).expand(-1, v.U, v.B)
    first, depot = v.first.unsqueeze(2), v.start_depot.unsqueeze(2)  # [9, M, 1, B]
    placed = v.near_slot >= 0
    groups = (  # (j: x, y, earliest finish; jn: x, y, latest start; leg j-jn; route, load, capacity; allowed; j's slot)
        ((n[CX], n[CY], n[START_] + n[SERVICE_]), (n[NX], n[NY], n[NLATEST]), n[LEG_], v.near_route,
         n[ROUTE_LOAD], n[ROUTE_CAP], placed, v.near_slot),  # after a neighbour
        ((n[PX], n[PY], n[PSTART] + n[PSERVICE]), (n[CX], n[CY], n[LATEST_]), n[PLEG], v.near_route,
         n[ROUTE_LOAD], n[ROUTE_CAP], placed, v.near_slot - m),  # before one
        ((depot[X], depot[Y], depot[START] + depot[SERVICE]), (first[X], first[Y], first[LATEST]), depot[LEG],
         routes, v.load.unsqueeze(1), v.capacity.unsqueeze(1), True, routes),  # at a route's start
    )
    found = []
    for k in lengths:
        seg = {key: value.unsqueeze(0) for key, value in _segments(v, k).items()}
        for j, jn, leg, route, load, cap, allowed, j_slot in groups:
            to_seg = _distance(j[0], j[1], seg["x"], seg["y"])
            from_seg = _distance(seg["x_last"], seg["y_last"], jn[0], jn[1])
            arrive = j[2] + to_seg + margin
            done = torch.maximum(arrive + seg["shift"], seg["floor"]) + seg["service"]
            same = route == u_route
            inside = same & (j_slot - u_slot >= -m) & (j_slot - u_slot <= (k - 1) * m)  # next to or in the segment
            ok = (allowed & seg["whole"] & ~inside & (same | (load + seg["demand"] <= cap))
                  & (arrive <= seg["latest"]) & (done + from_seg + margin <= jn[2]))
            best, index = _pick(to_seg + from_seg - leg - seg["gain"], ok)
            found.append((best, index, j_slot, k))
    best, group = torch.stack([f[0] for f in found]).min(0)

    def source() -> Tensor:
        index = torch.stack([f[1] for f in found]).gather(0, group.unsqueeze(0)).squeeze(0)
        j_slots = torch.stack([f[2].expand(-1, v.U, v.B).flatten(0, 1).gather(0, f[1].unsqueeze(0)).squeeze(0)
                               for f in found])
        k = torch.stack([torch.full_like(index, f[3]) for f in found]).gather(0, group.unsqueeze(0)).squeeze(0)
        u = v.slot.gather(0, index.remainder(v.U).unsqueeze(0)).squeeze(0)
        return _relocate_map(v, u, j_slots.gather(0, group.unsqueeze(0)).squeeze(0), k)

    return best, source


def _relocate_map(s: _View, u_slot: Tensor, j_slot: Tensor, k: Tensor) -> Tensor:
    """The slot map of moving the ``k`` customers from ``u_slot`` on to right after ``j_slot`` (``[B]`` each)."""
    m, top = s.M, s.L - 1
    pu, mu = u_slot.div(m, rounding_mode="floor"), u_slot.remainder(m)
    pj, mv = j_slot.div(m, rounding_mode="floor"), j_slot.remainder(m)
    p, r = s.position_of, s.route_of  # [LM, 1]
    same = mu == mv
    # the source route without the segment: positions from pu on take the one k further
    removed = torch.where((r == mu) & (p >= pu), (p + k).clamp_max(top), p)
    # where the segment goes in the target route after the removal: after j (k places earlier if j came after it)
    at = torch.where(same & (pj > pu), pj - k + 1, pj + 1)
    base = torch.where(same, removed, p)  # the target route's positions before the insertion
    later = torch.where(same & (p - k >= pu), p.clamp_max(top), p - k)  # the target's position p - k, as base has it
    inserted = (p >= at) & (p < at + k)
    target = torch.where(p < at, base, torch.where(inserted, pu + (p - at), later.clamp(0, top)))
    position = torch.where(r == mv, target, removed)
    route = torch.where((r == mv) & inserted, mu, r)
    return position * m + route


def _exchange(v: _View, margin: float) -> tuple[Tensor, object]:
    """The best swap of each row: customer u and its neighbour w, in different routes, take each other's places."""
    c, n = v.customers.unsqueeze(1), v.neighbour  # [F, 1, N, B], [F, K, N, B]
    ok = (v.routed.unsqueeze(0) & (v.near_slot >= 0) & (v.near_route != v.route.unsqueeze(0))
          & (c[ROUTE_LOAD] - c[DEMAND] + n[DEMAND] <= c[ROUTE_CAP])
          & (n[ROUTE_LOAD] - n[DEMAND] + c[DEMAND] <= n[ROUTE_CAP]))
    cost = -(c[PLEG] + c[LEG_] + n[PLEG] + n[LEG_])
    for host, guest in ((c, n), (n, c)):  # the guest between the host's predecessor and successor
        to_guest = _distance(host[PX], host[PY], guest[CX], guest[CY])
        from_guest = _distance(guest[CX], guest[CY], host[NX], host[NY])
        arrive = host[PSTART] + host[PSERVICE] + to_guest + margin
        bound = host[NLATEST] - guest[SERVICE_] - from_guest - margin
        ok = ok & _fits(arrive, bound, guest[READY_], guest[DUE_])
        cost = cost + to_guest + from_guest
    best, index = _pick(cost, ok)

    def source() -> Tensor:
        a = v.slot.gather(0, index.remainder(v.U).unsqueeze(0))
        b = v.near_slot.flatten(0, 1).gather(0, index.unsqueeze(0))
        slot = v.identity
        return torch.where(slot == a, b, torch.where(slot == b, a, slot))

    return best, source


def _two_opt_star(v: _View, margin: float) -> tuple[Tensor, object]:
    """The best tail swap of each row: u's route A continues with route B's tail from w on (w, a neighbour of u in
    another route, or B's end depot: two groups of candidates), and B's head up to the node h before w continues
    with A's tail after u."""
    c, n, m = v.customers, v.neighbour, v.M
    u = c.unsqueeze(1)  # [F, 1, N, B]
    end, last = v.end_depot.unsqueeze(2), v.last.unsqueeze(2)  # [9, M, 1, B]
    routes = torch.arange(m, device=c.device).view(-1, 1, 1)
    load, cap = v.load.unsqueeze(1), v.capacity.unsqueeze(1)
    groups = (  # (w: x, y, latest start; h: x, y, earliest finish, leg h-w; B's load up to h, B's load and capacity;
        #         B; allowed; w's slot)
        ((n[CX], n[CY], n[LATEST_]), (n[PX], n[PY], n[PSTART] + n[PSERVICE], n[PLEG]), n[PREFIX] - n[DEMAND],
         n[ROUTE_LOAD], n[ROUTE_CAP], v.near_route, v.near_slot >= 0, v.near_slot),
        ((end[X], end[Y], end[LATEST]), (last[X], last[Y], last[START] + last[SERVICE], last[LEG]), load, load, cap,
         routes, True, v.end_slot.unsqueeze(1)),
    )
    found = []
    for w, h, head_b, load_b, cap_b, route_b, allowed, w_slot in groups:
        u_to_w, h_to_next = _distance(u[CX], u[CY], w[0], w[1]), _distance(h[0], h[1], u[NX], u[NY])
        ok = (v.routed.unsqueeze(0) & (route_b != v.route.unsqueeze(0)) & allowed
              & (u[PREFIX] + load_b - head_b <= u[ROUTE_CAP]) & (head_b + u[ROUTE_LOAD] - u[PREFIX] <= cap_b)
              & (u[START_] + u[SERVICE_] + u_to_w + margin <= w[2]) & (h[2] + h_to_next + margin <= u[NLATEST]))
        best, index = _pick(u_to_w + h_to_next - u[LEG_] - h[3], ok)
        found.append((best, index, w_slot))
    best, group = torch.stack([f[0] for f in found]).min(0)

    def source() -> Tensor:
        index = torch.stack([f[1] for f in found]).gather(0, group.unsqueeze(0)).squeeze(0)
        w_slots = torch.stack([f[2].expand(-1, v.U, v.B).flatten(0, 1).gather(0, f[1].unsqueeze(0)).squeeze(0)
                               for f in found])
        a = v.slot.gather(0, index.remainder(v.U).unsqueeze(0)).squeeze(0)
        return _two_opt_map(v, a, w_slots.gather(0, group.unsqueeze(0)).squeeze(0))

    return best, source


def _two_opt_map(v: _View, a: Tensor, b: Tensor) -> Tensor:
    """The slot map of a tail swap: route A keeps up to ``a`` then takes B's tail from ``b``; B keeps up to the slot
    before ``b`` then takes A's tail after ``a`` (``[B]`` each)."""
    m, top = v.M, v.L - 1
    pa, ra = a.div(m, rounding_mode="floor"), a.remainder(m)
    pb, rb = b.div(m, rounding_mode="floor"), b.remainder(m)
    p, r = v.position_of, v.route_of
    from_b = (p - pa - 1 + pb).clamp(0, top)  # A after u: B's tail from w
    from_a = (p - pb + pa + 1).clamp(0, top)  # B from w's place on: A's tail after u
    position = torch.where((r == ra) & (p > pa), from_b, torch.where((r == rb) & (p >= pb), from_a, p))
    route = torch.where((r == ra) & (p > pa), rb, torch.where((r == rb) & (p >= pb), ra, r))
    return position * m + route


def _reverse(v: _View, margin: float, longest: int) -> tuple[Tensor, object]:
    """The best reversal of each row (2-opt within a route): the customers after a up to b visited backwards (2 to
    ``longest`` of them), a and b being u and a neighbour w of it in u's route, either first: edges (a, a+) and
    (b, b+) become (a, b) and (a+, b+). The reversed segment's windows are checked by walking it (``longest``
    steps over ``[K, U, B]``; the route after it by its latest starts)."""
    c, n, m = v.customers.unsqueeze(1), v.neighbour, v.M  # [F, 1, U, B], [F, K, U, B]
    u_slot = v.slot.unsqueeze(0).expand_as(v.near_slot)
    span = (v.near_slot - u_slot).div(m, rounding_mode="floor")  # positions from u to w (same route: exact)
    first = span > 0  # u is a, w is b; else w is a, u is b

    def pick(a_side: Tensor, b_side: Tensor) -> Tensor:
        return torch.where(first, a_side, b_side)

    a_done = pick(c[START_] + c[SERVICE_], n[START_] + n[SERVICE_])
    a_x, a_y, a_leg = pick(c[CX], n[CX]), pick(c[CY], n[CY]), pick(c[LEG_], n[LEG_])
    after_a_x, after_a_y = pick(c[NX], n[NX]), pick(c[NY], n[NY])
    b_x, b_y, b_leg = pick(n[CX], c[CX]), pick(n[CY], c[CY]), pick(n[LEG_], c[LEG_])
    b_ready, b_due, b_service = pick(n[READY_], c[READY_]), pick(n[DUE_], c[DUE_]), pick(n[SERVICE_], c[SERVICE_])
    after_b_x, after_b_y, after_b_latest = pick(n[NX], c[NX]), pick(n[NY], c[NY]), pick(n[NLATEST], c[NLATEST])
    a_slot, b_slot, count = pick(u_slot, v.near_slot), pick(v.near_slot, u_slot), span.abs()
    ok = (v.routed.unsqueeze(0) & (v.near_slot >= 0) & (v.near_route == v.route.unsqueeze(0)) & (count >= 2)
          & (count <= longest))
    a_to_b, after_a_to_after_b = _distance(a_x, a_y, b_x, b_y), _distance(after_a_x, after_a_y, after_b_x, after_b_y)
    cost = a_to_b + after_a_to_after_b - a_leg - b_leg
    start = torch.maximum(a_done + a_to_b + margin, b_ready)
    ok = ok & (start <= b_due)
    done = start + b_service
    timing = v.flat[[READY, DUE, SERVICE, LEG]]  # [4, LM, B]
    for i in range(1, longest):  # the segment's node i places before b, reached from the one after it
        node = _take(timing, (b_slot - i * m).clamp_min(0))  # [4, K, U, B]; its LEG: to the node after it
        walking = i < count
        start = torch.maximum(done + node[3] + margin, node[0])
        ok = ok & (~walking | (start <= node[1]))
        done = torch.where(walking, start + node[2], done)
    ok = ok & (done + after_a_to_after_b + margin <= after_b_latest)
    best, index = _pick(cost, ok)

    def source() -> Tensor:
        a = a_slot.flatten(0, 1).gather(0, index.unsqueeze(0)).squeeze(0)  # [B]
        b = b_slot.flatten(0, 1).gather(0, index.unsqueeze(0)).squeeze(0)
        pa, pb, route = a.div(m, rounding_mode="floor"), b.div(m, rounding_mode="floor"), a.remainder(m)
        p, r = v.position_of, v.route_of
        inside = (r == route) & (p > pa) & (p <= pb)
        return torch.where(inside, pa + 1 + pb - p, p) * m + r

    return best, source


def ruin_and_recreate(plan: Tensor, length: Tensor, load: Tensor, capacity: Tensor, demand: Tensor, near: Tensor,
                      margin: float, iterations: int, size: int, sweeps: int = 1, reversal: int = 0
                      ) -> tuple[Tensor, Tensor, Tensor]:
    """Escape the local search's local optima (Schrimpf et al. 2000, "Record breaking optimization results using the
    ruin and recreate principle", J. Computational Physics 159(2)): ``iterations`` times, take out ``size``
    customers near one another (customer ``i * stride mod N`` of iteration i, a stride prime to N, and its nearest,
    in every row: systematic, no random state), put them back one by one by cheapest feasible insertion,
    :func:`sweep` the result ``sweeps`` times, and keep it in the rows where it is shorter (and every customer found
    a place). Arguments as :func:`improve`.

    Returns:
        The plan, lengths and loads.
    """
    n, b = demand.shape
    stride = next(s for s in (7, 11, 13, 17, 19, 23, 29, 31) if math.gcd(s, n) == 1)
    for i in range(iterations):
        seed = torch.full((1, b), (i * stride) % n, dtype=torch.long, device=plan.device)
        count = min(size - 1, near.shape[0])  # taken out with it: its nearest
        taken = torch.cat([seed, near[:count].gather(1, seed.unsqueeze(0).expand(count, -1, -1)).squeeze(1)])
        new, new_length, new_load, placed = _recreate(*_ruin(plan, length, load, demand, taken), capacity, margin)
        new, new_length, new_load = sweep(new, new_length, new_load, capacity, demand, near, sweeps, margin,
                                          chunk=near.shape[0] + 1, reversal=reversal)
        keep = placed & (plan_cost(new) < plan_cost(plan) - _IMPROVES)
        plan, length, load = torch.where(keep, new, plan), torch.where(keep, new_length, length), torch.where(
            keep, new_load, load)
    return plan, length, load


def _ruin(plan: Tensor, length: Tensor, load: Tensor, demand: Tensor, taken: Tensor) -> tuple[Tensor, ...]:
    """The plan without the customers ``taken`` (int64 ``[S, B]``): each route closed up, its schedule recomputed;
    also the taken customers' node channels ``[6, S, B]`` and whether each was in the plan ``[S, B]``."""
    node = plan[NODE].long()  # [L, M, B]
    gone = (node.unsqueeze(0) == taken.view(taken.shape[0], 1, 1, -1)) & (node >= 0)  # [S, L, M, B]
    out = gone.any(0)
    order = out.to(torch.int8).argsort(dim=0, stable=True)  # each route's kept positions first, in order
    kept = plan[:START].gather(1, order.unsqueeze(0).expand(START, -1, -1, -1))
    padding = plan[:START, -1:].clone()  # (depot coordinates, never-binding due, no service, no node)
    padding[READY], padding[DUE], padding[SERVICE], padding[NODE] = 0.0, PAD_DUE, 0.0, -1.0
    count = (~out).sum(0, keepdim=True)  # [1, M, B] positions kept
    positions = torch.arange(plan.shape[1], device=plan.device).view(-1, 1, 1)
    nodes = torch.where(positions < count, kept, padding)
    leg, start, latest = schedule(nodes[X], nodes[Y], nodes[READY], nodes[DUE], nodes[SERVICE])
    ruined = torch.cat([nodes, torch.stack([start, latest, leg])])
    removed_demand = (gone.any(1) * demand.gather(0, taken).unsqueeze(1)).sum(0)  # [M, B]
    flat = gone.flatten(1, 2)  # [S, LM, B]: each taken customer's slot, if routed
    slot = flat.to(torch.int8).argmax(1)  # [S, B]
    channels = plan[:START].flatten(1, 2).gather(1, slot.unsqueeze(0).expand(START, -1, -1))  # [6, S, B]
    routed = flat.any(1)
    return ruined, length - out.sum(0), load - removed_demand, channels, demand.gather(0, taken), routed


def _recreate(plan: Tensor, length: Tensor, load: Tensor, channels: Tensor, taken_demand: Tensor, routed: Tensor,
              capacity: Tensor, margin: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Insert the taken customers back one by one, each at its cheapest feasible place with its agreed window; the
    plan, lengths, loads and whether every routed one found a place (``[B]``)."""
    placed = torch.ones_like(routed[0])
    for s in range(channels.shape[1]):
        column = channels[:, s]  # [6, B]
        window = torch.stack([column[READY], column[DUE]])  # [2, B]
        delta, arrive, bound, best = price(plan[:, :-1], length, load, capacity, column[X], column[Y],
                                           column[SERVICE], taken_demand[s], window.unsqueeze(1), margin)
        fits = best[0] < FEASIBLE
        accept = routed[s] & fits
        new, length, load, _, _ = insert(plan, length, load, delta, arrive, bound, window, accept, column,
                                         taken_demand[s])
        plan = new
        placed = placed & (fits | ~routed[s])
    return plan, length, load, placed
