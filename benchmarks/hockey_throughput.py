"""Hockey env throughput: env-only frames/s per batch size on one thread, scripted weak opponent included.

    python benchmarks/hockey_throughput.py [--batch_sizes 8 256 4096] [--steps 300] [--threads 1] [--opponent weak]

Default config (NORMAL mode, 250-step episodes, weak BasicOpponent driven inside the step). Uniform random
actions in ``[-1, 1]^4`` are drawn outside the timed region; each timed call is ``env.step_and_maybe_reset`` (the
step with both observations, info and the partial resets of the rows that are done), after a warm-up of 50
calls. A frame is one env step of one row (B frames per batched step). Also printed: the raw ``_step`` alone,
and ``make_env_steps_per_s``: the same timed ``step_and_maybe_reset`` on ``envs.make_env``'s env (the bare env
plus ``RewardSum``), which is what the pipeline's collector steps. Goal: >= 1,000,000 frames/s at B = 4096.

SAC fit (``--fit_frames`` > 0): ``configs/hockey_sac.yaml``'s model and data settings (16 envs, 64 frames per
batch, 16 updates of 256 transitions per batch, 2 x 256 MLPs) in its first curriculum phase (TRAIN_SHOOTING),
no callbacks, ``--fit_frames`` frames after a 2,048-frame random warm-up; ``sac_fit`` gives collected frames/s
and updates/s of the timed part and ``fit_vs_env_16``, its frames/s over the env-only frames/s at B = 16
measured in this run (the share of the time the learner leaves to the env).

Self-play fit (``--selfplay_frames`` > 0): ``configs/hockey_dqn_selfplay.yaml``'s model and data settings (64
envs, 512 frames and 16 updates per batch) with only its ``SelfPlay`` callback, snapshotting every 2,048 frames
so snapshot opponents play from the start, ``--selfplay_frames`` frames after a 2,048-frame random warm-up, once
with the envs in this process (``workers: 0``) and once in ``--workers`` worker processes; ``selfplay_fit``
gives frames/s and updates/s of each and ``workers_vs_in_process``, the ratio of their frames/s.

Prints one JSON object (last stdout line): ``{"env_steps_per_s": {"8": ..., "256": ..., "4096": ...},
"make_env_steps_per_s": {...}, "raw_step": {...}, "sac_fit": {...}, "selfplay_fit": {...}, ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.fit_timing import timed_fit
from envs import make_env
from envs.hockey import HockeyConfig

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")
SAC_CONFIG = os.path.join(CONFIGS, "hockey_sac.yaml")
SELFPLAY_CONFIG = os.path.join(CONFIGS, "hockey_dqn_selfplay.yaml")


def measure(batch_size: int, steps: int, opponent: str, warmup: int = 50,
            transformed: bool = False) -> dict[str, float]:
    """Frames/s of ``step_and_maybe_reset`` and of ``_step``, on the bare env or (``transformed``) on ``make_env``'s."""
    config = HockeyConfig(opponent=opponent)
    env = make_env(config, batch_size, 0) if transformed else config.make(num_envs=batch_size, seed=0)
    generator = torch.Generator().manual_seed(0)
    actions = torch.rand(warmup + steps, batch_size, 4, generator=generator) * 2 - 1
    td = env.reset()
    for a in actions[:warmup]:
        td["action"] = a
        _, td = env.step_and_maybe_reset(td)
    timed = 0.0
    episodes = 0
    for a in actions[warmup:]:
        td["action"] = a
        t0 = time.perf_counter()
        step, td = env.step_and_maybe_reset(td)
        timed += time.perf_counter() - t0
        episodes += int(step["next", "done"].sum())
    frames = batch_size * steps
    if transformed:
        return {"env_steps_per_s": frames / timed}
    t0 = time.perf_counter()
    for _ in range(steps):  # dynamics, opponent and observations; no TorchRL bookkeeping, no resets
        env._step(td)
    raw = time.perf_counter() - t0
    return {"env_steps_per_s": frames / timed, "raw_step": frames / raw, "ms_per_step": 1e3 * timed / steps,
            "episodes": episodes}


def sac_fit(frames: int, warmup: int = 2048) -> dict[str, float]:
    """Frames/s and updates/s of ``configs/hockey_sac.yaml`` in TRAIN_SHOOTING (see the module note)."""
    env = {"class_path": "envs.hockey.HockeyConfig", "init_args": {"mode": "TRAIN_SHOOTING", "opponent": "static"}}
    with tempfile.TemporaryDirectory() as folder:
        timing, _ = timed_fit(["--config", SAC_CONFIG, "--trainer.enable_progress_bar=false", "--trainer.logger=false",
                               f"--trainer.default_root_dir={folder}", "--trainer.enable_checkpointing=false",
                               "--trainer.callbacks=[]", f"--data.init_args.env={json.dumps(env)}",
                               f"--data.init_args.replay_buffer.init_random_frames={warmup}",
                               f"--data.init_args.total_frames={warmup + frames}"])
    return {k: round(v, 1) for k, v in timing.items() if k != "episodes_per_min"}


def selfplay_fit(frames: int, workers: int, warmup: int = 2048) -> dict[str, float]:
    """Frames/s and updates/s of ``configs/hockey_dqn_selfplay.yaml`` with ``workers`` (see the module note)."""
    selfplay = {"class_path": "callbacks.SelfPlay",
                "init_args": {"every_n_frames": 2048, "pool_size": 10,
                              "probabilities": {"self": 0.5, "weak": 0.2, "strong": 0.3}}}
    with tempfile.TemporaryDirectory() as folder:
        timing, _ = timed_fit(["--config", SELFPLAY_CONFIG, "--trainer.enable_progress_bar=false",
                               "--trainer.logger=false", f"--trainer.default_root_dir={folder}",
                               "--trainer.enable_checkpointing=false", "--trainer.callbacks=[]",
                               f"--trainer.callbacks+={json.dumps(selfplay)}",
                               f"--data.init_args.collector.workers={workers}",
                               f"--data.init_args.replay_buffer.init_random_frames={warmup}",
                               f"--data.init_args.total_frames={warmup + frames}"])
    return {k: round(v, 1) for k, v in timing.items() if k != "episodes_per_min"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[8, 256, 4096])
    parser.add_argument("--steps", type=int, default=300, help="timed batched steps per batch size")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--opponent", default="weak", choices=["static", "weak", "strong"])
    parser.add_argument("--fit_frames", type=int, default=16_384, help="timed SAC fit frames (0: no fit)")
    parser.add_argument("--selfplay_frames", type=int, default=32_768, help="timed self-play DQN fit frames (0: none)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the second self-play fit")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results, wrapped = {}, {}
    for b in args.batch_sizes:
        results[b] = measure(b, args.steps, args.opponent)
        wrapped[b] = measure(b, args.steps, args.opponent, transformed=True)
        r = results[b]
        print(f"B={b:5d}: {r['env_steps_per_s']:12,.0f} frames/s step_and_maybe_reset ({r['ms_per_step']:.3f} ms/step, "
              f"{r['episodes']} episodes ended); {r['raw_step']:12,.0f} raw _step; "
              f"{wrapped[b]['env_steps_per_s']:12,.0f} through make_env")
    fit = {}
    if args.fit_frames > 0:
        fit = sac_fit(args.fit_frames)
        fit["fit_vs_env_16"] = round(fit["frames_per_s"] / measure(16, args.steps, "static", transformed=True)
                                     ["env_steps_per_s"], 4)
        print(f"SAC fit: {fit['frames_per_s']:,.0f} frames/s, {fit['updates_per_s']:.1f} updates/s "
              f"({fit['frames']:.0f} frames, {fit['updates']:.0f} updates in {fit['seconds']:.0f} s)")
    selfplay = {}
    if args.selfplay_frames > 0:
        for workers in (0, args.workers):
            selfplay[f"workers_{workers}"] = selfplay_fit(args.selfplay_frames, workers)
            fps = selfplay[f"workers_{workers}"]["frames_per_s"]
            print(f"self-play DQN fit, {workers} workers: {fps:,.0f} frames/s")
        selfplay["workers_vs_in_process"] = round(selfplay[f"workers_{args.workers}"]["frames_per_s"]
                                                  / selfplay["workers_0"]["frames_per_s"], 3)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MB, {args.threads} thread(s), load average {os.getloadavg()[0]:.2f}")
    print(json.dumps({
        "env_steps_per_s": {str(b): round(r["env_steps_per_s"]) for b, r in results.items()},
        "make_env_steps_per_s": {str(b): round(r["env_steps_per_s"]) for b, r in wrapped.items()},
        "raw_step": {str(b): round(r["raw_step"]) for b, r in results.items()},
        "sac_fit": fit,
        "selfplay_fit": selfplay,
        "goal_4096": 1_000_000,
        "opponent": args.opponent,
        "peak_rss_mb": round(peak, 1),
        "threads": args.threads,
        "load_average": round(os.getloadavg()[0], 2),
    }))


if __name__ == "__main__":
    main()
