"""The plan tensor of the insertion oracle and its local search: its channels, ``[9, L, M, B]`` (per position of every
route of every row: six node channels, then three derived by :func:`schedule`), and the schedule arithmetic."""

from __future__ import annotations

import torch
from torch import Tensor


def schedule(x: Tensor, y: Tensor, ready: Tensor, due: Tensor, service: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Legs, earliest and latest service starts of routes given position-wise node data ``[L, ...]``.

    Position 0 is the start depot, a route's end depot follows its last customer, later positions are
    padding (depot coordinates, zero service, non-binding due time). With ``c_j = service_{j-1} +
    leg_{j-1}`` and ``C = cumsum(c)``, the forward recursion ``start_j = max(ready_j, start_{j-1} +
    c_j)`` is ``C_j + cummax(ready - C)_j`` and the backward one ``latest_j = min(due_j, latest_{j+1}
    - c_{j+1})`` is ``C_j + reverse-cummin(due - C)_j`` (Savelsbergh 1992): no loop over positions.

    Returns:
        ``leg`` (distance from position j to j + 1, 0 at the last), ``start``, ``latest``; each ``[L, ...]``.
    """
    dx, dy = x[1:] - x[:-1], y[1:] - y[:-1]
    leg = torch.sqrt(dx * dx + dy * dy)
    cum = torch.cumsum(torch.cat([torch.zeros_like(x[:1]), service[:-1] + leg], 0), 0)
    start = cum + torch.cummax(ready - cum, 0).values
    latest = cum + torch.cummin((due - cum).flip(0), 0).values.flip(0)
    return torch.cat([leg, torch.zeros_like(x[:1])], 0), start, latest


# channels of the plan tensor [channel, L, M, B]: six per node, then three derived by `schedule`
X, Y, READY, DUE, SERVICE, NODE, START, LATEST, LEG = range(9)
