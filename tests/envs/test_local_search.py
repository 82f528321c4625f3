"""The batched local search on the insertion oracle's plan (``envs.dvrp.local_search``): every plan it returns is
feasible in exact arithmetic (checked by an independent walk of every route), serves the same customers, is never
longer and is paid as the sum of its legs; with full neighbourhoods it leaves no improving move between routes that a
brute-force search finds; it reads nothing back from the device."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from benchmarks.host_reads import HostReads
from envs.dvrp import local_search
from envs.dvrp.oracle import InsertionOracle
from envs.dvrp.plan import DUE, NODE, READY, SERVICE, X, Y

HORIZON = 1000.0


def _day(b: int, n: int, m: int, seed: int, dtype: torch.dtype, capacity: float, fleet: int | None = None):
    """An insertion plan of ``n`` random requests per row (each offered its one window, accepted where feasible)."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(b, n, 2, generator=g, dtype=dtype) * 100
    ready = torch.rand(b, n, generator=g, dtype=dtype) * 700
    width = 60 + torch.rand(b, n, generator=g, dtype=dtype) * 240
    demand = torch.randint(1, 10, (b, n), generator=g).to(dtype)
    oracle = InsertionOracle(b, m, n, dtype=dtype)
    oracle.reset(torch.ones(b, dtype=torch.bool), torch.full((b, 2), 50.0, dtype=dtype),
                 torch.full((b,), HORIZON, dtype=dtype), torch.full((b,), capacity, dtype=dtype),
                 torch.full((b,), m if fleet is None else fleet))
    for t in range(n):
        windows = torch.stack([ready[:, t], ready[:, t] + width[:, t]], -1).unsqueeze(1)
        quote = oracle.quote(torch.full((b,), t), xy[:, t], demand[:, t], torch.full((b,), 10.0, dtype=dtype),
                             windows)
        oracle.commit(torch.zeros(b, dtype=torch.long), quote.feasible[:, 0])
    return oracle, xy, demand.t().contiguous()


def _routes(plan: torch.Tensor, length: torch.Tensor, row: int) -> list[list[int]]:
    return [[int(plan[NODE, p, m, row]) for p in range(1, int(length[m, row]) + 1)] for m in range(plan.shape[2])]


def _walk(route: list[int], nodes: dict, depot: tuple, slack: float = 0.0) -> float | None:
    """The km of ``route`` if it is feasible with ``slack`` to spare at every window and at the horizon, else None."""
    t, (px, py), km = 0.0, depot, 0.0
    for c in route:
        x, y, ready, due, service = nodes[c]
        d = math.hypot(x - px, y - py)
        t, km = max(t + d, ready), km + d
        if t > due - slack:
            return None
        t, px, py = t + service, x, y
    d = math.hypot(depot[0] - px, depot[1] - py) if route else 0.0
    return km + d if t + d <= HORIZON - slack else None


def _total(routes: list[list[int]], nodes: dict, loads: dict, capacity: float, slack: float) -> float | None:
    """The km of a candidate plan if every route fits the capacity and is feasible with ``slack``, else None."""
    if any(sum(loads[c] for c in r) > capacity for r in routes):
        return None
    km = [_walk(r, nodes, (50.0, 50.0), slack) for r in routes]
    return None if None in km else sum(km)


def _nodes(plan: torch.Tensor, row: int) -> dict:
    """Each routed customer's (x, y, agreed window, service) as plain floats."""
    found = {}
    for p, m in itertools.product(range(plan.shape[1]), range(plan.shape[2])):
        c = int(plan[NODE, p, m, row])
        if c >= 0:
            found[c] = tuple(float(plan[ch, p, m, row]) for ch in (X, Y, READY, DUE, SERVICE))
    return found


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("n, m, capacity, fleet", [(30, 3, 60.0, None), (20, 4, 25.0, 3), (40, 2, 1000.0, None)])
def test_every_improved_plan_is_feasible_shorter_and_serves_the_same_customers(dtype, n, m, capacity, fleet):
    oracle, xy, demand = _day(32, n, m, seed=n + m, dtype=dtype, capacity=capacity, fleet=fleet)
    before = local_search.plan_cost(oracle.plan)
    plan, length, load = local_search.improve(oracle.plan, oracle.length, oracle.load, oracle.capacity, demand,
                                              local_search.neighbours(xy, 8), passes=12, margin=oracle.margin)
    after = local_search.plan_cost(plan)
    assert bool((after <= before).all()) and float((before - after).mean()) > 0.05 * float(before.mean())
    depot = (50.0, 50.0)
    for row in range(32):
        nodes, routes = _nodes(plan, row), _routes(plan, length, row)
        assert sorted(c for r in routes for c in r) == sorted(_nodes(oracle.plan, row))  # the same customers
        km = [_walk(r, nodes, depot) for r in routes]
        assert None not in km, f"row {row}: an infeasible route in {routes}"
        assert sum(km) == pytest.approx(float(after[row]), rel=1e-4, abs=1e-3)
        for v, r in enumerate(routes):
            assert sum(float(demand[c, row]) for c in r) == pytest.approx(float(load[v, row]))
            assert not r or float(load[v, row]) <= float(oracle.capacity[v, row])  # (out of the fleet: -1, empty)


def test_no_improving_move_between_routes_is_left_with_full_neighbourhoods():
    """Tiny plans, every customer a neighbour of every other, many passes: a brute force over every relocate (of
    one customer or a segment of 2-3), exchange and 2-opt* between two routes (feasible with twice the margin to
    spare, as the search requires) finds nothing shorter by more than the search's tolerance."""
    n, m = 7, 3
    oracle, xy, demand = _day(16, n, m, seed=5, dtype=torch.float64, capacity=25.0)
    plan, length, load = local_search.improve(oracle.plan, oracle.length, oracle.load, oracle.capacity, demand,
                                              local_search.neighbours(xy, n - 1), passes=40, margin=oracle.margin)
    slack, tolerance = 2 * oracle.margin, 2e-3
    for row in range(16):
        nodes, routes = _nodes(plan, row), _routes(plan, length, row)
        loads = {c: float(demand[c, row]) for c in nodes}
        now = sum(_walk(r, nodes, (50.0, 50.0)) for r in routes)
        for a, b in itertools.permutations(range(m), 2):
            ra, rb = routes[a], routes[b]
            candidates = []
            for k, i, j in itertools.product((1, 2, 3), range(len(ra)), range(len(rb) + 1)):  # ra[i:i+k] into rb at j
                if i + k <= len(ra):
                    candidates.append((ra[:i] + ra[i + k:], rb[:j] + ra[i:i + k] + rb[j:]))
            for i, j in itertools.product(range(len(ra)), range(len(rb))):  # exchange
                candidates.append((ra[:i] + [rb[j]] + ra[i + 1:], rb[:j] + [ra[i]] + rb[j + 1:]))
            for i, j in itertools.product(range(len(ra)), range(len(rb) + 1)):  # 2-opt*: ra up to i, then rb from j
                candidates.append((ra[:i + 1] + rb[j:], rb[:j] + ra[i + 1:]))
            for new_a, new_b in candidates:
                others = [r for k, r in enumerate(routes) if k not in (a, b)]
                km = _total([new_a, new_b, *others], nodes, loads, 25.0, slack)
                assert km is None or km >= now - tolerance, f"row {row}: {routes} -> {new_a}, {new_b}: {km} < {now}"



def _improving_reversals(plan, length, row: int, slack: float, tolerance: float = 2e-3) -> list:
    """Every reversal of 2 or more customers after a customer of one route (feasible with ``slack`` to spare) that
    shortens the plan by more than ``tolerance``: a brute force."""
    nodes, found = _nodes(plan, row), []
    for r in _routes(plan, length, row):
        now = _walk(r, nodes, (50.0, 50.0))
        for i, j in itertools.combinations(range(len(r)), 2):
            if j - i >= 2:
                new = r[:i + 1] + r[i + 1:j + 1][::-1] + r[j + 1:]
                km = _walk(new, nodes, (50.0, 50.0), slack)
                if km is not None and km < now - tolerance:
                    found.append((r, new))
    return found


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_reversals_keep_plans_feasible_and_leave_none_that_improves(dtype):
    """2-opt within a route (``reversal``): every plan stays feasible with the same customers, and with full
    neighbourhoods a brute force finds no improving reversal left, where the search without them leaves some."""
    n, m = 10, 2
    oracle, xy, demand = _day(24, n, m, seed=11, dtype=dtype, capacity=1000.0)
    near, slack = local_search.neighbours(xy, n - 1), (n + 2) * oracle.margin  # (the walk's margins add up)
    without = local_search.improve(oracle.plan, oracle.length, oracle.load, oracle.capacity, demand, near,
                                   passes=60, margin=oracle.margin)
    plan, length, load = local_search.improve(oracle.plan, oracle.length, oracle.load, oracle.capacity, demand,
                                              near, passes=60, margin=oracle.margin, reversal=n)
    assert any(_improving_reversals(without[0], without[1], row, slack) for row in range(24))
    after = local_search.plan_cost(plan)
    for row in range(24):
        nodes, routes = _nodes(plan, row), _routes(plan, length, row)
        assert sorted(c for r in routes for c in r) == sorted(_nodes(oracle.plan, row))
        km = [_walk(r, nodes, (50.0, 50.0)) for r in routes]
        assert None not in km and sum(km) == pytest.approx(float(after[row]), rel=1e-4, abs=1e-3)
        assert _improving_reversals(plan, length, row, slack) == [], row


def test_a_pass_reads_nothing_back():
    oracle, xy, demand = _day(8, 12, 2, seed=1, dtype=torch.float32, capacity=60.0)
    near = local_search.neighbours(xy, 4)
    with HostReads() as reads:
        local_search.improve(oracle.plan, oracle.length, oracle.load, oracle.capacity, demand, near, passes=3,
                             margin=oracle.margin)
    assert reads.total == 0, reads.sites.most_common(5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_ruin_and_recreate_keeps_every_plan_feasible_and_shortens_local_optima(dtype):
    """Customers taken out near one another and put back by cheapest insertion, then swept, kept where shorter: every
    plan stays feasible with the same customers, none gets longer, and the local search's optima get shorter."""
    oracle, xy, demand = _day(32, 30, 3, seed=3, dtype=dtype, capacity=60.0)
    near = local_search.neighbours(xy, 8)
    swept = local_search.sweep(oracle.plan, oracle.length, oracle.load, oracle.capacity, demand, near, 6,
                               oracle.margin, chunk=9)
    plan, length, load = local_search.ruin_and_recreate(*swept, oracle.capacity, demand, near, oracle.margin,
                                                        iterations=12, size=6)
    before, after = local_search.plan_cost(swept[0]), local_search.plan_cost(plan)
    assert bool((after <= before).all()) and float((before - after).mean()) > 0.01 * float(before.mean())
    for row in range(32):
        nodes, routes = _nodes(plan, row), _routes(plan, length, row)
        assert sorted(c for r in routes for c in r) == sorted(_nodes(oracle.plan, row))
        km = [_walk(r, nodes, (50.0, 50.0)) for r in routes]
        assert None not in km and sum(km) == pytest.approx(float(after[row]), rel=1e-4, abs=1e-3)
        for v, r in enumerate(routes):
            assert sum(float(demand[c, row]) for c in r) == pytest.approx(float(load[v, row]))


def test_neighbourhoods_are_routed_customers_related_in_km_and_time():
    """A neighbourhood holds customers in the plan first; near in km but hours apart in time ranks after a farther
    customer whose window follows on; the neighbours of a few customers (``of``) are those of the whole table."""
    xy = torch.tensor([[[0.0, 0.0], [1.0, 0.0], [5.0, 0.0], [2.0, 0.0]]])
    windows = torch.tensor([[0.0, 900.0, 10.0, 500.0], [10.0, 910.0, 20.0, 510.0], [0.0, 0.0, 0.0, 0.0]]).unsqueeze(-1)
    assert local_search.neighbours(xy, 1)[0, 0, 0] == 1  # km alone: customer 1
    assert local_search.neighbours(xy, 1, windows=windows)[0, 0, 0] == 2  # 1's window is 900 later, 3's 500
    routed = torch.tensor([True, True, True, False]).unsqueeze(-1)
    assert local_search.neighbours(xy, 2, routed)[:, 0, 0].tolist() == [1, 2]  # 3 (2 km) is not in the plan
    oracle, xy, _ = _day(16, 20, 2, 5, torch.float32, 30.0)
    routed, windows = local_search.routed_windows(oracle.plan, 20)
    assert 0 < routed.sum() < routed.numel()  # (some requests refused: not in the plan)
    every = local_search.neighbours(xy, 6, routed, windows)
    of = torch.randint(20, (3, 16), generator=torch.Generator().manual_seed(0))
    some = local_search.neighbours(xy, 6, routed, windows, of)
    assert torch.equal(some, every.gather(1, of.unsqueeze(0).expand(6, -1, -1)))
    both = routed.sum(0) > 6  # rows with more than K routed customers: every neighbour of a routed one is routed
    assert routed.gather(0, every.flatten(0, 1)).view(6, 20, 16)[:, routed & both].all()
