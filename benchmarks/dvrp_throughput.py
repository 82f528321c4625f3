"""DVRP throughput: env-only frames/s per batch size and thread count, the ratio against a Python loop
over single-instance envs measured in the same run, peak memory, and the full ``fit`` frames/s.

    python benchmarks/dvrp_throughput.py [--batch_sizes 64 256 1024 4096] [--threads 1 2] [--steps 150]
        [--loop_batch_sizes 64 1024] [--fit_batches 4] [--skip_fit] [--device cuda]

Env-only: N=30, M=2, S=3, insertion oracle, random feasible actions drawn outside the timed region;
each timed call is ``env.step_and_maybe_reset`` (the step with observation, mask and the resets). ``improved``: the
same with the plan improved by local search after every booking and re-optimised at the cut-off (``IMPROVED``),
and ``improvement_speed_ratio``, its frames/s over the plain env's at the same B, measured in the same run.
``fit.over_env_only_B256``: the fit loop's frames/s over the env-only frames/s at B = 256 on one thread
(the headline config's batch). ``--device cuda``: the env-only figures on the GPU (a step's time ends when the device
has finished it: ``torch.cuda.synchronize``); the loop and the fit stay on the CPU. Prints one JSON object (last stdout
line).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pipelines.threads import set_wait_policy

set_wait_policy()  # (before torch) as pipelines.fit sets it, so the fit loop here is the one users run

import torch  # noqa: E402

from envs.dvrp import DVRPConfig  # noqa: E402

CONFIG = dict(num_customers=30, num_vehicles=2, max_shift=3)
IMPROVED = dict(improve_every=1, improve_passes=1, cutoff_sweeps=4)  # the plan improved as the env can pay it


def random_feasible(td, generator: torch.Generator) -> torch.Tensor:
    """Uniform over the allowed actions of each row (``action_mask``), ``[B]``, on the generator's device."""
    return torch.multinomial(td["action_mask"].float(), 1, generator=generator).squeeze(-1)


def env_frames_per_s(batch_size: int, steps: int, warmup: int = 30, device: str = "cpu", **improvement) -> float:
    """Frames/s of ``step_and_maybe_reset`` on one batched env of ``batch_size`` rows on ``device`` (``improvement``:
    the local search's keys, e.g. ``improve_every=1, cutoff_sweeps=4``)."""
    env = DVRPConfig(**CONFIG, **improvement).make(num_envs=batch_size, seed=0, device=device)
    generator = torch.Generator(device).manual_seed(0)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    td = env.reset()
    elapsed = 0.0
    with torch.no_grad():
        for i in range(warmup + steps):
            td["action"] = random_feasible(td, generator)
            sync()
            start = time.perf_counter()
            _, td = env.step_and_maybe_reset(td)
            sync()
            if i >= warmup:
                elapsed += time.perf_counter() - start
    return steps * batch_size / elapsed


def loop_frames_per_s(batch_size: int, steps: int) -> float:
    """Frames/s of a Python loop over ``batch_size`` single-instance envs (the unbatched baseline)."""
    envs = [DVRPConfig(**CONFIG).make(num_envs=1, seed=b) for b in range(batch_size)]
    generator = torch.Generator().manual_seed(0)
    tds = [env.reset() for env in envs]
    elapsed = 0.0
    for i in range(steps + 2):
        for b, env in enumerate(envs):
            tds[b]["action"] = random_feasible(tds[b], generator)
            start = time.perf_counter()
            _, tds[b] = env.step_and_maybe_reset(tds[b])
            if i >= 2:
                elapsed += time.perf_counter() - start
    return steps * batch_size / elapsed


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def fit_frames_per_s(batches: int) -> dict:
    """Frames/s of the headline run (``configs/dvrp.yaml``) over ``batches`` collected batches."""
    from pipelines.fit import main

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cli = main(["--config", os.path.join(root, "configs", "dvrp.yaml"), "--trainer.logger=false",
                "--trainer.callbacks=[]", "--trainer.enable_progress_bar=false", "--trainer.enable_checkpointing=false",
                f"--data.init_args.total_frames={batches * 7680}"])
    return {"frames": cli.model.collected_frames, "frames_per_s": cli.model.latest_metrics.get("time/frames_per_s")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[64, 256, 1024, 4096])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=150, help="timed batched steps per measurement")
    parser.add_argument("--loop_batch_sizes", type=int, nargs="*", default=[64, 1024])
    parser.add_argument("--loop_steps", type=int, default=3)
    parser.add_argument("--fit_batches", type=int, default=4)
    parser.add_argument("--skip_fit", action="store_true")
    parser.add_argument("--improved_batch_sizes", type=int, nargs="*", default=[1024],
                        help="batch sizes also timed with the plan improved (IMPROVED), one thread")
    parser.add_argument("--device", default="cpu", help="where the env-only figures run (cpu, cuda)")
    args = parser.parse_args()
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device here")
    result: dict = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                                "torch": torch.__version__,
                                "device": torch.cuda.get_device_name() if args.device != "cpu" else "cpu"},
              "config": CONFIG, "env": {}, "loop": {}, "ratio": {}}
    for threads in args.threads:
        torch.set_num_threads(threads)
        for b in args.batch_sizes:
            fps = env_frames_per_s(b, args.steps, device=args.device)
            result["env"][f"B={b},threads={threads}"] = {"frames_per_s": round(fps),
                                                        "peak_rss_mb": round(peak_rss_mb())}
            print(f"env B={b} threads={threads}: {fps:,.0f} frames/s", file=sys.stderr)
    torch.set_num_threads(1)
    result["improved"] = {"settings": IMPROVED}
    for b in args.improved_batch_sizes:  # (each step: one pass around the booking; the cut-off's sweeps included)
        fps = env_frames_per_s(b, args.steps, device=args.device, **IMPROVED)
        plain = (result["env"].get(f"B={b},threads=1", {}).get("frames_per_s")
                 or env_frames_per_s(b, args.steps, device=args.device))
        result["improved"][f"B={b},threads=1"] = {"frames_per_s": round(fps),
                                                   "improvement_speed_ratio": round(fps / plain, 4)}
        print(f"env B={b} improved: {fps:,.0f} frames/s ({fps / plain:.3f} of the plain env's)", file=sys.stderr)
    for b in args.loop_batch_sizes:
        fps = loop_frames_per_s(b, args.loop_steps)
        result["loop"][f"B={b}"] = {"frames_per_s": round(fps)}
        batched = result["env"].get(f"B={b},threads=1", {}).get("frames_per_s")
        if batched:
            result["ratio"][f"B={b},threads=1"] = round(batched / fps, 1)
        print(f"loop of {b} single envs: {fps:,.0f} frames/s", file=sys.stderr)
    if not args.skip_fit:
        result["fit"] = fit_frames_per_s(args.fit_batches)
        env_only = result["env"].get("B=256,threads=1", {}).get("frames_per_s")
        if env_only:  # the headline config steps B = 256 envs
            result["fit"]["over_env_only_B256"] = round(result["fit"]["frames_per_s"] / env_only, 4)
    result["peak_rss_mb"] = round(peak_rss_mb())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
