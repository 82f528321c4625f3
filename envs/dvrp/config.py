"""Parameters of the dynamic VRPTW with window offers (the ``env:`` section of ``configs/dvrp.yaml``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Literal

import torch
from torch import Tensor, nn

from envs import unwrap
from envs.compat import class_recipe
from envs.config import EnvConfig, require
from envs.dvrp.baselines import BASELINES, ScriptedOfferPolicy
from envs.dvrp.customers import CustomerModel, embedding_width
from envs.dvrp.env import DVRPEnv
from envs.dvrp.generator import InstanceGenerator, type_posterior
from envs.dvrp.hindsight import solve_days
from envs.dvrp.reader import FileInstances, expand_instance_paths
from envs.dvrp.reference import solve_with_pyvrp


@dataclass(eq=False)
class DVRPConfig(EnvConfig):
    """Dynamic VRP with time windows and window offers: the parameters of a day, checked when the config is made.

    The defaults are the measured ones of the project's DVRP notes (30 customers, 2 vehicles, capacity 250, horizon
    1000, windows of 120, service 10, shifts up to 3 slots, four flexibility types).

    Args:
        num_customers: N requests per episode (episode length, in steps), or a list of sizes for days of mixed
            sizes: each episode draws one entry uniformly (with the ``num_vehicles`` entry of the same index), and
            the env is shaped for the largest (observations ``[B, N_max, ...]``; a smaller day's extra rows stay
            unseen and its extra vehicles are out of its fleet). One checkpoint then plays every size.
        num_vehicles: M identical vehicles, or a list paired with ``num_customers``' list (a number: one M for
            every size).
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
            ``oracle: neural``; it must have been trained for this ``num_customers``. The file is read by
            the pipeline (``pipelines.env_models.env_models``), which hands the policy to :meth:`make`.
        oracle_augment: greedy plans per quoted instance under coordinate symmetries for ``oracle: neural``
            (best feasible kept): 8 routes far more requests than 1, at about 7x the time.
        dtype: float type of instance data and plans.
        flexibility: the learned customer model to train beside the policy, or null for none: a class
            implementing :class:`~envs.dvrp.customers.CustomerModel` whose first two arguments are the number of
            types and of attributes (both K, the length of ``type_mix``, given here, so they cannot disagree),
            e.g. ``class_path: modules.flexibility.FlexibilityModel`` with ``init_args: {embedding_dim: 4,
            hidden_dim: 32}``; in Python the class, or a ``functools.partial`` of it. The config holds only this
            recipe: the run builds the model once (:meth:`new_models`) and hands it to every env it makes. With
            it, the env adds the model's p(k | attributes) and embedding to every customer row and to the request,
            the predicted acceptance probability to every offer, and records each offer's outcome (``outcome``)
            for ``callbacks.FlexibilityUpdate``, which retrains the model during the run.
        refusal_mask_threshold: with ``flexibility``, offers whose predicted refusal probability
            P(k < |s| | x) exceeds it are masked, on top of the feasibility mask (reject is never masked).
        improve_every: the tentative plan is improved after every ``improve_every``-th booking (every row of the
            batch at the same steps) by ``improve_passes`` passes of batched local search around the request just
            booked (:mod:`envs.dvrp.local_search`); 0 never improves it.
        improve_passes: passes per improvement (each applies at most one move per row).
        improve_reversal: the bookings' passes also try 2-opt within a route, reversing segments of up to this many
            customers (0: no such move; else >= 2, needs ``improve_every`` >= 1).
        cutoff_sweeps: at the cut-off (a day's last request) the whole plan is re-optimised by this many sweeps of
            local search over every customer: the plan the operator drives. The reward pays the plan after the
            insertion and every improvement, so a day's return is ``served_reward`` x served - the driven plan's
            km. ``improve_every: 0`` and ``cutoff_sweeps: 0`` pay the never-improved insertion plan (the payment
            of the figures before 2026-11-28, and still the default until the configs are retrained under the new
            one).
        cutoff_ruins: after the cut-off's sweeps, this many ruin-and-recreate iterations (a customer and its K
            most related taken out and put back by cheapest insertion, then swept once; kept where shorter): escapes
            the local search's local optima (needs ``cutoff_sweeps`` >= 1).
        cutoff_reversal: the cut-off's sweeps (and those of its ruins) also try 2-opt within a route, reversing
            segments of up to this many customers (0: no such move; else >= 2, needs ``cutoff_sweeps`` >= 1).
        neighbourhood: K, each customer's most related customers in the plan (near in km and in time,
            :func:`envs.dvrp.local_search.neighbours`) that the local search moves it next to (granular
            neighbourhoods).

    Raises:
        ValueError: a key out of its allowed range (the message names the key), or a ``flexibility`` that is
            not callable;
            FileNotFoundError: an ``instances`` glob matching nothing, or a missing ``oracle_checkpoint``.
            Instance files are read here, before any training.
    """

    num_customers: int | list[int] = 30
    num_vehicles: int | list[int] = 2
    capacity: float | None = 250.0
    horizon: float = 1000.0
    window_width: float = 120.0
    service_time: float = 10.0
    max_shift: int = 3
    type_mix: tuple[float, ...] = (0.3, 0.3, 0.2, 0.2)
    attribute_separation: float = 1.5
    served_reward: float = 80.0
    layout: Literal["R", "C", "RC"] = "R"
    max_demand: int = 30
    num_clusters: int = 8
    cluster_std: float = 5.0
    instances: str | None = None
    oracle: Literal["insertion", "neural"] = "insertion"
    oracle_checkpoint: str | None = None
    oracle_augment: int = 8
    dtype: Literal["float32", "float64"] = "float32"
    flexibility: Callable[[int, int], CustomerModel] | None = None
    refusal_mask_threshold: float | None = None
    improve_every: int = 0
    improve_passes: int = 1
    improve_reversal: int = 0
    cutoff_sweeps: int = 0
    cutoff_ruins: int = 0
    cutoff_reversal: int = 0
    neighbourhood: int = 8

    def __post_init__(self) -> None:
        """Check every key (before any work), then derive the sizes and the instance source."""
        self.type_mix = [float(p) for p in self.type_mix]
        self.sizes = _sizes(self.num_customers, self.num_vehicles)
        self.num_customers = max(n for n, _ in self.sizes)
        self.num_vehicles = max(m for _, m in self.sizes)
        self._check_problem()
        self._check_oracle()
        self._check_flexibility()
        self.flexibility = class_recipe(self.flexibility)  # (picklable without the CLI that parsed it)
        self.source = self._instance_source()

    def _check_problem(self) -> None:
        """The day's keys: capacity, offers, types, layout and the generator's sizes."""
        require(self.capacity is None or self.capacity > 0, "capacity", self.capacity,
                "must be > 0 or null (files' own)")
        require(self.max_shift >= 0, "max_shift", self.max_shift, "must be >= 0")
        mix = self.type_mix
        require(len(mix) >= 1 and all(p >= 0 for p in mix) and abs(sum(mix) - 1.0) < 1e-6,
                "type_mix", mix, "non-negative probabilities summing to 1")
        require(self.attribute_separation >= 0, "attribute_separation", self.attribute_separation, "must be >= 0")
        require(self.layout in ("R", "C", "RC"), "layout", self.layout, "one of R, C, RC")
        require(self.dtype in ("float32", "float64"), "dtype", self.dtype, "one of float32, float64")
        require(self.max_demand >= 1, "max_demand", self.max_demand, "must be >= 1")
        require(self.num_clusters >= 1, "num_clusters", self.num_clusters, "must be >= 1")
        require(self.window_width > 0, "window_width", self.window_width, "must be > 0")
        require(self.service_time >= 0, "service_time", self.service_time, "must be >= 0")

    def _check_oracle(self) -> None:
        """The cost oracle's keys; the neural oracle's checkpoint must exist."""
        require(self.oracle in ("insertion", "neural"), "oracle", self.oracle, "one of: insertion, neural")
        require(self.oracle_augment >= 1, "oracle_augment", self.oracle_augment, "must be >= 1")
        for key in ("improve_every", "improve_passes", "cutoff_sweeps", "cutoff_ruins"):
            require(isinstance(getattr(self, key), int) and getattr(self, key) >= 0, key, getattr(self, key),
                    "an integer >= 0")
        require(isinstance(self.neighbourhood, int) and self.neighbourhood >= 1, "neighbourhood", self.neighbourhood,
                "an integer >= 1")
        require(self.cutoff_ruins == 0 or self.cutoff_sweeps >= 1, "cutoff_ruins", self.cutoff_ruins,
                "0, or > 0 with cutoff_sweeps >= 1")
        for key, moves in (("improve_reversal", "improve_every"), ("cutoff_reversal", "cutoff_sweeps")):
            value = getattr(self, key)
            require(isinstance(value, int) and (value == 0 or (value >= 2 and getattr(self, moves) >= 1)), key, value,
                    f"0, or an integer >= 2 with {moves} >= 1")
        if self.oracle == "neural":
            require(self.improve_every == 0 and self.cutoff_sweeps == 0, "improve_every",
                    (self.improve_every, self.cutoff_sweeps), "0 with cutoff_sweeps: 0 under oracle: neural (the "
                    "local search improves the insertion oracle's plan)")
            require(len(self.sizes) == 1, "num_customers", [n for n, _ in self.sizes],
                    "one size with oracle: neural (its routing policy is trained for one N)")
            require(self.oracle_checkpoint is not None, "oracle_checkpoint", self.oracle_checkpoint,
                    "a routing-policy checkpoint is required with oracle: neural "
                    "(train one with configs/vrptw_oracle.yaml)")
        if self.oracle_checkpoint is not None and not os.path.isfile(self.oracle_checkpoint):
            raise FileNotFoundError(f"env.oracle_checkpoint={self.oracle_checkpoint!r}: no such file (train one "
                                    f"with `python -m pipelines.fit --config configs/vrptw_oracle.yaml`)")

    def _check_flexibility(self) -> None:
        """A flexibility model is built by a callable; the refusal mask needs one and a probability in [0, 1)."""
        require(self.flexibility is None or callable(self.flexibility), "flexibility", self.flexibility,
                "a class implementing envs.dvrp.customers.CustomerModel (e.g. modules.flexibility.FlexibilityModel), "
                "or null")
        threshold = self.refusal_mask_threshold
        require(threshold is None or 0.0 <= threshold < 1.0, "refusal_mask_threshold", threshold,
                "must be in [0, 1) or null")
        require(threshold is None or self.flexibility is not None, "refusal_mask_threshold", threshold,
                "needs a flexibility model (env.flexibility)")

    def _instance_source(self) -> InstanceGenerator | FileInstances:
        """The generator of the layout's instances, or the benchmark files of ``instances`` (read here)."""
        mix = torch.tensor(self.type_mix, dtype=torch.float64)
        if self.instances is None:
            require(self.capacity is not None, "capacity", self.capacity, "required for generated instances")
            return InstanceGenerator(self.num_customers, self.layout, self.horizon, self.window_width,
                                     self.service_time, self.capacity, self.max_demand, mix,
                                     self.attribute_separation, self.num_clusters, self.cluster_std)
        return FileInstances(expand_instance_paths(self.instances), self.num_customers, mix,
                             self.attribute_separation, self.capacity)

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

    def model_names(self) -> tuple[str, ...]:
        """``flexibility`` with a flexibility model, ``routing_policy`` with ``oracle: neural``."""
        return (*(("flexibility",) if self.flexibility is not None else ()),
                *(("routing_policy",) if self.oracle == "neural" else ()))

    def new_models(self) -> dict[str, nn.Module]:
        """``{"flexibility": flexibility(K, K)}`` with a flexibility model (see ``EnvConfig.new_models``).

        Raises:
            ValueError: a model that is no ``nn.Module`` or does not map attributes ``[n, K]`` to
                (log p ``[n, K]``, embedding ``[n, D]``).
        """
        if self.flexibility is None:
            return {}
        model = self.flexibility(self.num_types, self.num_types)
        embedding_width(model, self.num_types)  # checks its outputs
        return {"flexibility": model}

    def model_checkpoints(self) -> dict[str, str]:
        """``{"routing_policy": oracle_checkpoint}`` for ``oracle: neural`` (see ``EnvConfig.model_checkpoints``)."""
        return {"routing_policy": self.oracle_checkpoint} if self.oracle == "neural" else {}

    def check_model(self, name: str, model: nn.Module, trained_for: dict) -> None:
        """Check the routing policy of ``oracle: neural`` (``name = "routing_policy"``) read from
        ``oracle_checkpoint``.

        Args:
            name: ``routing_policy``.
            model: the policy (a :class:`~envs.dvrp.neural_oracle.RoutingSolver`, in eval mode).
            trained_for: its checkpoint's record of the instances it was trained on (``num_customers``).

        Raises:
            ValueError: another name, or a policy trained for another ``num_customers`` (the message names
                the file and both sizes).
        """
        require(name == "routing_policy", "model", name, "routing_policy (the neural oracle's policy)")
        trained = trained_for.get("num_customers")
        if trained != self.num_customers:
            raise ValueError(f"env.oracle_checkpoint={self.oracle_checkpoint!r}: trained for num_customers={trained}, "
                             f"this env has {self.num_customers}")

    def baseline_policies(self) -> dict:
        """The scripted offer policies of :mod:`envs.dvrp.baselines` (``preferred`` ... ``clairvoyant``)."""
        return {name: partial(_scripted, name) for name in BASELINES}

    def reference_cost(self, episode: dict, seconds: float) -> float | None:
        """PyVRP's cost (km) of an exported episode's served set with its agreed windows
        (:func:`envs.dvrp.reference.solve_with_pyvrp`), or None when it finds no plan."""
        found = solve_with_pyvrp(episode, episode["num_vehicles"], seconds)
        return None if found is None else found[0]

    def hindsight(self, days: list[dict], seconds: float, workers: int = 1) -> dict[str, Tensor]:
        """The hindsight oracle's plan of every exported day (:func:`envs.dvrp.hindsight.solve_days`), as
        per-episode results ``[E]`` float64: ``episode_return``, ``plan_cost_km``, ``served``, ``failure_rate``
        (customers not served / N) and ``refused`` (0: it offers only windows the customer accepts)."""
        plans = solve_days(days, self.max_shift, self.served_reward, seconds, workers)

        def column(values) -> Tensor:
            return torch.tensor(list(values), dtype=torch.float64)

        return {"episode_return": column(p.episode_return for p in plans),
                "plan_cost_km": column(p.cost_km for p in plans), "served": column(p.served for p in plans),
                "failure_rate": column((len(d["requests"]) - p.served) / len(d["requests"])
                                       for d, p in zip(days, plans, strict=True)),
                "refused": column(0.0 for _ in plans)}

    def make(self, num_envs: int, seed: int, device: torch.device | str = "cpu",
             models: Mapping[str, nn.Module] | None = None) -> DVRPEnv:
        """Build the env with the run's learned models (:meth:`model_names`), shared by every env of the run.

        Raises:
            ValueError: a model missing from ``models`` (the flexibility model of ``flexibility``, the routing
                policy of ``oracle: neural``), or one the config does not name.
        """
        models = self.check_models(models)
        return DVRPEnv(self, num_envs=num_envs, seed=seed, device=device, flexibility=models.get("flexibility"),
                       routing_policy=models.get("routing_policy"))


def _sizes(num_customers: int | list[int], num_vehicles: int | list[int]) -> list[tuple[int, int]]:
    """The (N, M) pairs of ``num_customers`` and ``num_vehicles``: lists of one length, or a list of sizes with one
    number of vehicles for all, or two numbers.

    Raises:
        ValueError: an empty list, lists of different lengths, a list of fleets with one size (e.g. a run's
            ``num_customers`` overridden alone), an N or M below 1 (the message names the key).
    """
    customers = list(num_customers) if isinstance(num_customers, (list, tuple)) else [num_customers]
    vehicles = list(num_vehicles) if isinstance(num_vehicles, (list, tuple)) else [num_vehicles]
    require(len(customers) >= 1, "num_customers", num_customers, "a number or a non-empty list")
    require(len(vehicles) >= 1, "num_vehicles", num_vehicles, "a number or a non-empty list")
    require(len(customers) == len(vehicles) or len(vehicles) == 1, "num_vehicles", num_vehicles,
            f"a number or a list as long as num_customers={num_customers} (one fleet per size)")
    count = max(len(customers), len(vehicles))
    customers, vehicles = customers * (count // len(customers)), vehicles * (count // len(vehicles))
    for n in customers:
        require(isinstance(n, int) and n >= 1, "num_customers", num_customers, "whole numbers >= 1")
    for m in vehicles:
        require(isinstance(m, int) and m >= 1, "num_vehicles", num_vehicles, "whole numbers >= 1")
    return list(zip(customers, vehicles, strict=True))


def _scripted(name: str, env, seed: int) -> ScriptedOfferPolicy:
    return ScriptedOfferPolicy(name, unwrap(env), seed=seed)
