"""Gymnasium envs through TorchRL: each backend gives a [num_envs] batch that resets finished rows, seeded
reproducibly, rows different from each other."""

from __future__ import annotations

import pytest
import torch

from envs import make_env
from envs.gym import GymConfig


def rollout(backend: str, seed: int, steps: int = 300, num_envs: int = 4) -> torch.Tensor:
    env = make_env(GymConfig("CartPole-v1", backend=backend), num_envs, seed)
    td = env.reset()
    generator = torch.Generator().manual_seed(0)
    seen, dones = [], 0
    for _ in range(steps):
        td["action"] = torch.randint(0, 2, (num_envs,), generator=generator)
        out, td = env.step_and_maybe_reset(td)
        seen.append(out["next", "observation"].clone())
        dones += int(out["next", "done"].sum())
    env.close()
    assert dones > num_envs  # random play ends CartPole episodes often: rows were reset
    return torch.stack(seen, 1)  # [num_envs, steps, 4]


@pytest.mark.parametrize("backend", ["vector", "serial"])
def test_backend_is_reproducible_and_rows_differ(backend):
    first, again, other = rollout(backend, 0), rollout(backend, 0), rollout(backend, 1)
    assert first.shape == (4, 300, 4)
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert not torch.equal(first[0], first[1])  # each row its own seed
    assert (first[..., 0].abs() <= 2.4 + 0.2).all()  # a reset row starts again near the centre


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match=r"env\.backend='threads'.*vector, serial, parallel"):
        GymConfig("CartPole-v1", backend="threads")


def test_vector_backend_truncates_continuous_control_episodes():
    env = make_env(GymConfig("Pendulum-v1"), 4, 0)  # the default backend: vector
    assert env.batch_size == (4,) and env.action_spec.shape == (4, 1)
    td, ended = env.reset(), []
    for step in range(450):
        td["action"] = env.action_spec.rand()
        out, td = env.step_and_maybe_reset(td)
        ended += [step + 1] * int(out["next", "truncated"].sum())
    assert ended == [200] * 4 + [400] * 4  # Pendulum's 200-step limit, every row, then again after the reset
