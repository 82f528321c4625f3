"""Emulated games: collection with rollout workers, and PPO training against Stable-Baselines3's.

    python benchmarks/games_throughput.py [--workers 1 2 4 8] [--seconds 30] [--repeats 1] [--sb3_frames 16384]
                                          [--skip_scaling] [--skip_sb3]

1 torch thread per process (the Pong learners: ``--learner_threads``, 2, for both), each contender alone in turn.

* **Scaling** (Airstriker-Genesis-v0, stable-retro's bundled game, the preprocessing of ``envs.games.GameConfig``):
  the PPO module's collector policy (Nature CNN, CPU inference in the workers) collecting through
  ``pipelines.data.collectors.WorkerCollector`` with N worker processes of one emulator each, for ``--seconds``
  after one untimed batch. Frames are agent steps (4 emulator frames each). Episodes/hour counts finished games.
  Scaling efficiency = (frames/s at N / frames/s at 1) / min(N, cores); the goal (issue 15) is >= 0.8. With
  ``--repeats R`` the worker counts are run R times in turn (1, 2, 4, 8, 1, 2, ...: a drift of the machine's speed
  reaches every count alike); each count reports its median run (the lower middle one for an even R), the efficiency
  comes from the medians, and ``runs_frames_per_s`` / ``runs_scaling_efficiency`` keep every run (efficiency against
  the same round's first count). Memory per worker: its proportional share (``Pss``: pages shared with the fork
  server and the other workers, such as the imported torch and TorchRL, divided among the processes that map them;
  the goal is <= 300 MB) and its peak resident set (``VmHWM``, which counts every shared page in full), in MB;
  ``run_pss_mb`` is the whole run's memory (this process, the fork server, the workers and any children: the sum of
  their ``Pss``), against the original's 3 GB with 8 workers. The original system reported 350 episodes/hour with 8
  workers (training); ``vs_original`` compares episodes/hour per core used.
* **SB3** (``ALE/Pong-v5``, RL Zoo's Atari PPO settings, 8 envs): ``pipelines.fit --config configs/pong_ppo.yaml``
  for ``--sb3_frames`` frames, with ALE's native vector env (the config's ``backend: ale_vector``) and with the
  emulators under TorchRL's transforms in 2 rollout workers of 4 games each, against SB3's ``PPO("CnnPolicy")``
  over ``make_atari_env`` (``SubprocVecEnv`` of 8 processes, ``AtariWrapper``: the same preprocessing, no sticky
  actions) with ``VecFrameStack(4)`` and the same hyper-parameters. Each is timed from its second collected batch
  to the end of training (start-up excluded): frames/s = the frames in between / the time in between; the goal is
  ours / SB3 >= 1.3.

Prints one JSON object (last stdout line).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from envs import EnvSpecs, make_env
from envs.games import GameConfig
from modules.nature_cnn import NatureCNNActorCritic
from modules.ppo import PPOModule
from pipelines.data.collectors import WorkerCollector

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository (put on sys.path above)
GAME = "Airstriker-Genesis-v0"
STEPS_PER_WORKER = 128  # agent steps per worker per batch (RL Zoo's n_steps)
ORIGINAL_EPISODES_PER_HOUR = 350.0  # the original system, 8 workers
PONG = "ALE/Pong-v5"


def _memory_mb(pid: int) -> dict[str, float]:
    """A process's peak resident set and proportional set size, MB (``/proc``)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                out["peak_rss_mb"] = int(line.split()[1]) / 1024
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                out["pss_mb"] = int(line.split()[1]) / 1024
    return out


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, their children...), from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def collect(workers: int, seconds: float) -> dict:
    """Frames/s, episodes/hour and memory per worker of ``workers`` workers collecting Airstriker."""
    config = GameConfig(GAME)
    module = PPOModule(NatureCNNActorCritic(frame_stack=config.frame_stack), action_mask_key=None)
    probe = make_env(config, 1, 0)
    module.build_on(EnvSpecs.of(probe))
    probe.close()
    collector = WorkerCollector(config, {}, workers, workers, 0, module.collector_policy,
                                frames_per_batch=STEPS_PER_WORKER * workers, timeout_s=600.0)
    try:
        iterator = iter(collector)
        next(iterator)  # untimed: the workers' start-up and first batch
        frames = episodes = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            batch = next(iterator)
            frames += batch.numel()
            episodes += int(batch["next", "done"].sum())
        elapsed = time.perf_counter() - start
        memory = [_memory_mb(pid) for pid in collector.pids]
        run_pss = 0.0
        for pid in [os.getpid(), *_descendants(os.getpid())]:
            with contextlib.suppress(OSError, KeyError):  # (a child that ended meanwhile)
                run_pss += _memory_mb(pid)["pss_mb"]
    finally:
        collector.shutdown()
    return {"frames_per_s": frames / elapsed, "episodes_per_hour": episodes * 3600.0 / elapsed, "frames": frames,
            "episodes": episodes, "seconds": elapsed,
            "worker_peak_rss_mb": max(m["peak_rss_mb"] for m in memory),
            "worker_pss_mb": max(m["pss_mb"] for m in memory), "run_pss_mb": run_pss}


def ours_pong(frames: int, *overrides: str) -> dict:
    """``pipelines.fit`` on the Pong config (with ``overrides``) for ``frames`` frames (no callbacks), in a subprocess.
    Timed from its
    first logged point (the second collected batch) to its last (the end of training), from the TensorBoard
    scalars ``time/frames``: the frames between over the wall time between."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "pipelines.fit", "--config", "configs/pong_ppo.yaml",
                   "--data.init_args.total_frames", str(frames), "--trainer.logger.init_args.save_dir", out,
                   "--trainer.callbacks", "[]", "--trainer.enable_progress_bar", "false", *overrides]
        run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"pipelines.fit failed: {run.stderr[-3000:]}")
        files = [os.path.join(root, f) for root, _, names in os.walk(out) for f in names if "tfevents" in f]
        events = EventAccumulator(os.path.dirname(files[0]))
        events.Reload()
        points = events.Scalars("time/frames")
    timed_frames, timed_s = points[-1].value - points[0].value, points[-1].wall_time - points[0].wall_time
    return {"timed_frames": timed_frames, "timed_s": timed_s, "frames_per_s": timed_frames / timed_s}


def _pong(**kwargs):
    """Pong at one frame per step without sticky actions (SB3's ``AtariWrapper`` skips frames itself), in SB3's
    env processes (which must register ALE's ids themselves)."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    return gym.make(PONG, frameskip=1, repeat_action_probability=0.0, **kwargs)


def sb3_pong(frames: int, threads: int) -> dict:
    """SB3's PPO on Pong with RL Zoo's Atari settings for ``frames`` frames, its learner on ``threads`` torch
    threads: frames/s of ``learn``."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import SubprocVecEnv, VecFrameStack

    def linear(start: float):
        return lambda remaining: remaining * start

    torch.set_num_threads(threads)
    env = VecFrameStack(make_atari_env(_pong, n_envs=8, seed=0, vec_env_cls=SubprocVecEnv), n_stack=4)
    model = PPO("CnnPolicy", env, n_steps=128, n_epochs=4, batch_size=256, learning_rate=linear(2.5e-4),
                clip_range=linear(0.1), vf_coef=0.5, ent_coef=0.01, gamma=0.99, gae_lambda=0.95, max_grad_norm=0.5,
                seed=0, device="cpu", verbose=0)
    model.set_logger(Logger(folder=None, output_formats=[]))  # (SB3's default makes an empty folder in /tmp per run)
    class Clock(BaseCallback):
        """The time and frame count at the end of the second rollout (as ours: timed from its second batch)."""

        def __init__(self) -> None:
            super().__init__()
            self.rollouts, self.mark = 0, None

        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            self.rollouts += 1
            if self.rollouts == 2:
                self.mark = (time.perf_counter(), self.num_timesteps)

    clock = Clock()
    model.learn(total_timesteps=frames, callback=clock)
    end = time.perf_counter()
    env.close()
    timed_frames, timed_s = frames - clock.mark[1], end - clock.mark[0]
    return {"timed_frames": timed_frames, "timed_s": timed_s, "frames_per_s": timed_frames / timed_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--seconds", type=float, default=30.0, help="timed collection per worker count")
    parser.add_argument("--repeats", type=int, default=1, help="runs of every worker count, in turn (median reported)")
    parser.add_argument("--sb3_frames", type=int, default=16_384, help="training frames per contender on Pong")
    parser.add_argument("--learner_threads", type=int, default=2,
                        help="torch threads of both learners on Pong (each collects, then updates: no overlap)")
    parser.add_argument("--skip_scaling", action="store_true")
    parser.add_argument("--skip_sb3", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    cores = os.cpu_count() or 1
    result: dict = {"cores": cores, "game": GAME}
    if not args.skip_scaling:
        runs: dict[str, list[dict]] = {str(n): [] for n in args.workers}
        for _ in range(args.repeats):
            for n in args.workers:
                r = collect(n, args.seconds)
                runs[str(n)].append(r)
                print(f"{n} workers: {r['frames_per_s']:.0f} frames/s, {r['episodes_per_hour']:.0f} episodes/h, "
                      f"worker PSS {r['worker_pss_mb']:.0f} MB, peak RSS {r['worker_peak_rss_mb']:.0f} MB; the run's "
                      f"PSS {r['run_pss_mb']:.0f} MB", file=sys.stderr)
        first = str(args.workers[0])

        def efficiency(frames_per_s: float, n: str, base: float) -> float:
            return frames_per_s / (base / int(first)) / min(int(n), cores)

        scaling = {}
        for n, done in runs.items():
            ordered = sorted(done, key=lambda r: r["frames_per_s"])
            scaling[n] = {**ordered[(len(ordered) - 1) // 2], "runs_frames_per_s": [r["frames_per_s"] for r in done]}
        for n, r in scaling.items():
            r["scaling_efficiency"] = efficiency(r["frames_per_s"], n, scaling[first]["frames_per_s"])
            runs = zip(r["runs_frames_per_s"], scaling[first]["runs_frames_per_s"], strict=True)
            r["runs_scaling_efficiency"] = [efficiency(f, n, b) for f, b in runs]
        result["scaling"] = scaling
        if "8" in scaling:
            per_core = scaling["8"]["episodes_per_hour"] / min(8, cores)
            result["vs_original"] = {"episodes_per_hour_per_core": per_core,
                                     "original_per_core": ORIGINAL_EPISODES_PER_HOUR / 8,
                                     "ratio": per_core / (ORIGINAL_EPISODES_PER_HOUR / 8)}
    if not args.skip_sb3:
        threads = f"--num_threads={args.learner_threads}"
        contenders = {"ale_vector": ours_pong(args.sb3_frames, threads),
                      "emulators_2_workers": ours_pong(args.sb3_frames, threads,
                                                       "--data.init_args.env.init_args.backend=emulators",
                                                       "--data.init_args.collector.workers=2")}
        for name, r in contenders.items():
            print(f"ours Pong, {name}: {r['frames_per_s']:.0f} frames/s", file=sys.stderr)
        theirs = sb3_pong(args.sb3_frames, args.learner_threads)
        print(f"SB3 Pong: {theirs['frames_per_s']:.0f} frames/s", file=sys.stderr)
        result["pong_ppo"] = {"sb3": theirs, **{name: {**r, "ratio_to_sb3": r["frames_per_s"] / theirs["frames_per_s"]}
                                                for name, r in contenders.items()}}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
