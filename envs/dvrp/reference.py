"""PyVRP as the reference solver: re-solve an episode's final served set with its agreed windows.

The online plan comes from the env's cost oracle (cheapest insertion, requests in arrival order);
re-solving the same customers, windows, fleet, capacity and horizon offline with PyVRP's hybrid
genetic search (Wouda et al. 2024, "PyVRP: a high-performance VRP solver package", INFORMS J.
Computing) measures the heuristic's gap. PyVRP works on integers, so distances are scaled by
``scale`` and rounded, durations rounded up (a PyVRP-feasible plan stays feasible in exact
arithmetic); the returned cost is recomputed from coordinates, in km.
"""

from __future__ import annotations

import math

import pyvrp
from pyvrp.stop import MaxRuntime


def route_cost(record: dict, routes: list[list[int]], nodes: str = "customers") -> float:
    """Exact Euclidean length (km) of ``routes`` (ids of ``record[nodes]``) of an exported episode's plan
    (``nodes="customers"``) or day (``"requests"``, :meth:`envs.dvrp.env.DVRPEnv.export_days`); the depot at both
    ends of each route."""
    where = {c["id"]: (c["x"], c["y"]) for c in record[nodes]}
    depot = (record["depot"]["x"], record["depot"]["y"])
    total = 0.0
    for route in routes:
        path = [depot] + [where[i] for i in route] + [depot]
        total += sum(math.dist(a, b) for a, b in zip(path, path[1:], strict=False))
    return total


def solve_with_pyvrp(record: dict, num_vehicles: int, seconds: float = 1.0, scale: int = 100,
                     seed: int = 0) -> tuple[float, list[list[int]]] | None:
    """Best PyVRP plan for an exported episode (``DVRPEnv.export_episodes`` format).

    Args:
        record: one exported episode (served customers with their agreed windows).
        num_vehicles: fleet size M.
        seconds: PyVRP run time.
        scale: integer scaling of coordinates / times.

    Returns:
        ``(cost_km, routes)`` with routes as customer-id lists, or ``None`` when PyVRP found no
        feasible plan in time.
    """
    customers = record["customers"]
    if not customers:
        return 0.0, []
    model = pyvrp.Model()
    due = math.floor(record["depot"]["due"] * scale)
    depot_loc = model.add_location(record["depot"]["x"], record["depot"]["y"])
    depot = model.add_depot(depot_loc, tw_early=0, tw_late=due)
    model.add_vehicle_type(num_available=num_vehicles, capacity=round(record["capacity"]),
                           start_depot=depot, end_depot=depot, tw_early=0, tw_late=due)
    locations = [depot_loc]
    for c in customers:
        loc = model.add_location(c["x"], c["y"])
        locations.append(loc)
        model.add_client(loc, delivery=round(c["demand"]), service_duration=math.ceil(c["service_time"] * scale),
                         tw_early=math.ceil(c["window"][0] * scale), tw_late=math.floor(c["window"][1] * scale))
    points = [(record["depot"]["x"], record["depot"]["y"])] + [(c["x"], c["y"]) for c in customers]
    for i, a in enumerate(locations):
        for j, b in enumerate(locations):
            d = math.dist(points[i], points[j]) * scale
            model.add_edge(a, b, distance=round(d), duration=math.ceil(d - 1e-9))
    result = model.solve(stop=MaxRuntime(seconds), seed=seed, display=False)
    if not result.is_feasible():
        return None
    ids = [c["id"] for c in customers]
    routes = [[ids[a.idx] for a in route if a.is_client()] for route in result.best.routes()]
    return route_cost(record, routes), routes
