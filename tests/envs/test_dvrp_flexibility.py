"""The DVRP env with the learned flexibility model: observation columns, recorded outcomes, refusal masks, and the
model handed to the envs by the run (the config holds only its recipe)."""

from __future__ import annotations

import pickle
from functools import partial

import pytest
import torch
from torchrl.envs import check_env_specs
from torchrl.envs.utils import step_mdp

from envs import make_env
from envs.dvrp import DVRPConfig
from envs.dvrp.env import STATIC_FEATURES
from modules.flexibility import FlexibilityModel
from tests.envs.test_dvrp_env import MaskedRandom

K, D = 4, 3


def _config(threshold: float | None = None) -> DVRPConfig:
    return DVRPConfig(num_customers=10, flexibility=partial(FlexibilityModel, embedding_dim=D),
                      refusal_mask_threshold=threshold)


def _env(cfg: DVRPConfig, num_envs: int, seed: int, models: dict | None = None):
    return make_env(cfg, num_envs, seed, models=cfg.new_models() if models is None else models)


def test_specs_and_model_columns():
    env = _env(_config(), num_envs=8, seed=3)
    check_env_specs(env)
    td = env.reset()
    base, model = env.base_env, env.base_env.flexibility
    assert td["customers"].shape == (8, 10, STATIC_FEATURES + 2 * K + D + 3)
    assert td["request"].shape == (8, 11 + 2 * K + D)
    assert td["offers"].shape == (8, 2 * 3 + 2, 9)
    attributes = base.instances["attributes"][:, 0]
    with torch.no_grad():
        log_p, embedding = model(attributes)
    request = td["request"]
    torch.testing.assert_close(request[:, STATIC_FEATURES:STATIC_FEATURES + K], attributes)
    torch.testing.assert_close(request[:, STATIC_FEATURES + K:STATIC_FEATURES + 2 * K], log_p.exp())
    torch.testing.assert_close(request[:, STATIC_FEATURES + 2 * K:STATIC_FEATURES + 2 * K + D], embedding)
    # offers' last column: P(k >= |s|) from the same p(k | x); 1 for the preferred window, 0 for reject
    p = log_p.exp()
    tail = torch.flip(torch.cumsum(torch.flip(p, [-1]), -1), [-1])  # P(k >= j)
    expected = tail[:, torch.tensor([3, 2, 1, 0, 1, 2, 3])]
    torch.testing.assert_close(td["offers"][:, :-1, -1], expected)
    assert torch.equal(td["offers"][:, -1, -1], torch.zeros(8))


def test_outcomes_record_every_decision():
    cfg = _config()
    env = _env(cfg, num_envs=32, seed=5)
    base, s = env.base_env, cfg.max_shift
    policy = MaskedRandom(seed=1, p_reject=0.2)
    td = env.reset()
    assert not td["outcome", "offered"].any()
    counts = torch.zeros(3)
    for _ in range(cfg.num_customers):
        kind = base.request_type().clone()
        attributes = base.instances["attributes"][torch.arange(32), base.t].clone()
        td = env.step(policy(td))
        out = td["next", "outcome"]
        offered = td["action"] < cfg.num_actions - 1
        shift = (td["action"] - s).abs()
        assert torch.equal(out["offered"], offered)
        assert torch.equal(out["kind"], kind)
        assert torch.equal(out["shift"][offered], shift[offered])
        assert torch.equal(out["accepted"], offered & (shift <= kind))
        torch.testing.assert_close(out["attributes"], attributes)
        counts += torch.stack([(~offered).sum(), out["accepted"].sum(), (offered & ~out["accepted"]).sum()])
        td = step_mdp(td)
    assert (counts > 10).all(), counts


@pytest.mark.parametrize("threshold", [0.2, 0.6])
def test_refusal_mask_on_top_of_feasibility(threshold):
    """With a threshold, exactly the feasible offers whose predicted refusal exceeds it are masked."""
    plain, masked = _env(_config(), 16, seed=9), _env(_config(threshold), 16, seed=9)
    td_plain, td_masked = plain.reset(), masked.reset()
    policy = MaskedRandom(seed=3, p_reject=0.0)
    changed = 0
    for _ in range(10):
        refusal = 1.0 - td_masked["offers"][:, :-1, -1]
        expected = td_plain["action_mask"].clone()
        expected[:, :-1] &= refusal <= threshold
        assert torch.equal(td_masked["action_mask"], expected)
        assert td_masked["action_mask"][:, -1].all(), "reject is never masked"
        changed += int((expected != td_plain["action_mask"]).sum())
        td_masked = policy(td_masked)
        td_plain["action"] = td_masked["action"].clone()  # same decisions: the same plans in both envs
        td_plain, td_masked = step_mdp(plain.step(td_plain)), step_mdp(masked.step(td_masked))
    assert changed > 0


def test_update_applies_from_the_next_episode():
    """An episode keeps the predictions of the model in force when it began; the next one uses the new model."""
    cfg = _config()
    models = cfg.new_models()
    env = _env(cfg, num_envs=4, seed=1, models=models)
    cols = slice(STATIC_FEATURES + K, STATIC_FEATURES + 2 * K + D)
    td = env.reset()
    before = td["request"][:, cols].clone()
    with torch.no_grad():
        for p in models["flexibility"].parameters():
            p.add_(0.5)
    td = step_mdp(env.step(env.rand_action(td)))
    assert torch.equal(td["customers"][:, 0, cols], before), "the decided customer keeps its predictions"
    after = _env(cfg, num_envs=4, seed=1, models=models).reset()["request"][:, cols]
    with torch.no_grad():
        log_p, embedding = models["flexibility"](env.base_env.instances["attributes"][:, 0])
    torch.testing.assert_close(after, torch.cat([log_p.exp(), embedding], -1))
    assert not torch.allclose(after, before)


def test_bad_threshold_or_model_is_rejected():
    with pytest.raises(ValueError, match="env.refusal_mask_threshold=1.5"):
        DVRPConfig(flexibility=FlexibilityModel, refusal_mask_threshold=1.5)
    with pytest.raises(ValueError, match="env.refusal_mask_threshold=0.5 is not allowed: needs a flexibility model"):
        DVRPConfig(refusal_mask_threshold=0.5)
    with pytest.raises(ValueError, match="env.flexibility=3 is not allowed: a class implementing"):
        DVRPConfig(flexibility=3)
    # the model is built (and its outputs checked) when the run asks for it, before any env is made
    with pytest.raises(ValueError, match=r"env.flexibility=.*log p \[n, 4\] for the 4 types"):
        DVRPConfig(flexibility=lambda k, a: FlexibilityModel(3, a)).new_models()  # 3 types for a mix of 4
    with pytest.raises(ValueError, match=r"env.flexibility='Linear' .* got outputs of shapes \[\[1, 4\]\]"):
        DVRPConfig(flexibility=torch.nn.Linear).new_models()
    with pytest.raises(ValueError, match="env.flexibility='function' is not allowed: a class of nn.Module"):
        DVRPConfig(flexibility=lambda k, a: (lambda x: (x, x))).new_models()


def test_the_config_holds_the_recipe_and_the_env_the_model():
    """No model lives in the config: the run builds one (its sizes from type_mix) and every env it is handed
    shares it; an env made without it stops with a message naming the model."""
    cfg = DVRPConfig(num_customers=10, type_mix=[0.5, 0.5], flexibility=partial(FlexibilityModel, embedding_dim=D))
    assert not any(isinstance(v, torch.nn.Module) for v in vars(cfg).values())
    assert len(pickle.dumps(cfg)) < 20_000, "a config pickles as parameters, not weights"
    models = cfg.new_models()
    assert list(models) == ["flexibility"] and models["flexibility"].num_types == 2
    a, b = _env(cfg, 2, 0, models), _env(cfg, 2, 1, models)
    assert a.base_env.flexibility is models["flexibility"] is b.base_env.flexibility
    with pytest.raises(ValueError, match=r"make needs the run's learned models \['flexibility'\].*got \[\]"):
        make_env(cfg, 2, 0)
    with pytest.raises(ValueError, match=r"needs the run's learned models \[\].*got \['flexibility'\]"):
        make_env(DVRPConfig(num_customers=10), 2, 0, models=models)


def test_resumed_episode_keeps_its_original_predictions():
    """resume_state carries the predictions of the episodes in progress: a restored env restarts them with
    those, even though the (shared) model has been updated since; the following episode uses the new model."""
    cfg = _config()
    models = cfg.new_models()
    env = _env(cfg, num_envs=4, seed=2, models=models)
    env.reset()
    original = env.base_env.static.clone()
    saved = env.base_env.resume_state()
    with torch.no_grad():
        for p in models["flexibility"].parameters():
            p.mul_(-1.0)
    fresh = _env(cfg, num_envs=4, seed=2, models=models)
    fresh.base_env.load_resume_state(saved)
    fresh.reset()
    assert torch.equal(fresh.base_env.static, original)
    again = _env(cfg, num_envs=4, seed=2, models=models)
    again.reset()
    assert not torch.equal(again.base_env.static, original), "a fresh env uses the updated model"
