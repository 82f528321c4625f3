"""The hindsight (anticipative) oracle of a DVRP day, solved with PyVRP.

The online policy decides each request as it arrives, without the later ones, and the env's cost oracle inserts
it into the plan. The hindsight oracle knows the whole day at the start: every request, its time, attributes
and the customer's hidden type. It picks for each customer one window the customer would accept (a shift s of
the preferred window with |s| <= k, non-empty after clipping to [0, H], as the env offers it) or none, and the
routes, maximising the return the env pays: ``served_reward * served - plan km``. Its return measures what is
lost to not knowing the future, the dynamic-VRP measure of the EURO Meets NeurIPS 2022 competition (Kool et al.
2022, "The EURO Meets NeurIPS 2022 Vehicle Routing Competition", their "hindsight" baseline), and the gap to it,
``(hindsight - policy) / hindsight``, is reported in % beside every policy's return.

That is a prize-collecting VRPTW with alternative windows: each acceptable (customer, window) pair is an optional
client with prize ``served_reward`` at the customer's location; one optional, mutually exclusive
``ClientGroup`` per customer keeps at most one window of each. PyVRP's hybrid genetic search (Wouda et al. 2024,
"PyVRP: a high-performance VRP solver package", INFORMS J. Computing) solves it within a time limit, so the
hindsight return is a lower bound of the true optimum (close to it on small days, tested against brute force).
PyVRP works on integers: distances are scaled by ``scale`` and rounded, durations and window starts rounded up,
window ends and the horizon down, so a PyVRP-feasible plan is feasible in exact arithmetic; the returned km are
recomputed from coordinates.
"""

from __future__ import annotations

import math
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pyvrp
from pyvrp.stop import MaxRuntime

from envs.dvrp.reference import route_cost
from envs.processes import dying_with_this_process


@dataclass
class HindsightPlan:
    """The hindsight oracle's plan of one day.

    Attributes:
        episode_return: ``served_reward * served - cost_km`` (km-equivalents), the env's return of this plan.
        cost_km: total route length (km, exact Euclidean).
        served: customers served.
        routes: request ids (arrival index + 1) per used vehicle, in visiting order (depot implied at both ends).
        windows: ``{request id: (start, end)}``, the agreed window of each served customer (time units).
        shifts: ``{request id: s}``, the shift of each served customer's window.
        seconds: the solver's wall time (s).
    """

    episode_return: float
    cost_km: float
    served: int
    routes: list[list[int]]
    windows: dict[int, tuple[float, float]] = field(default_factory=dict)
    shifts: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0


def acceptable_windows(request: dict, horizon: float, max_shift: int) -> list[tuple[int, float, float]]:
    """The windows customer ``request`` accepts, as the env offers them: ``(s, start, end)`` for the shifts
    ``|s| <= min(kind, max_shift)`` of the preferred window ``[e + s * slot, l + s * slot]`` clipped to
    ``[0, horizon]``, where the clipped window is not empty (the env masks empty ones).

    Args:
        request: one request of :meth:`envs.dvrp.env.DVRPEnv.export_days` (``window`` [e, l], ``slot``, ``kind``).
        horizon: the depot's closing time H.
        max_shift: S of the env.
    """
    early, late = request["window"]
    reach = min(int(request["kind"]), max_shift)
    out = []
    for s in sorted(range(-reach, reach + 1), key=abs):
        start = min(max(early + s * request["slot"], 0.0), horizon)
        end = min(max(late + s * request["slot"], 0.0), horizon)
        if end > start:
            out.append((s, start, end))
    return out


Option = tuple[dict, int, float, float]  # a request, the shift s of a window it accepts, and that window [a, b]


def _problem_data(day: dict, options: list[Option], horizon: float, served_reward: float,
                  scale: int) -> pyvrp.ProblemData:
    """PyVRP's prize-collecting problem of a day: one optional client per (request, acceptable window) option,
    the options of one request in a group of which at most one is served, coordinates and times times ``scale``
    as integers."""
    requests = day["requests"]
    points = np.array([[day["depot"]["x"], day["depot"]["y"]]] + [[r["x"], r["y"]] for r in requests])
    exact = np.linalg.norm(points[:, None] - points[None], axis=-1) * scale
    distance = np.rint(exact).astype(np.int64)
    duration = np.ceil(exact - 1e-9).astype(np.int64)
    location_of = {r["id"]: i + 1 for i, r in enumerate(requests)}
    due = math.floor(horizon * scale)
    counts: dict[int, int] = {}
    for r, *_ in options:
        counts[r["id"]] = counts.get(r["id"], 0) + 1
    group_of = {rid: g for g, rid in enumerate(rid for rid, n in counts.items() if n > 1)}
    clients = [pyvrp.Client(location=location_of[r["id"]], delivery=[round(r["demand"])],
                            service_duration=math.ceil(r["service_time"] * scale - 1e-9),
                            tw_early=math.ceil(a * scale - 1e-9), tw_late=math.floor(b * scale + 1e-9),
                            prize=round(served_reward * scale), required=False, group=group_of.get(r["id"]))
               for r, s, a, b in options]
    groups = [[] for _ in group_of]
    for i, (r, *_) in enumerate(options):
        if r["id"] in group_of:
            groups[group_of[r["id"]]].append(i)
    return pyvrp.ProblemData(
        locations=[pyvrp.Location(x=float(x), y=float(y)) for x, y in points],
        clients=clients, depots=[pyvrp.Depot(location=0, tw_early=0, tw_late=due)],
        vehicle_types=[pyvrp.VehicleType(num_available=int(day["num_vehicles"]), capacity=[round(day["capacity"])],
                                         tw_early=0, tw_late=due)],
        distance_matrices=[distance], duration_matrices=[duration],
        groups=[pyvrp.ClientGroup(members, required=False) for members in groups])


def _read_routes(best: pyvrp.Solution, options: list[Option]) -> tuple[list[list[int]], dict, dict]:
    """The routes of PyVRP's solution as request ids, with each served request's window and shift."""
    routes, windows, shifts = [], {}, {}
    for route in best.routes():
        ids = []
        for visit in route:
            if not visit.is_client():
                continue
            r, s, a, b = options[visit.idx]
            ids.append(r["id"])
            windows[r["id"]], shifts[r["id"]] = (a, b), s
        routes.append(ids)
    return routes, windows, shifts


def solve_hindsight(day: dict, max_shift: int, served_reward: float, seconds: float = 2.0, scale: int = 100,
                    seed: int = 0) -> HindsightPlan:
    """The hindsight plan of one day (see the module docstring).

    Args:
        day: one day of :meth:`envs.dvrp.env.DVRPEnv.export_days`: ``depot`` {x, y, due}, ``capacity``,
            ``num_vehicles`` (M identical vehicles leaving the depot at 0, back by ``due``) and every ``requests``
            entry {id, x, y, demand, service_time, window [e, l], slot, kind}.
        max_shift: S, the largest shift the env offers.
        served_reward: the env's reward per served customer (km-equivalents).
        seconds: PyVRP's time limit (s).
        scale: integer scaling of coordinates and times.
        seed: PyVRP's seed.

    Returns:
        The plan; the empty plan (return 0) when no customer can be served.

    Raises:
        ValueError: ``seconds`` not positive.
    """
    if not seconds > 0:
        raise ValueError(f"hindsight seconds={seconds}: must be > 0")
    start_time = time.perf_counter()
    horizon = float(day["depot"]["due"])
    requests = day["requests"]
    options = [(r, s, a, b) for r in requests for s, a, b in acceptable_windows(r, horizon, max_shift)]
    if not options:
        return HindsightPlan(0.0, 0.0, 0, [], seconds=time.perf_counter() - start_time)
    data = _problem_data(day, options, horizon, served_reward, scale)
    result = pyvrp.solve(data, stop=MaxRuntime(seconds), seed=seed, collect_stats=False, display=False)
    best = result.best
    if not best.is_feasible():  # (the empty plan is feasible, so the search keeps a feasible best)
        raise RuntimeError("PyVRP returned an infeasible hindsight plan")
    routes, windows, shifts = _read_routes(best, options)
    cost = route_cost(day, routes, nodes="requests")
    served = sum(len(route) for route in routes)
    return HindsightPlan(served_reward * served - cost, cost, served, routes, windows, shifts,
                         time.perf_counter() - start_time)


def check_plan(day: dict, plan: HindsightPlan, max_shift: int, tol: float = 1e-6) -> None:
    """Raise ``AssertionError`` unless ``plan`` is a feasible plan of ``day`` in exact arithmetic: at most M routes,
    each customer at most once, with a window it accepts, the load within capacity, service starting inside each
    window (waiting allowed, leaving the depot at 0) and each route back by the horizon."""
    horizon = float(day["depot"]["due"])
    by_id = {r["id"]: r for r in day["requests"]}
    assert len(plan.routes) <= day["num_vehicles"], f"{len(plan.routes)} routes > {day['num_vehicles']} vehicles"
    visited = [i for route in plan.routes for i in route]
    assert len(visited) == len(set(visited)), "a customer is served twice"
    depot = (day["depot"]["x"], day["depot"]["y"])
    for route in plan.routes:
        assert sum(by_id[i]["demand"] for i in route) <= day["capacity"] + tol, "capacity exceeded"
        now, here = 0.0, depot
        for i in route:
            r = by_id[i]
            assert (plan.shifts[i], *plan.windows[i]) in acceptable_windows(r, horizon, max_shift), \
                f"customer {i} does not accept window {plan.windows[i]}"
            now = max(now + math.dist(here, (r["x"], r["y"])), plan.windows[i][0])
            assert now <= plan.windows[i][1] + tol, f"customer {i} served at {now} after {plan.windows[i][1]}"
            now, here = now + r["service_time"], (r["x"], r["y"])
        assert now + math.dist(here, depot) <= horizon + tol, "route back after the horizon"


def solve_days(days: list[dict], max_shift: int, served_reward: float, seconds: float,
               workers: int = 1) -> list[HindsightPlan]:
    """:func:`solve_hindsight` of every day (seed 0 each), on ``workers`` processes when above 1 (spawned: the
    process's fork server, which the rollout workers start from with torch imported, is left to them).

    Raises:
        ValueError: ``seconds`` not positive or ``workers`` below 1.
    """
    if workers < 1:
        raise ValueError(f"hindsight workers={workers}: must be >= 1")
    if not seconds > 0:
        raise ValueError(f"hindsight seconds={seconds}: must be > 0")
    solve = partial(solve_hindsight, max_shift=max_shift, served_reward=served_reward, seconds=seconds)
    if workers == 1 or len(days) <= 1:
        return [solve(day) for day in days]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(days)), mp_context=context,
                             initializer=dying_with_this_process()) as pool:  # (a SIGKILLed command leaves none)
        return list(pool.map(solve, days))
