"""The VRPTW construction rules, the construction env and the DVRP served-set source."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torchrl.envs import check_env_specs

from envs import make_env
from envs.dvrp import DVRPConfig
from envs.routing import construction
from envs.routing.problem import distance_matrix, make_problem
from envs.vrptw.config import VRPTWConfig
from envs.vrptw.env import VRPTWEnv, nearest_neighbour, observed_construction
from envs.vrptw.source import ServedSetInstances


def hand_problem(num_vehicles: int) -> TensorDict:
    """Depot (0, 0), H = 100, Q = 10; c1 (10, 0) [0, 15], c2 (20, 0) [40, 60], c3 (0, 30) [0, 35], demand 4."""
    xy = torch.tensor([[[10.0, 0.0], [20.0, 0.0], [0.0, 30.0]]])
    ready, due = torch.tensor([[0.0, 40.0, 0.0]]), torch.tensor([[15.0, 60.0, 35.0]])
    return make_problem(torch.zeros(1, 2), xy, torch.full((1, 3), 4.0), torch.zeros(1, 3), ready, due,
                        torch.ones(1, 3, dtype=torch.bool), torch.tensor([100.0]), torch.tensor([10.0]), num_vehicles)


class HandSource:
    """A source that always returns the hand example (for the env)."""

    num_customers = 3

    def __init__(self, num_vehicles: int) -> None:
        self.num_vehicles = num_vehicles

    def sample(self, key: torch.Tensor) -> TensorDict:
        return hand_problem(self.num_vehicles).expand(key.shape[0]).clone()


def masks(env: VRPTWEnv, actions: list[int]) -> list[list[bool]]:
    td = env.reset()
    out = [td["action_mask"][0].tolist()]
    for a in actions:
        td["action"] = torch.tensor([a])
        td = env.step(td)["next"]
        out.append(td["action_mask"][0].tolist())
    return out, td


def test_masks_on_hand_example():
    """c3 is too late after c1 (arrival 41.6 > 35); after c2 the load 8 + 4 > Q; the depot opens only when
    nothing can be appended; the second vehicle serves c3; the plan is 10 + 10 + 20 + 30 + 30 km."""
    env = VRPTWEnv(HandSource(2), num_envs=1)
    seen, td = masks(env, [1, 2, 0, 3, 0])
    F, T = False, True
    assert seen == [[F, T, T, T], [F, F, T, F], [T, F, F, F], [F, F, F, T], [T, F, F, F], [T, F, F, F]]
    assert bool(td["done"]) and td["info", "feasible"].item() == 1.0
    assert td["info", "route_km"].item() == pytest.approx(100.0)


def test_early_return_allows_the_depot_while_customers_fit():
    env = VRPTWEnv(HandSource(2), num_envs=1, early_return=True)
    seen, _ = masks(env, [1])
    assert seen[1] == [True, False, True, False]


def test_fixed_fleet_dead_end_is_infeasible_with_penalty():
    """With M = 1, c3 cannot be served after the route closes: done, infeasible, penalised reward."""
    env = VRPTWEnv(HandSource(1), num_envs=1, unserved_penalty=100.0)
    seen, td = masks(env, [1, 2, 0])
    assert bool(td["done"]) and td["info", "feasible"].item() == 0.0 and td["info", "unserved"].item() == 1.0
    assert td["reward"].item() == pytest.approx(-20.0 - 100.0)
    assert seen[-1] == [True, False, False, False], "a finished row keeps a non-empty mask (the depot no-op)"


def test_time_window_bound_includes_margin():
    """A customer whose arrival equals its due time exactly is refused by the float safety margin."""
    problem = hand_problem(2)
    problem["due"][0, 1] = 10.0
    state = construction.start(problem, margin=1e-3)
    assert not bool(state.mask[0, 1])
    state = construction.start(problem, margin=0.0)
    assert bool(state.mask[0, 1])


def test_actions_to_routes():
    actions = torch.tensor([[1, 2, 0, 3, 0, 0], [3, 0, 0, 0, 0, 0]])
    routes = construction.actions_to_routes(actions, num_vehicles=2, num_customers=3)
    assert routes.tolist() == [[[0, 1, -1], [2, -1, -1]], [[2, -1, -1], [-1, -1, -1]]]


@pytest.fixture(scope="module")
def config() -> VRPTWConfig:
    return VRPTWConfig(DVRPConfig(num_customers=8, num_vehicles=2))


def test_env_passes_check_env_specs_and_random_rollouts_respect_masks(config):
    env = make_env(config, num_envs=6, seed=0)
    check_env_specs(env)
    rollout = env.rollout(40, break_when_any_done=False)
    assert rollout["action_mask"].gather(-1, rollout["action"].unsqueeze(-1)).all()
    assert rollout["next", "done"].any()


def test_source_is_row_seeded_and_plausible(config):
    keys = torch.arange(10, 16)
    small, large = config.source.sample(keys[:3]), config.source.sample(keys)
    assert (small == large[:3]).all()
    present = large["present"]
    assert present[:, 0].all() and (present[:, 1:].sum(-1) >= 1).all(), "a candidate is always present"
    assert (large["due"] >= large["ready"]).all() and (large["num_vehicles"] == 2).all()


def test_final_served_sets_have_no_candidate():
    source = ServedSetInstances(DVRPConfig(num_customers=8), policies=("fallback",), with_candidate=False)
    keys = torch.arange(4)
    problem = source.sample(keys, stop=torch.full_like(keys, 8))
    assert problem.shape == (4,) and problem["present"].shape == (4, 9)


def test_unknown_source_policy_is_named():
    with pytest.raises(ValueError, match="nonsense"):
        ServedSetInstances(DVRPConfig(num_customers=8), policies=("nonsense",))


def test_distance_matrix():
    d = distance_matrix(torch.tensor([[[0.0, 0.0], [3.0, 4.0]]]))
    assert d.tolist() == [[[0.0, 5.0], [5.0, 0.0]]]


def test_the_observation_gives_back_the_construction_state(config):
    """The problem and state read from an observation give the env's own mask again, at every step of random
    episodes (what a policy deciding from the observation relies on)."""
    env = make_env(config, num_envs=8, seed=5)
    rollout = env.rollout(30, break_when_any_done=False)
    for t in range(rollout.shape[-1]):
        obs = rollout[:, t]
        problem, state = observed_construction(obs)
        dist = distance_matrix(problem["loc"])
        mask = construction.customer_mask(problem, dist, state.pos, state.time, state.load, state.used,
                                          state.visited, construction.default_margin(torch.float32))
        assert torch.equal(mask[:, 1:], obs["action_mask"][:, 1:])
        assert not (obs["action_mask"][:, 1:] & state.visited[:, 1:]).any(), "a served customer is offered"
        assert state.visited[:, 0].all() and state.visited[~problem["present"]].all(), "absent slots count as visited"


def test_nearest_neighbour_takes_the_nearest_allowed_customer(config):
    """Every step of the rule is the allowed customer nearest the current node (checked one row at a time in
    float64), the depot only when no customer is allowed."""
    env = make_env(config, num_envs=8, seed=7)
    td, finished = env.reset(), 0
    for _ in range(40):
        chosen = nearest_neighbour(td.clone())["action"]
        for row in range(8):
            mask, loc = td["action_mask"][row], td["nodes"][row, :, :2].double()
            here = loc[td["position"][row]]
            allowed = [i for i in range(1, mask.numel()) if mask[i]]
            if not allowed:
                assert chosen[row] == 0
                continue
            km = {i: float(torch.linalg.vector_norm(loc[i] - here)) for i in allowed}
            assert km[int(chosen[row])] <= min(km.values()) + 1e-4
        td["action"] = chosen
        step = env.step(td)
        finished += int(step["next", "done"].sum())
        td = env.maybe_reset(step["next"].exclude("reward", "done", "terminated", "truncated"))
    assert finished >= 8
