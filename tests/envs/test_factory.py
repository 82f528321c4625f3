"""``envs.make_env`` on the native batched envs: they keep their episodes' returns and draw masked random actions
themselves, with the values TorchRL's ``RewardSum`` and ``ActionMask`` give, so they come without a
``TransformedEnv`` layer."""

from __future__ import annotations

import pytest
import torch
from torchrl.envs import RewardSum, TransformedEnv, check_env_specs

from envs import make_env
from envs.dvrp import DVRPConfig
from envs.hockey import HockeyConfig
from envs.vacuum import VacuumConfig

CONFIGS = {
    "vacuum": VacuumConfig(grid_size=5, num_robots=4, energy=[1000, 100, 100, 100], chargers=[[2, 2]], max_steps=30),
    "dvrp": DVRPConfig(num_customers=10, num_vehicles=2, max_shift=3),
    "hockey": HockeyConfig(max_steps=40, discrete_actions=True),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_native_envs_come_unwrapped_with_the_returns_of_reward_sum(name):
    """Over episodes that end and restart (partial resets), ``episode_reward`` before and after every step equals
    what ``RewardSum`` writes over the same env (both sides play the same random actions, so the returns compare;
    that the draws are TorchRL's masked ones is the next test)."""
    config = CONFIGS[name]
    env = make_env(config, 8, 0)
    assert not isinstance(env, TransformedEnv)
    check_env_specs(make_env(config, 8, 0))
    reference = TransformedEnv(config.make(num_envs=8, seed=0), RewardSum(in_keys=["reward"], out_keys=["sum"]))
    torch.manual_seed(1)
    ours = env.rollout(100, break_when_any_done=False)
    torch.manual_seed(1)
    theirs = reference.rollout(100, break_when_any_done=False)
    assert ours["next", "done"].sum() >= 8, "too few episodes ended to check the resets"
    assert torch.equal(ours["action"], theirs["action"])
    assert torch.equal(ours["next", "episode_reward"], theirs["next", "sum"])
    assert torch.equal(ours["episode_reward"], theirs["sum"])
    assert ours["next", "episode_reward"].abs().sum() > 0


@pytest.mark.parametrize("name", ["vacuum", "dvrp"])
def test_random_actions_are_the_draws_of_the_masked_action_spec(name):
    """``rand_action`` draws uniformly over the allowed actions of the input's ``action_mask``: the draw TorchRL's
    ``Categorical.rand`` makes with that mask (what ``ActionMask`` kept the spec's mask current for)."""
    env = make_env(CONFIGS[name], 8, 0)
    td = env.reset()
    for _ in range(3):  # masks that differ between rows
        td = env.step_and_maybe_reset(env.rand_action(td))[1]
    mask = td["action_mask"]
    assert not mask.all(), "every action allowed: the mask is not exercised"
    spec = env.action_spec.clone()
    spec.update_mask(mask)
    torch.manual_seed(3)
    expected = spec.rand()
    torch.manual_seed(3)
    action = env.rand_action(td)["action"]
    assert torch.equal(action, expected)
    assert mask.gather(-1, action.unsqueeze(-1)).all()
