"""``benchmarks/dvrp_router.py`` at a tiny size: one JSON line, the same days under every payment, the improved
plan paying more than the insertion plan."""

import json

from tests.pipelines.conftest import run_module


def test_the_router_benchmark_prints_its_table():
    settings = json.dumps({"improved": {"improve_every": 1, "cutoff_sweeps": 1, "cutoff_ruins": 2}})
    proc = run_module("benchmarks.dvrp_router", "--episodes", "6", "--rules", "clairvoyant", "--settings", settings,
                      "--num_customers=12", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = json.loads(proc.stdout.strip().splitlines()[-1])["table"]
    assert table["insertion"]["clairvoyant"]["vs_insertion"] == 0.0
    assert table["improved"]["clairvoyant"]["vs_insertion"] > 0
