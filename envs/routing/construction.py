"""Route construction for the VRPTW, one node per step: the rules shared by the env and the oracle.

A plan is built by one vehicle at a time (as in Kool et al. 2019, "Attention, Learn to Solve Routing
Problems!", ICLR, for the CVRP): from the depot the vehicle visits customers, then returns to the depot
and the next vehicle starts at time 0 with an empty load. :func:`start` and :func:`step` are pure
functions of tensors, so :class:`~envs.vrptw.env.VRPTWEnv` and the routing policy's decoder
(:mod:`modules.routing`) apply exactly the same rules.

Feasibility mask of customer j at a step (node ``pos``, time ``time`` after its service, load ``load``):
    not yet served, present; ``load + demand_j <= Q``; arrival ``a = time + d(pos, j)`` satisfies
    ``a + margin <= due_j``; service starts at ``max(a, ready_j)`` and the vehicle can still be back:
    ``start + service_j + d(j, 0) + margin <= H``; from the depot only while fewer than M routes started.
The depot is allowed from a customer (closing the route, always feasible since the customer was) and at
a finished state (a no-op). With ``early_return=False`` a route may close only when no customer can be
appended (every route is maximal): a much smaller search space in which an untrained policy already
uses its fleet fully. Every constraint of the plan is checked when a node is chosen.

Termination: all present customers served and the vehicle back at the depot (feasible), or a dead end:
at the depot with customers left and none of them allowed (M routes used, or none reachable in time);
the instance is then reported infeasible (``feasible`` False), never as a partial plan.

``margin`` (time units) is a safety margin as in :class:`~envs.dvrp.oracle.InsertionOracle`: larger than
the rounding of the dtype, so a plan built in float32 is feasible in exact arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from tensordict import TensorDict
from torch import Tensor

from envs.routing.problem import distance_matrix


def default_margin(dtype: torch.dtype) -> float:
    """The safety margin (time units) used with ``dtype``: 1e-6 for float64, else 1e-3."""
    return 1e-6 if dtype == torch.float64 else 1e-3


@dataclass
class ConstructionState:
    """Where the construction of R plans stands (every field has the batch R first).

    Attributes:
        pos: int64 ``[R]`` current node (0 = depot).
        time: ``[R]`` time at which the vehicle leaves ``pos`` (after service; 0 at the depot).
        load: ``[R]`` load of the current route (demand units).
        used: int64 ``[R]`` routes started so far.
        visited: bool ``[R, 1 + N]`` served customers; absent slots and the depot count as visited.
        length: ``[R]`` distance driven so far (km).
        steps: int64 ``[R]`` construction steps taken while not finished (frames).
        done: bool ``[R]`` finished (served all or dead end).
        feasible: bool ``[R]`` False at a dead end.
        mask: bool ``[R, 1 + N]`` allowed next nodes (True = allowed; never all False).
    """

    pos: Tensor
    time: Tensor
    load: Tensor
    used: Tensor
    visited: Tensor
    length: Tensor
    steps: Tensor
    done: Tensor
    feasible: Tensor
    mask: Tensor

    def where(self, rows: Tensor, other: ConstructionState) -> ConstructionState:
        """This state where ``rows`` (bool ``[R]``) is True, else ``other``'s."""
        def pick(a: Tensor, b: Tensor) -> Tensor:
            return torch.where(rows.view(-1, *([1] * (a.dim() - 1))), a, b)
        return ConstructionState(**{f.name: pick(getattr(self, f.name), getattr(other, f.name)) for f in fields(self)})

    def unserved(self) -> Tensor:
        """int64 ``[R]``: present customers not served (> 0 only at a dead end once done)."""
        return (~self.visited).sum(-1)


def customer_mask(problem: TensorDict, dist: Tensor, pos: Tensor, time: Tensor, load: Tensor, used: Tensor,
                  visited: Tensor, margin: float) -> Tensor:
    """Bool ``[R, 1 + N]``: customers that can be served next (column 0, the depot, is False).

    Args:
        problem: the problem TensorDict ``[R]`` (:mod:`envs.routing.problem`). dist: ``[R, 1 + N, 1 + N]`` (km).
        pos: as in :class:`ConstructionState`, as are ``time``, ``load``, ``used`` and ``visited``.
        time: see ``pos``.
        load: see ``pos``.
        used: see ``pos``.
        visited: see ``pos``.
        margin: time units.
    """
    d = dist.gather(1, pos.view(-1, 1, 1).expand(-1, 1, dist.shape[-1])).squeeze(1)  # [R, 1 + N]
    arrive = time.unsqueeze(-1) + d
    begin = torch.maximum(arrive, problem["ready"])
    back = begin + problem["service"] + dist[:, :, 0] + margin
    ok = ~visited & (arrive + margin <= problem["due"]) & (back <= problem["horizon"].unsqueeze(-1))
    ok &= load.unsqueeze(-1) + problem["demand"] <= problem["capacity"].unsqueeze(-1)
    vehicle_free = (pos != 0) | (used < problem["num_vehicles"])
    return ok & vehicle_free.unsqueeze(-1)


def _settle(problem: TensorDict, dist: Tensor, pos: Tensor, time: Tensor, load: Tensor, used: Tensor,
            visited: Tensor, length: Tensor, steps: Tensor, margin: float, early_return: bool) -> ConstructionState:
    """Mask, termination and feasibility of a state given its position fields."""
    customers = customer_mask(problem, dist, pos, time, load, used, visited, margin)
    at_depot = pos == 0
    all_served = visited.all(-1)
    dead_end = at_depot & ~all_served & ~customers.any(-1)
    done = (at_depot & all_served) | dead_end
    mask = customers.clone()
    can_close = ~at_depot if early_return else ~at_depot & ~customers.any(-1)
    mask[:, 0] = can_close | done
    return ConstructionState(pos=pos, time=time, load=load, used=used, visited=visited, length=length,
                             steps=steps, done=done, feasible=~dead_end, mask=mask)


def start(problem: TensorDict, dist: Tensor | None = None, margin: float | None = None,
          early_return: bool = True) -> ConstructionState:
    """The empty plans of ``problem`` (every vehicle at the depot; absent customers count as served).

    Args:
        problem: TensorDict ``[R]`` (:mod:`envs.routing.problem`).
        dist: ``[R, 1 + N, 1 + N]`` distances (km); computed from ``loc`` when None.
        margin: safety margin (time units); :func:`default_margin` of the dtype when None.
        early_return: a route may close while customers could still be appended (see module docstring).
    """
    loc = problem["loc"]
    dist = distance_matrix(loc) if dist is None else dist
    margin = default_margin(loc.dtype) if margin is None else margin
    r = loc.shape[0]
    zero = torch.zeros(r, dtype=loc.dtype, device=loc.device)
    izero = torch.zeros(r, dtype=torch.long, device=loc.device)
    visited = ~problem["present"].clone()
    visited[:, 0] = True
    return _settle(problem, dist, izero, zero, zero, izero, visited, zero, izero, margin, early_return)


def step(problem: TensorDict, dist: Tensor, state: ConstructionState, action: Tensor,
         margin: float | None = None, early_return: bool = True) -> tuple[ConstructionState, Tensor]:
    """Move every unfinished plan to node ``action`` (int64 ``[R]``; 0 = depot).

    Finished rows do not change (their action is ignored). The caller keeps actions inside
    ``state.mask`` (the env checks it; a policy samples from the masked logits). ``margin`` and
    ``early_return`` must be those the state was started with.

    Returns:
        the new state and the distance driven at this step ``[R]`` (km; 0 for finished rows).
    """
    margin = default_margin(dist.dtype) if margin is None else margin
    live = ~state.done
    action = torch.where(live, action, state.pos)
    d = dist.gather(1, state.pos.view(-1, 1, 1).expand(-1, 1, dist.shape[-1])).squeeze(1)
    leg = d.gather(1, action.unsqueeze(-1)).squeeze(-1)
    to_depot = action == 0
    node = action.unsqueeze(-1)
    begin = torch.maximum(state.time + leg, problem["ready"].gather(1, node).squeeze(-1))
    time = torch.where(to_depot, 0.0, begin + problem["service"].gather(1, node).squeeze(-1))
    load = torch.where(to_depot, 0.0, state.load + problem["demand"].gather(1, node).squeeze(-1))
    used = state.used + ((state.pos == 0) & ~to_depot & live).long()
    visited = state.visited.scatter(1, node, True)
    leg = torch.where(live, leg, 0.0)
    new = _settle(problem, dist, action, time, load, used, visited, state.length + leg, state.steps + live.long(),
                  margin, early_return)
    return new.where(live, state), leg


def actions_to_routes(actions: Tensor, num_vehicles: int, num_customers: int) -> Tensor:
    """Routes ``[R, M, N]`` (int64 customer indices 0..N-1 = node - 1, in visiting order, -1 padded) from
    the node sequence ``actions`` ``[R, T]`` of a construction (0 = depot; trailing depots are no-ops).

    A route starts at every customer that follows the depot (or opens the sequence); M must be at
    least the routes of any row.
    """
    r = actions.shape[0]
    is_customer = actions > 0
    prev = torch.cat([torch.zeros_like(actions[:, :1]), actions[:, :-1]], 1)
    opens = is_customer & (prev == 0)
    route = opens.long().cumsum(1) - 1  # [R, T]
    served = is_customer.long().cumsum(1) - 1
    first = torch.cummax(torch.where(opens, served, 0), 1).values
    position = served - first
    out = torch.full((r, num_vehicles * num_customers + 1), -1, dtype=torch.long, device=actions.device)
    dump = num_vehicles * num_customers
    flat = torch.where(is_customer, route.clamp_min(0) * num_customers + position, dump)
    out.scatter_(1, flat, actions - 1)
    return out[:, :dump].view(r, num_vehicles, num_customers)
