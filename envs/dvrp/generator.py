"""Instance generator for the dynamic VRPTW: Solomon-like R / C / RC layouts, types and attributes.

An *instance* is one episode's data, a :class:`~tensordict.TensorDict` with batch ``[R]`` and keys

=============  ===================  ============================================================
key            shape                meaning (units)
=============  ===================  ============================================================
depot          ``[R, 2]``           depot coordinates (km)
horizon        ``[R]``              depot closing time H (time units; travel time = distance)
capacity       ``[R]``              vehicle capacity Q (demand units)
xy             ``[R, N, 2]``        customer coordinates, in arrival order (km)
demand         ``[R, N]``           demand (units)
service        ``[R, N]``           service time (time units)
ready, due     ``[R, N]``           preferred time window [e, l] (time units)
slot           ``[R, N]``           shift step of a window offer: the preferred window's width
kind           ``[R, N]`` int64     hidden flexibility type k in {0..K-1}: accepts shift s iff |s| <= k
attributes     ``[R, N, K]``        observable attributes x ~ N(sep * e_k, I_K)
=============  ===================  ============================================================

All draws come from :mod:`envs.rng`, keyed by (row seed, episode index).
"""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict
from torch import Tensor

from envs import rng

# stream ids of the counter-based generator (distinct per drawn quantity)
_XY, _DEMAND, _READY, _KIND, _ATTR, _CLUSTER, _CENTRE, _OFFSET, _MIX, _FILE, _PICK, _SIZE = (
    10, 12, 14, 16, 18, 22, 24, 26, 30, 32, 34, 36,
)


def draw_types_and_attributes(
    key: Tensor, num: int, type_mix: Tensor, separation: float, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """Types ``[R, num]`` (int64, categorical over ``type_mix``) and attributes ``[R, num, K]``.

    Attributes are ``x = separation * onehot(k) + eps``, ``eps ~ N(0, I_K)``, so the type can be inferred
    from them with noise; :func:`type_posterior` is the exact Bayes posterior.
    """
    cdf = torch.cumsum(type_mix.to(dtype), 0)
    u = rng.uniform(key, _KIND, (num,), dtype)
    kind = torch.searchsorted(cdf[:-1].contiguous(), u.contiguous(), right=True)
    num_types = type_mix.numel()
    noise = rng.normal(key, _ATTR, (num, num_types), dtype)
    attributes = separation * torch.nn.functional.one_hot(kind, num_types).to(dtype) + noise
    return kind, attributes


def assemble(key: Tensor, type_mix: Tensor, separation: float, **fields: Tensor) -> TensorDict:
    """The instance TensorDict ``[R]`` of the module docstring from its drawn fields (``depot``,
    ``horizon``, ``capacity``, ``xy``, ``demand``, ``service``, ``ready``, ``due``): adds ``slot = due -
    ready`` and draws the types and attributes (:func:`draw_types_and_attributes`)."""
    xy = fields["xy"]
    kind, attributes = draw_types_and_attributes(key, xy.shape[1], type_mix.to(xy.device), separation, xy.dtype)
    return TensorDict(**fields, slot=fields["due"] - fields["ready"], kind=kind, attributes=attributes,
                      batch_size=[xy.shape[0]], device=xy.device)


def type_posterior(attributes: Tensor, type_mix: Tensor, separation: float) -> Tensor:
    """Exact p(k | x) of the generator, ``[..., K]``: softmax(log mix_k - ||x - sep * e_k||^2 / 2)."""
    log_lik = separation * attributes - 0.5 * separation**2
    return torch.softmax(torch.log(type_mix.to(attributes)) + log_lik, dim=-1)


class InstanceGenerator:
    """Generated episodes in Solomon-like layouts (coordinates in [0, 100]^2, depot at the centre).

    * ``R``: customers uniform on the square. ``C``: ``num_clusters`` centres uniform on [15, 85]^2,
      customers Gaussian around a random centre (std ``cluster_std`` km, clipped to the square).
      ``RC``: half of the customers clustered, half uniform.
    * Demand uniform on {1..max_demand}. Preferred window [e, e + w] with e uniform on the integers
      {ceil(d0) .. floor(H - d0 - service - w)}, d0 the depot distance, so each window can be served on
      its own by a fresh vehicle.

    Args:
        num_customers: N, requests per episode.
        layout: ``"R"``, ``"C"`` or ``"RC"``.
        horizon: depot closing time H (time units).
        window_width: preferred window width w (time units).
        service_time: service time per customer (time units).
        capacity: vehicle capacity Q.
        max_demand: largest demand.
        type_mix: ``[K]`` probabilities of the flexibility types.
        separation: attribute separation ``sep`` (Bayes type accuracy 0.71 at 1.5 with the default mix).
        num_clusters: cluster count of the C / RC layouts.
        cluster_std: cluster spread (km).
    """

    def __init__(
        self,
        num_customers: int,
        layout: str,
        horizon: float,
        window_width: float,
        service_time: float,
        capacity: float,
        max_demand: int,
        type_mix: Tensor,
        separation: float,
        num_clusters: int = 8,
        cluster_std: float = 5.0,
    ) -> None:
        self.num_customers = num_customers
        self.layout = layout
        self.horizon = horizon
        self.window_width = window_width
        self.service_time = service_time
        self.capacity = capacity
        self.max_demand = max_demand
        self.type_mix = type_mix
        self.separation = separation
        self.num_clusters = num_clusters
        self.cluster_std = cluster_std
        # a corner customer (d0 <= 70.72) needs ceil(d0) <= H - d0 - service - w for its ready time
        reach = math.ceil(math.hypot(50.0, 50.0)) + math.hypot(50.0, 50.0) + service_time + window_width
        if horizon < reach:
            raise ValueError(
                f"env.horizon={horizon} is too short: a window of width {window_width} plus service "
                f"{service_time} at a corner needs H >= {reach:.2f}"
            )

    def sample(self, key: Tensor, dtype: torch.dtype = torch.float32) -> TensorDict:
        """One episode per key: int64 ``[R]`` -> instance TensorDict ``[R]`` (see module docstring)."""
        r, n = key.shape[0], self.num_customers
        device = key.device
        xy = 100.0 * rng.uniform(key, _XY, (n, 2), dtype)
        if self.layout in ("C", "RC"):
            centres = 15.0 + 70.0 * rng.uniform(key, _CENTRE, (self.num_clusters, 2), dtype)
            pick = (rng.uniform(key, _CLUSTER, (n,), dtype) * self.num_clusters).long()
            pick = pick.clamp_max(self.num_clusters - 1)
            around = centres.gather(1, pick.unsqueeze(-1).expand(r, n, 2))
            clustered = (around + self.cluster_std * rng.normal(key, _OFFSET, (n, 2), dtype)).clamp(0.0, 100.0)
            if self.layout == "C":
                xy = clustered
            else:
                is_clustered = rng.uniform(key, _MIX, (n,), dtype) < 0.5
                xy = torch.where(is_clustered.unsqueeze(-1), clustered, xy)
        depot = torch.full((r, 2), 50.0, dtype=dtype, device=device)
        d0 = torch.linalg.vector_norm(xy - depot.unsqueeze(1), dim=-1)
        lo = torch.ceil(d0)
        hi = torch.floor(self.horizon - d0 - self.service_time - self.window_width)
        ready = lo + torch.floor(rng.uniform(key, _READY, (n,), dtype) * (hi - lo + 1.0))
        due = ready + self.window_width
        demand = 1.0 + torch.floor(rng.uniform(key, _DEMAND, (n,), dtype) * self.max_demand)
        full = dict(dtype=dtype, device=device)
        return assemble(key, self.type_mix, self.separation, depot=depot,
                        horizon=torch.full((r,), float(self.horizon), **full),
                        capacity=torch.full((r,), float(self.capacity), **full), xy=xy, demand=demand,
                        service=torch.full((r, n), float(self.service_time), **full), ready=ready, due=due)
