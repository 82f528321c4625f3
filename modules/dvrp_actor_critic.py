"""Actor-critic network for the DVRP window-offer env (``envs.dvrp``)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from modules.actor_critic import ActorCriticNetwork
from modules.attention import SetEncoder


class DVRPActorCritic(ActorCriticNetwork):
    """Attention encoder of the customer table plus the current request, a per-offer policy head and
    a value head.

    * Tokens: the depot, the current ``request`` and every customer row of ``customers`` ``[B, N, F]``;
      customers not yet decided (status column ``-3`` is 1) are padded out of attention, so the
      encoder sees only what is known. The encoder is permutation-equivariant in the customers.
    * Context ``[B, H]``: mean of the visible tokens, the depot token, the request's token, an MLP of
      ``request`` and a mean / max pooling over ``vehicles`` ``[B, M, 3]``.
    * Policy: logit of action a = MLP(context + embed(offers[a])), ``offers`` ``[B, A, 8]`` (shift,
      window, insertion cost, feasibility), so one head serves any number of shifts S.
    * Value: MLP(context) ``[B, 1]``.

    Input widths are inferred on the first call (lazy layers), so K, M, S come from the env.

    Args:
        embed_dim: token width E.
        num_heads: attention heads of the set encoder.
        num_layers: layers of the set encoder.
        hidden_dim: H, the width of the context and of the policy and value MLPs.
    """

    in_keys = ["customers", "request", "vehicles", "depot"]
    policy_keys = ["offers"]

    def __init__(self, embed_dim: int = 64, num_heads: int = 4, num_layers: int = 2, hidden_dim: int = 128) -> None:
        super().__init__()
        self.hidden_dim = hidden_dim
        self.customer_embed = nn.LazyLinear(embed_dim)
        self.depot_embed = nn.LazyLinear(embed_dim)
        self.request_token = nn.LazyLinear(embed_dim)
        self.encoder = SetEncoder(embed_dim, num_heads, num_layers)
        self.request_embed = nn.Sequential(nn.LazyLinear(hidden_dim), nn.ReLU())
        self.vehicle_embed = nn.Sequential(nn.LazyLinear(hidden_dim), nn.ReLU())
        self.context = nn.Sequential(nn.LazyLinear(hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, hidden_dim), nn.ReLU())
        self.offer_embed = nn.LazyLinear(hidden_dim)
        self.policy_mlp = nn.Sequential(nn.ReLU(), nn.Linear(hidden_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 1))
        self.value_mlp = nn.Sequential(nn.Linear(hidden_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 1))

    def encode(self, customers: Tensor, request: Tensor, vehicles: Tensor, depot: Tensor) -> Tensor:
        lead = customers.shape[:-2]
        customers, request = customers.reshape(-1, *customers.shape[-2:]), request.reshape(-1, request.shape[-1])
        vehicles, depot = vehicles.reshape(-1, *vehicles.shape[-2:]), depot.reshape(-1, depot.shape[-1])
        unseen = customers[..., -3] > 0.5
        tokens = torch.cat([self.depot_embed(depot).unsqueeze(1), self.request_token(request).unsqueeze(1),
                            self.customer_embed(customers)], 1)
        padding = torch.cat([torch.zeros_like(unseen[:, :2]), unseen], 1)
        h = self.encoder(tokens, padding)
        visible = (~padding).unsqueeze(-1).to(h.dtype)
        pooled = (h * visible).sum(1) / visible.sum(1)
        fleet = self.vehicle_embed(vehicles)
        context = self.context(torch.cat([pooled, h[:, 0], h[:, 1], self.request_embed(request),
                                          fleet.mean(1), fleet.amax(1)], -1))
        return context.reshape(*lead, self.hidden_dim)

    def policy(self, hidden: Tensor, offers: Tensor) -> Tensor:
        return self.policy_mlp(hidden.unsqueeze(-2) + self.offer_embed(offers)).squeeze(-1)

    def value(self, hidden: Tensor) -> Tensor:
        return self.value_mlp(hidden)
