"""Emulated games as TorchRL envs: :class:`GameConfig` (the config keys) builds a :class:`GameVectorEnv` (the
emulators of :mod:`envs.games.emulators`, one gymnasium vector env) under the standard image preprocessing as
TorchRL transforms: channels first, grayscale, resize to ``screen_size`` (:class:`ResizeFrames`), a stack of the
last ``frame_stack`` frames (``CatFrames``) and reward clipping to [-1, 1] for the loss (``RewardClipping``),
while ``episode_reward`` and ``info/game_score`` keep the raw game score."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from tensordict import TensorDict, TensorDictBase
from torch import Tensor
from torchrl.data import Bounded, Composite, TensorSpec, Unbounded
from torchrl.envs import (
    CatFrames,
    Compose,
    EnvBase,
    GrayScale,
    GymWrapper,
    ObservationTransform,
    RewardClipping,
    ToTensorImage,
    TransformedEnv,
)

from envs.config import EnvConfig, require
from envs.games import emulators
from envs.gym import GymVectorEnv, one_env_specs

PIXELS = "pixels"


class ResizeFrames(ObservationTransform):
    """Resizes uint8 image entries ``[*, C, H, W]`` to ``[*, C, size, size]`` by area averaging (``interpolate``'s
    ``area`` mode, the ``INTER_AREA`` of OpenCV that SB3's and CleanRL's Atari wrappers use), rounded back to uint8.
    TorchRL's ``Resize`` needs torchvision, which does not import beside this torch build.

    Args:
        size: the side of the square output, in pixels.
        in_keys: the image entries (resized in place).
    """

    def __init__(self, size: int, in_keys: list[str] | None = None) -> None:
        keys = in_keys or [PIXELS]
        super().__init__(in_keys=keys, out_keys=list(keys))
        self.size = int(size)

    def _apply_transform(self, image: Tensor) -> Tensor:
        lead = image.shape[:-3]
        flat = image.reshape(-1, *image.shape[-3:]).float()
        out = F.interpolate(flat, size=(self.size, self.size), mode="area").round_().to(image.dtype)
        return out.reshape(*lead, *out.shape[1:])

    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        for key in self.in_keys:
            spec = observation_spec[key]
            shape = (*spec.shape[:-2], self.size, self.size)
            observation_spec[key] = Bounded(0, 255, shape=shape, dtype=spec.dtype, device=spec.device)
        return observation_spec


class GameVectorEnv(GymVectorEnv):
    """The rows of a game env: ``num_envs`` emulators (:func:`envs.games.emulators.make_game` each, or ALE's own
    vector env) stepped as one gymnasium vector env (:class:`envs.gym.GymVectorEnv`: same-step autoreset,
    ``episode_reward`` = the raw game score so far), plus the game's entries:

    * ``end_of_life`` ``[B, 1]`` bool (with ``episodic_life``): a life was lost in this step, or the game ended.
      PPO ends its value targets there (Mnih et al. 2015's episodic life) while the game goes on, so
      ``episode_reward`` is the whole game's score;
    * ``info/game_score`` ``[B, 1]``: the raw game score so far (``rollout/game_score`` at a game's end).

    Args:
        game: the game's name (for messages). num_envs: B. device: where the TensorDicts live.
        specs: one emulator's specs (:func:`envs.gym.one_env_specs`).
        make_vector: builds the vector env on first use. episodic_life: write ``end_of_life``.
        claimed: this env holds the process's in-process emulator claim (released on close).
    """

    def __init__(self, game: str, num_envs: int, device, specs: tuple[TensorSpec, ...], make_vector,
                 episodic_life: bool, claimed: bool) -> None:
        super().__init__(game, num_envs, device, specs=specs, make_vector=make_vector)
        self.episodic_life = episodic_life
        self.render_mode = "rgb_array"  # it draws its rows from their screens (render_frame)
        self._claimed = claimed
        self._lives = torch.zeros(num_envs, dtype=torch.int64)
        self._eol = torch.zeros(num_envs, 1, dtype=torch.bool, device=self.device)
        spec = self.observation_spec
        if episodic_life:
            spec["end_of_life"] = self.full_done_spec["done"].clone()
        spec["info"] = Composite(game_score=Unbounded(shape=(num_envs, 1), dtype=self._reward_dtype,
                                                        device=self.device), shape=(num_envs,), device=self.device)

    def _on_info(self, info: dict, rows: Tensor | None) -> None:
        """Track lives from the vector env's ``info["lives"]`` (``rows``: the rows it covers, None for a step)."""
        if "lives" not in info:
            return
        lives = torch.as_tensor(info["lives"], dtype=torch.int64)
        if rows is None:  # a step: fewer lives than before ends a life (finished rows show their new game's)
            self._eol = (lives < self._lives).unsqueeze(-1).to(self.device)
            self._lives = lives
        else:
            self._lives = torch.where(rows, lives, self._lives)

    def _extra(self, out: dict, done: Tensor | None) -> None:
        """``end_of_life`` and ``info/game_score`` of a step (``done`` given) or a reset (None)."""
        score = out["episode_reward"]
        out["info"] = TensorDict({"game_score": score}, batch_size=self.batch_size, device=self.device)
        if self.episodic_life:
            out["end_of_life"] = torch.zeros_like(self._eol) if done is None else self._eol | done

    # TorchRL's reset of finished rows through _reset (which writes end_of_life and info), not the vector env's
    # shortcut (an env without transforms: backend ale_vector with clip_rewards off)
    maybe_reset = EnvBase.maybe_reset

    def render_frame(self, row: int = 0):
        """Row ``row``'s screen now, ``[H, W, 3]`` uint8: the emulator's own frame, before any preprocessing (with
        ``backend: ale_vector``, the newest preprocessed grayscale frame of the stack, as RGB)."""
        if self._last is None:
            raise ValueError(f"{self.env_id}: no frame yet (the env has not been reset)")
        frame = self._last[PIXELS][row].cpu().numpy()
        if frame.shape[-1] != 3:  # [frame_stack, H, W]
            frame = np.repeat(frame[-1][..., None], 3, axis=-1)
        return frame

    def close(self, *, raise_if_closed: bool = True) -> None:
        super().close(raise_if_closed=raise_if_closed)
        if self._claimed:
            emulators.release_in_process_emulator(self.env_id)
            self._claimed = False


@dataclass(eq=False)
class GameConfig(EnvConfig):
    """An emulated game (stable-retro or ALE) with the standard Atari preprocessing (of Mnih et al. 2015 and
    Machado et al. 2018): observations ``pixels`` ``[frame_stack, screen_size, screen_size]`` uint8 (grayscale, the
    newest frame last), a discrete action ``[B]`` int64, rewards clipped to [-1, 1], and the raw game score in
    ``episode_reward`` and ``info/game_score``.

    stable-retro games run one emulator per process: a retro env of one row steps in this process (the rollout
    workers' case, ``data.collector.workers = data.collector.num_envs``), one of several rows (or a second env in a
    process that has one) runs each emulator in its own process (gymnasium ``AsyncVectorEnv``). ALE games step in
    this process.

    Args:
        game: ``ALE/<Name>-v5`` (ale-py ships the ROMs, e.g. ``ALE/Pong-v5``) or a stable-retro game
            ``<Name>-<Console>-v0`` (``Airstriker-Genesis-v0`` is bundled; others need the user's ROM:
            ``python -m pipelines.import_roms DIR``).
        frame_skip: emulator frames per agent step, the observation being the maximum of the last two.
        noop_max: at most this many random no-op frames after a reset (0: none).
        sticky_actions: per-frame probability of repeating the previous action (Machado et al.: 0.25; 0: off).
        episodic_life: write ``end_of_life`` (a lost life ends PPO's value targets; the game goes on).
        screen_size: the side of the resized frames, in pixels.
        frame_stack: frames stacked per observation.
        clip_rewards: clip the loss's reward to [-1, 1] (the logged game score stays raw).
        actions: stable-retro only: the discrete action set as lists of button names (the first presses none);
            null: no button, each direction, each fire button, each direction with the first fire button.
        max_episode_steps: agent steps before a game is truncated (27,000 = 30 minutes at 60 Hz and frame skip 4);
            null: none.
        backend: ``emulators`` (each game a gymnasium env, as above) or, for ALE games, ``ale_vector``: ALE's
            native threaded vector env, which does the preprocessing itself in C++ (only the reward clipping is a
            TorchRL transform then; :func:`envs.games.emulators.ale_vector_env`).
        ale_threads: ``ale_vector``'s emulator threads (0: one per core).

    Evaluations sample the policy's actions (``stochastic_evaluation``, RL Zoo's convention for Atari): a greedy
    policy can repeat one move for ever (on Airstriker, a policy whose sampled play scored about 2,000 per game
    scored 340 greedily).

    Raises:
        ValueError: an unknown game (with the closest names), a stable-retro game whose ROM is missing (with the
            import command) or a value out of range, checked here; an action set the console does not have, when
            the first env is built (one emulator is started and closed to read the specs: ``pipelines.fit``'s
            check of the env against the algorithm does that before any work).
    """

    stochastic_evaluation = True

    game: str = "Airstriker-Genesis-v0"
    frame_skip: int = 4
    noop_max: int = 30
    sticky_actions: float = 0.0
    episodic_life: bool = True
    screen_size: int = 84
    frame_stack: int = 4
    clip_rewards: bool = True
    actions: list[list[str]] | None = None
    max_episode_steps: int | None = 27_000
    backend: Literal["emulators", "ale_vector"] = "emulators"
    ale_threads: int = 0

    def __post_init__(self) -> None:
        require(self.frame_skip >= 1, "frame_skip", self.frame_skip, "an integer >= 1 (emulator frames per agent step)")
        require(self.noop_max >= 0, "noop_max", self.noop_max, "an integer >= 0")
        require(0.0 <= self.sticky_actions < 1.0, "sticky_actions", self.sticky_actions, "a probability in [0, 1)")
        require(8 <= self.screen_size <= 1024, "screen_size", self.screen_size, "in [8, 1024] pixels")
        require(self.frame_stack >= 1, "frame_stack", self.frame_stack, "an integer >= 1")
        require(self.max_episode_steps is None or self.max_episode_steps >= 1, "max_episode_steps",
                self.max_episode_steps, "null or an integer >= 1")
        require(self.backend in ("emulators", "ale_vector"), "backend", self.backend, "one of emulators, ale_vector")
        require(self.backend == "emulators" or emulators.is_ale(self.game), "backend", self.backend,
                f"ale_vector plays ALE games only (env.game={self.game!r})")
        require(self.ale_threads >= 0, "ale_threads", self.ale_threads, "an integer >= 0 (0: one per core)")
        emulators.check_game(self.game)
        self.ale_threads = int(self.ale_threads)
        self.frame_skip, self.noop_max, self.sticky_actions = (int(self.frame_skip), int(self.noop_max),
                                                               float(self.sticky_actions))
        self.episodic_life, self.clip_rewards = bool(self.episodic_life), bool(self.clip_rewards)
        self.screen_size, self.frame_stack = int(self.screen_size), int(self.frame_stack)
        self.actions = [list(a) for a in self.actions] if self.actions is not None else None
        self.max_episode_steps = None if self.max_episode_steps is None else int(self.max_episode_steps)
        self._spaces = self._specs = None  # one emulator's, read when the first env is built (_read_specs)

    def _read_specs(self) -> None:
        """Start one emulator, read its spaces (which also checks the action set against the console) and close
        it; the specs are kept for every env built from this config."""
        if self._spaces is not None:
            return
        if self.backend == "ale_vector":
            probe = self.ale_vector_fn(1)()
            self._spaces = (probe.single_observation_space, probe.single_action_space)
            probe.close()
        else:
            self._spaces = emulators.game_spaces(self.game, self.game_fn())
        self._specs = one_env_specs(GymWrapper(emulators.SpacesOnly(*self._spaces), categorical_action_encoding=True),
                                    self.game)
        if self.backend == "ale_vector":  # (TorchRL names a stack of frames "observation")
            self._specs[0][PIXELS] = self._specs[0].pop("observation")

    def game_fn(self, render_mode: str | None = None):
        """A picklable zero-argument callable that builds one emulator (:func:`envs.games.emulators.make_game`)."""
        return partial(emulators.make_game, self.game, self.frame_skip, self.noop_max, self.sticky_actions,
                       self.actions, self.max_episode_steps, render_mode)

    def ale_vector_fn(self, num_envs: int):
        """A zero-argument callable that builds ALE's vector env of ``num_envs`` games (``backend: ale_vector``)."""
        return partial(emulators.ale_vector_env, self.game, num_envs, self.frame_skip, self.noop_max,
                       self.sticky_actions, self.screen_size, self.frame_stack, self.max_episode_steps,
                       self.ale_threads)

    def make(self, num_envs: int, seed: int, device: torch.device | str = "cpu",
             models: dict | None = None) -> EnvBase:
        self.check_models(models)  # none
        self._read_specs()
        if self.backend == "ale_vector":
            base = GameVectorEnv(self.game, num_envs, device, self._specs, self.ale_vector_fn(num_envs),
                                 self.episodic_life, claimed=False)
            env = TransformedEnv(base, RewardClipping(-1.0, 1.0)) if self.clip_rewards else base
            env.set_seed(seed)
            return env
        if emulators.is_ale(self.game):  # any number of ALE emulators per process
            claimed = asynchronous = False
        else:
            claimed = num_envs == 1 and emulators.claim_in_process_emulator(self.game)
            asynchronous = not claimed
        make_vector = partial(emulators.vector_env, self.game_fn(), num_envs, asynchronous, self._spaces)
        base = GameVectorEnv(self.game, num_envs, device, self._specs, make_vector, self.episodic_life, claimed)
        transforms = [ToTensorImage(from_int=False, dtype=torch.uint8, in_keys=[PIXELS]), GrayScale(in_keys=[PIXELS]),
                      ResizeFrames(self.screen_size, in_keys=[PIXELS]),
                      CatFrames(N=self.frame_stack, dim=-3, in_keys=[PIXELS])]
        if self.clip_rewards:
            transforms.append(RewardClipping(-1.0, 1.0))
        env = TransformedEnv(base, Compose(*transforms))
        env.set_seed(seed)
        return env
