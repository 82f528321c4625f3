"""Gymnasium environments through TorchRL: one gymnasium vector env under ``GymWrapper``, or single envs
batched by ``SerialEnv`` / ``ParallelEnv``."""

from __future__ import annotations

from functools import partial
from typing import Literal

import gymnasium as gym
import torch
from torchrl.envs import EnvBase, GymEnv, GymWrapper, ParallelEnv, SerialEnv

from envs.config import EnvConfig

BACKENDS = ("vector", "serial", "parallel")


class GymConfig(EnvConfig):
    """A gymnasium env id, vectorised ``num_envs`` times.

    Observations are the env's ``observation``; discrete actions are int64 (``categorical_action_encoding``).

    Args:
        env_id: the gymnasium id, e.g. ``CartPole-v1``.
        backend: ``vector`` (gymnasium's ``SyncVectorEnv`` of ``num_envs`` envs, stepped in one call and
            reset in the same step when done, under TorchRL's ``GymWrapper``: the fastest in one process, 2.4x
            ``serial`` for 8 CartPole envs), ``serial`` (TorchRL's ``SerialEnv`` of single ``GymEnv``) or
            ``parallel`` (``ParallelEnv``, one worker process per env). Each backend seeds its rows its own
            way: a run is reproducible for a given backend, not across them.

    Raises:
        ValueError: an unknown backend; gymnasium's error for an unknown ``env_id`` (the env is built
            once here, before any training).
    """

    def __init__(self, env_id: str = "CartPole-v1",
                 backend: Literal["vector", "serial", "parallel"] = "vector") -> None:
        if backend not in BACKENDS:
            raise ValueError(f"env.backend={backend!r} is not allowed: one of {', '.join(BACKENDS)}")
        self.env_id = env_id
        self.backend = backend
        GymEnv(env_id).close()  # fail early on an unknown id

    def make(self, num_envs: int, seed: int, device: torch.device | str = "cpu") -> EnvBase:
        if self.backend == "vector":
            # TorchRL's wrapper needs the vector env to reset a finished env in the step that ends it
            vector = gym.make_vec(self.env_id, num_envs=num_envs, vectorization_mode="sync",
                                  vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
            env = GymWrapper(vector, categorical_action_encoding=True, device=device)
        else:
            make_one = partial(GymEnv, self.env_id, categorical_action_encoding=True, device=device)
            env = (SerialEnv if self.backend == "serial" else ParallelEnv)(num_envs, make_one)
        env.set_seed(seed)
        return env
