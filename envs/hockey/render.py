"""Pictures of hockey games drawn from the agent's observations: one frame (videos), a frame strip (TensorBoard)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from envs.hockey.constants import GOAL_HALF_WIDTH, PUCK_RADIUS, TABLE_HALF_LENGTH, TABLE_HALF_WIDTH
from envs.hockey.contact import distance_to_racket

_TABLE = (235, 235, 225)
_GOAL = (90, 90, 90)
_AGENT = (200, 40, 40)  # player 1, the agent, on the left (x < 0)
_OPPONENT = (40, 70, 200)
_PUCK = (20, 20, 20)
_GAP = (255, 255, 255)


def render_game(observation: Tensor, frames: int = 8, pixels_per_metre: float = 16.0,
                columns: int | None = None) -> np.ndarray:
    """``frames`` snapshots of one game, evenly spaced from its first to its last step, side by side in rows of
    ``columns`` (None: one row).

    Args:
        observation: ``[T, 18]`` the agent's observations of the game's steps (layout of
            :class:`envs.hockey.HockeyEnv`: own position ``[0:2]``, the other player's ``[6:8]``, the puck's
            ``[12:14]``, table-centred metres).
        frames: snapshots in the strip (at most T).
        pixels_per_metre: scale of a snapshot (16: 125 x 107 pixels).
        columns: snapshots per row.

    Returns:
        ``[rows * (H + 2) - 2, columns * (W + 2) - 2, 3]`` uint8 RGB (one row: ``[H, frames * (W + 2) - 2, 3]``;
        white gaps, and white where the last row is short): the table, the goal mouths at both ends, the agent's
        racket red, the opponent's blue (the original's polygon at its angle), the puck black.

    Raises:
        ValueError: ``observation`` is not ``[T, 18]`` with T >= 1, or ``frames`` < 1.
    """
    if observation.ndim != 2 or observation.shape[0] < 1 or observation.shape[1] != 18 or frames < 1:
        raise ValueError(f"render_game needs observation [T >= 1, 18] and frames >= 1, got "
                         f"{tuple(observation.shape)} and {frames}")
    steps = torch.linspace(0, observation.shape[0] - 1, min(frames, observation.shape[0])).round().long()
    images = [draw_frame(observation[t], pixels_per_metre) for t in steps.tolist()]
    columns = len(images) if columns is None else max(1, min(columns, len(images)))
    height, width = images[0].shape[:2]
    rows = -(-len(images) // columns)
    grid = torch.tensor(_GAP, dtype=torch.uint8).expand(rows * (height + 2) - 2, columns * (width + 2) - 2, 3).clone()
    for i, image in enumerate(images):
        top, left = (i // columns) * (height + 2), (i % columns) * (width + 2)
        grid[top:top + height, left:left + width] = image
    return np.ascontiguousarray(grid.numpy())


def draw_frame(observation: Tensor, pixels_per_metre: float = 16.0) -> Tensor:
    """One snapshot of the table from one observation ``[18]`` (layout as :func:`render_game`).

    Returns:
        ``[H, W, 3]`` uint8 RGB (16 pixels per metre: 107 x 125; 40: 267 x 312).
    """
    width, height = round(2 * TABLE_HALF_LENGTH * pixels_per_metre), round(2 * TABLE_HALF_WIDTH * pixels_per_metre)
    x = (torch.arange(width) + 0.5) / pixels_per_metre - TABLE_HALF_LENGTH  # pixel centres, metres
    y = TABLE_HALF_WIDTH - (torch.arange(height) + 0.5) / pixels_per_metre  # row 0 at the top (+y)
    gx, gy = x.expand(height, width), y[:, None].expand(height, width)
    goal = (gy.abs() < GOAL_HALF_WIDTH) & (gx.abs() > TABLE_HALF_LENGTH - 2.0 / pixels_per_metre)
    obs = observation.float().cpu()
    image = torch.tensor(_TABLE, dtype=torch.uint8).expand(height, width, 3).clone()
    image[goal] = torch.tensor(_GOAL, dtype=torch.uint8)
    for (px, py, angle), facing, colour in ((obs[0:3], 1.0, _AGENT), (obs[6:9], -1.0, _OPPONENT)):
        rows, cols = _near(y, py, _RACKET_REACH), _near(x, px, _RACKET_REACH)  # only the pixels it can cover
        dx, dy = gx[rows, cols] - px, gy[rows, cols] - py  # the racket polygon in its own frame (x: its facing)
        cos, sin = torch.cos(angle), torch.sin(angle)
        local_x, local_y = (dx * cos + dy * sin) * facing, dy * cos - dx * sin
        image[rows, cols][distance_to_racket(local_x, local_y) <= 0] = torch.tensor(colour, dtype=torch.uint8)
    rows, cols = _near(y, obs[13], PUCK_RADIUS), _near(x, obs[12], PUCK_RADIUS)
    puck = (gx[rows, cols] - obs[12]) ** 2 + (gy[rows, cols] - obs[13]) ** 2 <= PUCK_RADIUS ** 2
    image[rows, cols][puck] = torch.tensor(_PUCK, dtype=torch.uint8)
    return image


_RACKET_REACH = 0.5  # metres: every point of the racket polygon is within 0.45 m of its origin


def _near(centres: Tensor, at: Tensor, reach: float) -> slice:
    """The slice of pixel centres (ascending or descending) within ``reach`` of ``at``."""
    index = ((centres - at).abs() <= reach).nonzero().squeeze(-1)
    return slice(int(index[0]), int(index[-1]) + 1) if index.numel() else slice(0, 0)
