"""``benchmarks/dvrp_gap.py`` at a tiny size: one JSON line whose parts add up to each rule's whole gap, the plan the
env drives paying more than the insertion plan, on the same days for every rule."""

import json

import pytest

from tests.pipelines.conftest import run_module


def test_the_gap_decomposition_adds_up():
    proc = run_module("benchmarks.dvrp_gap", "--episodes", "4", "--rules", "clairvoyant", "informed",
                      "--resolve_seconds", "0.05", "--hindsight_seconds", "0.2", "--workers", "1",
                      "--num_customers=12", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["payment"]["improve_every"] >= 1  # (configs/dvrp.yaml's payment)
    table = result["table"]
    for rule in ("clairvoyant", "informed"):
        steps, parts = table[rule]["steps"], table[rule]["parts_points"]
        assert steps["hindsight"]["return"] == table["hindsight"]["return"] and steps["hindsight"]["gap_pct"][0] == 0
        assert sum(p[0] for p in parts.values()) == pytest.approx(steps["insertion"]["gap_pct"][0], abs=1e-3)
        assert steps["resolved"]["return"][0] >= steps["local_search"]["return"][0]
    assert table["clairvoyant"]["parts_points"]["insertion->local_search"][0] > 0
    assert set(table["types_points"]) == {"insertion", "local_search", "resolved", "windows"}
