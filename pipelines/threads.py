"""How torch's OpenMP threads wait between operations; set by the entry points before torch is imported (GNU
OpenMP, torch's CPU runtime, reads its settings once, when it is loaded). Imports nothing heavy."""

from __future__ import annotations

import os

# Spins an idle OpenMP thread makes before it sleeps (GNU OpenMP's GOMP_SPINCOUNT; its source reckons 100,000 spins
# a millisecond, so some 30 us, not measured here). Measured on this 2-core machine with the headline config on 2
# threads (configs/dvrp.yaml, frames/s of the fit loop): alone, 3,900 without spinning (OMP_WAIT_POLICY=PASSIVE, the
# former default: every one of the update's small operations waited for a sleeping thread to wake), 5,500 with 3,000
# spins, 6,000 with OpenMP's default 300,000; two such runs at once on the 2 cores, each 3,070 without spinning,
# 2,690 with 3,000 spins and 175 with 300,000 (threads spinning for a sibling whose core the other run holds).
SPIN_COUNT = 3000


def set_wait_policy() -> None:
    """Let idle OpenMP threads spin ``SPIN_COUNT`` times before sleeping (``GOMP_SPINCOUNT``), unless the
    environment already sets ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` (the user's choice is kept). Only runs on
    more than one torch thread (``num_threads``) are affected. Call it before ``import torch``."""
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)


def side_by_side_env() -> dict[str, str]:
    """The environment for processes that compute side by side on the same cores (``pipelines.seeds --parallel N``):
    OpenMP threads sleep at once (``OMP_WAIT_POLICY=PASSIVE``; two headline fits at once ran at 3,070 frames/s each
    without spinning, 2,690 with ``SPIN_COUNT`` spins), unless the environment sets ``OMP_WAIT_POLICY`` or a
    ``GOMP_SPINCOUNT`` other than ``SPIN_COUNT`` (the user's choice is kept)."""
    env = dict(os.environ)
    if "OMP_WAIT_POLICY" not in env and env.get("GOMP_SPINCOUNT", str(SPIN_COUNT)) == str(SPIN_COUNT):
        env.pop("GOMP_SPINCOUNT", None)
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    return env
