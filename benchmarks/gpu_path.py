"""The GPU path of ``pipelines.fit``: frames/s and updates/s of configs on the GPU (eager and compiled) and on the
CPU, at several numbers of envs, against the env alone at the same number, and the host synchronisations each update
and each collected batch costs.

    python benchmarks/gpu_path.py [--config configs/dvrp.yaml --config configs/hockey_dqn.yaml ...]
        [--num_envs 256 8192 65536] [--batches 12] [--warmup_batches 3]
        [--runs cpu gpu gpu:default gpu:reduce-overhead]
        [--extra=--data.init_args.replay_buffer.init_random_frames=1024 ...]

Each run is ``pipelines.fit`` on a config (its callbacks kept: evaluation, flexibility-model updates and checkpoints
run as a user's run has them; the logger writes to a temporary folder) for ``warmup_batches + batches`` collected
batches, in its own spawned process; the first ``warmup_batches`` are not timed (CUDA start, compilation). A run
is ``cpu`` (``--trainer.accelerator=cpu``), ``gpu`` (``--trainer.accelerator=gpu``) or ``gpu:<mode>`` (GPU with
``model.compile=true`` and ``model.compile_mode=<mode>``), each optionally followed by ``+compile_policy`` and/or
``+cudagraph_policy`` (those ``data`` options set: TorchRL's collector compiles the policy or replays it as a CUDA
graph), ``+cuda_graph`` or ``+eager_update`` (``model.cuda_graph`` true or false: each update one CUDA graph, or not).

``--num_envs B`` scales a config to B envs (:func:`scaled_args`): the steps per env and batch (T) stay the config's;
PPO keeps its minibatches per epoch (so its optimiser steps per batch) unless a minibatch would exceed
``--max_minibatch``; off-policy keeps its replay ratio (``utd_ratio * batch_size / frames_per_batch``, samples
replayed per collected frame) with batches of at most ``--max_minibatch``, a buffer of at least 4 batches and one
batch of random frames first. Without ``--num_envs`` each config runs as it is. For every B and device the env alone
is timed too (``env_frames_per_s``: ``step_and_maybe_reset`` with random valid actions, ``--env_steps`` calls after
10 untimed ones), and each run gets ``fit_over_env``, its frames/s over the env's on its device.

Host synchronisations are counted on the GPU with ``torch.cuda.set_sync_debug_mode("warn")``, and on the CPU as
the reads that would synchronise a GPU (``benchmarks.host_reads.HostReads``; the CPU-only shortcuts of the envs and
networks count there, as their GPU paths do not take them), over the timed batches, apart for the training steps
(between Lightning's batch start and end hooks: the updates, and the per-step work of the callbacks before the
counter, such as checkpoint writes) and the rest (collection, GAE, metrics, callbacks), with the source lines that
cause most of them. Prints one JSON object (last stdout line): ``machine``, and per config and B (``results``:
``{config: {B: {...}}}``) ``settings`` (the scaled arguments), ``env_frames_per_s`` per device, and per run
``frames_per_s``, ``updates_per_s``, ``update_ms_per_optimiser_step`` (the training steps alone, timed by CUDA events
around the module's ``training_step`` on a GPU, over their optimiser steps), ``fit_over_env``,
``syncs_per_update``, ``syncs_per_batch_outside_updates``,
``top_sync_sites``, ``peak_gpu_mb``, ``peak_rss_mb``; and ``gpu_over_cpu`` (frames/s ratios).
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


def _repo_site() -> str:
    """Where the current call was made from: the innermost frame in the repository outside this script and
    site-packages, as ``path:line``."""
    frames = [f for f in traceback.extract_stack()[:-1] if f.filename.startswith(ROOT)
              and not f.filename.endswith("gpu_path.py") and "site-packages" not in f.filename]
    return f"{os.path.relpath(frames[-1].filename, ROOT)}:{frames[-1].lineno}" if frames else "outside the repo"


def _add_reads(reads, phase: str, counts: collections.Counter, sites: collections.Counter) -> None:
    """Stop the CPU counter ``reads`` and add its host reads to ``phase``'s count and sites."""
    reads.__exit__(None, None, None)
    counts[phase] += reads.total
    for where, n in reads.sites.items():
        sites[(phase, where)] += n


def _update_clock(start_batch: int):
    """A Lightning callback that times the training steps alone (the module's ``training_step``: the updates of a
    collected batch) from batch ``start_batch`` on: CUDA events around each on a GPU (read once, at the end: no host
    synchronisation in the run), the host clock on a CPU. ``seconds`` once the fit ends."""
    import time

    import lightning as L
    import torch

    class UpdateClock(L.Callback):
        def __init__(self) -> None:
            self.events, self.seconds = [], 0.0

        def on_train_start(self, trainer, pl_module) -> None:
            step, cuda = pl_module.training_step, pl_module.device.type == "cuda"

            def timed(batch, batch_idx):
                if batch_idx < start_batch:
                    return step(batch, batch_idx)
                if not cuda:
                    start = time.perf_counter()
                    out = step(batch, batch_idx)
                    self.seconds += time.perf_counter() - start
                    return out
                events = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                events[0].record()
                out = step(batch, batch_idx)
                events[1].record()
                self.events.append(events)
                return out

            pl_module.training_step = timed

        def on_train_end(self, trainer, pl_module) -> None:
            if self.events:
                torch.cuda.synchronize()
                self.seconds = sum(a.elapsed_time(b) for a, b in self.events) / 1000

    return UpdateClock


def _sync_counter():
    """A Lightning callback that counts the host synchronisations from the first timed batch on (built in the
    run's process, after its imports): on a GPU with the sync debug mode, on a CPU (``count_cpu``) with
    :class:`benchmarks.host_reads.HostReads` (which slows the run: its frames/s are then no speed figure)."""
    import lightning as L
    import torch

    from benchmarks.host_reads import HostReads

    class SyncCounter(L.Callback):
        def __init__(self, start_batch: int, count_cpu: bool = False) -> None:
            self.start_batch, self.count_cpu, self.phase = start_batch, count_cpu, None
            self.counts: collections.Counter = collections.Counter()
            self.sites: collections.Counter = collections.Counter()
            self.updates0 = self.batches = 0
            self.reads: HostReads | None = None  # the CPU's counter of the current phase
            self.cpu = False

        def _seen(self, message, category, filename, lineno, file=None, line=None) -> None:
            if self.phase is None or "synchroniz" not in str(message):
                return
            self.counts[self.phase] += 1
            self.sites[(self.phase, _repo_site())] += 1

        def _enter(self, phase: str | None) -> None:
            """End the current phase (adding a CPU count) and start ``phase`` (None: stop counting)."""
            if self.reads is not None:
                _add_reads(self.reads, self.phase, self.counts, self.sites)
                self.reads = None
            self.phase = phase
            if phase is not None and self.cpu:
                self.reads = HostReads()
                self.reads.__enter__()

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            if batch_idx == self.start_batch:
                self.updates0 = trainer.global_step
                if torch.cuda.is_available() and pl_module.device.type == "cuda":
                    warnings.filterwarnings("always", message=".*synchroniz.*")
                    warnings.showwarning = self._seen
                    torch.cuda.set_sync_debug_mode("warn")
                self.cpu = self.count_cpu and pl_module.device.type == "cpu"
            if batch_idx >= self.start_batch:
                self.batches += 1
                self._enter("update")

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if self.phase is not None:
                self._enter("outside")

        def on_train_end(self, trainer, pl_module) -> None:
            if torch.cuda.is_available():
                torch.cuda.set_sync_debug_mode(0)
            self._enter(None)
            self.updates = trainer.global_step - self.updates0

    return SyncCounter


def scaled_args(data: dict, num_envs: int, max_minibatch: int = 131_072) -> dict[str, int]:
    """The data settings of a config (``data``: :func:`benchmarks.peer_sb3.data_settings`) scaled to ``num_envs``
    envs, as ``{key: value}`` (:func:`benchmarks.peer_sb3.setting_override` makes them overrides).

    T = ``frames_per_batch / num_envs`` stays; PPO (``mini_batch_size``) keeps its minibatches per epoch, doubled
    until a minibatch holds at most ``max_minibatch`` frames; off-policy (``utd_ratio``) keeps its replay ratio
    ``utd_ratio * batch_size / frames_per_batch`` with ``batch_size`` scaled as the envs (at most
    ``max_minibatch``), ``buffer_size`` at least 4 batches and ``init_random_frames`` one batch.

    Raises:
        ValueError: a scaled batch that does not split into whole minibatches.
    """
    factor = num_envs / data.get("num_envs", 64)
    frames = data["frames_per_batch"] * num_envs // data.get("num_envs", 64)
    out = {"num_envs": num_envs, "frames_per_batch": frames}
    if "mini_batch_size" in data:
        minibatches = data["frames_per_batch"] // data["mini_batch_size"]
        while frames / minibatches > max_minibatch:
            minibatches *= 2
        if frames % minibatches:
            raise ValueError(f"{frames} frames per batch do not split into {minibatches} minibatches")
        out["mini_batch_size"] = frames // minibatches
    elif "utd_ratio" in data:
        replay = data["utd_ratio"] * data.get("batch_size", 128) / data["frames_per_batch"]
        batch_size = max(1, min(int(data.get("batch_size", 128) * factor), max_minibatch))
        out.update(batch_size=batch_size, utd_ratio=max(1, round(replay * frames / batch_size)),
                   buffer_size=max(data.get("buffer_size", 100_000), 4 * frames), init_random_frames=frames)
    return out


def _random_action(env, td):
    """Random valid actions ``[B, ...]`` on the env's device, with no host read: uniform over ``action_mask`` where
    the env has one, else uniform in a continuous spec's box or over a discrete spec's actions."""
    import torch

    from envs.episodes import masked_uniform

    if "action_mask" in td.keys():
        return masked_uniform(td.get("action_mask"))
    spec = env.action_spec
    if spec.dtype.is_floating_point:
        low, high = spec.space.low, spec.space.high
        return low + torch.rand(spec.shape, device=low.device) * (high - low)
    return spec.rand()


def env_only(config: str, num_envs: int, device: str, steps: int, extra: list[str]) -> dict:
    """Frames/s of the config's env alone (``step_and_maybe_reset`` with :func:`_random_action`), in this (spawned)
    process, on ``device`` (the config's trainer is built for the CPU and never runs: a GPU config's env can then be
    timed on a CPU machine)."""
    import time

    import torch

    from envs import make_env
    from modules.base import RLModule
    from pipelines.data import RLDataModule
    from pipelines.fit import FitCLI

    sys.argv = sys.argv[:1]
    cli = FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                 save_config_callback=None, auto_configure_optimizers=False,
                 args=["--config", config, "--trainer.logger=false", "--trainer.accelerator=cpu", *extra])
    env = make_env(cli.datamodule.env_config, num_envs, 0, device, cli.datamodule.env_models)
    td = env.reset()

    def sync():
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()

    with torch.no_grad():
        for i in range(10 + steps):
            if i == 10:
                sync()
                start = time.perf_counter()
            td["action"] = _random_action(env, td)
            _, td = env.step_and_maybe_reset(td)
        sync()
    return {"frames_per_s": num_envs * steps / (time.perf_counter() - start)}


def run(config: str, run_name: str, batches: int, warmup_batches: int, extra: list[str],
        count_cpu: bool = False) -> dict:
    """One timed fit in this (spawned) process."""
    import torch
    import yaml

    from benchmarks.fit_timing import timed_fit

    run_name, *policy_options = run_name.split("+")
    device, _, mode = run_name.partition(":")
    from benchmarks.peer_sb3 import data_settings

    with open(config) as f:
        data = data_settings(yaml.safe_load(f))
    for argument in extra:  # scaled (or overridden) data settings
        key, _, value = argument.removeprefix("--").partition("=")
        key = key.rpartition(".")[2]
        if key in ("frames_per_batch", "init_random_frames"):
            data[key] = int(value)
    # off-policy: the batches of random frames first have no training step (the timed ones are training batches)
    random_batches = -(-data.get("init_random_frames", 0) // data["frames_per_batch"]) if "utd_ratio" in data else 0
    frames = data["frames_per_batch"] * (warmup_batches + batches + random_batches)
    counter, clock = _sync_counter()(warmup_batches, count_cpu), _update_clock(warmup_batches)()
    with tempfile.TemporaryDirectory(prefix="gpu_path_") as tmp:
        args = ["--config", config, f"--trainer.accelerator={'gpu' if device == 'gpu' else 'cpu'}",
                f"--trainer.default_root_dir={tmp}", f"--trainer.logger.init_args.save_dir={tmp}", *extra,
                f"--data.init_args.total_frames={frames}"]
        if mode:
            args += ["--model.init_args.compile=true", f"--model.init_args.compile_mode={mode}"]
        model_options = {"cuda_graph": "true", "eager_update": "false"}
        args += [f"--model.init_args.cuda_graph={model_options[option]}" if option in model_options
                 else f"--data.init_args.{option}=true" for option in policy_options]
        sys.argv = sys.argv[:1]
        timing, _ = timed_fit(args, warmup_batches, [counter, clock])
    updates = max(counter.updates, 1)
    counted = device == "gpu" or count_cpu
    sites = [{"phase": phase, "where": where, "count": n} for (phase, where), n in counter.sites.most_common(8)]
    return {**timing,
            "update_ms_per_optimiser_step": 1000 * clock.seconds / updates,  # (the counter's optimiser steps)
            "syncs_per_update": counter.counts["update"] / updates if counted else None,
            "syncs_per_batch_outside_updates": counter.counts["outside"] / max(counter.batches, 1) if counted else None,
            "timed_batches": counter.batches, "top_sync_sites": sites,
            "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "threads": torch.get_num_threads()}


def _spawned(function, *args):
    """``function(*args)`` in a spawned process; an error becomes ``{"error", "traceback"}`` (one failing run, e.g. a
    compile error or a GPU out of memory, does not lose the others' figures)."""
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
            return pool.submit(function, *args).result()
    except Exception as error:
        remote = getattr(error.__cause__, "tb", "")  # the run's own traceback (concurrent.futures keeps it)
        return {"error": f"{type(error).__name__}: {error}", "traceback": remote[-3000:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", help="a config (repeatable; default configs/dvrp.yaml)")
    parser.add_argument("--num_envs", type=int, nargs="*", default=[], help="envs per run (default: the config's)")
    parser.add_argument("--max_minibatch", type=int, default=131_072, help="frames per update at most")
    parser.add_argument("--batches", type=int, default=12, help="timed collected batches per run")
    parser.add_argument("--warmup_batches", type=int, default=3, help="untimed batches first (start, compilation)")
    parser.add_argument("--env_steps", type=int, default=60, help="timed env-only steps per B and device (0: none)")
    parser.add_argument("--runs", nargs="+", default=["cpu", "gpu", "gpu:default", "gpu:reduce-overhead"])
    parser.add_argument("--count_cpu_reads", action="store_true", help="count host reads in the cpu runs (slow: "
                        "their frames/s are then no speed figure)")
    parser.add_argument("--extra", nargs="*", default=[], help="more pipelines.fit arguments for every run, e.g. "
                        "--extra=--data.init_args.replay_buffer.init_random_frames=1024")
    args = parser.parse_args()
    import torch
    import yaml

    from benchmarks.peer_sb3 import data_settings, setting_override

    configs = args.config or [os.path.join(ROOT, "configs", "dvrp.yaml")]
    result: dict = {"extra": args.extra, "batches": args.batches, "warmup_batches": args.warmup_batches,
                    "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                                "torch": torch.__version__,
                                "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None},
                    "results": {}}
    for config in configs:
        name = os.path.relpath(os.path.abspath(config), ROOT)
        with open(config) as f:
            data = data_settings(yaml.safe_load(f))
        for num_envs in args.num_envs or [data["num_envs"]]:
            settings = scaled_args(data, num_envs, args.max_minibatch) if args.num_envs else {}
            extra = [setting_override(k, v) for k, v in settings.items()] + args.extra
            entry = result["results"].setdefault(name, {})[str(num_envs)] = {"settings": settings,
                                                                             "env_frames_per_s": {}}
            devices = sorted({"cuda" if run.startswith("gpu") else "cpu" for run in args.runs})
            for device in devices if args.env_steps else []:
                print(f"{name} B={num_envs}: the env alone on {device} ...", file=sys.stderr, flush=True)
                timed = _spawned(env_only, config, num_envs, device, args.env_steps, extra)
                entry["env_frames_per_s"][device] = timed.get("frames_per_s", timed)
            for run_name in args.runs:
                print(f"{name} B={num_envs} {run_name}: fitting ...", file=sys.stderr, flush=True)
                out = entry[run_name] = _spawned(run, config, run_name, args.batches, args.warmup_batches, extra,
                                                 args.count_cpu_reads)
                env_rate = entry["env_frames_per_s"].get("cuda" if run_name.startswith("gpu") else "cpu")
                if "frames_per_s" in out and isinstance(env_rate, float):
                    out["fit_over_env"] = out["frames_per_s"] / env_rate
                print(f"{name} B={num_envs} {run_name}: {json.dumps(out)}", file=sys.stderr, flush=True)
            cpu = entry.get("cpu", {}).get("frames_per_s")
            if cpu:
                entry["gpu_over_cpu"] = {n: entry[n]["frames_per_s"] / cpu for n in args.runs
                                         if n != "cpu" and "frames_per_s" in entry[n]}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
