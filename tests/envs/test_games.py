"""Emulated games (``envs.games``): specs and the preprocessed observations, what the preprocessing options change,
the raw score beside the clipped reward, lives, the one-emulator-per-process rule of stable-retro, and the errors
for a bad game, a missing ROM or a bad action set, raised before any work."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from envs import make_env, unwrap
from envs.games import GameConfig, ResizeFrames, emulators
from tests.pipelines.conftest import REPO

AIRSTRIKER = "Airstriker-Genesis-v0"
PONG = "ALE/Pong-v5"


def _actions(env, steps: int, seed: int = 0) -> torch.Tensor:
    """A fixed random action sequence ``[steps, B]``, the same for every row."""
    n = env.action_spec.space.n
    actions = torch.randint(n, (steps, 1), generator=torch.Generator().manual_seed(seed))
    return actions.expand(steps, *env.batch_size)


def _play(env, actions: torch.Tensor) -> torch.Tensor:
    """The stacked observations ``[steps + 1, B, C, H, W]`` of playing ``actions`` from a reset."""
    td = env.reset()
    frames = [td["pixels"].clone()]
    for action in actions:
        td["action"] = action
        _, td = env.step_and_maybe_reset(td)
        frames.append(td["pixels"].clone())
    return torch.stack(frames)


@pytest.mark.parametrize("game, rows", [(PONG, 2), (AIRSTRIKER, 1), (AIRSTRIKER, 2)])
def test_specs_hold_and_observations_are_stacks_of_four_84x84_uint8_frames(game, rows):
    """Pong (ALE, in this process), Airstriker with one row (in this process) and two (one process each)."""
    env = make_env(GameConfig(game), rows, 0)
    try:
        check_env_specs(env)
        td = env.reset()
        assert td["pixels"].shape == (rows, 4, 84, 84) and td["pixels"].dtype == torch.uint8
        td["action"] = env.action_spec.rand()
        step = env.step(td)["next"]
        assert step["pixels"].shape == (rows, 4, 84, 84) and step["pixels"].dtype == torch.uint8
        # the newest frame is last: the stack shifts by one per step
        torch.testing.assert_close(step["pixels"][:, :3], td["pixels"][:, 1:])
        assert isinstance(unwrap(env).vector, gym.vector.AsyncVectorEnv) == (
            game == AIRSTRIKER and rows > 1)
    finally:
        env.close()


def test_rewards_are_clipped_for_the_loss_while_the_game_score_stays_raw():
    env = make_env(GameConfig(AIRSTRIKER), 1, 0)
    try:
        td = env.rollout(400, break_when_any_done=False)
    finally:
        env.close()
    reward, score = td["next", "reward"], td["next", "episode_reward"]
    assert reward.abs().max() <= 1 and reward.sum() > 0
    assert score.max() > reward.cumsum(1).max()  # Airstriker scores 10s and 100s of points per hit
    torch.testing.assert_close(td["next", "info", "game_score"], score)
    unclipped = make_env(GameConfig(AIRSTRIKER, clip_rewards=False), 1, 0)
    try:
        raw = unclipped.rollout(400, break_when_any_done=False)
    finally:
        unclipped.close()
    assert raw["next", "reward"].max() > 1


def test_a_lost_life_is_an_end_of_life_but_not_the_end_of_the_game():
    env = make_env(GameConfig(AIRSTRIKER, noop_max=0), 1, 0)
    try:
        td = env.rollout(1500, break_when_any_done=True)
    finally:
        env.close()
    eol, done = td["next", "end_of_life"].flatten(), td["next", "done"].flatten()
    assert eol[~done].any(), "a random player loses a life within 1,500 steps"
    assert (eol | ~done).all()  # the game's end is an end of life too


def test_noop_starts_and_sticky_actions_change_trajectories_and_seeds_reproduce_them():
    """Pong rows seeded differently play the same actions differently with no-op starts and alike without (Pong
    is deterministic); sticky actions change what the same actions do; the same seed plays the same frames."""
    def play(seed: int, **options) -> torch.Tensor:
        env = make_env(GameConfig(PONG, **options), 2, seed)
        try:
            return _play(env, _actions(env, 60))
        finally:
            env.close()

    no_noops = play(0, noop_max=0)
    assert torch.equal(no_noops[:, 0], no_noops[:, 1])
    noops = play(0)
    assert not torch.equal(noops[:, 0], noops[:, 1])
    torch.testing.assert_close(play(0), noops)
    assert not torch.equal(play(1), noops)
    sticky = play(0, noop_max=0, sticky_actions=0.25)
    assert not torch.equal(sticky, no_noops)


def test_noop_starts_vary_the_start_of_a_retro_game():
    env = make_env(GameConfig(AIRSTRIKER, noop_max=30), 2, 0)
    try:
        first = env.reset()["pixels"]
    finally:
        env.close()
    assert not torch.equal(first[0], first[1])


def test_a_retro_env_steps_in_this_process_only_while_no_other_does():
    """stable-retro allows one emulator per process: a second one-row env built while the first is open runs its
    emulator in a child process; closing the first gives the process's emulator back."""
    config = GameConfig(AIRSTRIKER)
    first, second = make_env(config, 1, 0), make_env(config, 1, 1)
    try:
        first.reset(), second.reset()
        assert not isinstance(unwrap(first).vector, gym.vector.AsyncVectorEnv)
        assert isinstance(unwrap(second).vector, gym.vector.AsyncVectorEnv)
    finally:
        first.close()
        second.close()
    third = make_env(config, 1, 2)
    try:
        third.reset()
        assert not isinstance(unwrap(third).vector, gym.vector.AsyncVectorEnv)
    finally:
        third.close()


def test_resize_is_an_area_average():
    image = torch.randint(0, 255, (3, 1, 168, 168), dtype=torch.uint8)
    out = ResizeFrames(84)._apply_transform(image)
    expected = image.float().reshape(3, 1, 84, 2, 84, 2).mean((3, 5)).round().to(torch.uint8)
    assert out.shape == (3, 1, 84, 84) and out.dtype == torch.uint8
    torch.testing.assert_close(out, expected, atol=1, rtol=0)  # (half-way values may round either way)


def test_render_frame_is_the_emulators_screen():
    env = make_env(GameConfig(PONG), 1, 0)
    try:
        env.reset()
        frame = unwrap(env).render_frame(0)
    finally:
        env.close()
    assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8


@pytest.mark.parametrize("game, message", [
    ("Airstriker-Genesis", "closest known: Airstriker-Genesis-v0"),
    ("ALE/Pongg-v5", "closest known: ALE/Pong-v5"),
    ("Qwxzv", "ALE games are named ALE/<Name>-v5"),
    ("Jackal-Nes-v0", "its ROM is not installed"),
])
def test_a_game_that_cannot_be_played_is_named_before_any_work(game, message):
    with pytest.raises(ValueError, match="env.game=") as err:
        GameConfig(game)
    assert message in str(err.value)
    if "ROM" in message:
        assert emulators.IMPORT_COMMAND in str(err.value)


@pytest.mark.parametrize("options, message", [
    ({"actions": [[], ["LEFT", "FIRE"]]}, "['FIRE'] are not buttons of the Genesis (allowed: B, A, MODE"),
    ({"actions": [["B"], ["LEFT"]]}, "the first combination must press no button"),
    ({"game": PONG, "actions": [[], ["UP"]]}, "env.actions is for stable-retro games only"),
    ({"sticky_actions": 1.0}, "env.sticky_actions=1.0 is not allowed"),
    ({"frame_skip": 0}, "env.frame_skip=0 is not allowed"),
])
def test_bad_options_are_named(options, message):
    """Values out of range stop the config; an action set the console lacks, the first env built from it (one
    emulator started to read its buttons: ``pipelines.fit`` builds a probe env before any work)."""
    with pytest.raises(ValueError) as err:
        make_env(GameConfig(**{"game": AIRSTRIKER, **options}), 1, 0).close()
    assert message in str(err.value)


def test_the_default_action_set_presses_console_buttons():
    combos = emulators.default_action_set("Genesis")
    assert combos[0] == [] and ["A"] in combos and ["LEFT", "A"] in combos and len(combos) == 12
    env = make_env(GameConfig(AIRSTRIKER, actions=[[], ["LEFT"], ["RIGHT"]]), 1, 0)
    try:
        assert env.action_spec.space.n == 3
    finally:
        env.close()


def test_ales_native_vector_backend_plays_the_same_games():
    """``backend: ale_vector`` (ALE's C++ preprocessing) against the emulators under the TorchRL transforms, Pong
    without no-ops: the same rewards and episode ends for the same actions, and frames that differ only by the
    resize's rounding."""
    def play(backend: str):
        env = make_env(GameConfig(PONG, noop_max=0, backend=backend, ale_threads=1), 2, 0)
        try:
            actions = _actions(env, 300)
            td = env.reset()
            frames, rewards = [], []
            for action in actions:
                td["action"] = action
                step, td = env.step_and_maybe_reset(td)
                frames.append(step["next", "pixels"].float())
                rewards.append(step["next", "reward"])
            return torch.stack(frames), torch.stack(rewards), unwrap(env)
        finally:
            env.close()

    native, native_rewards, base = play("ale_vector")
    ours, our_rewards, _ = play("emulators")
    assert native.shape == ours.shape == (300, 2, 4, 84, 84)
    torch.testing.assert_close(native_rewards, our_rewards)
    assert our_rewards.abs().sum() > 0  # points were scored
    assert (native - ours).abs().mean() < 2.0  # grey levels of 0..255
    with pytest.raises(ValueError, match="ale_vector plays ALE games only"):
        GameConfig(AIRSTRIKER, backend="ale_vector")


EMULATOR_CHILDREN = textwrap.dedent("""
    import torch  # the main module imports torch, as pipelines.evaluate does
    from envs import make_env, unwrap
    from envs.games import GameConfig
    if __name__ == "__main__":
        env = make_env(GameConfig("Airstriker-Genesis-v0"), 2, 0)
        try:
            env.reset()
            for process in unwrap(env).vector.processes:
                with open(f"/proc/{process.pid}/maps") as f:
                    print(process.pid, "libtorch" in f.read())
        finally:
            env.close()
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_emulator_processes_do_not_import_the_programs_main_module(tmp_path):
    """A retro env of several rows runs one spawned process per emulator; spawn would first import the program's
    main module (torch and Lightning for ``pipelines.evaluate``: 330 MB resident a process where 60 MB serve, 100 of
    them filled the machine),
    which ``envs.processes.without_main_module`` keeps out: no emulator process maps libtorch."""
    script = tmp_path / "main.py"
    script.write_text(EMULATOR_CHILDREN)
    out = subprocess.run([sys.executable, str(script)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines()]
    assert len(rows) == 2 and all(imported == "False" for _, imported in rows), out.stdout
