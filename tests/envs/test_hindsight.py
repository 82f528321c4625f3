"""The hindsight oracle (envs.dvrp.hindsight): against brute force on tiny days, and above the online rules."""

from __future__ import annotations

import itertools
import math

import pytest

from envs.dvrp import DVRPConfig
from envs.dvrp.baselines import ScriptedOfferPolicy
from envs.dvrp.hindsight import acceptable_windows, check_plan, solve_hindsight
from envs.episodes import play_episodes


def _days(num_days: int, seed: int, **env) -> tuple[DVRPConfig, list[dict], dict]:
    """``num_days`` days of a small generated env (one row each), played by ``clairvoyant``; its results too."""
    config = DVRPConfig(**env)
    dvrp = config.make(num_days, seed)
    days: list[dict] = []

    def export(step, finished) -> None:  # at done, before the rows restart
        days.extend(dvrp.export_days(finished.nonzero().squeeze(-1).tolist()))

    result = play_episodes(dvrp, ScriptedOfferPolicy("clairvoyant", dvrp), 1, on_step=export)
    assert len(days) == num_days
    return config, days, result


def _brute_force(day: dict, max_shift: int, reward: float) -> float:
    """The best return over every choice of windows and routes, by enumeration (days of <= 4 customers)."""
    horizon = day["depot"]["due"]
    depot = (day["depot"]["x"], day["depot"]["y"])
    options = {r["id"]: acceptable_windows(r, horizon, max_shift) for r in day["requests"]}
    by_id = {r["id"]: r for r in day["requests"]}
    best_route: dict[frozenset, float] = {frozenset(): 0.0}  # served set -> the shortest feasible single route
    for k in range(1, len(by_id) + 1):
        for order in itertools.permutations(by_id, k):
            if sum(by_id[i]["demand"] for i in order) > day["capacity"]:
                continue
            for windows in itertools.product(*(options[i] for i in order)):
                now, here, km = 0.0, depot, 0.0
                for i, (_, a, b) in zip(order, windows, strict=True):
                    where = (by_id[i]["x"], by_id[i]["y"])
                    km += math.dist(here, where)
                    now = max(now + math.dist(here, where), a)
                    if now > b:
                        break
                    now, here = now + by_id[i]["service_time"], where
                else:
                    km += math.dist(here, depot)
                    if now + math.dist(here, depot) <= horizon:
                        key = frozenset(order)
                        best_route[key] = min(best_route.get(key, math.inf), km)
    best = 0.0
    for routes in itertools.product(best_route.items(), repeat=day["num_vehicles"]):
        sets = [s for s, _ in routes]
        if sum(len(s) for s in sets) == len(frozenset().union(*sets)):  # disjoint
            best = max(best, sum(reward * len(s) - km for s, km in routes))
    return best


@pytest.mark.parametrize("num_vehicles", [1, 2])
def test_hindsight_matches_brute_force_on_tiny_days(num_vehicles):
    # short horizon, narrow windows, a binding capacity: the windows, the routes and whom to serve all matter
    env = dict(num_customers=4, num_vehicles=num_vehicles, capacity=45, horizon=330, window_width=30,
               service_time=10, max_shift=2, type_mix=(0.25, 0.25, 0.25, 0.25), served_reward=60)
    config, days, _ = _days(24, 5, **env)
    shifted = 0
    for day in days:
        plan = solve_hindsight(day, config.max_shift, config.served_reward, seconds=0.1)
        check_plan(day, plan, config.max_shift)
        exact = _brute_force(day, config.max_shift, config.served_reward)
        assert day["num_vehicles"] == num_vehicles
        assert plan.episode_return == pytest.approx(exact, abs=0.05), day
        assert plan.episode_return == pytest.approx(config.served_reward * plan.served - plan.cost_km)
        shifted += any(s != 0 for s in plan.shifts.values())
    assert shifted >= 3  # the days where a shifted window pays are among them


def test_hindsight_is_above_the_online_rules():
    """On 30-customer days of the headline env, the plan with the future known beats the clairvoyant rule (which
    knows the types but not the later requests) on every day, and serves a feasible plan."""
    config, days, result = _days(6, 11, num_customers=30, num_vehicles=2)
    for day, online in zip(days, result["episode_return"].tolist(), strict=True):
        plan = solve_hindsight(day, config.max_shift, config.served_reward, seconds=0.5)
        check_plan(day, plan, config.max_shift)
        assert plan.episode_return > online


def test_acceptable_windows_follow_the_type_and_the_clipping():
    request = {"window": [20.0, 60.0], "slot": 40.0, "kind": 2}
    assert acceptable_windows(request, 100.0, 3) == [(0, 20.0, 60.0), (-1, 0.0, 20.0), (1, 60.0, 100.0)]
    assert acceptable_windows({**request, "kind": 0}, 100.0, 3) == [(0, 20.0, 60.0)]
    assert acceptable_windows({**request, "kind": 3}, 200.0, 1) == [(0, 20.0, 60.0), (-1, 0.0, 20.0),
                                                                    (1, 60.0, 100.0)]


def test_hindsight_rejects_a_bad_time_limit():
    day = {"depot": {"x": 0.0, "y": 0.0, "due": 100.0}, "capacity": 10.0, "num_vehicles": 1, "requests": []}
    with pytest.raises(ValueError, match="seconds"):
        solve_hindsight(day, 1, 10.0, seconds=0)
    assert solve_hindsight(day, 1, 10.0, seconds=0.1).episode_return == 0.0
