"""DQN pieces: n-step returns on the buffer, the loss's n-step target, the epsilon schedules."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Categorical, LazyTensorStorage, TensorDictReplayBuffer

from callbacks.epsilon import EpsilonDecay
from modules.dqn import DQNModule
from modules.q_networks import QNetwork


def _batch(b: int, t: int, t0: int = 0, done_at: tuple[int, int] | None = None) -> TensorDict:
    """Observations and rewards equal to the time index; one termination at (row, step) if given."""
    r = torch.arange(t0, t0 + t, dtype=torch.float32).expand(b, t).clone()
    done = torch.zeros(b, t, 1, dtype=torch.bool)
    if done_at is not None:
        done[done_at] = True
    nxt = TensorDict(observation=(r + 1).unsqueeze(-1), reward=r.unsqueeze(-1), done=done, terminated=done.clone(),
                     truncated=torch.zeros_like(done), batch_size=[b, t])
    return TensorDict(observation=r.unsqueeze(-1), action=torch.zeros(b, t, dtype=torch.long), next=nxt,
                      batch_size=[b, t])


def test_n_step_returns_match_a_hand_computation():
    """n = 2, gamma = 0.5: R_t = r_t + 0.5 r_{t+1} bootstrapping from s_{t+2}; a termination cuts it."""
    module = DQNModule(QNetwork(2), gamma=0.5, n_steps=2)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(100, ndim=2), transform=module.replay_transform())
    buffer.extend(_batch(2, 5, done_at=(0, 2)))
    buffer.extend(_batch(2, 5, t0=5))  # the transform holds the last 2 steps back until the next extend
    assert len(buffer) == 16  # 8 steps per row are complete; 2 are held back
    data = buffer.storage[:8]  # stored time-major, [T, B]
    reward = data["next", "reward"][..., 0]
    steps = data["steps_to_next_obs"].reshape(reward.shape)
    nxt = data["next", "observation"][..., 0]
    for b in range(2):
        for t in range(8):
            if b == 0 and t in (1, 2):
                expected_r, expected_k = (1 + 0.5 * 2, 2) if t == 1 else (2.0, 1)  # termination at t = 2
                expected_next = 3.0
            else:
                expected_r, expected_k, expected_next = t + 0.5 * (t + 1), 2, t + 2.0
            assert reward[t, b] == pytest.approx(expected_r)
            assert int(steps[t, b]) == expected_k
            assert nxt[t, b] == pytest.approx(expected_next)


@pytest.mark.parametrize("terminated", [False, True])
def test_loss_bootstraps_with_gamma_to_the_power_of_the_steps(terminated):
    """Target = R + gamma^k * max_a Q_target(s', a) * (1 - terminated); a constant Q-network makes it exact."""
    module = DQNModule(QNetwork(2, hidden_dims=()), gamma=0.9, double_dqn=False, loss_function="l2")
    module.build(Categorical(2), TensorDict(observation=torch.zeros(1, 3), batch_size=[1]))
    with torch.no_grad():
        for p in module.network.parameters():
            p.zero_()
        module.network.advantage.bias.copy_(torch.tensor([2.0, 5.0]))
    module.target.copy_source()
    td = TensorDict(observation=torch.randn(4, 3), action=torch.tensor([0, 1, 0, 1]),
                    steps_to_next_obs=torch.tensor([[1], [2], [3], [2]]),
                    next=TensorDict(observation=torch.randn(4, 3), reward=torch.ones(4, 1),
                                    done=torch.full((4, 1), terminated), terminated=torch.full((4, 1), terminated),
                                    batch_size=[4]), batch_size=[4])
    loss, _ = module.loss(td)
    q = torch.tensor([2.0, 5.0, 2.0, 5.0])
    k = torch.tensor([1.0, 2.0, 3.0, 2.0])
    target = 1.0 + (0.0 if terminated else 1.0) * 0.9**k * 5.0
    assert loss.item() == pytest.approx(((q - target) ** 2).mean().item(), rel=1e-5)


def test_epsilon_schedules():
    linear = EpsilonDecay("linear", eps_init=1.0, eps_end=0.1, annealing_frames=1000)
    assert [linear.value(f, 0) for f in (0, 500, 1000, 5000)] == pytest.approx([1.0, 0.55, 0.1, 0.1])
    exponential = EpsilonDecay("exponential", eps_init=1.0, eps_end=0.05, decay_rate=0.998)
    assert exponential.value(0, 100) == pytest.approx(0.998**100)
    assert exponential.value(0, 10_000) == 0.05
    assert exponential.value(0, int(math.log(0.05) / math.log(0.998)) - 5) > 0.05
    with pytest.raises(ValueError, match="schedule"):
        EpsilonDecay("cosine")


def test_hard_target_update_copies_after_every_interval_th_step():
    """target_update_interval = 3: the target equals the online network right after steps 3, 6, 9 only."""
    module = DQNModule(QNetwork(2, hidden_dims=()), target_update="hard", target_update_interval=3)
    module.build(Categorical(2), TensorDict(observation=torch.zeros(1, 3), batch_size=[1]))
    copied = []
    for step in range(1, 10):
        with torch.no_grad():
            module.network.advantage.bias.add_(1.0)  # an "optimiser step"
        module.target.step()
        pairs = zip(module.network.parameters(), module.target.network.parameters(), strict=True)
        if all(torch.equal(online, target) for online, target in pairs):
            copied.append(step)
    assert copied == [3, 6, 9]
