"""The lean TD3 losses against TorchRL's ``TD3Loss``: the same critic and actor losses, priorities and gradients on
the same batch, parameters and smoothing-noise draws."""

from __future__ import annotations

import itertools

import pytest
import torch
from tensordict.nn import TensorDictModule
from torchrl.data import Bounded
from torchrl.modules import ValueOperator
from torchrl.objectives import TD3Loss, ValueEstimators

from modules.sac_loss import Critics
from modules.target import TargetNetwork
from modules.td3 import ScaledActor, TD3Networks
from modules.td3_loss import td3_actor_loss, td3_critic_loss
from tests.modules.test_sac_loss import N, _batch, _copy_into

pytestmark = pytest.mark.filterwarnings("ignore:No target network updater")


@pytest.mark.parametrize("weighted, loss_function", list(itertools.product([False, True], ["l2", "smooth_l1"])))
def test_td3_losses_equal_torchrl(weighted, loss_function):
    torch.manual_seed(0)
    spec = Bounded(-2.0, 2.0, shape=(2,))
    half = (spec.space.high - spec.space.low) / 2
    nets = TD3Networks((16,), (16,))
    nets.build(2)
    actor = ScaledActor(nets.actor, spec.space.low, spec.space.high)
    batch = _batch(spec.rand((N,)), weighted)
    with torch.no_grad():
        nets.critic(batch["observation"], actor(batch["observation"]))
    reference = TD3Loss(TensorDictModule(actor, ["observation"], ["action"]),
                        ValueOperator(nets.critic, in_keys=["observation", "action"]), action_spec=spec,
                        num_qvalue_nets=2, policy_noise=0.2 * 2.0, noise_clip=0.5 * 2.0, loss_function=loss_function,
                        deactivate_vmap=True)
    reference.make_value_estimator(ValueEstimators.TD0, gamma=0.95)
    critics = Critics(nets.critic, 2)
    _copy_into(critics, reference.qvalue_network_params)
    target_critics, target_actor = TargetNetwork(critics, "soft"), TargetNetwork(actor, "soft")
    with torch.no_grad():  # online and target networks differ: move the online ones (both sides)
        for p in reference.qvalue_network_params.values(True, True):
            p.add_(torch.randn_like(p) * 0.1)
        for p in actor.parameters():  # (TorchRL's online actor parameters are these)
            p.add_(torch.randn_like(p) * 0.1)
    _copy_into(critics, reference.qvalue_network_params)
    assert not torch.allclose(target_actor(batch["observation"]), actor(batch["observation"]))

    torch.manual_seed(1)
    critic_out = td3_critic_loss(target_actor, critics, target_critics, batch.clone(), 0.95, spec.space.low,
                                 spec.space.high, 0.2 * half, 0.5 * half, loss_function=loss_function)
    loss_actor = td3_actor_loss(actor, critics, batch.clone())
    torch.manual_seed(1)
    expected_batch = batch.clone()
    theirs = reference(expected_batch)
    assert torch.allclose(critic_out["loss_qvalue"], theirs["loss_qvalue"], rtol=1e-5, atol=1e-6)
    assert torch.allclose(loss_actor, theirs["loss_actor"], rtol=1e-5, atol=1e-6)
    assert torch.allclose(critic_out["td_error"] ** 2, expected_batch["td_error"].reshape(N), rtol=1e-4, atol=1e-6)
    params = [*nets.actor.parameters(), *critics.parameters()]
    grads = torch.autograd.grad(critic_out["loss_qvalue"] + loss_actor, params)
    own = [p for p in reference.actor_network_params.values(True, True) if p.requires_grad]  # (not the buffers)
    stacked = list(reference.qvalue_network_params.values(True, True))  # [C, ...] each
    expected = torch.autograd.grad(theirs["loss_actor"] + theirs["loss_qvalue"], [*own, *stacked])
    per_critic = [g[i] for i in range(len(critics.nets)) for g in expected[len(own):]]
    for got, want in zip(grads, [*expected[:len(own)], *per_critic], strict=True):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-6)
    assert all(g.abs().sum() > 0 for g in grads)


def test_smoothing_noise_is_clipped_and_the_target_action_bounded():
    """A huge smoothing noise is clipped at noise_clip and the noisy target action at the bounds: the target then
    sees only actions on the bounds' edge, whatever the draw."""
    torch.manual_seed(0)
    spec = Bounded(-1.0, 3.0, shape=(1,))
    nets = TD3Networks((8,), (8,))
    nets.build(1)
    actor = ScaledActor(nets.actor, spec.space.low, spec.space.high)
    batch = _batch(spec.rand((N,)), False)
    nets.critic(batch["observation"], actor(batch["observation"]))
    seen = []

    class Recording(torch.nn.Module):
        def forward(self, observation, action):
            seen.append(action)
            return torch.zeros(2, *action.shape[:-1], 1)

    critics = Critics(nets.critic, 2)
    td3_critic_loss(TargetNetwork(actor, "soft"), critics, Recording(), batch, 0.9, spec.space.low, spec.space.high,
                    torch.tensor([1e6]), torch.tensor([10.0]))
    assert ((seen[0] == -1.0) | (seen[0] == 3.0)).all() and (seen[0] == 3.0).any() and (seen[0] == -1.0).any()
