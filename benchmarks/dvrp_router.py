"""The DVRP's router against its payment: the scripted rules on the same held-out days, paid the never-improved
insertion plan and the plan improved by the batched local search (``envs.dvrp.local_search``) under each setting.

    python benchmarks/dvrp_router.py [--episodes 32] [--rules clairvoyant informed fallback] [--seed 10000000]
        [--settings '{"name": {"improve_every": 1, "cutoff_sweeps": 4, "cutoff_ruins": 30}, ...}'] [--key=value ...]

Every rule plays the same days (``pipelines.evaluate``'s evaluation seed by default) under every setting; the
insertion payment (``improve_every: 0, cutoff_sweeps: 0``) is the reference row. Prints a table and, as the last
stdout line, one JSON object: per setting and rule the return ± SE, the paired difference to the insertion payment
± SE, served customers, plan km and the seconds the episodes took (one thread). Extra ``--key=value`` pairs are
``DVRPConfig`` keys of every setting (e.g. ``--num_customers=100 --num_vehicles=7``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from functools import partial

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from envs.dvrp import DVRPConfig  # noqa: E402
from pipelines.console import rounded  # noqa: E402
from pipelines.evaluate import play  # noqa: E402

INSERTION = {"improve_every": 0, "cutoff_sweeps": 0}
SETTINGS = {"improved": {"improve_every": 1, "improve_passes": 1, "cutoff_sweeps": 4},
            "improved+ruins": {"improve_every": 1, "improve_passes": 2, "cutoff_sweeps": 4, "cutoff_ruins": 30}}


def mean_se(values: torch.Tensor) -> tuple[float, float]:
    return float(values.mean()), float(values.std() / math.sqrt(len(values))) if len(values) > 1 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--rules", nargs="+", default=["clairvoyant", "informed", "fallback"])
    parser.add_argument("--seed", type=int, default=10_000_000)
    parser.add_argument("--settings", type=json.loads, default=SETTINGS)
    args, extra = parser.parse_known_args()
    torch.set_num_threads(1)
    common = {k.lstrip("-"): json.loads(v) for k, v in (e.split("=", 1) for e in extra)}
    table: dict = {}
    reference: dict = {}
    for name, keys in {"insertion": INSERTION, **args.settings}.items():
        config = DVRPConfig(**common, **keys)
        table[name] = {"settings": keys}
        for rule in args.rules:
            start = time.perf_counter()
            result = play(config, partial(config.baseline_policies()[rule], seed=args.seed), args.episodes,
                          args.episodes, args.seed)
            seconds = time.perf_counter() - start
            returns = result["episode_return"]
            reference.setdefault(rule, returns)
            mean, se = mean_se(returns)
            gain, gain_se = mean_se(returns - reference[rule])
            table[name][rule] = {"return": mean, "return_se": se, "vs_insertion": gain, "vs_insertion_se": gain_se,
                                 "served": float(result["served"].mean()),
                                 "plan_cost_km": float(result["plan_cost_km"].mean()), "seconds": seconds}
            print(f"{name:16s} {rule:12s} {mean:9.1f} ± {se:5.1f}   vs insertion {gain:+8.1f} ± {gain_se:5.1f}   "
                  f"{seconds:6.1f} s", file=sys.stderr)
    print(json.dumps(rounded({"episodes": args.episodes, "seed": args.seed, "config": common, "table": table})))


if __name__ == "__main__":
    main()
