"""The GPU path of ``pipelines.fit``: frames/s and updates/s of a config on the GPU (eager and compiled) against the
same config on the CPU, and the host synchronisations each update and each collected batch costs.

    python benchmarks/gpu_path.py [--config configs/dvrp.yaml] [--batches 12] [--warmup_batches 3]
        [--runs cpu gpu gpu:default gpu:reduce-overhead] [--extra=--data.init_args.init_random_frames=1024 ...]

Each run is ``pipelines.fit`` on the config (its callbacks kept: evaluation, embedding updates and checkpoints
run as a user's run has them; the logger writes to a temporary folder) for ``warmup_batches + batches`` collected
batches, in its own spawned process; the first ``warmup_batches`` are not timed (CUDA start, compilation). A run
is ``cpu`` (``--trainer.accelerator=cpu``), ``gpu`` (``--trainer.accelerator=gpu``) or ``gpu:<mode>`` (GPU with
``model.compile=true`` and ``model.compile_mode=<mode>``), each optionally followed by ``+compile_policy`` and/or
``+cudagraph_policy`` (those ``data`` options set: TorchRL's collector compiles the policy or replays it as a CUDA
graph).

Host synchronisations are counted on the GPU with ``torch.cuda.set_sync_debug_mode("warn")`` over the timed
batches, apart for the training steps (between Lightning's batch start and end hooks: the updates, and the
per-step work of the callbacks before the counter, such as checkpoint writes) and the rest (collection, GAE,
metrics, callbacks), with the source lines that cause most of them. Prints one JSON object (last stdout line): per run ``frames_per_s``,
``updates_per_s``, ``syncs_per_update``, ``syncs_per_batch_outside_updates``, ``top_sync_sites``,
``peak_gpu_mb``, ``peak_rss_mb``; and ``gpu_over_cpu`` (frames/s ratios).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import resource
import sys
import tempfile
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _sync_counter():
    """A Lightning callback that counts the CUDA host synchronisations from the first timed batch on (built in the
    run's process, after its imports)."""
    import lightning as L
    import torch

    class SyncCounter(L.Callback):
        def __init__(self, start_batch: int) -> None:
            self.start_batch, self.phase = start_batch, None
            self.counts: collections.Counter = collections.Counter()
            self.sites: collections.Counter = collections.Counter()
            self.updates0 = self.batches = 0

        def _seen(self, message, category, filename, lineno, file=None, line=None) -> None:
            if self.phase is None or "synchroniz" not in str(message):
                return
            self.counts[self.phase] += 1
            frames = [f for f in traceback.extract_stack()[:-1] if f.filename.startswith(ROOT)
                      and not f.filename.endswith("gpu_path.py")]
            where = (f"{os.path.relpath(frames[-1].filename, ROOT)}:{frames[-1].lineno}" if frames
                     else "outside the repo")
            self.sites[(self.phase, where)] += 1

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            if batch_idx == self.start_batch:
                self.updates0 = trainer.global_step
                if torch.cuda.is_available() and pl_module.device.type == "cuda":
                    warnings.filterwarnings("always", message=".*synchroniz.*")
                    warnings.showwarning = self._seen
                    torch.cuda.set_sync_debug_mode("warn")
            if batch_idx >= self.start_batch:
                self.phase, self.batches = "update", self.batches + 1

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if self.phase is not None:
                self.phase = "outside"

        def on_train_end(self, trainer, pl_module) -> None:
            if torch.cuda.is_available():
                torch.cuda.set_sync_debug_mode(0)
            self.phase = None
            self.updates = trainer.global_step - self.updates0

    return SyncCounter


def run(config: str, run_name: str, batches: int, warmup_batches: int, extra: list[str]) -> dict:
    """One timed fit in this (spawned) process."""
    import torch
    import yaml

    from benchmarks.fit_timing import timed_fit

    run_name, *policy_options = run_name.split("+")
    device, _, mode = run_name.partition(":")
    with open(config) as f:
        data = yaml.safe_load(f)["data"]["init_args"]
    frames = data["frames_per_batch"] * (warmup_batches + batches)
    counter = _sync_counter()(warmup_batches)
    with tempfile.TemporaryDirectory(prefix="gpu_path_") as tmp:
        args = ["--config", config, f"--trainer.accelerator={'gpu' if device == 'gpu' else 'cpu'}",
                f"--data.init_args.total_frames={frames}", f"--trainer.default_root_dir={tmp}",
                f"--trainer.logger.init_args.save_dir={tmp}"]
        if mode:
            args += ["--model.init_args.compile=true", f"--model.init_args.compile_mode={mode}"]
        args += [f"--data.init_args.{option}=true" for option in policy_options] + extra
        sys.argv = sys.argv[:1]
        timing, _ = timed_fit(args, warmup_batches, [counter])
    updates = max(counter.updates, 1)
    sites = [{"phase": phase, "where": where, "count": n} for (phase, where), n in counter.sites.most_common(8)]
    return {**timing, "syncs_per_update": counter.counts["update"] / updates,
            "syncs_per_batch_outside_updates": counter.counts["outside"] / max(counter.batches, 1),
            "timed_batches": counter.batches, "top_sync_sites": sites,
            "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "threads": torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=os.path.join(ROOT, "configs", "dvrp.yaml"))
    parser.add_argument("--batches", type=int, default=12, help="timed collected batches per run")
    parser.add_argument("--warmup_batches", type=int, default=3, help="untimed batches first (start, compilation)")
    parser.add_argument("--runs", nargs="+", default=["cpu", "gpu", "gpu:default", "gpu:reduce-overhead"])
    parser.add_argument("--extra", nargs="*", default=[], help="more pipelines.fit arguments for every run, e.g. "
                        "--extra=--data.init_args.init_random_frames=1024")
    args = parser.parse_args()
    import torch

    result: dict = {"config": os.path.relpath(os.path.abspath(args.config), ROOT), "extra": args.extra,
                    "batches": args.batches,
                    "warmup_batches": args.warmup_batches,
                    "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                                "torch": torch.__version__,
                                "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}}
    for name in args.runs:
        print(f"{name}: fitting {args.config} ...", file=sys.stderr, flush=True)
        try:
            with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
                result[name] = pool.submit(run, args.config, name, args.batches, args.warmup_batches,
                                               args.extra).result()
        except Exception as error:  # one failing run (e.g. a compile error) does not lose the others' figures
            remote = getattr(error.__cause__, "tb", "")  # the run's own traceback (concurrent.futures keeps it)
            result[name] = {"error": f"{type(error).__name__}: {error}", "traceback": remote[-3000:]}
        print(f"{name}: {json.dumps(result[name])}", file=sys.stderr, flush=True)
    cpu = result.get("cpu", {}).get("frames_per_s")
    if cpu:
        result["gpu_over_cpu"] = {n: result[n]["frames_per_s"] / cpu for n in args.runs
                                  if n != "cpu" and "frames_per_s" in result[n]}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
