"""Parameters of the static VRPTW construction problem (the ``env:`` section of ``configs/vrptw_oracle.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from envs.config import EnvConfig
from envs.dvrp import DVRPConfig
from envs.vrptw.env import VRPTWEnv
from envs.vrptw.source import ServedSetInstances, check_policies


@dataclass(eq=False)
class VRPTWConfig(EnvConfig):
    """VRPTW instances from DVRP episode prefixes (:class:`~envs.vrptw.source.ServedSetInstances`).

    Args:
        dvrp: the DVRP problem whose oracle the instances train (its N, M, Q, H, windows).
        policies: scripted DVRP offer policies that play the episodes (one per row, drawn uniformly).
        stop_exponent: the DVRP step whose served set is taken is ``floor(N * u ** stop_exponent)``
            (1 = uniform; below 1 favours the large, tight sets of late steps).
        unserved_penalty: cost (km) per customer left unserved at a dead end (training signal only;
            such a plan is reported infeasible).
        early_return: may a route close while a customer could still be appended (the construction
            rule; keep it equal to the routing policy's).

    Raises:
        ValueError: an unknown policy, a negative penalty or a non-positive exponent (the message names the key).
    """

    dvrp: DVRPConfig
    policies: list[str] = field(default_factory=lambda: ["fallback", "informed", "greedy", "random"])
    stop_exponent: float = 1.0
    unserved_penalty: float = 100.0
    early_return: bool = False

    def __post_init__(self) -> None:
        if self.unserved_penalty < 0:
            raise ValueError(f"env.unserved_penalty={self.unserved_penalty!r} is not allowed: must be >= 0")
        if self.stop_exponent <= 0:
            raise ValueError(f"env.stop_exponent={self.stop_exponent!r} is not allowed: must be > 0")
        self.policies = list(self.policies)
        check_policies(self.policies)
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

    def make(self, num_envs: int, seed: int, device: torch.device | str = "cpu") -> VRPTWEnv:
        return VRPTWEnv(self.source, num_envs=num_envs, seed=seed, unserved_penalty=self.unserved_penalty,
                        early_return=self.early_return, device=device)
