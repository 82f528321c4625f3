"""Parameters of the static VRPTW construction problem (the ``env:`` section of ``configs/vrptw_oracle.yaml``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from envs.config import EnvConfig
from envs.dvrp import DVRPConfig
from envs.vrptw.env import VRPTWEnv
from envs.vrptw.source import ServedSetInstances


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
        ValueError: an unknown policy or a negative penalty (the message names the key).
    """

    def __init__(self, dvrp: DVRPConfig, policies: Sequence[str] = ("fallback", "informed", "greedy", "random"),
                 stop_exponent: float = 1.0, unserved_penalty: float = 100.0, early_return: bool = False) -> None:
        if unserved_penalty < 0:
            raise ValueError(f"env.unserved_penalty={unserved_penalty!r} is not allowed: must be >= 0")
        if stop_exponent <= 0:
            raise ValueError(f"env.stop_exponent={stop_exponent!r} is not allowed: must be > 0")
        self.dvrp = dvrp
        self.policies = list(policies)
        self.unserved_penalty = unserved_penalty
        self.early_return = early_return
        self.stop_exponent = stop_exponent
        self.source = ServedSetInstances(dvrp, self.policies, stop_exponent=stop_exponent)

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
