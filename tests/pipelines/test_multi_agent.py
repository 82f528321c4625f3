"""Multi-agent DQN on the robot-vacuum env: one row per (env, robot) in the shared buffer, n-step
returns per robot, per-robot or shared Q-networks, and a short run that beats a random policy."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Categorical, LazyTensorStorage, TensorDictReplayBuffer

from envs.episodes import masked_uniform
from modules.dqn import DQNModule
from modules.q_networks import MultiAgentQNetwork
from pipelines.data.replay import split_agents
from pipelines.evaluate import play
from pipelines.fit import main
from tests.pipelines.conftest import REPO

VACUUM = str(REPO / "configs" / "vacuum.yaml")
# 2 robots on a 4 x 4 grid with 10 steps: a random pair cleans about half the floor
SMALL = {"grid_size": 4, "num_robots": 2, "energy": [100, 100], "chargers": [], "max_steps": 10}


def _collected(b: int, t: int, r: int, done_at: tuple[int, int] | None = None) -> TensorDict:
    """A collected-like multi-agent batch: robot i of env e earns 10 * i + e + step / 100 per step."""
    step = torch.arange(t, dtype=torch.float32)
    reward = (10 * torch.arange(r)[None, None, :] + torch.arange(b)[:, None, None] + step[None, :, None] / 100)
    done = torch.zeros(b, t, 1, dtype=torch.bool)
    if done_at is not None:
        done[done_at] = True
    obs = reward.unsqueeze(-1).expand(b, t, r, 3).clone()
    ids = torch.eye(r).expand(b, t, r, r)
    nxt = TensorDict(observation=obs + 1, agent_id=ids.clone(), reward=reward.unsqueeze(-1), done=done,
                     terminated=done.clone(), truncated=torch.zeros_like(done),
                     info=TensorDict(cleaned_fraction=torch.rand(b, t, 1), batch_size=[b, t]), batch_size=[b, t])
    return TensorDict(observation=obs, agent_id=ids.clone(), action=torch.zeros(b, t, r, dtype=torch.long),
                      done=torch.zeros_like(done), next=nxt, batch_size=[b, t])


def test_split_agents_gives_one_row_per_env_and_robot():
    batch = _collected(2, 4, 3, done_at=(1, 2))
    rows = split_agents(batch, 3)
    assert rows.shape == (6, 4)
    for e in range(2):
        for i in range(3):
            row = rows[e * 3 + i]
            assert torch.equal(row["observation"], batch["observation"][e, :, i])
            assert torch.equal(row["next", "reward"], batch["next", "reward"][e, :, i])
            assert torch.equal(row["agent_id"][:, i], torch.ones(4))
            assert torch.equal(row["next", "done"], batch["next", "done"][e])  # the env's, repeated
            assert torch.equal(row["next", "info", "cleaned_fraction"],
                               batch["next", "info", "cleaned_fraction"][e])
    bad = batch.clone()
    bad["extra"] = torch.zeros(2, 4, 5)
    with pytest.raises(ValueError, match="expected the agent dim"):
        split_agents(bad, 3)


def test_n_step_returns_are_per_env_and_robot():
    """n = 2, gamma = 0.5 over split rows: each robot's return is its own rewards, cut at its env's end."""
    module = DQNModule(MultiAgentQNetwork(3, 5), gamma=0.5, n_steps=2)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(100, ndim=2), transform=module.replay_transform())
    buffer.extend(split_agents(_collected(2, 5, 3, done_at=(1, 2)), 3))
    buffer.extend(split_agents(_collected(2, 5, 3), 3))
    data = buffer.storage[:3]  # time-major [T, B * R]: steps 0..2
    for e in range(2):
        for i in range(3):
            base = 10 * i + e
            for t in range(3):
                r_t, r_next = base + t / 100, base + (t + 1) / 100
                cut = e == 1 and t == 2  # env 1 ends at step 2 (for all its robots)
                expected = r_t if cut else r_t + 0.5 * r_next
                assert data["next", "reward"][t, e * 3 + i, 0] == pytest.approx(expected)
                assert int(data["steps_to_next_obs"][t, e * 3 + i]) == (1 if cut else 2)


def test_independent_networks_route_rows_and_all_train_on_every_batch():
    net = MultiAgentQNetwork(3, 5, hidden_dims=(8,), parameter_sharing=False)
    obs, ids = torch.randn(6, 4), torch.eye(3)[torch.tensor([0, 2, 1, 1, 0, 2])]
    values = net(obs, ids)
    for k in range(6):
        # batched and one-row matmuls round differently: compare at float32 tolerance, not atol 1e-8
        assert torch.allclose(values[k], net.heads[int(ids[k].argmax())](obs[k:k + 1])[0], atol=1e-6)
    module = DQNModule(net, in_keys=("observation", "agent_id"))
    module.build(Categorical(5), TensorDict(observation=obs, agent_id=ids, batch_size=[6]))
    # a batch of robot 0's transitions only: every robot's network must still get a gradient
    batch = TensorDict(observation=obs, agent_id=torch.eye(3)[[0] * 6], action=torch.zeros(6, dtype=torch.long),
                       next=TensorDict(observation=torch.randn(6, 4), agent_id=torch.eye(3)[[0] * 6],
                                       reward=torch.ones(6, 1), done=torch.zeros(6, 1, dtype=torch.bool),
                                       terminated=torch.zeros(6, 1, dtype=torch.bool), batch_size=[6]),
                       batch_size=[6])
    train = net.training_batch(batch)
    assert train.shape == (18,)
    assert torch.equal(train["agent_id"].argmax(-1), torch.arange(3).repeat_interleave(6))
    module.loss(batch)[0].backward()  # the module makes the per-agent copies itself
    for head in net.heads:
        assert head.advantage.weight.grad is not None and head.advantage.weight.grad.abs().sum() > 0
    shared = MultiAgentQNetwork(3, 5, parameter_sharing=True)
    assert shared.training_batch(batch) is batch


def _random_policy(td: TensorDict) -> TensorDict:
    td["action"] = masked_uniform(td["action_mask"])
    return td


@pytest.mark.parametrize("sharing", [True, False])
def test_shared_buffer_run_beats_random_cleaning(tmp_path, sharing):
    """6,000 frames on the small grid (about 8 s): the greedy robots clean clearly more of the floor in
    10 steps than random ones, on the same 256 episodes, with one shared or one network per robot."""
    cli = main(["--config", VACUUM, "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
                "--trainer.callbacks+=callbacks.EpsilonDecay", "--trainer.callbacks.schedule=linear",
                "--trainer.callbacks.annealing_frames=3000", "--trainer.callbacks.eps_end=0.05",
                f"--trainer.logger.init_args.save_dir={tmp_path}",
                f"--data.init_args.env={json.dumps({'class_path': 'envs.vacuum.VacuumConfig', 'init_args': SMALL})}",
                "--model.init_args.network.init_args.num_agents=2",
                f"--model.init_args.network.init_args.parameter_sharing={str(sharing).lower()}",
                "--data.init_args.total_frames=6000", "--data.init_args.replay_buffer.init_random_frames=500"])
    metrics = cli.model.latest_metrics
    assert {"rollout/agent0/episode_return", "rollout/agent1/episode_return", "rollout/cleaned_fraction",
            "rollout/collisions", "rollout/energy_left", "time/episodes_per_min"} <= set(metrics)
    config = cli.datamodule.env_config
    torch.manual_seed(0)
    learned = play(config, lambda env: cli.model.collector_policy, 256, 64, 12345)
    random = play(config, lambda env: _random_policy, 256, 64, 12345)
    assert learned["episode_return"].equal(learned["agent0/episode_return"] + learned["agent1/episode_return"])
    gain = learned["cleaned_fraction"].mean() - random["cleaned_fraction"].mean()
    se = (learned["cleaned_fraction"].var() / 256 + random["cleaned_fraction"].var() / 256).sqrt()
    assert gain > 0.2 and gain > 5 * se, (learned["cleaned_fraction"].mean(), random["cleaned_fraction"].mean())


def test_network_robot_count_must_match_the_env(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--config", VACUUM, "--trainer.enable_progress_bar=false", "--trainer.logger=false",
              f"--trainer.default_root_dir={tmp_path}",
              "--trainer.callbacks=[]", "--model.init_args.network.init_args.num_agents=3",
              "--data.init_args.total_frames=64"])
    assert stop.value.code == 2
    assert re.search(r"num_agents=3.*4", capsys.readouterr().err)
    assert os.listdir(tmp_path) == []  # refused before anything is written

