"""Child processes that end with their parent: the kernel's parent-death signal (Linux ``prctl(PR_SET_PDEATHSIG)``),
so that a command killed by SIGKILL leaves none of its workers running on alone."""

from __future__ import annotations

import ctypes
import os
import signal
from functools import partial

PR_SET_PDEATHSIG = 1  # <sys/prctl.h>


def die_with(parent: int, signum: int = signal.SIGTERM) -> None:
    """Have the kernel send this process ``signum`` when the process ``parent`` (its parent) dies, even by SIGKILL;
    a parent already gone sends it now. Nothing where the call does not exist (not Linux).

    Args:
        parent: the parent's process id, read before this process started (a parent that died before the call is
            seen by ``os.getppid()`` no longer being it).
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    except (OSError, AttributeError):  # (not Linux)
        return
    if os.getppid() != parent:
        os.kill(os.getpid(), signum)


def dying_with_this_process() -> partial:
    """An ``initializer`` for a process pool (``ProcessPoolExecutor(initializer=...)``) whose workers end when this
    process dies (SIGKILL included): their SIGTERM, whose default action ends them."""
    return partial(die_with, os.getpid())
