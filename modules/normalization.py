"""Running observation and reward normalisation inside the learner (Stable-Baselines3's ``VecNormalize``: the
observation standardised by its running mean and variance, the reward divided by the running standard deviation of
the discounted return, both clipped at ``clip`` standard deviations; its statistics are the module's, so the
checkpoint, an exported policy and every evaluation env carry them, as in rl_games' and Brax's PPO, and the rollout
workers get them with the weights)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from envs.restored import RestoredStateError, restored_tensor
from modules.policy import TensorPolicy

EPSILON = 1e-8  # VecNormalize's epsilon, under every variance
NORMALIZED = "normalized_observation"  # where a recurrent policy's standardised observation goes (VecNormalization)


class RunningMeanStd(nn.Module):
    """The running mean and (population) variance of samples ``[N, *S]``, per element of ``S``, merged batch by batch
    by the parallel algorithm of Chan, Golub and LeVeque (1979), as SB3's ``RunningMeanStd`` merges them (same start:
    mean 0, variance 1, a count of 1e-4). Float64 buffers ``mean`` and ``var`` ``[*S]`` and ``count`` ``[]`` (in the
    state dict), and their float32 ``shift`` (the mean) and ``scale`` (sqrt(var + 1e-8)) ``[*S]`` that the
    normalisation applies, set with each merge and each load (so that a policy step does no float64 arithmetic).

    Args:
        shape: S, the shape of one sample (``()`` for a scalar).
    """

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))
        self.register_buffer("shift", torch.zeros(shape), persistent=False)
        self.register_buffer("scale", torch.ones(shape), persistent=False)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        """Load the statistics, checked first (a variance below 0 or a nan would make every standardised value nan).

        Raises:
            RestoredStateError: a mean that is not finite, a variance that is negative or not finite, a count that
                is not positive (names the entry)."""
        for name, low in (("mean", None), ("var", 0.0), ("count", 1e-300)):
            if prefix + name in state_dict:
                restored_tensor(state_dict[prefix + name], f"state_dict.{prefix}{name}", getattr(self, name), low=low)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._refresh()

    def _refresh(self) -> None:
        with torch.no_grad():
            self.shift.copy_(self.mean)
            self.scale.copy_((self.var + EPSILON).sqrt())

    def update(self, samples: Tensor, reduce: Callable[[Tensor], Tensor] | None = None) -> None:
        """Merge the samples ``[N, *S]`` into the statistics. ``reduce`` sums a tensor over DDP ranks (None: one
        process), so that every rank merges the samples of all ranks and keeps the same statistics."""
        x = samples.detach().to(torch.float64).reshape(-1, *self.mean.shape)
        moments = torch.stack([torch.full_like(self.mean, x.shape[0]), x.sum(0), (x * x).sum(0)])
        if reduce is not None:
            moments = reduce(moments)
        n, total, squares = moments[0].reshape(-1)[0], moments[1], moments[2]
        batch_mean = total / n
        batch_var = (squares / n - batch_mean * batch_mean).clamp_min(0.0)
        delta, count = batch_mean - self.mean, self.count + n
        self.var.copy_((self.var * self.count + batch_var * n + delta * delta * self.count * n / count) / count)
        self.mean.add_(delta * n / count)
        self.count.copy_(count)
        self._refresh()

    def standardize(self, x: Tensor, clip: float) -> Tensor:
        """``clip((x - mean) / sqrt(var + 1e-8), -clip, clip)``, in float32 (``shift``, ``scale``)."""
        return ((x - self.shift) / self.scale).clamp(-clip, clip)

    def rescale(self, x: Tensor, clip: float) -> Tensor:
        """``clip(x / sqrt(var + 1e-8), -clip, clip)``, in float32 (no centring: a reward keeps its sign)."""
        return (x / self.scale).clamp(-clip, clip)


class NormalizedInput(nn.Module):
    """A policy module with its first input standardised by running statistics: ``policy(standardize(x), *rest)``.

    Args:
        policy: the policy module (e.g. :class:`modules.actor_critic.CategoricalPolicy`). statistics: the
            observation's :class:`RunningMeanStd`. clip: in standard deviations.
    """

    def __init__(self, policy: nn.Module, statistics: RunningMeanStd, clip: float) -> None:
        super().__init__()
        self.policy = policy
        self.statistics = statistics
        self.clip = float(clip)

    def forward(self, observation: Tensor, *rest: Tensor):
        return self.policy(self.statistics.standardize(observation, self.clip), *rest)


class Standardize(nn.Module):
    """``x`` ``[*B, *S]`` -> ``statistics.standardize(x, clip)``, as a module of its own (a recurrent policy's first
    step, whose LSTMs read the result from the TensorDict)."""

    def __init__(self, statistics: RunningMeanStd, clip: float) -> None:
        super().__init__()
        self.statistics, self.clip = statistics, float(clip)

    def forward(self, x: Tensor) -> Tensor:
        return self.statistics.standardize(x, self.clip)


class RewardNormalizer(nn.Module):
    """Rewards divided by the running standard deviation of the discounted return (SB3's ``VecNormalize`` with
    ``norm_reward``): per env row, ``R_t = gamma R_{t-1} + r_t``, reset to 0 after the step that ends an episode;
    the statistics merge every ``R_t`` of a batch, then each ``r_t`` becomes ``clip(r_t / sqrt(Var(R) + 1e-8))``.

    The returns in progress ``[B]`` carry over from batch to batch (:attr:`returns`, in the training state of the
    checkpoint: see :meth:`modules.ppo.PPOModule.on_save_checkpoint`).

    Args:
        gamma: the discount of the return (the algorithm's). clip: in standard deviations.
    """

    def __init__(self, gamma: float, clip: float) -> None:
        super().__init__()
        self.gamma, self.clip = float(gamma), float(clip)
        self.statistics = RunningMeanStd()
        self.returns: Tensor | None = None  # [B] float64, the discounted returns in progress

    def forward(self, reward: Tensor, done: Tensor, reduce: Callable[[Tensor], Tensor] | None = None) -> Tensor:
        """``reward``, ``done`` ``[B, T, 1]`` (a collected batch, in time order) -> normalised rewards ``[B, T, 1]``.

        Raises:
            ValueError: the batch has another number of env rows than the returns carried over.
        """
        rows, steps = reward.shape[:2]
        returns = self.returns
        if returns is None:
            returns = torch.zeros(rows, dtype=torch.float64, device=reward.device)
        if returns.shape[0] != rows:
            raise ValueError(f"reward normalisation carries the returns of {returns.shape[0]} env rows, but the batch "
                             f"has {rows}: the number of envs changed within a run")
        r, ended = reward.detach().to(torch.float64).reshape(rows, steps), done.reshape(rows, steps)
        discounted = torch.empty_like(r)
        for t in range(steps):
            returns = returns * self.gamma + r[:, t]
            discounted[:, t] = returns
            returns = returns.masked_fill(ended[:, t], 0.0)
        self.returns = returns
        self.statistics.update(discounted.reshape(-1), reduce)
        return self.statistics.rescale(reward, self.clip)

    def gather_returns(self) -> list[Tensor | None]:
        """The returns in progress of every DDP rank, in rank order (one entry in one process): what a checkpoint
        keeps."""
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            gathered = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, self.returns)
            return gathered
        return [self.returns]

    def load_returns(self, saved: list[Tensor | None] | None, rank: int) -> None:
        """Take rank ``rank``'s returns in progress of :meth:`gather_returns`'s list (rank 0's where it has fewer);
        nothing for None.

        Raises:
            RestoredStateError: an entry that is not a float64 vector of finite returns (names it)."""
        if not saved:
            return
        if not isinstance(saved, list):
            raise RestoredStateError(f"rl_state.reward_returns is {type(saved).__name__}, not a list")
        index = rank if rank < len(saved) else 0
        returns = saved[index]
        if returns is not None:
            key = f"rl_state.reward_returns[{index}]"
            if not isinstance(returns, Tensor) or returns.dim() != 1:
                raise RestoredStateError(f"{key} is not a vector of returns")
            returns = restored_tensor(returns, key, dtype=torch.float64)
        self.returns = returns


class VecNormalization(nn.Module):
    """The observation and reward normalisation of a PPO learner, either or both (SB3's ``VecNormalize`` with
    ``norm_obs`` / ``norm_reward``).

    A collected batch ``[B, T]`` is normalised by :meth:`observations` with the statistics its policy played with,
    before they merge the batch's raw observations (so a loss's first ratio on it is 1, as SB3 stores the
    observations it normalised at each step); :meth:`rewards` merges the returns, then scales.

    Args:
        observation_key: the observation entry (a float vector ``[*B, F]``). observation_shape: F's shape, or None
            for no observation normalisation. gamma: the return's discount, or None for no reward normalisation.
        clip: in standard deviations (VecNormalize's ``clip_obs`` and ``clip_reward``, 10).
        out_key: where the policy writes the standardised observation (:meth:`standardizer`, a recurrent
            policy's first step), kept beside the env's; None: the policy standardises its input itself
            (:meth:`wrap`) and a batch's observations are standardised in place.
    """

    def __init__(self, observation_key: str, observation_shape: tuple[int, ...] | None, gamma: float | None,
                 clip: float, out_key: str | None = None) -> None:
        super().__init__()
        self.observation_key, self.clip, self.out_key = observation_key, float(clip), out_key
        self.observation = RunningMeanStd(observation_shape) if observation_shape is not None else None
        self.reward = RewardNormalizer(gamma, clip) if gamma is not None else None

    @classmethod
    def of(cls, example, key: str, observation: bool, gamma: float | None, clip: float,
           out_key: str | None = None) -> VecNormalization | None:
        """The normalisation of a module's settings (``observation``: normalise ``key``, shaped as in ``example``,
        the env's example observation ``[1]``; ``gamma``: normalise rewards), or None for neither."""
        if not observation and gamma is None:
            return None
        shape = tuple(example.get(key).shape[example.batch_dims:]) if observation else None
        return cls(key, shape, gamma, clip, out_key)

    def wrap(self, policy: nn.Module) -> nn.Module:
        """The policy module with its (first) input standardised, where observations are normalised."""
        return policy if self.observation is None else NormalizedInput(policy, self.observation, self.clip)

    def standardizer(self) -> TensorPolicy:
        """The policy step ``observation_key`` -> ``out_key`` (standardised)."""
        return TensorPolicy(Standardize(self.observation, self.clip), [self.observation_key], [self.out_key])

    def observations(self, batch, reduce: Callable[[Tensor], Tensor] | None = None) -> None:
        """Standardise ``observation_key`` and ``("next", observation_key)`` of ``batch`` ``[B, T]`` in place (with
        ``out_key``: the next observations into ``("next", out_key)``, the policy having written the others), then
        merge the raw observations (the root ones: every observation a policy acted on) into the statistics."""
        if self.observation is None:
            return
        key = self.observation_key
        raw = batch.get(key)
        if self.out_key is None:
            batch.set(key, self.observation.standardize(raw, self.clip))
        batch.set(("next", self.out_key or key), self.observation.standardize(batch.get(("next", key)), self.clip))
        self.observation.update(raw.reshape(-1, *self.observation.mean.shape), reduce)

    def rewards(self, reward: Tensor, done: Tensor, reduce: Callable[[Tensor], Tensor] | None = None) -> Tensor:
        """:class:`RewardNormalizer` of ``reward``, ``done`` ``[B, T, 1]``; the rewards as they are without it."""
        return reward if self.reward is None else self.reward(reward, done, reduce)


class ReturnsInCheckpoint:
    """The checkpoint hooks of a module with a :class:`VecNormalization` ``normalization`` (a mixin before
    ``modules.base.RLModule``): the reward normalisation's returns in progress, per rank, in the training state
    (``rl_state.reward_returns``), so that a resumed run continues them."""

    normalization: VecNormalization | None

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        if self.normalization is not None and self.normalization.reward is not None:
            checkpoint["rl_state"]["reward_returns"] = self.normalization.reward.gather_returns()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        if self.normalization is not None and self.normalization.reward is not None:
            rank = self.trainer.global_rank if self._trainer is not None else 0
            self.normalization.reward.load_returns(checkpoint.get("rl_state", {}).get("reward_returns"), rank)
