"""The network contract of the actor-critic algorithms (PPO): encoder -> policy head / value head."""

from __future__ import annotations

import math
from abc import abstractmethod

import torch
from torch import Tensor, nn
from torchrl.envs.utils import ExplorationType, exploration_type
from torchrl.modules import MaskedCategorical

from modules.compatibility import check_count, check_sizes


class ActorCriticNetwork(nn.Module):
    """A shared encoder with a policy head and a value head.

    PPO runs the encoder once per minibatch and both heads on its output, so shared features get
    gradients from both losses. Subclasses set the TensorDict keys they read.

    Attributes:
        in_keys: observation keys passed, in order, to :meth:`encode`.
        policy_keys: extra observation keys passed after the hidden state to :meth:`policy`.
    """

    in_keys: list[str]
    policy_keys: list[str] = []

    def shape_actions(self, num_actions: int) -> None:
        """Fit the policy head to the env's A discrete actions (called before training or loading weights). The
        default checks a network that has a ``num_actions`` attribute.

        Raises:
            ValueError: the network was built for another number of actions (the message names both).
        """
        check_count(getattr(self, "num_actions", None), num_actions, "actions")

    @abstractmethod
    def encode(self, *observation: Tensor) -> Tensor:
        """Observation tensors ``[*B, ...]`` -> hidden state ``[*B, H]``."""

    @abstractmethod
    def policy(self, hidden: Tensor, *extra: Tensor) -> Tensor:
        """Hidden state (and ``policy_keys``) -> action logits ``[*B, A]`` (unmasked)."""

    @abstractmethod
    def value(self, hidden: Tensor) -> Tensor:
        """Hidden state -> state value ``[*B, 1]``."""


class MLPActorCritic(ActorCriticNetwork):
    """Separate actor and critic MLPs on a flat observation (Stable-Baselines3's ``MlpPolicy`` for PPO):
    the "encoder" passes the observation ``[*B, F]`` through, the policy MLP maps it to logits ``[*B, A]`` and
    the value MLP to ``[*B, 1]``. Input width is lazy.

    With ``orthogonal_init`` the linear layers start orthogonal with gain sqrt(2) in the hidden layers, 0.01 in
    the policy output and 1 in the value output, zero biases (the initialisation of SB3's PPO, after
    Andrychowicz et al. 2021, "What matters in on-policy RL", sec. 3.2).

    Args:
        num_actions: A, the number of discrete actions; null (the default): the env's (the policy output is built
            on the env's action spec, :meth:`shape_actions`, so that switching the env is one key).
        hidden_dims: hidden widths of each MLP (each >= 1; ``[]``: none).
        activation: ``tanh`` or ``relu``.
        observation_key: the observation entry.
        orthogonal_init: as above (else PyTorch's default).

    Raises:
        ValueError: an unknown activation, or a width or ``num_actions`` below 1 (the message names the key).
    """

    def __init__(self, num_actions: int | None = None, hidden_dims: tuple[int, ...] = (64, 64),
                 activation: str = "tanh", observation_key: str = "observation", orthogonal_init: bool = True) -> None:
        super().__init__()
        if activation not in ("tanh", "relu"):
            raise ValueError(f"model.network.activation={activation!r} is not allowed: one of tanh, relu")
        check_sizes(num_actions=num_actions, hidden_dims=hidden_dims)
        act = nn.Tanh if activation == "tanh" else nn.ReLU
        self.in_keys = [observation_key]
        self.num_actions = num_actions
        self.orthogonal_init = orthogonal_init

        def mlp(out: int | None) -> nn.Sequential:
            layers: list[nn.Module] = []
            for width in hidden_dims:
                layers += [nn.LazyLinear(width), act()]
            return nn.Sequential(*layers, *([nn.LazyLinear(out)] if out is not None else []))

        self.actor, self.critic = mlp(num_actions), mlp(1)
        self._initialised = not orthogonal_init

    def shape_actions(self, num_actions: int) -> None:
        """Add the policy output for the env's ``num_actions`` when none was given; else check it.

        Raises:
            ValueError: ``num_actions`` was given and differs from the env's.
        """
        if self.num_actions is None:
            self.num_actions = num_actions
            self.actor.append(nn.LazyLinear(num_actions))
        super().shape_actions(num_actions)

    def encode(self, observation: Tensor) -> Tensor:
        return observation

    def policy(self, hidden: Tensor) -> Tensor:
        if self.num_actions is None:
            raise RuntimeError("MLPActorCritic: no policy output yet (shape_actions builds it on the env's actions)")
        self._initialise(hidden)
        return self.actor(hidden)

    def value(self, hidden: Tensor) -> Tensor:
        self._initialise(hidden)
        return self.critic(hidden)

    def _initialise(self, observation: Tensor) -> None:
        """Orthogonal initialisation, once the lazy layers know their input width (first call)."""
        if self._initialised or self.num_actions is None:  # (no policy output yet: shape_actions first)
            return
        with torch.no_grad():
            self.actor(observation[:1])
            self.critic(observation[:1])
            for net, last_gain in ((self.actor, 0.01), (self.critic, 1.0)):
                linears = [m for m in net if isinstance(m, nn.Linear)]
                for i, layer in enumerate(linears):
                    nn.init.orthogonal_(layer.weight, gain=last_gain if i == len(linears) - 1 else math.sqrt(2))
                    nn.init.zeros_(layer.bias)
        self._initialised = True


class CategoricalPolicy(nn.Module):
    """The collector's policy of an :class:`ActorCriticNetwork`: one call that encodes, reads the logits and
    draws the action, as TorchRL's ``ProbabilisticActor`` over ``Categorical`` (or ``MaskedCategorical`` with a
    mask) draws it: ``dist.sample()`` under ``ExplorationType.RANDOM`` (what the collector sets), the mode
    otherwise (evaluation, and outside any setting: ``ProbabilisticActor``'s default, so that a call made to
    shape the network or the collector's buffers draws no random numbers).

    Called as ``policy(*inputs)`` with the network's ``in_keys``, then its ``policy_keys`` (then the boolean
    mask ``[*B, A]`` when ``masked``); returns the action ``[*B]``, its log-probability ``[*B]`` and the hidden
    state (kept in the batch, so that values need no second encoder pass).

    Args:
        network: the actor-critic network. masked: the last input is an action mask.
    """

    def __init__(self, network: ActorCriticNetwork, masked: bool) -> None:
        super().__init__()
        self.network = network
        self.masked = masked

    def _logits(self, *inputs: Tensor) -> tuple[Tensor, Tensor]:
        net, n = self.network, len(self.network.in_keys)
        hidden = net.encode(*inputs[:n])
        extra = inputs[n:-1] if self.masked else inputs[n:]
        return net.policy(hidden, *extra), hidden

    def distribution(self, *inputs: Tensor) -> tuple[torch.distributions.Categorical, Tensor]:
        """The action distribution and the hidden state of ``inputs``."""
        logits, hidden = self._logits(*inputs)
        if self.masked:
            return MaskedCategorical(logits=logits, mask=inputs[-1]), hidden
        # no argument checks (26 us of a CartPole policy call): non-finite logits stop the draw all the same
        return torch.distributions.Categorical(logits=logits, validate_args=False), hidden

    def forward(self, *inputs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        sample = exploration_type() == ExplorationType.RANDOM
        if not self.masked:  # the plain categorical's draw without building the distribution (categorical_draw)
            logits, hidden = self._logits(*inputs)
            return (*categorical_draw(logits, sample), hidden)
        dist, hidden = self.distribution(*inputs)
        action = dist.sample() if sample else dist.mode
        return action, dist.log_prob(action), hidden


def categorical_draw(logits: Tensor, sample: bool) -> tuple[Tensor, Tensor]:
    """An action of the categorical distribution of ``logits`` ``[*B, A]`` and its log-probability, both ``[*B]``: a
    draw (``sample``) or the most likely action, computed by the ops of ``torch.distributions.Categorical(logits)``'s
    ``sample()`` (or ``mode``) and ``log_prob`` (so the same draw on the same random state) without building the
    distribution (building, sampling and scoring through it were about 8% of the CartPole PPO fit, py-spy, mostly
    its Python). Non-finite logits make the draw raise (``torch.multinomial``), as the distribution's does."""
    log_p = logits - logits.logsumexp(-1, keepdim=True)
    probs = torch.softmax(log_p, -1)
    if sample:
        action = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, True).T.reshape(probs.shape[:-1])
    else:
        action = probs.argmax(-1)
    return action, log_p.gather(-1, action.unsqueeze(-1)).squeeze(-1)
