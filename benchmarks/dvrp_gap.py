"""Where the DVRP's gap to hindsight comes from: one chain of plans per rule on the same held-out days, each step
changing one thing, every difference paired over days (mean ± SE).

    python benchmarks/dvrp_gap.py [--episodes 32] [--rules clairvoyant informed fallback] [--seed 10000000]
        [--config configs/dvrp.yaml] [--resolve_seconds 0.5] [--hindsight_seconds 3] [--workers 2] [--key=value ...]

The chain (``../shared/notes/dvrp-gap.md``'s method, its PyVRP re-planning between arrivals replaced by the env's own
local search, which is what the env now pays):

* ``insertion``: the rule paid the never-improved cheapest-insertion plan (``improve_every: 0, cutoff_sweeps: 0``);
* ``local_search``: the same rule on the same days, paid the plan the env drives (the payment keys of ``--config``:
  local search after bookings, re-optimised at the cut-off); its decisions change, as its quotes and mask do;
* ``resolved``: ``local_search``'s customers and agreed windows, its final plan re-solved by PyVRP in
  ``--resolve_seconds`` (the shorter of the two plans kept): what the env's router leaves;
* ``windows``: ``local_search``'s customers, each on any window it accepts, chosen with the routes by PyVRP (the
  hindsight oracle on those customers, every one forced in): what the window offers lose;
* ``hindsight``: the hindsight oracle of the whole day (``--hindsight_seconds``): what the choice of customers loses.

and the hidden types' share, ``clairvoyant`` (knows each customer's type) minus ``informed`` (its posterior), at
every step. Gaps are ``(hindsight - return) / hindsight`` in %, a part is the difference of two steps' gaps (points).
Extra ``--key=value`` pairs are ``DVRPConfig`` keys of both payments (e.g. ``--num_customers=100
--num_vehicles=4``, or a Solomon family with ``--instances``). Prints a table and, as the last stdout line, one
JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial

import torch
import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.dvrp_router import mean_se  # noqa: E402
from envs.dvrp import DVRPConfig  # noqa: E402
from envs.dvrp.hindsight import solve_days  # noqa: E402
from envs.dvrp.reference import solve_with_pyvrp  # noqa: E402
from pipelines.console import rounded  # noqa: E402
from pipelines.play import play  # noqa: E402

INSERTION = {"improve_every": 0, "cutoff_sweeps": 0, "cutoff_ruins": 0}
PAYMENT_KEYS = ("improve_every", "improve_passes", "improve_reversal", "cutoff_sweeps", "cutoff_ruins",
                "cutoff_reversal", "neighbourhood")
STEPS = ("insertion", "local_search", "resolved", "windows", "hindsight")
FORCED = 1.0e4  # km-equivalents per customer: a prize no route's km outweighs, so every customer is served


def payment(config_path: str) -> dict:
    """The payment keys of a config's DVRP env (``data.init_args.env.init_args``)."""
    with open(config_path) as f:
        env = yaml.safe_load(f)["data"]["init_args"]["env"]["init_args"]
    return {key: env[key] for key in PAYMENT_KEYS if key in env}


def _resolved(plans: list[dict], returns: torch.Tensor, seconds: float) -> torch.Tensor:
    """The returns with each final plan replaced by PyVRP's re-solve of its customers and windows, where shorter."""
    saved = []
    for plan in plans:
        found = solve_with_pyvrp(plan, plan["num_vehicles"], seconds)
        saved.append(max(plan["cost_km"] - found[0], 0.0) if found is not None else 0.0)
    return returns + torch.tensor(saved, dtype=torch.float64)


def _windows(days: list[dict], plans: list[dict], config: DVRPConfig, seconds: float, workers: int) -> torch.Tensor:
    """The returns of each day's served customers on windows chosen with hindsight (every one forced in)."""
    served_days = []
    for day, plan in zip(days, plans, strict=True):
        served = {c["id"] for c in plan["customers"]}
        served_days.append({**day, "requests": [r for r in day["requests"] if r["id"] in served]})
    solved = solve_days(served_days, config.max_shift, FORCED, seconds, workers)
    return torch.tensor([config.served_reward * p.served - p.cost_km for p in solved], dtype=torch.float64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--rules", nargs="+", default=["clairvoyant", "informed", "fallback"])
    parser.add_argument("--seed", type=int, default=10_000_000)
    parser.add_argument("--config", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                         "configs", "dvrp.yaml"))
    parser.add_argument("--resolve_seconds", type=float, default=0.5)
    parser.add_argument("--hindsight_seconds", type=float, default=3.0)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    args, extra = parser.parse_known_args()
    torch.set_num_threads(1)
    common = {k.lstrip("-"): json.loads(v) for k, v in (e.split("=", 1) for e in extra)}
    paid = payment(args.config)
    configs = {"insertion": DVRPConfig(**common, **INSERTION), "local_search": DVRPConfig(**common, **paid)}
    started = time.perf_counter()
    returns: dict[str, dict[str, torch.Tensor]] = {rule: {} for rule in args.rules}
    days = None
    for rule in args.rules:
        for name, config in configs.items():
            result = play(config, partial(config.baseline_policies()[rule], seed=args.seed), args.episodes,
                          args.episodes, args.seed, keep_plans=True)
            returns[rule][name] = result["episode_return"]
        days = days or result["days"]  # (every rule and payment plays the same days)
        local = configs["local_search"]
        returns[rule]["resolved"] = _resolved(result["plans"], result["episode_return"], args.resolve_seconds)
        returns[rule]["windows"] = _windows(result["days"], result["plans"], local, args.resolve_seconds, args.workers)
    hindsight = configs["local_search"].hindsight(days, args.hindsight_seconds, args.workers)["episode_return"]
    scale = 100.0 / hindsight.abs().clamp_min(1e-9)
    table: dict = {"hindsight": {"return": mean_se(hindsight)}}
    for rule in args.rules:
        returns[rule]["hindsight"] = hindsight
        rows = {step: {"return": mean_se(returns[rule][step]), "gap_pct": mean_se((hindsight - returns[rule][step])
                                                                                    * scale)} for step in STEPS}
        parts = {f"{a}->{b}": mean_se((returns[rule][b] - returns[rule][a]) * scale)
                 for a, b in zip(STEPS, STEPS[1:], strict=False)}
        table[rule] = {"steps": rows, "parts_points": parts}
        for step in STEPS:
            (mean, se), (gap, gap_se) = rows[step]["return"], rows[step]["gap_pct"]
            print(f"{rule:12s} {step:13s} {mean:9.1f} ± {se:5.1f}   gap {gap:6.2f} ± {gap_se:4.2f}%", file=sys.stderr)
    if {"clairvoyant", "informed"} <= set(args.rules):
        table["types_points"] = {step: mean_se((returns["clairvoyant"][step] - returns["informed"][step]) * scale)
                                 for step in STEPS[:-1]}
    print(json.dumps(rounded({"episodes": args.episodes, "seed": args.seed, "config": common, "payment": paid,
                              "resolve_seconds": args.resolve_seconds, "hindsight_seconds": args.hindsight_seconds,
                              "seconds": time.perf_counter() - started, "table": table})))


if __name__ == "__main__":
    main()
