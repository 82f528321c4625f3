"""Env <-> algorithm checks before any work (issue 38, item 4): a config whose model cannot train on its env stops in
``pipelines.fit`` with one ``error:`` line naming the config key and both sides, exit status 2 and no run folder;
a number the env gives (``num_actions``, ``num_agents``) is taken from it when the config leaves it out."""

from __future__ import annotations

import json
import os
import random
import re
import sys

import numpy as np
import pytest
import torch

from envs.games import GameConfig, emulators
from envs.gym import GymConfig
from modules.base import RLModule
from modules.sac import SACModule, SACNetworks
from pipelines.compatibility import probe_specs
from pipelines.data import CollectorOptions, OffPolicyDataModule
from pipelines.evaluate import main as evaluate
from pipelines.fit import main
from tests.pipelines.conftest import REPO
from tests.warm_python import run_python

CONFIGS = REPO / "configs"
DQN, PPO, SAC, VACUUM = (str(CONFIGS / f"{n}.yaml") for n in ("cartpole_dqn", "cartpole_ppo", "pendulum_sac", "vacuum"))
ENV_ID = "--data.init_args.env.init_args.env_id="
NETWORK = "--model.init_args.network.init_args."
TWO_ROBOTS = {"class_path": "envs.vacuum.VacuumConfig", "init_args": {"num_robots": 2, "energy": [100, 100]}}
# small budgets: on code without the checks, each of these runs starts and fails (or trains) in seconds
SMALL = ["--trainer.callbacks=[]", "--trainer.enable_progress_bar=false", "--data.init_args.total_frames=2048"]


def _rejected(tmp_path, capsys, config: str, *overrides: str) -> str:
    """Run ``pipelines.fit`` in this process on ``config`` with ``overrides`` (outputs under ``tmp_path``); assert it
    exits 2 with one ``error:`` line and no traceback, and that nothing was written; return the line."""
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as stop:
        main(["--config", config, *SMALL, f"--trainer.logger.init_args.save_dir={out}",
              f"--trainer.default_root_dir={out}", *overrides])
    stderr = capsys.readouterr().err
    assert stop.value.code == 2, stderr[-2000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr[-2000:]
    assert not out.exists(), sorted(p.name for p in out.rglob("*"))  # no run folder, no checkpoint
    return errors[0]


@pytest.mark.parametrize("config,overrides,message", [
    # a network's number of actions that is not the env's (today: index out of bounds in the loss, mid-run)
    (DQN, [f"{ENV_ID}Acrobot-v1", f"{NETWORK}num_actions=2"],
     r"^error: model\.init_args\.network\.init_args\.num_actions=2 but the env \(Acrobot-v1\) has 3 discrete actions: "
     r"remove num_actions to take it from the env$"),
    # ... more actions than the env's (today: gymnasium's AssertionError when the greedy action is 2)
    (DQN, [f"{NETWORK}num_actions=3"],
     r"^error: model\.init_args\.network\.init_args\.num_actions=3 but the env \(CartPole-v1\) has 2 discrete actions"),
    # PPO's Gaussian policy on an action of another width than the network's
    (PPO, [f"{ENV_ID}Pendulum-v1", f"{NETWORK}num_actions=2"],
     r"^error: model\.init_args\.network\.init_args\.num_actions=2 but the env \(Pendulum-v1\) has continuous "
     r"actions \[1\] \(bounded\): remove num_actions"),
    # DQN on continuous actions
    (DQN, [f"{ENV_ID}Pendulum-v1"],
     r"^error: model\.class_path=modules\.dqn\.DQNModule takes discrete actions, but the env \(Pendulum-v1\) has "
     r"continuous actions \[1\] \(bounded\): for continuous actions use modules\.ppo\.PPOModule, or "),
    # a hidden width <= 0 (today: a traceback when the lazy layer is shaped)
    (DQN, [f"{NETWORK}hidden_dims=[-3]"],
     r"^error: model\.init_args\.network\.init_args\.hidden_dims=\[-3\] is not allowed: every width >= 1"),
    (SAC, [f"{NETWORK}actor_hidden_dims=[0]"],
     r"^error: model\.init_args\.network\.init_args\.actor_hidden_dims=\[0\] is not allowed: every width >= 1"),
    # an observation entry the env does not give
    (DQN, ["--model.init_args.action_mask_key=action_mask"],
     r"^error: model\.init_args\.action_mask_key reads 'action_mask', but the env \(CartPole-v1\) gives no "
     r"'action_mask' \(it gives: observation, episode_reward\): set it to null"),
    (SAC, ["--model.init_args.observation_key=pixels"],
     r"^error: model\.init_args\.observation_key reads 'pixels', but the env \(Pendulum-v1\) gives no 'pixels'"),
    # the multi-agent vacuum env: another number of robots than the network's; PPO (single-agent)
    (VACUUM, [f"{NETWORK}num_agents=3"],
     r"^error: model\.init_args\.network\.init_args\.num_agents=3 but the env \(VacuumConfig\) has 4 agents "
     r"\(env\.num_agents=4"),
    (PPO, [f"--data.init_args.env={json.dumps(TWO_ROBOTS)}"],
     r"^error: model\.class_path=modules\.ppo\.PPOModule trains single-agent envs, but the env \(VacuumConfig\) has 2 "
     r"agents"),
    (DQN, [f'--model.init_args.network={json.dumps({"class_path": "modules.q_networks.MultiAgentQNetwork"})}'],
     r"^error: model\.init_args\.network\.class_path=modules\.q_networks\.MultiAgentQNetwork is a multi-agent "
     r"network, but the env \(CartPole-v1\) has one agent"),
], ids=["acrobot-num_actions-2", "cartpole-num_actions-3", "ppo-pendulum-num_actions", "dqn-pendulum",
        "hidden_dims-negative", "sac-hidden_dims-zero", "missing-action_mask", "sac-missing-observation",
        "vacuum-num_agents-3", "ppo-vacuum", "multi-agent-network-cartpole"])
def test_a_model_that_cannot_train_on_its_env_stops_before_any_work(tmp_path, capsys, config, overrides, message):
    line = _rejected(tmp_path, capsys, config, *overrides)
    assert re.search(message, line), line


def test_the_reported_command_stops_with_one_line(tmp_path):
    """The command of the issue, as a user types it (explicit ``num_actions: 2`` of the CartPole network, Acrobot's
    three actions), in its own process: exit 2, one line on stderr, nothing written in the working directory."""
    run = run_python([sys.executable, "-m", "pipelines.fit", "--config", DQN, f"{ENV_ID}Acrobot-v1",
                      f"{NETWORK}num_actions=2"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                     env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 2, run.stderr[-2000:]
    assert [line for line in run.stderr.splitlines() if line.startswith("error:")] == [
        "error: model.init_args.network.init_args.num_actions=2 but the env (Acrobot-v1) has 3 discrete actions: "
        "remove num_actions to take it from the env"], run.stderr[-2000:]
    assert "Traceback" not in run.stderr and os.listdir(tmp_path) == []


def test_sac_takes_cartpoles_discrete_actions():
    """SAC here has a discrete variant (Christodoulou 2019): CartPole passes the check (it trains, as before)."""
    specs = probe_specs(_data(GymConfig("CartPole-v1")))
    SACModule(SACNetworks((8,), (8,))).check_env(specs)
    assert specs.name == "CartPole-v1" and specs.action_kind == "discrete" and specs.num_actions == 2


def _data(env) -> OffPolicyDataModule:
    return OffPolicyDataModule(env, CollectorOptions(num_envs=1, frames_per_batch=8), total_frames=8, seed=3)


def test_the_probe_env_leaves_the_random_states_and_the_emulator_as_they_were():
    """The probe env draws nothing from the run's random streams (initial weights and exploration are an unchecked
    run's), and a stable-retro game's probe gives its process's one emulator back when it closes."""
    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    expected = torch.rand(3), np.random.rand(3), random.random()
    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    probe_specs(_data(GymConfig("CartPole-v1")))
    assert torch.equal(torch.rand(3), expected[0]) and np.array_equal(np.random.rand(3), expected[1])
    assert random.random() == expected[2]
    specs = probe_specs(_data(GameConfig("Airstriker-Genesis-v0")))
    assert specs.num_actions == 12 and specs.name == "Airstriker-Genesis-v0"
    assert emulators.claim_in_process_emulator("Airstriker-Genesis-v0")  # free again
    emulators.release_in_process_emulator("Airstriker-Genesis-v0")


def test_num_actions_taken_from_the_env_trains_acrobot_and_evaluates(tmp_path):
    """The shipped DQN config (no ``num_actions``) on Acrobot: the Q-network gets the env's 3 actions, trains a few
    hundred frames, saves ``num_actions: null`` in its config, and its checkpoint loads (networks shaped on the
    recorded specs) and plays in ``pipelines.evaluate``."""
    cli = main(["--config", DQN, f"{ENV_ID}Acrobot-v1", "--trainer.enable_progress_bar=false",
                "--trainer.callbacks=[]", "--trainer.callbacks+=callbacks.ModelCheckpoint",
                "--trainer.callbacks.save_last=true", f"--trainer.logger.init_args.save_dir={tmp_path}",
                "--data.init_args.total_frames=512", "--data.init_args.replay_buffer.init_random_frames=256",
                "--data.init_args.replay_buffer.utd_ratio=4", f"{NETWORK}hidden_dims=[32]"])
    assert cli.model.network.num_actions == 3 and cli.model.network.advantage.out_features == 3
    assert cli.model.collected_frames == 512 and cli.trainer.global_step == 4
    folder = tmp_path / "cartpole_dqn" / "version_0"
    assert "num_actions: null" in (folder / "config.yaml").read_text()
    last = str(folder / "checkpoints" / "last.ckpt")
    loaded = RLModule.load_from_checkpoint(last)
    assert loaded.network.advantage.out_features == 3
    assert all(torch.equal(a, b) for a, b in zip(loaded.network.state_dict().values(),
                                                  cli.model.network.state_dict().values(), strict=True))
    table = evaluate(["--ckpt_path", last, "--episodes", "2", "--num_envs", "2", "--policies"])
    assert set(table) == {"dqn"} and -500 <= table["dqn"]["mean_return"] <= 0


def test_td3_under_plain_ddp_stops_before_any_work(tmp_path, capsys):
    """TD3's critic-only updates leave the actor without gradients, which plain DDP stops on at the first such update
    (with a traceback); the run stops first with one line naming the strategy that works (tested in test_ddp.py)."""
    line = _rejected(tmp_path, capsys, str(CONFIGS / "pendulum_td3.yaml"), "--trainer.strategy=ddp",
                     "--trainer.devices=2", "--trainer.accelerator=cpu")
    assert line == ("error: trainer.strategy: model.class_path=modules.td3.TD3Module leaves some parameters out of "
                    "some updates, which DDP must be told: use --trainer.strategy=ddp_find_unused_parameters_true")
