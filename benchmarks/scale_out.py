"""Scale-out overhead: frames/s of a DQN config with its envs in the learner's process, in N local worker processes
(``data.workers: N``) and in N Ray actors on a simulated cluster (``data.collector: ray``, one node per actor,
``ray.cluster_utils.Cluster``), as ratios against in-process in one run, with each mode's start-up time.

    python benchmarks/scale_out.py [--configs cartpole hockey] [--workers 2] [--frames_per_batch 1024]
        [--batches 40] [--warmup_batches 2] [--utd_ratio 4]

Each mode runs in its own spawned process: ``pipelines.fit`` on the config (no logger, checkpoints or callbacks
but the epsilon decay) with ``num_envs`` = ``8 * workers`` env rows, ``frames_per_batch`` frames per batch and
``utd_ratio`` updates per batch (the learner's share is the same in every mode), timed over ``batches`` batches
after ``warmup_batches`` untimed ones (``init_random_frames`` is one batch). ``startup_s`` is the time from
building the run to its first training batch (the actors' start included; the simulated cluster's own start is
``cluster_start_s``). The figure to watch on a
2-core machine, where no speed-up is possible, is the time per frame each mode adds over in-process:
``overhead_us_per_frame``, and ``ray_over_local_overhead`` (goal <= 1.5 at 1,000+ frames per batch). Prints one
JSON object (last stdout line). Needs the ray extra (``pip install -e .[ray]``).
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
        utd_ratio: int) -> dict:
    """One timed fit in this (spawned) process; ``mode`` is ``inprocess``, ``workers`` or ``ray``."""
    import torch

    torch.set_num_threads(1)
    from benchmarks.fit_timing import timed_fit

    start = time.perf_counter()
    cluster, cluster_start = None, 0.0
    extra: list[str] = []
    if mode == "workers":
        extra = [f"--data.init_args.workers={workers}"]
    elif mode == "ray":
        import ray
        from ray.cluster_utils import Cluster

        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        for _ in range(workers - 1):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, configure_logging=False, log_to_driver=False)
        cluster_start = time.perf_counter() - start
        extra = ["--data.init_args.collector=ray", f"--data.init_args.workers={workers}",
                 f"--data.init_args.ray.address={cluster.address}"]
    num_envs = 8 * workers
    total = frames_per_batch * (warmup_batches + batches)
    with tempfile.TemporaryDirectory(prefix="scale_out_") as tmp:
        args = ["--config", config, "--trainer.enable_progress_bar=false", "--trainer.logger=false",
                "--trainer.enable_checkpointing=false", f"--trainer.default_root_dir={tmp}",
                "--trainer.callbacks=[]", "--trainer.callbacks+=callbacks.EpsilonDecay",
                "--trainer.callbacks.decay_frames=1000", f"--data.init_args.num_envs={num_envs}",
                f"--data.init_args.frames_per_batch={frames_per_batch}", f"--data.init_args.total_frames={total}",
                f"--data.init_args.init_random_frames={frames_per_batch}", f"--data.init_args.utd_ratio={utd_ratio}",
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--workers", type=int, default=2, help="local worker processes = Ray actors = nodes")
    parser.add_argument("--frames_per_batch", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--warmup_batches", type=int, default=2)
    parser.add_argument("--utd_ratio", type=int, default=4)
    args = parser.parse_args()
    result: dict = {"workers": args.workers, "frames_per_batch": args.frames_per_batch, "batches": args.batches,
                    "utd_ratio": args.utd_ratio,
                    "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                                "load_average_1min": os.getloadavg()[0]}}
    for name in args.configs:
        modes = {}
        for mode in ("inprocess", "workers", "ray"):
            print(f"{name} {mode} ...", file=sys.stderr, flush=True)
            with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
                modes[mode] = pool.submit(run, CONFIGS[name], mode, args.workers, args.frames_per_batch,
                                          args.batches, args.warmup_batches, args.utd_ratio).result()
            print(f"{name} {mode}: {json.dumps(modes[mode])}", file=sys.stderr, flush=True)
        base = 1e6 / modes["inprocess"]["frames_per_s"]
        for mode in ("workers", "ray"):
            modes[mode]["ratio_vs_inprocess"] = modes[mode]["frames_per_s"] / modes["inprocess"]["frames_per_s"]
            modes[mode]["overhead_us_per_frame"] = 1e6 / modes[mode]["frames_per_s"] - base
        local = modes["workers"]["overhead_us_per_frame"]
        modes["ray_over_local_overhead"] = modes["ray"]["overhead_us_per_frame"] / local if local > 0 else None
        result[name] = modes
    print(json.dumps(result))


if __name__ == "__main__":
    main()
