"""The lean SAC losses against TorchRL's ``SACLoss`` and ``DiscreteSACLoss``: the same losses, priorities and
gradients (actor, critics, temperature) on the same batch, parameters and random draws."""

from __future__ import annotations

import itertools

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch.distributions import Categorical as TorchCategorical
from torchrl.data import Bounded, Categorical
from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import DiscreteSACLoss, SACLoss, ValueEstimators

from modules.sac import SACNetworks
from modules.sac_loss import Critics, continuous_sac_loss, discrete_sac_loss, tanh_normal_rsample
from modules.target import TargetNetwork

pytestmark = pytest.mark.filterwarnings("ignore:No target network updater")

N, F = 64, 3


def _batch(action: torch.Tensor, weighted: bool) -> TensorDict:
    g = torch.Generator().manual_seed(3)
    terminated = torch.rand(N, 1, generator=g) < 0.3
    nxt = TensorDict(observation=torch.randn(N, F, generator=g), reward=torch.randn(N, 1, generator=g),
                     done=terminated.clone(), terminated=terminated, batch_size=[N])
    batch = TensorDict(observation=torch.randn(N, F, generator=g), action=action, next=nxt, batch_size=[N])
    if weighted:
        batch.set("priority_weight", torch.rand(N, generator=g) + 0.1)
    return batch


def _copy_into(critics: Critics, stacked: TensorDict) -> None:
    """Our critic copies <- TorchRL's stacked critic parameters ``[C, ...]`` (keys under the wrapper's ``module``)."""
    with torch.no_grad():
        for i, net in enumerate(critics.nets):
            flat = stacked[i].flatten_keys(".")
            net.load_state_dict({k.removeprefix("module."): v.data for k, v in flat.items()})


def _compare(ours: dict, theirs: TensorDict, batch: TensorDict, nets: SACNetworks, critics: Critics, log_alpha,
             reference) -> None:
    """Same loss values and priorities; the same gradients for the actor, each critic copy and the temperature."""
    for key in ("loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"):
        assert torch.allclose(ours[key], theirs[key], rtol=1e-5, atol=1e-6), key
    assert torch.allclose(ours["td_error"], batch["td_error"].reshape(N), rtol=1e-5, atol=1e-6)
    params = [*nets.actor.parameters(), *critics.parameters(), log_alpha]
    grads = torch.autograd.grad(ours["loss_actor"] + ours["loss_qvalue"] + ours["loss_alpha"], params)
    actor = list(reference.actor_network_params.values(True, True))
    stacked = list(reference.qvalue_network_params.values(True, True))  # [C, ...] each
    expected = torch.autograd.grad(theirs["loss_actor"] + theirs["loss_qvalue"] + theirs["loss_alpha"],
                                   [*actor, *stacked, reference.log_alpha])
    per_critic = [g[i] for i in range(len(critics.nets)) for g in expected[len(actor):-1]]
    for got, want in zip(grads, [*expected[:len(actor)], *per_critic, expected[-1]], strict=True):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-6)
    assert all(g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("weighted, terminal_only", list(itertools.product([False, True], [False, True])))
def test_continuous_sac_loss_equals_torchrl(weighted, terminal_only):
    torch.manual_seed(0)
    spec = Bounded(-2.0, 2.0, shape=(2,))
    nets = SACNetworks((16,), (16,))
    nets.build(2, discrete=False)
    actor = ProbabilisticActor(TensorDictModule(nets.actor, ["observation"], ["loc", "scale"]),
                               in_keys=["loc", "scale"], spec=spec, distribution_class=TanhNormal,
                               distribution_kwargs={"low": spec.space.low, "high": spec.space.high})
    critic = ValueOperator(nets.critic, in_keys=["observation", "action"])
    batch = _batch(spec.rand((N,)), weighted)
    if terminal_only:
        batch["next", "terminated"].fill_(True)
    with torch.no_grad():
        critic(actor(batch.clone()))
    reference = SACLoss(actor, critic, num_qvalue_nets=2, action_spec=spec, alpha_init=0.7, deactivate_vmap=True)
    reference.make_value_estimator(ValueEstimators.TD0, gamma=0.95)
    critics = Critics(nets.critic, 2)
    _copy_into(critics, reference.qvalue_network_params)
    target = TargetNetwork(critics, "soft")
    with torch.no_grad():  # targets and online critics differ: move the online ones (both sides)
        for p in reference.qvalue_network_params.values(True, True):
            p.add_(torch.randn_like(p) * 0.1)
    _copy_into(critics, reference.qvalue_network_params)
    log_alpha = torch.nn.Parameter(reference.log_alpha.detach().clone())

    torch.manual_seed(1)
    ours = continuous_sac_loss(nets.actor, critics, target, batch.clone(), log_alpha, reference.target_entropy, 0.95,
                               spec.space.low, spec.space.high)
    torch.manual_seed(1)
    expected_batch = batch.clone()
    theirs = reference(expected_batch)
    _compare(ours, theirs, expected_batch, nets, critics, log_alpha, reference)


@pytest.mark.parametrize("weighted", [False, True])
def test_discrete_sac_loss_equals_torchrl(weighted):
    torch.manual_seed(0)
    spec = Categorical(4)
    nets = SACNetworks((16,), (16,))
    nets.build(4, discrete=True)
    actor = ProbabilisticActor(TensorDictModule(nets.actor, ["observation"], ["logits"]), in_keys=["logits"],
                               spec=spec, distribution_class=TorchCategorical)
    critic = TensorDictModule(nets.critic, ["observation"], ["action_value"])
    batch = _batch(torch.randint(4, (N,)), weighted)
    with torch.no_grad():
        actor(batch.clone())
        critic(batch.clone())
    reference = DiscreteSACLoss(actor, critic, action_space=spec, num_actions=4, num_qvalue_nets=2, alpha_init=0.7)
    reference.make_value_estimator(ValueEstimators.TD0, gamma=0.95)
    critics = Critics(nets.critic, 2)
    _copy_into(critics, reference.qvalue_network_params)
    target = TargetNetwork(critics, "soft")
    with torch.no_grad():
        for p in reference.qvalue_network_params.values(True, True):
            p.add_(torch.randn_like(p) * 0.1)
    _copy_into(critics, reference.qvalue_network_params)
    log_alpha = torch.nn.Parameter(reference.log_alpha.detach().clone())

    ours = discrete_sac_loss(nets.actor, critics, target, batch.clone(), log_alpha, reference.target_entropy, 0.95)
    expected_batch = batch.clone()
    theirs = reference(expected_batch)
    _compare(ours, theirs, expected_batch, nets, critics, log_alpha, reference)


def test_critic_copies_are_resampled_and_independent():
    nets = SACNetworks((8,), (8,))
    nets.build(1, discrete=False)
    nets.critic(torch.zeros(2, F), torch.zeros(2, 1))
    critics = Critics(nets.critic, 2)
    a, b = (list(net.parameters()) for net in critics.nets)
    assert not torch.equal(a[0], b[0]) and not torch.equal(a[0], next(nets.critic.parameters()))
    assert critics(torch.zeros(5, F), torch.zeros(5, 1)).shape == (2, 5, 1)


def test_tanh_normal_draw_equals_torchrl_even_where_tanh_saturates():
    """The lean tanh-Gaussian draw gives TorchRL's ``TanhNormal.rsample_and_log_prob`` action, log-probability and
    gradients on the same random state, with asymmetric bounds and locations far into tanh's flat tails."""
    loc = torch.tensor([[0.3, -0.2], [12.0, -15.0], [-3.0, 4.0]]).repeat(8, 1).requires_grad_()
    raw_scale = torch.tensor([[0.5, 1.5], [0.1, 0.2], [2.0, 0.05]]).repeat(8, 1).requires_grad_()
    low, high = torch.tensor([-2.0, -1.0]), torch.tensor([2.0, 3.0])
    results = []
    for draw in ("ours", "torchrl"):
        torch.manual_seed(4)
        scale = raw_scale * 1.0
        if draw == "ours":
            action, log_prob = tanh_normal_rsample(loc, scale, low, high)
        else:
            action, log_prob = TanhNormal(loc, scale, low=low, high=high).rsample_and_log_prob()
        grads = torch.autograd.grad((action * torch.arange(1.0, 3.0)).sum() + log_prob.sum(), [loc, raw_scale])
        results.append((action.detach(), log_prob.detach(), grads))
    (a, lp, g), (a_ref, lp_ref, g_ref) = results
    assert torch.equal(a, a_ref)
    assert (a_ref.abs() > 1.99).any(), "no draw reached tanh's flat tails"
    torch.testing.assert_close(lp, lp_ref)
    for ours, theirs in zip(g, g_ref, strict=True):
        torch.testing.assert_close(ours, theirs)
