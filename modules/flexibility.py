"""Customer-flexibility model: p(type | attributes) learned from censored offer outcomes.

A customer's flexibility type k in {0..K-1} is never observed. Offering a window shifted by s slots is
accepted iff |s| <= k, so an acceptance says k >= |s| and a refusal says k < |s|: each outcome is an
interval-censored observation of an ordinal variable. The model maximises the interval likelihood
(the censored-data likelihood of Turnbull 1976, "The empirical distribution function with arbitrarily
grouped, censored and truncated data", J. R. Stat. Soc. B 38(3), with p(k | x) parametrised by a
network instead of nonparametrically):

    L = prod_i  P(k >= |s_i| | x_i)^{accepted_i} * P(k < |s_i| | x_i)^{1 - accepted_i}.

An offer of the preferred window (s = 0) is always accepted and carries no information (its factor is 1).
The penultimate layer is the customer's embedding, which the policy reads beside p(k | x).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from envs.dvrp.customers import acceptance_log_prob, refusal_log_prob


class FlexibilityModel(nn.Module):
    """Attributes ``[..., A]`` -> (log p(k | x) ``[..., K]``, embedding ``[..., D]``).

    ``embedding = tanh(MLP(x))`` and ``log p = log_softmax(Linear(embedding))``. The weights are
    initialised from ``init_seed`` (not the global RNG), so every process builds the same model.

    It implements the DVRP env's :class:`envs.dvrp.customers.CustomerModel` (``env.flexibility``).

    Args:
        num_types: K, the number of customer types.
        num_attributes: A (the DVRP env's customers have A = K attributes).
        embedding_dim: D, the width of a type's embedding.
        hidden_dim: width of the MLP's hidden layer.
        init_seed: seed of the initial weights.

    Raises:
        ValueError: a size < 1.
    """

    def __init__(self, num_types: int = 4, num_attributes: int = 4, embedding_dim: int = 4, hidden_dim: int = 32,
                 init_seed: int = 0) -> None:
        super().__init__()
        if min(num_types, num_attributes, embedding_dim, hidden_dim) < 1:
            raise ValueError(f"num_types, num_attributes, embedding_dim and hidden_dim must be >= 1, got "
                             f"{num_types}, {num_attributes}, {embedding_dim}, {hidden_dim}")
        self.num_types = num_types
        self.embedding_dim = embedding_dim
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            self.body = nn.Sequential(nn.Linear(num_attributes, hidden_dim), nn.ReLU(),
                                      nn.Linear(hidden_dim, embedding_dim), nn.Tanh())
            self.head = nn.Linear(embedding_dim, num_types)

    def forward(self, attributes: Tensor) -> tuple[Tensor, Tensor]:
        embedding = self.body(attributes)
        return torch.log_softmax(self.head(embedding), -1), embedding


def censored_nll(log_probs: Tensor, shift: Tensor, accepted: Tensor) -> Tensor:
    """Negative log-likelihood ``[...]`` of outcomes: ``-log P(k >= s)`` if accepted, else ``-log P(k < s)``."""
    return -torch.where(accepted, acceptance_log_prob(log_probs, shift), refusal_log_prob(log_probs, shift))


def fit_outcomes(model: FlexibilityModel, outcomes: TensorDict, epochs: int, batch_size: int, lr: float,
                 generator: torch.Generator) -> float:
    """Train ``model`` in place on ``outcomes`` (``attributes`` ``[n, A]``, int64 ``shift`` ``[n]`` = |s|,
    bool ``accepted`` ``[n]``) for ``epochs`` shuffled passes with Adam; returns the last pass's mean
    :func:`censored_nll` (nats per informative outcome). Outcomes with ``shift = 0`` carry no
    information and are skipped. ``generator`` draws the shuffles (the global RNG is not touched)."""
    index = (outcomes["shift"] > 0).nonzero().squeeze(-1)
    n = index.numel()
    if n == 0:
        return float("nan")
    informative = outcomes[index]
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    total = 0.0
    for _ in range(epochs):
        total = 0.0
        for index in torch.randperm(n, generator=generator).split(batch_size):
            batch = informative[index]
            loss = censored_nll(model(batch["attributes"])[0], batch["shift"], batch["accepted"]).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * index.numel()
    return total / n
