"""Row-seeded batched envs: row b of an env seeded s plays exactly the episodes of a single env seeded
s + b, so results do not depend on the batch size, and a resumed run can replay the episodes in progress."""

from __future__ import annotations

import torch
from torch import Tensor
from torchrl.envs import EnvBase


class RowSeededEnv(EnvBase):
    """Base of the native batched envs whose draws are keyed by (row seed, episode index) through the
    counter-based generator of :mod:`envs.dvrp.rng` (``rng.episode_keys(row_seed, episode)``).

    Attributes:
        row_seed: int64 ``[B]``, ``seed + b``.
        episode: int64 ``[B]``, the index of the next episode each row draws (the subclass's ``_reset``
            increments it for the rows it resets).

    Args:
        num_envs: B, the batch size. device: torch device of the env.

    Raises:
        ValueError: ``num_envs < 1``.
    """

    def __init__(self, num_envs: int, device: torch.device | str = "cpu") -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        super().__init__(device=device, batch_size=torch.Size([num_envs]))

    def _set_seed(self, seed: int | None) -> None:
        seed = 0 if seed is None else int(seed)
        self.row_seed = seed + torch.arange(self.batch_size[0], dtype=torch.long, device=self.device)
        self.episode = torch.zeros_like(self.row_seed)

    def rng_state(self) -> dict[str, Tensor]:
        """What replays the episodes in progress: row seeds and the index of each row's episode in
        progress (a resumed run restarts that episode from its start)."""
        return {"row_seed": self.row_seed.cpu(), "episode": (self.episode - 1).clamp_min(0).cpu()}

    def load_rng_state(self, state: dict[str, Tensor]) -> None:
        """Restore :meth:`rng_state`: the next reset of row b draws episode ``state["episode"][b]``.

        Raises:
            ValueError: the state was saved from an env with another batch size.
        """
        if state["row_seed"].shape != self.row_seed.shape:
            raise ValueError(f"env state has {state['row_seed'].shape[0]} rows, this env {self.row_seed.shape[0]}")
        self.row_seed = state["row_seed"].to(self.device)
        self.episode = state["episode"].to(self.device)
