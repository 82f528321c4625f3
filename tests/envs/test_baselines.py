"""The scripted baselines follow their rules, step by step."""

from __future__ import annotations

import pytest
import torch

from envs.dvrp import DVRPConfig
from envs.dvrp.baselines import BASELINES, ScriptedOfferPolicy


def _steps(name: str, episodes: int = 1, b: int = 64):
    env = DVRPConfig().make(num_envs=b, seed=11)
    policy = ScriptedOfferPolicy(name, env, seed=0)
    for _ in range(episodes):
        td = env.reset()
        for _ in range(env.config.num_customers):
            kind, posterior = env.request_type().clone(), env.request_posterior().clone()
            mask, cost = td["action_mask"].clone(), td["offer_cost"].clone()
            td = policy(td)
            yield env, mask, cost, kind, posterior, td["action"].clone(), td
            td = env.step(td)["next"]


def test_rules():
    s, reject = 3, 7
    abs_shift = torch.arange(-s, s + 1).abs()
    for _env, mask, _cost, _kind, _posterior, action, _ in _steps("preferred"):
        assert torch.equal(action, torch.where(mask[:, s], s, reject))
    for _env, mask, cost, _kind, _posterior, action, _ in _steps("greedy"):
        feasible = mask[:, :-1]
        best = torch.where(feasible, cost[:, :-1], torch.inf).min(-1).values
        chosen = cost.gather(1, action.unsqueeze(-1)).squeeze(-1)
        any_ok = feasible.any(-1)
        assert torch.equal(action == reject, ~any_ok)
        assert torch.allclose(chosen[any_ok], best[any_ok])
    refused = 0
    for _env, _mask, _cost, kind, _posterior, action, _ in _steps("clairvoyant"):
        offered = action < reject
        assert bool((abs_shift[action.clamp_max(2 * s)][offered] <= kind[offered]).all()), "an offer the type refuses"
        refused += int((offered & (abs_shift[action.clamp_max(2 * s)] > kind)).sum())
    assert refused == 0
    for _env, mask, cost, _kind, _posterior, action, _ in _steps("fallback"):
        shift_ok = mask[:, :-1].clone()
        shift_ok[:, s] = False
        cheapest_shift = torch.where(shift_ok, cost[:, :-1], torch.inf).argmin(-1)
        expected = torch.where(mask[:, s], s, torch.where(shift_ok.any(-1), cheapest_shift, reject))
        same_cost = cost.gather(1, action.unsqueeze(-1)) == cost.gather(1, expected.unsqueeze(-1))
        assert bool(((action == expected) | (same_cost.squeeze(-1) & (action != s))).all())


def test_expected_value_rules_never_reject_a_feasible_offer():
    for name in ("prior", "informed", "random"):
        for _env, mask, _cost, _kind, _posterior, action, _ in _steps(name):
            assert torch.equal(action == 7, ~mask[:, :-1].any(-1)), name
            assert bool(mask.gather(1, action.unsqueeze(-1)).all()), name


def test_informed_uses_the_posterior_and_beats_prior():
    returns = {}
    for name in ("prior", "informed"):
        env = DVRPConfig().make(num_envs=256, seed=5)
        policy = ScriptedOfferPolicy(name, env)
        td, total = env.reset(), torch.zeros(256)
        for _ in range(30):
            td = env.step(policy(td))
            total += td["next", "reward"].squeeze(-1)
            td = td["next"]
        returns[name] = total
    diff = returns["informed"] - returns["prior"]
    assert diff.mean() > 2 * diff.std() / 16, (diff.mean(), diff.std() / 16)


def test_unknown_baseline_is_rejected():
    env = DVRPConfig().make(num_envs=2, seed=0)
    with pytest.raises(ValueError, match="allowed: " + ", ".join(BASELINES)):
        ScriptedOfferPolicy("smart", env)
