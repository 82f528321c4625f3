"""Actor-critic network for the DVRP window-offer env (``envs.dvrp``)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from modules.actor_critic import ActorCriticNetwork
from modules.attention import SetEncoder
from modules.compatibility import check_sizes


class DVRPActorCritic(ActorCriticNetwork):
    """Attention encoder of the customer table plus the current request, a per-offer policy head and
    a value head.

    * Tokens: the depot, the current ``request`` and every customer row of ``customers`` ``[B, N, F]``;
      customers not yet decided (status column ``-3`` is 1) are padded out of attention, so the
      encoder sees only what is known. The encoder is permutation-equivariant in the customers.
    * Context ``[B, H]``: mean of the visible tokens, the depot token, the request's token, an MLP of
      ``request`` and a mean / max pooling over the day's fleet in ``vehicles`` ``[B, M, 4]`` (its last column
      marks the vehicles of the day's fleet; the others are left out, so a day plays alike in an env of any M).
    * Policy: logit of action a = MLP(context + embed(offers[a])), ``offers`` ``[B, A, 8]`` (shift,
      window, insertion cost, feasibility), so one head serves any number of shifts S.
    * Value: MLP(context) ``[B, 1]``.

    Input widths are inferred on the first call (lazy layers), so K, M, S come from the env.

    Args:
        embed_dim: token width E.
        num_heads: attention heads of the set encoder.
        num_layers: layers of the set encoder.
        hidden_dim: H, the width of the context and of the policy and value MLPs.

    Raises:
        ValueError: ``embed_dim``, ``num_heads`` or ``hidden_dim`` below 1 (the message names the key), or
            ``embed_dim`` not a multiple of ``num_heads``.
    """

    in_keys = ["customers", "request", "vehicles", "depot"]
    policy_keys = ["offers"]
    TOKEN_BLOCK = 8  # tokens per block of a CPU row group (see encode)

    def __init__(self, embed_dim: int = 64, num_heads: int = 4, num_layers: int = 2, hidden_dim: int = 128) -> None:
        super().__init__()
        check_sizes(embed_dim=embed_dim, num_heads=num_heads, hidden_dim=hidden_dim)
        self.hidden_dim = hidden_dim
        self.customer_embed = nn.LazyLinear(embed_dim)
        self.depot_embed = nn.LazyLinear(embed_dim)
        self.request_token = nn.LazyLinear(embed_dim)
        self.encoder = SetEncoder(embed_dim, num_heads, num_layers)
        self.request_embed = nn.Sequential(nn.LazyLinear(hidden_dim), nn.ReLU())
        self.vehicle_embed = nn.Sequential(nn.LazyLinear(hidden_dim), nn.ReLU())
        self.context = nn.Sequential(nn.LazyLinear(hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, hidden_dim), nn.ReLU())
        self.offer_embed = nn.LazyLinear(hidden_dim)
        self.policy_mlp = nn.Sequential(nn.ReLU(), nn.Linear(hidden_dim, hidden_dim), nn.ReLU(),
                                        nn.Linear(hidden_dim, 1))
        self.value_mlp = nn.Sequential(nn.Linear(hidden_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 1))

    def encode(self, customers: Tensor, request: Tensor, vehicles: Tensor, depot: Tensor) -> Tensor:
        """The context ``[*B, H]`` of observations ``[*B, ...]``.

        On a CPU each row is encoded without its trailing undecided customers. A row's extent is 1 + the
        index of its last decided customer (0 with none; the env decides customers in table order, so a row
        at step t has extent t). Rows are grouped by their extent rounded up so that the tokens (depot,
        request, customers) are a multiple of ``TOKEN_BLOCK``, and each group is encoded with that many
        tokens. The customers left out are padded out of attention and their outputs are not read, so the
        context is the padded computation's (tested, with gradients). Half of a collected batch's tokens are
        such padding: a PPO minibatch update of the headline config took 83-88 ms against 96-99 (1,920 rows, 2
        threads); exact lengths took 127-145 ms (many small groups), and blocks of 16 were no faster than 8.
        On other devices, and under tracing or ``torch.compile``, shapes stay static (no host read of the
        extents)."""
        lead = customers.shape[:-2]
        customers, request = customers.reshape(-1, *customers.shape[-2:]), request.reshape(-1, request.shape[-1])
        vehicles, depot = vehicles.reshape(-1, *vehicles.shape[-2:]), depot.reshape(-1, depot.shape[-1])
        if customers.device.type != "cpu" or torch.jit.is_tracing() or torch.compiler.is_compiling():
            return self._encode(customers, request, vehicles, depot).reshape(*lead, self.hidden_dim)
        n, block = customers.shape[1], self.TOKEN_BLOCK
        decided = customers[..., -3] <= 0.5
        extent = (decided * torch.arange(1, n + 1, device=customers.device)).amax(1)
        # customers kept per row: its extent, rounded up so that the tokens (depot, request, customers) fill blocks
        keep = ((extent + 2 + block - 1) // block * block - 2).clamp(0, n)
        lengths = keep.unique().tolist()
        if len(lengths) <= 1:  # one group (all rows of a collector's step), or no rows
            context = self._encode(customers[:, :lengths[0] if lengths else n], request, vehicles, depot)
        else:
            parts, order = [], []
            for length in lengths:
                rows = (keep == length).nonzero().squeeze(1)
                parts.append(self._encode(customers[rows, :length], request[rows], vehicles[rows], depot[rows]))
                order.append(rows)
            context = torch.cat(parts).index_select(0, torch.cat(order).argsort())
        return context.reshape(*lead, self.hidden_dim)

    def _encode(self, customers: Tensor, request: Tensor, vehicles: Tensor, depot: Tensor) -> Tensor:
        """``customers`` ``[R, L, F]`` (L <= N), the other inputs ``[R, ...]`` -> context ``[R, H]``."""
        unseen = customers[..., -3] > 0.5
        tokens = torch.cat([self.depot_embed(depot).unsqueeze(1), self.request_token(request).unsqueeze(1),
                            self.customer_embed(customers)], 1)
        padding = torch.cat([unseen.new_zeros(unseen.shape[0], 2), unseen], 1)
        h = self.encoder(tokens, padding)
        visible = (~padding).unsqueeze(-1).to(h.dtype)
        pooled = (h * visible).sum(1) / visible.sum(1)
        fleet = self.vehicle_embed(vehicles)  # [R, M, H], >= 0 (ReLU)
        in_fleet = (vehicles[..., -1:] > 0.5).to(fleet.dtype)  # the day's vehicles (a smaller day has fewer)
        fleet = fleet * in_fleet
        return self.context(torch.cat([pooled, h[:, 0], h[:, 1], self.request_embed(request),
                                       fleet.sum(1) / in_fleet.sum(1).clamp_min(1.0), fleet.amax(1)], -1))

    def policy(self, hidden: Tensor, offers: Tensor) -> Tensor:
        return self.policy_mlp(hidden.unsqueeze(-2) + self.offer_embed(offers)).squeeze(-1)

    def value(self, hidden: Tensor) -> Tensor:
        return self.value_mlp(hidden)
