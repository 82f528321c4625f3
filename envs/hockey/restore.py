"""The hockey env's games in progress read back from a checkpoint, checked before they are played on: every entry
of this env's shape and dtype, finite, and within what a game can reach (rackets and puck on the table, speeds a
step can give, counters within their episode limits, mode and opponent codes that exist)."""

from __future__ import annotations

from torch import Tensor

from envs.hockey.constants import (
    GOAL_BOX_X,
    MAX_TIME_KEEP_PUCK,
    MODES,
    OPPONENTS,
    TABLE_HALF_LENGTH,
    TABLE_HALF_WIDTH,
)
from envs.restored import restored_mapping, restored_tensor

MARGIN = 1.0  # metres past the table's walls (and the goal boxes, for the puck) that a body may reach within a step
MAX_SPEED = 1e3  # m/s (and rad/s): far above any speed a step gives (shots are 60 m/s), far below an edited value
MAX_ANGLE = 1e4  # rad: a racket's heading, far beyond a game's turns (3e38 overflowed the next step's sine to nan)


def checked_games(games: object, live: dict[str, Tensor], max_steps: int) -> dict[str, Tensor]:
    """The saved games (``HockeyEnv.resume_state()["games"]``) checked against this env's ``live`` state (its
    tensors by name, ``returns`` included, for shapes and dtypes) and the longest episode ``max_steps``.

    Returns:
        The saved tensors, by name.

    Raises:
        RestoredStateError: a missing entry, another shape or dtype, a nan, or a value out of its range (names it).
    """
    games = restored_mapping(games, "env state.games", tuple(live))
    out = {name: restored_tensor(games[name], f"env state.games.{name}", like) for name, like in live.items()}
    positions = {"players": (out["players"][0:2], TABLE_HALF_LENGTH), "puck": (out["puck"][0:2], GOAL_BOX_X)}
    for name, (xy, half_length) in positions.items():
        for axis, bound in ((0, half_length + MARGIN), (1, TABLE_HALF_WIDTH + MARGIN)):
            restored_tensor(xy[axis], f"env state.games.{name} ({'xy'[axis]})", low=-bound, high=bound)
    restored_tensor(out["players"][2], "env state.games.players (angle)", low=-MAX_ANGLE, high=MAX_ANGLE)
    restored_tensor(out["players"][3:6], "env state.games.players (velocities)", low=-MAX_SPEED, high=MAX_SPEED)
    restored_tensor(out["puck"][2:4], "env state.games.puck (velocity)", low=-MAX_SPEED, high=MAX_SPEED)
    for name, low, high in (("spin", -MAX_SPEED, MAX_SPEED), ("_kick", -MAX_SPEED, MAX_SPEED),
                            ("hold", 0, MAX_TIME_KEEP_PUCK), ("touching", 0, 1), ("t", 0, max_steps),
                            ("episode", 0, None), ("_keys", None, None), ("mode", 0, len(MODES) - 1),
                            ("_next_mode", 0, len(MODES) - 1), ("opponent", 0, len(OPPONENTS) - 1),
                            ("_next_opponent", 0, len(OPPONENTS) - 1)):
        restored_tensor(out[name], f"env state.games.{name}", low=low, high=high)
    return out
