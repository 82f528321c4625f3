"""Batched local search on the insertion oracle's plan tensor: every row of a batch improved at once, a fixed number
of passes, no host read, so it runs unchanged on a GPU and keeps every row in step.

A pass evaluates, for every row, three neighbourhoods of the classical VRPTW local search (Savelsbergh 1992, "The
vehicle routing problem with time windows: minimizing route duration", ORSA J. Computing 4(2); the moves of Vidal et
al. 2013, "A hybrid genetic algorithm with adaptive diversity management for a large class of vehicle routing
problems with time windows", Computers & Operations Research 40(1)):

* **relocate**: a customer moved to another place in its own route or in another route;
* **exchange**: two customers of different routes swapped;
* **2-opt\\***: the tails of two routes swapped after a customer of each (a tail to an empty vehicle splits a route,
  one appended after the last customer of another joins two);

restricted to **granular neighbourhoods** (Toth and Vigo 2003): a customer is only moved next to one of its K nearest
customers (or to the start of a route), so a pass costs O(B·N·K), not O(B·N²·M²). The best improving move of each row
(its plan-cost decrease, km) is applied where it improves by more than a tolerance; rows without one keep their plan.

Every move is checked with the forward / backward slack arithmetic of the insertion oracle (:func:`envs.dvrp.oracle
.schedule`: earliest start ``START`` and latest start ``LATEST`` per position), with its safety ``margin`` on every
comparison, so that every plan it returns is feasible in exact arithmetic (windows, capacity, back at the depot by
the horizon). A move within one route is judged on the route as it is (the earliest starts before the move and the
latest starts after it): conservative, never infeasible, as removing a customer never delays a Euclidean route.
"""

from __future__ import annotations

import torch
from torch import Tensor

from envs.dvrp.oracle import DUE, LATEST, LEG, NODE, READY, SERVICE, START, X, Y, schedule

_IMPROVES = 1e-3  # km: a move must shorten the plan by more than this (float32 rounding of a move's km is below)
_OFF = 1.0e9  # the cost of a candidate that is not allowed


def neighbours(xy: Tensor, k: int) -> Tensor:
    """Each customer's ``k`` nearest other customers: int64 ``[K, N, B]`` from coordinates ``[B, N, 2]`` (km)."""
    distance = torch.cdist(xy, xy)  # [B, N, N]
    distance.diagonal(dim1=1, dim2=2).fill_(torch.inf)
    k = min(k, xy.shape[1] - 1)
    return distance.topk(k, dim=2, largest=False).indices.permute(2, 1, 0).contiguous()


def improve(plan: Tensor, length: Tensor, load: Tensor, capacity: Tensor, demand: Tensor, near: Tensor,
            passes: int, margin: float) -> tuple[Tensor, Tensor, Tensor]:
    """``passes`` passes of the local search (see the module docstring) on every row.

    Args:
        plan: ``[9, L, M, B]`` the oracle's plan tensor (channels of :mod:`envs.dvrp.oracle`); NODE holds each
            customer's index in ``[0, N)``, -1 at depots and padding.
        length: int64 ``[M, B]`` customers per route. load: ``[M, B]``. capacity: ``[M, B]`` (-1 out of the day's
            fleet: nothing fits). demand: ``[N, B]`` each customer's demand. near: int64 ``[K, N, B]``
            (:func:`neighbours`). margin: the oracle's safety margin (time units).

    Returns:
        The improved plan, lengths and loads (new tensors; the plan cost is the sum of its ``LEG`` channel).
    """
    for _ in range(passes):
        plan, length, load = _one_pass(plan, length, load, capacity, demand, near, margin)
    return plan, length, load


def plan_cost(plan: Tensor) -> Tensor:
    """``[B]`` km of a plan: the sum of its legs."""
    return plan[LEG].sum(dim=(0, 1))


def _one_pass(plan: Tensor, length: Tensor, load: Tensor, capacity: Tensor, demand: Tensor, near: Tensor,
              margin: float) -> tuple[Tensor, Tensor, Tensor]:
    slots = _Slots(plan, length, load, capacity, demand, near)
    moves = [_relocate(slots, margin), _exchange(slots, margin), _two_opt_star(slots, margin)]
    costs = torch.stack([m[0] for m in moves])  # [3, B] each kind's best
    best, kind = costs.min(0)
    better = best < -_IMPROVES
    source = slots.identity
    for index, (_, move_source) in enumerate(moves):
        source = torch.where(better & (kind == index), move_source, source)
    new, new_length, new_load = slots.rebuild(source)
    keep = plan_cost(new) < plan_cost(plan) - _IMPROVES / 2  # (the plan's own km, recomputed: never longer)
    return (torch.where(keep, new, plan), torch.where(keep, new_length, length), torch.where(keep, new_load, load))


class _Slots:
    """One pass's view of the plan: every slot ``(p, m)`` flattened to ``s = p * M + m`` (``[9, L * M, B]``), where
    each customer is, the neighbours' slots and the per-slot data the moves read."""

    def __init__(self, plan: Tensor, length: Tensor, load: Tensor, capacity: Tensor, demand: Tensor,
                 near: Tensor) -> None:
        self.plan, self.length, self.load, self.capacity, self.demand = plan, length, load, capacity, demand
        _, big_l, m, b = plan.shape
        self.L, self.M, self.B, self.N = big_l, m, b, demand.shape[0]
        self.flat = plan.reshape(9, big_l * m, b)
        self.route = torch.arange(big_l * m, device=plan.device).remainder(m).view(-1, 1)  # [LM, 1]
        self.position = torch.arange(big_l * m, device=plan.device).div(m, rounding_mode="floor").view(-1, 1)
        self.identity = self.position * m + self.route + torch.zeros(1, b, dtype=torch.long, device=plan.device)
        node = plan[NODE].reshape(big_l * m, b).long()
        # where each customer is: its slot, or -1 (not in the plan yet); slot of customer c at where[c]
        where = torch.full((self.N + 1, b), -1, dtype=torch.long, device=plan.device)
        self.where = where.scatter(0, node.clamp_min(-1).where(node >= 0, self.N), self.identity)[:-1]
        self.near = near
        # per-slot load before (and including) the slot, along its route (2-opt*'s prefix loads)
        slot_demand = demand.gather(0, node.clamp_min(0)) * (node >= 0)
        self.prefix = slot_demand.view(big_l, m, b).cumsum(0).view(big_l * m, b)
        self.slot_demand = slot_demand

    def field(self, channel: int, slot: Tensor) -> Tensor:
        """Channel ``channel`` at the slots ``slot`` (any shape ``[..., B]``; -1 reads slot 0)."""
        flat_index = slot.clamp_min(0).reshape(-1, self.B)
        return self.flat[channel].gather(0, flat_index).view(slot.shape)

    def of(self, table: Tensor, slot: Tensor) -> Tensor:
        """A per-slot table ``[L * M, B]`` at the slots ``slot``."""
        return table.gather(0, slot.clamp_min(0).reshape(-1, self.B)).view(slot.shape)

    def step(self, slot: Tensor, offset: int) -> Tensor:
        """The slot ``offset`` positions along the same route (positions clamped to the plan)."""
        position = (slot.div(self.M, rounding_mode="floor") + offset).clamp(0, self.L - 1)
        return position * self.M + slot.remainder(self.M)

    def per_route(self, table: Tensor, slot: Tensor) -> Tensor:
        """A per-route table ``[M, B]`` at the routes of ``slot``."""
        return table.gather(0, slot.clamp_min(0).remainder(self.M).reshape(-1, self.B)).view(slot.shape)

    def rebuild(self, source: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The plan whose slot s holds the old slot ``source[s]`` (``[L * M, B]``), its schedule recomputed, with
        its lengths and loads."""
        node = self.flat[:START].gather(1, source.unsqueeze(0).expand(START, -1, -1))
        node = node.view(START, self.L, self.M, self.B)
        leg, start, latest = schedule(node[X], node[Y], node[READY], node[DUE], node[SERVICE])
        plan = torch.cat([node, torch.stack([start, latest, leg])])
        customers = plan[NODE] >= 0
        length = customers.sum(0)
        load = self.slot_demand.gather(0, source).view(self.L, self.M, self.B).sum(0)
        return plan, length, load


def _distance(xa: Tensor, ya: Tensor, xb: Tensor, yb: Tensor) -> Tensor:
    dx, dy = xa - xb, ya - yb
    return torch.sqrt(dx * dx + dy * dy)


def _fits(s: _Slots, before: Tensor, x: Tensor, y: Tensor, ready: Tensor, due: Tensor, service: Tensor,
          after: Tensor, margin: float) -> Tensor:
    """Whether a customer (``x, y, ready, due, service``) fits between the slots ``before`` and ``after`` of a plan:
    service can start in its window after ``before`` (its earliest start), and ``after`` can still start by its
    latest start (the insertion oracle's test)."""
    arrive = s.field(START, before) + s.field(SERVICE, before) + _distance(
        s.field(X, before), s.field(Y, before), x, y) + margin
    bound = s.field(LATEST, after) - service - _distance(x, y, s.field(X, after), s.field(Y, after)) - margin
    return (torch.maximum(arrive, ready) <= torch.minimum(due, bound)) & (arrive <= bound)


def _customer(s: _Slots, slot: Tensor) -> tuple[Tensor, ...]:
    return tuple(s.field(c, slot) for c in (X, Y, READY, DUE, SERVICE))


def _removal_gain(s: _Slots, slot: Tensor) -> Tensor:
    """km saved by taking the customer at ``slot`` out of its route."""
    prev, after = s.step(slot, -1), s.step(slot, 1)
    bridge = _distance(s.field(X, prev), s.field(Y, prev), s.field(X, after), s.field(Y, after))
    return s.field(LEG, prev) + s.field(LEG, slot) - bridge


def _relocate(s: _Slots, margin: float) -> tuple[Tensor, Tensor]:
    """The best relocate of each row: customer u (at slot su) put after slot j, where j is a neighbour of u, the
    slot before a neighbour, or a route's start depot. Returns its cost change ``[B]`` and slot map ``[L * M, B]``."""
    m = s.M
    su = s.where.unsqueeze(0)  # [1, N, B]
    sv = s.where.gather(0, s.near.reshape(-1, s.B)).view(s.near.shape)  # [K, N, B]
    depots = (torch.arange(m, device=su.device).view(-1, 1, 1) + torch.zeros_like(su))  # [M, N, B] slot (0, m)
    after_neighbour = torch.where(sv >= 0, sv, -1)
    before_neighbour = torch.where(sv >= 0, s.step(sv, -1), -1)
    j = torch.cat([after_neighbour, before_neighbour, depots])  # [C, N, B] the slot u goes after
    valid = (j >= 0) & (su >= 0)
    nxt = s.step(j, 1)
    ux, uy, ready, due, service = _customer(s, su)
    same = j.remainder(m) == su.remainder(m)
    adjacent = same & ((j == su) | (nxt == su))
    in_route = s.field(NODE, j).ge(0) | j.div(m, rounding_mode="floor").eq(0)  # a customer or a start depot
    u_demand = s.of(s.slot_demand, su)
    fits_load = same | (s.per_route(s.load, j) + u_demand <= s.per_route(s.capacity, j))
    ok = valid & ~adjacent & in_route & fits_load & _fits(s, j, ux, uy, ready, due, service, nxt, margin)
    insert = _distance(s.field(X, j), s.field(Y, j), ux, uy) + _distance(ux, uy, s.field(X, nxt), s.field(Y, nxt))
    cost = insert - s.field(LEG, j) - _removal_gain(s, su)
    cost = torch.where(ok, cost, _OFF).flatten(0, 1)  # [C * N, B]
    best, flat = cost.min(0)
    n = su.shape[1]
    u_slot = s.where.gather(0, flat.remainder(n).unsqueeze(0)).squeeze(0)
    j_slot = j.flatten(0, 1).gather(0, flat.unsqueeze(0)).squeeze(0)
    return best, _relocate_map(s, u_slot, j_slot)


def _relocate_map(s: _Slots, u_slot: Tensor, j_slot: Tensor) -> Tensor:
    """The slot map of moving the customer at ``u_slot`` to right after ``j_slot`` (``[B]`` each)."""
    m = s.M
    pu, mu = u_slot.div(m, rounding_mode="floor"), u_slot.remainder(m)
    pj, mv = j_slot.div(m, rounding_mode="floor"), j_slot.remainder(m)
    p, r = s.position, s.route  # [LM, 1]
    same = mu == mv
    # the source route without u: positions from pu on take the next one
    removed = torch.where((r == mu) & (p >= pu), (p + 1).clamp_max(s.L - 1), p)
    # where u goes in the target route after the removal: after j, one place earlier if j came after u
    at = torch.where(same & (pj > pu), pj, pj + 1)
    base = torch.where(same, removed, p)  # the target route's positions before the insertion
    shifted = torch.where(same, torch.where(p - 1 >= pu, p.clamp_max(s.L - 1), p - 1), p - 1)
    target = torch.where(p < at, base, torch.where(p == at, pu, shifted.clamp_min(0)))
    position = torch.where(r == mv, target, removed)
    route = torch.where((r == mv) & (p == at), mu, r)
    return position * m + route


def _exchange(s: _Slots, margin: float) -> tuple[Tensor, Tensor]:
    """The best swap of each row: customer u and its neighbour v, in different routes, take each other's places."""
    m = s.M
    su = s.where.unsqueeze(0).expand_as(s.near)  # [K, N, B]
    sv = s.where.gather(0, s.near.reshape(-1, s.B)).view(s.near.shape)
    valid = (su >= 0) & (sv >= 0) & (su.remainder(m) != sv.remainder(m))
    u, v = _customer(s, su), _customer(s, sv)
    up, un, vp, vn = s.step(su, -1), s.step(su, 1), s.step(sv, -1), s.step(sv, 1)
    du, dv = s.of(s.slot_demand, su), s.of(s.slot_demand, sv)
    fits_load = ((s.per_route(s.load, su) - du + dv <= s.per_route(s.capacity, su))
                 & (s.per_route(s.load, sv) - dv + du <= s.per_route(s.capacity, sv)))
    ok = valid & fits_load & _fits(s, up, *v, un, margin) & _fits(s, vp, *u, vn, margin)

    def through(prev: Tensor, node: tuple, after: Tensor) -> Tensor:
        return (_distance(s.field(X, prev), s.field(Y, prev), node[0], node[1])
                + _distance(node[0], node[1], s.field(X, after), s.field(Y, after)))

    cost = (through(up, v, un) + through(vp, u, vn) - s.field(LEG, up) - s.field(LEG, su) - s.field(LEG, vp)
            - s.field(LEG, sv))
    cost = torch.where(ok, cost, _OFF).flatten(0, 1)
    best, flat = cost.min(0)
    a = su.flatten(0, 1).gather(0, flat.unsqueeze(0))
    b = sv.flatten(0, 1).gather(0, flat.unsqueeze(0))
    slot = s.identity
    source = torch.where(slot == a, b, torch.where(slot == b, a, slot))
    return best, source


def _two_opt_star(s: _Slots, margin: float) -> tuple[Tensor, Tensor]:
    """The best tail swap of each row: route A (customer u at slot su) continues with route B's tail from slot sv
    on (v, a neighbour of u in another route, or B's end depot), and B's head up to the slot before sv continues
    with A's tail after u."""
    m = s.M
    su = s.where.unsqueeze(0)  # [1, N, B]
    sv = s.where.gather(0, s.near.reshape(-1, s.B)).view(s.near.shape)  # [K, N, B]
    ends = (s.length + 1).unsqueeze(1) * m + torch.arange(m, device=su.device).view(-1, 1, 1)  # [M, 1, B]
    sv = torch.cat([sv, ends.expand(-1, su.shape[1], -1)])  # [C, N, B]
    valid = (su >= 0) & (sv >= 0) & (su.remainder(m) != sv.remainder(m))
    su = su.expand_as(sv)
    un, w = s.step(su, 1), s.step(sv, -1)  # u's successor; the slot before v (B's head ends there)
    capacity_a, capacity_b = s.per_route(s.capacity, su), s.per_route(s.capacity, sv)
    load_a, load_b = s.per_route(s.load, su), s.per_route(s.load, sv)
    head_a, head_b = s.of(s.prefix, su), s.of(s.prefix, w)
    fits_load = (head_a + load_b - head_b <= capacity_a) & (head_b + load_a - head_a <= capacity_b)
    # A: u's earliest finish then v; v's latest start covers B's tail. B: w's earliest finish then A's tail after u
    a_ok = (s.field(START, su) + s.field(SERVICE, su) + _distance(s.field(X, su), s.field(Y, su), s.field(X, sv),
                                                                    s.field(Y, sv)) + margin <= s.field(LATEST, sv))
    b_ok = (s.field(START, w) + s.field(SERVICE, w) + _distance(s.field(X, w), s.field(Y, w), s.field(X, un),
                                                                  s.field(Y, un)) + margin <= s.field(LATEST, un))
    ok = valid & fits_load & a_ok & b_ok
    cost = (_distance(s.field(X, su), s.field(Y, su), s.field(X, sv), s.field(Y, sv))
            + _distance(s.field(X, w), s.field(Y, w), s.field(X, un), s.field(Y, un))
            - s.field(LEG, su) - s.field(LEG, w))
    cost = torch.where(ok, cost, _OFF).flatten(0, 1)
    best, flat = cost.min(0)
    a = su.flatten(0, 1).gather(0, flat.unsqueeze(0)).squeeze(0)
    b = sv.flatten(0, 1).gather(0, flat.unsqueeze(0)).squeeze(0)
    pa, ra = a.div(m, rounding_mode="floor"), a.remainder(m)
    pb, rb = b.div(m, rounding_mode="floor"), b.remainder(m)
    p, r = s.position, s.route
    top = s.L - 1
    from_b = (p - pa - 1 + pb).clamp(0, top)  # A after u: B's tail from v
    from_a = (p - pb + pa + 1).clamp(0, top)  # B from v's place on: A's tail after u
    position = torch.where((r == ra) & (p > pa), from_b, torch.where((r == rb) & (p >= pb), from_a, p))
    route = torch.where((r == ra) & (p > pa), rb, torch.where((r == rb) & (p >= pb), ra, r))
    return best, position * m + route
