"""What the DVRP env needs of a learned customer model, and the acceptance maths of the flexibility types.

A customer of flexibility type k in {0..K-1} accepts a window shifted by s slots iff |s| <= k. A model of
p(k | attributes) therefore predicts the acceptance of every offer: P(k >= |s| | x). The env is handed
such a model (e.g. ``modules.flexibility.FlexibilityModel``, built by the run from the config's
``flexibility`` and trained by ``callbacks.FlexibilityUpdate``) and uses it only through :class:`CustomerModel`;
nothing here learns.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from envs.config import require


@runtime_checkable
class CustomerModel(Protocol):
    """A learned model of a customer's flexibility type: an ``nn.Module`` whose forward maps attributes
    ``[..., K]`` to (log p(k | x) ``[..., K]``, an embedding ``[..., D]``). The env calls it without
    gradients when an episode starts; its weights may change between episodes."""

    def forward(self, attributes: Tensor) -> tuple[Tensor, Tensor]: ...


def acceptance_log_prob(log_probs: Tensor, shift: Tensor) -> Tensor:
    """log P(k >= s): ``log_probs`` ``[..., K]`` and int64 ``shift`` = |s| (broadcastable) -> ``[...]``.

    ``s = 0`` gives 0 (always accepted); ``s >= K`` gives -inf (nobody accepts).
    """
    tail = torch.logcumsumexp(log_probs.flip(-1), -1).flip(-1)  # log P(k >= j), j = 0..K-1
    tail = torch.cat([tail, torch.full_like(tail[..., :1], -math.inf)], -1)
    shift = shift.clamp(0, log_probs.shape[-1])
    tail, shift = torch.broadcast_tensors(tail, shift.unsqueeze(-1))
    return tail.gather(-1, shift[..., :1]).squeeze(-1)


def refusal_log_prob(log_probs: Tensor, shift: Tensor) -> Tensor:
    """log P(k < s), the shapes of :func:`acceptance_log_prob`; ``s = 0`` gives -inf, ``s >= K`` gives 0."""
    head = torch.logcumsumexp(log_probs, -1)  # log P(k <= j) = log P(k < j + 1)
    head = torch.cat([torch.full_like(head[..., :1], -math.inf), head], -1)
    shift = shift.clamp(0, log_probs.shape[-1])
    head, shift = torch.broadcast_tensors(head, shift.unsqueeze(-1))
    return head.gather(-1, shift[..., :1]).squeeze(-1)


def embedding_width(model: nn.Module, num_types: int) -> int:
    """D of a customer model, read from one probe call on zero attributes ``[1, K]`` (on the model's device).

    Raises:
        ValueError: not an ``nn.Module``, or outputs that are not (``[1, K]``, ``[1, D]``) (the message names
            ``env.flexibility``).
    """
    require(isinstance(model, nn.Module), "flexibility", type(model).__name__,
            "a class of nn.Module implementing envs.dvrp.customers.CustomerModel (e.g. "
            "modules.flexibility.FlexibilityModel)")
    device = next(iter(model.parameters()), torch.zeros(0)).device
    with torch.no_grad():
        out = model(torch.zeros(1, num_types, device=device))
    shapes = [list(t.shape) for t in out] if isinstance(out, tuple) else [list(getattr(out, "shape", []))]
    require(len(shapes) == 2 and shapes[0] == [1, num_types] and len(shapes[1]) == 2 and shapes[1][0] == 1,
            "flexibility", type(model).__name__,
            f"a model mapping attributes [n, {num_types}] to (log p [n, {num_types}] for the {num_types} types of "
            f"env.type_mix, embedding [n, D]); got outputs of shapes {shapes}")
    return int(out[1].shape[1])
