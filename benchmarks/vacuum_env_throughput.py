"""Robot-vacuum env throughput: env-only frames/s per batch size on one thread, and peak memory.

    python benchmarks/vacuum_env_throughput.py [--batch_sizes 8 512 4096] [--steps 300] [--threads 1]

Default config (5x5 grid, 4 robots, charger (2, 2), max_steps 100). Random legal actions (uniform over
each robot's ``action_mask``) are drawn outside the timed region; each timed call is
``env.step_and_maybe_reset`` (the step with observation, mask, info and the partial resets of the
rows that are done), after a warm-up of 50 calls. A frame is one env step of one row (B frames per
batched step; the R robots of a row act in the same frame), so "robot-env steps" here = frames.
Also printed: frames/s including the action sampling, the raw ``_step`` alone, and
``make_env_steps_per_s``: the same timed ``step_and_maybe_reset`` on ``envs.make_env``'s env (since 2026-11-26
the bare env itself: it keeps its episodes' returns and draws masked random actions, so no ``RewardSum`` and
``ActionMask`` layer), which is what the pipeline's collector steps.
Prints one JSON object (last stdout line):
``{"env_steps_per_s": {"8": ..., "512": ..., "4096": ...}, "make_env_steps_per_s": {...}, "peak_rss_mb": ..., ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from envs import make_env
from envs.vacuum import VacuumConfig


def random_legal(mask: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Uniform over the allowed actions of each robot (``mask`` ``[B, R, 5]``), ``[B, R]`` int64."""
    return (torch.rand(mask.shape, generator=generator) * mask).argmax(-1)


def measure(batch_size: int, steps: int, warmup: int = 50, transformed: bool = False) -> dict[str, float]:
    """Frames/s of ``step_and_maybe_reset`` (timed alone and with action sampling) and of ``_step``, on the
    bare env or (``transformed``) on ``make_env``'s."""
    env = make_env(VacuumConfig(), batch_size, 0) if transformed else VacuumConfig().make(num_envs=batch_size, seed=0)
    generator = torch.Generator().manual_seed(0)
    td = env.reset()
    for _ in range(warmup):
        td["action"] = random_legal(td["action_mask"], generator)
        _, td = env.step_and_maybe_reset(td)
    timed = 0.0
    episodes = 0
    start = time.perf_counter()
    for _ in range(steps):
        td["action"] = random_legal(td["action_mask"], generator)
        t0 = time.perf_counter()
        step, td = env.step_and_maybe_reset(td)
        timed += time.perf_counter() - t0
        episodes += int(step["next", "done"].sum())
    total = time.perf_counter() - start
    frames = batch_size * steps
    if transformed:
        return {"env_steps_per_s": frames / timed}
    td["action"] = random_legal(td["action_mask"], generator)
    t0 = time.perf_counter()
    for _ in range(steps):  # raw dynamics + observation, no TorchRL bookkeeping, no resets
        env._step(td)
    raw = time.perf_counter() - t0
    return {"env_steps_per_s": frames / timed, "with_sampling": frames / total, "raw_step": frames / raw,
            "ms_per_step": 1e3 * timed / steps, "episodes": episodes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[8, 512, 4096])
    parser.add_argument("--steps", type=int, default=300, help="timed batched steps per batch size")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results, wrapped = {}, {}
    for b in args.batch_sizes:
        results[b] = measure(b, args.steps)
        wrapped[b] = measure(b, args.steps, transformed=True)
        r = results[b]
        print(f"B={b:5d}: {r['env_steps_per_s']:12,.0f} frames/s step_and_maybe_reset ({r['ms_per_step']:.3f} ms/step, "
              f"{r['episodes']} episodes ended); {r['with_sampling']:12,.0f} with action sampling; "
              f"{r['raw_step']:12,.0f} raw _step; {wrapped[b]['env_steps_per_s']:12,.0f} through make_env")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MB, {args.threads} thread(s), load average {os.getloadavg()[0]:.2f}")
    print(json.dumps({
        "env_steps_per_s": {str(b): round(r["env_steps_per_s"]) for b, r in results.items()},
        "make_env_steps_per_s": {str(b): round(r["env_steps_per_s"]) for b, r in wrapped.items()},
        "with_action_sampling": {str(b): round(r["with_sampling"]) for b, r in results.items()},
        "raw_step": {str(b): round(r["raw_step"]) for b, r in results.items()},
        "peak_rss_mb": round(peak, 1),
        "threads": args.threads,
        "load_average": round(os.getloadavg()[0], 2),
    }))


if __name__ == "__main__":
    main()
