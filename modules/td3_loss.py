"""The TD3 losses on plain tensors (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic
Methods", ICML, arXiv:1802.09477, algorithm 1): twin critics with clipped double-Q targets, target policy smoothing
and a deterministic actor trained on the first critic.

A lean composition of what TorchRL's ``TD3Loss`` computes (its ``value_loss`` and ``actor_loss``), with TorchRL's own
pieces (``td0_return_estimate`` through :func:`modules.target.td0_target`, ``distance_loss``) and plain critic
modules instead of stacked functional parameters. ``tests/modules/test_td3_loss.py`` checks loss values,
priorities and gradients against ``TD3Loss`` on the same batch and random draws.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from torch import Tensor, nn
from torchrl.objectives.utils import distance_loss

from modules.sac_loss import Critics, frozen
from modules.target import td0_target, weighted_mean


def td3_critic_loss(target_actor: nn.Module, critics: Critics, target_critics: nn.Module,
                    batch: TensorDictBase, gamma: float, low: Tensor, high: Tensor, policy_noise: Tensor,
                    noise_clip: Tensor, observation_key: str = "observation",
                    loss_function: str = "l2") -> dict[str, Tensor]:
    """The critics' loss on a sampled batch ``[N]`` of actions ``[N, A]``, as TorchRL's ``TD3Loss.value_loss``:
    the sum over critics of ``distance_loss(Q_i(s, a), y)`` averaged over the batch (weighted by
    ``priority_weight`` when present), with

        y = r + gamma (1 - terminated) min_i Q'_i(s', clip(mu'(s') + clip(eps, -c, c), low, high)),
        eps ~ N(0, sigma^2)  (target policy smoothing, eq. 14).

    Args:
        target_actor: ``observation`` -> action ``[N, A]`` in [``low``, ``high``] (the actor's target copy).
        critics: ``(observation, action)`` -> ``[C, N, 1]``. target_critics: the same, the target copies.
        gamma: discount per env step. low, high: the action bounds ``[A]``.
        policy_noise: sigma ``[A]`` (or a scalar), in action units. noise_clip: c ``[A]`` (or a scalar), in
            action units.
        loss_function: ``l2`` (the paper's and SB3's squared error), ``l1`` or ``smooth_l1`` (TorchRL's default).

    Returns:
        ``loss_qvalue`` (scalar) and ``td_error`` ``[N]`` (max over critics of |Q_i(s, a) - y|, detached).
    """
    action, weight = batch.get("action"), batch.get("priority_weight", None)
    noise = (torch.randn_like(action) * policy_noise).clamp(-noise_clip, noise_clip)  # drawn first, as TD3Loss
    with torch.no_grad():
        next_obs = batch.get(("next", observation_key))
        next_action = torch.maximum(torch.minimum(target_actor(next_obs) + noise, high), low)
        next_value = target_critics(next_obs, next_action).min(0)[0]
        target = td0_target(batch, next_value, gamma)
    predicted = critics(batch.get(observation_key), action).squeeze(-1)
    loss_qvalue = weighted_mean(distance_loss(predicted, target.expand_as(predicted), loss_function).sum(0), weight)
    return {"loss_qvalue": loss_qvalue, "td_error": (predicted - target).abs().detach().max(0)[0]}


def td3_actor_loss(actor: nn.Module, critics: Critics, batch: TensorDictBase,
                   observation_key: str = "observation") -> Tensor:
    """The deterministic actor's loss, as TorchRL's ``TD3Loss.actor_loss``: ``-Q_1(s, mu(s))`` (the first critic,
    eq. 6 of the paper, the deterministic policy gradient), averaged over the batch (weighted by ``priority_weight``
    when present); the critics' parameters are not trained by it.

    Args:
        actor: ``observation`` -> action ``[N, A]``. critics: ``(observation, action)`` -> ``[C, N, 1]``.

    Returns:
        The loss (scalar).
    """
    obs = batch.get(observation_key)
    with frozen(critics):
        q = critics.nets[0](obs, actor(obs)).squeeze(-1)
    return weighted_mean(-q, batch.get("priority_weight", None))
