"""The network contract of the actor-critic algorithms (PPO): encoder -> policy head / value head."""

from __future__ import annotations

from abc import abstractmethod

from torch import Tensor, nn


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

    @abstractmethod
    def encode(self, *observation: Tensor) -> Tensor:
        """Observation tensors ``[*B, ...]`` -> hidden state ``[*B, H]``."""

    @abstractmethod
    def policy(self, hidden: Tensor, *extra: Tensor) -> Tensor:
        """Hidden state (and ``policy_keys``) -> action logits ``[*B, A]`` (unmasked)."""

    @abstractmethod
    def value(self, hidden: Tensor) -> Tensor:
        """Hidden state -> state value ``[*B, 1]``."""
