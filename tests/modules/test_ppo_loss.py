"""The lean PPO loss against TorchRL's ``ClipPPOLoss`` on the same minibatch: losses, diagnostics and gradients,
with a masked policy on DVRP rollouts and an unmasked one on CartPole-shaped data, for every option the config
exposes (clip, entropy and critic weights, advantage standardisation, l2 / smooth_l1 critic loss)."""

from __future__ import annotations

import itertools

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torchrl.modules import MaskedCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss

from envs import make_env
from envs.dvrp import DVRPConfig
from modules.actor_critic import MLPActorCritic
from modules.dvrp_actor_critic import DVRPActorCritic
from modules.ppo import PPOModule


def _reference(network, masked: bool, **options) -> tuple[ClipPPOLoss, TensorDictModule]:
    """TorchRL's loss on the same network, as the PPO module used to build it."""
    encoder = TensorDictModule(network.encode, in_keys=list(network.in_keys), out_keys=["hidden"])
    head = TensorDictModule(network.policy, in_keys=["hidden", *network.policy_keys], out_keys=["logits"])
    keys, dist = (({"logits": "logits", "mask": "action_mask"}, MaskedCategorical) if masked
                  else (["logits"], torch.distributions.Categorical))
    actor = ProbabilisticActor(head, in_keys=keys, distribution_class=dist, return_log_prob=True)
    return ClipPPOLoss(actor, ValueOperator(network.value, in_keys=["hidden"]), functional=False, **options), encoder


def _dvrp_batch(module: PPOModule) -> TensorDict:
    env = make_env(DVRPConfig(num_customers=5), num_envs=4, seed=3)
    module.materialize(env.reset())
    with torch.no_grad():
        return module.on_collected(env.rollout(10, module.collector_policy, break_when_any_done=False))


def _cartpole_batch(module: PPOModule) -> TensorDict:
    g = torch.Generator().manual_seed(5)
    n = 64
    module.materialize(TensorDict(observation=torch.zeros(1, 4), batch_size=[1]))
    batch = TensorDict(observation=torch.randn(n, 4, generator=g), action=torch.randint(2, (n,), generator=g),
                       advantage=torch.randn(n, 1, generator=g) * 3 + 1, value_target=torch.randn(n, 1, generator=g),
                       batch_size=[n])
    with torch.no_grad():  # the collecting policy: the current one, moved a little
        logits = module.network.policy(batch["observation"]) + 0.3 * torch.randn(n, 2, generator=g)
        batch["action_log_prob"] = torch.distributions.Categorical(logits=logits).log_prob(batch["action"])
    return batch


OPTIONS = list(itertools.product(["dvrp", "cartpole"], [0.1, 0.2], [0.0, 0.01], [True, False], ["l2", "smooth_l1"]))


@pytest.mark.parametrize("case, clip, entropy_coeff, normalize, critic_loss", OPTIONS)
def test_ppo_loss_equals_clip_ppo_loss(case, clip, entropy_coeff, normalize, critic_loss):
    torch.manual_seed(0)
    masked = case == "dvrp"
    network = (DVRPActorCritic(embed_dim=16, num_heads=2, num_layers=1, hidden_dim=32) if masked
               else MLPActorCritic(2, (16, 16)))
    module = PPOModule(network, gamma=0.97, gae_lambda=0.9, clip_epsilon=clip, entropy_coeff=entropy_coeff,
                       critic_coeff=0.7, normalize_advantage=normalize, loss_critic_type=critic_loss,
                       action_mask_key="action_mask" if masked else None)
    batch = (_dvrp_batch if masked else _cartpole_batch)(module)
    reference, encoder = _reference(network, masked, clip_epsilon=clip, entropy_coeff=entropy_coeff,
                                    critic_coeff=0.7, normalize_advantage=normalize, loss_critic_type=critic_loss)
    params = list(network.parameters())

    ours = module.loss(batch.clone())
    total = ours["loss_objective"] + ours["loss_critic"] + ours["loss_entropy"]
    grads = torch.autograd.grad(total, params, allow_unused=True)
    theirs = reference(encoder(batch.clone()))
    expected = torch.autograd.grad(theirs["loss_objective"] + theirs["loss_critic"] + theirs["loss_entropy"], params,
                                   allow_unused=True)
    for key in ("loss_objective", "loss_critic", "loss_entropy", "entropy", "kl_approx", "clip_fraction",
                "explained_variance"):
        assert torch.allclose(ours[key], theirs[key], rtol=1e-5, atol=1e-6), key
    for got, want in zip(grads, expected, strict=True):
        assert (got is None) == (want is None)
        if got is not None:
            assert torch.allclose(got, want, rtol=1e-4, atol=1e-6)
    assert ours["clip_fraction"] > 0 or case == "dvrp"  # the cartpole batch's ratios reach the clip
