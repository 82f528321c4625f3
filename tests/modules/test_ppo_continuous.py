"""PPO on continuous actions: the Gaussian policy's draws, bounds and log-probabilities; its loss against TorchRL's
``ClipPPOLoss`` with an ``IndependentNormal`` actor; the running normalisation of observations and rewards (merged
statistics, returns carried over batches, a batch normalised as its policy saw it); the env checks."""

from __future__ import annotations

import json
import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.data import Bounded, Unbounded
from torchrl.envs import ExplorationType, set_exploration_type
from torchrl.modules import IndependentNormal, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss

from envs import EnvSpecs, make_env
from envs.gym import GymConfig
from modules.actor_critic import MLPActorCritic
from modules.base import RLModule
from modules.normalization import RewardNormalizer, RunningMeanStd
from modules.ppo import PPOModule
from pipelines.evaluate import main as evaluate
from pipelines.export import main as export
from pipelines.fit import main
from pipelines.play import play
from tests.pipelines.conftest import REPO


def _specs(action_spec, features: int = 3, dtype=torch.float32) -> EnvSpecs:
    observation = TensorDict(observation=torch.zeros(1, features, dtype=dtype), batch_size=[1])
    return EnvSpecs(action_spec, action_spec, observation, None, "test-env")


def _module(action_spec=None, **options) -> PPOModule:
    module = PPOModule(MLPActorCritic(hidden_dims=(16, 16)), action_mask_key=None, **options)
    module.build_on(_specs(action_spec if action_spec is not None else Bounded(-2.0, 2.0, shape=(2,))))
    return module


def test_the_draw_is_clipped_for_the_env_and_scored_unclipped():
    torch.manual_seed(0)
    module = _module(log_std_init=0.5)
    policy, head = module.collector_policy, module._gaussian()
    observation = TensorDict(observation=torch.randn(4096, 3) * 3, batch_size=[4096])
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        out = policy(observation.clone())
        mean = module.network.policy(observation["observation"])
    raw, action = out["raw_action"], out["action"]
    assert ((raw < -2) | (raw > 2)).float().mean() > 0.05  # std e^0.5: many draws leave [-2, 2]
    assert torch.equal(action, raw.clamp(-2, 2))
    expected = torch.distributions.Normal(mean, math.exp(0.5)).log_prob(raw).sum(-1)
    assert torch.allclose(out["action_log_prob"], expected, atol=1e-5)
    assert 1.5 < (raw - mean).std() < 1.8  # e^0.5 = 1.65
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        greedy = policy(observation.clone())
    assert torch.equal(greedy["raw_action"], mean) and torch.equal(greedy["action"], mean.clamp(-2, 2))
    assert head.log_std.requires_grad and head.log_std.shape == (2,)


def test_tanh_squash_maps_into_the_bounds_and_needs_them():
    torch.manual_seed(0)
    spec = Bounded(torch.tensor([-1.0, 0.0]), torch.tensor([3.0, 0.5]), shape=(2,))
    module = _module(spec, squash="tanh", log_std_init=1.0)
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        out = module.collector_policy(TensorDict(observation=torch.randn(512, 3), batch_size=[512]))
    assert spec.is_in(out["action"])
    assert torch.allclose(out["action"], torch.tensor([1.0, 0.25]) + torch.tensor([2.0, 0.25])
                          * torch.tanh(out["raw_action"]))
    with pytest.raises(ValueError, match=r"model.squash=tanh .* continuous actions \[2\] \(unbounded\)"):
        PPOModule(MLPActorCritic(), action_mask_key=None, squash="tanh").check_env(_specs(Unbounded(shape=(2,))))
    unbounded = _module(Unbounded(shape=(2,)))  # clip on unbounded actions: the draw itself
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        out = unbounded.collector_policy(TensorDict(observation=torch.randn(8, 3), batch_size=[8]))
    assert torch.equal(out["action"], out["raw_action"])


def _batch(module: PPOModule, n: int = 64) -> TensorDict:
    g = torch.Generator().manual_seed(5)
    batch = TensorDict(observation=torch.randn(n, 3, generator=g), advantage=torch.randn(n, 1, generator=g) * 3 + 1,
                       value_target=torch.randn(n, 1, generator=g), batch_size=[n])
    with torch.no_grad():  # the collecting policy: the current one, moved a little
        mean = module.network.policy(batch["observation"]) + 0.3 * torch.randn(n, 2, generator=g)
        raw = mean + 0.8 * torch.randn(n, 2, generator=g)
        batch["raw_action"], batch["action"] = raw, raw.clamp(-2, 2)
        batch["action_log_prob"] = torch.distributions.Normal(mean, 0.8).log_prob(raw).sum(-1)
    return batch


class _Head(nn.Module):
    def __init__(self, module: PPOModule) -> None:
        super().__init__()
        self.network, self.log_std = module.network, module._gaussian().log_std

    def forward(self, observation):
        mean = self.network.policy(observation)
        return mean, self.log_std.exp().expand_as(mean)


@pytest.mark.parametrize("entropy_coeff, normalize, critic_loss", [(0.0, True, "l2"), (0.01, False, "smooth_l1")])
def test_gaussian_loss_equals_clip_ppo_loss_with_an_independent_normal(entropy_coeff, normalize, critic_loss):
    torch.manual_seed(0)
    options = dict(clip_epsilon=0.2, entropy_coeff=entropy_coeff, critic_coeff=0.7, normalize_advantage=normalize,
                   loss_critic_type=critic_loss)
    module = _module(log_std_init=-0.3, **options)
    batch = _batch(module)
    actor = ProbabilisticActor(TensorDictModule(_Head(module), ["observation"], ["loc", "scale"]),
                               in_keys=["loc", "scale"], distribution_class=IndependentNormal, return_log_prob=True)
    critic = ValueOperator(module.network.value, in_keys=["observation"])
    reference = ClipPPOLoss(actor, critic, functional=False, **options)
    params = [*module.network.parameters(), module._gaussian().log_std]
    ours = module.loss(batch.clone())
    grads = torch.autograd.grad(ours["loss_objective"] + ours["loss_critic"] + ours["loss_entropy"], params)
    theirs_batch = batch.clone()
    theirs_batch["action"] = batch["raw_action"]  # TorchRL scores the action it is given: the unclipped draw
    theirs = reference(theirs_batch)
    expected = torch.autograd.grad(theirs["loss_objective"] + theirs["loss_critic"] + theirs["loss_entropy"], params)
    for key in ("loss_objective", "loss_critic", "loss_entropy", "entropy", "kl_approx", "clip_fraction"):
        assert torch.allclose(ours[key], theirs[key], rtol=1e-5, atol=1e-6), key
    for got, want in zip(grads, expected, strict=True):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-6)
    assert ours["clip_fraction"] > 0 and grads[-1].abs().sum() > 0  # the ratios reach the clip; log_std is trained


def test_running_statistics_merge_batches_as_one():
    g = torch.Generator().manual_seed(0)
    data = torch.randn(3000, 4, generator=g) * torch.tensor([1.0, 5.0, 0.1, 2.0]) + torch.tensor([3.0, -1, 0, 10])
    statistics = RunningMeanStd((4,))
    for part in data.split([1000, 1500, 500]):
        statistics.update(part)
    assert torch.allclose(statistics.mean, data.double().mean(0), rtol=1e-6, atol=1e-6)
    assert torch.allclose(statistics.var, data.double().var(0, correction=0), rtol=1e-4)
    assert statistics.count == pytest.approx(3000, abs=1e-3)
    z = statistics.standardize(data, 10.0)
    assert torch.allclose(z.mean(0), torch.zeros(4), atol=1e-4) and torch.allclose(z.std(0), torch.ones(4), atol=1e-3)
    assert statistics.standardize(torch.full((1, 4), 1e6), 10.0).max() == 10.0  # clipped at 10 standard deviations


def test_reward_normalisation_carries_the_returns_over_batches():
    g = torch.Generator().manual_seed(0)
    rows, steps, gamma = 3, 40, 0.9
    reward = torch.randn(rows, steps, 1, generator=g) - 2.0
    done = torch.rand(rows, steps, 1, generator=g) < 0.1
    returns, expected = torch.zeros(rows, dtype=torch.float64), []
    for t in range(steps):  # SB3's VecNormalize, step by step
        returns = returns * gamma + reward[:, t, 0].double()
        expected.append(returns.clone())
        returns[done[:, t, 0]] = 0.0
    expected = torch.stack(expected)
    whole, halves = RewardNormalizer(gamma, 10.0), RewardNormalizer(gamma, 10.0)
    scaled = whole(reward, done)
    halves(reward[:, :25], done[:, :25])
    last = halves(reward[:, 25:], done[:, 25:])
    assert torch.allclose(whole.statistics.var, expected.var(correction=0), rtol=1e-4)
    assert torch.allclose(halves.statistics.var, whole.statistics.var, rtol=1e-9)
    assert torch.equal(halves.returns, whole.returns) and torch.equal(whole.returns, returns)
    assert torch.allclose(last, scaled[:, 25:], rtol=1e-6)
    assert torch.allclose(scaled, reward / (expected.var(correction=0) + 1e-8).sqrt().float(), rtol=1e-3)
    with pytest.raises(ValueError, match="returns of 3 env rows, but the batch has 2"):
        whole(reward[:2], done[:2])


def test_a_collected_batch_is_normalised_as_its_policy_saw_it():
    """The first update's ratios are 1: the loss reads the observations standardised by the statistics the policy
    played with (not the ones updated with the batch), and those statistics then take in the raw observations."""
    torch.manual_seed(0)
    env = make_env(GymConfig(env_id="Pendulum-v1", backend="serial"), num_envs=2, seed=1)
    module = PPOModule(MLPActorCritic(hidden_dims=(16, 16)), action_mask_key=None, gamma=0.9,
                       normalize_observation=True, normalize_reward=True)
    module.build_on(EnvSpecs.of(env))
    statistics = module.normalization.observation
    statistics.update(torch.randn(100, 3) * 4 + 1)  # statistics away from the start, as after some batches
    before, before_var = statistics.mean.clone(), statistics.var.clone()
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        rollout = env.rollout(50, module.collector_policy, break_when_any_done=False)
    raw = rollout["observation"].clone()
    with torch.no_grad():
        batch = module.on_collected(rollout)
        out = module.loss(batch)
    assert out["kl_approx"].abs() < 1e-6 and out["clip_fraction"] == 0
    seen = ((raw - before) / (before_var + 1e-8).sqrt()).clamp(-10, 10).float().reshape(-1, 3)
    assert torch.allclose(batch["observation"], seen, atol=1e-5)
    assert not torch.equal(statistics.mean, before) and statistics.count == pytest.approx(200, abs=1e-3)
    # rewards divided by the return's standard deviation
    assert batch["next", "scaled_reward"].abs().max() < batch["next", "reward"].abs().max()
    with pytest.raises(ValueError, match="model.reward_scale=0.5 is not allowed: 1 with model.normalize_reward=true"):
        PPOModule(MLPActorCritic(), normalize_reward=True, reward_scale=0.5)
    with pytest.raises(ValueError, match="model.normalize_observation=true standardises one float observation"):
        PPOModule(MLPActorCritic(), action_mask_key=None, normalize_observation=True).check_env(
            _specs(Bounded(-1.0, 1.0, shape=(1,)), dtype=torch.int64))


PENDULUM = str(REPO / "configs" / "pendulum_ppo.yaml")
SMALL = ["--data.init_args.collector.num_envs=2", "--data.init_args.collector.frames_per_batch=512",
         "--model.init_args.mini_batch_size=128", "--model.init_args.ppo_epochs=2"]


def test_pendulum_config_runs_evaluates_exports_and_loads(tmp_path, capsys):
    args = ["--config", PENDULUM, "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
            "--trainer.callbacks+=callbacks.ModelCheckpoint", "--trainer.callbacks.save_last=true", *SMALL,
            f"--trainer.logger.init_args.save_dir={tmp_path}"]
    cli = main([*args, "--data.init_args.total_frames=1024"])
    assert cli.trainer.global_step == 2 * 2 * 512 // 128 and cli.model.continuous
    assert set(cli.model.latest_metrics) >= {"train/action_std", "train/kl_approx", "rollout/episode_return"}
    last = tmp_path / "pendulum_ppo" / "version_0" / "checkpoints" / "last.ckpt"
    saved = torch.load(last, weights_only=True)
    assert saved["state_dict"]["normalization.observation.count"] == pytest.approx(1024, abs=1e-3)
    assert saved["rl_state"]["reward_returns"][0].shape == (2,)
    capsys.readouterr()
    table = evaluate(["--ckpt_path", str(last), "--episodes", "4", "--num_envs", "4"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == table
    assert set(table) == {"ppo", "random"} and -2000 < table["random"]["mean_return"] < 0
    export(["--ckpt_path", str(last), "--out", str(tmp_path / "ppo.pt")])
    program = torch.jit.load(str(tmp_path / "ppo.pt"))
    observation = torch.randn(5, 3) * torch.tensor([1.0, 1.0, 6.0])  # raw observations: the normalisation is inside
    loaded = RLModule.load_from_checkpoint(last)
    expected = cli.model.predict(observation)
    assert torch.allclose(program(observation), expected, atol=1e-6)
    assert torch.equal(loaded.predict(observation), expected)
    assert torch.equal(loaded.normalization.observation.var, cli.model.normalization.observation.var)
    assert expected.abs().max() <= 2.0  # the greedy action clipped to the torque bounds


def test_pendulum_ppo_learns_to_beat_the_random_policy(tmp_path):
    """10 collected batches (40,960 frames, about 20 s): the greedy policy scores above -900, where the random policy
    scores -1250 (README)."""
    cli = main(["--config", PENDULUM, "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
                "--trainer.logger=false", f"--trainer.default_root_dir={tmp_path}",
                "--data.init_args.total_frames=40960", "--model.init_args.lr_schedule=constant"])
    returns = play(cli.datamodule.env_config, lambda env: cli.model.collector_policy, 16, 16, 123)["episode_return"]
    assert returns.mean() > -900, returns
