"""Quality and speed of the neural routing oracle against cheapest insertion and PyVRP.

    python benchmarks/oracle_quality.py --checkpoint runs/vrptw_oracle/version_0/checkpoints/last.ckpt
        [--instances 256] [--pyvrp_instances 24] [--pyvrp_seconds 1.0] [--batch_sizes 64 1024]
        [--data_dir ../shared/data/solomon] [--policy fallback]

Instances are the final served sets of DVRP episodes played by a scripted offer policy (so each is
feasible: the insertion oracle built its plan), with the customers' agreed windows, on generated
episodes (the DVRP default config) and on Solomon-based 30-customer episodes of the R1, C1 and RC1
files (M = 6, 3, 6, the files' own capacity; a family is skipped when the data folder is missing).
Per family:

* ``insertion``: reset + cheapest insertion of the customers in arrival order with their agreed
  windows (the online plan); ``neural``: one greedy call of the routing policy over all instances, per
  ``num_augment`` (greedy plans per instance under coordinate symmetries, best feasible kept; the
  headline ``gap_*`` and ``feasible.neural`` use the last ``--augment`` value);
  ``pyvrp``: PyVRP's hybrid genetic search (``envs.dvrp.reference``) on the first ``pyvrp_instances``.
* ``gap_vs_pyvrp`` / ``gap_vs_insertion``: mean of (neural - reference) / reference over the instances
  where both are feasible (fractions; > 0 = neural is longer); ``insertion_gap_vs_pyvrp`` likewise.
* ``feasible``: share of instances each method routed completely within M vehicles.

Speed: ``instances_per_s`` of both oracles solving generated instances at each batch size, on the CPU
(1 thread) and on a GPU when one is available; ``dvrp_step_s``: seconds per DVRP env step (B rows,
N=30, W=7 windows, after ``warm_steps`` steps) with each oracle. Human lines go to stdout; the last
line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from envs.dvrp import DVRPConfig, DVRPEnv
from envs.dvrp.baselines import ScriptedOfferPolicy
from envs.dvrp.neural_oracle import NeuralOracle
from envs.dvrp.oracle import InsertionOracle
from envs.dvrp.reference import solve_with_pyvrp
from envs.vrptw.source import ServedSetInstances
from pipelines.env_models import load_exported_model

FAMILIES = {"R1": ("R1*.txt", 6), "C1": ("C1*.txt", 3), "RC1": ("RC1*.txt", 6)}


def insertion_solve(problem, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Cost ``[R]`` (km) and feasibility of cheapest insertion in slot (arrival) order, agreed windows."""
    r, s = problem["present"].shape
    m = int(problem["num_vehicles"][0])
    oracle = InsertionOracle(r, m, s - 1, device=device, dtype=problem["loc"].dtype)
    oracle.reset(torch.ones(r, dtype=torch.bool, device=device), problem["loc"][:, 0], problem["horizon"],
                 problem["capacity"], torch.full((r,), m, device=device))
    feasible = torch.ones(r, dtype=torch.bool, device=device)
    for i in range(1, s):
        window = torch.stack([problem["ready"][:, i], problem["due"][:, i]], -1).unsqueeze(1)
        quote = oracle.quote(torch.full((r,), i - 1, device=device), problem["loc"][:, i], problem["demand"][:, i],
                             problem["service"][:, i], window)
        present = problem["present"][:, i]
        feasible &= quote.feasible[:, 0] | ~present
        oracle.commit(torch.zeros(r, dtype=torch.long, device=device), present & quote.feasible[:, 0])
    return oracle.cost(), feasible


def to_record(problem, row: int) -> dict:
    """One problem row in the ``DVRPEnv.export_episodes`` format (customer ids = slot + 1; no routes)."""
    p = {k: v[row].double().tolist() for k, v in problem.items() if k != "present"}
    present = problem["present"][row].tolist()
    return {"depot": {"x": p["loc"][0][0], "y": p["loc"][0][1], "due": p["horizon"]}, "capacity": p["capacity"],
            "customers": [{"id": i, "x": p["loc"][i][0], "y": p["loc"][i][1], "demand": p["demand"][i],
                           "service_time": p["service"][i], "window": [p["ready"][i], p["due"][i]]}
                          for i in range(1, len(present)) if present[i]]}


def mean_gap(cost: torch.Tensor, ref: torch.Tensor, ok: torch.Tensor) -> float | None:
    """Mean relative gap over ``ok`` rows with a positive reference; None when there is none."""
    ok = ok & (ref > 0)
    return float(((cost[ok] - ref[ok]) / ref[ok]).mean()) if bool(ok.any()) else None


def family_quality(name: str, config: DVRPConfig, policy, args) -> dict:
    """Gaps and feasible rates of one family (see the module docstring), per ``num_augment`` setting."""
    keys = torch.arange(args.instances, dtype=torch.long) + args.seed
    source = ServedSetInstances(config, policies=(args.policy,), with_candidate=False)
    problem = source.sample(keys, stop=torch.full_like(keys, config.num_customers))
    ins_cost, ins_ok = insertion_solve(problem, torch.device("cpu"))
    k = min(args.pyvrp_instances, args.instances)
    py = [solve_with_pyvrp(to_record(problem, i), config.num_vehicles, args.pyvrp_seconds) for i in range(k)]
    py_ok = torch.tensor([x is not None for x in py], dtype=torch.bool)
    py_cost = torch.tensor([x[0] if x is not None else float("nan") for x in py], dtype=ins_cost.dtype)
    out = {
        "instances": args.instances, "pyvrp_instances": k, "num_vehicles": config.num_vehicles,
        "mean_customers": float(problem["present"][:, 1:].sum(-1).float().mean()),
        "insertion_gap_vs_pyvrp": mean_gap(ins_cost[:k], py_cost, ins_ok[:k] & py_ok),
        "feasible": {"insertion": float(ins_ok.float().mean()), "pyvrp": float(py_ok.float().mean())},
        "mean_cost_km": {"insertion": float(ins_cost[ins_ok].mean())},
        "neural": {},
    }
    for a in args.augment:
        _, cost, ok = policy.solve(problem, num_augment=a)
        cost = cost.to(ins_cost.dtype)
        out["neural"][str(a)] = {
            "gap_vs_pyvrp": mean_gap(cost[:k], py_cost, ok[:k] & py_ok),
            "gap_vs_insertion": mean_gap(cost, ins_cost, ok & ins_ok),
            "feasible": float(ok.float().mean()),
            "mean_cost_km": float(cost[ok].mean()) if bool(ok.any()) else None,
        }
        print(f"{name} (num_augment={a}): neural feasible {float(ok.float().mean()):.3f}, gap vs insertion "
              f"{out['neural'][str(a)]['gap_vs_insertion']}, gap vs PyVRP {out['neural'][str(a)]['gap_vs_pyvrp']} "
              f"(insertion vs PyVRP {out['insertion_gap_vs_pyvrp']})", flush=True)
    head = out["neural"][str(args.augment[-1])]
    out.update(gap_vs_pyvrp=head["gap_vs_pyvrp"], gap_vs_insertion=head["gap_vs_insertion"])
    out["feasible"]["neural"] = head["feasible"]
    return out


def timed(fn, repeats: int) -> float:
    """Seconds per call of ``fn`` (one warm-up call, then the mean of ``repeats``)."""
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats


def speed(policy, config: DVRPConfig, batch_sizes: list[int], device: torch.device, args) -> dict:
    """Instances/s of both oracles (neural per ``num_augment``) and DVRP env step times with each, on ``device``."""
    policy = policy.to(device)
    source = ServedSetInstances(config, policies=(args.policy,), with_candidate=False)
    out: dict = {"instances_per_s": {"insertion": {}, **{f"neural_augment_{a}": {} for a in args.augment}},
                 "dvrp_step_s": {"insertion": {}, **{f"neural_augment_{a}": {} for a in args.augment}}}
    for b in batch_sizes:
        keys = torch.arange(b, dtype=torch.long)
        problem = source.sample(keys, stop=torch.full_like(keys, config.num_customers)).to(device)
        seconds = timed(lambda p=problem: insertion_solve(p, device), args.repeats)
        out["instances_per_s"]["insertion"][str(b)] = b / seconds
        for a in args.augment:
            seconds = timed(lambda p=problem, a=a: policy.solve(p, num_augment=a), args.repeats)
            out["instances_per_s"][f"neural_augment_{a}"][str(b)] = b / seconds
    for b in args.step_batch_sizes:
        for kind in out["dvrp_step_s"]:
            env = DVRPEnv(config, num_envs=b, seed=0, device=device)
            if kind != "insertion":
                env.oracle = NeuralOracle(b, config.num_vehicles, config.num_customers, policy, device=device,
                                          num_augment=int(kind.rsplit("_", 1)[1]))
            rule = ScriptedOfferPolicy(args.policy, env)
            td = env.reset()
            for _ in range(args.warm_steps):  # a few customers in the plan first
                td = env.step(rule(td))["next"]
            start = time.perf_counter()
            for _ in range(args.timed_steps):
                td = env.step(rule(td))["next"]
            out["dvrp_step_s"][kind][str(b)] = (time.perf_counter() - start) / args.timed_steps
    print(f"{device}: {json.dumps(out)}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, help="routing-policy checkpoint (configs/vrptw_oracle.yaml)")
    parser.add_argument("--instances", type=int, default=256, help="instances per family")
    parser.add_argument("--pyvrp_instances", type=int, default=24, help="instances per family solved by PyVRP")
    parser.add_argument("--pyvrp_seconds", type=float, default=1.0, help="PyVRP run time per instance")
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--step_batch_sizes", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--repeats", type=int, default=2, help="timed calls per speed figure")
    parser.add_argument("--augment", type=int, nargs="+", default=[1, 8],
                        help="num_augment settings of the neural oracle (the last one is the headline)")
    parser.add_argument("--warm_steps", type=int, default=10, help="DVRP steps before the timed ones")
    parser.add_argument("--timed_steps", type=int, default=3, help="timed DVRP steps per figure")
    parser.add_argument("--policy", default="fallback", help="scripted offer policy playing the episodes")
    parser.add_argument("--data_dir", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data",
                                                           "solomon"))
    parser.add_argument("--seed", type=int, default=2_000_000)
    parser.add_argument("--num_threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.num_threads)
    generated = DVRPConfig()
    policy, trained_for = load_exported_model(args.checkpoint, "routing_policy")
    generated.check_model("routing_policy", policy, trained_for)  # checks num_customers
    result: dict = {"checkpoint": args.checkpoint, "policy": args.policy, "families": {}}
    with torch.no_grad():
        result["families"]["generated"] = family_quality("generated", generated, policy, args)
        folder = os.path.join(args.data_dir, "solomon_txt")
        for name, (pattern, vehicles) in FAMILIES.items():
            if not os.path.isdir(folder):
                print(f"{name}: skipped, no Solomon data at {folder}", flush=True)
                continue
            config = DVRPConfig(instances=os.path.join(folder, pattern), capacity=None, num_vehicles=vehicles)
            result["families"][name] = family_quality(name, config, policy, args)
        result["speed"] = {"cpu": speed(policy, generated, args.batch_sizes, torch.device("cpu"), args)}
        if torch.cuda.is_available():
            result["speed"]["cuda"] = speed(policy, generated, args.batch_sizes, torch.device("cuda"), args)
    gap = result["families"]["generated"]["gap_vs_pyvrp"]
    result["goal_within_10pct_of_pyvrp_generated"] = gap is not None and gap <= 0.10
    print(json.dumps(result))


if __name__ == "__main__":
    main()
