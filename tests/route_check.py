"""An independent checker of exported DVRP plans (the ``--routes_out`` JSON format), in plain Python."""

from __future__ import annotations

import math

import pytest


def check_exported_plan(ep: dict, tol: float = 1e-9) -> float:
    """Re-check one exported plan from coordinates; returns the recomputed distance (km).

    Checks: every routed customer is served and every served customer is routed exactly once; windows
    are not empty; service starts inside the agreed window (travel time = distance, waiting allowed);
    each route is back at the depot by its due time; loads fit the capacity; no more routes than the day's fleet
    (``num_vehicles``); the recomputed distance matches ``cost_km``.
    """
    depot, horizon, capacity = (ep["depot"]["x"], ep["depot"]["y"]), ep["depot"]["due"], ep["capacity"]
    customers = {c["id"]: c for c in ep["customers"]}
    visited, total = [], 0.0
    for route in ep["routes"]:
        t, (px, py), load = 0.0, depot, 0.0
        for cid in route:
            assert cid in customers, f"customer {cid} is routed but not served"
            c = customers[cid]
            a, b = c["window"]
            assert b > a, f"customer {cid} agreed to an empty window {c['window']}"
            d = math.hypot(c["x"] - px, c["y"] - py)
            total += d
            start = max(t + d, a)
            assert start <= b + tol, f"customer {cid}: service starts at {start}, window {c['window']}"
            t, px, py = start + c["service_time"], c["x"], c["y"]
            load += c["demand"]
            visited.append(cid)
        d = math.hypot(depot[0] - px, depot[1] - py) if route else 0.0
        total += d
        assert t + d <= horizon + tol, f"route {route} returns at {t + d} > H = {horizon}"
        assert load <= capacity + 1e-6, f"route {route} carries {load} > Q = {capacity}"
    assert sorted(visited) == sorted(customers), "a served customer is missing from or repeated in the routes"
    used = sum(1 for route in ep["routes"] if route)
    assert used <= ep["num_vehicles"], f"{used} routes for a fleet of {ep['num_vehicles']}"
    assert total == pytest.approx(ep["cost_km"], rel=1e-4, abs=1e-3)
    return total
