"""The clipped PPO loss on plain tensors (Schulman et al. 2017, arXiv:1707.06347, eq. 7 with the value and entropy
terms of eq. 9), as TorchRL's ``ClipPPOLoss`` computes it for a categorical (optionally masked) policy and a
state-value critic: TorchRL's ``MaskedCategorical`` and ``distance_loss``, no TensorDict built per call.
``tests/modules/test_ppo_loss.py`` checks losses, diagnostics and gradients against ``ClipPPOLoss``.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from torch import Tensor
from torchrl.modules import MaskedCategorical
from torchrl.objectives.utils import distance_loss


def ppo_loss(logits: Tensor, value: Tensor, batch: TensorDictBase, clip_epsilon: Tensor | float,
             entropy_coeff: float = 0.01, critic_coeff: float = 0.5, normalize_advantage: bool = True,
             loss_critic_type: str = "l2", mask: Tensor | None = None) -> dict[str, Tensor]:
    """Clipped PPO on a minibatch ``[N]``.

    With r = pi(a|s) / pi_old(a|s) and the advantage A (standardised over the minibatch with
    ``normalize_advantage``: (A - mean) / max(std, 1e-6)): ``loss_objective`` = -mean(min(r A,
    clip(r, 1 - eps, 1 + eps) A)) (the clip on log r: [log(1 - eps), log(1 + eps)]), ``loss_entropy`` =
    -entropy_coeff mean(H(pi(.|s))), ``loss_critic`` = critic_coeff mean(distance(value_target, V(s))).

    Args:
        logits: the policy's logits ``[N, A]`` (gradients flow). value: V(s) ``[N, 1]`` (gradients flow).
        batch: ``action`` ``[N]``, ``action_log_prob`` ``[N]`` (the collecting policy's), ``advantage`` and
            ``value_target`` ``[N, 1]`` (GAE's).
        clip_epsilon: eps (a float or a 0-dim tensor, e.g. a scheduled buffer). mask: the boolean action mask
            ``[N, A]`` of a ``MaskedCategorical`` policy, or None for a plain categorical one.
        loss_critic_type: ``l2`` or ``smooth_l1``.

    Returns:
        ``loss_objective``, ``loss_entropy``, ``loss_critic`` and the diagnostics ``entropy``, ``kl_approx``
        (mean of log pi_old - log pi), ``clip_fraction`` (share of clipped ratios), ``explained_variance``
        ``[1]`` (1 - Var(target - V) / Var(target)), all scalars except the last.
    """
    if mask is None:  # torch's Categorical(logits) log_prob and entropy, its ops without the object (and its checks:
        # a non-finite loss is skipped and counted by the update, RLModule.optimizer_update)
        log_p = logits - logits.logsumexp(-1, keepdim=True)
        log_prob = log_p.gather(-1, batch.get("action").long().unsqueeze(-1)).squeeze(-1)
        entropy = -(log_p.clamp(min=torch.finfo(log_p.dtype).min) * torch.softmax(log_p, -1)).sum(-1)
    else:
        dist = MaskedCategorical(logits=logits, mask=mask)
        log_prob, entropy = dist.log_prob(batch.get("action")), dist.entropy()
    return clipped_loss(log_prob, entropy, value, batch, clip_epsilon, entropy_coeff, critic_coeff,
                        normalize_advantage, loss_critic_type)


def clipped_loss(log_prob: Tensor, entropy: Tensor, value: Tensor, batch: TensorDictBase,
                 clip_epsilon: Tensor | float, entropy_coeff: float = 0.01, critic_coeff: float = 0.5,
                 normalize_advantage: bool = True, loss_critic_type: str = "l2") -> dict[str, Tensor]:
    """:func:`ppo_loss` of any policy, given the log-probabilities of the batch's actions under the current policy
    ``log_prob`` ``[N]`` and the policy's entropies ``entropy`` ``[N]`` (both with gradients): the categorical
    policy's (:func:`ppo_loss`) or the Gaussian's (:mod:`modules.gaussian`). Arguments and results as
    :func:`ppo_loss`'s."""
    advantage = batch.get("advantage")
    if normalize_advantage and advantage.numel() > 1:
        advantage = (advantage - advantage.mean()) / advantage.std().clamp_min(torch.finfo(torch.float).resolution)
    previous = batch.get("action_log_prob")
    log_weight = (log_prob - previous).unsqueeze(-1)
    eps = torch.as_tensor(clip_epsilon, dtype=log_weight.dtype)
    clipped = log_weight.clamp((-eps).log1p(), eps.log1p())
    gain = torch.minimum(log_weight.exp() * advantage, clipped.exp() * advantage)
    entropy = entropy.unsqueeze(-1)
    target = batch.get("value_target")
    with torch.no_grad():
        residual = torch.var(target - value, correction=0, dim=0)
        explained = 1.0 - residual / (torch.var(target, correction=0, dim=0) + torch.finfo(target.dtype).eps)
    return {"loss_objective": -gain.mean(), "loss_entropy": (-entropy_coeff * entropy).mean(),
            "loss_critic": (critic_coeff * distance_loss(target, value, loss_critic_type)).mean(),
            "entropy": entropy.detach().mean(), "kl_approx": (previous - log_prob).detach().mean(),
            "clip_fraction": (clipped != log_weight).to(log_weight.dtype).mean(),
            "explained_variance": explained}
