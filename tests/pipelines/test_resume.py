"""A run killed with SIGKILL mid-training and resumed in a new process from its last checkpoint ends exactly
as the uninterrupted run: the same weights, optimiser state, RNG states, frame counter, replay buffer (contents,
cursor, and so the next sampled indices) and env state, bit for bit (``benchmarks.soak.compare``); it goes on
in its own run folder, whose TensorBoard steps are the uninterrupted run's, without a gap or a repeat."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from benchmarks.soak import compare
from tests.pipelines.conftest import REPO, SMOKE
from tests.warm_python import run_python

CARTPOLE = str(REPO / "configs" / "cartpole_dqn.yaml")
PENDULUM_TD3 = str(REPO / "configs" / "pendulum_td3.yaml")
PENDULUM_PPO = str(REPO / "configs" / "pendulum_ppo.yaml")
LSTM_PPO = str(REPO / "configs" / "cartpole_novel_ppo_lstm.yaml")
HOCKEY_PPO = str(REPO / "configs" / "hockey_ppo.yaml")
HOCKEY_DQN = str(REPO / "configs" / "hockey_dqn_strong.yaml")
OPPONENT_MIX = ["--trainer.callbacks+=callbacks.SelfPlay",
                '--trainer.callbacks.probabilities={"weak": 0.4, "strong": 0.6}']
SMALL_PPO = ["--data.init_args.total_frames=2048", "--data.init_args.collector.num_envs=2",
             "--data.init_args.collector.frames_per_batch=256", "--model.init_args.mini_batch_size=64",
             "--model.init_args.ppo_epochs=2"]
SMALL_TD3 = ["--data.init_args.total_frames=504", "--data.init_args.replay_buffer.init_random_frames=104",
             "--model.init_args.network.init_args.actor_hidden_dims=[32, 32]",
             "--model.init_args.network.init_args.critic_hidden_dims=[32, 32]"]
SMALL_REPLAY = ["--data.init_args.replay_buffer.init_random_frames=256", "--data.init_args.collector.num_envs=2",
                "--data.init_args.collector.frames_per_batch=64", "--data.init_args.replay_buffer.batch_size=32",
                "--data.init_args.replay_buffer.utd_ratio=2", "--data.init_args.total_frames=3200",
                "--model.init_args.network.init_args.hidden_dims=[32, 32]"]
SMALL_DQN = [*SMALL_REPLAY, "--model.init_args.target_update_interval=8",
             "--trainer.callbacks+=callbacks.EpsilonDecay", "--trainer.callbacks.annealing_frames=1600",
             "--trainer.callbacks.eps_end=0.05"]


def _fit(root, config: str, *args: str) -> subprocess.CompletedProcess:
    return run_python([sys.executable, "-m", "pipelines.fit", "--config", config,
                       f"--trainer.default_root_dir={root}", "--trainer.enable_progress_bar=false",
                       "--trainer.callbacks=[]", "--trainer.callbacks+=callbacks.ModelCheckpoint",
                       "--trainer.callbacks.every_n_train_steps=20", "--trainer.callbacks.save_last=true", *args],
                      cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                      timeout=300)


def _steps(version) -> list[int]:
    events = EventAccumulator(str(version), size_guidance={"scalars": 0})
    events.Reload()
    return [e.step for e in events.Scalars("time/optim_steps")]


@pytest.mark.parametrize("config,args,kill_at", [
    (CARTPOLE, SMALL_DQN, 30),  # DQN on gymnasium CartPole: replay buffer, target network, gymnasium env state
    pytest.param(CARTPOLE, [*SMALL_DQN, "--model.init_args.n_steps=3", "--model.init_args.double_dqn=true"], 30,
                 marks=pytest.mark.slow),  # n-step
    (SMOKE, ["--data.init_args.total_frames=3840"], 26),  # PPO on the DVRP smoke config (4 updates a batch)
    # TD3 on Pendulum: exploration noise, policy delay's clock, two targets
    pytest.param(PENDULUM_TD3, SMALL_TD3, 200, marks=pytest.mark.slow),
    # continuous PPO on Pendulum: Gaussian draws, the normalisation's statistics and its returns in progress
    (PENDULUM_PPO, SMALL_PPO, 50),
    # recurrent PPO: the LSTM states carried by the env, the reward normalisation's returns
    (LSTM_PPO, ["--data.init_args.total_frames=2048", "--model.init_args.ppo_epochs=5"], 30),
    # the hockey configs against their opponent mix: the hockey env's games in progress, the opponents' draw stream
    pytest.param(HOCKEY_PPO, [*SMALL_PPO, "--data.init_args.total_frames=3072", *OPPONENT_MIX], 70,
                 marks=pytest.mark.slow),
    pytest.param(HOCKEY_DQN, [*SMALL_REPLAY, *OPPONENT_MIX], 30, marks=pytest.mark.slow),  # (soft target updates)
], ids=["dqn_cartpole", "dqn_nstep_cartpole", "ppo_dvrp", "td3_pendulum", "ppo_pendulum", "ppo_lstm_cartpole_novel",
        "ppo_hockey", "dqn_hockey"])
def test_sigkill_and_resume_in_a_new_process_matches_the_uninterrupted_run(tmp_path, config, args, kill_at):
    full = _fit(tmp_path / "full", config, *args)
    assert full.returncode == 0, full.stderr[-2000:]
    killed = _fit(tmp_path / "cut", config, *args, "--trainer.callbacks+=tests.pipelines.fault_probe.KillAt",
                  f"--trainer.callbacks.step={kill_at}")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    name = os.path.splitext(os.path.basename(config))[0]
    last = tmp_path / "cut" / "runs" / name / "version_0" / "checkpoints" / "last.ckpt"
    saved = torch.load(last, map_location="cpu", weights_only=True)
    assert 0 < saved["global_step"] < kill_at
    resumed = _fit(tmp_path / "cut", config, *args, f"--ckpt_path={last}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    run = tmp_path / "cut" / "runs" / name / "version_0"  # the run goes on in its own folder
    frames = saved["rl_state"]["collected_frames"]
    assert f"resuming {run} at {frames} frames" in resumed.stderr
    assert sorted(p.name for p in (tmp_path / "cut" / "runs" / name).iterdir()) == ["version_0"]
    assert (run / "config.yaml").is_file() and (run / f"config.resumed-{frames}.yaml").is_file()
    assert compare(str(tmp_path / "full" / "runs" / name / "version_0" / "checkpoints" / "last.ckpt"),
                   str(run / "checkpoints" / "last.ckpt")) == []
    # one TensorBoard run with the uninterrupted run's steps: the interrupted part's steps after the
    # checkpoint are replaced by the resumed part's (purge_step), none missing, none twice
    assert _steps(run) == _steps(tmp_path / "full" / "runs" / name / "version_0")
