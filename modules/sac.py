"""Soft actor-critic on the off-policy pipeline: continuous actions (Haarnoja et al. 2018, "Soft
Actor-Critic Algorithms and Applications", arXiv:1812.05905: tanh-Gaussian actor, twin Q-networks,
learned temperature) and discrete actions (Christodoulou 2019, "Soft Actor-Critic for Discrete Action
Settings", arXiv:1910.07207). The update is :mod:`modules.sac_loss`, tested equal to TorchRL's ``SACLoss``
and ``DiscreteSACLoss``."""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor
from torch import Tensor, nn
from torch.distributions import Categorical as TorchCategorical
from torchrl.data import Bounded, Categorical, OneHot
from torchrl.envs.utils import ExplorationType, exploration_type

from envs import EnvSpecs
from modules.base import RLModule
from modules.checks import DISCOUNT, LEARNING_RATE, check_hparams
from modules.compatibility import check_sizes, class_path, require_action_kind, require_bounded, require_keys
from modules.policy import TensorPolicy
from modules.sac_loss import Critics, continuous_sac_loss, discrete_sac_loss, tanh_normal_rsample
from modules.target import TargetNetwork

_RECORDED = ("loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy")


def lazy_mlp(out_features: int, hidden_dims: tuple[int, ...]) -> nn.Sequential:
    """ReLU MLP with a lazy input width: ``[*B, F]`` -> ``[*B, out_features]``."""
    layers: list[nn.Module] = []
    for width in hidden_dims:
        layers += [nn.LazyLinear(width), nn.ReLU()]
    return nn.Sequential(*layers, nn.LazyLinear(out_features))


class SACNetworks(nn.Module):
    """The actor and the critic of SAC, as MLPs.

    * continuous actions (A = the action dim): actor ``observation`` -> ``loc``, ``scale`` ``[*B, A]``
      of a tanh-squashed Gaussian (scale = softplus + 1e-4, TorchRL's ``NormalParamExtractor``); critic
      ``(observation, action)`` -> Q ``[*B, 1]``;
    * discrete actions (A = the number of actions): actor ``observation`` -> ``logits`` ``[*B, A]``;
      critic ``observation`` -> every action's Q ``[*B, A]``.

    The loss makes the twin critics (``num_qvalue_nets`` copies) and their target copies. Input widths
    are lazy (taken from the first observation).

    Args:
        actor_hidden_dims: hidden layer widths of the actor (each >= 1; ``[]``: none).
        critic_hidden_dims: hidden layer widths of each critic (each >= 1; ``[]``: none).

    Raises:
        ValueError: a width below 1 (the message names the key).
    """

    def __init__(self, actor_hidden_dims: tuple[int, ...] = (256, 256),
                 critic_hidden_dims: tuple[int, ...] = (256, 256)) -> None:
        super().__init__()
        check_sizes(actor_hidden_dims=actor_hidden_dims, critic_hidden_dims=critic_hidden_dims)
        self.actor_hidden_dims = tuple(actor_hidden_dims)
        self.critic_hidden_dims = tuple(critic_hidden_dims)
        self.actor: nn.Module | None = None
        self.critic: nn.Module | None = None

    def build(self, num_outputs: int, discrete: bool) -> None:
        """Create the MLPs for ``num_outputs`` (the action dim, or the number of actions)."""
        if discrete:
            self.actor = lazy_mlp(num_outputs, self.actor_hidden_dims)
            self.critic = lazy_mlp(num_outputs, self.critic_hidden_dims)
        else:
            self.actor = nn.Sequential(lazy_mlp(2 * num_outputs, self.actor_hidden_dims), NormalParamExtractor())
            self.critic = StateActionCritic(lazy_mlp(1, self.critic_hidden_dims))


class StateActionCritic(nn.Module):
    """Q(s, a) on the concatenation ``[observation, action]``."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.mlp = mlp

    def forward(self, observation: Tensor, action: Tensor) -> Tensor:
        return self.mlp(torch.cat([observation, action], -1))


class SACActorPolicy(nn.Module):
    """The collector's SAC policy: the actor's action distribution and one draw from it, as TorchRL's
    ``ProbabilisticActor`` over the actor draws it (``tests/modules/test_sac.py`` checks the same actions on the
    same random state), without its TensorDict modules around every call.

    * continuous (``low``, ``high`` given): ``TanhNormal(loc, scale, low, high)`` of the actor's ``loc, scale``
      (drawn by :func:`modules.sac_loss.tanh_normal_rsample`);
    * discrete: ``Categorical(logits)``.

    Under ``ExplorationType.RANDOM`` (the collector's) the action is a sample (``rsample`` for the tanh-normal);
    otherwise (evaluation, and outside any setting, ``ProbabilisticActor``'s default) it is deterministic: the
    tanh-normal's ``deterministic_sample`` (the squashed mean, computed here in plain tensor ops, so that
    ``pipelines.export`` can trace it) or the most likely action.

    Called as ``policy(observation)`` ``[*B, F]``; returns the action ``[*B, A]`` (continuous) or ``[*B]`` (int64).

    Args:
        actor: the actor network (``SACNetworks.actor``). low, high: the action bounds ``[A]`` (continuous);
            None for a discrete actor.
    """

    def __init__(self, actor: nn.Module, low: Tensor | None = None, high: Tensor | None = None) -> None:
        super().__init__()
        self.actor = actor
        self.discrete = low is None
        if not self.discrete:
            self.register_buffer("low", low.clone())
            self.register_buffer("high", high.clone())

    def forward(self, observation: Tensor) -> Tensor:
        sample = exploration_type() == ExplorationType.RANDOM
        if self.discrete:
            dist = TorchCategorical(logits=self.actor(observation))
            return dist.sample() if sample else dist.mode
        loc, scale = self.actor(observation)
        if not sample:  # TanhNormal's deterministic_sample written out (its safe tanh cannot be traced for export)
            limit = 1.0 - torch.finfo(loc.dtype).resolution
            return (self.high + self.low) / 2 + (self.high - self.low) / 2 * loc.tanh().clamp(-limit, limit)
        return tanh_normal_rsample(loc, scale, self.low, self.high, log_prob=False)[0]


class SACModule(RLModule):
    """SAC on sampled replay batches (``pipelines.data.OffPolicyDataModule``).

    The collector runs the stochastic actor (exploration); evaluation runs it deterministically (the
    squashed mean, or the most likely action). ``training_step`` gets ``[K, N]`` sampled batches (K updates)
    and, for each, sums the actor, critic and temperature losses of :mod:`modules.sac_loss` (each loss only
    reaches its own parameters: the critics are frozen in the actor loss), takes one Adam step with a learning
    rate per group, and then the soft target update of the critics (Polyak ``tau``). The action spec decides
    the variant: ``Bounded`` (continuous; the tanh squashing maps to the spec's low and high) or
    ``Categorical`` / ``OneHot`` (discrete). The target entropy is TorchRL's default (-A for continuous
    actions, 0.98 log A for discrete ones).

    Args:
        network: the actor and critic MLPs (:class:`SACNetworks`).
        actor_lr: Adam learning rate of the actor.
        critic_lr: Adam learning rate of the critics.
        alpha_lr: Adam learning rate of the temperature.
        gamma: discount per env step.
        tau: soft target update rate per optimiser step.
        num_qvalue_nets: critics (twin: 2).
        alpha_init: initial temperature.
        fixed_alpha: keep the temperature at ``alpha_init``.
        max_grad_norm: global gradient-norm clip.
        observation_key: the observation the networks read.
        compile: run the update's loss through ``torch.compile`` (see :class:`modules.base.RLModule`).
        compile_mode: ``torch.compile``'s mode (null, ``default``, ``reduce-overhead``: CUDA graphs, ...).

    Raises:
        ValueError: an out-of-range hyper-parameter (the message names it), or an action spec that is
            neither bounded continuous nor discrete.
    """

    def __init__(self, network: SACNetworks, actor_lr: float = 3e-4, critic_lr: float = 3e-4,
                 alpha_lr: float = 3e-4, gamma: float = 0.99, tau: float = 0.005, num_qvalue_nets: int = 2,
                 alpha_init: float = 1.0, fixed_alpha: bool = False, max_grad_norm: float = 10.0,
                 observation_key: str = "observation", compile: bool = False,
                 compile_mode: str | None = None) -> None:
        super().__init__(compile, compile_mode)
        check_hparams(*((key, value, 0 < value <= 1, LEARNING_RATE)
                        for key, value in (("actor_lr", actor_lr), ("critic_lr", critic_lr), ("alpha_lr", alpha_lr))),
                      ("gamma", gamma, 0 <= gamma <= 1, DISCOUNT), ("tau", tau, 0 < tau <= 1, "in (0, 1]"),
                      ("num_qvalue_nets", num_qvalue_nets, num_qvalue_nets >= 1, ">= 1"),
                      ("alpha_init", alpha_init, 0 < alpha_init < math.inf, "> 0 and finite"),
                      ("max_grad_norm", max_grad_norm, 0 < max_grad_norm < math.inf, "> 0 and finite"))
        self.save_config("network")
        self.network = network
        self.policy: SACActorPolicy | None = None
        self._policy: TensorPolicy | None = None

    def build(self, action_spec, observation: TensorDict) -> None:
        """Build the actor (the collector's policy), the critics (``num_qvalue_nets`` copies of the network's
        critic), their soft-updated targets and the temperature for the env's per-sample ``action_spec``, after
        shaping the lazy layers on an example ``observation``."""
        h = self.hparams
        discrete = isinstance(action_spec, (Categorical, OneHot))
        obs = observation.get(h.observation_key)
        if discrete:
            n = int(action_spec.space.n)
            self.network.build(n, discrete=True)
            self.policy = SACActorPolicy(self.network.actor)
            with torch.no_grad():
                self.network.actor(obs)
                self.network.critic(obs)
            target_entropy = -math.log(1.0 / n) * 0.98  # TorchRL DiscreteSACLoss's default
        elif isinstance(action_spec, Bounded) and action_spec.domain == "continuous":
            dim = int(action_spec.shape[-1])
            self.network.build(dim, discrete=False)
            self.policy = SACActorPolicy(self.network.actor, action_spec.space.low, action_spec.space.high)
            with torch.no_grad():
                self.network.critic(obs, self.policy(obs))
            target_entropy = -float(dim)  # TorchRL SACLoss's default: -A
        else:
            raise ValueError(f"SACModule needs a bounded continuous (Bounded) or a discrete (Categorical, OneHot) "
                             f"action spec, got {type(action_spec).__name__}")
        self.discrete = discrete
        self._policy = TensorPolicy(self.policy, [h.observation_key], ["action"])
        self.critics = Critics(self.network.critic, h.num_qvalue_nets)
        self.target = TargetNetwork(self.critics, "soft", tau=h.tau)
        log_alpha = torch.tensor(math.log(h.alpha_init))
        if h.fixed_alpha:
            self.register_buffer("log_alpha", log_alpha)
        else:
            self.log_alpha = nn.Parameter(log_alpha)
        self.register_buffer("target_entropy", torch.tensor(target_entropy))

    def replay_keys(self) -> list:
        """The loss's inputs: the observation now and next, the action, the reward and the done flags."""
        return self.transition_keys([self.hparams.observation_key])

    def loss(self, batch: TensorDict) -> dict[str, Tensor]:
        """:func:`modules.sac_loss.continuous_sac_loss` or :func:`~modules.sac_loss.discrete_sac_loss` of a
        sampled batch ``[N]``."""
        h = self.hparams
        if self.discrete:
            return discrete_sac_loss(self.network.actor, self.critics, self.target, batch, self.log_alpha,
                                     self.target_entropy, h.gamma, h.observation_key)
        return continuous_sac_loss(self.network.actor, self.critics, self.target, batch, self.log_alpha,
                                   self.target_entropy, h.gamma, self.policy.low, self.policy.high, h.observation_key)

    @property
    def collector_policy(self) -> TensorPolicy:
        """:class:`SACActorPolicy` on the observation, writing ``action``."""
        return self._policy

    def prepare(self, specs: EnvSpecs) -> None:
        """Build on the env's specs: its action spec and an example observation (lazy layers)."""
        if self.policy is None:
            self.build(specs.agent_action_spec, specs.example_observation)

    def check_env(self, specs: EnvSpecs) -> None:
        """SAC takes discrete actions (one integer of n choices) or bounded continuous ones (the tanh-squashed actor
        maps to the spec's low and high), one agent's in a multi-agent env (the replay buffer holds one row per
        agent); ``observation_key`` must be an entry of the env's observation.

        Raises:
            ValueError: the first mismatch, naming the config key and both sides.
        """
        module = class_path(self)
        require_action_kind(specs, ("discrete", "continuous"), module)
        require_bounded(specs, module, "its tanh-squashed actor maps to the spec's low and high")
        require_keys(specs, "model.init_args.observation_key", [self.hparams.observation_key])

    # ------------------------------------------------------------------ update
    def training_step(self, batch: TensorDict, batch_idx: int) -> Tensor:
        """One optimiser step and target update per sampled batch of ``batch`` ``[K, N]``, in order; writes the
        items' |TD error| (max over the critics) into ``batch`` under ``td_error`` ``[K, N, 1]`` (for prioritised
        replay)."""
        optimizer = self.optimizers()
        rows, errors = [], []
        for sample in batch.unbind(0):
            out = self.update_loss(sample)
            loss = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
            grad_norm = self.optimizer_update(optimizer, loss, self.hparams.max_grad_norm)
            self.target.step()
            rows.append(torch.stack([*(out[k].detach() for k in _RECORDED), grad_norm]))
            errors.append(out["td_error"].unsqueeze(-1))
        batch.set("td_error", torch.stack(errors))
        self.record_updates([f"train/{k}" for k in (*_RECORDED, "grad_norm")], rows)
        return loss.detach()

    def configure_optimizers(self):
        h = self.hparams
        groups = [(list(self.network.actor.parameters()), h.actor_lr), (list(self.critics.parameters()), h.critic_lr)]
        if not h.fixed_alpha:
            groups.append(([self.log_alpha], h.alpha_lr))
        return torch.optim.Adam([{"params": params, "lr": lr} for params, lr in groups], fused=True)
