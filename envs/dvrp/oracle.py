"""Cost oracles: keep one routing plan per env row and price the insertion of a new request.

The env talks to an oracle through :class:`CostOracle`: ``reset`` empties the plans of some rows,
``quote`` prices one request under W candidate time windows, ``commit`` inserts the quoted request
with the chosen window where the customer accepted. The default, :class:`InsertionOracle`, is
cheapest insertion with time-window feasibility by forward / backward slack (Savelsbergh 1992, "The
vehicle routing problem with time windows: minimizing route duration", ORSA J. Computing 4(2)),
vectorised over batch x vehicles x positions x windows (no Python loop over rows).

Semantics: travel time = Euclidean distance (km); service must *start* inside the agreed window,
waiting is allowed; every vehicle leaves the depot at 0 and is back by the horizon H; a route's load
is at most the capacity Q. Plan cost = total distance (km).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
from torch import Tensor

from envs.checks import Checks, rows_of
from envs.dvrp import local_search
from envs.dvrp.plan import DUE, FEASIBLE, LATEST, NODE, PAD_DUE, START, X, Y, insert, price


@dataclass
class Quote:
    """Price of one request under W windows.

    Attributes:
        delta: ``[B, W]`` plan-cost increase (km) of the cheapest feasible insertion; ``inf`` where none.
        feasible: ``[B, W]`` bool, a feasible insertion exists (capacity, every promised window, H).
    """

    delta: Tensor
    feasible: Tensor


class CostOracle(ABC):
    """Interface between the DVRP env and a routing method. All tensors carry the batch ``B`` first.

    Attributes:
        checks: its invariant checks (:class:`envs.checks.Checks`): at once by default; the env hands the
            oracle its own, deferred on a GPU.
    """

    checks: Checks

    @abstractmethod
    def reset(self, rows: Tensor, depot: Tensor, horizon: Tensor, capacity: Tensor, fleet: Tensor,
              xy: Tensor | None = None) -> None:
        """Empty the plans of ``rows`` (bool ``[B]``) for depots ``[B, 2]``, horizons and capacities ``[B]`` and
        fleets ``[B]`` (int64: the first ``fleet`` of the M vehicles serve the day, the others take nobody);
        ``xy`` ``[B, N, 2]``: every customer of the day (their neighbourhoods, for :meth:`improve`)."""

    @abstractmethod
    def quote(self, request: Tensor, xy: Tensor, demand: Tensor, service: Tensor, windows: Tensor) -> Quote:
        """Price customer ``request`` (int64 ``[B]``) at ``xy`` ``[B, 2]`` with ``demand`` and ``service`` ``[B]``
        under candidate ``windows`` ``[B, W, 2]`` (start, end; time units)."""

    @abstractmethod
    def commit(self, window: Tensor, accept: Tensor) -> Tensor:
        """Insert the last quoted request with window index ``window`` ``[B]`` where ``accept`` ``[B]``.

        Returns:
            ``[B]`` plan-cost increase (km); 0 where not accepted.
        """

    def improve(self, passes: int, rows: Tensor | None = None, reversal: int = 0) -> Tensor:
        """Improve the tentative plans (of ``rows``, bool ``[B]``, when given) by ``passes`` passes of local search
        around the last committed request, reversing segments of up to ``reversal`` customers within a route too
        (an oracle without one improves nothing).

        Returns:
            ``[B]`` km saved (>= 0; 0 outside ``rows``).
        """
        return torch.zeros_like(self.cost())

    def reoptimise(self, rows: Tensor, sweeps: int, ruins: int = 0, reversal: int = 0) -> Tensor:
        """Re-optimise the whole plans of ``rows`` (bool ``[B]``: the day's cut-off) by ``sweeps`` sweeps of local
        search over every customer and ``ruins`` ruin-and-recreate iterations, reversing segments of up to
        ``reversal`` customers within a route too (an oracle without one improves nothing).

        Returns:
            ``[B]`` km saved (>= 0; 0 outside ``rows``).
        """
        return torch.zeros_like(self.cost())

    @abstractmethod
    def routes(self) -> Tensor:
        """``[B, M, L]`` int64 customer indices in visiting order, ``-1`` padded (depot implied)."""

    @abstractmethod
    def cost(self) -> Tensor:
        """``[B]`` plan cost (km)."""

    @abstractmethod
    def vehicles(self) -> tuple[Tensor, Tensor, Tensor]:
        """Per vehicle ``[B, M]``: load (demand units), customers on the route, return time to the depot."""


class InsertionOracle(CostOracle):
    """Cheapest feasible insertion, vectorised over ``B x M x positions x W``.

    For request u and the edge (i, i+1) of route m: arrival ``a = start_i + service_i + d(i, u)``;
    with window ``[e, l]`` service starts at ``max(e, a)``, feasible iff ``max(e, a) <= min(l,
    latest_{i+1} - service_u - d(u, i+1))`` and the route's load plus the demand fits Q. Insertion
    cost ``d(i, u) + d(u, i+1) - d(i, i+1)``; the cheapest (vehicle, position) per window is kept.
    Empty vehicles are interchangeable, so ties go to the lowest position / vehicle index.

    The plan is one tensor ``[9, L, M, B]`` (L = N + 2 positions: start depot, customers, end depot,
    padding) holding per position x, y, window, service, earliest / latest start, leg and node id. The
    batch is the innermost dimension, so every operation over positions runs on contiguous ``[.., B]``
    slabs (vectorised loops on a CPU, coalesced access on a GPU).

    Args:
        batch_size: B. num_vehicles: M. num_customers: N (route length bound).
        device: of the plan tensors.
        dtype: of the plan tensors (float64 is exact enough for any horizon; float32 is faster).
        margin: safety margin (time units) on every window comparison, larger than the rounding error
            of the dtype, so that every plan the oracle builds is feasible in exact arithmetic; default
            1e-3 for float32, 1e-6 for float64.
    """

    def __init__(self, batch_size: int, num_vehicles: int, num_customers: int, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, margin: float | None = None, neighbourhood: int = 8) -> None:
        b, m, length = batch_size, num_vehicles, num_customers + 2
        self.margin = (1e-6 if dtype == torch.float64 else 1e-3) if margin is None else margin
        self.plan = torch.zeros(9, length, m, b, device=device, dtype=dtype)
        self.plan[NODE] = -1.0
        self.plan[DUE] = PAD_DUE
        self.plan[LATEST] = PAD_DUE
        self.length = torch.zeros(m, b, dtype=torch.long, device=device)
        self.load = torch.zeros(m, b, device=device, dtype=dtype)
        self.capacity = torch.zeros(m, b, device=device, dtype=dtype)  # per vehicle; -1 out of the day's fleet
        self.plan_cost = torch.zeros(b, device=device, dtype=dtype)
        self.demand = torch.zeros(num_customers, b, device=device, dtype=dtype)  # each customer's, for the search
        self.neighbourhood = min(neighbourhood, max(num_customers - 1, 1))  # K of local_search.neighbours
        self.xy = torch.zeros(b, num_customers, 2, device=device, dtype=dtype)  # every customer's, for the search
        self._neighbours_known = False
        self._quoted: dict = {}
        self.checks = Checks()

    def reset(self, rows: Tensor, depot: Tensor, horizon: Tensor, capacity: Tensor, fleet: Tensor,
              xy: Tensor | None = None) -> None:
        dtype, length, b = self.plan.dtype, self.plan.shape[1], self.plan.shape[-1]
        if xy is not None:
            self.xy = torch.where(rows.view(-1, 1, 1), xy.to(dtype), self.xy)
            self._neighbours_known = True
        m = self.plan.shape[2]
        in_fleet = torch.arange(m, device=fleet.device).unsqueeze(-1) < fleet  # [M, B]
        capacity = torch.where(in_fleet, capacity.to(dtype), -1.0)  # (demands are >= 0: nothing fits in -1)
        empty = torch.zeros(9, length, 1, b, dtype=dtype, device=self.plan.device)
        empty[X] = depot[:, 0].to(dtype)
        empty[Y] = depot[:, 1].to(dtype)
        empty[DUE] = PAD_DUE
        empty[DUE, :2] = horizon.to(dtype)
        empty[LATEST] = empty[DUE]
        empty[NODE] = -1.0
        self.plan = torch.where(rows, empty, self.plan)
        self.length = torch.where(rows, 0, self.length)
        self.load = torch.where(rows, 0.0, self.load)
        self.capacity = torch.where(rows, capacity, self.capacity)
        self.plan_cost = torch.where(rows, 0.0, self.plan_cost)

    def quote(self, request: Tensor, xy: Tensor, demand: Tensor, service: Tensor, windows: Tensor) -> Quote:
        dtype = self.plan.dtype
        x, y = xy[:, 0].to(dtype), xy[:, 1].to(dtype)
        service, demand = service.to(dtype), demand.to(dtype)
        # positions in use (edges are (i, i + 1) for i < span - 1); all of them under deferred checks (a GPU):
        # the same prices (edges past a route's end are masked), with no host read of the longest route
        span = self.plan.shape[1] if self.checks.defer else int(self.length.max()) + 2
        windows = windows.to(dtype)
        delta, arrive, bound, best = price(self.plan[:, :span], self.length, self.load, self.capacity, x, y,
                                           service, demand, windows.permute(2, 1, 0).contiguous(), self.margin)
        best = best.t()  # [B, W]
        feasible = best < FEASIBLE
        # the request's node channels; READY / DUE are placeholders, `insert` puts the agreed window there
        column = torch.stack([x, y, x, x, service, request.to(dtype)])
        self._quoted = dict(delta=delta, arrive=arrive, bound=bound, windows=windows, demand=demand, column=column,
                            request=request)
        return Quote(delta=torch.where(feasible, best, torch.inf), feasible=feasible)

    def commit(self, window: Tensor, accept: Tensor) -> Tensor:
        q = self._quoted
        win = q["windows"].gather(1, window.view(-1, 1, 1).expand(-1, 1, 2)).squeeze(1).t()  # [2, B]
        span = q["delta"].shape[0] + 2  # the longest route after insertion ends at index <= span - 1
        new, length, load, increase, bad = insert(
            self.plan[:, :span], self.length, self.load, q["delta"], q["arrive"], q["bound"], win, accept,
            q["column"], q["demand"])
        # checked before any state changes (the plan stays as it was), or deferred
        self.checks("commit", bad, lambda bad: ValueError(
            f"commit: an accepted window has no feasible insertion in rows {rows_of(bad)} (it was not quoted "
            "feasible)"))
        self.plan[:, :span] = new
        self.length, self.load = length, load
        self.plan_cost = self.plan_cost + increase
        if self._neighbours_known:  # (only the local search reads the demands back)
            self.demand.scatter_(0, q["request"].view(1, -1), q["demand"].view(1, -1))
        return increase

    def improve(self, passes: int, rows: Tensor | None = None, reversal: int = 0) -> Tensor:
        """:func:`envs.dvrp.local_search.improve` around the last quoted request: it and its nearest customers are
        the ones moved (one move per row per pass), in ``rows`` (all by default), reversing segments of up to
        ``reversal`` customers within a route too.

        Raises:
            ValueError: the plans were reset without the customers' coordinates (``xy``).
        """
        if passes <= 0:
            return torch.zeros_like(self.plan_cost)
        request = self._quoted["request"].view(1, -1)
        in_plan = self._in_plan()  # (once: the two neighbourhoods below read the same plan)
        focus = torch.cat([request, self._near(request, in_plan).squeeze(1)])  # [K + 1, B]
        near = torch.zeros(focus.shape[0] - 1, *self.demand.shape, dtype=torch.long, device=focus.device)
        near = near.scatter(1, focus.unsqueeze(0).expand(near.shape[0], -1, -1),
                            self._near(focus, in_plan))  # (only the focus's rows are read)
        found = local_search.improve(self.plan, self.length, self.load, self.capacity, self.demand, near,
                                     passes, self.margin, focus, reversal=reversal)
        return self._take(*found, rows)

    def reoptimise(self, rows: Tensor, sweeps: int, ruins: int = 0, reversal: int = 0) -> Tensor:
        """:func:`envs.dvrp.local_search.sweep` of the whole plans of ``rows``, then ``ruins`` iterations of
        :func:`envs.dvrp.local_search.ruin_and_recreate` (each takes out a customer and its most related), with
        2-opt within a route up to ``reversal`` customers.

        Raises:
            ValueError: the plans were reset without the customers' coordinates (``xy``).
        """
        if sweeps <= 0:
            return torch.zeros_like(self.plan_cost)
        near = self._near(None, self._in_plan())
        found = local_search.sweep(self.plan, self.length, self.load, self.capacity, self.demand, near, sweeps,
                                   self.margin, chunk=near.shape[0] + 1, reversal=reversal)
        if ruins > 0:
            found = local_search.ruin_and_recreate(*found, self.capacity, self.demand, near, self.margin, ruins,
                                                   size=near.shape[0] + 1, reversal=reversal)
        return self._take(*found, rows)

    def _in_plan(self) -> tuple[Tensor, Tensor]:
        """The customers in the plan and their windows (:func:`envs.dvrp.local_search.routed_windows`; the set does
        not change during a search).

        Raises:
            ValueError: the plans were reset without the customers' coordinates (``xy``).
        """
        if not self._neighbours_known:
            raise ValueError("improving a plan needs the customers' coordinates at reset (reset(..., xy=...))")
        return local_search.routed_windows(self.plan, self.demand.shape[0])

    def _near(self, of: Tensor | None, in_plan: tuple[Tensor, Tensor]) -> Tensor:
        """Each customer's (``of``'s, ``[U, B]``) most related customers of ``in_plan`` (:meth:`_in_plan`), in km and
        time: ``[K, N, B]`` (``[K, U, B]``; :func:`envs.dvrp.local_search.neighbours`)."""
        return local_search.neighbours(self.xy, self.neighbourhood, *in_plan, of)

    def _take(self, plan: Tensor, length: Tensor, load: Tensor, rows: Tensor | None) -> Tensor:
        """Adopt an improved plan (in ``rows`` only, when given); the km saved ``[B]``."""
        saved = local_search.plan_cost(self.plan) - local_search.plan_cost(plan)
        if rows is not None:
            plan, length = torch.where(rows, plan, self.plan), torch.where(rows, length, self.length)
            load, saved = torch.where(rows, load, self.load), torch.where(rows, saved, 0.0)
        self.plan, self.length, self.load = plan, length, load
        self.plan_cost = self.plan_cost - saved
        return saved

    def routes(self) -> Tensor:
        return self.plan[NODE, 1:].long().permute(2, 1, 0)

    def cost(self) -> Tensor:
        return self.plan_cost  # replaced, never written in place

    def vehicles(self) -> tuple[Tensor, Tensor, Tensor]:
        back = self.plan[START].gather(0, (self.length + 1).unsqueeze(0)).squeeze(0)
        return self.load.t(), self.length.to(self.load.dtype).t(), back.t()
