"""The routing policy: feasible plans whatever the weights, exact costs, gradients, and learning on the
smoke config (REINFORCE through the real entry point)."""

from __future__ import annotations

import glob
import math

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from envs.dvrp import DVRPConfig
from envs.vrptw.env import VRPTWEnv
from envs.vrptw.source import ServedSetInstances
from modules.reinforce import StepwiseRouting, paired_improvement_p_value
from modules.routing import RoutingPolicy
from pipelines.env_models import load_exported_model
from pipelines.fit import main
from tests.pipelines.conftest import REPO

SMOKE = str(REPO / "configs" / "vrptw_oracle_smoke.yaml")


def simulate(problem, row: int, routes: list[list[int]]) -> tuple[float, bool]:
    """Independent check of one plan in float64: (distance km, feasible in exact arithmetic)."""
    p = {k: v[row].double() for k, v in problem.items()}
    ok, total = True, 0.0
    for route in routes:
        t, here, load = 0.0, 0, 0.0
        for slot in route:
            node = slot + 1
            d = math.dist(p["loc"][here].tolist(), p["loc"][node].tolist())
            total += d
            start = max(t + d, float(p["ready"][node]))
            ok &= start <= float(p["due"][node]) + 1e-9
            t, here, load = start + float(p["service"][node]), node, load + float(p["demand"][node])
        d = math.dist(p["loc"][here].tolist(), p["loc"][0].tolist()) if route else 0.0
        total += d
        ok &= t + d <= float(p["horizon"]) + 1e-9 and load <= float(p["capacity"]) + 1e-9
    served = sorted(s for r in routes for s in r)
    ok &= served == [i - 1 for i in range(1, problem["present"].shape[1]) if problem["present"][row, i]]
    ok &= len(routes) <= int(p["num_vehicles"])
    return total, ok


@pytest.fixture(scope="module")
def problems():
    source = ServedSetInstances(DVRPConfig(num_customers=12, num_vehicles=2))
    return source.sample(torch.arange(48))


@pytest.mark.parametrize("early_return", [False, True])
def test_untrained_plans_are_feasible_and_costs_exact(problems, early_return):
    torch.manual_seed(0)
    policy = RoutingPolicy(embed_dim=32, num_heads=4, num_layers=1, early_return=early_return)
    routes, cost, feasible = policy.solve(problems)
    assert routes.shape == (48, 2, 12) and cost.shape == feasible.shape == (48,)
    assert feasible.any()
    for row in feasible.nonzero().squeeze(-1).tolist():
        plan = [[s for s in r if s >= 0] for r in routes[row].tolist()]
        plan = [r for r in plan if r]
        km, ok = simulate(problems, row, plan)
        assert ok, f"row {row}: plan {plan} violates a constraint"
        assert km == pytest.approx(float(cost[row]), rel=1e-5)


def test_augmented_solve_keeps_the_best_feasible_plan(problems):
    """Symmetry 0 is the identity, so plans under 4 symmetries are never worse than plain greedy."""
    torch.manual_seed(0)
    policy = RoutingPolicy(embed_dim=32, num_heads=4, num_layers=1)
    _, plain_cost, plain_ok = policy.solve(problems)
    routes, cost, feasible = policy.solve(problems, num_augment=4)
    assert (feasible | ~plain_ok).all() and feasible.sum() >= plain_ok.sum()
    assert (cost[plain_ok] <= plain_cost[plain_ok] + 1e-4).all()
    for row in feasible.nonzero().squeeze(-1).tolist():
        plan = [r for r in ([s for s in route if s >= 0] for route in routes[row].tolist()) if r]
        km, ok = simulate(problems, row, plan)
        assert ok and km == pytest.approx(float(cost[row]), rel=1e-5)
    with pytest.raises(ValueError, match="num_augment"):
        policy.solve(problems, num_augment=9)


def test_sampling_gives_log_probs_and_gradients(problems):
    torch.manual_seed(0)
    policy = RoutingPolicy(embed_dim=32, num_heads=4, num_layers=1)
    out = policy.rollout(problems[:16], "sample")
    assert torch.isfinite(out.log_prob).all() and (out.log_prob <= 0).all()
    (out.length.float() * out.log_prob).mean().backward()
    grads = [p.grad for p in policy.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads) and any(g.abs().sum() > 0 for g in grads)
    assert (out.steps > 0).all()


def test_stepwise_policy_on_the_env_builds_the_greedy_rollouts_plans():
    """Acting one node per step on the VRPTW env's observations (what ``pipelines.evaluate`` plays), the policy
    chooses the nodes of its whole-plan greedy rollout, and the env's plan costs what the rollout's does."""
    torch.manual_seed(1)
    policy = RoutingPolicy(embed_dim=32, num_heads=4, num_layers=1)
    source = ServedSetInstances(DVRPConfig(num_customers=12, num_vehicles=2))
    env = VRPTWEnv(source, num_envs=16, seed=3)
    expected = policy.rollout(env.problem.clone(), "greedy")
    stepwise, td, actions = StepwiseRouting(policy), env.reset(), []
    done = torch.zeros(16, dtype=torch.bool)
    while not bool(done.all()):
        step = env.step(stepwise(td))
        actions.append(torch.where(done, 0, step["action"]))
        done = done | step["next", "done"].squeeze(-1)
        td = step["next"]
    info = td["info"]  # the last step's: every row finished there or before, and a finished row keeps its end
    assert torch.equal(torch.stack(actions, 1), expected.actions[:, :len(actions)])
    assert (expected.actions[:, len(actions):] == 0).all()
    assert torch.equal(info["feasible"].squeeze(-1).bool(), expected.feasible)
    assert torch.allclose(info["route_km"].squeeze(-1), expected.length.float())


def test_paired_p_value():
    base = torch.linspace(10, 20, 200)
    assert paired_improvement_p_value(base - 1.0 + 0.01 * torch.randn(200), base) < 1e-6
    assert paired_improvement_p_value(base + 1.0, base) > 0.99


def test_smoke_training_improves_greedy_cost(tmp_path):
    """The real entry point trains the smoke config; the final greedy validation cost is below the untrained
    network's (the baseline's first evaluation), and the checkpoint reloads through the pipeline's loader."""
    cli = main(["--config", SMOKE, f"--trainer.logger.init_args.save_dir={tmp_path}"])
    assert cli.model.collected_frames >= 16000
    log_dir = tmp_path / "vrptw_oracle_smoke" / "version_0"
    acc = EventAccumulator(glob.glob(str(log_dir / "events.out.tfevents.*"))[0])
    acc.Reload()
    untrained = acc.Scalars("eval/baseline_cost_km")[0].value
    final = acc.Scalars("eval/cost_km")[-1].value
    assert final < untrained, (final, untrained)
    policy, trained_for = load_exported_model(str(log_dir / "checkpoints" / "last.ckpt"), "routing_policy")
    assert trained_for["num_customers"] == 10
    problems = cli.datamodule.validation_problems()
    with torch.no_grad():
        trained = cli.model.greedy_costs(policy, problems)[0].mean()
    assert float(trained) < untrained
    # pipelines.evaluate plays the final policy step by step beside the reference rules, on the same episodes
    from pipelines import evaluate
    table = evaluate.main(["--ckpt_path", str(log_dir / "checkpoints" / "last.ckpt"), "--episodes", "48"])
    assert list(table) == ["reinforce", "nearest", "random"]
    assert all("feasible_rate" in row for row in table.values())  # the share of complete plans, every row
    assert table["reinforce"]["mean_return"] > table["random"]["mean_return"]
