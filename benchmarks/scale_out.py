"""Scale-out overhead: frames/s of a DQN config with its envs in the learner's process, in N local worker processes
(``data.collector.workers: N``) and in N Ray actors on a simulated cluster (``data.collector.mode: ray``,
``ray.cluster_utils.Cluster``: one node per actor, or ``--ray_nodes`` nodes, 1 being Ray as started on one machine,
with one raylet), as ratios against in-process in one run, with each mode's start-up time.

    python benchmarks/scale_out.py [--configs cartpole hockey] [--workers 2] [--frames_per_batch 1024]
        [--batches 40] [--warmup_batches 2] [--utd_ratio 4] [--ray_nodes N] [--repeats R]

Each mode runs in its own spawned process: ``pipelines.fit`` on the config (no logger, checkpoints or callbacks
but the epsilon decay) with ``num_envs`` = ``8 * workers`` env rows, ``frames_per_batch`` frames per batch and
``utd_ratio`` updates per batch (the learner's share is the same in every mode), timed over ``batches`` batches
after ``warmup_batches`` untimed ones (``init_random_frames`` is one batch). ``startup_s`` is the time from
building the run to its first training batch (the actors' start included; the simulated cluster's own start is
``cluster_start_s``). The figure to watch on a
2-core machine, where no speed-up is possible, is the time per frame each mode adds over in-process:
``overhead_us_per_frame``, and ``ray_over_local_overhead`` (goal <= 1.5 at 1,000+ frames per batch). These are
small differences of large times, so one run's ratio swings: ``--repeats R`` runs the three modes R times in turn and
reports each mode's median run (:func:`overheads`). Prints one JSON object (last stdout line). Needs the ray
extra (``pip install -e .[ray]``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
CONFIGS = {"cartpole": os.path.join(ROOT, "configs", "cartpole_dqn.yaml"),
           "hockey": os.path.join(ROOT, "configs", "hockey_dqn.yaml")}


def run(config: str, mode: str, workers: int, frames_per_batch: int, batches: int, warmup_batches: int,
        utd_ratio: int, ray_nodes: int | None = None) -> dict:
    """One timed fit in this (spawned) process; ``mode`` is ``inprocess``, ``workers`` or ``ray``."""
    import torch

    torch.set_num_threads(1)
    from benchmarks.fit_timing import timed_fit

    start = time.perf_counter()
    cluster, cluster_start = None, 0.0
    extra: list[str] = []
    if mode == "workers":
        extra = [f"--data.init_args.collector.workers={workers}"]
    elif mode == "ray":
        import ray
        from ray.cluster_utils import Cluster

        nodes = ray_nodes or workers  # the actors' CPUs spread over the nodes (one actor per node by default)
        per_node = [workers // nodes + (i < workers % nodes) for i in range(nodes)]
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": per_node[0]})
        for cpus in per_node[1:]:
            cluster.add_node(num_cpus=cpus)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, configure_logging=False, log_to_driver=False)
        cluster_start = time.perf_counter() - start
        extra = ["--data.init_args.collector.mode=ray", f"--data.init_args.collector.workers={workers}",
                 f"--data.init_args.collector.ray.address={cluster.address}"]
    num_envs = 8 * workers
    total = frames_per_batch * (warmup_batches + batches)
    with tempfile.TemporaryDirectory(prefix="scale_out_") as tmp:
        args = ["--config", config, "--trainer.enable_progress_bar=false", "--trainer.logger=false",
                "--trainer.enable_checkpointing=false", f"--trainer.default_root_dir={tmp}",
                "--trainer.callbacks=[]", "--trainer.callbacks+=callbacks.EpsilonDecay",
                "--trainer.callbacks.annealing_frames=1000", f"--data.init_args.collector.num_envs={num_envs}",
                f"--data.init_args.collector.frames_per_batch={frames_per_batch}",
                f"--data.init_args.total_frames={total}",
                f"--data.init_args.replay_buffer.init_random_frames={frames_per_batch}",
                f"--data.init_args.replay_buffer.utd_ratio={utd_ratio}",
                *extra]
        sys.argv = sys.argv[:1]
        timing, cli = timed_fit(args, warmup_batches)
    startup = timing.get("startup_s")
    if cluster is not None:
        import ray

        ray.shutdown()
        cluster.shutdown()
    return {"frames_per_s": timing["frames_per_s"], "updates_per_s": timing["updates_per_s"],
            "frames": timing["frames"], "seconds": timing["seconds"], "startup_s": startup,
            "cluster_start_s": cluster_start,
            "wall_s": time.perf_counter() - start, "num_envs": num_envs,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


MODES = ("inprocess", "workers", "ray")


def overheads(runs: dict[str, list[dict]]) -> dict:
    """Each mode's median run (by frames/s, the lower middle one for an even count, with every run's
    ``rounds_frames_per_s``), its ratio and overhead per frame against in-process's median, ``ray_over_local_overhead``
    of the medians, and ``round_ray_over_local`` (the same ratio within each round: the rounds' spread)."""
    def median(done: list[dict]) -> dict:
        best = sorted(done, key=lambda r: r["frames_per_s"])[(len(done) - 1) // 2]
        return {**best, "rounds_frames_per_s": [r["frames_per_s"] for r in done]}

    def overhead(fps: float, base: float) -> float:
        return 1e6 / fps - 1e6 / base

    def ratio(ray: float, local: float) -> float | None:
        return ray / local if local > 0 else None

    modes = {mode: median(done) for mode, done in runs.items()}
    base = modes["inprocess"]["frames_per_s"]
    for mode in ("workers", "ray"):
        modes[mode]["ratio_vs_inprocess"] = modes[mode]["frames_per_s"] / base
        modes[mode]["overhead_us_per_frame"] = overhead(modes[mode]["frames_per_s"], base)
    modes["ray_over_local_overhead"] = ratio(modes["ray"]["overhead_us_per_frame"],
                                             modes["workers"]["overhead_us_per_frame"])
    modes["round_ray_over_local"] = [
        ratio(overhead(r["frames_per_s"], i["frames_per_s"]), overhead(w["frames_per_s"], i["frames_per_s"]))
        for i, w, r in zip(runs["inprocess"], runs["workers"], runs["ray"], strict=True)]
    return modes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--workers", type=int, default=2, help="local worker processes = Ray actors = nodes")
    parser.add_argument("--frames_per_batch", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--warmup_batches", type=int, default=2)
    parser.add_argument("--utd_ratio", type=int, default=4)
    parser.add_argument("--ray_nodes", type=int, default=None,
                        help="nodes of the simulated Ray cluster (default: one per actor; 1: one node, as `ray start` "
                             "on one machine, with one raylet)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds of the three modes in turn; each mode's median run is reported (default 1)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats={args.repeats} is not allowed: >= 1")
    if args.ray_nodes is not None and not 1 <= args.ray_nodes <= args.workers:
        parser.error(f"--ray_nodes={args.ray_nodes} is not allowed: 1 to --workers={args.workers}")
    result: dict = {"workers": args.workers, "ray_nodes": args.ray_nodes or args.workers,
                    "frames_per_batch": args.frames_per_batch, "batches": args.batches, "repeats": args.repeats,
                    "utd_ratio": args.utd_ratio,
                    "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                                "load_average_1min": os.getloadavg()[0]}}
    for name in args.configs:
        runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
        for _ in range(args.repeats):  # the modes in turn, so that a drift of the host's speed hits all of them
            for mode in MODES:
                print(f"{name} {mode} ...", file=sys.stderr, flush=True)
                with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
                    runs[mode].append(pool.submit(run, CONFIGS[name], mode, args.workers, args.frames_per_batch,
                                                  args.batches, args.warmup_batches, args.utd_ratio,
                                                  args.ray_nodes).result())
                print(f"{name} {mode}: {json.dumps(runs[mode][-1])}", file=sys.stderr, flush=True)
        result[name] = overheads(runs)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
