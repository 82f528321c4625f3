"""The DVRP env through ``make_env``: specs, shapes, masks, seeding, final plans, reports, types, generator."""

from __future__ import annotations

import pathlib

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModuleBase
from torchrl.envs import check_env_specs
from torchrl.envs.utils import step_mdp

from envs import make_env
from envs.dvrp import DVRPConfig
from envs.dvrp.baselines import ScriptedOfferPolicy
from envs.dvrp.generator import InstanceGenerator, draw_types_and_attributes, type_posterior
from envs.episodes import play_episodes
from envs.rng import episode_keys
from tests.route_check import check_exported_plan

REPORT = ("plan_cost_km", "served", "failure_rate", "refused")
CONFIGS = pathlib.Path(__file__).parents[2] / "configs"


class MaskedRandom(TensorDictModuleBase):
    """Uniform over the allowed offers, reject with probability ``p_reject`` (own generator: reproducible)."""

    in_keys = ["action_mask"]
    out_keys = ["action"]

    def __init__(self, seed: int = 0, p_reject: float = 0.1) -> None:
        super().__init__()
        self.gen = torch.Generator().manual_seed(seed)
        self.p_reject = p_reject

    def forward(self, td: TensorDict) -> TensorDict:
        mask = td["action_mask"]
        offers = mask[..., :-1].float()
        weights = torch.cat([offers, torch.full_like(offers[..., :1], 1e-6)], -1)
        pick = torch.multinomial(weights, 1, generator=self.gen).squeeze(-1)
        reject = torch.rand(pick.shape, generator=self.gen) < self.p_reject
        td["action"] = torch.where(reject, mask.shape[-1] - 1, pick)
        return td


def play_episode(env, policy, before_step=None):
    """Reset, then step ``N`` times manually (``env.step``, no auto-reset); returns the stacked transitions
    ``[B, N]`` and the last ``next`` tensordict (at ``done``, plans still in place for export)."""
    n = env.base_env.config.num_customers
    td = env.reset()
    steps = []
    for t in range(n):
        td = policy(td)
        if before_step is not None:
            before_step(t, td)
        td = env.step(td)
        steps.append(td.clone())
        last = td["next"]
        td = step_mdp(td)
    return torch.stack(steps, 1), last


# ----------------------------------------------------------------------------- specs and shapes
@pytest.mark.parametrize("batch", [1, 8])
def test_check_env_specs(batch):
    env = make_env(DVRPConfig(), num_envs=batch, seed=0)
    check_env_specs(env)
    assert env.batch_size == torch.Size([batch])


def test_check_env_specs_float64_and_bad_batch():
    check_env_specs(make_env(DVRPConfig(num_customers=10, dtype="float64"), num_envs=2, seed=0))
    with pytest.raises(ValueError):
        make_env(DVRPConfig(), num_envs=0, seed=0)


def test_check_env_specs_files(solomon_dir):
    cfg = DVRPConfig(instances=str(solomon_dir / "solomon_txt" / "R2*.txt"), capacity=None)
    check_env_specs(make_env(cfg, num_envs=4, seed=0))


SHAPE_CASES = {
    "default": DVRPConfig,
    "small": lambda: DVRPConfig(num_customers=12, num_vehicles=3, max_shift=2, type_mix=[0.5, 0.3, 0.2]),
}


@pytest.mark.parametrize("case", sorted(SHAPE_CASES))
def test_random_rollout_shapes_and_mask(case):
    cfg = SHAPE_CASES[case]()
    b, n, m, k, a = 16, cfg.num_customers, cfg.num_vehicles, cfg.num_types, cfg.num_actions
    env = make_env(cfg, num_envs=b, seed=3)
    torch.manual_seed(0)
    steps = 2 * n + 3
    r = env.rollout(steps, break_when_any_done=False)  # rand_action: random actions respect the mask
    nxt = r["next"]
    assert r.batch_size == torch.Size([b, steps])
    assert nxt["customers"].shape == (b, steps, n, 10 + k)
    assert nxt["request"].shape == (b, steps, 11 + k)
    assert nxt["offers"].shape == (b, steps, a, 8)
    assert nxt["vehicles"].shape == (b, steps, m, 4)
    assert nxt["depot"].shape == (b, steps, 2)
    assert nxt["action_mask"].shape == (b, steps, a) and nxt["action_mask"].dtype == torch.bool
    assert nxt["reward"].shape == (b, steps, 1)
    for key in REPORT:
        assert nxt["info", key].shape == (b, steps, 1)
    # episodes end exactly after N steps, in every row at once
    done = nxt["done"].squeeze(-1)
    expected = torch.zeros(steps, dtype=torch.bool)
    expected[n - 1], expected[2 * n - 1] = True, True
    assert torch.equal(done, expected.expand(b, -1))
    assert torch.equal(nxt["terminated"], nxt["done"])
    # sampled actions respect the mask; reject is always allowed
    mask, action = r["action_mask"], r["action"]
    assert bool(mask.gather(-1, action.unsqueeze(-1)).all())
    assert bool(mask[..., -1].all()) and bool(nxt["action_mask"][..., -1].all())
    assert int((action < a - 1).sum()) > steps * b // 2, "the random policy should mostly offer windows"
    # the offers table agrees with the mask and costs; an empty clipped window is masked
    offers, obs_mask = r["offers"], r["action_mask"]
    assert torch.equal(offers[..., 7] > 0.5, obs_mask)
    assert torch.equal(offers[..., -1, :], torch.tensor([0, 0, 1, 0, 0, 0, 0, 1.0]).expand(b, steps, -1))
    assert bool((r["offer_cost"][~obs_mask] == 0).all()) and bool((r["offer_cost"] >= -1e-4).all())
    start, end = offers[..., :-1, 3], offers[..., :-1, 4]
    assert bool(((start >= 0) & (end <= 1) & (end >= start)).all())
    empty = end <= start
    assert int(empty.sum()) > 0, "the rollout should contain windows emptied by clipping"
    assert not bool(obs_mask[..., :-1][empty].any()), "an empty window was offered"
    # the future is not observed: the current request and later ones are zeros but for 'unseen'
    t = torch.arange(steps) % n
    later = torch.arange(n).view(1, 1, n) >= t.view(1, steps, 1)
    cust = r["customers"]
    assert bool((cust[..., : 7 + k][later.expand(b, -1, -1)] == 0).all())
    assert bool((cust[..., 7 + k][later.expand(b, -1, -1)] == 1).all())
    # once decided, the request becomes its customer's row of the table (the window may change to the
    # agreed one); the request also carries the progress t / N
    decided = nxt["customers"].gather(2, t.view(1, steps, 1, 1).expand(b, steps, 1, cust.shape[-1])).squeeze(2)
    same = [0, 1, 2, *range(5, 7 + k)]  # x, y, demand, service, slot, attributes
    assert torch.allclose(r["request"][..., same], decided[..., same])
    assert torch.allclose(r["request"][..., 7 + k], (t / n).expand(b, -1))


def test_masked_action_raises():
    env = make_env(DVRPConfig(), num_envs=16, seed=0)
    td = env.reset()
    masked = (~td["action_mask"]).nonzero()
    assert len(masked) > 0
    row, bad = masked[0].tolist()
    action = torch.full((16,), env.base_env.num_actions - 1)
    action[row] = bad
    td["action"] = action
    with pytest.raises(ValueError, match="action_mask"):
        env.step(td)


# ----------------------------------------------------------------------------- seeding
def _rollout(cfg, batch, seed, name, steps):
    env = make_env(cfg, num_envs=batch, seed=seed)
    return env.rollout(steps, ScriptedOfferPolicy(name, env.base_env), break_when_any_done=False)


def test_same_seed_same_rollout_different_seed_differs():
    cfg = DVRPConfig(num_customers=15)
    a = _rollout(cfg, 4, 5, "greedy", 30)
    b = _rollout(cfg, 4, 5, "greedy", 30)
    c = _rollout(cfg, 4, 6, "greedy", 30)
    assert (a == b).all(), "same seed, same deterministic policy: rollouts must be identical"
    assert not torch.equal(a["next", "reward"], c["next", "reward"])
    assert not torch.equal(a["customers"], c["customers"])
    # consecutive episodes of one row are different instances
    assert not torch.equal(a["next", "reward"][:, :15], a["next", "reward"][:, 15:])


@pytest.mark.parametrize("name", ["fallback", "informed"])
def test_batch_invariance(name):
    """Row b of a batch of 64 seeded s plays the episodes of a single env seeded s + b."""
    cfg, seed, n = DVRPConfig(num_customers=20), 11, 20
    big = _rollout(cfg, 64, seed, name, 2 * n)
    for row in (0, 17, 63):
        one = _rollout(cfg, 1, seed + row, name, 2 * n)[0]
        mine = big[row]
        assert torch.equal(mine["action"], one["action"]), f"row {row}: actions differ"
        assert torch.equal(mine["customers"], one["customers"]), f"row {row}: observations differ"
        for key in [("next", "reward"), ("next", "episode_reward")] + [("next", "info", k) for k in REPORT]:
            torch.testing.assert_close(mine[key], one[key], rtol=1e-5, atol=1e-4, msg=f"row {row}: {key}")


def test_set_seed_restarts_the_seeded_sequence(tiny_config):
    cfg = tiny_config
    fresh = make_env(cfg, num_envs=3, seed=7)
    used = make_env(cfg, num_envs=3, seed=0)
    used.rollout(15, ScriptedOfferPolicy("greedy", used.base_env), break_when_any_done=False)
    used.set_seed(7)
    a = fresh.rollout(20, ScriptedOfferPolicy("greedy", fresh.base_env), break_when_any_done=False)
    b = used.rollout(20, ScriptedOfferPolicy("greedy", used.base_env), break_when_any_done=False)
    assert torch.equal(a["customers"], b["customers"]) and torch.equal(a["next", "reward"], b["next", "reward"])


def test_partial_reset_keeps_other_rows_and_draws_next_episode():
    cfg, n = DVRPConfig(num_customers=6), 6
    env = make_env(cfg, num_envs=4, seed=0)
    base = env.base_env
    policy = ScriptedOfferPolicy("greedy", base)
    td = env.reset()
    for _ in range(3):
        td = step_mdp(env.step(policy(td)))
    before = td.clone()
    cost_before = base.oracle.cost().clone()
    td["_reset"] = torch.tensor([True, False, True, False]).unsqueeze(-1)
    after = env.reset(td)
    assert base.t.tolist() == [0, 3, 0, 3]
    for row in (1, 3):  # untouched: same observation, same plan
        assert (after[row].exclude("episode_reward") == before[row].exclude("episode_reward")).all()
        assert float(base.oracle.cost()[row]) == float(cost_before[row])
    for row in (0, 2):  # restarted with the row's episode 1, on an empty plan
        single = make_env(cfg, num_envs=1, seed=row)
        single.reset()
        assert torch.equal(single.reset()["customers"][0], after["customers"][row])
        assert float(base.oracle.cost()[row]) == 0.0
        assert float(after["info", "served"][row]) == 0.0
    # rows 1 and 3 finish their episode three steps later, rows 0 and 2 three steps after that
    for step in range(n):
        out = env.step(policy(after))
        assert out["next", "done"].squeeze(-1).tolist() == [step == 5, step == 2, step == 5, step == 2]
        after = step_mdp(out)
        if step == 2:
            after["_reset"] = torch.tensor([False, True, False, True]).unsqueeze(-1)
            after = env.reset(after)


def test_batch_invariance_files(solomon_dir):
    cfg = DVRPConfig(instances=str(solomon_dir / "solomon_txt" / "C1*.txt"), num_customers=10, num_vehicles=3)
    big = _rollout(cfg, 8, 3, "fallback", 20)
    one = _rollout(cfg, 1, 3 + 5, "fallback", 20)[0]
    assert torch.equal(big[5]["customers"], one["customers"]) and torch.equal(big[5]["action"], one["action"])
    assert not torch.equal(big[4]["customers"], one["customers"])


def test_resume_state_resumes_episode_in_progress():
    cfg = DVRPConfig(num_customers=12)
    env = make_env(cfg, num_envs=4, seed=3)
    policy = ScriptedOfferPolicy("greedy", env.base_env)
    play_episode(env, policy)  # episode 0
    saved = {}
    steps, _ = play_episode(env, policy, before_step=lambda t, td: saved.update(env.base_env.resume_state())
                            if t == 5 else None)  # episode 1; state saved mid-episode
    fresh = make_env(cfg, num_envs=4, seed=123)
    fresh.base_env.load_resume_state(saved)
    replay, _ = play_episode(fresh, ScriptedOfferPolicy("greedy", fresh.base_env))
    assert torch.equal(replay["customers"], steps["customers"])
    assert torch.equal(replay["action"], steps["action"])
    assert torch.equal(replay["next", "reward"], steps["next", "reward"])
    # a state from another batch size is refused
    with pytest.raises(ValueError):
        make_env(cfg, num_envs=2, seed=0).base_env.load_resume_state(saved)


# ----------------------------------------------------------------------------- final plans and reports
PLAN_CASES = {
    # default problem with three policies
    "default-greedy": (lambda: DVRPConfig(), "greedy"),
    "default-random": (lambda: DVRPConfig(), "random-masked"),
    "default-clairvoyant": (lambda: DVRPConfig(), "clairvoyant"),
    # short day, narrow windows, capacity binding, more vehicles
    "tight-random": (lambda: DVRPConfig(num_vehicles=3, horizon=300.0, window_width=30.0, capacity=120.0,
                                        type_mix=[0.1, 0.2, 0.3, 0.4]), "random-masked"),
    # the plan improved by local search after bookings and re-optimised at the cut-off (the driven plan is paid)
    "improved-clairvoyant": (lambda: DVRPConfig(improve_every=1, cutoff_sweeps=2, cutoff_ruins=4, cutoff_reversal=6),
                             "clairvoyant"),
    "improved-tight-random": (lambda: DVRPConfig(num_vehicles=3, horizon=300.0, window_width=30.0, capacity=120.0,
                                                 improve_every=2, improve_passes=2, improve_reversal=5,
                                                 cutoff_sweeps=1),
                              "random-masked"),
}


def _policy(name, env, seed=0):
    return MaskedRandom(seed) if name == "random-masked" else ScriptedOfferPolicy(name, env.base_env)


def check_final_plans_and_reports(env, steps, last):
    cfg = env.base_env.config
    n, r = cfg.num_customers, cfg.served_reward
    assert bool(last["done"].all())
    info = {k: last["info", k].squeeze(-1) for k in REPORT}
    episodes = env.base_env.export_episodes()
    assert len(episodes) == env.batch_size[0]
    inst = env.base_env.instances
    for row, ep in enumerate(episodes):
        km = check_exported_plan(ep)
        assert km == pytest.approx(float(info["plan_cost_km"][row]), rel=1e-3, abs=1e-3)
        assert len(ep["customers"]) == int(info["served"][row])
        for c in ep["customers"]:  # exported data are the instance's
            i = c["id"] - 1
            assert (c["x"], c["y"]) == pytest.approx(inst["xy"][row, i].tolist(), abs=1e-4)
            assert c["demand"] == pytest.approx(float(inst["demand"][row, i]))
    served, cost = info["served"], info["plan_cost_km"]
    torch.testing.assert_close(info["failure_rate"], (n - served) / n)
    # accepted + refused + rejected = N
    rejected = (steps["action"] == cfg.num_actions - 1).sum(-1).float()
    torch.testing.assert_close(served + info["refused"] + rejected, torch.full_like(served, float(n)))
    # rewards: R per accepted request minus the plan-cost increase, step by step and in total
    reward = steps["next", "reward"].squeeze(-1)
    served_t = steps["next", "info", "served"].squeeze(-1)
    cost_t = steps["next", "info", "plan_cost_km"].squeeze(-1)
    accepted = torch.diff(served_t, dim=1, prepend=torch.zeros_like(served_t[:, :1]))
    increase = torch.diff(cost_t, dim=1, prepend=torch.zeros_like(cost_t[:, :1]))
    assert bool(((accepted == 0) | (accepted == 1)).all())
    if not (cfg.improve_every or cfg.cutoff_sweeps):  # (an improvement may shorten the plan at any step)
        assert bool((increase[accepted == 0] == 0).all()), "a lost request changed the plan"
    torch.testing.assert_close(reward, r * accepted - increase, rtol=1e-4, atol=2e-3)
    torch.testing.assert_close(reward.sum(-1), r * served - cost, rtol=1e-4, atol=1e-2)
    torch.testing.assert_close(last["episode_reward"].squeeze(-1), r * served - cost, rtol=1e-4, atol=1e-2)
    return served


@pytest.mark.parametrize("case", sorted(PLAN_CASES))
def test_final_plans_feasible_and_reports_consistent(case):
    make_cfg, name = PLAN_CASES[case]
    env = make_env(make_cfg(), num_envs=32, seed=21)
    policy = _policy(name, env)
    for _ in range(2):
        steps, last = play_episode(env, policy)
        served = check_final_plans_and_reports(env, steps, last)
        assert float(served.mean()) > 5


@pytest.mark.parametrize("improved", [False, True])
def test_final_plans_feasible_files(solomon_dir, improved):
    """Solomon-based episodes (own windows, service times, capacities; 6 vehicles as for R1), with the plan improved
    by local search or not."""
    cfg = DVRPConfig(instances=str(solomon_dir / "solomon_txt" / "R1*.txt"), capacity=None, num_vehicles=6,
                     improve_every=int(improved), cutoff_sweeps=2 * int(improved))
    env = make_env(cfg, num_envs=16, seed=4)
    steps, last = play_episode(env, MaskedRandom(1))
    served = check_final_plans_and_reports(env, steps, last)
    assert float(served.mean()) > 5
    assert set(env.base_env.instances["horizon"].tolist()) == {230.0}  # R1 depots close at 230


def test_the_improved_plan_pays_more_on_the_same_days():
    """The clairvoyant rule on the same 32 days: paid the improved (driven) plan, its return is higher by far (the
    router's share of the gap); the return is the served reward less the driven plan's km either way."""
    returns = {}
    for improved in (False, True):
        cfg = DVRPConfig(improve_every=int(improved), cutoff_sweeps=4 * int(improved))
        env = make_env(cfg, num_envs=32, seed=10_000_000)
        _, last = play_episode(env, ScriptedOfferPolicy("clairvoyant", env.base_env))
        returns[improved] = last["episode_reward"].squeeze(-1)
    gain = returns[True] - returns[False]
    assert float(gain.mean()) > 80 and float(gain.mean()) > 3 * float(gain.std()) / 32 ** 0.5


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("dvrp*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_dvrp_config_pays_the_improved_plan(path):
    """The issue's payment is the default of every DVRP config (the class's own defaults keep the insertion payment
    for reproducing old figures): each config improves after every booking and re-optimises at the cut-off."""
    import yaml

    name = path.stem
    env = yaml.safe_load(path.read_text())["data"]["init_args"]["env"]["init_args"]
    cfg = DVRPConfig(**{k: v for k, v in env.items() if k != "flexibility"})
    assert cfg.improve_every >= 1 and cfg.improve_passes >= 1 and cfg.cutoff_sweeps >= 1, (name, env)


# ----------------------------------------------------------------------------- customer types
def test_acceptance_rule_follows_hidden_type():
    cfg = DVRPConfig()
    env = make_env(cfg, num_envs=64, seed=8)
    base, s = env.base_env, cfg.max_shift
    policy = MaskedRandom(seed=2, p_reject=0.05)
    outcomes = {"accepted": 0, "refused": 0}
    kinds = []

    def check(td, nxt, kind, windows):
        action = td["action"]
        offered = action < cfg.num_actions - 1
        shift = (action - s).abs()
        d_served = nxt["info", "served"].squeeze(-1) - td["info", "served"].squeeze(-1)
        d_refused = nxt["info", "refused"].squeeze(-1) - td["info", "refused"].squeeze(-1)
        expect_accept = offered & (shift <= kind)
        assert torch.equal(d_served == 1, expect_accept)
        assert torch.equal(d_refused == 1, offered & ~expect_accept)
        # the decided customer's table row: status served / lost, the agreed window once served
        t = nxt["request"][:, -4] * cfg.num_customers - 1  # progress t / N after the step
        row = nxt["customers"][torch.arange(len(t)), t.round().long()]
        status = row[:, -3:].argmax(-1)  # unseen / served / lost
        assert torch.equal(status, torch.where(expect_accept, 1, 2))
        agreed = windows[torch.arange(len(t)), action.clamp_max(2 * s)] / base.instances["horizon"][:, None]
        preferred = td["request"][:, 3:5]
        expected = torch.where(expect_accept[:, None], agreed.float(), preferred)
        torch.testing.assert_close(row[:, 3:5], expected)
        outcomes["accepted"] += int(expect_accept.sum())
        outcomes["refused"] += int((offered & ~expect_accept).sum())

    for _ in range(2):
        td = env.reset()
        for _ in range(cfg.num_customers):
            kind = base.request_type().clone()
            kinds.append(kind)
            windows = base.windows.clone()  # the offered windows of this request
            td = policy(td)
            out = env.step(td)
            check(td, out["next"], kind, windows)
            td = step_mdp(out)
    assert outcomes["accepted"] > 500 and outcomes["refused"] > 200, outcomes
    freq = torch.bincount(torch.cat(kinds), minlength=cfg.num_types).float()
    freq = freq / freq.sum()
    torch.testing.assert_close(freq, torch.tensor(cfg.type_mix), atol=0.04, rtol=0)


def test_posterior_is_exact_bayes_and_accuracy():
    mix = torch.tensor([0.3, 0.3, 0.2, 0.2], dtype=torch.float64)
    sep, count = 1.5, 20000
    keys = episode_keys(torch.arange(count), torch.zeros(count, dtype=torch.long))
    kind, x = draw_types_and_attributes(keys, 1, mix, sep, torch.float64)
    kind, x = kind[:, 0], x[:, 0]
    freq = torch.bincount(kind, minlength=4).double() / count
    torch.testing.assert_close(freq, mix, atol=0.015, rtol=0)
    # attributes: N(sep * e_k, I)
    centred = x - sep * torch.nn.functional.one_hot(kind, 4).double()
    assert centred.mean(0).abs().max() < 0.05 and (centred.std(0) - 1).abs().max() < 0.05
    post = type_posterior(x, mix, sep)
    # independent Bayes rule: p(k | x) proportional to mix_k * exp(-||x - sep e_k||^2 / 2)
    means = sep * torch.eye(4, dtype=torch.float64)
    log_joint = mix.log() - 0.5 * ((x[:, None, :] - means[None]) ** 2).sum(-1)
    torch.testing.assert_close(post, torch.softmax(log_joint, -1))
    accuracy = float((post.argmax(-1) == kind).double().mean())
    assert 0.68 <= accuracy <= 0.74, accuracy
    # the env's own posterior of the current request is the same rule
    env = DVRPConfig().make(num_envs=8, seed=0)
    env.reset()
    attrs = env.customers[:, 0, 7:].double()
    torch.testing.assert_close(env.request_posterior().double(), type_posterior(attrs, mix, sep),
                               rtol=1e-5, atol=1e-6)


def _mean_nn_distance(xy: torch.Tensor) -> float:
    d = torch.cdist(xy, xy)
    d = d + torch.eye(xy.shape[1], dtype=xy.dtype) * 1e9
    return float(d.min(-1).values.mean())


def test_generator_layouts_and_windows():
    keys = episode_keys(torch.arange(32), torch.zeros(32, dtype=torch.long))
    mix = torch.tensor([0.3, 0.3, 0.2, 0.2])
    nn = {}
    for layout in ("R", "C", "RC"):
        gen = InstanceGenerator(100, layout, 1000.0, 120.0, 10.0, 250.0, 30, mix, 1.5)
        inst = gen.sample(keys, torch.float64)
        xy = inst["xy"]
        assert xy.shape == (32, 100, 2)
        assert bool(((xy >= 0) & (xy <= 100)).all()), layout
        nn[layout] = _mean_nn_distance(xy)
        # depot at the centre; demand integer in 1..30; integer ready time; each preferred window can be
        # served on its own by a fresh vehicle (reach it by e, serve, back by H)
        assert torch.equal(inst["depot"], torch.full((32, 2), 50.0, dtype=torch.float64))
        dem, ready, due = inst["demand"], inst["ready"], inst["due"]
        assert bool(((dem >= 1) & (dem <= 30) & (dem == dem.round())).all())
        assert bool((ready == ready.round()).all()) and torch.equal(due - ready, torch.full_like(ready, 120.0))
        torch.testing.assert_close(inst["slot"], due - ready)
        d0 = torch.linalg.vector_norm(xy - 50.0, dim=-1)
        assert bool((ready >= d0).all()) and bool((due + 10.0 + d0 <= 1000.0).all())
        assert ready.min() < 100 and due.max() > 900  # e spans the day
        assert bool((inst["horizon"] == 1000.0).all()) and bool((inst["capacity"] == 250.0).all())
    assert nn["C"] < 0.6 * nn["R"], nn
    assert nn["C"] < nn["RC"] < nn["R"], nn
    # a different key gives a different instance, the same key the same one
    gen = InstanceGenerator(10, "R", 1000.0, 120.0, 10.0, 250.0, 30, mix, 1.5)
    a, b = gen.sample(keys[:2]), gen.sample(keys[:2])
    assert torch.equal(a["xy"], b["xy"]) and not torch.equal(a["xy"][0], a["xy"][1])


# ----------------------------------------------------------------------------- days of mixed sizes
def test_days_of_mixed_sizes_end_after_their_own_requests_and_use_their_own_fleet():
    """``num_customers: [4, 9]`` with ``num_vehicles: [1, 3]``: each episode draws one pair; a 4-customer day ends
    after 4 requests, routes on one vehicle, and its observation says so (progress, fleet column); its exported
    day holds its 4 requests; every plan is feasible; the draws depend on the row seed, not the batch."""
    cfg = DVRPConfig(num_customers=[4, 9], num_vehicles=[1, 3], capacity=60)
    assert cfg.sizes == [(4, 1), (9, 3)] and (cfg.num_customers, cfg.num_vehicles) == (9, 3)
    env = make_env(cfg, num_envs=24, seed=2)
    base = env.base_env
    seen, calls, drawn = torch.zeros(24, dtype=torch.bool), [0], {}

    def export(step, finished) -> None:  # every step; at done before the rows restart
        calls[0] += 1
        if calls[0] == 1:  # the first step of the first episodes: their observations
            size, fleet = base.size, base.fleet
            assert set(size.tolist()) == {4, 9} and torch.equal(fleet, torch.where(size == 4, 1, 3))
            assert torch.equal(step["vehicles"][..., 3], (torch.arange(3) < fleet.unsqueeze(-1)).float())
            torch.testing.assert_close(step["request"][:, -1], size / 100.0)  # requests to come, (N - t) / 100
            drawn.update(size=size.clone(), fleet=fleet.clone())
        rows = (finished & ~seen).nonzero().squeeze(-1).tolist()
        assert all(int(drawn["size"][r]) == calls[0] for r in rows)  # a row ends after its own N requests
        for row, plan, day in zip(rows, base.export_episodes(rows), base.export_days(rows), strict=True):
            check_exported_plan(plan)
            assert plan["num_vehicles"] == day["num_vehicles"] == int(drawn["fleet"][row])
            assert len(day["requests"]) == int(drawn["size"][row])
        seen[rows] = True

    result = play_episodes(env, MaskedRandom(3), 1, on_step=export)
    assert seen.all() and calls[0] == 9
    assert (result["served"] <= drawn["size"]).all() and (result["served"] > 4).any()
    # the same rows in a smaller batch draw the same sizes
    small, big = make_env(cfg, num_envs=5, seed=2), make_env(cfg, num_envs=24, seed=2)
    small.reset(), big.reset()
    assert torch.equal(small.base_env.size, big.base_env.size[:5])


def test_mixed_sizes_are_checked():
    with pytest.raises(ValueError, match="num_vehicles"):
        DVRPConfig(num_customers=[4, 9], num_vehicles=[1, 2, 3])
    with pytest.raises(ValueError, match="num_vehicles"):  # a run's list of sizes overridden by one number alone
        DVRPConfig(num_customers=100, num_vehicles=[2, 4, 7])
    with pytest.raises(ValueError, match="num_customers"):
        DVRPConfig(num_customers=[4, 0], num_vehicles=2)
    assert DVRPConfig(num_customers=[4, 9], num_vehicles=2).sizes == [(4, 2), (9, 2)]


def test_the_improvement_keys_are_checked():
    for key, value in (("improve_every", -1), ("improve_passes", -2), ("cutoff_sweeps", 1.5), ("neighbourhood", 0),
                       ("cutoff_ruins", -1)):
        with pytest.raises(ValueError, match=f"env.{key}="):
            DVRPConfig(**{key: value})
    with pytest.raises(ValueError, match="env.cutoff_ruins=3"):  # (it sweeps each recreated plan)
        DVRPConfig(cutoff_ruins=3)
    for key, moves in (("cutoff_reversal", "cutoff_sweeps"), ("improve_reversal", "improve_every")):
        for value in (1, -2, 2.5):  # (a reversal needs two customers)
            with pytest.raises(ValueError, match=f"env.{key}={value}"):
                DVRPConfig(**{moves: 1, key: value})
        with pytest.raises(ValueError, match=f"env.{key}=4.*with {moves} >= 1"):  # (its moves are those passes')
            DVRPConfig(**{key: 4})
    with pytest.raises(ValueError, match="under oracle: neural"):  # (the local search improves the insertion plan)
        DVRPConfig(oracle="neural", improve_every=1)
