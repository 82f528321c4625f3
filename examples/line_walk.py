"""Your own env, both ways the framework takes one (``docs/envs/your-own.md``), on one toy problem.

A walker on the integer line ``0 .. length`` starts at a random inner point; action 0 steps left, 1 right. Reaching
the right end pays +1 and ends the episode, the left end -1 and ends it, every other step costs 0.01; an episode is
cut (truncated) after ``max_steps`` steps. The observation is the position as a fraction of ``length``. Always
stepping right is optimal; a uniformly random walker mostly loses.

1. **A gymnasium env** (:class:`LineWalk`), registered as ``LineWalk-v0`` when this module is imported; a config names
   it ``env_id: "examples.line_walk:LineWalk-v0"`` (``module:id``, as ``gymnasium.make`` takes it) and the run is
   allowed to import the module with ``RLPIPE_ALLOW_IMPORTS=examples.line_walk``.
2. **A native batched TorchRL env** (:class:`BatchedLineWalk`, all rows stepped as tensors) with its config class
   (:class:`LineWalkConfig`, an ``envs.EnvConfig`` dataclass whose fields are the config keys); a config names it
   ``class_path: examples.line_walk.LineWalkConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from envs.config import EnvConfig, require

STEP_COST = 0.01


# --8<-- [start:gym]
class LineWalk(gym.Env):
    """The walk as a gymnasium env (one walker).

    Args:
        length: the line's right end (its left end is 0).
        max_steps: steps before the episode is truncated.
    """

    metadata = {"render_modes": []}

    def __init__(self, length: int = 10, max_steps: int = 50) -> None:
        self.length, self.max_steps = length, max_steps
        self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.position, self.t = length // 2, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.position, self.t = int(self.np_random.integers(1, self.length)), 0
        return self._observation(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.position += 1 if int(action) == 1 else -1
        self.t += 1
        terminated = self.position in (0, self.length)
        reward = 1.0 if self.position == self.length else -1.0 if self.position == 0 else -STEP_COST
        return self._observation(), reward, terminated, self.t >= self.max_steps and not terminated, {}

    def _observation(self) -> np.ndarray:
        return np.array([self.position / self.length], dtype=np.float32)


gym.register("LineWalk-v0", entry_point=LineWalk)
# --8<-- [end:gym]


# --8<-- [start:batched]
class BatchedLineWalk(EnvBase):
    """The walk as a native batched TorchRL env: ``num_envs`` walkers stepped at once as tensors.

    Entries (``B = num_envs``): ``observation`` float32 ``[B, 1]`` (position / length), ``action`` int64 ``[B]`` in
    {0, 1}, ``reward`` ``[B, 1]``, ``done`` / ``terminated`` / ``truncated`` bool ``[B, 1]``. Rows reset on their own
    (TorchRL's ``_reset`` mask). Start points come from one generator seeded ``seed`` (a simplification of the
    per-row seeds of the project's envs: rows differ by their draws, and a rerun draws the same).
    """

    def __init__(self, num_envs: int, length: int, max_steps: int, seed: int, device: str = "cpu") -> None:
        super().__init__(batch_size=torch.Size([num_envs]), device=device)
        self.length, self.max_steps = length, max_steps
        self.observation_spec = Composite(
            observation=Bounded(0.0, 1.0, (num_envs, 1), dtype=torch.float32, device=device), shape=(num_envs,))
        self.action_spec = Categorical(2, shape=(num_envs,), dtype=torch.int64, device=device)
        self.reward_spec = Unbounded(shape=(num_envs, 1), device=device)
        flag = Categorical(2, shape=(num_envs, 1), dtype=torch.bool, device=device)
        self.done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=(num_envs,))
        self.position = torch.zeros(num_envs, 1, dtype=torch.long, device=device)
        self.t = torch.zeros_like(self.position)
        self.generator = torch.Generator(device=device)
        self._set_seed(seed)

    def _set_seed(self, seed: int | None) -> None:
        self.generator.manual_seed(int(seed or 0))

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        rows = torch.ones_like(self.position, dtype=torch.bool)
        if tensordict is not None and "_reset" in tensordict.keys():
            rows = tensordict["_reset"].view(-1, 1)
        start = torch.randint(1, self.length, self.position.shape, generator=self.generator, device=self.device)
        self.position = torch.where(rows, start, self.position)
        self.t = torch.where(rows, 0, self.t)
        return TensorDict({"observation": self._observation(), **self._flags(torch.zeros_like(rows))},
                          batch_size=self.batch_size, device=self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.position = self.position + 2 * tensordict["action"].view(-1, 1) - 1
        self.t = self.t + 1
        won, lost = self.position == self.length, self.position == 0
        reward = torch.where(won, 1.0, torch.where(lost, -1.0, -STEP_COST))
        terminated = won | lost
        return TensorDict({"observation": self._observation(), "reward": reward,
                           **self._flags(terminated, (self.t >= self.max_steps) & ~terminated)},
                          batch_size=self.batch_size, device=self.device)

    def _observation(self) -> torch.Tensor:
        return (self.position / self.length).to(torch.float32)

    @staticmethod
    def _flags(terminated: torch.Tensor, truncated: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        truncated = torch.zeros_like(terminated) if truncated is None else truncated
        return {"done": terminated | truncated, "terminated": terminated, "truncated": truncated}


@dataclass(eq=False)
class LineWalkConfig(EnvConfig):
    """The config of :class:`BatchedLineWalk`: its fields are the config keys, checked when the config is made.

    Args:
        length: the line's right end (>= 2).
        max_steps: steps before an episode is truncated (>= 1).

    Raises:
        ValueError: a key out of its range (the message names it).
    """

    length: int = 10
    max_steps: int = 50

    def __post_init__(self) -> None:
        require(isinstance(self.length, int) and self.length >= 2, "length", self.length, "an integer >= 2")
        require(isinstance(self.max_steps, int) and self.max_steps >= 1, "max_steps", self.max_steps,
                "an integer >= 1")

    def make(self, num_envs: int, seed: int, device: torch.device | str = "cpu", models=None) -> EnvBase:
        self.check_models(models)  # (this env takes no learned models)
        return BatchedLineWalk(num_envs, self.length, self.max_steps, seed, str(device))
# --8<-- [end:batched]
