"""The fleets of the real-size DVRP days: the fewest vehicles with which PyVRP serves every customer of a day on
its preferred window (the static VRPTW, every request known, nobody refused), per family of days.

    python benchmarks/dvrp_fleets.py [--data_dir ../shared/data/solomon] [--seconds 5] [--generated_days 16]
        [--sizes 50 100 200] [--workers 2]

Families: the six Solomon 100-customer families (R1, R2, C1, C2, RC1, RC2: ``solomon_txt/<family>*.txt``), the six
Gehring-Homberger 200-customer ones (``gh200/<family>_2_*.vrp``) and generated days of the DVRP env's default
config (R layout, H = 1000, w = 120, Q = 250) at each ``--sizes`` N (``--generated_days`` days each). A day's
fleet is the route count of PyVRP's best plan when each vehicle costs a fixed 10,000 km (so fewer vehicles
always win over distance: the hierarchical objective of Solomon's tables) within ``--seconds``; the family's
fleet is the largest over its days, the fleet a config of that family uses (each of its days then has a static
plan serving everyone, and the online problem, with requests in random order and insertion routing, is
squeezed as the headline's N=30, M=2 is). A family whose files are missing is skipped.

Human lines on stdout, the last line one JSON object ``{family: {"fleet": M, "days": [...], "seconds": s}}``.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SOLOMON = ("R1", "R2", "C1", "C2", "RC1", "RC2")
VEHICLE_COST = 10_000.0  # km per vehicle used: fewer vehicles first, then distance


def min_fleet(day: dict, seconds: float, scale: int = 10) -> tuple[int, float]:
    """(vehicles, km) of PyVRP's best plan of ``day`` (numpy ``xy`` [N+1, 2] depot first, ``demand``, ``ready``,
    ``due``, ``service`` [N+1], ``capacity``) serving every customer on its own window, a vehicle costing
    :data:`VEHICLE_COST`; (0, nan) when it finds no feasible plan."""
    import pyvrp
    from pyvrp.stop import MaxRuntime

    xy = day["xy"]
    n = xy.shape[0] - 1
    exact = np.linalg.norm(xy[:, None] - xy[None], axis=-1) * scale
    due = math.floor(day["due"][0] * scale)
    clients = [pyvrp.Client(location=i, delivery=[round(day["demand"][i])],
                            service_duration=math.ceil(day["service"][i] * scale - 1e-9),
                            tw_early=math.ceil(day["ready"][i] * scale - 1e-9),
                            tw_late=math.floor(day["due"][i] * scale + 1e-9)) for i in range(1, n + 1)]
    data = pyvrp.ProblemData(
        locations=[pyvrp.Location(x=float(x), y=float(y)) for x, y in xy], clients=clients,
        depots=[pyvrp.Depot(location=0, tw_early=0, tw_late=due)],
        vehicle_types=[pyvrp.VehicleType(num_available=n, capacity=[round(day["capacity"])], tw_early=0, tw_late=due,
                                         fixed_cost=round(VEHICLE_COST * scale))],
        distance_matrices=[np.rint(exact).astype(np.int64)], duration_matrices=[np.ceil(exact - 1e-9).astype(np.int64)])
    best = pyvrp.solve(data, stop=MaxRuntime(seconds), seed=0, collect_stats=False, display=False).best
    if not best.is_feasible():
        return 0, math.nan
    return best.num_routes(), best.distance() / scale


def file_days(pattern: str) -> list[tuple[str, dict]]:
    """Every file of a glob as a whole day (:func:`envs.dvrp.reader.read_instance_file`)."""
    from envs.dvrp.reader import read_instance_file

    return [(os.path.basename(p), read_instance_file(p)) for p in sorted(glob.glob(pattern))]


def generated_days(num_customers: int, count: int, seed: int = 0) -> list[tuple[str, dict]]:
    """``count`` generated days of the DVRP default config at N = ``num_customers`` (depot row first)."""
    import torch

    from envs.dvrp import DVRPConfig

    config = DVRPConfig(num_customers=num_customers)
    inst = config.source.sample(torch.arange(seed, seed + count), torch.float64)

    def col(key: str, depot: float, r: int) -> np.ndarray:
        return np.concatenate([[depot], inst[key][r].numpy()])

    out = []
    for r in range(count):
        horizon = float(inst["horizon"][r])
        out.append((f"N{num_customers}_{seed + r}", dict(
            xy=np.concatenate([inst["depot"][r].numpy()[None], inst["xy"][r].numpy()]),
            demand=col("demand", 0.0, r), ready=col("ready", 0.0, r), due=col("due", horizon, r),
            service=col("service", 0.0, r),
            capacity=float(inst["capacity"][r]))))
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default=os.path.join("..", "shared", "data", "solomon"))
    parser.add_argument("--seconds", type=float, default=5.0, help="PyVRP time per day")
    parser.add_argument("--generated_days", type=int, default=16)
    parser.add_argument("--sizes", type=int, nargs="*", default=[50, 100, 200])
    parser.add_argument("--families", nargs="*", default=None, help="only these families (e.g. R2 GH-R2 N100)")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args(argv)
    families = {f: os.path.join(args.data_dir, "solomon_txt", f"{f}*.txt") for f in SOLOMON}
    families.update({f"GH-{f}": os.path.join(args.data_dir, "gh200", f"{f}_2_*.vrp") for f in SOLOMON})
    days = {f: file_days(p) for f, p in families.items()}
    days.update({f"N{n}": generated_days(n, args.generated_days) for n in args.sizes})
    days = {f: d for f, d in days.items() if d and (args.families is None or f in args.families)}
    jobs = [(f, name, day) for f, found in days.items() for name, day in found]
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("forkserver")) as pool:
        solved = list(pool.map(min_fleet, [day for *_, day in jobs], [args.seconds] * len(jobs)))
    table: dict[str, dict] = {}
    for (family, name, _), (vehicles, km) in zip(jobs, solved, strict=True):
        row = table.setdefault(family, {"days": []})
        row["days"].append({"day": name, "vehicles": vehicles, "km": round(km, 1)})
    for family, row in table.items():
        counts = [d["vehicles"] for d in row["days"]]
        row.update(fleet=max(counts), median=float(np.median(counts)), seconds=args.seconds)
        print(f"{family:7s} fleet {row['fleet']:3d}  (days: min {min(counts)}, median {row['median']:g}, "
              f"max {max(counts)}; {len(counts)} days)")
    print(f"{len(jobs)} days in {time.perf_counter() - started:.0f} s "
          f"({args.seconds:g} s each, {args.workers} processes)")
    print(json.dumps(table))
    return table


if __name__ == "__main__":
    main()
