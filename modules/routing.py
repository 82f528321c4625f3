"""Attention routing policy for the VRPTW: encoder once per instance, pointer decoder per step.

Kool, van Hoof & Welling 2019, "Attention, Learn to Solve Routing Problems!" (ICLR), adapted to time
windows and a fixed fleet: the encoder (:class:`~modules.attention.SetEncoder`) embeds depot and
customers once; each decoding step forms a context query from the graph embedding, the current node's
embedding and the vehicle state (time, remaining capacity, vehicles and customers left), attends to
the node embeddings (multi-head glimpse), and scores every node with a single-head pointer,
``C * tanh(q . k / sqrt(E))`` with C = 10, masked to the feasible nodes of
:func:`envs.routing.construction.customer_mask`. Every plan it builds is therefore feasible, whatever the
weights; with a fixed fleet a construction can still dead-end, and is then reported infeasible.

Time windows make the value of a node depend on *when* the vehicle gets there, which static embeddings
cannot show; with ``step_features`` (default) every step adds a linear projection of per-node arrival,
waiting, slack and distance from the current node to the glimpse and pointer keys (the dynamic-key
update Kool et al. use for the split-delivery VRP, here with time features).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from envs.routing import construction
from envs.routing.problem import distance_matrix
from modules.attention import SetEncoder

CUSTOMER_FEATURES = 7  # dx, dy (/coord_scale), ready/H, due/H, service/H, demand/Q, depot distance/H
DEPOT_FEATURES = 3  # M / 10, present demand / (M Q), present customers / slots
CONTEXT_FEATURES = 5  # time/H, remaining capacity/Q, unused vehicles/M, unserved share, unserved demand/(M Q)
STEP_NODE_FEATURES = 4  # per node at each step: arrival/H, wait/H, slack to the due time/H, distance/coord_scale


@dataclass
class Rollout:
    """The outcome of constructing R plans.

    Attributes:
        actions: int64 ``[R, T]`` node sequence (0 = depot; trailing zeros once done).
        length: ``[R]`` plan distance (km). feasible: bool ``[R]`` (False = dead end).
        unserved: int64 ``[R]`` customers left at a dead end. steps: int64 ``[R]`` construction steps.
        log_prob: ``[R]`` summed log-probability of the actions (0 for greedy without grad).
    """

    actions: Tensor
    length: Tensor
    feasible: Tensor
    unserved: Tensor
    steps: Tensor
    log_prob: Tensor


# the 8 symmetries of the square (rotations by 90 degrees, reflections) as [2, 2] matrices acting on
# depot-relative coordinates: distances are unchanged, the network's input is not (Kwon et al. 2020,
# "POMO: Policy Optimization with Multiple Optima for Reinforcement Learning", NeurIPS, instance augmentation)
SYMMETRIES = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[-1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, -1.0]],
                           [[-1.0, 0.0], [0.0, -1.0]], [[0.0, 1.0], [1.0, 0.0]], [[0.0, -1.0], [1.0, 0.0]],
                           [[0.0, 1.0], [-1.0, 0.0]], [[0.0, -1.0], [-1.0, 0.0]]])


def node_features(problem: TensorDict, coord_scale: float, symmetry: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Encoder inputs: customers ``[R, 1 + N, 7]`` (row 0 unused) and depot ``[R, 3]``, float32.

    Coordinates are relative to the depot and divided by ``coord_scale`` (km), then multiplied by
    ``symmetry`` ``[R, 2, 2]`` when given (an input augmentation only: the plan is built on the true
    coordinates); times by H; demand by Q.
    """
    loc, horizon, capacity = problem["loc"], problem["horizon"].unsqueeze(-1), problem["capacity"].unsqueeze(-1)
    rel = (loc - loc[:, :1]) / coord_scale
    if symmetry is not None:
        rel = rel @ symmetry.to(rel.dtype)
    depot_time = torch.linalg.vector_norm(loc - loc[:, :1], dim=-1) / horizon
    customers = torch.cat([rel, torch.stack([problem["ready"] / horizon, problem["due"] / horizon,
                                             problem["service"] / horizon, problem["demand"] / capacity,
                                             depot_time], -1)], -1)
    present = problem["present"].clone()
    present[:, 0] = False
    m = problem["num_vehicles"].to(loc.dtype)
    depot = torch.stack([m / 10.0, (problem["demand"] * present).sum(-1) / (m * capacity.squeeze(-1)),
                         present.sum(-1) / (present.shape[1] - 1)], -1)
    return customers.float(), depot.float()


class RoutingPolicy(nn.Module):
    """Attention encoder-decoder producing VRPTW plans (see the module docstring).

    Args:
        embed_dim: E, the token width.
        num_heads: heads of encoder and glimpse.
        num_layers: encoder depth.
        ff_dim: encoder feed-forward width (default 2E).
        tanh_clipping: C of the pointer logits.
        coord_scale: km per unit of the coordinate features.
        early_return: the construction rule (:mod:`envs.routing.construction`): may a route close while
            a customer could still be appended. False (maximal routes) suits a binding fleet.
        step_features: add per-node arrival / wait / slack / distance features to the keys at every step.

    Attributes:
        config: the constructor arguments (what a checkpoint needs to rebuild the network).
    """

    def __init__(self, embed_dim: int = 128, num_heads: int = 8, num_layers: int = 3, ff_dim: int | None = None,
                 tanh_clipping: float = 10.0, coord_scale: float = 100.0, early_return: bool = False,
                 step_features: bool = True) -> None:
        super().__init__()
        self.config = dict(embed_dim=embed_dim, num_heads=num_heads, num_layers=num_layers, ff_dim=ff_dim,
                           tanh_clipping=tanh_clipping, coord_scale=coord_scale, early_return=early_return,
                           step_features=step_features)
        self.early_return = early_return
        self.project_step_nodes = nn.Linear(STEP_NODE_FEATURES, 2 * embed_dim) if step_features else None
        self.num_heads, self.tanh_clipping, self.coord_scale = num_heads, tanh_clipping, coord_scale
        self.embed_customer = nn.Linear(CUSTOMER_FEATURES, embed_dim)
        self.embed_depot = nn.Linear(DEPOT_FEATURES, embed_dim)
        self.encoder = SetEncoder(embed_dim, num_heads, num_layers, ff_dim)
        self.project_nodes = nn.Linear(embed_dim, 3 * embed_dim, bias=False)  # glimpse K, V; logit K
        self.project_graph = nn.Linear(embed_dim, embed_dim, bias=False)
        self.project_step = nn.Linear(embed_dim + CONTEXT_FEATURES, embed_dim, bias=False)
        self.project_out = nn.Linear(embed_dim, embed_dim, bias=False)

    # ------------------------------------------------------------------ encoder (once per instance)
    def encode(self, problem: TensorDict, symmetry: Tensor | None = None,
               dist: Tensor | None = None) -> dict[str, Tensor]:
        """Node embeddings and the decoder's per-instance projections (``symmetry``: see :func:`node_features`).

        Returns:
            dict with ``nodes`` ``[R, S, E]``, ``fixed`` ``[R, E]`` (projected graph mean over present
            nodes), ``glimpse_key`` ``[R, S, E]``, ``glimpse_value`` ``[R, heads, S, E / heads]``,
            ``logit_key`` ``[R, S, E]``
            and ``dist`` ``[R, S, S]`` (km; computed when not given).
        """
        customers, depot = node_features(problem, self.coord_scale, symmetry)
        tokens = self.embed_customer(customers)
        tokens = torch.cat([self.embed_depot(depot).unsqueeze(1), tokens[:, 1:]], 1)
        present = problem["present"]
        nodes = self.encoder(tokens, ~present)
        weight = present.float().unsqueeze(-1)
        graph = (nodes * weight).sum(1) / weight.sum(1)
        r, s, e = nodes.shape
        gk, gv, lk = self.project_nodes(nodes).chunk(3, -1)

        def heads(x: Tensor) -> Tensor:
            return x.view(r, s, self.num_heads, e // self.num_heads).transpose(1, 2)

        return dict(nodes=nodes, fixed=self.project_graph(graph), glimpse_key=gk, glimpse_value=heads(gv),
                    logit_key=lk, dist=distance_matrix(problem["loc"]) if dist is None else dist)

    # ------------------------------------------------------------------ decoder step
    def context(self, problem: TensorDict, state: construction.ConstructionState) -> Tensor:
        """Vehicle-state features ``[R, 5]`` of the decoder query (see ``CONTEXT_FEATURES``)."""
        horizon, capacity = problem["horizon"], problem["capacity"]
        m = problem["num_vehicles"].to(horizon.dtype)
        open_ = ~state.visited
        present = problem["present"].sum(-1).clamp_min(2) - 1
        return torch.stack([state.time / horizon, (capacity - state.load) / capacity, (m - state.used) / m,
                            open_.sum(-1) / present, (problem["demand"] * open_).sum(-1) / (m * capacity)],
                           -1).float()

    def step_node_features(self, cache: dict[str, Tensor], problem: TensorDict,
                           state: construction.ConstructionState) -> Tensor:
        """Per-node features ``[R, S, 4]`` of going there next: arrival/H, wait/H, slack/H, distance."""
        d = cache["dist"].gather(1, state.pos.view(-1, 1, 1).expand(-1, 1, cache["dist"].shape[-1])).squeeze(1)
        horizon = problem["horizon"].unsqueeze(-1)
        arrive = state.time.unsqueeze(-1) + d
        return torch.stack([arrive / horizon, (problem["ready"] - arrive).clamp_min(0.0) / horizon,
                            (problem["due"] - arrive) / horizon, d / self.coord_scale], -1).float()

    def logits(self, cache: dict[str, Tensor], problem: TensorDict, state: construction.ConstructionState) -> Tensor:
        """Pointer logits ``[R, S]``, ``-inf`` where ``state.mask`` forbids the node."""
        nodes = cache["nodes"]
        r, s, e = nodes.shape
        glimpse_key, logit_key = cache["glimpse_key"], cache["logit_key"]
        if self.project_step_nodes is not None:
            step = self.step_node_features(cache, problem, state)
            extra_glimpse, extra_logit = self.project_step_nodes(step).chunk(2, -1)
            glimpse_key, logit_key = glimpse_key + extra_glimpse, logit_key + extra_logit
        glimpse_key = glimpse_key.view(r, s, self.num_heads, e // self.num_heads).transpose(1, 2)
        current = nodes.gather(1, state.pos.view(r, 1, 1).expand(r, 1, e)).squeeze(1)
        query = cache["fixed"] + self.project_step(torch.cat([current, self.context(problem, state)], -1))
        q = query.view(r, self.num_heads, 1, e // self.num_heads)
        # the glimpse by hand: for one query per row this is several times faster on a CPU than
        # scaled_dot_product_attention with a boolean mask (which takes its unfused path)
        compat = (q @ glimpse_key.transpose(-1, -2)) / math.sqrt(e // self.num_heads)  # [R, h, 1, S]
        weights = torch.softmax(compat.masked_fill(~state.mask.view(r, 1, 1, s), -torch.inf), -1)
        glimpse = self.project_out((weights @ cache["glimpse_value"]).reshape(r, e))
        score = torch.einsum("re,rse->rs", glimpse, logit_key) / math.sqrt(e)
        return (self.tanh_clipping * torch.tanh(score)).masked_fill(~state.mask, -torch.inf)

    # ------------------------------------------------------------------ construction
    def rollout(self, problem: TensorDict, decode: Literal["greedy", "sample"] = "greedy",
                margin: float | None = None, generator: torch.Generator | None = None,
                symmetry: Tensor | None = None) -> Rollout:
        """Build one plan per instance with the shared construction rules.

        Args:
            problem: TensorDict ``[R]`` (:mod:`envs.routing.problem`), any float dtype.
            decode: ``greedy`` (argmax) or ``sample`` (from the masked softmax; log-probabilities kept).
            margin: safety margin (time units); :func:`~envs.routing.construction.default_margin` if None.
            generator: RNG of ``sample``.
            symmetry: ``[R, 2, 2]`` input augmentation of the coordinates (:data:`SYMMETRIES`), or None.

        Returns:
            a :class:`Rollout`. Runs at most 2N + 1 steps (a route closes only after a customer).
        """
        dist = distance_matrix(problem["loc"])
        state = construction.start(problem, dist, margin, self.early_return)
        cache = self.encode(problem, symmetry, dist)
        actions, log_prob = [], torch.zeros(problem.shape[0], device=dist.device)
        while not bool(state.done.all()):
            logits = self.logits(cache, problem, state)
            if decode == "greedy":
                action = logits.argmax(-1)
            else:
                probs = torch.softmax(logits, -1)
                action = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
                chosen = torch.log_softmax(logits, -1).gather(1, action.unsqueeze(-1)).squeeze(-1)
                log_prob = log_prob + torch.where(state.done, 0.0, chosen)
            action = torch.where(state.done, 0, action)
            actions.append(action)
            state, _ = construction.step(problem, dist, state, action, margin, self.early_return)
        stacked = torch.stack(actions, 1) if actions else torch.zeros(problem.shape[0], 0, dtype=torch.long,
                                                                     device=dist.device)
        return Rollout(actions=stacked, length=state.length, feasible=state.feasible, unserved=state.unserved(),
                       steps=state.steps, log_prob=log_prob)

    @torch.no_grad()
    def solve(self, problem: TensorDict, margin: float | None = None, num_augment: int = 1
              ) -> tuple[Tensor, Tensor, Tensor]:
        """Greedy plans for a batch of instances, in one batched call.

        Args:
            problem: TensorDict ``[R]`` with N customer slots and fleet bound M (``num_vehicles``).
            margin: safety margin (time units); the dtype's default when None.
            num_augment: greedy plans per instance, under the first ``num_augment`` of the 8
                :data:`SYMMETRIES` of the coordinate input (1 = plain greedy); the shortest feasible
                one is kept. All ``num_augment * R`` constructions run as one batch.

        Returns:
            ``routes`` int64 ``[R, M, N]`` (customer slot indices 0..N-1 in visiting order, -1 padded),
            ``cost`` ``[R]`` (km, in the problem's dtype) and ``feasible`` bool ``[R]`` (every present
            customer routed within M vehicles; where False the routes are a partial plan to discard).

        Raises:
            ValueError: ``num_augment`` outside 1..8.
        """
        if not 1 <= num_augment <= len(SYMMETRIES):
            raise ValueError(f"num_augment must be in 1..{len(SYMMETRIES)}, got {num_augment}")
        r = problem.shape[0]
        n = problem["loc"].shape[1] - 1
        m = int(problem["num_vehicles"].max()) if r else 1
        symmetry = SYMMETRIES[:num_augment].to(problem.device).repeat_interleave(r, 0)  # row a * R + i
        batch = torch.cat([problem] * num_augment) if num_augment > 1 else problem
        out = self.rollout(batch, "greedy", margin, symmetry=symmetry)
        routes = construction.actions_to_routes(out.actions, m, n).view(num_augment, r, m, n)
        cost = out.length.view(num_augment, r)
        feasible = out.feasible.view(num_augment, r)
        best = torch.where(feasible, cost, torch.inf).argmin(0)
        best = torch.where(feasible.any(0), best, 0)
        rows = torch.arange(r, device=best.device)
        return routes[best, rows], cost[best, rows], feasible[best, rows]
