"""Soft actor-critic on the off-policy pipeline: continuous actions (Haarnoja et al. 2018, "Soft
Actor-Critic Algorithms and Applications", arXiv:1812.05905: tanh-Gaussian actor, twin Q-networks,
learned temperature) on TorchRL's ``SACLoss``, and discrete actions (Christodoulou 2019, "Soft
Actor-Critic for Discrete Action Settings", arXiv:1910.07207) on TorchRL's ``DiscreteSACLoss``."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import Tensor, nn
from torch.distributions import Categorical as TorchCategorical
from torchrl.data import Bounded, Categorical, OneHot
from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import DiscreteSACLoss, SACLoss, SoftUpdate, ValueEstimators

from envs import EnvSpecs
from modules.base import RLModule

_LOSSES = ("loss_actor", "loss_qvalue", "loss_alpha")


def _mlp(out_features: int, hidden_dims: tuple[int, ...]) -> nn.Sequential:
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
        actor_hidden_dims, critic_hidden_dims: hidden layer widths.
    """

    def __init__(self, actor_hidden_dims: tuple[int, ...] = (256, 256),
                 critic_hidden_dims: tuple[int, ...] = (256, 256)) -> None:
        super().__init__()
        self.actor_hidden_dims = tuple(actor_hidden_dims)
        self.critic_hidden_dims = tuple(critic_hidden_dims)
        self.actor: nn.Module | None = None
        self.critic: nn.Module | None = None

    def build(self, num_outputs: int, discrete: bool) -> None:
        """Create the MLPs for ``num_outputs`` (the action dim, or the number of actions)."""
        if discrete:
            self.actor = _mlp(num_outputs, self.actor_hidden_dims)
            self.critic = _mlp(num_outputs, self.critic_hidden_dims)
        else:
            self.actor = nn.Sequential(_mlp(2 * num_outputs, self.actor_hidden_dims), NormalParamExtractor())
            self.critic = _Critic(_mlp(1, self.critic_hidden_dims))


class _Critic(nn.Module):
    """Q(s, a) on the concatenation ``[observation, action]``."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.mlp = mlp

    def forward(self, observation: Tensor, action: Tensor) -> Tensor:
        return self.mlp(torch.cat([observation, action], -1))


class SACModule(RLModule):
    """SAC on sampled replay batches (``pipelines.data.OffPolicyDataModule``).

    The collector runs the stochastic actor (exploration); evaluation runs it deterministically (the
    squashed mean, or the most likely action). ``training_step`` sums the actor, critic and temperature
    losses (each loss only reaches its own parameters: TorchRL detaches the critic in the actor loss),
    takes one Adam step with a learning rate per group, and then the soft target update (Polyak ``tau``).
    The action spec decides the variant: ``Bounded`` (continuous, ``SACLoss``; the tanh squashing maps
    to the spec's low and high) or ``Categorical`` / ``OneHot`` (discrete, ``DiscreteSACLoss``). The
    target entropy is TorchRL's default (-A for continuous actions, a fraction of log A for discrete
    ones).

    Args:
        network: the actor and critic MLPs (:class:`SACNetworks`).
        actor_lr, critic_lr, alpha_lr: Adam learning rates. gamma: discount per env step.
        tau: soft target update rate per optimiser step. num_qvalue_nets: critics (twin: 2).
        alpha_init: initial temperature. fixed_alpha: keep the temperature at ``alpha_init``.
        max_grad_norm: global gradient-norm clip.
        observation_key: the observation the networks read.

    Raises:
        ValueError: an out-of-range hyper-parameter (the message names it), or an action spec that is
            neither bounded continuous nor discrete.
    """

    def __init__(self, network: SACNetworks, actor_lr: float = 3e-4, critic_lr: float = 3e-4,
                 alpha_lr: float = 3e-4, gamma: float = 0.99, tau: float = 0.005, num_qvalue_nets: int = 2,
                 alpha_init: float = 1.0, fixed_alpha: bool = False, max_grad_norm: float = 10.0,
                 observation_key: str = "observation") -> None:
        super().__init__()
        for key, value, ok in (("actor_lr", actor_lr, actor_lr > 0), ("critic_lr", critic_lr, critic_lr > 0),
                               ("alpha_lr", alpha_lr, alpha_lr > 0), ("gamma", gamma, 0 <= gamma <= 1),
                               ("tau", tau, 0 < tau <= 1), ("num_qvalue_nets", num_qvalue_nets, num_qvalue_nets >= 1),
                               ("alpha_init", alpha_init, alpha_init > 0)):
            if not ok:
                raise ValueError(f"model.{key}={value} is not allowed (learning rates, alpha_init > 0; gamma in [0, 1]; "
                                 f"tau in (0, 1]; num_qvalue_nets >= 1)")
        self.save_hyperparameters(ignore=["network"])
        self.network = network
        self._actor: ProbabilisticActor | None = None

    def build(self, action_spec, observation: TensorDict) -> None:
        """Build actor, critic, loss and target updater for the env's per-sample ``action_spec``, after
        shaping the lazy layers on an example ``observation``."""
        h = self.hparams
        discrete = isinstance(action_spec, (Categorical, OneHot))
        if discrete:
            n = int(action_spec.space.n)
            self.network.build(n, discrete=True)
            module = TensorDictModule(self.network.actor, [h.observation_key], ["logits"])
            self._actor = ProbabilisticActor(module, in_keys=["logits"], spec=action_spec,
                                             distribution_class=TorchCategorical, return_log_prob=False)
            critic = TensorDictModule(self.network.critic, [h.observation_key], ["action_value"])
            with torch.no_grad():
                self._actor(observation.clone())
                critic(observation.clone())
            self.loss = DiscreteSACLoss(self._actor, critic, action_space=action_spec, num_actions=n,
                                        num_qvalue_nets=h.num_qvalue_nets, alpha_init=h.alpha_init,
                                        fixed_alpha=h.fixed_alpha)
        elif isinstance(action_spec, Bounded) and action_spec.domain == "continuous":
            dim = int(action_spec.shape[-1])
            self.network.build(dim, discrete=False)
            module = TensorDictModule(self.network.actor, [h.observation_key], ["loc", "scale"])
            low, high = action_spec.space.low, action_spec.space.high
            self._actor = ProbabilisticActor(module, in_keys=["loc", "scale"], spec=action_spec,
                                             distribution_class=TanhNormal,
                                             distribution_kwargs={"low": low, "high": high}, return_log_prob=False)
            critic = ValueOperator(self.network.critic, in_keys=[h.observation_key, "action"])
            with torch.no_grad():
                example = self._actor(observation.clone())
                critic(example)
            self.loss = SACLoss(self._actor, critic, num_qvalue_nets=h.num_qvalue_nets, action_spec=action_spec,
                                alpha_init=h.alpha_init, fixed_alpha=h.fixed_alpha, deactivate_vmap=True)
        else:
            raise ValueError(f"SACModule needs a bounded continuous (Bounded) or a discrete (Categorical, OneHot) "
                             f"action spec, got {type(action_spec).__name__}")
        self.loss.make_value_estimator(ValueEstimators.TD0, gamma=h.gamma)
        self.loss.target_entropy  # noqa: B018 (registers its lazily made buffer, so checkpoints load into a new module)
        self.target = SoftUpdate(self.loss, tau=h.tau)

    @property
    def collector_policy(self) -> ProbabilisticActor:
        return self._actor

    def prepare(self, specs: EnvSpecs) -> None:
        """Build on the env's specs: its action spec and an example observation (lazy layers)."""
        if self._actor is None:
            self.build(specs.agent_action_spec, specs.example_observation)

    # ------------------------------------------------------------------ update
    def training_step(self, batch: TensorDict, batch_idx: int) -> Tensor:
        """One optimiser step and target update per sampled batch of ``batch`` ``[K, N]``, in order; with
        prioritised replay the items' |TD error| is written into ``batch`` under ``td_error`` ``[K, N, 1]``."""
        optimizer = self.optimizers()
        errors = []
        for sample in batch.unbind(0):
            out = self.loss(sample)
            loss = sum(out[k] for k in _LOSSES)
            optimizer.zero_grad()
            self.manual_backward(loss)
            grad_norm = torch.nn.utils.clip_grad_norm_(self.loss.parameters(), self.hparams.max_grad_norm)
            optimizer.step()
            self.target.step()
            for key in _LOSSES:
                self.record(f"train/{key}", out[key].detach())
            self.record("train/alpha", out["alpha"].detach())
            self.record("train/entropy", out["entropy"].detach())
            self.record("train/grad_norm", grad_norm)
            if "td_error" in sample.keys():  # the loss wrote it; prioritised replay reads it
                errors.append(sample["td_error"].detach().reshape(*sample.shape, -1)[..., :1])
        if len(errors) == batch.shape[0]:
            batch.set("td_error", torch.stack(errors))
        return loss.detach()

    def configure_optimizers(self):
        h, groups = self.hparams, {"actor": [], "qvalue": [], "alpha": []}
        for name, param in self.loss.named_parameters():
            group = "actor" if name.startswith("actor_network_params") else (
                "qvalue" if name.startswith("qvalue_network_params") else "alpha")
            groups[group].append(param)
        lrs = {"actor": h.actor_lr, "qvalue": h.critic_lr, "alpha": h.alpha_lr}
        return torch.optim.Adam([{"params": p, "lr": lrs[g]} for g, p in groups.items() if p], fused=True)
