"""Partially observed variants of gymnasium's classic-control tasks, registered with gymnasium under their own ids so
that any backend builds them by id: ``CartPoleNoVel-v1``, CartPole-v1 with the cart's and the pole's velocities
hidden, the standard check of a recurrent policy (RL Zoo's ``CartPoleNoVel-v1``, on which sb3-contrib's
``RecurrentPPO`` is benchmarked; Meng et al. 2021, "Memory-based Deep Reinforcement Learning for POMDPs", use the
same masking). Only the positions are seen, so a policy must infer the velocities from what it saw before."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

# observation entries hidden (set to 0) per partially observed id: CartPole's [x, x_dot, theta, theta_dot]
HIDDEN = {"CartPoleNoVel-v1": ("CartPole-v1", (1, 3))}


class MaskObservation(gym.ObservationWrapper):
    """Sets the observation entries ``hidden`` (indices of a ``Box`` observation ``[F]``) to 0, keeping the shape, as
    RL Zoo's ``MaskVelocityWrapper`` does.

    Args:
        env: the gymnasium env. hidden: the indices to hide.
    """

    def __init__(self, env: gym.Env, hidden: tuple[int, ...]) -> None:
        super().__init__(env)
        self.mask = np.ones(env.observation_space.shape, dtype=env.observation_space.dtype)
        self.mask[list(hidden)] = 0

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation * self.mask


def make_partially_observed(env_id: str, **kwargs) -> gym.Env:
    """The env ``env_id`` of :data:`HIDDEN`: its fully observed original (built with ``kwargs``, e.g.
    ``render_mode``), its hidden entries set to 0."""
    original, hidden = HIDDEN[env_id]
    return MaskObservation(gym.make(original, **kwargs), hidden)


def register() -> None:
    """Register every id of :data:`HIDDEN` with gymnasium (once; later calls do nothing), with its original's episode
    limit and reward threshold."""
    for env_id, (original, _) in HIDDEN.items():
        if env_id not in gym.registry:
            spec = gym.spec(original)
            gym.register(env_id, entry_point=make_partially_observed, kwargs={"env_id": env_id},
                         reward_threshold=spec.reward_threshold)
