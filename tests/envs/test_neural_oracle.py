"""The neural cost oracle inside the DVRP env: feasible exported plans with exact costs whatever the
network's weights, the CostOracle contracts, one batched solve per quote, and the checkpoint loader."""

from __future__ import annotations

import math

import pytest
import torch

from envs.dvrp import DVRPConfig, DVRPEnv
from envs.dvrp.baselines import ScriptedOfferPolicy
from envs.dvrp.neural_oracle import NeuralOracle
from modules.routing import RoutingPolicy
from pipelines.env_models import env_models, load_exported_model
from tests.route_check import check_exported_plan

N, B = 10, 12


class CountingPolicy(torch.nn.Module):
    """Wraps a policy and records the batch size of every ``solve`` call."""

    def __init__(self, policy: RoutingPolicy) -> None:
        super().__init__()
        self.policy, self.calls = policy, []

    def solve(self, problem, margin=None, num_augment=1):
        self.calls.append(problem.shape[0])
        return self.policy.solve(problem, margin, num_augment)


def neural_env(config: DVRPConfig, num_envs: int, policy) -> DVRPEnv:
    env = DVRPEnv(config, num_envs=num_envs, seed=3)
    env.oracle = NeuralOracle(num_envs, config.num_vehicles, config.num_customers, policy, dtype=env.dtype)
    return env


def untrained(seed: int = 0) -> RoutingPolicy:
    torch.manual_seed(seed)
    return RoutingPolicy(embed_dim=32, num_heads=4, num_layers=1).eval()


def play(env: DVRPEnv, rule: str) -> tuple[torch.Tensor, torch.Tensor]:
    """One episode per row; returns the summed rewards and the number of accepted requests ``[B]``."""
    policy = ScriptedOfferPolicy(rule, env, seed=0)
    td = env.reset()
    total = torch.zeros(env.batch_size[0])
    for _ in range(env.config.num_customers):
        td = env.step(policy(td))["next"]
        total += td["reward"].squeeze(-1)
    return total, td["info", "served"].squeeze(-1)


def vehicle_stats(ep: dict) -> list[tuple[float, float, float]]:
    """(load, customers, return time) per route, recomputed from an exported plan."""
    where = {c["id"]: c for c in ep["customers"]}
    out = []
    for route in ep["routes"]:
        t, (px, py), load = 0.0, (ep["depot"]["x"], ep["depot"]["y"]), 0.0
        for cid in route:
            c = where[cid]
            t = max(t + math.hypot(c["x"] - px, c["y"] - py), c["window"][0]) + c["service_time"]
            px, py, load = c["x"], c["y"], load + c["demand"]
        back = t + math.hypot(ep["depot"]["x"] - px, ep["depot"]["y"] - py) if route else 0.0
        out.append((load, float(len(route)), back))
    return out


@pytest.mark.parametrize("rule", ["fallback", "random", "greedy"])
def test_episodes_give_feasible_plans_with_exact_costs(rule):
    config = DVRPConfig(num_customers=N, num_vehicles=2)
    env = neural_env(config, B, untrained())
    total, served = play(env, rule)
    assert served.sum() > 0
    episodes = env.export_episodes()
    for ep in episodes:
        check_exported_plan(ep)  # feasibility, each served customer once, cost_km from coordinates
    plan_cost = torch.tensor([ep["cost_km"] for ep in episodes])
    torch.testing.assert_close(config.served_reward * served - total, plan_cost, rtol=1e-4, atol=1e-2)
    load, count, back = env.oracle.vehicles()
    for r, ep in enumerate(episodes):
        expect = torch.tensor(vehicle_stats(ep))
        got = torch.stack([load[r], count[r], back[r]], -1)[: len(ep["routes"])]
        torch.testing.assert_close(got.double(), expect.double(), rtol=1e-4, atol=1e-2)


def test_float64_config_and_tight_fleet():
    config = DVRPConfig(num_customers=N, num_vehicles=1, dtype="float64")
    env = neural_env(config, 6, untrained(1))
    play(env, "fallback")
    for ep in env.export_episodes():
        check_exported_plan(ep)
        assert len([r for r in ep["routes"] if r]) <= 1


def test_quote_is_one_batched_call_and_follows_the_contract():
    config = DVRPConfig(num_customers=N, num_vehicles=2)
    counting = CountingPolicy(untrained())
    env = neural_env(config, 4, counting)
    env.reset()
    w = env.num_windows
    assert counting.calls == [4 * w], "reset quotes every window of every row in one call"
    quote = env.oracle.quote(env.t, env.customers[:, 0, :2], env.customers[:, 0, 2], env.customers[:, 0, 3],
                             env.windows)
    assert quote.delta.shape == quote.feasible.shape == (4, w)
    assert torch.isinf(quote.delta[~quote.feasible]).all() and torch.isfinite(quote.delta[quote.feasible]).all()
    infeasible = (~quote.feasible).nonzero()
    if len(infeasible):
        row, window = infeasible[0].tolist()
        accept = torch.zeros(4, dtype=torch.bool)
        accept[row] = True
        before = env.oracle.cost().clone()
        with pytest.raises(ValueError, match="no feasible plan"):
            env.oracle.commit(torch.full((4,), window), accept)
        assert torch.equal(env.oracle.cost(), before), "a failed commit leaves the plan unchanged"


def test_loader_rejects_missing_and_mismatched_checkpoints(tmp_path):
    with pytest.raises(FileNotFoundError, match="no_such.ckpt"):
        load_exported_model(str(tmp_path / "no_such.ckpt"), "routing_policy")
    with pytest.raises(FileNotFoundError, match="no_such.ckpt"):  # the config checks the file before any work
        DVRPConfig(oracle="neural", oracle_checkpoint=str(tmp_path / "no_such.ckpt"))
    policy = untrained()
    path = tmp_path / "oracle.ckpt"
    torch.save({"state_dict": {f"policy.{k}": v for k, v in policy.state_dict().items()},
                "routing_policy": {"class_path": "modules.routing.RoutingPolicy", "config": policy.config,
                                   "num_customers": 20, "num_vehicles": 2}}, path)
    loaded, trained_for = load_exported_model(str(path), "routing_policy")
    assert trained_for == {"num_customers": 20, "num_vehicles": 2}
    for a, b in zip(loaded.state_dict().values(), policy.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    # a checkpoint may name only an nn.Module of this project's modules package: nothing else is imported or called
    for class_path in ("subprocess.Popen", "os.system", "modules.routing.torch.load", "modules.base.RLModule.log"):
        hostile = tmp_path / "hostile.ckpt"
        torch.save({"state_dict": {}, "routing_policy": {"class_path": class_path, "config": {"args": ["true"]}}},
                   hostile)
        with pytest.raises(ValueError, match="only nn.Module classes"):
            load_exported_model(str(hostile), "routing_policy")
    for name, content in (("random.ckpt", bytes(range(256)) * 16), ("cut.ckpt", path.read_bytes()[:300])):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError, match=f"the checkpoint of routing_policy '.*{name}' is not a readable"):
            load_exported_model(str(tmp_path / name), "routing_policy")
    wrong = RoutingPolicy(embed_dim=16, num_heads=4, num_layers=1)  # weights of another shape: the file is named
    torch.save({"state_dict": {f"policy.{k}": v for k, v in wrong.state_dict().items()},
                "routing_policy": {"class_path": "modules.routing.RoutingPolicy", "config": policy.config}},
               tmp_path / "wrong.ckpt")
    with pytest.raises(ValueError, match="wrong.ckpt'.*do not fit"):
        load_exported_model(str(tmp_path / "wrong.ckpt"), "routing_policy")
    other = tmp_path / "other.ckpt"
    torch.save({"state_dict": {}}, other)
    with pytest.raises(ValueError, match="not a routing_policy checkpoint"):
        load_exported_model(str(other), "routing_policy")
    # through the env config: the wrong size is refused when the run reads the policy; a config without its
    # policy builds no env; the right one builds the neural oracle
    with pytest.raises(ValueError, match=r"trained for num_customers=20, this env has 30"):
        env_models(DVRPConfig(num_customers=30, oracle="neural", oracle_checkpoint=str(path)))
    config = DVRPConfig(num_customers=20, oracle="neural", oracle_checkpoint=str(path), oracle_augment=2)
    with pytest.raises(ValueError, match=r"needs the run's learned models \['routing_policy'\]"):
        config.make(num_envs=2, seed=0)
    models = env_models(config)
    assert list(models) == ["routing_policy"]
    env = config.make(num_envs=2, seed=0, models=models)
    assert isinstance(env.oracle, NeuralOracle) and env.oracle.num_augment == 2
    env.reset()
    assert env.mask[:, -1].all()
