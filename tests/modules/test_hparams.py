"""Every learner checks its hyper-parameters at construction: an out-of-range value (including nan and infinite
ones, and a mistyped exponent such as ``lr=1e300`` that used to fail inside Adam) stops with the key, the value
and the allowed range, before anything is built."""

from __future__ import annotations

import math

import pytest

from modules.actor_critic import MLPActorCritic
from modules.dqn import DQNModule
from modules.ppo import PPOModule
from modules.q_networks import QNetwork
from modules.reinforce import REINFORCEModule
from modules.routing import RoutingPolicy
from modules.sac import SACModule, SACNetworks

BUILD = {
    "dqn": lambda **kw: DQNModule(QNetwork(2), **kw),
    "ppo": lambda **kw: PPOModule(MLPActorCritic(2), action_mask_key=None, **kw),
    "sac": lambda **kw: SACModule(SACNetworks(), **kw),
    "reinforce": lambda **kw: REINFORCEModule(RoutingPolicy(embed_dim=16, num_heads=2, num_layers=1), **kw),
}

BAD = [
    ("dqn", "lr", 1e300), ("dqn", "lr", 0.0), ("dqn", "lr", math.nan), ("dqn", "gamma", 1.5),
    ("dqn", "max_grad_norm", math.inf), ("dqn", "epsilon", -0.1), ("dqn", "n_steps", 0),
    ("ppo", "lr", 1e300), ("ppo", "reward_scale", 1e30), ("ppo", "reward_scale", 0.0),
    ("ppo", "reward_scale", math.nan),
    ("ppo", "gae_lambda", 2.0), ("ppo", "clip_epsilon", 0.0), ("ppo", "entropy_coeff", -1.0),
    ("ppo", "critic_coeff", math.inf), ("ppo", "max_grad_norm", 0.0),
    ("sac", "actor_lr", 1e300), ("sac", "critic_lr", -1.0), ("sac", "alpha_lr", math.nan), ("sac", "gamma", 1.5),
    ("sac", "alpha_init", 0.0), ("sac", "max_grad_norm", math.nan),
    ("reinforce", "lr", 1e300), ("reinforce", "baseline_alpha", 1.0), ("reinforce", "eval_batch_size", 0),
]


@pytest.mark.parametrize("algorithm,key,value", BAD)
def test_out_of_range_hyperparameter_names_its_key(algorithm, key, value):
    with pytest.raises(ValueError, match=rf"^model\.{key}=.* is not allowed: "):
        BUILD[algorithm](**{key: value})


@pytest.mark.parametrize("algorithm", BUILD)
def test_defaults_and_the_range_edges_are_accepted(algorithm):
    BUILD[algorithm]()
    edges = {"dqn": {"lr": 1.0, "gamma": 1.0, "epsilon": 0.0}, "ppo": {"reward_scale": 1e6, "entropy_coeff": 0.0},
             "sac": {"actor_lr": 1.0, "gamma": 0.0}, "reinforce": {"lr": 1.0}}[algorithm]
    BUILD[algorithm](**edges)


@pytest.mark.parametrize("kwargs,message", [
    ({"lr": 1e300}, r"FlexibilityUpdate\.lr=1e\+300 is not allowed: a learning rate in \(0, 1\]"),
    ({"lr": math.nan}, r"FlexibilityUpdate\.lr=nan is not allowed"),
    ({"epochs": 0}, r"FlexibilityUpdate\.epochs=0 is not allowed: an integer >= 1"),
])
def test_flexibility_update_settings_are_range_checked(kwargs, message):
    from callbacks.flexibility import FlexibilityUpdate

    with pytest.raises(ValueError, match=message):
        FlexibilityUpdate(**kwargs)
