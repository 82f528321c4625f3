"""The DVRP size table: a trained policy, the scripted rules and the hindsight oracle on days of every size.

    python benchmarks/dvrp_sizes.py --ckpt_path runs/dvrp_large/version_0/checkpoints/last.ckpt [--ckpt_path ...]
        [--days N30 N100 R2 ...] [--episodes 128] [--hindsight_seconds_per_customer 0.03] [--workers 2]
        [--data_dir ../shared/data/solomon] [--policies fallback informed clairvoyant]

Days (``--days``; default all): generated days of the headline's env at N = 30, 50, 100 and 200 (``N<size>``), whole
Solomon 100-customer days of each family (``R1`` ... ``RC2``: every customer of a random file of the family, in random
order) and whole Gehring-Homberger 200-customer days (``GH-R1`` ... ``GH-RC2``), each with the family's fleet
(:data:`FLEETS`, from ``benchmarks/dvrp_fleets.py`` and the best-known solutions; docs/benchmarks.md) and, for
files, the file's capacity. A family whose files are missing is skipped. Every policy plays the same
``--episodes`` episodes (evaluation seed 10,000,000); the hindsight oracle solves the same days
(:mod:`envs.dvrp.hindsight`).

Each ``--ckpt_path`` is a trained policy (its run's own config; labelled by its run folder, e.g. ``dvrp/version_0``):
several give the train-size x test-size table. Per day set and policy: mean return ± SE, the paired difference to
the first trained policy ± SE, the gap to hindsight in % ± SE, customers served, and the seconds per episode of
playing it alone on this machine (``--num_threads`` threads, the days played ``--num_envs`` at once), or of solving it
(the hindsight oracle: per episode and process; its time limit is ``--hindsight_seconds_per_customer`` x N).
Human lines on stdout; the last line is one JSON object ``{days: {policy: row}}``.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipelines.threads import set_wait_policy

set_wait_policy()

import torch  # noqa: E402

from pipelines.evaluate import HINDSIGHT, hindsight_gap, load_run, play  # noqa: E402
from pipelines.trained_run import run_name  # noqa: E402

SIZES = (30, 50, 100, 200)
# vehicles per family: Solomon: the most any file of the family needs in its best-known (vehicles first) solution;
# Gehring-Homberger 200 and generated days: the most PyVRP needed on any day of the family (dvrp_fleets.py, 3 s/day);
# the headline's N=30 keeps its 2
FLEETS = {"N30": 2, "N50": 4, "N100": 7, "N200": 14, "R1": 19, "R2": 4, "C1": 10, "C2": 3, "RC1": 14, "RC2": 4,
          "GH-R1": 22, "GH-R2": 7, "GH-C1": 20, "GH-C2": 6, "GH-RC1": 20, "GH-RC2": 7}


def day_overrides(days: str, data_dir: str) -> list[str] | None:
    """The evaluate overrides that make ``days``' env (None when its files are missing)."""
    if days.startswith("N"):
        prefix = "--data.init_args.env.init_args."
        return [f"{prefix}num_customers={days[1:]}", f"{prefix}num_vehicles={FLEETS[days]}"]
    family = days.removeprefix("GH-")
    pattern = (os.path.join(data_dir, "gh200", f"{family}_2_*.vrp") if days.startswith("GH-")
               else os.path.join(data_dir, "solomon_txt", f"{family}[0-9]*.txt"))
    if not glob.glob(pattern):
        return None
    env = {"instances": pattern, "capacity": None, "num_customers": 200 if days.startswith("GH-") else 100,
           "num_vehicles": FLEETS[days]}
    return ["--data.init_args.env", json.dumps({"init_args": env})]  # (the run's env class, these keys)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt_path", action="append", required=True, help="a trained policy (repeatable)")
    parser.add_argument("--days", nargs="*", default=list(FLEETS))
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--num_envs", type=int, default=128)
    parser.add_argument("--policies", nargs="*", default=["preferred", "greedy", "fallback", "prior", "informed",
                                                          "clairvoyant"])
    parser.add_argument("--hindsight_seconds_per_customer", type=float, default=0.03,
                        help="the hindsight oracle's time limit per episode, per customer of the day (s)")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)), help="hindsight processes")
    parser.add_argument("--num_threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=10_000_000)
    parser.add_argument("--data_dir", default=os.path.join("..", "shared", "data", "solomon"))
    args = parser.parse_args(argv)
    unknown = [d for d in args.days if d not in FLEETS]
    if unknown:
        parser.error(f"unknown --days {unknown}; allowed: {', '.join(FLEETS)}")
    torch.set_num_threads(args.num_threads)
    table = {}
    for days in args.days:
        overrides = day_overrides(days, args.data_dir)
        if overrides is None:
            print(f"{days}: no files under {args.data_dir}, skipped")
            continue
        policies = {}  # label -> (env config, the run's learned env models, policy factory)
        for path in args.ckpt_path:
            model, data = load_run(None, path, overrides)
            policies[run_name(path)] = (data.env_config, data.env_models,
                                        lambda env, model=model: model.collector_policy)
        config = data.env_config
        baselines = config.baseline_policies()
        policies.update({p: (config, data.env_models, lambda env, make=baselines[p]: make(env, args.seed))
                         for p in args.policies})
        results, seconds, first = {}, {}, next(iter(policies))
        for label, (env_config, models, make_policy) in policies.items():
            torch.manual_seed(args.seed)
            started = time.perf_counter()
            results[label] = play(env_config, make_policy, args.episodes, min(args.num_envs, args.episodes),
                                  args.seed, keep_plans=label == first, models=models)
            seconds[label] = (time.perf_counter() - started) / args.episodes
        started = time.perf_counter()
        limit = args.hindsight_seconds_per_customer * config.num_customers
        results[HINDSIGHT] = config.hindsight(results[first]["days"], limit, args.workers)
        seconds[HINDSIGHT] = (time.perf_counter() - started) * min(args.workers, args.episodes) / args.episodes
        mine, n = results[first]["episode_return"], args.episodes
        rows = {}
        print(f"{days}: {config.num_customers} customers, {config.num_vehicles} vehicles, {n} episodes; "
              f"paired differences to {first}; hindsight {limit:g} s per episode")
        for label, result in results.items():
            r = result["episode_return"]
            diff = mine - r
            gap, gap_se = hindsight_gap(results[HINDSIGHT]["episode_return"], r)
            rows[label] = {"mean_return": r.mean().item(), "return_se": (r.std() / math.sqrt(n)).item(),
                           "first_minus": diff.mean().item(), "first_minus_se": (diff.std() / math.sqrt(n)).item(),
                           "gap_to_hindsight_pct": gap, "gap_to_hindsight_se_pct": gap_se,
                           "served": result["served"].mean().item(), "seconds_per_episode": seconds[label]}
            row = rows[label]
            print(f"  {label:20s} {row['mean_return']:9.1f} ± {row['return_se']:5.1f}   first - row "
                  f"{row['first_minus']:+8.1f} ± {row['first_minus_se']:5.1f}   gap {gap:6.2f} ± {gap_se:4.2f}%   "
                  f"served {row['served']:6.1f}   {row['seconds_per_episode']:.3f} s/episode")
        table[days] = {label: {k: round(v, 4) for k, v in row.items()} for label, row in rows.items()}
    print(json.dumps(table))
    return table


if __name__ == "__main__":
    main()
