"""The scripted baselines on the DVRP env: the table of ``shared/notes/dvrp-defaults.md`` reproduced.

    python benchmarks/dvrp_baselines.py [--episodes 2000] [--instances GLOB] [--seed 12345] [--key=value ...]

Every baseline plays the same seeded episodes. Prints a table (return +- SE, cost km, failure rate,
served, refused offers, episodes/min) and, as the last stdout line, one JSON object with the same
figures plus each rule's gain over ``preferred`` relative to the clairvoyant rule's (100%: as much as the
clairvoyant rule gains; above 100%: more, which happens: the clairvoyant rule is myopic, no upper bound).
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
from envs.dvrp import DVRPConfig
from envs.dvrp.baselines import BASELINES
from pipelines.console import rounded
from pipelines.evaluate import play


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--num_envs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--instances", default=None, help="glob of benchmark files (capacity from the files)")
    parser.add_argument("--num_vehicles", type=int, default=2)
    args, extra = parser.parse_known_args()
    torch.set_num_threads(1)
    overrides = {k.lstrip("-"): json.loads(v) for k, v in (e.split("=", 1) for e in extra)}
    if args.instances:
        overrides.update(instances=args.instances, capacity=None)
    config = DVRPConfig(num_vehicles=args.num_vehicles, **overrides)
    table = {}
    for name in BASELINES:
        start = time.perf_counter()
        make = partial(config.baseline_policies()[name], seed=args.seed)
        r = play(config, make, args.episodes, min(args.num_envs, args.episodes), args.seed)
        minutes = (time.perf_counter() - start) / 60
        returns = r["episode_return"]
        table[name] = {"return": returns.mean().item(), "return_se": (returns.std() / math.sqrt(args.episodes)).item(),
                       "cost_km": r["plan_cost_km"].mean().item(), "failure_rate": r["failure_rate"].mean().item(),
                       "served": r["served"].mean().item(), "refused": r["refused"].mean().item(),
                       "episodes_per_min": args.episodes / minutes}
    lo, hi = table["preferred"]["return"], table["clairvoyant"]["return"]
    for row in table.values():
        row["gain_vs_clairvoyant"] = (row["return"] - lo) / (hi - lo) if hi != lo else float("nan")
    print(f"{args.episodes} episodes, seed {args.seed}, {config.instances or 'generated'}")
    print(f"{'policy':12s} {'return':>15s} {'cost km':>8s} {'failure':>8s} {'served':>7s} {'refused':>8s} "
          f"{'gain / clairvoyant gain':>24s}")
    for name, row in table.items():
        print(f"{name:12s} {row['return']:7.1f} ± {row['return_se']:4.1f} {row['cost_km']:8.1f} "
              f"{row['failure_rate']:8.3f} {row['served']:7.2f} {row['refused']:8.2f} "
              f"{100 * row['gain_vs_clairvoyant']:23.0f}%")
    print(json.dumps(rounded(table)))


if __name__ == "__main__":
    main()
