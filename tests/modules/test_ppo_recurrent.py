"""Recurrent PPO: the LSTMs' states travel through the env (TorchRL's InitTracker and primer), reset at episode
starts; the loss replays whole rows from the stored states and gives the collecting policy's log-probabilities back
(a first update's ratios are 1, episodes ending mid-row included); minibatches are whole rows; the config's checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchrl.envs import ExplorationType, set_exploration_type

from envs import EnvSpecs, make_env
from envs.gym import GymConfig
from envs.policy_state import recurrent_env
from modules.base import RLModule
from modules.ppo import PPOModule
from modules.recurrent import LSTMActorCritic, sequence_outputs
from pipelines.data.collectors import local_collector
from pipelines.data.on_policy import Minibatches
from pipelines.evaluate import main as evaluate
from pipelines.export import main as export
from pipelines.fit import main
from tests.pipelines.conftest import REPO

CONFIG = str(REPO / "configs" / "cartpole_novel_ppo_lstm.yaml")


def _module(**options) -> PPOModule:
    return PPOModule(LSTMActorCritic(lstm_hidden_size=16, hidden_dims=(16,)), action_mask_key=None, gamma=0.98,
                     gae_lambda=0.8, **options)


def _collected(module: PPOModule, num_envs: int = 4, steps: int = 48, batches: int = 2):
    env = make_env(GymConfig(env_id="CartPoleNoVel-v1", backend="serial"), num_envs=num_envs, seed=3)
    module.build_on(EnvSpecs.of(env))
    collector = local_collector(env, module.collector_policy, num_envs * steps)
    out = []
    with set_exploration_type(ExplorationType.RANDOM):
        for batch, _ in zip(collector, range(batches), strict=False):
            out.append(batch.clone())
    collector.shutdown()
    return out


def test_the_states_carry_over_steps_and_reset_at_episode_starts():
    torch.manual_seed(0)
    module = _module()
    first, second = _collected(module)
    starts = first["is_init"].squeeze(-1)
    assert starts[:, 0].all() and starts[:, 1:].any()  # episodes end and restart inside the rows
    state = first["actor_hidden"]
    assert (state[starts] == 0).all() and (state[~starts].abs().sum((-1, -2)) > 0).all()
    # a step's state is the one the previous step left; the next batch goes on from the last one
    carried = ~starts[:, 1:]
    assert torch.equal(first["actor_hidden"][:, 1:][carried], first["next", "actor_hidden"][:, :-1][carried])
    goes_on = ~second["is_init"][:, 0, 0]
    assert goes_on.any()
    assert torch.equal(second["critic_cell"][:, 0][goes_on], first["next", "critic_cell"][:, -1][goes_on])


@pytest.mark.parametrize("normalize", [False, True])
def test_the_loss_replays_the_rows_to_the_collecting_policys_probabilities(normalize):
    torch.manual_seed(0)
    module = _module(normalize_observation=normalize, normalize_reward=normalize)
    first, batch = _collected(module)
    if normalize:  # the statistics the second batch played with: the first batch's (merged on its arrival)
        with torch.no_grad():
            module.on_collected(first)
        _, batch = _collected(module)
        assert module.normalization.observation.count == pytest.approx(192, abs=1e-3)
        assert "normalized_observation" in batch.keys()
    assert batch["is_init"][:, 1:].any() and not batch["is_init"][:, 0].all()  # mid-episode starts and mid-row resets
    with torch.no_grad():
        batch = module.on_collected(batch)
        assert batch.batch_size == (4, 48)  # kept as rows
        logits, value = sequence_outputs(module.network, batch)
        replayed = torch.distributions.Categorical(logits=logits).log_prob(batch["action"])
        out = module.loss(batch)
    assert torch.allclose(replayed, batch["action_log_prob"], atol=1e-5)
    assert out["kl_approx"].abs() < 1e-6 and out["clip_fraction"] == 0
    assert torch.allclose(value, module.critic(batch.copy())["state_value"], atol=1e-5)
    # without the resets the replay would differ: the same rows read as one episode each
    with torch.no_grad():
        unreset = batch.clone()
        unreset["is_init"] = torch.zeros_like(unreset["is_init"])
        other = torch.distributions.Categorical(logits=sequence_outputs(module.network, unreset)[0])
        assert not torch.allclose(other.log_prob(batch["action"]), batch["action_log_prob"], atol=1e-3)


def test_minibatches_are_whole_rows():
    torch.manual_seed(0)
    module = _module()
    _, batch = _collected(module)
    with torch.no_grad():
        batch = module.on_collected(batch).select(*module.replay_keys())
    order = torch.stack([torch.randperm(4) for _ in range(2)]).reshape(-1, 2)  # what the data module cuts: 2 rows
    parts = list(Minibatches(batch, order))
    assert [p.batch_size for p in parts] == [torch.Size([2, 48])] * 4
    assert torch.equal(parts[0]["observation"], batch["observation"][order[0]])


def test_recurrent_settings_are_checked_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--config", CONFIG, "--model.init_args.mini_batch_size=128", "--data.init_args.collector.num_envs=16",
              "--data.init_args.collector.frames_per_batch=768", f"--trainer.default_root_dir={tmp_path}",
              f"--trainer.logger.init_args.save_dir={tmp_path}"])
    assert "model.mini_batch_size=128 must be a multiple of the 48 steps" in capsys.readouterr().err


def test_recurrent_env_leaves_a_feed_forward_policy_alone():
    env = make_env(GymConfig(env_id="CartPole-v1", backend="serial"), num_envs=2, seed=0)
    assert recurrent_env(env, torch.nn.Linear(4, 2)) is env
    assert recurrent_env(env, lambda td: td) is env


def test_the_config_runs_evaluates_and_exports_its_steps(tmp_path, capsys):
    args = ["--config", CONFIG, "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
            "--trainer.callbacks+=callbacks.ModelCheckpoint", "--trainer.callbacks.save_last=true",
            "--data.init_args.total_frames=1024", f"--trainer.logger.init_args.save_dir={tmp_path}",
            "--model.init_args.network.init_args.lstm_hidden_size=16"]
    cli = main(args)
    assert cli.model.recurrent and cli.trainer.global_step == 4 * 20  # 4 batches, 20 epochs of the whole batch
    last = tmp_path / "cartpole_novel_ppo_lstm" / "version_0" / "checkpoints" / "last.ckpt"
    capsys.readouterr()
    table = evaluate(["--ckpt_path", str(last), "--episodes", "4", "--num_envs", "4"])
    assert set(table) == {"ppo", "random"} and table["ppo"]["mean_return"] >= 8
    loaded = RLModule.load_from_checkpoint(last)
    with pytest.raises(ValueError, match="episode_start holds 3 values for 2 observations"):
        loaded.predict(torch.zeros(2, 4), episode_start=[True, False, True])
    with pytest.raises(ValueError, match="state is for a batch of"):
        loaded.predict(torch.zeros(2, 4), state={k: torch.zeros(3, 1, 16) for k in
                                                 ("actor_hidden", "actor_cell", "critic_hidden", "critic_cell")})
    description = export(["--ckpt_path", str(last), "--out", str(tmp_path / "ppo.pt")])
    assert [i["key"] for i in description["inputs"]] == ["observation", "is_init", "actor_hidden", "actor_cell"]
    assert [n["key"] for n in description["next_states"]] == ["next.actor_hidden", "next.actor_cell"]
    # the exported step, its states fed back, plays the module's own greedy actions, episode starts included
    program = torch.jit.load(str(tmp_path / "ppo.pt"))
    env = recurrent_env(make_env(GymConfig(env_id="CartPoleNoVel-v1", backend="serial"), num_envs=3, seed=7),
                        loaded.collector_policy)
    rollout = env.rollout(120, loaded.torchrl_policy(), break_when_any_done=False)
    assert rollout["is_init"][:, 1:].any()  # an episode restarts within the rollout
    hidden = cell = torch.zeros(3, 1, 16)
    for t in range(rollout.shape[1]):
        step = rollout[:, t]
        action, hidden, cell = program(step["observation"], step["is_init"], hidden, cell)
        assert torch.equal(action, step["action"]), t
    # predict, sb3-contrib's way (the states returned fed back, episode starts given), plays the same actions, with
    # numpy in and out as with tensors
    state = None
    for t in range(rollout.shape[1]):
        step = rollout[:, t]
        action, state = loaded.predict(step["observation"].numpy(), state=state,
                                       episode_start=step["is_init"].squeeze(-1).numpy())
        assert isinstance(action, np.ndarray) and np.array_equal(action, step["action"].numpy()), t
    single, _ = loaded.predict(rollout[0, 0]["observation"])  # one observation, an episode's start
    assert single.shape == () and single == rollout[0, 0]["action"]
