"""The hockey env: specs, wall bounces, goals, the holding rule, mirror symmetry of the two players, batch-size
independent seeding, scripted opponents, modes, reward shaping, curriculum / self-play hooks, bad config values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.envs import check_env_specs

from envs import make_env
from envs.hockey import BasicOpponent, HockeyConfig, HockeyEnv
from envs.hockey.constants import (
    DISCRETE_ACTIONS,
    DT,
    FRICTION_WALL,
    GOAL_BOX_X,
    GOAL_HALF_WIDTH,
    GOAL_X,
    HOLD_OFFSET,
    MAX_TIME_KEEP_PUCK,
    MIRROR_INDEX,
    MIRROR_SIGN,
    PLAYER_DAMPING,
    PLAYER_MASS,
    PUCK_DAMPING,
    PUCK_MASS,
    PUCK_X_LIMIT,
    PUCK_Y_LIMIT,
    RACKET_VERTICES,
    RESTITUTION,
    SHOT_SPEED,
    TABLE_HALF_LENGTH,
    TABLE_HALF_WIDTH,
    damping_factor,
    discrete_to_continuous,
)
from envs.hockey.contact import ROUNDING
from tests.envs.reset_check import assert_reset_matches_torchrl

DAMP = damping_factor(PUCK_DAMPING)  # a slow free puck's velocity factor per step
FRONT = RACKET_VERTICES[4][0] + ROUNDING  # a puck centre this far ahead of a racket (angle 0) touches its face
BACK = -RACKET_VERTICES[1][0] + ROUNDING  # ... this far behind it touches its pointed back


def state(p1=(-3.0, 0.0), p2=(3.0, 0.0), puck=(0.0, 0.0), puck_vel=(0.0, 0.0), a=(0.0, 0.0), v1=(0.0, 0.0),
          v2=(0.0, 0.0), w=(0.0, 0.0), hold=(0.0, 0.0)) -> torch.Tensor:
    """An agent observation ``[1, 18]`` (world frame, table-centred metres)."""
    return torch.tensor([[*p1, a[0], *v1, w[0], *p2, a[1], *v2, w[1], *puck, *puck_vel, *hold]])


def mirror(obs: torch.Tensor) -> torch.Tensor:
    return obs[:, list(MIRROR_INDEX)] * torch.tensor(MIRROR_SIGN)


def step(env: HockeyEnv, td: TensorDict, action) -> TensorDict:
    td["action"] = torch.as_tensor(action, dtype=td["observation"].dtype if not env.config.discrete_actions
                                   else torch.long).reshape(env.action_spec.shape)
    return env.step(td)["next"]


@pytest.fixture
def static_env() -> HockeyEnv:
    return HockeyConfig(opponent="static").make(1, 0)


# ---------------------------------------------------------------- specs, shapes


@pytest.mark.parametrize("kwargs", [{}, {"discrete_actions": True}, {"mode": "TRAIN_DEFENSE", "opponent": "strong"}])
def test_check_env_specs(kwargs):
    check_env_specs(HockeyConfig(**kwargs).make(num_envs=5, seed=0))
    check_env_specs(make_env(HockeyConfig(**kwargs), num_envs=3, seed=1))


def test_rollout_shapes():
    env = make_env(HockeyConfig(), num_envs=4, seed=0)
    out = env.rollout(30, break_when_any_done=False)
    assert out["observation"].shape == (4, 30, 18) == out["observation_opponent"].shape
    assert out["action"].shape == (4, 30, 4) and out["action"].dtype == torch.float32
    assert out["next", "reward"].shape == (4, 30, 1)
    for key in ("done", "terminated", "truncated"):
        assert out["next", key].shape == (4, 30, 1) and out["next", key].dtype == torch.bool
    for key in ("winner", "won", "lost", "drawn", "steps"):
        assert out["next", "info", key].shape == (4, 30, 1)
    assert torch.equal(out["next", "info", "steps"][:, :5, 0], torch.arange(1.0, 6.0).expand(4, 5))
    env = HockeyConfig(discrete_actions=True).make(2, 0)
    assert env.action_spec.shape == (2,) and env.action_spec.space.n == 8


# ---------------------------------------------------------------- physics on hand-built states


def test_puck_and_paddles_stay_inside_the_table():
    b = 256
    env = HockeyConfig(opponent="strong", max_steps=120).make(b, 0)
    td = env.reset()
    gen = torch.Generator().manual_seed(0)
    goals = wall_hits = 0
    for _ in range(400):
        td["action"] = torch.rand(b, 4, generator=gen) * 2 - 1
        out, td = env.step_and_maybe_reset(td)
        obs, goal = out["next", "observation"], out["next", "terminated"][:, 0]
        x, y = obs[:, 12].abs(), obs[:, 13].abs()
        mouth = y < GOAL_HALF_WIDTH
        assert (y <= PUCK_Y_LIMIT + 1e-5).all()
        assert ((x <= PUCK_X_LIMIT + 1e-5) | (mouth & (x <= GOAL_X + 1e-5)) | goal).all()
        assert (mouth & (x > GOAL_X) & (x < GOAL_X + 1.5))[goal].all()  # a goal: in the mouth, just past the line
        wall_hits += int(((y > PUCK_Y_LIMIT - 0.3) | (x > PUCK_X_LIMIT - 0.3)).sum())
        goals += int(goal.sum())
        for player, sign in ((0, 1.0), (6, -1.0)):  # rackets in their own half, their corners inside the table
            px, py = sign * obs[:, player], obs[:, player + 1]
            assert ((px >= RACKET_VERTICES[1][0] - GOAL_BOX_X - 1e-4) & (px <= 1e-5)).all()
            assert (py.abs() <= TABLE_HALF_WIDTH - 0.4 + 1e-4).all()
    assert goals > 50 and wall_hits > 1000


def test_wall_bounce_reflects_the_normal_component(static_env):
    """Restitution on the normal velocity; Box2D's friction on the tangential one: a puck without spin that hits
    a wall sliding fast enough to roll loses a third of its velocity along the wall (the rest spins it up)."""
    env = static_env
    td = env.force_state(state(puck=(0.0, 3.0), puck_vel=(5.0, 20.0)))
    nxt = step(env, td, [0, 0, 0, 0])
    x, y, vx, vy = nxt["observation"][0, 12:16].tolist()
    moved_y = 3.0 + 20.0 * DAMP * DT
    assert vx == pytest.approx(5.0 * DAMP * 2 / 3) and vy == pytest.approx(-RESTITUTION * 20.0 * DAMP)
    assert x == pytest.approx(5.0 * DAMP * DT)
    assert y == pytest.approx(PUCK_Y_LIMIT - RESTITUTION * (moved_y - PUCK_Y_LIMIT))
    assert env.spin.item() == pytest.approx(5.0 * DAMP * 2 / 3 / (13 / 60), rel=1e-4)  # rolls: its rim speed is vx
    # the end wall outside the goal mouth, and the long wall at the bottom
    td = env.force_state(state(puck=(3.6, 2.0), puck_vel=(20.0, -3.0)))
    vx, vy = step(env, td, [0, 0, 0, 0])["observation"][0, 14:16].tolist()
    assert vx == pytest.approx(-RESTITUTION * 20.0 * DAMP) and vy == pytest.approx(-3.0 * DAMP * 2 / 3)
    td = env.force_state(state(puck=(1.0, -3.0), puck_vel=(-2.0, -10.0)))
    vx, vy = step(env, td, [0, 0, 0, 0])["observation"][0, 14:16].tolist()
    assert vx == pytest.approx(-2.0 * DAMP * 2 / 3) and vy == pytest.approx(RESTITUTION * 10.0 * DAMP)
    # a steep bounce slides: friction takes FRICTION_WALL * (1 + e) times the normal speed only
    td = env.force_state(state(puck=(0.0, 3.1), puck_vel=(20.0, 3.0)))
    vx = step(env, td, [0, 0, 0, 0])["observation"][0, 14].item()
    assert vx == pytest.approx(20.0 * DAMP - FRICTION_WALL * (1 + RESTITUTION) * 3.0 * DAMP)


@pytest.mark.parametrize("side", [1, -1])
def test_goal_ends_the_episode_with_the_winner(static_env, side):
    env = static_env
    td = env.force_state(state(puck=(side * 3.7, 0.5), puck_vel=(side * 10.0, 0.0)))
    nxt = step(env, td, [0, 0, 0, 0])
    assert nxt["terminated"].item() and nxt["done"].item() and not nxt["truncated"].item()
    assert nxt["info", "winner"].item() == side
    assert nxt["info", "won"].item() == (side == 1) and nxt["info", "lost"].item() == (side == -1)
    assert nxt["info", "drawn"].item() == 0
    assert nxt["reward"].item() == pytest.approx(10.0 * side, abs=0.1)  # plus a little closeness shaping
    # the same shot just outside the mouth bounces off the end wall
    td = env.force_state(state(puck=(side * 3.6, 1.4), puck_vel=(side * 10.0, 0.0)))
    nxt = step(env, td, [0, 0, 0, 0])
    assert not nxt["done"].item() and nxt["observation"][0, 14].item() * side < 0


def test_time_limit_is_a_draw():
    env = HockeyConfig(opponent="static", max_steps=5).make(1, 0)
    td = env.force_state(state(puck=(1.0, 0.0)), t=3)
    assert not step(env, td, [0, 0, 0, 0])["done"].item()
    nxt = step(env, env.force_state(state(puck=(1.0, 0.0)), t=4), [0, 0, 0, 0])
    assert nxt["truncated"].item() and nxt["done"].item() and not nxt["terminated"].item()
    assert nxt["info", "drawn"].item() == 1 and nxt["info", "winner"].item() == 0


def test_paddle_bounces_the_puck(static_env):
    """Box2D finds a contact one step late: the puck that reaches a racket stops on it (it cannot pass through),
    and the next step is the contact, a catch if the puck moves towards the racket's goal, else a bounce."""
    env = static_env
    td = env.force_state(state(p1=(-2.0, 0.0), puck=(-2.0 + FRONT + 0.1, 0.0), puck_vel=(-10.0, 0.0)))
    nxt = step(env, td, [0, 0, 0, 0])  # the puck moves 0.2 m, onto the racket's face
    assert nxt["observation"][0, 16].item() == 0
    assert nxt["observation"][0, 12].item() == pytest.approx(-2.0 + FRONT, abs=1e-5)
    nxt = step(env, nxt, [0, 0, 0, 0])  # vx < 0.1: caught
    assert nxt["observation"][0, 16].item() == MAX_TIME_KEEP_PUCK
    # a puck coming from behind, moving towards the opponent at 10 m/s, bounces off the pointed back, uncaught;
    # the racket (58 kg against 1.03 kg) takes a little of the impulse
    td = env.force_state(state(p1=(-2.0, 0.0), puck=(-2.0 - BACK - 0.1, 0.0), puck_vel=(10.0, 0.0)))
    nxt = step(env, step(env, td, [0, 0, 0, 0]), [0, 0, 0, 0])
    assert nxt["observation"][0, 16].item() == 0
    bounced = 10.0 * DAMP * DAMP * (1 - (1 + RESTITUTION) / (1 + PUCK_MASS / PLAYER_MASS))
    assert nxt["observation"][0, 14].item() == pytest.approx(bounced, rel=1e-4)
    recoil = (10.0 * DAMP * DAMP - bounced) * PUCK_MASS / PLAYER_MASS
    assert nxt["observation"][0, 3].item() == pytest.approx(recoil, rel=1e-3)
    # a 50 m/s shot stops on a racket's face instead of passing through it
    td = env.force_state(state(p1=(-2.0, 0.0), puck=(-0.9, 0.1), puck_vel=(-50.0, 0.0), hold=(0.0, 0.0)))
    nxt = step(env, td, [0, 0, 0, 0])
    assert nxt["observation"][0, 12].item() == pytest.approx(-2.0 + FRONT, abs=1e-5)


def test_holding_rule(static_env):
    env = static_env
    td = env.force_state(state(p1=(-2.0, 0.0), puck=(-2.0 + FRONT + 0.02, 0.0), puck_vel=(-3.0, 0.0)))
    td = step(env, step(env, td, [0, 0, 0, 0]), [0, 0, 0, 0])
    assert td["observation"][0, 16].item() == MAX_TIME_KEEP_PUCK and td["observation"][0, 17].item() == 0
    # held: the puck sits on the racket's face while the holder moves and turns, moving with it
    for k in range(1, MAX_TIME_KEEP_PUCK - 1):
        td = step(env, td, [0.3, 0.3, 0.5, 0])
        obs = td["observation"][0]
        assert obs[16].item() == MAX_TIME_KEEP_PUCK - k
        face = torch.stack([obs[2].cos(), obs[2].sin()])
        torch.testing.assert_close(obs[12:14], obs[0:2] + face * HOLD_OFFSET, atol=1e-3, rtol=0)  # (a push moves it)
        assert (obs[14:16] - obs[3:5]).norm() < 2.0
    assert td["observation"][0, 1].item() > 0.3 and td["observation"][0, 2].item() > 0.5  # it moved and turned
    # after MAX_TIME_KEEP_PUCK - 1 held steps the puck is shot in the facing direction: 60 m/s on the velocity
    # the racket had at the step's start (the original pins the puck to the racket's velocity, then pushes it)
    before = td["observation"][0, 3:5].clone()
    td = step(env, td, [0, 0, 0, 0])
    obs = td["observation"][0]
    assert obs[16].item() == 0
    shot = obs[14:16] / DAMP - before
    assert shot.norm().item() == pytest.approx(SHOT_SPEED, rel=1e-4)
    assert torch.atan2(shot[1], shot[0]).item() == pytest.approx(obs[2].item(), abs=1e-4)
    # shoot > 0.5 releases it at once; 0.5 does not
    td = env.force_state(state(p1=(-2.0, 1.0), a=(-0.4, 0.0), puck=(0.0, 0.0), hold=(9.0, 0.0)))
    td = step(env, td, [0, 0, 0, 0.5])
    assert td["observation"][0, 16].item() == 8
    td = step(env, td, [0, 0, 0, 0.6])
    obs = td["observation"][0]
    assert obs[16].item() == 0 and obs[14].item() > 25 and obs[15].item() < -20  # angle -0.4: down-right
    # the opponent's holding time is its own, mirrored: player 2 holds and shoots towards the agent's goal
    env2 = HockeyConfig(opponent="weak").make(1, 0)
    td = env2.force_state(state(p2=(2.0, 0.0), puck=(0.0, 0.0), hold=(0.0, 6.0)))
    td = step(env2, td, [0, 0, 0, 0])  # weak shoots at 0 < hold < 7
    assert td["observation"][0, 17].item() == 0 and td["observation"][0, 14].item() < -25
    assert td["observation_opponent"][0, 16].item() == 0 and td["observation_opponent"][0, 14].item() > 25


def test_no_catch_without_keep_mode():
    env = HockeyConfig(opponent="static", keep_mode=False).make(1, 0)
    td = env.force_state(state(p1=(-2.0, 0.0), puck=(-2.0 + FRONT + 0.02, 0.0), puck_vel=(-3.0, 0.0)))
    td = step(env, step(env, td, [0, 0, 0, 0]), [0, 0, 0, 0])
    assert td["observation"][0, 16].item() == 0 and td["observation"][0, 14].item() > 2.0  # bounced instead


# ---------------------------------------------------------------- symmetry


def test_opponent_observation_is_the_mirror():
    env = HockeyConfig(opponent="static").make(1, 0)
    sym = state(p1=(-2.0, 0.7), p2=(2.0, -0.7), v1=(1.0, 0.5), v2=(-1.0, -0.5), a=(0.3, 0.3), w=(1.5, 1.5),
                hold=(4.0, 4.0))
    td = env.force_state(sym)
    torch.testing.assert_close(td["observation_opponent"], td["observation"], rtol=0, atol=0)
    obs = state(p1=(-2.0, 0.7), p2=(1.0, 2.0), v1=(1.0, 0.5), v2=(3.0, -4.0), a=(0.3, -0.2), w=(1.5, -2.0),
                puck=(0.5, -1.0), puck_vel=(7.0, 3.0), hold=(0.0, 5.0))
    td = env.force_state(obs)
    expected = [-1.0, -2.0, -0.2, -3.0, 4.0, -2.0, 2.0, -0.7, 0.3, -1.0, -0.5, 1.5, -0.5, 1.0, -7.0, -3.0, 5.0, 0.0]
    assert td["observation_opponent"][0].tolist() == pytest.approx(expected)


def test_dynamics_are_symmetric_between_the_players():
    """Play a state with actions (a1, a2) and the mirrored state with (a2, a1): each player's view in one game is
    the other player's view in the other, step after step (paddles, puck, bounces, catches, shots, goals)."""
    gen = torch.Generator().manual_seed(3)
    actions = (torch.rand(80, 2, 4, generator=gen) * 2 - 1).round()  # -1, 0, 1: strong moves, some shots
    start = state(p1=(-1.5, 0.4), p2=(2.5, -1.0), v1=(2.0, 0.0), puck=(-0.6, 0.3), puck_vel=(-8.0, 3.0), a=(0.2, -0.1))
    games = []
    for first, opening in ((0, start), (1, mirror(start))):
        env = HockeyConfig(opponent="static").make(1, 0)
        env.set_opponent("policy")
        env.reset()
        t = [0]
        env.set_opponent_policy(lambda obs, first=first, t=t: actions[t[0], 1 - first].unsqueeze(0))
        td = env.force_state(opening)
        views = []
        for k in range(80):
            t[0] = k
            td = step(env, td, actions[k, first])
            views.append((td["observation"].clone(), td["observation_opponent"].clone(), td["reward"].clone()))
            if td["done"].item():
                break
        games.append(views)
    assert len(games[0]) == len(games[1]) > 10
    caught = 0
    for (obs_a, opp_a, _), (obs_b, opp_b, _) in zip(*games, strict=True):
        torch.testing.assert_close(obs_a, opp_b, atol=1e-4, rtol=0)
        torch.testing.assert_close(opp_a, obs_b, atol=1e-4, rtol=0)
        caught += int(obs_a[0, 16:18].sum() > 0)
    assert caught > 0  # the puck was held at some point


# ---------------------------------------------------------------- seeding


@pytest.mark.parametrize("kwargs", [{"max_steps": 30},
                                    {"mode": "TRAIN_DEFENSE", "opponent": "strong", "max_steps_train": 20}])
def test_rows_do_not_depend_on_batch_size(kwargs):
    cfg = HockeyConfig(**kwargs)
    b, steps = 256, 70
    gen = torch.Generator().manual_seed(0)
    actions = torch.rand(steps, b, 4, generator=gen) * 2 - 1

    def run(env, acts):
        td, seen = env.reset(), []
        for a in acts:
            td["action"] = a
            out, td = env.step_and_maybe_reset(td)
            seen.append(out.clone())
        return torch.stack(seen, 1)

    out = run(cfg.make(num_envs=b, seed=100), actions)
    assert out["next", "done"].sum() > b  # resets happened
    for row in (0, 1, 37, 255):
        single = run(cfg.make(num_envs=1, seed=100 + row), actions[:, row : row + 1])
        assert (single == out[row : row + 1]).all(), row


def test_resume_state_continues_the_games_in_progress_exactly():
    """Saved mid-game (rows under different opponents, pending settings that apply at the next reset), loaded into a
    new env: its first reset hands out the saved state and 130 more steps, with games ending and new ones starting,
    equal the saved env's own, entry for entry. A state without ``games`` (an older checkpoint) restarts each row's
    episode in progress instead."""
    def play_on(env, td, actions):
        seen = []
        for action in actions:
            td["action"] = action
            out, td = env.step_and_maybe_reset(td)
            seen.append(out.clone())
        return torch.stack(seen, 1), td

    actions = torch.rand(160, 6, 4, generator=torch.Generator().manual_seed(3)) * 2 - 1
    env = HockeyConfig(max_steps=50).make(num_envs=6, seed=11)
    env.set_opponent(["weak", "strong", "static", "strong", "weak", "static"])
    td = env.reset()
    env.set_opponent("strong", rows=[0, 2])
    env.set_mode("TRAIN_DEFENSE", rows=[5])
    _, td = play_on(env, td, actions[:30])
    saved = env.resume_state()
    expected, _ = play_on(env, td, actions[30:])
    fresh = HockeyConfig(max_steps=50).make(num_envs=6, seed=11)
    assert fresh.load_resume_state(saved)
    start = fresh.reset()
    assert (start["observation"] == td["observation"]).all()
    assert (start["episode_reward"] == td["episode_reward"]).all()
    got, _ = play_on(fresh, start, actions[30:])
    assert expected["next", "done"].sum() >= 6  # games ended and new ones started in the window
    assert (got["next"] == expected["next"]).all()
    # an older checkpoint's state: each row's episode in progress starts again
    older = {k: v for k, v in saved.items() if k != "games"}
    restart = HockeyConfig(max_steps=50).make(num_envs=6, seed=11)
    assert not restart.load_resume_state(older)
    assert (restart.reset()["info", "steps"] == 0).all()


# ---------------------------------------------------------------- opponents


def play(agent, opponent: str, steps: int = 400, b: int = 256) -> tuple[int, int, int]:
    """(agent wins, losses, draws) over the episodes that end in ``steps`` steps of ``b`` rows."""
    env = HockeyConfig(opponent=opponent).make(b, 0)
    td = env.reset()
    gen = torch.Generator().manual_seed(0)
    wins = losses = draws = 0
    for _ in range(steps):
        td["action"] = agent(td["observation"]) if agent is not None else torch.rand(b, 4, generator=gen) * 2 - 1
        out, td = env.step_and_maybe_reset(td)
        winner = out["next", "info", "winner"][out["next", "done"]]
        wins, losses = wins + int((winner > 0).sum()), losses + int((winner < 0).sum())
        draws += int((winner == 0).sum())
    return wins, losses, draws


def test_weak_opponent_beats_a_random_policy():
    wins, losses, draws = play(None, "weak")
    assert losses > 2 * wins and losses > draws


def test_strong_scripted_player_beats_the_weak_one():
    wins, losses, _ = play(BasicOpponent(weak=False), "weak")
    assert wins > losses


def test_set_opponent_per_row_and_policy_hook():
    env = HockeyConfig(opponent="static").make(3, 0)
    env.reset()
    seen = []

    def policy(obs):
        seen.append(obs.shape)
        return torch.tensor([[1.0, 0.0, 0.0, 0.0]]).expand(obs.shape[0], 4)

    env.set_opponent_policy(policy)
    env.set_opponent(["policy", "weak"], rows=[0, 2])
    assert env.opponent.tolist() == [0, 0, 0]  # pending until the next reset
    td = env.reset()
    assert env.opponent.tolist() == [3, 0, 1]
    td = step(env, td, torch.zeros(3, 4))
    assert seen == [(1, 18)]
    vx = td["observation"][:, 9]
    assert vx[0] < -1.0 and vx[1] == 0  # the policy's +x force is -x in the world; static stands still
    env.set_opponent_policy(lambda obs: torch.full((obs.shape[0],), 2, dtype=torch.long))  # discrete: +x
    td = step(env, td, torch.zeros(3, 4))
    assert td["observation"][0, 9] < vx[0]
    with pytest.raises(ValueError, match=r"env\.opponent"):
        env.set_opponent("expert")
    with pytest.raises(ValueError, match=r"env\.mode"):
        env.set_mode(["NORMAL", "NORMAL"], rows=[0, 1, 2])


# ---------------------------------------------------------------- modes


def test_mode_starts():
    b = 256
    env = HockeyConfig(mode="TRAIN_SHOOTING").make(b, 0)
    obs = env.reset()["observation"]
    assert ((obs[:, 12] >= -2) & (obs[:, 12] <= -1) & (obs[:, 13].abs() <= 1)).all()
    assert (obs[:, 14:16] == 0).all() and (obs[:, 0:2] == torch.tensor([-3.0, 0.0])).all()
    assert obs[:, 6].std() > 0.5 and obs[:, 7].std() > 0.5  # player 2 anywhere in 4W/5 + U(-W/3, W/6) ...
    assert ((obs[:, 6] >= -1 / 3 - 1e-5) & (obs[:, 6] <= 14 / 3 + 1e-5) & (obs[:, 7].abs() <= 2)).all()
    assert (env._max_steps == 80).all()
    env = HockeyConfig(mode="TRAIN_DEFENSE").make(b, 0)
    obs = env.reset()["observation"]
    x, y = obs[:, 12:14].unbind(-1)
    assert ((x >= 0) & (x <= 10 / 3) & (y.abs() <= PUCK_Y_LIMIT)).all()
    assert (obs[:, 14:16] == 0).all()  # as in the original, the shot's force acts in the first step
    vx, vy = env._kick
    assert torch.allclose(torch.hypot(vx, vy), torch.tensor(SHOT_SPEED)) and (vx < 0).all()
    aim = y + vy / vx * (-5.0 - x)  # where the shot crosses x = -W/2
    assert (aim.abs() <= 0.6 * GOAL_HALF_WIDTH + 1e-4).all()
    env = HockeyConfig().make(b, 0)  # NORMAL: the puck starts on alternating sides, at rest
    first, second = env.reset()["observation"], env.reset()["observation"]
    assert (first[:, 12] < 0).all() and (second[:, 12] > 0).all() and (first[:, 14:16] == 0).all()
    assert (first[:, 6:8] == torch.tensor([3.0, 0.0])).all()


def test_defense_shots_reach_the_goal_against_a_static_agent():
    env = HockeyConfig(mode="TRAIN_DEFENSE", opponent="static").make(64, 0)
    env.reset()
    td = env.reset()  # TRAIN_DEFENSE ignores the alternation
    goals = torch.zeros(64, dtype=torch.bool)
    for _ in range(20):
        td = step(env, td, torch.zeros(64, 4))
        goals |= td["info", "lost"][:, 0].bool()
    assert 0.1 < goals.float().mean() < 0.6  # the agent standing at (-3, 0), player 2 in the way, block many


def test_set_mode_applies_at_the_next_reset():
    env = HockeyConfig().make(3, 0)
    env.reset()
    env.set_mode("TRAIN_DEFENSE", rows=torch.tensor([False, True, False]))
    assert env.mode.tolist() == [0, 0, 0]
    env.reset()
    assert env.mode.tolist() == [0, 2, 0] and env._max_steps.tolist() == [250, 80, 250]
    assert env._kick[0, 1] < -20 and (env._kick[0, [0, 2]] == 0).all()


# ---------------------------------------------------------------- actions, rewards


def test_discrete_actions():
    assert discrete_to_continuous(torch.tensor([0, 2, 3, 6, 7])).tolist() == [
        [0, 0, 0, 0], [1, 0, 0, 0], [0, -1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    assert DISCRETE_ACTIONS.shape == (8, 4)
    env = HockeyConfig(opponent="static", discrete_actions=True).make(1, 0)
    td = step(env, env.force_state(state(p1=(-2.0, 0.0))), 2)
    assert td["observation"][0, 3].item() == pytest.approx(6000 / 58 * DT * damping_factor(PLAYER_DAMPING))
    td = env.force_state(state(p1=(-2.0, 0.0), hold=(10.0, 0.0)))
    assert step(env, td, 7)["observation"][0, 14].item() > 25  # shoot


def test_reward_shaping_terms_and_runtime_weights():
    env = HockeyConfig(opponent="static").make(1, 0)
    opening = state(p1=(-3.0, 0.0), puck=(-1.0, 0.0), puck_vel=(-2.0, 0.0))
    nxt = step(env, env.force_state(opening), [0, 0, 0, 0])
    dist = abs(-3.0 - nxt["observation"][0, 12].item())
    assert nxt["reward"].item() == pytest.approx(-30.0 / (250 / 60 * 250 / 2) * dist, rel=1e-5)
    env.set_shaping(w_closeness=0.0, w_direction=2.0)
    nxt = step(env, env.force_state(opening), [0, 0, 0, 0])
    assert nxt["reward"].item() == pytest.approx(2.0 * nxt["observation"][0, 14].item() / (250 * 25))
    env.set_shaping(w_direction=0.0, w_touch=0.5)
    catch = state(p1=(-2.0, 0.0), puck=(-2.0 + FRONT + 0.02, 0.0), puck_vel=(-3.0, 0.0))
    reached = step(env, env.force_state(catch), [0, 0, 0, 0])
    assert reached["reward"].item() == 0.0 and step(env, reached, [0, 0, 0, 0])["reward"].item() == 0.5
    assert env.shaping == {"r_win": 10.0, "w_closeness": 0.0, "w_touch": 0.5, "w_direction": 0.0}
    with pytest.raises(ValueError, match=r"env\.w_touch"):
        env.set_shaping(w_touch=-1.0)
    env = HockeyConfig(opponent="static", r_win=3.0, w_closeness=0.0).make(1, 0)
    nxt = step(env, env.force_state(state(puck=(3.8, 0.0), puck_vel=(10.0, 0.0))), [0, 0, 0, 0])
    assert nxt["reward"].item() == 3.0


# ---------------------------------------------------------------- config errors


@pytest.mark.parametrize("kwargs,key", [
    ({"mode": "TRAIN_PASSING"}, "env.mode"),
    ({"mode": 1}, "env.mode"),
    ({"opponent": "expert"}, "env.opponent"),
    ({"opponent": "policy"}, "env.opponent"),
    ({"w_closeness": -1.0}, "env.w_closeness"),
    ({"w_touch": -0.1}, "env.w_touch"),
    ({"w_direction": float("nan")}, "env.w_direction"),
    ({"r_win": -10}, "env.r_win"),
    ({"max_steps": 0}, "env.max_steps"),
    ({"max_steps_train": 2.5}, "env.max_steps_train"),
    ({"discrete_actions": "yes"}, "env.discrete_actions"),
])
def test_bad_config_names_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        HockeyConfig(**kwargs)


def test_error_lists_the_allowed_values():
    with pytest.raises(ValueError, match=r"env\.mode='FOO'.*NORMAL.*TRAIN_SHOOTING.*TRAIN_DEFENSE"):
        HockeyConfig(mode="FOO")
    with pytest.raises(ValueError, match=r"env\.opponent='expert'.*static.*weak.*strong"):
        HockeyConfig(opponent="expert")
    with pytest.raises(ValueError, match="num_envs"):
        HockeyConfig().make(0, 0)


def test_defaults_follow_the_original():
    cfg = HockeyConfig()
    assert (cfg.mode, cfg.opponent, cfg.max_steps, cfg.max_steps_train, cfg.r_win) == ("NORMAL", "weak", 250, 80, 10.0)
    assert math.isclose(GOAL_X, 232 / 60) and MAX_TIME_KEEP_PUCK == 15


def test_render_game_draws_the_players_and_puck_where_the_observation_puts_them():
    from envs.hockey.render import _AGENT, _OPPONENT, _PUCK, render_game

    env = make_env(HockeyConfig(), 1, 0)
    observation = torch.stack([env.reset()["observation"][0]] * 3)
    observation[:, 12:14] = torch.tensor([1.0, -2.0])  # the puck at (1, -2) m
    strip = render_game(observation, frames=3, pixels_per_metre=10)
    height, width = 67, 78  # the 7.83 x 6.67 m table at 10 px/m
    assert strip.shape == (height, 3 * (width + 2) - 2, 3) and strip.dtype == np.uint8

    def pixel(x, y, frame=0):  # metres -> the pixel of that point in snapshot ``frame``
        return tuple(strip[int((TABLE_HALF_WIDTH - y) * 10), frame * (width + 2) + int((x + TABLE_HALF_LENGTH) * 10)])

    agent, opponent = observation[0, 0:2].tolist(), observation[0, 6:8].tolist()
    assert pixel(*agent) == _AGENT and pixel(*opponent) == _OPPONENT and pixel(1.0, -2.0, frame=2) == _PUCK
    grid = render_game(observation, frames=3, pixels_per_metre=10, columns=2)  # two rows: 2 + 1 snapshots
    assert grid.shape == (2 * (height + 2) - 2, 2 * (width + 2) - 2, 3)
    assert np.array_equal(grid[:height, :width], strip[:, :width]) and (grid[height + 2:, width + 2:] == 255).all()
    with pytest.raises(ValueError, match="observation"):
        render_game(observation[:, :5])


def test_own_partial_reset_equals_torchrls():
    """HockeyEnv.maybe_reset (the reset's entries replace the step's) gives what TorchRL's reset-and-merge gives,
    step after step, with games ending at different steps."""
    config = HockeyConfig(max_steps=60, max_steps_train=60)
    assert_reset_matches_torchrl(lambda: config.make(num_envs=16, seed=5),
                                 lambda td, generator: torch.rand(16, 4, generator=generator) * 2 - 1)
