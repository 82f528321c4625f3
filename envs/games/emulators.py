"""The emulator side of the game envs: one game (a stable-retro console game or an ALE Atari game) as a
gymnasium env with the emulator-level preprocessing of Mnih et al. 2015 ("Human-level control through deep
reinforcement learning", Methods) and Machado et al. 2018 ("Revisiting the Arcade Learning Environment", JAIR
61, sec. 5): random no-op starts, sticky actions, and a frame skip that returns the maximum of the last two
frames. The image preprocessing (grayscale, resize, frame stack) and reward clipping are TorchRL transforms on
top (:mod:`envs.games.config`).

This module imports gymnasium, numpy and the emulators only (no torch): the emulator processes of a game env
(gymnasium's ``AsyncVectorEnv`` children) import just this.

Emulators: stable-retro runs **one emulator per process** (a second ``make`` raises ``RuntimeError``);
:func:`claim_in_process_emulator` keeps count so that a game env steps its emulator in this process only where
it may. ALE has no such limit.
"""

from __future__ import annotations

import difflib
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

import gymnasium as gym
import numpy as np

from envs.processes import die_with, dying_with_this_process, without_main_module

ALE_PREFIX = "ALE/"
IMPORT_COMMAND = "python -m pipelines.import_roms DIR"
# the buttons a console's default discrete action set combines with the directions (stable-retro's names)
FIRE_BUTTONS = {"Genesis": ["A", "B", "C"], "Nes": ["A", "B"], "Snes": ["A", "B", "X", "Y"], "Sms": ["B", "C"],
                "GameBoy": ["A", "B"], "GbAdvance": ["A", "B"], "GbColor": ["A", "B"], "GameGear": ["B", "C"],
                "PCEngine": ["A", "B"], "Atari2600": ["BUTTON"], "Saturn": ["A", "B", "C"], "32x": ["A", "B", "C"]}
DIRECTIONS = ["UP", "DOWN", "LEFT", "RIGHT"]

_in_process_retro = 0  # stable-retro emulators open in this process (at most 1)


def is_ale(game: str) -> bool:
    """Whether ``game`` names an ALE game (``ALE/<Name>-v5``); else a stable-retro game."""
    return game.startswith(ALE_PREFIX)


def claim_in_process_emulator(game: str) -> bool:
    """Claim this process's one stable-retro emulator for a new env's single row: True (claimed; give it back with
    :func:`release_in_process_emulator`) when ``game`` is an ALE game (no limit) or no retro emulator is open here,
    else False (the env's emulators go to their own processes)."""
    global _in_process_retro
    if is_ale(game):
        return True
    if _in_process_retro:
        return False
    _in_process_retro += 1
    return True


def release_in_process_emulator(game: str) -> None:
    """Give back what :func:`claim_in_process_emulator` claimed."""
    global _in_process_retro
    if not is_ale(game):
        _in_process_retro = max(_in_process_retro - 1, 0)


# ---------------------------------------------------------------------------------------------- game names
def ale_games() -> list[str]:
    """The ALE ids gymnasium knows (``ALE/<Name>-v5``; ale-py ships their ROMs)."""
    import ale_py

    gym.register_envs(ale_py)
    return sorted(k for k in gym.registry if k.startswith(ALE_PREFIX))


def retro_games() -> list[str]:
    """Every game stable-retro has an integration for (``<Name>-<Console>-v0``), with or without its ROM."""
    import stable_retro

    return stable_retro.data.list_games(stable_retro.data.Integrations.ALL)


def retro_rom_present(game: str) -> bool:
    """Whether stable-retro finds ``game``'s ROM (the bundled ``Airstriker-Genesis-v0``, or one imported)."""
    import stable_retro

    try:
        stable_retro.data.get_romfile_path(game, stable_retro.data.Integrations.ALL)
    except FileNotFoundError:
        return False
    return True


def playable_retro_games() -> list[str]:
    """The stable-retro games whose ROM is present."""
    return [g for g in retro_games() if retro_rom_present(g)]


def check_game(game: str) -> None:
    """Check that ``game`` can be played here, before any work.

    Raises:
        ValueError: an unknown name (the message lists the closest known names), or a stable-retro game whose
            ROM is missing (the message names the import command, :data:`IMPORT_COMMAND`).
    """
    known = ale_games() if is_ale(game) else retro_games()
    if game not in known:
        close = difflib.get_close_matches(game, known, n=5, cutoff=0.5)
        hint = f"closest known: {', '.join(close)}" if close else (
            "ALE games are named ALE/<Name>-v5 (e.g. ALE/Pong-v5), stable-retro games <Name>-<Console>-v0 "
            "(e.g. Airstriker-Genesis-v0)")
        raise ValueError(f"env.game={game!r} is not a known game: {hint}")
    if not is_ale(game) and not retro_rom_present(game):
        raise ValueError(f"env.game={game!r}: its ROM is not installed "
                         f"(stable-retro ships only Airstriker-Genesis-v0's). "
                         f"Import your copy with `{IMPORT_COMMAND}` (it matches the files in DIR by checksum)")


# ---------------------------------------------------------------------------------------------- action sets
def default_action_set(console: str) -> list[list[str]]:
    """A discrete action set for a console's buttons: no button, each direction, each fire button, and each
    direction with the first fire button (18 combinations at most, as the Atari 2600's full set)."""
    fire = FIRE_BUTTONS.get(console, ["A", "B"])
    return [[], *([d] for d in DIRECTIONS), *([b] for b in fire), *([d, fire[0]] for d in DIRECTIONS)]


class DiscreteButtons(gym.ActionWrapper):
    """A stable-retro game's button array (``MultiBinary``) played through a discrete action set: action i presses
    the buttons ``combos[i]`` together. Action 0 must press nothing (the no-op of no-op starts).

    Args:
        env: a stable-retro env (``buttons``: its console's button names, in the array's order).
        combos: button-name lists, e.g. ``[[], ["LEFT"], ["RIGHT", "B"]]``.

    Raises:
        ValueError: a name that is not one of the console's buttons (the message lists them), or a first
            combination that presses a button.
    """

    def __init__(self, env: gym.Env, combos: Sequence[Sequence[str]]) -> None:
        super().__init__(env)
        buttons = list(env.unwrapped.buttons)
        console = env.unwrapped.system
        allowed = [b for b in buttons if b]
        for combo in combos:
            unknown = [b for b in combo if b not in allowed]
            if unknown:
                raise ValueError(f"env.actions: {unknown} are not buttons of the {console} (allowed: "
                                 f"{', '.join(allowed)})")
        if not combos or list(combos[0]):
            raise ValueError(f"env.actions: the first combination must press no button (the no-op), got "
                             f"{list(combos[0]) if combos else 'no combination'}")
        self._arrays = np.zeros((len(combos), len(buttons)), dtype=np.int8)
        for i, combo in enumerate(combos):
            for b in combo:
                self._arrays[i, buttons.index(b)] = 1
        self.combos = [list(c) for c in combos]
        self.action_space = gym.spaces.Discrete(len(combos))

    def action(self, action: int) -> np.ndarray:
        return self._arrays[int(action)].copy()


# ---------------------------------------------------------------------------------------------- preprocessing
class NoopStart(gym.Wrapper):
    """Random no-op starts (Mnih et al. 2015): after a reset, U{1, ..., noop_max} steps of action 0 drawn from the
    env's own seeded generator (``np_random``), so that seeded rows start from different frames. Placed under the
    frame skip, the no-ops are emulator frames (as in SB3's and CleanRL's Atari wrappers). An episode that ends
    during the no-ops is reset again.

    Args:
        noop_max: the most no-op frames; 0 turns the wrapper off.
    """

    def __init__(self, env: gym.Env, noop_max: int) -> None:
        super().__init__(env)
        self.noop_max = noop_max

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        if self.noop_max <= 0:
            return observation, info
        for _ in range(int(self.np_random.integers(1, self.noop_max + 1))):
            observation, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                observation, info = self.env.reset()
        return observation, info


class Lives(gym.Wrapper):
    """Puts the lives left into every step's and reset's ``info["lives"]`` (ALE's ``ale.lives()``; stable-retro's
    game variable ``lives`` where the game's data defines one, else 0), so that the vector env reports them for
    every row (episodic life: the loss of a life ends the value target, not the game)."""

    def _lives(self, info: dict) -> int:
        unwrapped = self.env.unwrapped
        if hasattr(unwrapped, "ale"):
            return int(unwrapped.ale.lives())
        if "lives" in info:
            return int(info["lives"])
        data = getattr(unwrapped, "data", None)
        try:
            return int(data.lookup_value("lives")) if data is not None else 0
        except (KeyError, RuntimeError, AttributeError):
            return 0

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        return observation, {**info, "lives": self._lives(info)}

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, reward, terminated, truncated, {**info, "lives": self._lives(info)}


def make_game(game: str, frame_skip: int = 4, noop_max: int = 30, sticky_actions: float = 0.0,
              actions: Sequence[Sequence[str]] | None = None, max_episode_steps: int | None = 27_000,
              render_mode: str | None = None) -> gym.Env:
    """One game as a gymnasium env: the emulator at one frame per step, then sticky actions, random no-op starts,
    ``frame_skip`` with the maximum of the last two frames (gymnasium's ``MaxAndSkipObservation``: rewards
    summed), lives in ``info`` and a time limit in agent steps.

    Observations are the screen ``[H, W, 3]`` uint8 (ALE 210 x 160; Genesis 224 x 320; NES 224 x 240).

    Args:
        game: ``ALE/<Name>-v5`` or a stable-retro game ``<Name>-<Console>-v0``.
        frame_skip: emulator frames per agent step (>= 1).
        noop_max: the most random no-op frames after a reset (0: none).
        sticky_actions: the probability that the emulator repeats the previous action instead of the new one, per
            frame (Machado et al. 2018 use 0.25; 0: off). ALE's own ``repeat_action_probability``; gymnasium's
            ``StickyAction`` under the frame skip for stable-retro.
        actions: stable-retro only: the discrete action set as button-name lists (:class:`DiscreteButtons`);
            None: :func:`default_action_set` of the console. ALE games use their minimal action set.
        max_episode_steps: agent steps before an episode is truncated (27,000: 30 minutes of play at 60 Hz with
            frame skip 4, the Atari evaluation standard); None: no limit.
        render_mode: ``None`` or ``rgb_array``.

    Raises:
        ValueError: ``actions`` for an ALE game, or combinations the console does not have.
    """
    if is_ale(game):
        import ale_py

        if actions is not None:
            raise ValueError("env.actions is for stable-retro games only: ALE games play their minimal action set")
        gym.register_envs(ale_py)
        env = gym.make(game, frameskip=1, repeat_action_probability=float(sticky_actions), render_mode=render_mode,
                       max_episode_steps=None)
    else:
        import stable_retro

        env = stable_retro.make(game, inttype=stable_retro.data.Integrations.ALL, render_mode=render_mode,
                                use_restricted_actions=stable_retro.Actions.ALL)
        try:
            env = DiscreteButtons(env, actions if actions is not None else default_action_set(env.unwrapped.system))
        except ValueError:
            env.close()
            raise
        if sticky_actions > 0:
            env = gym.wrappers.StickyAction(env, repeat_action_probability=float(sticky_actions))
    env = NoopStart(env, noop_max)
    if frame_skip > 1:
        env = gym.wrappers.MaxAndSkipObservation(env, skip=frame_skip)
    env = Lives(env)
    if max_episode_steps is not None:
        env = gym.wrappers.TimeLimit(env, max_episode_steps=max_episode_steps)
    return env


class SpacesOnly(gym.Env):
    """A stand-in with a game's observation and action spaces and nothing else (no emulator): what gymnasium's
    ``AsyncVectorEnv`` builds in the parent process to read the spaces, and what TorchRL's wrapper reads specs from.

    Raises:
        RuntimeError: on ``reset`` or ``step`` (it has no game).
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, **kwargs):
        raise RuntimeError("SpacesOnly has no game to reset")

    def step(self, action):
        raise RuntimeError("SpacesOnly has no game to step")


def game_spaces(game: str, game_fn) -> tuple[gym.Space, gym.Space]:
    """The observation and action spaces of ``game_fn()`` (an emulator of ``game``): read in this process where it
    may hold the emulator (:func:`claim_in_process_emulator`), else in a spawned child process."""
    if not claim_in_process_emulator(game):
        with without_main_module(), ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                        initializer=dying_with_this_process()) as pool:
            return pool.submit(_spaces_of, game_fn).result()
    try:
        return _spaces_of(game_fn)
    finally:
        release_in_process_emulator(game)


def _spaces_of(game_fn) -> tuple[gym.Space, gym.Space]:
    """Start ``game_fn()``, read its spaces, close it."""
    env = game_fn()
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


class _InChild:
    """``game_fn`` for ``AsyncVectorEnv``: the game in the child processes, :class:`SpacesOnly` in the parent (which
    builds one env to read the spaces, and must not start a second stable-retro emulator). A child ends with its
    parent (:func:`envs.processes.die_with`), even one killed (SIGKILL) while the child is inside a step: the pipe's
    end-of-file reaches a child only once its step returns, and a stuck emulator's never does."""

    def __init__(self, game_fn, spaces: tuple[gym.Space, gym.Space], parent: int) -> None:
        self.game_fn, self.spaces, self.parent = game_fn, spaces, parent

    def __call__(self) -> gym.Env:
        if os.getpid() == self.parent:
            return SpacesOnly(*self.spaces)
        die_with(self.parent)
        return self.game_fn()


def ale_vector_env(game: str, num_envs: int, frame_skip: int = 4, noop_max: int = 30, sticky_actions: float = 0.0,
                   screen_size: int = 84, frame_stack: int = 4, max_episode_steps: int | None = 27_000,
                   num_threads: int = 0) -> gym.vector.VectorEnv:
    """ALE's native vector env (``ale_py.vector_env.AtariVectorEnv``: the emulators stepped by C++ threads, the
    preprocessing done there too: frame skip with the max of the last two frames, random no-op starts, sticky
    actions, grayscale, resize, frame stack) with same-step autoreset, unclipped rewards, no fire reset and lives in
    ``info``: the same observations as :func:`make_game` under the TorchRL transforms, up to the resize's
    interpolation. Observations ``[num_envs, frame_stack, screen_size, screen_size]`` uint8.

    Args:
        game: ``ALE/<Name>-v5``.
        num_threads: emulator threads (0: one per core).

    The other arguments are as :func:`make_game`'s.
    """
    import ale_py
    from ale_py.vector_env import AtariVectorEnv

    gym.register_envs(ale_py)
    frames = 108_000 if max_episode_steps is None else max_episode_steps * frame_skip
    return AtariVectorEnv(gym.spec(game).kwargs["game"], num_envs, num_threads=num_threads, frameskip=frame_skip,
                          noop_max=noop_max, repeat_action_probability=float(sticky_actions), img_height=screen_size,
                          img_width=screen_size, stack_num=frame_stack, grayscale=True, maxpool=True,
                          episodic_life=False, reward_clipping=False, use_fire_reset=False,
                          max_num_frames_per_episode=frames, autoreset_mode="SameStep")


def vector_env(game_fn, num_envs: int, asynchronous: bool, spaces: tuple[gym.Space, gym.Space]) -> gym.vector.VectorEnv:
    """``num_envs`` copies of ``game_fn()`` (a picklable zero-argument callable; its game's ``spaces``) as one gymnasium
    vector env with same-step autoreset: in this process (``SyncVectorEnv``) or one process per copy
    (``AsyncVectorEnv``, spawned: each child imports this module, gymnasium and the emulator, not the program's main
    module (:func:`envs.processes.without_main_module`), so no torch; observations through shared memory)."""
    autoreset = gym.vector.AutoresetMode.SAME_STEP
    if asynchronous:
        with without_main_module():
            return gym.vector.AsyncVectorEnv([_InChild(game_fn, spaces, os.getpid())] * num_envs, shared_memory=True,
                                             context="spawn", autoreset_mode=autoreset)
    return gym.vector.SyncVectorEnv([game_fn] * num_envs, autoreset_mode=autoreset)
