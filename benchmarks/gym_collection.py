"""Collection overhead for gymnasium envs: time per collected frame here against Stable-Baselines3's.

    python benchmarks/gym_collection.py [--frames 20480] [--num_envs 1 8] [--backends vector serial] [--repeats 1]

CartPole-v1, a DQN policy (2 x 256 MLP, epsilon 0.05), 1 torch thread, each contender alone in turn:
    * here: ``envs.make_env`` over ``GymConfig`` (each ``--backends`` entry), TorchRL's collector as the off-policy
      data module builds it (``pipelines.data.collectors.local_collector``, 256 frames per batch), each batch
      stored in the replay buffer of ``pipelines.data.replay``;
    * SB3: ``DQN.learn`` with learning off (``gradient_steps=0``, the policy acting from the first step): its
      ``DummyVecEnv``, policy and replay buffer, collecting the same number of frames.
``--frames`` frames are timed after 2,048 untimed ones. The goal (issue 13): at most 1.5x SB3's time per frame.
With ``--repeats R`` every contender runs R times in turn, and each figure is the median round (the host's
speed swings by about +-10% between runs of the same code).

Prints one JSON object (last stdout line): ``{"num_envs": {"1": {"sb3_us_per_frame": ..., "<backend>":
{"us_per_frame": ..., "ratio_to_sb3": ...}}, ...}, "peak_rss_mb": ..., ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import warnings
from statistics import median

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from envs import EnvSpecs, make_env
from envs.gym import GymConfig
from modules.dqn import DQNModule
from modules.q_networks import QNetwork
from pipelines.data.collectors import local_collector
from pipelines.data.replay import make_replay_buffer, store

WARMUP = 2048
FRAMES_PER_BATCH = 256


def ours(backend: str, num_envs: int, frames: int) -> float:
    """Microseconds per collected and stored frame here."""
    env = make_env(GymConfig("CartPole-v1", backend=backend), num_envs, 0)
    module = DQNModule(QNetwork(num_actions=2, hidden_dims=(256, 256)))
    module.build_on(EnvSpecs.of(env))
    module.set_epsilon(0.05)
    collector = local_collector(env, module.collector_policy, FRAMES_PER_BATCH)
    buffer = make_replay_buffer(100_000, rows=num_envs, batch_size=64)
    seen, start = 0, None
    for batch in collector:
        store(buffer, batch, None, None)
        seen += batch.numel()
        if start is None and seen >= WARMUP:
            seen, start = 0, time.perf_counter()
        elif start is not None and seen >= frames:
            break
    elapsed = time.perf_counter() - start
    collector.shutdown()
    return elapsed / seen * 1e6


def sb3(num_envs: int, frames: int) -> float:
    """Microseconds per collected and stored frame in SB3's DQN with learning off."""
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import Logger

    env = make_vec_env("CartPole-v1", n_envs=num_envs, seed=0)
    # learning_starts 0: the policy acts from the first step (before it SB3 acts at random); gradient_steps 0:
    # no training
    model = DQN("MlpPolicy", env, policy_kwargs={"net_arch": [256, 256]}, learning_starts=0, gradient_steps=0,
                exploration_initial_eps=0.05, exploration_final_eps=0.05, buffer_size=100_000,
                train_freq=FRAMES_PER_BATCH // num_envs, seed=0, device="cpu")
    model.set_logger(Logger(folder=None, output_formats=[]))  # (SB3's default makes an empty folder in /tmp per run)
    model.learn(total_timesteps=WARMUP)
    start = time.perf_counter()
    model.learn(total_timesteps=frames, reset_num_timesteps=False)
    return (time.perf_counter() - start) / frames * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20480)
    parser.add_argument("--num_envs", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--backends", nargs="+", default=["vector", "serial"])
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds of every contender in turn; the figures are each one's median round, and a "
                             "backend's ratio is the median of its rounds' ratios to SB3's time in the same round")
    parser.add_argument("--skip_sb3", action="store_true", help="time this project's side alone (no SB3 installed)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    results = {}
    for n in args.num_envs:
        rounds = []
        for _ in range(args.repeats):
            times = {} if args.skip_sb3 else {"sb3": sb3(n, args.frames)}
            times.update({backend: ours(backend, n, args.frames) for backend in args.backends})
            rounds.append(times)
        row = {} if args.skip_sb3 else {"sb3_us_per_frame": round(median(r["sb3"] for r in rounds), 1)}
        for backend in args.backends:
            row[backend] = {"us_per_frame": round(median(r[backend] for r in rounds), 1)}
            if not args.skip_sb3:
                row[backend]["ratio_to_sb3"] = round(median(r[backend] / r["sb3"] for r in rounds), 2)
        if args.repeats > 1:
            row["rounds"] = [{k: round(v, 1) for k, v in r.items()} for r in rounds]
        results[str(n)] = row
        print(f"{n} envs: " + "; ".join(f"{b} {row[b]['us_per_frame']:.1f} us/frame" + (
            "" if args.skip_sb3 else f" ({row[b]['ratio_to_sb3']:.2f}x SB3's {row['sb3_us_per_frame']:.1f})")
            for b in args.backends), flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"env": "CartPole-v1", "frames": args.frames, "threads": 1, "repeats": args.repeats,
                      "num_envs": results, "goal_ratio_at_most": 1.5, "peak_rss_mb": round(peak),
                      "load_average": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
