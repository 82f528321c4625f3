"""The insertion oracle against brute-force enumeration on tiny instances.

For the current plan (routes with their agreed windows) and a new request under a candidate window,
the brute force tries every (vehicle, insertion position), simulates the whole route schedule from
scratch (leave the depot at 0, travel time = Euclidean distance, wait when early, service must *start*
inside [a, b], back at the depot by H, load <= Q) and keeps the cheapest feasible increase of the
total distance. The oracle must agree on feasibility and on that cost at every step and window, and
each commit must produce one of the brute force's cheapest plans.

The oracle keeps a safety margin (1e-3 time units in float32) on window comparisons, so that every plan
it builds is feasible in exact arithmetic: an insertion whose exact violation lies in (-BAND, 0] may be
judged either way; such quotes are counted as ambiguous, and they must stay rare (continuous data almost
never lands there). A committed plan must always be feasible in exact arithmetic.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from envs.dvrp import DVRPConfig
from envs.dvrp.oracle import InsertionOracle

EXACT = 1e-9  # an insertion with violation <= EXACT is feasible in exact arithmetic
BAND = 1e-2  # violations in (-BAND, EXACT] are within the oracle's safety margin: either answer goes
COST_TOL = 1e-6


# ----------------------------------------------------------------------------- brute force
def simulate(route, cust, depot, horizon):
    """Distance and largest violation (time units; <= 0 is feasible) of one route from scratch.

    The violation of a customer is its arrival time minus its due time (service starts at
    max(arrival, ready) <= due iff arrival <= due, since windows are not empty): the quantity the
    oracle's safety margin protects.
    Also returns the violation of the return to the depot alone (to tell when the depot closing binds).
    """
    t, (px, py), dist, viol = 0.0, depot, 0.0, -math.inf
    for c in route:
        x, y, a, b, svc, _ = cust[c]
        d = math.hypot(x - px, y - py)
        dist += d
        t += d
        viol = max(viol, t - b)
        start = max(t, a)
        t, px, py = start + svc, x, y
    d = math.hypot(depot[0] - px, depot[1] - py)
    dist += d
    t += d
    return dist, max(viol, t - horizon), viol, t - horizon


def brute_insertions(routes, cust, depot, horizon, capacity, new_id, new):
    """Every insertion of ``new`` (x, y, a, b, svc, demand) into ``routes``.

    Returns ``(candidates, capacity_blocked)``: candidates are ``(delta_km, violation, vehicle, pos,
    new_routes, depot_only)`` for vehicles with room; ``capacity_blocked`` lists the insertions skipped for
    capacity with their violation (to measure how often capacity is what binds).
    """
    cust = dict(cust)
    cust[new_id] = new
    out, blocked = [], []
    for m, route in enumerate(routes):
        base, _, _, _ = simulate(route, cust, depot, horizon)
        load = sum(cust[c][5] for c in route)
        for pos in range(len(route) + 1):
            r = route[:pos] + [new_id] + route[pos:]
            dist, viol, win_viol, ret_viol = simulate(r, cust, depot, horizon)
            new_routes = [list(x) for x in routes]
            new_routes[m] = r
            depot_only = win_viol <= EXACT < ret_viol  # only the return by H fails
            if load + new[5] > capacity:
                blocked.append(viol)
            else:
                out.append((dist - base, viol, m, pos, new_routes, depot_only))
    return out, blocked


def plan_cost(routes, cust, depot, horizon):
    return sum(simulate(r, cust, depot, horizon)[0] for r in routes)


class Tally:
    """Counts of what the comparisons covered (so a vacuous run fails)."""

    def __init__(self, cost_tol: float = COST_TOL) -> None:
        self.cost_tol = cost_tol
        self.quotes = self.feasible = self.infeasible = self.ambiguous = 0
        self.capacity_binds = self.depot_binds = self.commits = self.cost_checked = self.ambiguous_commits = 0


def check_quote(tally, cands, blocked, feasible, delta, where):
    """Compare the oracle's feasible flag / cost of one (row, window) with the brute force."""
    tally.quotes += 1
    exact = [c for c in cands if c[1] <= -BAND]
    near = [c for c in cands if c[1] <= EXACT]
    if exact:
        tally.feasible += 1
        assert feasible, f"{where}: oracle says infeasible, brute force finds {min(exact)[:4]}"
        best = min(c[0] for c in exact)
        if min(c[0] for c in near) >= best - 1e-9:
            tally.cost_checked += 1
            assert delta == pytest.approx(best, abs=tally.cost_tol), f"{where}: oracle cost {delta} != brute {best}"
        else:
            tally.ambiguous += 1
    elif not near:
        tally.infeasible += 1
        assert not feasible, f"{where}: oracle says feasible (cost {delta}), brute force finds no insertion"
        if any(v <= EXACT for v in blocked):
            tally.capacity_binds += 1
        if any(c[5] for c in cands):
            tally.depot_binds += 1
    else:
        tally.ambiguous += 1


def check_commit(tally, cands, old_routes, new_routes, old_cost, new_cost, cust_after, depot, horizon, where):
    """The committed plan is one of the brute force's cheapest feasible insertions, at the quoted cost."""
    tally.commits += 1
    exact = [c for c in cands if c[1] <= -BAND]
    near = [c for c in cands if c[1] <= EXACT]
    assert near, f"{where}: committed a window the brute force cannot insert"
    assert plan_cost(new_routes, cust_after, depot, horizon) == pytest.approx(new_cost, abs=tally.cost_tol), where
    chosen = [c for c in near if c[4] == new_routes]
    assert chosen, f"{where}: plan {new_routes} (from {old_routes}) is no feasible insertion of the request"
    assert new_cost - old_cost == pytest.approx(chosen[0][0], abs=tally.cost_tol), f"{where}: cost increase"
    if len(near) == len(exact):  # no insertion within the rounding tolerance: the cheapest exact one
        assert chosen[0][0] == pytest.approx(min(c[0] for c in exact), abs=tally.cost_tol), f"{where}: not cheapest"
    else:
        tally.ambiguous_commits += 1
        assert chosen[0][0] >= min(c[0] for c in near) - tally.cost_tol, where
        if exact:
            assert chosen[0][0] <= min(c[0] for c in exact) + tally.cost_tol, f"{where}: not cheapest"


def oracle_routes(oracle, row):
    return [[c for c in route if c >= 0] for route in oracle.routes()[row].tolist()]


def assert_coverage(tally: Tally, min_quotes: int) -> None:
    assert tally.quotes >= min_quotes
    assert tally.feasible >= min_quotes // 10 and tally.infeasible >= min_quotes // 10, vars(tally)
    assert tally.cost_checked >= tally.feasible * 0.95, vars(tally)
    assert tally.ambiguous <= max(3, tally.quotes // 200), vars(tally)
    assert tally.commits >= 50 and tally.ambiguous_commits <= max(3, tally.commits // 100), vars(tally)


# ----------------------------------------------------------------------------- env-driven
ENV_CASES = {
    # float64, capacity binds (mean demand 15.5, Q = 40) and the depot closes early (H = 200, shifts of 20)
    "tight": (dict(num_customers=6, num_vehicles=2, dtype="float64", horizon=200.0, window_width=20.0,
                   service_time=10.0, capacity=40.0), 64, 4000),
    # float64, wide, late-shifted windows against a short day; capacity never binds
    "windows": (dict(num_customers=6, num_vehicles=2, dtype="float64", horizon=260.0, window_width=45.0,
                     service_time=5.0, capacity=1000.0), 64, 4000),
    # the default float32 problem, longer routes and three vehicles (costs to 1e-3 km)
    "float32": (dict(num_customers=12, num_vehicles=3, capacity=60.0), 16, 1500),
}


@pytest.mark.parametrize("case", sorted(ENV_CASES))
def test_env_quotes_match_brute_force(case):
    """Drive the env with random allowed actions; check every quote, mask and commit."""
    kwargs, batch, min_quotes = ENV_CASES[case]
    cfg = DVRPConfig(max_shift=3, type_mix=[0.1, 0.1, 0.1, 0.7], **kwargs)
    env = cfg.make(num_envs=batch, seed=1000 + len(case))
    quotes = []
    original = env.oracle.quote

    def spy(*args, **kwargs):  # keep the quote the env saw (in float64 where the env is; offer_cost is float32)
        q = original(*args, **kwargs)
        quotes.append(q)
        return q

    env.oracle.quote = spy
    rand = random.Random(7)
    tally = Tally(COST_TOL if cfg.dtype == "float64" else 1e-3)
    for episode in range(2):
        td = env.reset()
        for t in range(cfg.num_customers):
            q = quotes[-1]
            inst = env.instances
            windows = env.windows.tolist()
            mask = env.mask.tolist()
            served_before = env.counts[:, 0].clone()
            cost_before = env.oracle.cost().tolist()
            state = []
            for row in range(batch):
                depot = tuple(inst["depot"][row].tolist())
                horizon, capacity = float(inst["horizon"][row]), float(inst["capacity"][row])
                xy, dem, svc = inst["xy"][row].tolist(), inst["demand"][row].tolist(), inst["service"][row].tolist()
                agreed = env.agreed[row].tolist()
                routes = oracle_routes(env.oracle, row)
                cust = {c: (*xy[c], *agreed[c], svc[c], dem[c]) for r in routes for c in r}
                per_window = []
                for w, (a, b) in enumerate(windows[row]):
                    new = (*xy[t], a, b, svc[t], dem[t])
                    cands, blocked = brute_insertions(routes, cust, depot, horizon, capacity, t, new)
                    where = f"{case} ep{episode} step{t} row{row} window{w} {(a, b)} plan {routes}"
                    feas = bool(q.feasible[row, w])
                    check_quote(tally, cands, blocked, feas, float(q.delta[row, w]), where)
                    assert mask[row][w] == (feas and b > a), f"{where}: action_mask disagrees with the quote"
                    per_window.append((cands, new))
                assert mask[row][-1], "reject must always be allowed"
                state.append((routes, cust, depot, horizon, per_window))
            # random allowed action, reject with a small weight
            actions = []
            for row in range(batch):
                allowed = [a for a, ok in enumerate(mask[row][:-1]) if ok]
                actions.append(rand.choice(allowed) if allowed and rand.random() < 0.85 else len(mask[row]) - 1)
            td["action"] = torch.tensor(actions)
            td = env.step(td)["next"]
            accepted = (env.counts[:, 0] - served_before).tolist()
            cost_after = env.oracle.cost().tolist()
            for row in range(batch):
                routes, cust, depot, horizon, per_window = state[row]
                new_routes = oracle_routes(env.oracle, row)
                where = f"{case} ep{episode} step{t} row{row} action{actions[row]} plan {routes}"
                if accepted[row]:
                    cands, new = per_window[actions[row]]
                    cust_after = dict(cust)
                    cust_after[t] = new
                    check_commit(tally, cands, routes, new_routes, cost_before[row], cost_after[row],
                                 cust_after, depot, horizon, where)
                else:
                    assert new_routes == routes and cost_after[row] == cost_before[row], where
        assert bool(td["done"].all())
    assert_coverage(tally, min_quotes=min_quotes)
    if case in ("tight", "float32"):
        assert tally.capacity_binds >= 20, vars(tally)
    assert tally.depot_binds >= 20, vars(tally)


# ----------------------------------------------------------------------------- oracle alone
def test_oracle_direct_random_windows():
    """The oracle alone, with arbitrary float windows (narrow, zero-width, clipped at 0 and H), odd
    depots, service times and capacities per row, and random commits."""
    gen = torch.Generator().manual_seed(3)
    batch, m, n, w = 48, 2, 6, 6
    tally = Tally()
    for episode in range(3):
        oracle = InsertionOracle(batch, m, n, dtype=torch.float64)
        depot = 30.0 + 40.0 * torch.rand(batch, 2, generator=gen, dtype=torch.float64)
        horizon = 180.0 + 120.0 * torch.rand(batch, generator=gen, dtype=torch.float64)
        capacity = torch.tensor([40.0, 1000.0], dtype=torch.float64).repeat(batch // 2)
        xy = 100.0 * torch.rand(batch, n, 2, generator=gen, dtype=torch.float64)
        demand = torch.randint(1, 31, (batch, n), generator=gen).double()
        service = 15.0 * torch.rand(batch, n, generator=gen, dtype=torch.float64)
        oracle.reset(torch.ones(batch, dtype=torch.bool), depot, horizon, capacity, torch.full((batch,), m))
        committed = [dict() for _ in range(batch)]
        for t in range(n):
            centre = horizon[:, None] * (-0.1 + 1.2 * torch.rand(batch, w, generator=gen, dtype=torch.float64))
            width = 40.0 * torch.rand(batch, w, generator=gen, dtype=torch.float64)
            width[:, 0] = 0.0  # a single instant
            start = (centre - width / 2).clamp(min=torch.zeros_like(horizon)[:, None], max=horizon[:, None])
            end = (centre + width / 2).clamp(min=torch.zeros_like(horizon)[:, None], max=horizon[:, None])
            windows = torch.stack([start, end], -1)
            request = torch.full((batch,), t, dtype=torch.long)
            q = oracle.quote(request, xy[:, t], demand[:, t], service[:, t], windows)
            assert q.feasible.shape == (batch, w) and q.delta.shape == (batch, w)
            assert bool(torch.isinf(q.delta[~q.feasible]).all())
            cost_before = oracle.cost().tolist()
            choice, accept, saved = [], [], []
            for row in range(batch):
                d = tuple(depot[row].tolist())
                h, cap = float(horizon[row]), float(capacity[row])
                routes = oracle_routes(oracle, row)
                cust = committed[row]
                per_window = []
                for k in range(w):
                    a, b = windows[row, k].tolist()
                    new = (*xy[row, t].tolist(), a, b, float(service[row, t]), float(demand[row, t]))
                    cands, blocked = brute_insertions(routes, cust, d, h, cap, t, new)
                    check_quote(tally, cands, blocked, bool(q.feasible[row, k]), float(q.delta[row, k]),
                                f"ep{episode} step{t} row{row} window{k} {(a, b)} plan {routes}")
                    per_window.append((cands, new))
                ok = q.feasible[row].nonzero().squeeze(-1).tolist()
                pick = ok[int(torch.randint(len(ok), (1,), generator=gen))] if ok else 0
                choice.append(pick)
                accept.append(bool(ok) and bool(torch.rand(1, generator=gen) < 0.9))
                saved.append((routes, d, h, per_window))
            delta = oracle.commit(torch.tensor(choice), torch.tensor(accept))
            cost_after = oracle.cost().tolist()
            for row in range(batch):
                routes, d, h, per_window = saved[row]
                new_routes = oracle_routes(oracle, row)
                where = f"ep{episode} step{t} row{row} window{choice[row]} plan {routes}"
                if accept[row]:
                    cands, new = per_window[choice[row]]
                    committed[row][t] = new
                    check_commit(tally, cands, routes, new_routes, cost_before[row], cost_after[row],
                                 committed[row], d, h, where)
                    assert float(delta[row]) == pytest.approx(cost_after[row] - cost_before[row], abs=1e-9)
                else:
                    assert float(delta[row]) == 0.0 and new_routes == routes, where
            # the per-vehicle summary agrees with the committed routes
            load, count, back = oracle.vehicles()
            for row in range(batch):
                for v, route in enumerate(oracle_routes(oracle, row)):
                    cust = committed[row]
                    assert float(load[row, v]) == pytest.approx(sum(cust[c][5] for c in route))
                    assert int(count[row, v]) == len(route)
                    if route:
                        dist, viol, _, ret = simulate(route, cust, tuple(depot[row].tolist()), float(horizon[row]))
                        assert float(back[row, v]) == pytest.approx(ret + float(horizon[row]), abs=1e-6)
    assert_coverage(tally, min_quotes=1500)
    assert tally.capacity_binds >= 10 and tally.depot_binds >= 10, vars(tally)


def test_commit_of_infeasible_window_raises():
    """Accepting a window the quote found infeasible is refused, not silently inserted."""
    oracle = InsertionOracle(1, 1, 3, dtype=torch.float64)
    oracle.reset(torch.ones(1, dtype=torch.bool), torch.tensor([[50.0, 50.0]], dtype=torch.float64),
                 torch.tensor([100.0], dtype=torch.float64), torch.tensor([10.0], dtype=torch.float64),
                 torch.tensor([1]))
    windows = torch.tensor([[[0.0, 100.0], [0.0, 5.0]]], dtype=torch.float64)  # the second is too early
    q = oracle.quote(torch.tensor([0]), torch.tensor([[60.0, 50.0]], dtype=torch.float64),
                     torch.tensor([5.0], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64), windows)
    assert q.feasible.tolist() == [[True, False]]
    assert float(q.delta[0, 0]) == pytest.approx(20.0)
    with pytest.raises(ValueError):
        oracle.commit(torch.tensor([1]), torch.tensor([True]))
