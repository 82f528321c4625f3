"""Sizes that cannot fit in the machine's memory are refused before any work, in one line naming the key (they
printed the allocator's traceback, or got the run killed midway); the estimate takes no memory and draws no random
number, so a run that fits starts exactly as before."""

from __future__ import annotations

import os

import pytest
import torch

from envs.gym import GymConfig
from modules.dqn import DQNModule
from modules.q_networks import QNetwork
from pipelines.compatibility import probe_specs
from pipelines.memory_check import machine_memory, network_bytes
from tests.pipelines.conftest import REPO
from tests.pipelines.test_workflows import _refused

CARTPOLE = str(REPO / "configs" / "cartpole_dqn.yaml")
PPO = str(REPO / "configs" / "cartpole_ppo.yaml")
LSTM = str(REPO / "configs" / "cartpole_novel_ppo_lstm.yaml")
VRPTW = str(REPO / "configs" / "vrptw_oracle_smoke.yaml")


@pytest.mark.parametrize("config, args, needle", [
    (CARTPOLE, ["--model.init_args.network.init_args.hidden_dims=[100000, 100000]"],
     "model.init_args.network: the networks this config builds on its env need at least 320.0 GB"),
    (LSTM, ["--model.init_args.network.init_args.lstm_hidden_size=1000000"],
     "model.init_args.network: the networks this config builds on its env need at least"),
    (CARTPOLE, ["--data.init_args.replay_buffer.buffer_size=100000000000"],
     "data.replay_buffer.buffer_size=100,000,000,000 needs at least"),
    (PPO, ["--data.init_args.collector.frames_per_batch=1000000000", "--data.init_args.total_frames=2000000000"],
     "data.collector.frames_per_batch=1,000,000,000 needs at least 40.0 GB per collected batch"),
    (CARTPOLE, ["--data.init_args.replay_buffer.batch_size=200000"],
     "data.replay_buffer.batch_size=200000 is larger than data.replay_buffer.buffer_size=100000"),
    (VRPTW, ["--model.init_args.policy.init_args.embed_dim=1000000"],
     "the run needs more memory than this machine has"),  # (a constructor that allocates: its failure, in a line)
], ids=["hidden 1e5", "LSTM 1e6", "buffer 1e11", "batch 1e9", "batch above buffer", "routing policy"])
def test_sizes_that_cannot_fit_are_refused_before_any_work(tmp_path, capsys, config, args, needle):
    line = _refused(capsys, "--config", config, *args, f"--trainer.default_root_dir={tmp_path}")
    assert needle in line, line
    assert os.listdir(tmp_path) == []


def test_the_estimate_takes_no_memory_and_no_random_draw():
    """The networks are shaped on the meta device: 80 GB of weights estimated at once, the module itself left
    unshaped, and torch's random stream where it was (a run that fits draws its initial weights as before)."""
    data_config = GymConfig(env_id="CartPole-v1")

    class Data:  # what probe_specs reads of a data module
        env_config, seed, env_models, num_agents = data_config, 0, {}, None

    specs = probe_specs(Data())
    model = DQNModule(network=QNetwork(hidden_dims=(100_000, 100_000)))
    torch.manual_seed(3)
    before = torch.get_rng_state()
    weights = network_bytes(model, specs)
    assert weights == pytest.approx(2 * 4 * (4 * 1e5 + 1e5 + 1e5 * 1e5 + 1e5 + 1e5 * 2 + 2), rel=1e-3)
    assert torch.equal(torch.get_rng_state(), before) and model.env_specs is None
    small = DQNModule(network=QNetwork(hidden_dims=(32,)))
    assert 0 < network_bytes(small, specs) < machine_memory()
