"""A picture of one robot-vacuum grid (a video's frame): cells dirty or clean, chargers, robots with their energy."""

from __future__ import annotations

import numpy as np

_CLEAN = (245, 245, 238)
_DIRTY = (176, 137, 92)
_CHARGER = (250, 212, 60)
_LINE = (160, 160, 160)
_ENERGY = (40, 160, 60)
_EMPTY = (210, 60, 50)
_ROBOTS = ((200, 40, 40), (40, 70, 200), (30, 150, 150), (150, 60, 170), (230, 120, 20), (90, 90, 90))


def draw_grid(grid_size: int, dirt: np.ndarray, chargers: np.ndarray, position: np.ndarray, energy: np.ndarray,
              max_energy: np.ndarray, cell: int = 48) -> np.ndarray:
    """The grid of one env.

    Args:
        grid_size: n (the grid is n x n, row 0 at the top).
        dirt: ``[n * n]`` 1 for a dirty cell, 0 for a clean one (cell = row * n + column).
        chargers: ``[n * n]`` bool, the charger cells (drawn as a yellow square inside the cell).
        position: ``[R]`` each robot's cell. energy, max_energy: ``[R]`` energy units (a bar under the robot).
        cell: pixels per cell.

    Returns:
        ``[n * cell + 1, n * cell + 1, 3]`` uint8 RGB; robot k is a disc of colour k (of six, then repeated);
        robots sharing a cell are drawn side by side.
    """
    size = grid_size * cell + 1
    image = np.empty((size, size, 3), dtype=np.uint8)
    yy, xx = np.mgrid[0:cell, 0:cell]
    for index in range(grid_size * grid_size):
        top, left = (index // grid_size) * cell, (index % grid_size) * cell
        patch = image[top:top + cell + 1, left:left + cell + 1]
        patch[:] = _DIRTY if dirt[index] > 0.5 else _CLEAN
        if chargers[index]:
            inset = cell // 6
            patch[inset:cell - inset + 1, inset:cell - inset + 1] = _CHARGER
        patch[0, :], patch[:, 0], patch[-1, :], patch[:, -1] = _LINE, _LINE, _LINE, _LINE
    robots_at: dict[int, list[int]] = {}
    for k, at in enumerate(position.tolist()):
        robots_at.setdefault(int(at), []).append(k)
    for at, robots in robots_at.items():
        top, left = (at // grid_size) * cell, (at % grid_size) * cell
        width = cell / len(robots)
        for slot, k in enumerate(robots):
            cx, cy, radius = left + (slot + 0.5) * width, top + 0.42 * cell, min(0.3 * cell, 0.45 * width)
            disc = (xx + left - cx) ** 2 + (yy + top - cy) ** 2 <= radius ** 2
            image[top:top + cell, left:left + cell][disc] = _ROBOTS[k % len(_ROBOTS)]
            bar_top, bar_left = top + int(0.8 * cell), int(left + slot * width + 0.15 * width)
            bar_width = max(int(0.7 * width), 2)
            filled = int(round(bar_width * float(np.clip(energy[k] / max_energy[k], 0.0, 1.0))))
            image[bar_top:bar_top + 4, bar_left:bar_left + bar_width] = _EMPTY
            image[bar_top:bar_top + 4, bar_left:bar_left + filled] = _ENERGY
    return image
