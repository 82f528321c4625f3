"""DQN (Mnih et al. 2015, "Human-level control through deep reinforcement learning", Nature 518) with
the usual options: double DQN (van Hasselt et al. 2016, AAAI), a dueling head (Wang et al. 2016,
ICML), n-step returns (TorchRL's ``MultiStepTransform`` on the replay buffer), hard or soft target
updates, gradient clipping; on TorchRL's ``DQNLoss``."""

from __future__ import annotations

from typing import Literal

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictSequential
from torch import Tensor, nn
from torchrl.envs import MultiStepTransform
from torchrl.modules import EGreedyModule, QValueActor
from torchrl.objectives import DQNLoss, HardUpdate, SoftUpdate, ValueEstimators

from modules.base import RLModule


class QNetwork(nn.Module):
    """MLP Q-network: ``observation`` ``[*B, F]`` -> action values ``[*B, A]``.

    With ``dueling``, Q = V + A - mean(A) from separate value and advantage heads (Wang et al. 2016,
    eq. 9). Input width is lazy (taken from the first observation); ``num_actions`` is A.

    Args:
        num_actions: A. hidden_dims: widths of the shared hidden layers. dueling: the dueling head.
    """

    def __init__(self, num_actions: int, hidden_dims: tuple[int, ...] = (128, 128), dueling: bool = False) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for width in hidden_dims:
            layers += [nn.LazyLinear(width), nn.ReLU()]
        self.trunk = nn.Sequential(*layers)
        self.dueling = dueling
        self.advantage = nn.LazyLinear(num_actions)
        self.value = nn.LazyLinear(1) if dueling else None

    def forward(self, observation: Tensor) -> Tensor:
        z = self.trunk(observation)
        a = self.advantage(z)
        return self.value(z) + a - a.mean(-1, keepdim=True) if self.dueling else a


class DQNModule(RLModule):
    """DQN on sampled replay batches (``pipelines.data.OffPolicyDataModule``).

    The collector runs the greedy Q policy behind an ``EGreedyModule`` (one forward pass for all envs,
    each env drawing its own exploration); ``set_epsilon`` (``callbacks.EpsilonDecay``) sets its
    epsilon, which is a buffer, saved in the checkpoint. ``training_step`` takes one optimiser step on
    one sampled batch and then the target update.

    Args:
        network: Q-network (``observation`` -> action values ``[*B, A]``), e.g. :class:`QNetwork`.
        lr: Adam learning rate. gamma: discount per env step.
        n_step: n of the n-step return (1 = one-step TD).
        double_dqn: double-DQN targets.
        target_update: ``hard`` (copy every ``target_update_interval`` optimiser steps) or ``soft``
            (Polyak averaging with ``tau`` every step).
        max_grad_norm: global gradient-norm clip.
        epsilon: initial exploration rate.
        observation_key: the observation the network reads. action_mask_key: boolean mask key or null.
        loss_function: ``l2`` or ``smooth_l1`` (Huber).

    Raises:
        ValueError: an out-of-range hyper-parameter (the message names it).
    """

    def __init__(self, network: nn.Module, lr: float = 1e-3, gamma: float = 0.99, n_step: int = 1,
                 double_dqn: bool = True, target_update: Literal["hard", "soft"] = "soft", tau: float = 0.005,
                 target_update_interval: int = 500, max_grad_norm: float = 10.0, epsilon: float = 1.0,
                 observation_key: str = "observation", action_mask_key: str | None = None,
                 loss_function: Literal["l2", "smooth_l1"] = "smooth_l1") -> None:
        super().__init__()
        if lr <= 0 or not 0 <= gamma <= 1 or n_step < 1 or not 0 < tau <= 1 or target_update_interval < 1:
            raise ValueError(f"model: lr > 0, gamma in [0, 1], n_step >= 1, tau in (0, 1], target_update_interval "
                             f">= 1 required (got {lr}, {gamma}, {n_step}, {tau}, {target_update_interval})")
        if target_update not in ("hard", "soft"):
            raise ValueError(f"model.target_update={target_update!r} is not allowed: one of hard, soft")
        if not 0 <= epsilon <= 1:
            raise ValueError(f"model.epsilon={epsilon} is not allowed: must be in [0, 1]")
        self.save_hyperparameters(ignore=["network"])
        self.network = network
        self._actor: QValueActor | None = None

    def build(self, action_spec, observation: TensorDict) -> None:
        """Build actor, exploration, loss and target updater for the env's per-sample ``action_spec``,
        after shaping the network's lazy layers on an example ``observation``."""
        h = self.hparams
        with torch.no_grad():
            self.network(observation[h.observation_key])
        self._actor = QValueActor(self.network, in_keys=[h.observation_key], spec=action_spec,
                                  action_mask_key=h.action_mask_key)
        self.egreedy = EGreedyModule(action_spec, eps_init=h.epsilon, eps_end=h.epsilon,
                                     action_mask_key=h.action_mask_key)
        self._policy = TensorDictSequential(self._actor, self.egreedy)
        self.loss = DQNLoss(self._actor, action_space=action_spec, double_dqn=h.double_dqn, delay_value=True,
                            loss_function=h.loss_function)
        self.loss.make_value_estimator(ValueEstimators.TD0, gamma=h.gamma)
        self.target = (HardUpdate(self.loss, value_network_update_interval=h.target_update_interval)
                       if h.target_update == "hard" else SoftUpdate(self.loss, tau=h.tau))

    @property
    def collector_policy(self) -> TensorDictSequential:
        return self._policy

    def prepare(self, datamodule) -> None:
        """Build on the data module's env: its action spec and an example observation (lazy layers)."""
        if self._actor is None:
            datamodule.setup("fit")
            self.build(datamodule.env.action_spec_unbatched, datamodule.example_observation())

    def replay_transform(self) -> MultiStepTransform | None:
        """The buffer transform of n-step returns (``n_step > 1``), with this module's gamma."""
        n = self.hparams.n_step
        return MultiStepTransform(n_steps=n, gamma=self.hparams.gamma) if n > 1 else None

    def set_epsilon(self, epsilon: float) -> None:
        """Set the exploration rate of the collector's policy."""
        self.egreedy.eps.fill_(float(epsilon))

    def epsilon(self) -> float:
        return float(self.egreedy.eps)

    # ------------------------------------------------------------------ update
    def training_step(self, batch: TensorDict, batch_idx: int) -> Tensor:
        optimizer = self.optimizers()
        out = self.loss(batch)
        loss = out["loss"]
        optimizer.zero_grad()
        self.manual_backward(loss)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.loss.parameters(), self.hparams.max_grad_norm)
        optimizer.step()
        self.target.step()
        self.record("train/loss", loss.detach())
        self.record("train/grad_norm", grad_norm)
        self.record("train/q_mean", batch["chosen_action_value"].detach().mean())
        self.record("train/epsilon", self.epsilon())
        return loss.detach()

    def configure_optimizers(self):
        return torch.optim.Adam(self.loss.parameters(), lr=self.hparams.lr)
