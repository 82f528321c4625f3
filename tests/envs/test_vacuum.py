"""The robot-vacuum env: specs, each rule on a hand-built state, the collision resolution against a
brute-force reference, batch-size independent seeding, bad config values, observation symmetry."""

from __future__ import annotations

import itertools

import pytest
import torch
from tensordict import TensorDict
from torchrl.envs import check_env_specs

from envs import make_env
from envs.vacuum import ACTION_DELTAS, NUM_ACTIONS, VacuumConfig, VacuumEnv
from tests.envs.reset_check import assert_reset_matches_torchrl

S, U, D, L, R = range(NUM_ACTIONS)  # stay, up, down, left, right


def play(env: VacuumEnv, position, energy, dirt, action, t: int = 0) -> TensorDict:
    """Force a one-row state, take one step with ``action`` ``[R]``, return ``next``."""
    td = env.force_state(torch.tensor([position]), torch.tensor([energy], dtype=torch.float32),
                         torch.tensor([dirt], dtype=torch.bool), t=t)
    td["action"] = torch.tensor([action])
    return env.step(td)["next"]


def cells(env: VacuumEnv) -> list[tuple[int, int]]:
    n = env.config.grid_size
    return [(int(c) // n, int(c) % n) for c in env.position[0]]


def clean_grid(n: int, dirty: tuple[tuple[int, int], ...] = ()) -> list[list[bool]]:
    grid = [[False] * n for _ in range(n)]
    for row, col in dirty:
        grid[row][col] = True
    return grid


@pytest.fixture
def env3() -> VacuumEnv:
    """3 robots on a 4x4 grid, 50 energy each, charger at (3, 3), one env."""
    return VacuumConfig(grid_size=4, num_robots=3, energy=(50, 50, 50), chargers=[(3, 3)], max_steps=10).make(1, 0)


# ---------------------------------------------------------------- specs, shapes


@pytest.mark.parametrize("num_envs", [1, 7])
def test_check_env_specs(num_envs):
    check_env_specs(VacuumConfig().make(num_envs=num_envs, seed=0))
    check_env_specs(make_env(VacuumConfig(), num_envs=num_envs, seed=3))


def test_rollout_shapes_and_mask():
    cfg = VacuumConfig()
    env = make_env(cfg, num_envs=6, seed=0)
    out = env.rollout(40, break_when_any_done=False)  # rand_action: random actions respect the mask
    assert out["observation"].shape == (6, 40, 4, cfg.num_features) == (6, 40, 4, 46)
    assert out["observation"].dtype == torch.float32
    assert out["agent_id"].shape == (6, 40, 4, 4) and torch.equal(out["agent_id"][0, 0], torch.eye(4))
    assert out["action"].shape == (6, 40, 4) and out["action"].dtype == torch.int64
    assert out["action_mask"].shape == (6, 40, 4, 5) and out["action_mask"].dtype == torch.bool
    assert out["action_mask"].gather(-1, out["action"].unsqueeze(-1)).all()
    assert out["next", "reward"].shape == (6, 40, 4, 1)
    for key in ("done", "terminated", "truncated"):
        assert out["next", key].shape == (6, 40, 1)
    for key in ("cleaned_fraction", "collisions", "energy_left", "steps"):
        assert out["next", "info", key].shape == (6, 40, 1)
    robot_energy = out["next", "info", "robot_energy_left"]
    assert robot_energy.shape == (6, 40, 4)
    assert torch.allclose(robot_energy.mean(-1, keepdim=True), out["next", "info", "energy_left"])
    # steps counts the episode's steps: 1, 2, ... restarting after every done
    done = out["next", "done"][..., 0]
    steps = out["next", "info", "steps"][..., 0]
    for row in range(6):
        expected = 0
        for t in range(40):
            expected += 1
            assert steps[row, t] == expected
            if done[row, t]:
                expected = 0
    assert out["next", "episode_reward"].shape == (6, 40, 4, 1)
    # every cleaned cell paid r_clean once: rewards of an episode sum to 25 x cleaned fraction
    first_done = out["next", "done"][0, :, 0].nonzero()
    if len(first_done):
        t = int(first_done[0])
        cleaned = float(out["next", "info", "cleaned_fraction"][0, t])
        assert out["next", "reward"][0, : t + 1].sum() == pytest.approx(25 * cleaned)


@pytest.mark.parametrize("transformed", [False, True])
def test_observation_matches_state_after_partial_resets(transformed):
    """Partial resets write only the new rows (into a scratch buffer): the merged observation must be
    the observation of the current state in every row, and the buffer must never be handed out."""
    cfg = VacuumConfig(grid_size=3, num_robots=2, energy=[30, 30], chargers=[(1, 1)], max_steps=9)
    env = make_env(cfg, num_envs=16, seed=1) if transformed else cfg.make(num_envs=16, seed=1)
    base = env.base_env if transformed else env
    td = env.reset()
    gen = torch.Generator().manual_seed(0)
    partial = 0
    for _ in range(23):
        td["action"] = (torch.rand(td["action_mask"].shape, generator=gen) * td["action_mask"]).argmax(-1)
        step, td = env.step_and_maybe_reset(td)
        partial += int(0 < step["next", "done"].sum() < 16)
        assert torch.equal(td["observation"], base._features(base.position, base.energy, base.dirt, base.t))
        assert td["observation"].data_ptr() != base._reset_rows.data_ptr()
        if step["next", "done"].any():  # the merge made a new tensor: the terminal observations survive
            assert step["next", "observation"].data_ptr() != td["observation"].data_ptr()
    assert partial > 3


# ---------------------------------------------------------------- rules on hand-built states


def test_observation_layout(env3):
    td = env3.force_state(torch.tensor([[[1, 2], [0, 0], [3, 1]]]), torch.tensor([[40.0, 50.0, 0.0]]),
                          torch.tensor([clean_grid(4, ((0, 2), (1, 2), (3, 3)))]), t=4)
    obs = td["observation"][0, 0]  # robot 0 at (1, 2); s = 3, E = 50
    assert obs[:4].tolist() == pytest.approx([0.8, 1.0, 0.0, 1.0])  # own, robot 1, robot 2 energies; own max
    assert obs[4:8].tolist() == pytest.approx([-1 / 3, -2 / 3, 2 / 3, -1 / 3])  # offsets of robots 1, 2
    assert obs[8:13].tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]  # dirt ahead: stay, up (0,2), down, left, right
    assert obs[13:15].tolist() == pytest.approx([1 / 3, 2 / 3])  # own row, column
    assert obs[15:17].tolist() == pytest.approx([2 / 3, 1 / 3])  # charger (3, 3) from (1, 2)
    assert obs[17:33].nonzero().flatten().tolist() == [2, 6, 15]  # dirt map
    assert obs[33].item() == pytest.approx(0.6)  # steps left: 1 - 4 / 10
    assert td["observation"].shape[-1] == env3.config.num_features == 34
    # masks: robot 1 in the corner (0, 0) can't go up or left; robot 2 is stopped
    assert td["action_mask"][0].tolist() == [[True] * 5, [True, False, True, False, True], [True] + [False] * 4]


def test_move_costs_energy_and_off_grid_is_a_free_stay(env3):
    nxt = play(env3, [[1, 1], [0, 0], [3, 0]], [50, 50, 50], clean_grid(4), [R, U, D])
    assert cells(env3) == [(1, 2), (0, 0), (3, 0)]  # off-grid moves stay
    assert env3.energy[0].tolist() == [49, 50, 50]
    assert nxt["info", "collisions"].item() == 0
    assert nxt["info", "energy_left"].item() == pytest.approx((49 + 50 + 50) / 150)


def test_collision_into_one_cell(env3):
    nxt = play(env3, [[0, 0], [0, 2], [3, 0]], [50, 50, 50], clean_grid(4, ((0, 1),)), [R, L, S])
    assert cells(env3) == [(0, 0), (0, 2), (3, 0)]  # both stay
    assert env3.energy[0].tolist() == [50 - 1 - 20, 50 - 1 - 20, 50]
    assert nxt["info", "collisions"].item() == 1
    assert nxt["reward"].flatten().tolist() == [0, 0, 0]  # the contested cell stays dirty
    assert env3.dirt[0, 1] == 1


def test_swap_collision(env3):
    nxt = play(env3, [[2, 1], [2, 2], [0, 0]], [50, 50, 50], clean_grid(4), [R, L, S])
    assert cells(env3) == [(2, 1), (2, 2), (0, 0)]
    assert env3.energy[0].tolist() == [29, 29, 50]
    assert nxt["info", "collisions"].item() == 1


def test_move_into_a_robot_that_stays_and_chains(env3):
    # robot 0 -> robot 1's cell, robot 1 -> robot 2's cell, robot 2 stays: both movers blocked
    nxt = play(env3, [[1, 0], [1, 1], [1, 2]], [50, 50, 50], clean_grid(4), [R, R, S])
    assert cells(env3) == [(1, 0), (1, 1), (1, 2)]
    assert env3.energy[0].tolist() == [29, 29, 30]  # pairs (0, 1) and (1, 2); robot 1 pays once
    assert nxt["info", "collisions"].item() == 2
    # the same chain with the front robot moving away: everybody follows, no collision
    nxt = play(env3, [[1, 0], [1, 1], [1, 2]], [50, 50, 50], clean_grid(4), [R, R, R])
    assert cells(env3) == [(1, 1), (1, 2), (1, 3)]
    assert env3.energy[0].tolist() == [49, 49, 49] and nxt["info", "collisions"].item() == 0


def test_rotation_around_a_block_is_allowed():
    env = VacuumConfig(grid_size=3, num_robots=4, energy=[10] * 4, chargers=[]).make(1, 0)
    play(env, [[0, 0], [0, 1], [1, 1], [1, 0]], [10] * 4, clean_grid(3), [R, D, L, U])
    assert cells(env) == [(0, 1), (1, 1), (1, 0), (0, 0)]
    assert env.collisions.item() == 0


def test_collisions_accumulate_over_the_episode(env3):
    td = env3.force_state(torch.tensor([[[0, 0], [0, 2], [3, 0]]]), torch.full((1, 3), 50.0),
                          torch.tensor([clean_grid(4, ((2, 2),))]))
    for expected in (1, 2):
        td["action"] = torch.tensor([[R, L, S]])
        td = env3.step(td)["next"]
        assert td["info", "collisions"].item() == expected


def test_charging_with_cap(env3):
    # robot 0 stays on the charger at 40 -> 50 (cap); robot 1 arrives with 20 -> 20 - 1 + 20
    play(env3, [[3, 3], [0, 0], [3, 0]], [40, 50, 50], clean_grid(4), [S, S, S])
    assert env3.energy[0].tolist() == [50, 50, 50]
    play(env3, [[0, 0], [2, 3], [3, 0]], [50, 20, 50], clean_grid(4), [S, D, S])
    assert env3.energy[0].tolist() == [50, 39, 50]
    play(env3, [[3, 3], [0, 0], [3, 0]], [20, 50, 50], clean_grid(4), [S, S, S])
    assert env3.energy[0, 0] == 40


def test_stopped_robot_cannot_move(env3):
    nxt = play(env3, [[1, 1], [0, 0], [3, 0]], [0, 1, 50], clean_grid(4, ((2, 2),)), [R, R, S])
    assert cells(env3) == [(1, 1), (0, 1), (3, 0)]  # robot 0 ignored; robot 1 spends its last unit
    assert env3.energy[0].tolist() == [0, 0, 50]
    assert nxt["action_mask"][0, :2].tolist() == [[True] + [False] * 4] * 2
    assert not nxt["done"].item()
    # a stopped robot in the way of a mover: the mover is blocked, both are in the pair
    nxt = play(env3, [[1, 1], [1, 0], [3, 0]], [0, 30, 50], clean_grid(4, ((2, 2),)), [S, R, S])
    assert cells(env3) == [(1, 1), (1, 0), (3, 0)]
    assert env3.energy[0].tolist() == [0, 9, 50] and nxt["info", "collisions"].item() == 1


def test_cleaning_rewards_the_robot_that_cleans(env3):
    nxt = play(env3, [[0, 0], [1, 1], [3, 0]], [50, 50, 50], clean_grid(4, ((1, 2), (3, 0), (2, 2))), [S, R, S])
    assert nxt["reward"].flatten().tolist() == [0.0, 1.0, 1.0]  # robot 1 moved onto it, robot 2 stayed on one
    assert env3.dirt[0].nonzero().flatten().tolist() == [10]
    assert nxt["info", "cleaned_fraction"].item() == pytest.approx(15 / 16)
    env = VacuumConfig(grid_size=4, num_robots=3, energy=(50, 50, 50), chargers=[(3, 3)], r_clean=2.5).make(1, 0)
    nxt = play(env, [[0, 0], [1, 1], [3, 0]], [50, 50, 50], clean_grid(4, ((0, 1),)), [R, S, S])
    assert nxt["reward"].flatten().tolist() == [2.5, 0.0, 0.0]


def test_terminated_when_floor_is_clean(env3):
    nxt = play(env3, [[0, 0], [1, 1], [3, 0]], [50, 50, 50], clean_grid(4, ((0, 1),)), [R, S, S])
    assert nxt["terminated"].item() and nxt["done"].item() and not nxt["truncated"].item()
    assert nxt["info", "cleaned_fraction"].item() == 1.0


def test_terminated_when_every_robot_has_stopped(env3):
    nxt = play(env3, [[0, 0], [1, 1], [2, 0]], [1, 1, 0], clean_grid(4, ((3, 2),)), [R, R, S])
    assert env3.energy[0].tolist() == [0, 0, 0]
    assert nxt["terminated"].item() and not nxt["truncated"].item()
    assert nxt["info", "energy_left"].item() == 0.0


def test_truncated_at_max_steps(env3):
    nxt = play(env3, [[0, 0], [1, 1], [2, 0]], [50, 50, 50], clean_grid(4, ((3, 2),)), [S, S, S], t=8)
    assert not nxt["done"].item() and env3.t.item() == 9
    nxt = play(env3, [[0, 0], [1, 1], [2, 0]], [50, 50, 50], clean_grid(4, ((3, 2),)), [S, S, S], t=9)
    assert nxt["truncated"].item() and nxt["done"].item() and not nxt["terminated"].item()
    # termination wins over truncation at the last step
    nxt = play(env3, [[0, 0], [1, 1], [2, 0]], [50, 50, 50], clean_grid(4, ((2, 0),)), [S, S, S], t=9)
    assert nxt["terminated"].item() and not nxt["truncated"].item()


# ---------------------------------------------------------------- collision resolution vs brute force


def reference_step(n: int, position: list[int], target: list[int]) -> tuple[list[bool], list[bool], int]:
    """Brute force. Movement round by round: robots that would end in one cell, or movers that would
    swap, collide and the movers among them stay; repeat until nothing changes. Colliding pairs, from
    the outcome: movers with the same target, swapping movers, and a mover that stayed with the robot
    that stays in its target cell. Returns (moved, collided, pairs)."""
    r = len(position)
    attempted = [t != p for t, p in zip(target, position, strict=True)]
    moving = list(attempted)
    while True:
        end = [t if m else p for t, p, m in zip(target, position, moving, strict=True)]
        stop = {k for i, j in itertools.combinations(range(r), 2)
                if end[i] == end[j] or (end[i] == position[j] and end[j] == position[i] and moving[i] and moving[j])
                for k in (i, j)}
        if not stop:
            break
        for k in stop:
            moving[k] = False
    pairs = set()
    for i, j in itertools.permutations(range(r), 2):
        if attempted[i] and attempted[j] and target[i] == target[j]:
            pairs.add((min(i, j), max(i, j)))
        if attempted[i] and not moving[i] and position[j] == target[i] and not moving[j]:
            pairs.add((min(i, j), max(i, j)))  # covers swapping pairs
    collided = [any(i in p for p in pairs) for i in range(r)]
    return moving, collided, len(pairs)


@pytest.mark.parametrize("grid_size,num_robots", [(3, 4), (3, 6), (4, 5)])
def test_collision_resolution_matches_brute_force(grid_size, num_robots):
    b = 400
    env = VacuumConfig(grid_size=grid_size, num_robots=num_robots, energy=[100] * num_robots,
                       chargers=[]).make(num_envs=b, seed=0)
    env.reset()
    gen = torch.Generator().manual_seed(grid_size * 10 + num_robots)
    action = torch.randint(0, NUM_ACTIONS, (b, num_robots), generator=gen)
    position = env.position.clone()
    target = env._next_flat[position * NUM_ACTIONS + action]
    moving, collided, pairs = env._resolve(position, target, target != position)
    for row in range(b):
        ref = reference_step(grid_size, position[row].tolist(), target[row].tolist())
        assert (moving[row].tolist(), collided[row].tolist(), int(pairs[row])) == ref, row


# ---------------------------------------------------------------- seeding


def test_rows_do_not_depend_on_batch_size():
    cfg = VacuumConfig(max_steps=6)
    big = cfg.make(num_envs=64, seed=100)
    gen = torch.Generator().manual_seed(0)
    actions = torch.randint(0, NUM_ACTIONS, (20, 64, 4), generator=gen)

    def run(env, acts):
        td, seen = env.reset(), []
        for a in acts:
            td["action"] = a
            step, td = env.step_and_maybe_reset(td)
            seen.append(step.clone())
        return torch.stack(seen, 1)

    out = run(big, actions)
    assert out["next", "done"].any()  # resets happened
    for row in (0, 1, 37, 63):
        single = run(cfg.make(num_envs=1, seed=100 + row), actions[:, row : row + 1])
        assert (single == out[row : row + 1]).all(), row


def test_initial_positions_are_distinct_and_vary_by_episode():
    env = VacuumConfig(grid_size=3, num_robots=9, energy=[5] * 9).make(num_envs=32, seed=0)
    env.reset()
    first = env.position.clone()
    assert (first.sort(-1).values == torch.arange(9)).all()  # 9 robots fill the 3x3 grid
    env.reset()
    assert not torch.equal(first, env.position)


def test_resume_state_replays_the_episode_in_progress():
    env = VacuumConfig().make(num_envs=4, seed=5)
    env.reset()
    env.reset()
    start = env.position.clone()
    state = env.resume_state()
    env.reset()
    env.load_resume_state(state)
    env.reset()
    assert torch.equal(env.position, start)


# ---------------------------------------------------------------- config errors


@pytest.mark.parametrize("kwargs,key", [
    ({"energy": [100, 100, 100]}, "env.energy"),
    ({"num_robots": 2}, "env.energy"),
    ({"energy": [100, 0, 100, 100]}, "env.energy"),
    ({"chargers": [(2, 5)]}, "env.chargers"),
    ({"chargers": [(-1, 0)]}, "env.chargers"),
    ({"chargers": [(1, 1), (1, 1)]}, "env.chargers"),
    ({"grid_size": 1}, "env.num_robots"),
    ({"num_robots": 0, "energy": []}, "env.num_robots"),
    ({"max_steps": 0}, "env.max_steps"),
    ({"e_collision": -1}, "env.e_collision"),
])
def test_bad_config_names_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        VacuumConfig(**kwargs)


def test_energy_error_says_what_is_expected():
    with pytest.raises(ValueError, match=r"env\.energy=.*4 values for num_robots=4, got 3"):
        VacuumConfig(energy=[1000, 100, 100])
    with pytest.raises(ValueError, match=r"env\.chargers=.*inside the 5x5 grid"):
        VacuumConfig(chargers=[(5, 0)])


def test_force_state_rejects_bad_states(env3):
    with pytest.raises(ValueError, match="two robots on one cell"):
        env3.force_state(torch.tensor([[[0, 0], [0, 0], [1, 1]]]), torch.ones(1, 3), torch.ones(1, 4, 4))
    with pytest.raises(ValueError, match="positions must lie"):
        env3.force_state(torch.tensor([[[0, 4], [0, 0], [1, 1]]]), torch.ones(1, 3), torch.ones(1, 4, 4))


# ---------------------------------------------------------------- symmetry


def test_exchanging_two_robots_exchanges_their_observations():
    """Robots 1 and 2 (same initial energy) exchange states: their rows exchange, and robots 0 and 3
    see the same robots with the two entries of their 'others' blocks exchanged."""
    cfg = VacuumConfig()  # energies 1000, 100, 100, 100
    env = cfg.make(num_envs=1, seed=0)
    pos = torch.tensor([[[0, 0], [1, 3], [4, 2], [2, 1]]])
    energy = torch.tensor([[700.0, 60.0, 35.0, 90.0]])
    dirt = torch.rand(1, 5, 5, generator=torch.Generator().manual_seed(0)) < 0.5
    obs = env.force_state(pos, energy, dirt)["observation"][0]
    perm = [0, 2, 1, 3]
    swapped = env.force_state(pos[:, perm], energy[:, perm], dirt)["observation"][0]
    assert torch.equal(swapped[1], obs[2]) and torch.equal(swapped[2], obs[1])
    # in the rows of robots 0 and 3, the others are (1, 2, 3) and (0, 1, 2): entries of 1 and 2 swap
    for robot, (a, b) in ((0, (0, 1)), (3, (1, 2))):
        expected = obs[robot].clone()
        expected[[1 + a, 1 + b]] = obs[robot][[1 + b, 1 + a]]  # energies
        off = 5  # R + 1
        for d in (0, 1):
            expected[[off + 2 * a + d, off + 2 * b + d]] = obs[robot][[off + 2 * b + d, off + 2 * a + d]]
        assert torch.equal(swapped[robot], expected)


def test_same_state_same_row_whatever_the_robot_index():
    """A robot's row is a function of the state only: two robots with the same capacity, placed in
    mirrored situations, get equal rows but for the order of the others (here made equal)."""
    env = VacuumConfig(grid_size=3, num_robots=2, energy=[10, 10], chargers=[(1, 1)]).make(1, 0)
    dirt = torch.tensor([clean_grid(3, ((0, 1),))])
    a = env.force_state(torch.tensor([[[0, 0], [2, 2]]]), torch.tensor([[7.0, 3.0]]), dirt)["observation"][0]
    b = env.force_state(torch.tensor([[[2, 2], [0, 0]]]), torch.tensor([[3.0, 7.0]]), dirt)["observation"][0]
    assert torch.equal(a[0], b[1]) and torch.equal(a[1], b[0])


def reference_observation(cfg: VacuumConfig, position, energy, dirt, t: int) -> torch.Tensor:
    """Robot rows built one value at a time from the class docstring's layout (``position`` [R] cells,
    ``energy`` [R], ``dirt`` [n^2] 0/1): ``[R, F]``, float64."""
    n, r, e, s = cfg.grid_size, cfg.num_robots, max(cfg.energy), max(cfg.grid_size - 1, 1)
    rc = [(int(c) // n, int(c) % n) for c in position]
    rows = []
    for i in range(r):
        others = [j for j in range(r) if j != i]
        row = [energy[i] / e] + [energy[j] / e for j in others] + [cfg.energy[i] / e]
        for j in others:
            row += [(rc[j][0] - rc[i][0]) / s, (rc[j][1] - rc[i][1]) / s]
        for dr, dc in ACTION_DELTAS:
            nr, nc = rc[i][0] + dr, rc[i][1] + dc
            row.append(dirt[nr * n + nc] if 0 <= nr < n and 0 <= nc < n else dirt[rc[i][0] * n + rc[i][1]])
        row += [rc[i][0] / s, rc[i][1] / s]
        for cr, cc in cfg.chargers:
            row += [(cr - rc[i][0]) / s, (cc - rc[i][1]) / s]
        row += list(dirt) + [1 - t / cfg.max_steps]
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


@pytest.mark.parametrize("kwargs", [
    {},
    {"grid_size": 4, "num_robots": 3, "energy": [30, 5, 7], "chargers": [(0, 0), (3, 3)]},
    {"grid_size": 3, "num_robots": 2, "energy": [4, 4], "chargers": [], "max_steps": 7},
])
def test_observation_matches_the_documented_layout(kwargs):
    """The observation (built by one matrix product) against a value-by-value construction, on random states."""
    cfg = VacuumConfig(**kwargs)
    n, r, b = cfg.grid_size, cfg.num_robots, 16
    env = cfg.make(num_envs=b, seed=0)
    gen = torch.Generator().manual_seed(1)
    cells = torch.rand(b, n * n, generator=gen).argsort(-1)[:, :r]
    energy = torch.randint(0, 40, (b, r), generator=gen).float() / 3
    dirt = torch.rand(b, n, n, generator=gen) < 0.5
    t = torch.randint(0, cfg.max_steps, (b,), generator=gen)
    obs = env.force_state(torch.stack([cells // n, cells % n], -1), energy, dirt, t)["observation"]
    assert obs.shape == (b, r, cfg.num_features) and obs.dtype == torch.float32
    for row in range(b):
        ref = reference_observation(cfg, cells[row].tolist(), energy[row].tolist(),
                                    dirt[row].flatten().float().tolist(), int(t[row]))
        torch.testing.assert_close(obs[row].double(), ref, rtol=0, atol=1e-6)


def test_action_deltas_match_the_names():
    assert ACTION_DELTAS[U] == (-1, 0) and ACTION_DELTAS[D] == (1, 0)
    assert ACTION_DELTAS[L] == (0, -1) and ACTION_DELTAS[R] == (0, 1)


def test_own_partial_reset_equals_torchrls():
    """VacuumEnv.maybe_reset (only the observation merged) gives what TorchRL's reset-and-merge gives, step after
    step, with episodes ending at different steps in different rows."""
    config = VacuumConfig(energy=(60.0, 30.0, 30.0, 30.0), max_steps=100)
    assert_reset_matches_torchrl(
        lambda: config.make(num_envs=16, seed=5),
        lambda td, generator: (torch.rand(td["action_mask"].shape, generator=generator) * td["action_mask"]).argmax(-1))
