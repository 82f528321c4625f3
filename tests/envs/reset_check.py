"""The check that an env's own ``maybe_reset`` gives what TorchRL's reset-and-merge gives."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torchrl.envs import EnvBase


def assert_reset_matches_torchrl(make: Callable[[], EnvBase], act: Callable, steps: int = 200) -> None:
    """Step two copies of ``make()`` with the same actions (``act(observation, generator)``), one through its own
    ``maybe_reset``, one through ``EnvBase.maybe_reset``: every entry of every step and of every next input is
    equal, except the previous ``action`` (TorchRL zeroes it in partially reset rows; the policy overwrites it).
    Fails unless there were many resets, most of them of some rows only."""
    ours, theirs = make(), make()
    theirs.maybe_reset = lambda td: EnvBase.maybe_reset(theirs, td)
    rows = ours.batch_size[0]
    generator = torch.Generator().manual_seed(0)
    a, b = ours.reset(), theirs.reset()
    resets, partial = 0, 0
    for _ in range(steps):
        action = act(a, generator)
        a["action"], b["action"] = action, action.clone()
        step_a, a = ours.step_and_maybe_reset(a)
        step_b, b = theirs.step_and_maybe_reset(b)
        finished = int(step_a["next", "done"].sum())
        resets += finished
        partial += int(0 < finished < rows)
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        assert all(torch.equal(a[k], b[k]) for k in a.keys(True, True) if k != "action")
        assert all(torch.equal(step_a[k], step_b[k]) for k in step_a.keys(True, True))
    assert resets > 2 * rows and partial > 10
