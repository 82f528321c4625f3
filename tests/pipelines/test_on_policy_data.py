"""The on-policy data path: PPO's minibatches cover each collected batch once per epoch and carry only what the loss
reads, and a minibatch of the whole batch is the batch itself (no shuffle, no copy), which gives the same update as a
shuffled copy."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict

from envs.gym import GymConfig
from modules.actor_critic import MLPActorCritic
from modules.ppo import PPOModule
from pipelines.data import CollectorOptions, OnPolicyDataModule


def _batch(n: int) -> TensorDict:
    """A processed batch ``[n]`` whose observation's first feature is the frame's index, with entries the loss does
    not read (the next observation, the reward, the env's info)."""
    g = torch.Generator().manual_seed(0)
    observation = torch.randn(n, 4, generator=g)
    observation[:, 0] = torch.arange(n)
    return TensorDict(observation=observation, action=torch.randint(2, (n,), generator=g),
                      action_log_prob=-torch.rand(n, generator=g) - 0.1, advantage=torch.randn(n, 1, generator=g),
                      value_target=torch.randn(n, 1, generator=g), info=TensorDict(served=torch.ones(n, 1)),
                      next=TensorDict(observation=torch.randn(n, 4, generator=g), reward=torch.ones(n, 1)),
                      batch_size=[n])


def _minibatches(mini_batch_size: int, n: int = 64, ppo_epochs: int = 3):
    data = OnPolicyDataModule(GymConfig(env_id="CartPole-v1"), CollectorOptions(num_envs=1, frames_per_batch=n))
    module = PPOModule(MLPActorCritic(num_actions=2), action_mask_key=None, ppo_epochs=ppo_epochs,
                       mini_batch_size=mini_batch_size)
    data.trainer = SimpleNamespace(lightning_module=module)
    batch = _batch(n)
    data.batches = lambda: iter([batch])  # one collected batch, already processed
    (minibatches,) = list(data.training_batches())
    return batch, list(minibatches), len(minibatches)


def test_each_epoch_reads_every_frame_once_in_a_new_order():
    batch, parts, length = _minibatches(mini_batch_size=16)
    assert length == len(parts) == 3 * 4
    epochs = [torch.cat([p["observation"][:, 0] for p in parts[e * 4:(e + 1) * 4]]) for e in range(3)]
    for order in epochs:
        assert torch.equal(order.sort().values, torch.arange(64.0))
    assert not torch.equal(epochs[0], epochs[1]), "the epochs were not reshuffled"


@pytest.mark.parametrize("mini_batch_size", [16, 64])
def test_minibatches_carry_only_what_the_loss_reads(mini_batch_size):
    batch, parts, _ = _minibatches(mini_batch_size=mini_batch_size)
    read = {"observation", "action", "action_log_prob", "advantage", "value_target"}
    for part in parts:
        assert set(part.keys(include_nested=True, leaves_only=True)) == read
        assert torch.equal(part["value_target"], batch["value_target"][part["observation"][:, 0].long()])


def test_a_minibatch_of_the_whole_batch_is_the_batch_each_epoch():
    batch, parts, length = _minibatches(mini_batch_size=64)
    assert length == len(parts) == 3
    assert all(p is parts[0] for p in parts)
    assert parts[0]["observation"].data_ptr() == batch["observation"].data_ptr(), "the whole batch was copied"


@pytest.mark.parametrize("normalize_advantage", [True, False])
def test_the_unshuffled_whole_batch_gives_the_shuffled_update(normalize_advantage):
    """PPO's loss is a mean over the minibatch (and the advantages are standardised over it): the whole batch in
    its collected order gives the losses and gradients of a shuffled copy, up to the order of float sums."""
    module = PPOModule(MLPActorCritic(num_actions=2), normalize_advantage=normalize_advantage, entropy_coeff=0.01,
                        action_mask_key=None)
    batch = _batch(256)
    module.materialize(batch[:1].select("observation"))
    results = []
    for part in (batch, batch[torch.randperm(256)]):
        module.zero_grad()
        out = module.loss(part)
        (out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]).backward()
        results.append(({k: v.detach() for k, v in out.items()}, [p.grad.clone() for p in module.parameters()]))
    (plain, plain_grads), (shuffled, shuffled_grads) = results
    for key in plain:
        torch.testing.assert_close(plain[key], shuffled[key], rtol=1e-5, atol=1e-6)
    for a, b in zip(plain_grads, shuffled_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
