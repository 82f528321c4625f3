"""Natively batched envs (one ``EnvBase`` steps B envs as tensors, no worker per env), seeded per env: env (row) b of
a batch seeded s plays exactly the episodes of a single env seeded s + b, so results do not depend on the batch
size, and a resumed run can replay the episodes in progress. They
also keep their episodes' returns and draw masked random actions themselves, so ``envs.make_env`` wraps them in
no TorchRL transform."""

from __future__ import annotations

from typing import NamedTuple

import torch
from tensordict import TensorDictBase
from torch import Tensor
from torchrl.data import Unbounded
from torchrl.envs import EnvBase

from envs import rng
from envs.checks import Checks
from envs.compat import get_entry, set_entry
from envs.episodes import masked_uniform
from envs.restored import RestoredStateError, restored_mapping, restored_tensor


class NewEpisodes(NamedTuple):
    """The rows a reset starts new episodes in (:meth:`NativeBatchedEnv.start_episodes`).

    Attributes:
        rows: bool ``[B]``. index: int64 ``[k]``, the reset rows. episode: int64 ``[k]``, the index of
        each reset row's new episode. keys: int64 ``[k]``, its counter-based key (:func:`envs.rng.episode_keys`).
    """

    rows: Tensor
    index: Tensor
    episode: Tensor
    keys: Tensor


class NativeBatchedEnv(EnvBase):
    """Base of the native batched envs whose draws are keyed by (row seed, episode index) through the
    counter-based generator of :mod:`envs.rng` (``rng.episode_keys(row_seed, episode)``).

    Attributes:
        row_seed: int64 ``[B]``, ``seed + b``.
        episode: int64 ``[B]``, the index of the next episode each row draws (:meth:`start_episodes`
            advances it for the rows a reset starts).

    The env owns its resume state (:meth:`resume_state`, :meth:`load_resume_state`): what replays the
    episodes in progress, and whatever else a subclass needs for that (e.g. cached model predictions).

    It also does what TorchRL's ``RewardSum`` and ``ActionMask`` transforms would, without their
    ``TransformedEnv`` layer (0.24-0.27 of 0.69-0.73 ms of a vacuum step at B = 8, 0.18-0.38 of 2.2-2.4 ms of a
    DVRP step at B = 256, through ``make_env``, 2026-11-26): a subclass writes :meth:`episode_returns` under
    ``episode_reward`` in its reset and step outputs (its spec from :meth:`add_episode_reward_spec`), and
    :meth:`rand_action` draws from the input's ``action_mask``.

    Its :attr:`checks` (:class:`envs.checks.Checks`) are deferred on every device but the CPU; :meth:`any_done`
    reads them with the done flags in one host transfer per step (TorchRL's ``any_done`` and ``maybe_reset`` read
    the done flags twice).

    Args:
        num_envs: B, the batch size. device: torch device of the env.

    Raises:
        ValueError: ``num_envs < 1``.
    """

    def __init__(self, num_envs: int, device: torch.device | str = "cpu") -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        super().__init__(device=device, batch_size=torch.Size([num_envs]))
        self._returns: Tensor | None = None  # episode_returns: made on first use, in the reward spec's shape
        self.checks = Checks(defer=self.device.type != "cpu")

    def _set_seed(self, seed: int | None) -> None:
        seed = 0 if seed is None else int(seed)
        self.seed_rows(seed + torch.arange(self.batch_size[0], dtype=torch.long, device=self.device))

    def seed_rows(self, row_seed: Tensor) -> None:
        """Seed each row on its own: from its next reset, row b plays the episodes of a single env seeded
        ``row_seed[b]``, from the first.

        Raises:
            ValueError: ``row_seed`` is not int64 ``[B]``.
        """
        if row_seed.shape != self.batch_size or row_seed.dtype != torch.long:
            raise ValueError(f"row_seed must be int64 [{self.batch_size[0]}], "
                             f"got {row_seed.dtype} {list(row_seed.shape)}")
        self.row_seed = row_seed.to(self.device)
        self.episode = torch.zeros_like(self.row_seed)

    def start_episodes(self, tensordict: TensorDictBase | None) -> NewEpisodes:
        """The rows a ``_reset`` call starts (those flagged by ``_reset``, or all rows), with their episode
        indices and keys; advances those rows' episode counters."""
        self.checks.read()
        b = self.batch_size[0]
        rows = tensordict.get("_reset", None) if tensordict is not None else None
        rows = torch.ones(b, dtype=torch.bool, device=self.device) if rows is None else rows.reshape(b)
        index = rows.nonzero().squeeze(-1)
        episode = self.episode.index_select(0, index)
        keys = rng.episode_keys(self.row_seed.index_select(0, index), episode)
        self.episode = self.episode + rows
        self._returns = self.episode_returns().index_fill(0, index, 0)  # (a new tensor: handed-out ones never change)
        return NewEpisodes(rows, index, episode, keys)

    def any_done(self, tensordict: TensorDictBase) -> bool:
        """TorchRL's ``EnvBase.any_done`` (whether a row of the ``next`` ``tensordict`` is done, writing ``_reset``
        there if so) in one host read, which also reads the deferred :attr:`checks`. TorchRL's returns a device
        tensor that ``maybe_reset`` reads a second time.

        Raises:
            Exception: a deferred check's error (:meth:`envs.checks.Checks.read`).
        """
        if not self._simple_done:
            self.checks.read()
            return super().any_done(tensordict)
        done = get_entry(tensordict, "done")  # (TorchRL's own calls, without key parsing)
        if not self.checks.read(None if done is None else done.any()):
            return False
        set_entry(tensordict, "_reset", done.clone())
        return True

    @property
    def base_env(self) -> NativeBatchedEnv:
        """This env: ``envs.make_env`` wraps it in no transform, and this is ``TransformedEnv.base_env``'s answer for
        it, so that code reaching the env under its transforms (e.g. the workers' ``env.base_env.<method>`` calls)
        works with it as it is."""
        return self

    def add_episode_reward_spec(self) -> None:
        """Add ``episode_reward`` to the observation spec, in the reward spec's shape and dtype (as ``RewardSum``)."""
        spec = self.reward_spec
        self.observation_spec["episode_reward"] = Unbounded(shape=spec.shape, dtype=spec.dtype, device=self.device)

    def episode_returns(self, reward: Tensor | None = None) -> Tensor:
        """``episode_reward``: each row's undiscounted return of its running episode (``[B, 1]``, or the reward's
        ``[B, R, 1]`` with R agents), 0 after a reset, plus ``reward`` when given (a step's; TorchRL's ``RewardSum``
        writes the same). Every call that changes it makes a new tensor, so those already handed out stay as they
        were."""
        if self._returns is None:
            spec = self.reward_spec
            self._returns = torch.zeros(spec.shape, dtype=spec.dtype, device=self.device)
        if reward is not None:
            self._returns = self._returns + reward
        return self._returns

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """TorchRL's random action (``EnvBase.rand_action``), uniform over the allowed actions of each row (and
        agent) where ``tensordict`` has ``action_mask`` ``[B, ..., A]`` (:func:`envs.episodes.masked_uniform`: the
        draw TorchRL's ``Categorical.rand`` makes with a mask), from the input's mask instead of a spec that
        ``ActionMask`` would have to update on every step."""
        mask = tensordict.get("action_mask", None) if tensordict is not None else None
        if mask is None:
            return super().rand_action(tensordict)
        tensordict.set("action", masked_uniform(mask).to(self.action_spec.dtype))
        return tensordict

    def resume_state(self) -> dict[str, Tensor]:
        """What replays the episodes in progress: row seeds and the index of each row's episode in
        progress (a resumed run restarts that episode from its start)."""
        return {"row_seed": self.row_seed.cpu(), "episode": (self.episode - 1).clamp_min(0).cpu()}

    def load_resume_state(self, state: dict[str, Tensor], keep_row_seeds: bool = False) -> bool:
        """Restore :meth:`resume_state`: the next reset of row b draws episode ``state["episode"][b]``.

        Args:
            state: from :meth:`resume_state` of an env with the same batch size.
            keep_row_seeds: keep this env's own row seeds and take only the episode positions (a DDP
                rank restoring rank 0's state); otherwise the rows take the saved seeds too.

        Returns:
            Whether the rows now play the saved rows' episodes (same row seeds): only then does state
            tied to those episodes (e.g. cached model predictions) apply.

        Raises:
            RestoredStateError: the state was saved from an env with another batch size, or holds row seeds or
                episode positions that are not non-negative int64 ``[B]``.
        """
        restored_mapping(state, "env state", ("row_seed", "episode"))
        if not isinstance(state["row_seed"], Tensor) or state["row_seed"].shape != self.row_seed.shape:
            found = list(state["row_seed"].shape) if isinstance(state["row_seed"], Tensor) else state["row_seed"]
            raise RestoredStateError(f"env state.row_seed is {found}, this env has {self.row_seed.shape[0]} rows")
        row_seed = restored_tensor(state["row_seed"], "env state.row_seed", self.row_seed.cpu(), low=0)
        episode = restored_tensor(state["episode"], "env state.episode", self.episode.cpu(), low=0)
        if not keep_row_seeds:
            self.row_seed = row_seed.to(self.device)
        self.episode = episode.to(self.device)
        return torch.equal(state["row_seed"].to(self.device), self.row_seed)
