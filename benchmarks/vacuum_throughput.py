"""Robot-vacuum run throughput: training episodes/min of ``configs/vacuum.yaml`` at 8 and 512 envs, and
env-only env steps/s at B = 8, 512, 4096 (one thread).

    python benchmarks/vacuum_throughput.py [--envs 8 512] [--seconds 60] [--batch_sizes 8 512 4096]

Training: the full pipeline (collector with the epsilon-greedy Q policy for all robots of all envs in
one forward pass, shared replay buffer with 2-step returns, one DQN update every 4 env steps, i.e.
``frames_per_batch = 4 * num_envs``, ``utd_ratio`` 1), timed from the first to the last training
batch; ``episodes_per_min`` = episodes finished in that time / minutes. The run's budget is sized to
take about ``--seconds`` (probed with a short first run). Epsilon decays per episode (0.998) as in the
config, so episodes shorten as the robots learn: the figure depends on the budget.

Env-only: ``benchmarks/vacuum_env_throughput.measure`` (``step_and_maybe_reset`` with random legal
actions). The ratios: ``vs_original`` = episodes/min at 8 envs over the original system's reported
225 (200-250) episodes/min at 8 envs (reported, not measured here; goal 10x); ``scale_512_vs_8`` =
episodes/min at 512 envs over 8 envs, measured in this run. Prints one JSON object (last stdout line).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.fit_timing import timed_fit
from benchmarks.vacuum_env_throughput import measure

CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "vacuum.yaml")
ORIGINAL_EPISODES_PER_MIN = 225.0  # the original system, 8 envs (reported 200-250)


def train(num_envs: int, total_frames: int, folder: str) -> dict[str, float]:
    """Fit ``configs/vacuum.yaml`` with ``num_envs`` envs for ``total_frames`` frames; times the training."""
    args = ["--config", CONFIG, "--trainer.enable_progress_bar=false", "--trainer.logger=false",
            f"--trainer.default_root_dir={folder}", "--trainer.enable_checkpointing=false",
            "--trainer.callbacks=[]", "--trainer.callbacks+=callbacks.EpsilonDecay",
            "--trainer.callbacks.schedule=exponential", "--trainer.callbacks.eps_end=0.02",
            "--trainer.callbacks.decay_rate=0.998", f"--data.init_args.collector.num_envs={num_envs}",
            f"--data.init_args.collector.frames_per_batch={4 * num_envs}",
            f"--data.init_args.total_frames={total_frames}"]
    timing, cli = timed_fit(args)
    return {**{k: timing[k] for k in ("episodes_per_min", "frames_per_s", "episodes", "frames", "seconds")},
            "updates": cli.trainer.global_step, "final_epsilon": cli.model.epsilon()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 512])
    parser.add_argument("--seconds", type=float, default=60.0, help="target length of each training run")
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[8, 512, 4096])
    parser.add_argument("--steps", type=int, default=300, help="timed env steps per batch size (env-only)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    training = {}
    with tempfile.TemporaryDirectory() as folder:
        for b in args.envs:
            probe = train(b, 4 * b * 100, folder)  # 100 updates
            frames = int(probe["frames_per_s"] * args.seconds) // (4 * b) * (4 * b)
            training[str(b)] = train(b, max(frames, 4 * b * 100), folder)
            r = training[str(b)]
            print(f"training, {b} envs: {r['episodes_per_min']:,.0f} episodes/min, {r['frames_per_s']:,.0f} frames/s "
                  f"({r['episodes']} episodes, {r['frames']} frames, {r['updates']} updates in {r['seconds']:.1f} s)")
    env = {str(b): measure(b, args.steps)["env_steps_per_s"] for b in args.batch_sizes}
    print("env only:", ", ".join(f"B={b}: {v:,.0f} env steps/s" for b, v in env.items()))
    result = {"episodes_per_min": {b: r["episodes_per_min"] for b, r in training.items()},
              "training": training, "env_steps_per_s": env,
              "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
              "threads": 1, "load_average": os.getloadavg()[0]}
    if "8" in training:
        result["vs_original"] = training["8"]["episodes_per_min"] / ORIGINAL_EPISODES_PER_MIN
        if "512" in training:
            result["scale_512_vs_8"] = training["512"]["episodes_per_min"] / training["8"]["episodes_per_min"]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
