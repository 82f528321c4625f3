"""Parameters of the static VRPTW construction problem (the ``env:`` section of ``configs/vrptw_oracle.yaml``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from envs.config import EnvConfig
from envs.dvrp import DVRPConfig
from envs.vrptw.env import VRPTWEnv, nearest_neighbour
from envs.vrptw.source import ServedSetInstances, check_policies


class VRPTWConfig(EnvConfig):
    """VRPTW instances from DVRP episode prefixes (:class:`~envs.vrptw.source.ServedSetInstances`).

    A plain class, not a dataclass as the other env configs: jsonargparse reads a dataclass field whose type is
    another config class (``dvrp``) as an unvalidated value, and instantiates it only through a path it has
    deprecated.

    Args:
        dvrp: the DVRP problem whose oracle the instances train (its N, M, Q, H, windows).
        policies: scripted DVRP offer policies that play the episodes (one per row, drawn uniformly).
        stop_exponent: the DVRP step whose served set is taken is ``floor(N * u ** stop_exponent)``
            (1 = uniform; below 1 favours the large, tight sets of late steps).
        unserved_penalty: cost (km) per customer left unserved at a dead end (training signal only;
            such a plan is reported infeasible).
        early_return: may a route close while a customer could still be appended (the construction
            rule; keep it equal to the routing policy's).

    ``pipelines.evaluate`` plays a trained routing policy step by step on :class:`~envs.vrptw.env.VRPTWEnv`
    (greedy: the argmax node), beside the reference rules ``nearest`` (nearest neighbour) and ``random``; the
    return is minus the plan's km and ``unserved_penalty`` per customer left at a dead end, and ``feasible_rate``
    the share of complete plans.

    Raises:
        ValueError: an unknown policy, a negative penalty or a non-positive exponent (the message names the key).
    """

    outcome_keys = ("feasible",)

    def __init__(self, dvrp: DVRPConfig, policies: Sequence[str] = ("fallback", "informed", "greedy", "random"),
                 stop_exponent: float = 1.0, unserved_penalty: float = 100.0, early_return: bool = False) -> None:
        if unserved_penalty < 0:
            raise ValueError(f"env.unserved_penalty={unserved_penalty!r} is not allowed: must be >= 0")
        if stop_exponent <= 0:
            raise ValueError(f"env.stop_exponent={stop_exponent!r} is not allowed: must be > 0")
        check_policies(policies)
        self.dvrp = dvrp
        self.policies = list(policies)
        self.unserved_penalty = unserved_penalty
        self.early_return = early_return
        self.stop_exponent = stop_exponent
        self._source: ServedSetInstances | None = None

    @property
    def source(self) -> ServedSetInstances:
        """The instance source (built on first use: the DVRP episodes that make the instances)."""
        if self._source is None:
            self._source = ServedSetInstances(self.dvrp, self.policies, stop_exponent=self.stop_exponent)
        return self._source

    @property
    def num_customers(self) -> int:
        """N, customer slots per instance (the DVRP episode length)."""
        return self.dvrp.num_customers

    @property
    def num_vehicles(self) -> int:
        """M, the most routes per plan."""
        return self.dvrp.num_vehicles

    def baseline_policies(self) -> dict[str, Callable]:
        """``nearest`` (the nearest-neighbour rule, :func:`~envs.vrptw.env.nearest_neighbour`) and ``random``."""
        return {"nearest": lambda env, seed: nearest_neighbour, **super().baseline_policies()}

    def make(self, num_envs: int, seed: int, device: torch.device | str = "cpu",
             models: dict | None = None) -> VRPTWEnv:
        self.check_models(models)  # none
        return VRPTWEnv(self.source, num_envs=num_envs, seed=seed, unserved_penalty=self.unserved_penalty,
                        early_return=self.early_return, device=device)
