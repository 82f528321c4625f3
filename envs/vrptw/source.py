"""VRPTW instances as the DVRP env's cost oracle meets them: served sets of DVRP episode prefixes.

Inside the DVRP env the oracle prices a request against the customers served so far, with their
*agreed* windows (preferred or shifted by +-s slots). :class:`ServedSetInstances` reproduces that
distribution: it plays DVRP episodes (the batched :class:`~envs.dvrp.DVRPEnv`, insertion oracle) with
a per-row scripted offer policy and, at a random step t of each row, takes the customers served
before t plus the request t under one of its windows (a uniformly drawn feasible offer; the preferred
window when none is feasible). Customer slots are the arrival indices; absent slots are padding.
Every draw is a counter-based function of the row key (:mod:`envs.rng`), so row r of any batch
is the same instance whatever the batch size.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDict
from torch import Tensor

from envs import rng
from envs.dvrp import DVRPConfig, DVRPEnv
from envs.dvrp.baselines import BASELINES, ScriptedOfferPolicy
from envs.dvrp.env import SERVED
from envs.routing.problem import make_problem

_POLICY, _STOP, _RANDOM, _CANDIDATE = 101, 103, 105, 107  # rng streams (distinct from the generator's)


def _uniform_pick(allowed: Tensor, scores: Tensor, fallback: int) -> Tensor:
    """Index ``[R]`` of a uniform draw among ``allowed`` ``[R, W]`` (``scores`` ``[R, W]`` uniform), or
    ``fallback`` where nothing is allowed."""
    pick = torch.where(allowed, scores, -1.0).argmax(-1)
    return torch.where(allowed.any(-1), pick, fallback)


def check_policies(policies: Sequence[str]) -> None:
    """Check the names of the scripted DVRP offer policies that play the episodes.

    Raises:
        ValueError: none given, or an unknown name (the message lists the allowed ones).
    """
    unknown = [p for p in policies if p not in BASELINES]
    if unknown or not policies:
        raise ValueError(f"env.policies={list(policies)!r}: unknown {unknown}; allowed: {', '.join(BASELINES)}")


class ServedSetInstances:
    """Problems (see :mod:`envs.routing.problem`) drawn from DVRP episodes of ``config``.

    Args:
        config: the DVRP problem (its N, M, Q, H, windows and layout or instance files).
        policies: scripted offer policies (names of :data:`envs.dvrp.baselines.BASELINES`; ``random``
            draws uniformly among feasible offers from the row's own counter-based stream, so rows stay
            reproducible); each row plays one, drawn uniformly.
        with_candidate: add the request of the stop step (the one the oracle prices); False gives
            plain served sets.
        stop_exponent: the stop step is ``floor(N * u ** stop_exponent)``, u uniform: 1 = uniform over
            the episode, below 1 favours late steps (large served sets, where a fixed fleet is tight).

    Raises:
        ValueError: an unknown policy name (the message lists the allowed ones).
    """

    def __init__(self, config: DVRPConfig, policies: Sequence[str] = ("fallback", "informed", "greedy", "random"),
                 with_candidate: bool = True, stop_exponent: float = 1.0) -> None:
        check_policies(policies)
        self.config = config
        self.policies = tuple(policies)
        self.with_candidate = with_candidate
        self.stop_exponent = stop_exponent
        self._envs: dict[int, DVRPEnv] = {}

    @property
    def num_customers(self) -> int:
        return self.config.num_customers

    @property
    def num_vehicles(self) -> int:
        return self.config.num_vehicles

    def _env(self, rows: int, device: torch.device) -> DVRPEnv:
        if rows not in self._envs:
            self._envs[rows] = DVRPEnv(self.config, num_envs=rows, device=device)
        return self._envs[rows]

    def sample(self, key: Tensor, stop: Tensor | None = None) -> TensorDict:
        """One problem per key: int64 ``[R]`` -> problem TensorDict ``[R]``.

        Args:
            key: row keys. stop: int64 ``[R]`` the step whose state is taken (0..N; N = the final
                served set, no candidate); drawn on 0..N-1 (see ``stop_exponent``) when None.
        """
        env, n, s = self._env(key.shape[0], key.device), self.num_customers, self.config.max_shift
        w = 2 * s + 1
        ekey = rng.episode_keys(key, torch.zeros_like(key))
        if stop is None:
            u = rng.uniform(ekey, _STOP, (), torch.float64)
            stop = (u ** self.stop_exponent * n).long().clamp_max(n - 1)
        policy = (rng.uniform(ekey, _POLICY, (), torch.float64) * len(self.policies)).long()
        policy = policy.clamp_max(len(self.policies) - 1)
        random_scores = rng.uniform(ekey, _RANDOM, (n, w))
        candidate_scores = rng.uniform(ekey, _CANDIDATE, (w,))
        env.seed_rows(key.clone())
        rules = {p: ScriptedOfferPolicy(p, env) for p in self.policies if p != "random"}
        td = env.reset()
        ready = env.instances["ready"].clone()
        due = env.instances["due"].clone()
        present = torch.zeros(key.shape[0], n, dtype=torch.bool, device=key.device)
        for t in range(int(stop.max()) + 1):
            here = stop == t
            served = env.status == SERVED
            present = torch.where(here.unsqueeze(-1), served, present)
            due = torch.where(here.unsqueeze(-1), torch.where(served, env.agreed[..., 1], due), due)
            ready = torch.where(here.unsqueeze(-1), torch.where(served, env.agreed[..., 0], ready), ready)
            if t == n:
                break
            if self.with_candidate:
                window = env.windows.gather(1, _uniform_pick(env.mask[:, :w], candidate_scores, s)
                                            .view(-1, 1, 1).expand(-1, 1, 2)).squeeze(1)  # [R, 2]
                present[here, t] = True
                ready[here, t] = window[here, 0]
                due[here, t] = window[here, 1]
            if t == int(stop.max()):
                break
            choices = [rules[p].choose(env.mask[:, :w], td["offer_cost"][:, :w]) if p != "random"
                       else _uniform_pick(env.mask[:, :w], random_scores[:, t], w) for p in self.policies]
            td["action"] = torch.stack(choices, -1).gather(1, policy.unsqueeze(-1)).squeeze(-1)
            td = env.step(td)["next"]
        inst = env.instances
        return make_problem(inst["depot"], inst["xy"], inst["demand"], inst["service"], ready, due, present,
                            inst["horizon"], inst["capacity"], self.num_vehicles).clone()  # not views of the cached env
