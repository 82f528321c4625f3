"""Base class of env configurations: one typed object per problem, from which ``make_env`` builds envs."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import nn
from torchrl.envs import EnvBase


class EnvConfig(ABC):
    """A problem's parameters. Subclasses are plain classes whose ``__init__`` arguments are the config
    keys (validated there, so a bad value stops before any work), and build the env in :meth:`make`.

    Attributes:
        embedding_model: a learned model the env's observations depend on (shared by every env built
            from this config, retrained by ``callbacks.EmbeddingUpdate``), or None.
        num_agents: R for a multi-agent env, whose per-agent entries (observation, action, reward,
            action mask, ...) carry an agent dim of size R right after the batch dims, while the done
            flags (``[*B, 1]``) are shared by the agents; None for a single-agent env.
        evaluation_settings: ``{name: runtime settings}`` that ``pipelines.evaluate`` plays one table row
            per policy each (through the env's ``configure``, e.g. one opponent each); empty: one row as built.
        outcome_keys: ``report`` entries that are 0/1 episode outcomes; ``pipelines.evaluate`` reports
            their means as ``<key>_rate`` (e.g. ``win_rate``).
    """

    embedding_model: nn.Module | None = None
    num_agents: int | None = None
    evaluation_settings: dict[str, dict] = {}
    outcome_keys: tuple[str, ...] = ()

    @abstractmethod
    def make(self, num_envs: int, seed: int, device: torch.device | str = "cpu") -> EnvBase:
        """Build the env with ``batch_size=[num_envs]``; row ``b`` is seeded ``seed + b``."""
