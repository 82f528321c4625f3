"""A learned cost oracle: every quote re-solves the served set plus the request with a routing policy.

:class:`NeuralOracle` implements :class:`~envs.dvrp.oracle.CostOracle` with the tensor contracts of
:class:`~envs.dvrp.oracle.InsertionOracle`, but instead of inserting the request into the current plan it
rebuilds the whole plan: for each of the W candidate windows the served customers (with their agreed
windows) plus the request form one VRPTW instance, and all ``B * W`` instances are solved by ONE
batched greedy call of the policy (``policy.solve``, e.g. :class:`modules.routing.RoutingPolicy`, an
attention encoder-decoder after Kool et al. 2019). The quote's ``delta`` is the new plan's cost minus
the current plan's (it may be negative: a re-solve can find a shorter plan); ``feasible`` means the
policy routed every customer within M vehicles. ``commit`` adopts the quoted plan of the chosen window.

Semantics are those of the insertion oracle (see :mod:`envs.dvrp.oracle`), enforced by the shared
construction rules of :mod:`envs.routing.construction` with the same float safety margin, so every plan
is feasible whatever the network's weights. The network lives in ``modules/``; the env receives it as a
:class:`RoutingSolver` (the pipeline reads it from its training checkpoint and hands it to ``DVRPConfig.make``:
``pipelines.env_models.env_models``).
"""

from __future__ import annotations

from typing import Protocol

import torch
from tensordict import TensorDict
from torch import Tensor

from envs.checks import Checks, rows_of
from envs.dvrp.oracle import CostOracle, Quote
from envs.dvrp.plan import schedule
from envs.routing.construction import default_margin
from envs.routing.problem import make_problem


class RoutingSolver(Protocol):
    """What the oracle needs of a policy: batched greedy plans (see ``modules.routing.RoutingPolicy.solve``)."""

    def solve(self, problem: TensorDict, margin: float | None = None, num_augment: int = 1
              ) -> tuple[Tensor, Tensor, Tensor]: ...


def route_vehicles(routes: Tensor, depot: Tensor, xy: Tensor, demand: Tensor, service: Tensor, ready: Tensor,
                   due: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Load, customer count and return time to the depot per route, each ``[B, M]``.

    Args:
        routes: int64 ``[B, M, N]`` customer slots in visiting order, -1 padded. depot: ``[B, 2]``.
        xy: ``[B, N, 2]``; demand, service, ready, due: ``[B, N]`` customer slot data (agreed windows).

    Start times follow the forward recursion of :func:`envs.dvrp.plan.schedule` (waiting allowed);
    positions past a route's end are the depot with no service, so the last position's start is the
    return time (0 for an empty route).
    """
    b, m, n = routes.shape
    used = routes >= 0
    slot = routes.clamp_min(0).view(b, m * n)

    def positions(values: Tensor, pad: Tensor) -> Tensor:
        """Slot data ``[B, N]`` -> ``[N + 2, B, M]`` along the routes; ``pad`` ``[B, 1, 1]`` at depot positions."""
        inner = torch.where(used, values.gather(1, slot).view(b, m, n), pad)
        ends = pad.expand(b, m, 1)
        return torch.cat([ends, inner, ends], -1).permute(2, 0, 1)

    zero = torch.zeros(b, 1, 1, dtype=xy.dtype, device=xy.device)
    x = positions(xy[..., 0], depot[:, 0].view(b, 1, 1))
    y = positions(xy[..., 1], depot[:, 1].view(b, 1, 1))
    _, start, _ = schedule(x, y, positions(ready, zero), positions(due, zero + 1.0e6), positions(service, zero))
    load = torch.where(used, demand.gather(1, slot).view(b, m, n), 0.0).sum(-1)
    return load, used.sum(-1).to(xy.dtype), start[-1]


class NeuralOracle(CostOracle):
    """Plans re-solved by a routing policy at every quote (see the module docstring).

    State per row: the served customers' data by arrival slot (coordinates, demand, service, agreed
    window; ``present`` marks the served ones), the current plan's routes ``[B, M, N]`` and its cost.

    Args:
        num_envs: B. num_vehicles: M. num_customers: N (customer slots = arrival indices).
        policy: the routing solver (its ``solve`` builds greedy plans for a problem batch).
        device: of the oracle's tensors and of the instances passed to the policy.
        dtype: of the same tensors.
        margin: safety margin (time units) of every window comparison; default 1e-3 for float32,
            1e-6 for float64 (as :class:`~envs.dvrp.oracle.InsertionOracle`).
        num_augment: greedy plans per instance under symmetries of the coordinate input, best feasible
            kept (``RoutingPolicy.solve``); the quote stays one batched call of ``num_augment * B * W``.
    """

    def __init__(self, num_envs: int, num_vehicles: int, num_customers: int, policy: RoutingSolver,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                 margin: float | None = None, num_augment: int = 8) -> None:
        b, m, n = num_envs, num_vehicles, num_customers
        self.num_augment = num_augment
        full = dict(device=device, dtype=dtype)
        self.policy = policy
        self.num_vehicles = m
        self.margin = default_margin(dtype) if margin is None else margin
        self.depot = torch.zeros(b, 2, **full)
        self.horizon = torch.zeros(b, **full)
        self.capacity = torch.zeros(b, **full)
        self.xy = torch.zeros(b, n, 2, **full)
        self.fields = torch.zeros(4, b, n, **full)  # demand, service, ready, due (agreed)
        self.present = torch.zeros(b, n, dtype=torch.bool, device=device)
        self.plan = torch.full((b, m, n), -1, dtype=torch.long, device=device)
        self.plan_cost = torch.zeros(b, **full)
        self._vehicles: tuple[Tensor, Tensor, Tensor] | None = None
        self._quoted: dict = {}
        self.checks = Checks()

    def reset(self, rows: Tensor, depot: Tensor, horizon: Tensor, capacity: Tensor, fleet: Tensor,
              xy: Tensor | None = None) -> None:
        """See :meth:`CostOracle.reset` (``xy`` is not needed: this oracle re-solves, it does not improve); every
        row's fleet must be all M vehicles (``DVRPConfig`` allows one size with this oracle: its routing policy is
        trained for one N and M)."""
        self.checks("fleet", rows & (fleet != self.num_vehicles), lambda bad: ValueError(
            f"NeuralOracle plans with all {self.num_vehicles} vehicles; rows {rows_of(bad)} have smaller fleets"))
        dtype = self.xy.dtype
        self.depot = torch.where(rows.unsqueeze(-1), depot.to(dtype), self.depot)
        self.horizon = torch.where(rows, horizon.to(dtype), self.horizon)
        self.capacity = torch.where(rows, capacity.to(dtype), self.capacity)
        self.present = torch.where(rows.unsqueeze(-1), False, self.present)
        self.plan = torch.where(rows.view(-1, 1, 1), -1, self.plan)
        self.plan_cost = torch.where(rows, 0.0, self.plan_cost)
        self._vehicles = None

    def _problems(self, request: Tensor, xy: Tensor, fields: Tensor, windows: Tensor) -> TensorDict:
        """The ``B * W`` instances (row-major: instance ``b * W + w``) of the served sets plus the request
        under window w; ``fields`` ``[2, B]`` are the request's demand and service."""
        b, w = windows.shape[:2]
        n = self.xy.shape[1]
        slot = torch.nn.functional.one_hot(request, n).bool().unsqueeze(1)  # [B, 1, N]

        def put(table: Tensor, value: Tensor) -> Tensor:  # table [B, N], value [B, W] -> [B * W, N]
            return torch.where(slot, value.unsqueeze(-1), table.unsqueeze(1)).reshape(b * w, n)

        def per_row(value: Tensor) -> Tensor:
            return value.repeat_interleave(w, 0)

        xy_all = torch.where(slot.unsqueeze(-1), xy.view(b, 1, 1, 2), self.xy.unsqueeze(1))
        xy_all = xy_all.expand(b, w, n, 2).reshape(b * w, n, 2)
        demand, service, ready, due = self.fields
        present = (self.present.unsqueeze(1) | slot).expand(b, w, n).reshape(b * w, n)
        return make_problem(per_row(self.depot), xy_all, put(demand, fields[0].unsqueeze(-1).expand(b, w)),
                            put(service, fields[1].unsqueeze(-1).expand(b, w)), put(ready, windows[..., 0]),
                            put(due, windows[..., 1]), present, per_row(self.horizon), per_row(self.capacity),
                            self.num_vehicles)

    def quote(self, request: Tensor, xy: Tensor, demand: Tensor, service: Tensor, windows: Tensor) -> Quote:
        dtype = self.xy.dtype
        b, w = windows.shape[:2]
        fields = torch.stack([demand.to(dtype), service.to(dtype)])
        xy, windows = xy.to(dtype), windows.to(dtype)
        routes, cost, feasible = self.policy.solve(self._problems(request, xy, fields, windows), self.margin,
                                                   self.num_augment)
        cost = cost.to(dtype).view(b, w)
        feasible = feasible.view(b, w)
        self._quoted = dict(request=request.clone(), xy=xy, fields=fields, windows=windows, cost=cost,
                            feasible=feasible, routes=routes.view(b, w, *routes.shape[1:]))
        delta = cost - self.plan_cost.unsqueeze(-1)
        return Quote(delta=torch.where(feasible, delta, torch.inf), feasible=feasible)

    def commit(self, window: Tensor, accept: Tensor) -> Tensor:
        q = self._quoted
        b = window.shape[0]
        ok = q["feasible"].gather(1, window.unsqueeze(-1)).squeeze(-1)
        # checked before any state changes (the plan stays as it was), or deferred
        self.checks("commit", accept & ~ok, lambda bad: ValueError(
            f"commit: an accepted window has no feasible plan in rows {rows_of(bad)} (it was not quoted feasible)"))
        routes = q["routes"][torch.arange(b, device=window.device), window]  # [B, M, N]
        cost = q["cost"].gather(1, window.unsqueeze(-1)).squeeze(-1)
        increase = torch.where(accept, cost - self.plan_cost, 0.0)
        win = q["windows"].gather(1, window.view(-1, 1, 1).expand(-1, 1, 2)).squeeze(1)  # [B, 2]
        slot = torch.nn.functional.one_hot(q["request"], self.xy.shape[1]).bool() & accept.unsqueeze(-1)
        self.xy = torch.where(slot.unsqueeze(-1), q["xy"].unsqueeze(1), self.xy)
        column = torch.cat([q["fields"], win.t()])  # demand, service, ready, due: [4, B]
        self.fields = torch.where(slot, column.unsqueeze(-1), self.fields)
        self.present = self.present | slot
        self.plan = torch.where(accept.view(-1, 1, 1), routes, self.plan)
        self.plan_cost = torch.where(accept, cost, self.plan_cost)
        self._vehicles = None
        return increase

    def routes(self) -> Tensor:
        return self.plan

    def cost(self) -> Tensor:
        return self.plan_cost

    def vehicles(self) -> tuple[Tensor, Tensor, Tensor]:
        if self._vehicles is None:
            demand, service, ready, due = self.fields
            self._vehicles = route_vehicles(self.plan, self.depot, self.xy, demand, service, ready, due)
        return self._vehicles
