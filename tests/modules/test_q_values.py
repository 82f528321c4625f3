"""The lean Q-learning pieces against TorchRL's own: ``dqn_loss`` against ``DQNLoss`` (loss, priorities,
gradients) for every option ``DQNModule`` exposes, the epsilon-greedy policy, the target network updates."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Categorical
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import QValueActor
from torchrl.objectives import DQNLoss, SoftUpdate, ValueEstimators

from modules.q_networks import MultiAgentQNetwork, QNetwork
from modules.q_values import EpsilonGreedyQPolicy, dqn_loss
from modules.target import TargetNetwork

pytestmark = pytest.mark.filterwarnings("ignore:No target network updater")

N, F, A = 32, 3, 4


def _batch(masked: bool, n_step: bool, weighted: bool, agents: int | None = None) -> TensorDict:
    g = torch.Generator().manual_seed(7)
    action = torch.randint(A, (N,), generator=g)
    terminated = torch.rand(N, 1, generator=g) < 0.3
    nxt = TensorDict(observation=torch.randn(N, F, generator=g), reward=torch.randn(N, 1, generator=g),
                     done=terminated | (torch.rand(N, 1, generator=g) < 0.2), terminated=terminated, batch_size=[N])
    batch = TensorDict(observation=torch.randn(N, F, generator=g), action=action, next=nxt, batch_size=[N])
    if masked:  # random masks with the taken action allowed, at least one next action allowed
        mask = torch.rand(N, A, generator=g) < 0.5
        mask[torch.arange(N), action] = True
        next_mask = torch.rand(N, A, generator=g) < 0.5
        next_mask[:, 0] = True
        batch.set("action_mask", mask)
        nxt.set("action_mask", next_mask)
    if n_step:
        batch.set("steps_to_next_obs", torch.randint(1, 4, (N, 1), generator=g))
    if weighted:
        batch.set("priority_weight", torch.rand(N, generator=g) + 0.1)
    if agents is not None:
        ids = torch.eye(agents)[torch.randint(agents, (N,), generator=g)]
        batch.set("agent_id", ids)
        nxt.set("agent_id", ids.clone())
    return batch


OPTIONS = list(itertools.product([False, True], [False, True], [False, True], [False, True], [False, True],
                                 ["smooth_l1", "l2"]))


@pytest.mark.parametrize("double, dueling, masked, n_step, weighted, loss_function", OPTIONS)
def test_dqn_loss_equals_torchrl_dqn_loss(double, dueling, masked, n_step, weighted, loss_function):
    """Same loss, same |TD error| and same gradients as DQNLoss + TD(0) on one batch, with a target network that
    differs from the online one."""
    torch.manual_seed(0)
    network = QNetwork(A, (16, 16), dueling=dueling)
    batch = _batch(masked, n_step, weighted)
    network(batch["observation"])
    mask_key = "action_mask" if masked else None
    actor = QValueActor(network, in_keys=["observation"], spec=Categorical(A), action_mask_key=mask_key)
    reference = DQNLoss(actor, action_space=Categorical(A), double_dqn=double, delay_value=True,
                        loss_function=loss_function)
    reference.make_value_estimator(ValueEstimators.TD0, gamma=0.9)
    target = TargetNetwork(network, "hard", 1)  # equal to DQNLoss's target parameters (both copies of now)
    with torch.no_grad():  # then the online network moves away from both targets
        for p in network.parameters():
            p.add_(torch.randn_like(p) * 0.3)

    loss, td_error = dqn_loss(network, target, batch.clone(), ["observation"], 0.9, double, loss_function, mask_key)
    loss.backward()
    grads = [p.grad.clone() for p in network.parameters()]
    network.zero_grad()
    expected_batch = batch.clone()
    expected = reference(expected_batch)["loss"]
    expected.backward()
    assert torch.allclose(loss, expected, rtol=1e-5, atol=1e-6)
    assert torch.allclose(td_error, expected_batch["td_error"].squeeze(-1).sqrt(), rtol=1e-4, atol=1e-5)
    for got, want in zip(grads, [p.grad for p in network.parameters()], strict=True):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-6)
    assert any(g.abs().sum() > 0 for g in grads)


def test_dqn_loss_equals_torchrl_with_two_inputs():
    """A multi-agent network reading (observation, agent_id): the same loss as DQNLoss."""
    torch.manual_seed(0)
    network = MultiAgentQNetwork(3, A, (16,), parameter_sharing=True)
    batch = _batch(False, False, False, agents=3)
    keys = ["observation", "agent_id"]
    network(batch["observation"], batch["agent_id"])
    actor = QValueActor(network, in_keys=keys, spec=Categorical(A))
    reference = DQNLoss(actor, action_space=Categorical(A), double_dqn=True, delay_value=True, loss_function="l2")
    reference.make_value_estimator(ValueEstimators.TD0, gamma=0.99)
    target = TargetNetwork(network, "hard", 1)
    with torch.no_grad():
        for p in network.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    loss, _ = dqn_loss(network, target, batch.clone(), keys, 0.99, True, "l2")
    assert torch.allclose(loss, reference(batch.clone())["loss"], rtol=1e-5)


def test_epsilon_greedy_policy():
    torch.manual_seed(0)
    network = torch.nn.Linear(F, A)
    obs = torch.randn(4096, F)
    mask = torch.rand(4096, A) < 0.5
    mask[:, 2] = True
    policy = EpsilonGreedyQPolicy(network, masked=True, epsilon=0.0)
    values = network(obs).masked_fill(~mask, float("-inf"))
    assert torch.equal(policy(obs, mask), values.argmax(-1))  # greedy among the allowed actions
    policy.eps.fill_(1.0)
    actions = policy(obs, mask)
    assert mask.gather(-1, actions.unsqueeze(-1)).all()  # random actions stay allowed
    assert (actions != values.argmax(-1)).float().mean() > 0.3
    counts = torch.bincount(actions[mask.all(-1)], minlength=A).float()  # fully allowed rows: uniform
    assert (counts / counts.sum() - 1 / A).abs().max() < 0.06
    with set_exploration_type(ExplorationType.DETERMINISTIC):  # evaluation: greedy whatever eps is
        assert torch.equal(policy(obs, mask), values.argmax(-1))
    half = EpsilonGreedyQPolicy(network, epsilon=0.5)(obs.reshape(64, 64, F))  # [B, R] entries explore apart
    assert half.shape == (64, 64)
    assert 0.3 < (half != network(obs).argmax(-1).reshape(64, 64)).float().mean() < 0.5


def test_soft_target_update_matches_torchrl_soft_update():
    torch.manual_seed(0)
    network = QNetwork(A, (8,))
    network(torch.randn(2, F))
    actor = QValueActor(network, in_keys=["observation"], spec=Categorical(A))
    reference = DQNLoss(actor, action_space=Categorical(A), delay_value=True)
    updater = SoftUpdate(reference, tau=0.1)
    ours = TargetNetwork(network, "soft", tau=0.1)
    for _ in range(3):
        with torch.no_grad():
            for p in network.parameters():
                p.add_(torch.randn_like(p))
        updater.step()
        ours.step()
    for want, got in zip(reference.target_value_network_params.values(True, True), ours.parameters(), strict=True):
        assert torch.allclose(got, want, atol=1e-6)
    assert not torch.allclose(next(ours.parameters()), next(network.parameters()))


def test_target_network_is_not_trained_and_not_shared():
    network = QNetwork(A, (8,))
    network(torch.randn(2, F))
    target = TargetNetwork(network, "hard", 2)
    assert all(not p.requires_grad for p in target.parameters())
    assert not set(map(id, target.parameters())) & set(map(id, network.parameters()))
    assert len(list(target.parameters())) == len(list(network.parameters()))
    copy.deepcopy(target)  # snapshots of a module holding one (self-play) must work
    with pytest.raises(ValueError, match="hard, soft"):
        TargetNetwork(network, "polyak")
