"""Gymnasium environments through TorchRL (``GymEnv``), vectorised by ``SerialEnv`` or ``ParallelEnv``."""

from __future__ import annotations

from functools import partial
from typing import Literal

import torch
from torchrl.envs import EnvBase, GymEnv, ParallelEnv, SerialEnv

from envs.config import EnvConfig


class GymConfig(EnvConfig):
    """A gymnasium env id, vectorised ``num_envs`` times.

    Observations are the env's ``observation``; discrete actions are int64 (``categorical_action_encoding``).

    Args:
        env_id: the gymnasium id, e.g. ``CartPole-v1``.
        backend: ``serial`` (``SerialEnv``, one process) or ``parallel`` (``ParallelEnv``, one worker
            process per env).

    Raises:
        ValueError: an unknown backend; gymnasium's error for an unknown ``env_id`` (the env is built
            once here, before any training).
    """

    def __init__(self, env_id: str = "CartPole-v1", backend: Literal["serial", "parallel"] = "serial") -> None:
        if backend not in ("serial", "parallel"):
            raise ValueError(f"env.backend={backend!r} is not allowed: one of serial, parallel")
        self.env_id = env_id
        self.backend = backend
        GymEnv(env_id).close()  # fail early on an unknown id

    def make(self, num_envs: int, seed: int, device: torch.device | str = "cpu") -> EnvBase:
        make_one = partial(GymEnv, self.env_id, categorical_action_encoding=True, device=device)
        vector = SerialEnv if self.backend == "serial" else ParallelEnv
        env = vector(num_envs, make_one)
        env.set_seed(seed)
        return env
