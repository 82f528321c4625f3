"""Puck against racket in continuous time: over thousands of random shots (every direction, speeds up to the
shot speed, still and moving rackets) the puck is caught or deflected, and its centre never enters the racket,
let alone passes through it; and the swept test in ``envs.hockey.contact`` agrees with a dense sampling of the
path."""

from __future__ import annotations

import math

import pytest
import torch

import envs.hockey.puck as hockey_puck
from envs.hockey import HockeyConfig
from envs.hockey.constants import MAX_ANGLE, MAX_TIME_KEEP_PUCK, SHOT_SPEED
from envs.hockey.contact import ROUNDING, distance_to_racket, sweep, sweep_near

CASES = 4096


def random_shots(moving: bool, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Agent observations ``[N, 18]``: player 1's racket near (-2, 0) at a random angle (still, or moving at up to
    8 m/s and turning at up to 5 rad/s), the puck 1.6 m away in any direction, shot at up to ``SHOT_SPEED`` at a
    point of the racket polygon (so its straight path crosses the racket); player 2 far away. Also returns the
    shot direction ``[N, 2]``."""
    g = torch.Generator().manual_seed(seed)
    n = CASES
    u = lambda *shape: torch.rand(*shape, generator=g)  # noqa: E731
    obs = torch.zeros(n, 18)
    obs[:, 0], obs[:, 1] = -2.0 + (u(n) - 0.5) * 0.4, (u(n) - 0.5) * 0.4
    obs[:, 2] = (u(n) * 2 - 1) * MAX_ANGLE
    if moving:
        speed, heading = u(n) * 8.0, u(n) * 2 * math.pi
        obs[:, 3], obs[:, 4], obs[:, 5] = speed * heading.cos(), speed * heading.sin(), (u(n) * 2 - 1) * 5.0
    obs[:, 6] = 3.0
    # a target point inside the polygon (its front box, x in [-0.2, 0.1], |y| < 0.4, turned by the angle)
    lx, ly = -0.2 + u(n) * 0.3, (u(n) * 2 - 1) * 0.4
    cos, sin = obs[:, 2].cos(), obs[:, 2].sin()
    target = torch.stack([obs[:, 0] + lx * cos - ly * sin, obs[:, 1] + lx * sin + ly * cos], -1)
    away = u(n) * 2 * math.pi
    obs[:, 12:14] = target + 1.6 * torch.stack([away.cos(), away.sin()], -1)
    direction = -torch.stack([away.cos(), away.sin()], -1)
    obs[:, 14:16] = direction * (1.0 + u(n, 1) * (SHOT_SPEED - 1.0))
    return obs, direction


def play(obs: torch.Tensor, contact: str, steps: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    """Whether each shot touched the racket (caught, or its velocity turned away from its free flight) and whether
    its centre entered the racket polygon before that (sampled densely along each step's path)."""
    env = HockeyConfig(mode="NORMAL", opponent="static", contact=contact, w_closeness=0.0).make(obs.shape[0], 0)
    td = env.force_state(obs)
    touched = torch.zeros(obs.shape[0], dtype=torch.bool)
    through = torch.zeros(obs.shape[0], dtype=torch.bool)
    for _ in range(steps):
        before = td["observation"].clone()
        td["action"] = torch.zeros(obs.shape[0], 4)
        td = env.step(td)["next"]
        after = td["observation"]
        caught = after[:, 16] == MAX_TIME_KEEP_PUCK
        v0, v1 = before[:, 14:16], after[:, 14:16]
        turned = (v0 * v1).sum(-1) < 0.99 * v0.norm(dim=-1) * v1.norm(dim=-1)  # free flight only slows down
        touched |= caught | turned
        # the puck's centre segment this step against the racket at its end pose, densely sampled
        s = torch.linspace(0, 1, 64).view(-1, 1)
        path = before[:, 12:14].unsqueeze(0) * (1 - s.unsqueeze(-1)) + after[:, 12:14].unsqueeze(0) * s.unsqueeze(-1)
        rel = path - after[:, 0:2]
        cos, sin = after[:, 2].cos(), after[:, 2].sin()
        lx, ly = rel[..., 0] * cos + rel[..., 1] * sin, -rel[..., 0] * sin + rel[..., 1] * cos
        through |= ~touched & (distance_to_racket(lx, ly) <= 0).any(0)
    return touched, through


@pytest.mark.parametrize("moving", [False, True], ids=["still", "moving"])
def test_swept_contact_never_lets_a_shot_through(moving):
    obs, _ = random_shots(moving, seed=1 + moving)
    touched, through = play(obs, "swept")
    assert not through.any(), f"{int(through.sum())} of {CASES} shots went into a racket"
    if not moving:  # a still racket: every shot that reaches it within the 6 steps is caught or deflected
        reaches = obs[:, 14:16].norm(dim=-1) > 20.0
        assert touched[reaches].all()


def test_the_check_finds_the_discrete_tests_penetrations():
    """Box2D's discrete test (``contact: discrete``) lets a fast puck's centre into the racket before the contact
    (and through its thin parts): the same check finds it, so the swept result above is not vacuous."""
    obs, _ = random_shots(False, seed=1)
    _, through = play(obs, "discrete")
    assert through.sum() > 10


def test_sweep_agrees_with_dense_sampling():
    g = torch.Generator().manual_seed(0)
    n = 4000
    a = (torch.rand(n, 2, generator=g) * 2 - 1) * 1.2
    d = (torch.rand(n, 2, generator=g) * 2 - 1) * 1.5
    touch, when, nx, ny = sweep(a[:, 0], a[:, 1], d[:, 0], d[:, 1])
    s = torch.linspace(0, 1, 1001).view(-1, 1)
    dist = distance_to_racket(a[:, 0] + d[:, 0] * s, a[:, 1] + d[:, 1] * s)  # [1001, n]
    inside = dist < ROUNDING
    first = torch.where(inside.any(0), inside.float().argmax(0).float() / 1000, torch.ones(n))
    assert torch.equal(touch, inside.any(0) | (dist[0] < ROUNDING))
    hit = touch & (dist[0] >= ROUNDING)
    assert (when[hit] - first[hit]).abs().max() < 2.5e-3  # the first touching time, to the sampling step
    assert torch.allclose(torch.hypot(nx, ny)[touch], torch.ones(int(touch.sum())), atol=1e-5)
    # the normal points away from the racket: a small step along it increases the distance
    at_x, at_y = a[:, 0] + d[:, 0] * when, a[:, 1] + d[:, 1] * when
    outward = distance_to_racket(at_x + nx * 1e-2, at_y + ny * 1e-2) > distance_to_racket(at_x, at_y)
    assert outward[hit].float().mean() > 0.999
    # the env's sweep_near skips the paths that cannot reach the racket: the same answers
    near = sweep_near(a[:, 0], a[:, 1], d[:, 0], d[:, 1])
    assert torch.equal(near[0], touch) and torch.equal(near[1], when)
    assert torch.equal(near[2][touch], nx[touch]) and torch.equal(near[3][touch], ny[touch])


def test_sweeping_all_elements_gives_the_selected_sweep(monkeypatch):
    """``sweep_near(select=False)``, what a GPU runs (no ``nonzero``, no host read), answers as the CPU's selected
    sweep: on random paths with ``also`` flags, and over whole episodes of shots at the racket (the env's
    observations, step by step)."""
    g = torch.Generator().manual_seed(3)
    a = (torch.rand(4000, 2, generator=g) * 2 - 1) * 1.2
    d = (torch.rand(4000, 2, generator=g) * 2 - 1) * 1.5
    also = torch.rand(4000, generator=g) < 0.05
    selected = sweep_near(a[:, 0], a[:, 1], d[:, 0], d[:, 1], also, select=True)
    dense = sweep_near(a[:, 0], a[:, 1], d[:, 0], d[:, 1], also, select=False)
    assert selected[0].any() and not selected[0].all()
    for s, t in zip(selected, dense, strict=True):
        assert torch.equal(s, t)
    obs, _ = random_shots(True, seed=2)
    runs = []
    for select in (True, False):
        monkeypatch.setattr(hockey_puck, "sweep_near", lambda *args, _s=select: sweep_near(*args, select=_s))
        env = HockeyConfig(mode="NORMAL", opponent="weak", w_closeness=0.0).make(obs.shape[0], 0)
        td, seen = env.force_state(obs), []
        for _ in range(8):
            td["action"] = torch.zeros(obs.shape[0], 4)
            td = env.step(td)["next"]
            seen.append(td["observation"].clone())
        runs.append(torch.stack(seen))
    assert torch.equal(runs[0], runs[1])
