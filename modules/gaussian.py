"""The Gaussian policy of PPO on continuous actions: a diagonal normal over the network's mean with a learned,
state-independent log standard deviation (Schulman et al. 2017's PPO on MuJoCo; Stable-Baselines3's and CleanRL's
default), its action clipped to the bounds or squashed by tanh into them.

The probabilities are those of the Gaussian draw ``u`` before clipping or squashing (``raw_action``), which the
collector stores beside the env's action: clipping changes the action the env gets but not the density PPO's ratio
needs (a ratio of the clipped action's probability is wrong: the clipped mass sits on the bound), and tanh's Jacobian
is the same for the old and the new policy, so it cancels in the ratio. (TorchRL's ``ProbabilisticActor`` with
``safe=True`` projects the sampled action instead, and scores the projected one.)"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn
from torchrl.envs.utils import ExplorationType, exploration_type

from modules.actor_critic import ActorCriticNetwork

_HALF_LOG_2PI_E = 0.5 * (1.0 + math.log(2 * math.pi))

Squash = Literal["clip", "tanh"]


def gaussian_log_prob(mean: Tensor, log_std: Tensor, raw_action: Tensor) -> Tensor:
    """log N(u; mean, exp(log_std)^2), summed over the action's A dimensions: ``mean``, ``raw_action`` ``[*B, A]``,
    ``log_std`` ``[A]`` -> ``[*B]`` (``torch.distributions.Normal(mean, std).log_prob(u).sum(-1)``'s value)."""
    z = (raw_action - mean) * torch.exp(-log_std)
    return -(0.5 * z.square() + log_std).sum(-1) - (0.5 * math.log(2 * math.pi)) * mean.shape[-1]


def gaussian_entropy(log_std: Tensor) -> Tensor:
    """The entropy of the diagonal normal, ``sum(log_std + (1 + log 2 pi) / 2)`` over A: ``[A]`` -> ``[]``."""
    return (log_std + _HALF_LOG_2PI_E).sum(-1)


class GaussianPolicy(nn.Module):
    """The collector's policy of an :class:`~modules.actor_critic.ActorCriticNetwork` on continuous actions in
    ``[low, high]``: the network's policy output is the mean ``[*B, A]``, ``log_std`` ``[A]`` a parameter of its own.
    Under ``ExplorationType.RANDOM`` (the collector's) ``u = mean + exp(log_std) * eps``, ``eps ~ N(0, I)`` (torch's
    global generator); otherwise (evaluation, export) ``u = mean``. The env's action is ``clip(u, low, high)``
    (``squash: clip``, SB3's PPO) or ``c + h tanh(u)`` (``tanh``; c, h: the bounds' center and half width).

    Called as ``policy(*inputs)`` with the network's ``in_keys`` then its ``policy_keys``; returns the action
    ``[*B, A]``, ``raw_action`` u ``[*B, A]``, its log-probability ``[*B]`` (:func:`gaussian_log_prob` of u) and the
    hidden state.

    Args:
        network: the actor-critic network (its policy output of width A). low, high: the action bounds ``[A]``
            (+-inf: unbounded, ``clip`` only). squash: as above. log_std_init: the initial log standard deviation
            (SB3's ``log_std_init``, 0: a standard deviation of 1).
    """

    def __init__(self, network: ActorCriticNetwork, low: Tensor, high: Tensor, squash: Squash = "clip",
                 log_std_init: float = 0.0) -> None:
        super().__init__()
        self.network = network
        self.squash = squash
        self.log_std = nn.Parameter(torch.full(low.shape, float(log_std_init)))
        self.register_buffer("low", low.clone())
        self.register_buffer("high", high.clone())

    def mean(self, *inputs: Tensor) -> tuple[Tensor, Tensor]:
        """The Gaussian's mean ``[*B, A]`` and the hidden state of ``inputs``."""
        net, n = self.network, len(self.network.in_keys)
        hidden = net.encode(*inputs[:n])
        return net.policy(hidden, *inputs[n:]), hidden

    def env_action(self, raw_action: Tensor) -> Tensor:
        """u ``[*B, A]`` -> the action the env takes, inside the bounds."""
        if self.squash == "tanh":
            return (self.high + self.low) / 2 + (self.high - self.low) / 2 * torch.tanh(raw_action)
        return torch.maximum(torch.minimum(raw_action, self.high), self.low)

    def forward(self, *inputs: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        mean, hidden = self.mean(*inputs)
        raw = mean
        if exploration_type() == ExplorationType.RANDOM:
            raw = mean + torch.exp(self.log_std) * torch.randn_like(mean)
        return self.env_action(raw), raw, gaussian_log_prob(mean, self.log_std, raw), hidden
