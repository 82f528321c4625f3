"""CartPoleNoVel-v1: CartPole-v1 with the velocities hidden, by id, on every backend."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from envs import make_env
from envs.gym import GymConfig


def test_the_positions_are_cartpoles_and_the_velocities_hidden():
    full, masked = gym.make("CartPole-v1"), gym.make("CartPoleNoVel-v1")
    seen, hidden = full.reset(seed=3)[0], masked.reset(seed=3)[0]
    for action in [0, 1, 1, 0, 1, 1, 1, 0]:
        np.testing.assert_array_equal(hidden[[0, 2]], seen[[0, 2]])
        assert (hidden[[1, 3]] == 0).all() and (seen[[1, 3]] != 0).any()
        seen, hidden = full.step(action)[0], masked.step(action)[0]
    assert masked.spec.reward_threshold == 475.0 and masked.observation_space == full.observation_space


@pytest.mark.parametrize("backend", ["vector", "serial"])
def test_every_backend_builds_it_by_id(backend):
    env = make_env(GymConfig("CartPoleNoVel-v1", backend=backend), 2, 0)
    td = env.rollout(5, break_when_any_done=False)
    observation = td["next", "observation"]
    assert observation.shape == (2, 5, 4)
    assert torch.equal(observation[..., [1, 3]], torch.zeros(2, 5, 2)) and observation[..., [0, 2]].abs().sum() > 0
