"""Q-learning on plain tensors: the epsilon-greedy policy the collector runs and the DQN loss.

Both are lean compositions of what TorchRL's ``QValueActor`` + ``EGreedyModule`` and ``DQNLoss`` compute
(masked action values, TD(0) targets with ``torchrl.objectives.value.functional.td0_return_estimate`` through
:func:`modules.target.td0_target`,
``torchrl.objectives.utils.distance_loss``), without building TensorDicts or swapping parameters per call.
``tests/modules/test_q_values.py`` checks that :func:`dqn_loss` gives TorchRL's ``DQNLoss`` loss, priorities and
gradients on the same batch for every option ``modules.dqn.DQNModule`` exposes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import NestedKey, TensorDictBase
from torch import Tensor, nn
from torchrl.envs.utils import ExplorationType, exploration_type
from torchrl.objectives.utils import distance_loss

from envs.episodes import masked_uniform
from modules.target import td0_target, weighted_mean


def masked_values(values: Tensor, mask: Tensor | None) -> Tensor:
    """Action values ``[*B, A]`` with the disallowed actions (``mask`` False) at the dtype's lowest value, as
    TorchRL's ``QValueModule`` writes them; ``values`` itself when there is no mask."""
    if mask is None:
        return values
    return torch.where(mask, values, torch.finfo(values.dtype).min)


class EpsilonGreedyQPolicy(nn.Module):
    """The collector's DQN policy: the greedy action of ``network``'s values (among the allowed ones), replaced
    with probability ``eps`` per action entry by a uniformly random allowed action.

    Called as ``policy(*inputs[, action_mask])`` with the network's inputs ``[*B, F]`` (and the boolean mask
    ``[*B, A]`` when built with ``masked``); returns the action ``[*B]`` (int64). Exploration follows TorchRL's
    convention: only under ``ExplorationType.RANDOM`` (the collector's default); ``DETERMINISTIC`` evaluation is
    greedy. ``eps`` is a buffer (saved with the module).

    Args:
        network: inputs -> action values ``[*B, A]``. masked: the last call argument is an action mask.
        epsilon: the initial exploration rate in [0, 1].
    """

    def __init__(self, network: nn.Module, masked: bool = False, epsilon: float = 1.0) -> None:
        super().__init__()
        self.network = network
        self.masked = masked
        self.register_buffer("eps", torch.tensor(float(epsilon)))

    def forward(self, *inputs: Tensor) -> Tensor:
        mask = inputs[-1] if self.masked else None
        values = masked_values(self.network(*(inputs[:-1] if self.masked else inputs)), mask)
        action = values.argmax(-1)
        if exploration_type() not in (ExplorationType.RANDOM, None):
            return action
        explore = torch.rand(action.shape, device=action.device) < self.eps
        if mask is None:
            random = torch.randint(values.shape[-1], action.shape, device=action.device)
        else:  # uniform over the allowed actions of each entry
            random = masked_uniform(mask)
        return torch.where(explore, random, action)


def dqn_loss(network: nn.Module, target: nn.Module, batch: TensorDictBase, in_keys: Sequence[NestedKey],
             gamma: float, double_dqn: bool, loss_function: str = "smooth_l1",
             action_mask_key: NestedKey | None = None) -> tuple[Tensor, Tensor]:
    """The DQN loss of a sampled batch ``[N]`` (Mnih et al. 2015, eq. 2; double DQN: van Hasselt et al. 2016,
    eq. 4), as TorchRL's ``DQNLoss`` with the TD(0) estimator computes it.

    Target y = r + gamma^k (1 - terminated) Q'(s', a*), with k = ``steps_to_next_obs`` when the batch has it
    (n-step returns) and 1 otherwise; a* = argmax_a Q'(s', a) (double DQN: argmax_a Q(s', a)), over the allowed
    actions of s' when masked. The loss is ``distance_loss(Q(s, a), y)`` averaged over the batch, weighted by
    ``priority_weight`` when the batch has it (sum(w l) / sum(w)).

    Args:
        network: the online network, inputs -> action values ``[N, A]``. target: the target network.
        batch: ``in_keys`` and ``("next", in_keys)``, ``action`` ``[N]`` (int64), ``("next", "reward")`` ``[N, 1]``,
            ``("next", "terminated")`` (``("next", "done")`` if absent) ``[N, 1]``; optional ``steps_to_next_obs``,
            ``priority_weight`` ``[N]``, the masks.
        in_keys: the network's inputs in ``forward`` order. gamma: discount per env step.
        double_dqn: choose a* with the online network. loss_function: ``l2``, ``l1`` or ``smooth_l1``.
        action_mask_key: the boolean mask ``[N, A]`` or None.

    Returns:
        The loss (scalar) and |Q(s, a) - y| ``[N]`` (detached; the priorities of prioritised replay).
    """
    mask = batch.get(action_mask_key) if action_mask_key is not None else None
    values = masked_values(network(*(batch.get(k) for k in in_keys)), mask)
    predicted = values.gather(-1, batch.get("action").unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        next_inputs = [batch.get(("next", *((k,) if isinstance(k, str) else k))) for k in in_keys]
        next_mask = batch.get(("next", action_mask_key)) if action_mask_key is not None else None
        next_values = masked_values(target(*next_inputs), next_mask)
        if double_dqn:
            chosen = masked_values(network(*next_inputs), next_mask).argmax(-1, keepdim=True)
            next_value = next_values.gather(-1, chosen)
        else:
            next_value = next_values.max(-1, keepdim=True).values
        steps = batch.get("steps_to_next_obs", None)
        discount = gamma if steps is None else gamma ** steps.view_as(next_value)
        target_value = td0_target(batch, next_value, discount)
    loss = weighted_mean(distance_loss(predicted, target_value, loss_function), batch.get("priority_weight", None))
    return loss, (predicted.detach() - target_value).abs()
