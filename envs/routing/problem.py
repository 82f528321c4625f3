"""A batch of VRPTW instances as one TensorDict: the input of route construction (env and oracle).

Node 0 is the depot, nodes ``1..N`` are customer slots; a slot may be absent (padding), so instances
with different customer counts share one tensor. Semantics are those of the DVRP env's oracle
(:mod:`envs.dvrp.oracle`): travel time = Euclidean distance (km), service must *start* inside
``[ready, due]`` (waiting allowed), every vehicle leaves the depot at 0 and is back by the horizon H,
load <= capacity Q, at most M routes, each present customer served exactly once.

=============  ======================  ==========================================================
key            shape                   meaning (units)
=============  ======================  ==========================================================
loc            ``[R, 1 + N, 2]``       coordinates, depot first (km)
demand         ``[R, 1 + N]``          demand (units; 0 at the depot)
service        ``[R, 1 + N]``          service time (time units; 0 at the depot)
ready, due     ``[R, 1 + N]``          time window of the service start (depot: [0, H])
present        ``[R, 1 + N]`` bool     the slot holds a customer to serve (depot: True)
horizon        ``[R]``                 H, depot closing time (time units)
capacity       ``[R]``                 Q (demand units)
num_vehicles   ``[R]`` int64           M, the most routes a plan may use
=============  ======================  ==========================================================
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import Tensor

PROBLEM_KEYS = ("loc", "demand", "service", "ready", "due", "present", "horizon", "capacity", "num_vehicles")


def make_problem(depot: Tensor, xy: Tensor, demand: Tensor, service: Tensor, ready: Tensor, due: Tensor,
                 present: Tensor, horizon: Tensor, capacity: Tensor, num_vehicles: Tensor | int) -> TensorDict:
    """Assemble the problem TensorDict ``[R]`` of the module docstring from customer-slot tensors.

    Args:
        depot: ``[R, 2]`` (km). xy: ``[R, N, 2]`` (km). demand, service, ready, due: ``[R, N]``.
        present: bool ``[R, N]``. horizon, capacity: ``[R]``. num_vehicles: int or int64 ``[R]``.

    Raises:
        ValueError: inconsistent shapes (the message names the tensor).
    """
    r, n = xy.shape[:2]
    for name, value in (("demand", demand), ("service", service), ("ready", ready), ("due", due),
                        ("present", present)):
        if value.shape != (r, n):
            raise ValueError(f"make_problem: {name} has shape {tuple(value.shape)}, expected {(r, n)}")
    dtype, dev = xy.dtype, xy.device
    zero = torch.zeros(r, 1, dtype=dtype, device=dev)
    vehicles = torch.as_tensor(num_vehicles, dtype=torch.long, device=dev).expand(r).clone()
    return TensorDict(
        loc=torch.cat([depot.unsqueeze(1).to(dtype), xy], 1),
        demand=torch.cat([zero, demand.to(dtype)], 1),
        service=torch.cat([zero, service.to(dtype)], 1),
        ready=torch.cat([zero, ready.to(dtype)], 1),
        due=torch.cat([horizon.view(r, 1).to(dtype), due.to(dtype)], 1),
        present=torch.cat([torch.ones(r, 1, dtype=torch.bool, device=dev), present.bool()], 1),
        horizon=horizon.to(dtype).reshape(r),
        capacity=capacity.to(dtype).reshape(r),
        num_vehicles=vehicles,
        batch_size=[r], device=dev,
    )


def distance_matrix(loc: Tensor) -> Tensor:
    """Euclidean distances ``[R, S, S]`` (km) between the nodes ``loc`` ``[R, S, 2]``."""
    diff = loc.unsqueeze(2) - loc.unsqueeze(1)
    return torch.sqrt((diff * diff).sum(-1))
