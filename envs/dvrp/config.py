"""Parameters of the dynamic VRPTW with window offers (the ``env:`` section of ``configs/dvrp.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from envs.config import EnvConfig
from envs.dvrp.env import DVRPEnv
from envs.dvrp.generator import InstanceGenerator, type_posterior
from envs.dvrp.neural_oracle import load_routing_policy
from envs.dvrp.reader import FileInstances, expand_instance_paths
from modules.flexibility import FlexibilityModel


def _require(ok: bool, key: str, value: object, allowed: str) -> None:
    if not ok:
        raise ValueError(f"env.{key}={value!r} is not allowed: {allowed}")


@dataclass
class FlexibilityConfig:
    """The learned customer-flexibility model of the env (``env.flexibility``).

    With it, the env adds the model's p(k | attributes) and embedding to every customer row and to the
    request, the predicted acceptance probability to every offer, and records each offer's outcome
    (``outcome``) for ``callbacks.EmbeddingUpdate``, which retrains the model during the run.

    Args:
        embedding_dim: D, width of the customer embedding.
        hidden_dim: width of the model's hidden layer.
        refusal_mask_threshold: when set, offers whose predicted refusal probability P(k < |s| | x)
            exceeds it are masked, on top of the feasibility mask (reject is never masked).
    """

    embedding_dim: int = 4
    hidden_dim: int = 32
    refusal_mask_threshold: float | None = None


class DVRPConfig(EnvConfig):
    """Dynamic VRP with time windows and window offers; defaults from ``shared/notes/dvrp-defaults.md``.

    Args:
        num_customers: N requests per episode (episode length, in steps).
        num_vehicles: M identical vehicles.
        capacity: vehicle capacity Q (demand units); ``None`` takes each instance file's own.
        horizon: depot closing time H (time units; travel time = distance in km). Generated only.
        window_width: preferred window width w (time units). Generated only.
        service_time: service time per customer (time units). Generated only.
        max_shift: S; offers shift the preferred window by -S..S slots (A = 2S + 2 actions with reject).
        type_mix: probabilities of the K flexibility types (type k accepts shifts with |s| <= k).
        attribute_separation: distance between type means of the attributes (1.5: Bayes accuracy 0.71).
        served_reward: reward per accepted request (km-equivalents).
        layout: generated customer layout, Solomon-like ``R`` (uniform), ``C`` (clustered) or ``RC``.
        max_demand: generated demands are uniform on {1..max_demand}.
        num_clusters: cluster count of the ``C`` / ``RC`` layouts.
        cluster_std: cluster spread (km).
        instances: glob of benchmark files (Solomon ``.txt`` or VRPLIB ``.vrp``); when set, episodes draw
            N customers of a random file and ``horizon``, ``window_width``, ``service_time``, ``layout``
            are taken from the files.
        oracle: the plan's cost oracle: ``insertion`` = vectorised cheapest insertion; ``neural`` = every
            quote re-solves the served set plus the request with a trained routing policy
            (:class:`envs.dvrp.neural_oracle.NeuralOracle`).
        oracle_checkpoint: the routing policy's training checkpoint (``configs/vrptw_oracle.yaml``), for
            ``oracle: neural``; it must have been trained for this ``num_customers``.
        oracle_augment: greedy plans per quoted instance under coordinate symmetries for ``oracle: neural``
            (best feasible kept): 8 routes far more requests than 1, at about 7x the time.
        dtype: float type of instance data and plans.
        flexibility: the learned customer-flexibility model (:class:`FlexibilityConfig`), or null for none.

    Raises:
        ValueError: a key out of its allowed range (the message names the key), or an oracle checkpoint
            trained for another ``num_customers``; FileNotFoundError: an ``instances`` glob matching
            nothing, or a missing ``oracle_checkpoint``. Instance files and the oracle checkpoint are read
            here, before any training.
    """

    def __init__(
        self,
        num_customers: int = 30,
        num_vehicles: int = 2,
        capacity: float | None = 250.0,
        horizon: float = 1000.0,
        window_width: float = 120.0,
        service_time: float = 10.0,
        max_shift: int = 3,
        type_mix: tuple[float, ...] = (0.3, 0.3, 0.2, 0.2),
        attribute_separation: float = 1.5,
        served_reward: float = 80.0,
        layout: Literal["R", "C", "RC"] = "R",
        max_demand: int = 30,
        num_clusters: int = 8,
        cluster_std: float = 5.0,
        instances: str | None = None,
        oracle: Literal["insertion", "neural"] = "insertion",
        oracle_checkpoint: str | None = None,
        oracle_augment: int = 8,
        dtype: Literal["float32", "float64"] = "float32",
        flexibility: FlexibilityConfig | None = None,
    ) -> None:
        type_mix = [float(p) for p in type_mix]
        _require(num_customers >= 1, "num_customers", num_customers, "must be >= 1")
        _require(num_vehicles >= 1, "num_vehicles", num_vehicles, "must be >= 1")
        _require(capacity is None or capacity > 0, "capacity", capacity, "must be > 0 or null (files' own)")
        _require(max_shift >= 0, "max_shift", max_shift, "must be >= 0")
        _require(len(type_mix) >= 1 and all(p >= 0 for p in type_mix) and abs(sum(type_mix) - 1.0) < 1e-6,
                 "type_mix", type_mix, "non-negative probabilities summing to 1")
        _require(attribute_separation >= 0, "attribute_separation", attribute_separation, "must be >= 0")
        _require(layout in ("R", "C", "RC"), "layout", layout, "one of R, C, RC")
        _require(oracle in ("insertion", "neural"), "oracle", oracle, "one of: insertion, neural")
        _require(oracle_augment >= 1, "oracle_augment", oracle_augment, "must be >= 1")
        _require(oracle != "neural" or oracle_checkpoint is not None, "oracle_checkpoint", oracle_checkpoint,
                 "a routing-policy checkpoint is required with oracle: neural (train one with configs/vrptw_oracle.yaml)")
        _require(dtype in ("float32", "float64"), "dtype", dtype, "one of float32, float64")
        _require(max_demand >= 1, "max_demand", max_demand, "must be >= 1")
        _require(num_clusters >= 1, "num_clusters", num_clusters, "must be >= 1")
        _require(window_width > 0, "window_width", window_width, "must be > 0")
        _require(service_time >= 0, "service_time", service_time, "must be >= 0")
        if flexibility is not None:
            _require(flexibility.embedding_dim >= 1, "flexibility.embedding_dim", flexibility.embedding_dim, "must be >= 1")
            _require(flexibility.hidden_dim >= 1, "flexibility.hidden_dim", flexibility.hidden_dim, "must be >= 1")
            threshold = flexibility.refusal_mask_threshold
            _require(threshold is None or 0.0 <= threshold < 1.0, "flexibility.refusal_mask_threshold", threshold,
                     "must be in [0, 1) or null")
        self.num_customers = num_customers
        self.num_vehicles = num_vehicles
        self.capacity = capacity
        self.horizon = horizon
        self.window_width = window_width
        self.service_time = service_time
        self.max_shift = max_shift
        self.type_mix = type_mix
        self.attribute_separation = attribute_separation
        self.served_reward = served_reward
        self.layout = layout
        self.max_demand = max_demand
        self.num_clusters = num_clusters
        self.cluster_std = cluster_std
        self.instances = instances
        self.oracle = oracle
        self.oracle_checkpoint = oracle_checkpoint
        self.oracle_augment = oracle_augment
        # the routing network, shared by every env of this config (None for the insertion oracle)
        self.routing_policy = None if oracle != "neural" else load_routing_policy(oracle_checkpoint, num_customers)
        self.dtype = dtype
        self.flexibility = flexibility
        # one model shared by every env built from this config (training and evaluation envs alike)
        self.embedding_model = None if flexibility is None else FlexibilityModel(
            len(type_mix), len(type_mix), flexibility.embedding_dim, flexibility.hidden_dim)
        mix = torch.tensor(type_mix, dtype=torch.float64)
        if instances is None:
            _require(capacity is not None, "capacity", capacity, "required for generated instances")
            self.source: InstanceGenerator | FileInstances = InstanceGenerator(
                num_customers, layout, horizon, window_width, service_time, capacity, max_demand, mix,
                attribute_separation, num_clusters, cluster_std)
        else:
            self.source = FileInstances(expand_instance_paths(instances), num_customers, mix,
                                        attribute_separation, capacity)

    @property
    def num_types(self) -> int:
        """K, the number of flexibility types."""
        return len(self.type_mix)

    def type_posterior(self, attributes: Tensor) -> Tensor:
        """The generator's exact p(k | attributes) ``[..., K]`` (diagnostics: the Bayes classifier)."""
        return type_posterior(attributes, torch.tensor(self.type_mix, device=attributes.device),
                              self.attribute_separation)

    @property
    def num_actions(self) -> int:
        """A = 2S + 2: shifts -S..S (index s + S), then reject (index 2S + 1)."""
        return 2 * self.max_shift + 2

    def make(self, num_envs: int, seed: int, device: torch.device | str = "cpu") -> DVRPEnv:
        return DVRPEnv(self, num_envs=num_envs, seed=seed, device=device)
