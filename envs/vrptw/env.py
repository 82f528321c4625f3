"""Batched VRPTW route construction as a TorchRL env: one node per step (Kool et al. 2019 style)."""

from __future__ import annotations

from typing import Protocol

import torch
from tensordict import TensorDict, TensorDictBase
from torch import Tensor
from torchrl.data import Binary, Categorical, Composite, Unbounded

from envs import rng
from envs.routing import construction
from envs.routing.problem import distance_matrix
from envs.seeding import NativeBatchedEnv

NODE_FIELDS = ("demand", "service", "ready", "due")  # columns 2..5 of ``nodes`` after x, y
INFO_KEYS = ("route_km", "unserved", "feasible")


class ProblemSource(Protocol):
    """Anything with ``num_customers`` and ``sample(key [R]) -> problem TensorDict [R]``."""

    num_customers: int

    def sample(self, key: Tensor) -> TensorDict: ...


class VRPTWEnv(NativeBatchedEnv):
    """B VRPTW instances built into plans one node at a time (``batch_size=[B]``).

    The rules are :mod:`envs.routing.construction` (the same functions the neural oracle decodes with).

    Actions:
        ``action`` int64 ``[B]`` in ``[0, 1 + N)``: the next node, 0 = the depot (closes the route; the
        next customer opens a new vehicle).

    Observations (float32 unless noted):
        * ``nodes`` ``[B, 1 + N, 6]``: x, y (km), demand, service, ready, due (time units); row 0 = depot.
        * ``present`` bool ``[B, 1 + N]``: slots holding a customer (depot True).
        * ``instance`` ``[B, 3]``: horizon H, capacity Q, vehicles M.
        * ``position`` int64 ``[B]``: current node.
        * ``vehicle`` ``[B, 4]``: time after service at the current node, route load, routes started,
          distance so far (km).
        * ``visited`` bool ``[B, 1 + N]``: served customers (absent slots and the depot count as visited).
        * ``action_mask`` bool ``[B, 1 + N]`` (True = allowed): see the construction rules.
        * ``info``: ``route_km``, ``unserved`` (customers left at a dead end) and ``feasible``
          (1.0 / 0.0), each ``[B, 1]``.

    Constraints: capacity, service start inside [ready, due], back at the depot by H, at most M routes.

    Reward: ``-distance`` of the step (km), minus ``unserved_penalty`` per unserved customer at the step
    that ends in a dead end, ``[B, 1]``.

    Termination: ``done = terminated`` when all customers are served and the vehicle is back at the
    depot, or at a dead end (``info.feasible`` = 0).

    Seeding: row b of an env seeded s draws the instances of keys ``episode_keys(s + b, episode)``.

    Args:
        source: the instance source (e.g. :class:`~envs.vrptw.source.ServedSetInstances`).
        num_envs: B. seed: seed of row 0. unserved_penalty: km per unserved customer.
        early_return: the construction rule of :mod:`envs.routing.construction`. device: torch device.
    """

    batch_locked = True

    def __init__(self, source: ProblemSource, num_envs: int = 1, seed: int = 0, unserved_penalty: float = 100.0,
                 early_return: bool = False, device: torch.device | str = "cpu") -> None:
        super().__init__(num_envs, device)  # checks num_envs >= 1
        self.source = source
        self.unserved_penalty = unserved_penalty
        self.early_return = early_return
        self._set_seed(seed)
        self.problem = source.sample(rng.episode_keys(self.row_seed, self.episode)).to(self.device)
        self.dist = distance_matrix(self.problem["loc"])
        self.state = construction.start(self.problem, self.dist, early_return=self.early_return)
        b, s = num_envs, source.num_customers + 1
        f32 = dict(dtype=torch.float32, device=self.device)
        self.observation_spec = Composite(
            nodes=Unbounded(shape=(b, s, 2 + len(NODE_FIELDS)), **f32),
            present=Binary(n=s, shape=(b, s), dtype=torch.bool, device=self.device),
            instance=Unbounded(shape=(b, 3), **f32),
            position=Unbounded(shape=(b,), dtype=torch.int64, device=self.device),
            vehicle=Unbounded(shape=(b, 4), **f32),
            visited=Binary(n=s, shape=(b, s), dtype=torch.bool, device=self.device),
            action_mask=Binary(n=s, shape=(b, s), dtype=torch.bool, device=self.device),
            info=Composite({k: Unbounded(shape=(b, 1), **f32) for k in INFO_KEYS}, shape=(b,)),
            shape=(b,),
        )
        self.action_spec = Categorical(n=s, shape=(b,), device=self.device)
        self.reward_spec = Unbounded(shape=(b, 1), **f32)
        self.add_episode_reward_spec()

    def _reset(self, tensordict: TensorDict | None = None, **kwargs) -> TensorDict:
        rows, idx, _, keys = self.start_episodes(tensordict)
        if idx.numel():
            new = self.source.sample(keys).to(self.device)
            self.problem[idx] = new
            self.dist[idx] = distance_matrix(new["loc"])
        self.state = construction.start(self.problem, self.dist, early_return=self.early_return).where(rows, self.state)
        return self._observation().set("episode_reward", self.episode_returns())

    def _step(self, tensordict: TensorDict) -> TensorDict:
        action = tensordict["action"].reshape(-1).clone()
        allowed = self.state.mask.gather(1, action.unsqueeze(-1)).squeeze(-1)
        if not bool(allowed.all()):
            bad = (~allowed).nonzero().squeeze(-1)[:5].tolist()
            raise ValueError(f"action violates action_mask in rows {bad}")
        before = self.state
        self.state, leg = construction.step(self.problem, self.dist, before, action,
                                                  early_return=self.early_return)
        dead = self.state.done & ~self.state.feasible & ~before.done
        reward = -leg - self.unserved_penalty * dead * self.state.unserved()
        out = self._observation()
        done, reward = self.state.done.unsqueeze(-1), reward.float().unsqueeze(-1)
        out.update({"reward": reward, "episode_reward": self.episode_returns(reward), "done": done,
                    "terminated": done.clone()})
        return out

    def _observation(self) -> TensorDict:
        p, s, b = self.problem, self.state, self.batch_size[0]
        nodes = torch.cat([p["loc"], torch.stack([p[k] for k in NODE_FIELDS], -1)], -1).float()
        instance = torch.stack([p["horizon"], p["capacity"], p["num_vehicles"].to(p["horizon"].dtype)], -1).float()
        vehicle = torch.stack([s.time, s.load, s.used.to(s.time.dtype), s.length], -1).float()
        info = TensorDict(route_km=s.length.float().unsqueeze(-1), unserved=s.unserved().float().unsqueeze(-1),
                            feasible=s.feasible.float().unsqueeze(-1), batch_size=[b])
        return TensorDict(nodes=nodes, present=p["present"].clone(), instance=instance, position=s.pos.clone(),
                          vehicle=vehicle, visited=s.visited.clone(), action_mask=s.mask.clone(), info=info,
                          batch_size=[b])


def observed_construction(observation: TensorDictBase) -> tuple[TensorDict, construction.ConstructionState]:
    """The problem ``[B]`` (:mod:`envs.routing.problem`, float32) and the construction state a
    :class:`VRPTWEnv` observation shows, for a policy that decides from the observation alone (the
    step-wise routing policy of ``pipelines.evaluate``, the nearest-neighbour rule).

    The state's ``steps``, ``done`` and ``feasible`` are not observed (zeros / False / True): no decision
    rule reads them.
    """
    nodes, instance, vehicle = observation["nodes"], observation["instance"], observation["vehicle"]
    problem = TensorDict({"loc": nodes[..., :2], **{k: nodes[..., 2 + i] for i, k in enumerate(NODE_FIELDS)},
                          "present": observation["present"], "horizon": instance[:, 0], "capacity": instance[:, 1],
                          "num_vehicles": instance[:, 2].round().long()}, batch_size=observation.batch_size)
    b = observation.batch_size[0]
    state = construction.ConstructionState(
        pos=observation["position"], time=vehicle[:, 0], load=vehicle[:, 1], used=vehicle[:, 2].round().long(),
        visited=observation["visited"], length=vehicle[:, 3],
        steps=torch.zeros(b, dtype=torch.long, device=nodes.device),
        done=torch.zeros(b, dtype=torch.bool, device=nodes.device),
        feasible=torch.ones(b, dtype=torch.bool, device=nodes.device), mask=observation["action_mask"])
    return problem, state


def nearest_neighbour(observation: TensorDictBase) -> TensorDictBase:
    """The nearest-neighbour construction rule (Solomon 1987's simplest route-building heuristic): the allowed
    customer nearest the current node (km), else the depot (closing the route). Writes ``action`` int64 ``[B]``
    into ``observation`` (a :class:`VRPTWEnv` one, ``[B]``) and returns it."""
    loc, pos, mask = observation["nodes"][..., :2], observation["position"], observation["action_mask"]
    here = loc.gather(1, pos.view(-1, 1, 1).expand(-1, 1, 2))
    dist = torch.linalg.vector_norm(loc - here, dim=-1)
    customers = mask.clone()
    customers[:, 0] = False
    nearest = dist.masked_fill(~customers, torch.inf).argmin(-1)
    return observation.set("action", torch.where(customers.any(-1), nearest, 0))
