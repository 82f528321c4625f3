"""PPO module: GAE on collected batches (hand-computed; truncation bootstraps, termination does not),
the value-reuse shortcut against a direct two-pass computation, and one loss step."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import Tensor
from torchrl.modules import MaskedCategorical, ProbabilisticActor
from torchrl.objectives.value import GAE

from envs import make_env
from envs.dvrp import DVRPConfig
from modules.actor_critic import ActorCriticNetwork
from modules.dvrp_actor_critic import DVRPActorCritic
from modules.ppo import PPOModule
from modules.ppo_loss import ppo_loss


class Readout(ActorCriticNetwork):
    """value(s) = observation[0]; two actions with zero logits."""

    in_keys = ["observation"]

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))

    def encode(self, observation: Tensor) -> Tensor:
        return observation * self.scale

    def policy(self, hidden: Tensor) -> Tensor:
        return torch.zeros(*hidden.shape[:-1], 2)

    def value(self, hidden: Tensor) -> Tensor:
        return hidden[..., :1]


def _trajectory(values: list[float], rewards: list[float], terminated_last: bool) -> TensorDict:
    t = len(rewards)
    obs = torch.tensor(values).view(1, t + 1, 1)
    done = torch.zeros(1, t, 1, dtype=torch.bool)
    done[0, -1] = True
    nxt = TensorDict(observation=obs[:, 1:], reward=torch.tensor(rewards).view(1, t, 1), done=done,
                     terminated=done & terminated_last, episode_reward=torch.zeros(1, t, 1), batch_size=[1, t])
    return TensorDict(observation=obs[:, :-1], action=torch.zeros(1, t, dtype=torch.long), next=nxt, batch_size=[1, t])


@pytest.mark.parametrize("terminated_last", [True, False])
def test_gae_matches_hand_computation(terminated_last):
    gamma, lam = 0.9, 0.8
    module = PPOModule(Readout(), gamma=gamma, gae_lambda=lam, reward_scale=1.0, action_mask_key=None)
    values, rewards = [0.5, 1.0, -0.5, 2.0], [1.0, 0.0, 3.0]
    out = module.on_collected(_trajectory(values, rewards, terminated_last))
    bootstrap = 0.0 if terminated_last else values[3]  # a truncated episode bootstraps on V(s_T)
    deltas = [rewards[0] + gamma * values[1] - values[0], rewards[1] + gamma * values[2] - values[1],
              rewards[2] + gamma * bootstrap - values[2]]
    adv2 = deltas[2]
    adv1 = deltas[1] + gamma * lam * adv2
    adv0 = deltas[0] + gamma * lam * adv1
    torch.testing.assert_close(out["advantage"].flatten(), torch.tensor([adv0, adv1, adv2]))
    torch.testing.assert_close(out["value_target"].flatten(),
                               torch.tensor([adv0, adv1, adv2]) + torch.tensor(values[:3]))


def _torchrl_actor(module: PPOModule) -> ProbabilisticActor:
    """TorchRL's actor over the module's policy head (after its ``encoder``): the reference the lean collector
    policy is checked against."""
    net = module.network
    head = TensorDictModule(net.policy, in_keys=["hidden", *net.policy_keys], out_keys=["logits"])
    if module.hparams.action_mask_key is None:
        keys, dist = ["logits"], torch.distributions.Categorical
    else:
        keys, dist = {"logits": "logits", "mask": module.hparams.action_mask_key}, MaskedCategorical
    return ProbabilisticActor(head, in_keys=keys, distribution_class=dist, return_log_prob=True)


def _dvrp_module() -> tuple[PPOModule, object]:
    torch.manual_seed(0)
    env = make_env(DVRPConfig(num_customers=5), num_envs=4, seed=3)
    module = PPOModule(DVRPActorCritic(embed_dim=16, num_heads=2, num_layers=1, hidden_dim=32), gamma=0.97,
                       gae_lambda=0.9, reward_scale=0.0125)
    module.materialize(env.reset())
    return module, env


def _reference_gae(module: PPOModule) -> GAE:
    """TorchRL's GAE with the module's gamma and lambda on the env's own done and terminated entries."""
    gae = GAE(gamma=module.hparams.gamma, lmbda=module.hparams.gae_lambda, value_network=None)
    gae.set_keys(reward="scaled_reward")
    return gae


def test_end_of_life_ends_the_value_targets_only():
    """Episodic life: an ``end_of_life`` inside an episode gives the advantages of an episode that terminated
    there (TorchRL's GAE with done = terminated = True at that step), while the batch's done flags stay."""
    gamma, lam = 0.9, 0.8
    module = PPOModule(Readout(), gamma=gamma, gae_lambda=lam, reward_scale=1.0, action_mask_key=None)
    batch = _trajectory([0.5, 1.0, -0.5, 2.0, 1.5, 0.3], [1.0, 0.0, 3.0, -1.0, 2.0], terminated_last=True)
    eol = torch.zeros(1, 5, 1, dtype=torch.bool)
    eol[0, 1] = True
    reference = batch.clone()
    reference["next", "done"] = reference["next", "done"] | eol
    reference["next", "terminated"] = reference["next", "terminated"] | eol
    reference["next", "scaled_reward"] = reference["next", "reward"]
    reference["state_value"] = reference["observation"]
    reference["next", "state_value"] = reference["next", "observation"]
    _reference_gae(module)(reference)
    batch["next", "end_of_life"] = eol
    out = module.on_collected(batch)
    torch.testing.assert_close(out["advantage"], reference["advantage"].reshape(-1, 1))
    assert out["next", "done"].sum() == 1  # the env's episode did not end at the lost life
    without = module.on_collected(_trajectory([0.5, 1.0, -0.5, 2.0, 1.5, 0.3], [1.0, 0.0, 3.0, -1.0, 2.0], True))
    assert not torch.allclose(without["advantage"][:2], out["advantage"][:2])


def test_value_reuse_equals_two_pass_gae():
    """The shortcut (values of next observations taken from the next step's hidden state) equals GAE
    with every next observation encoded, across episode ends inside the batch, terminated or truncated."""
    module, env = _dvrp_module()
    with torch.no_grad():
        batch = env.rollout(12, module.collector_policy, break_when_any_done=False)  # 5-step episodes
    batch["next", "terminated"][1, 4] = False  # pretend row 1's first episode was truncated
    reference = batch.clone()
    with torch.no_grad():
        reference["next", "scaled_reward"] = reference["next", "reward"] * 0.0125
        for td in (reference, reference["next"]):
            module.critic(module.encoder(td))
        _reference_gae(module)(reference)
    out = module.on_collected(batch)
    torch.testing.assert_close(out["advantage"], reference["advantage"].reshape(-1, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out["value_target"], reference["value_target"].reshape(-1, 1), rtol=1e-5, atol=1e-5)


def test_loss_step_gives_finite_gradients_everywhere():
    module, env = _dvrp_module()
    with torch.no_grad():
        batch = module.on_collected(env.rollout(10, module.collector_policy, break_when_any_done=False))
    out = module.loss(batch)
    (out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]).backward()
    grads = {name: p.grad for name, p in module.named_parameters()}
    missing = [n for n, g in grads.items() if g is None]
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values()), missing
    assert sum(float(g.abs().sum()) > 0 for g in grads.values()) == len(grads)
    assert torch.isfinite(batch["action_log_prob"]).all()


def test_the_heads_run_in_float32_under_bf16_autocast(monkeypatch):
    """Under mixed precision (``trainer.precision: bf16-mixed``, autocast) the encoder runs in bfloat16 but both
    heads run in float32: the loss gets exactly what the float32 heads make of the encoder's output."""
    module, env = _dvrp_module()
    net = module.network
    with torch.no_grad():
        batch = module.on_collected(env.rollout(10, module.collector_policy, break_when_any_done=False))
    seen = {}

    def spy(logits, value, *args):
        seen.update(logits=logits, value=value)
        return ppo_loss(logits, value, *args)

    monkeypatch.setattr("modules.ppo.ppo_loss", spy)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = net.encode(*(batch.get(k) for k in net.in_keys))
        out = module.loss(batch)
    assert hidden.dtype == torch.bfloat16  # the encoder does run in bfloat16
    with torch.no_grad():
        logits = net.policy(hidden.float(), *(batch.get(k) for k in net.policy_keys))
        value = net.value(hidden.float())
    assert seen["logits"].dtype == seen["value"].dtype == torch.float32
    assert torch.equal(seen["logits"], logits) and torch.equal(seen["value"], value)
    assert out["loss_objective"].dtype == torch.float32 and torch.isfinite(out["loss_objective"])


def test_masked_actions_never_get_probability():
    """The actor's distribution puts exactly zero probability on masked actions (so the collector never picks
    one), and renormalises over the allowed ones; the mask is the env's, with some offers infeasible."""
    module, env = _dvrp_module()
    with torch.no_grad():
        batch = env.rollout(10, module.collector_policy, break_when_any_done=False)
        flat = batch.reshape(-1)
        dist = module.collector_policy.module.distribution(*(flat[k] for k in module.collector_policy.in_keys))[0]
    mask = flat["action_mask"]
    assert (~mask).any() and mask.any(-1).all(), "the rollout must meet masked offers"
    probs = dist.probs
    assert torch.equal(probs[~mask], torch.zeros_like(probs[~mask]))
    torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[0]))
    assert mask.gather(-1, flat["action"].unsqueeze(-1)).all(), "a collected action was masked"
    draws = dist.sample((200,))  # [200, N]
    assert mask.gather(-1, draws.t()).all(), "a sampled action was masked"


def test_cartpole_config_decays_lr_and_clip_linearly_and_starts_orthogonal(tmp_path):
    """configs/cartpole_ppo.yaml (RL Zoo's CartPole PPO): the clip and the learning rate decay with the frames
    collected (1/4 left after 3 of 4 batches, 0 at the end); the MLPs start orthogonal (SB3's initialisation)."""
    from modules.actor_critic import MLPActorCritic
    from pipelines.fit import main
    from tests.pipelines.conftest import REPO

    net = MLPActorCritic(2)
    net.policy(torch.zeros(1, 4))
    first, last = net.actor[0].weight, net.actor[-1].weight
    assert torch.allclose(first.T @ first, 2.0 * torch.eye(4), atol=1e-5)  # gain sqrt(2), 64 x 4
    assert torch.allclose(last @ last.T, 1e-4 * torch.eye(2), atol=1e-8) and not net.actor[0].bias.any()

    cli = main(["--config", str(REPO / "configs" / "cartpole_ppo.yaml"), "--data.init_args.total_frames=1024",
                "--model.init_args.ppo_epochs=2", "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
                f"--trainer.logger.init_args.save_dir={tmp_path}"])
    model = cli.model
    assert model.collected_frames == 1024 and cli.trainer.global_step == 4 * 2
    assert float(model.clip_epsilon) == 0.0
    assert model.optimizers().param_groups[0]["lr"] == pytest.approx(0.0)
    assert model.latest_metrics["train/clip_epsilon"] == 0.0
    model.collected_frames = 768  # after 3 of the 4 batches
    assert model._remaining() == pytest.approx(0.25)


@pytest.mark.parametrize("case", ["dvrp", "cartpole"])
def test_collector_policy_draws_what_torchrl_actor_draws(case):
    """The lean collector policy gives the same actions and log-probabilities as TorchRL's encoder + ProbabilisticActor
    on the same random state (sampling) and the mode in deterministic evaluation."""
    from torchrl.envs import ExplorationType, set_exploration_type

    from modules.actor_critic import MLPActorCritic

    if case == "dvrp":
        module, env = _dvrp_module()
        with torch.no_grad():
            obs = env.rollout(6, module.collector_policy, break_when_any_done=False).reshape(-1)
    else:
        module = PPOModule(MLPActorCritic(3, (8,)), action_mask_key=None)
        obs = TensorDict(observation=torch.randn(64, 5), batch_size=[64])
        module.materialize(obs)
    for mode in (ExplorationType.RANDOM, ExplorationType.DETERMINISTIC):
        with torch.no_grad(), set_exploration_type(mode):
            torch.manual_seed(1)
            ours = module.collector_policy(obs.clone())
            torch.manual_seed(1)
            theirs = _torchrl_actor(module)(module.encoder(obs.clone()))
        assert torch.equal(ours["action"], theirs["action"]), mode
        assert torch.allclose(ours["action_log_prob"], theirs["action_log_prob"]), mode
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):  # sampling differs from the mode somewhere
        assert (ours["action"] != module.collector_policy(obs.clone())["action"]).any()
