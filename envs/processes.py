"""Child processes that end with their parent, so that a command killed by SIGKILL leaves none running on alone:

- direct children (process-pool workers): the kernel's parent-death signal (Linux ``prctl(PR_SET_PDEATHSIG)``);
- whole trees whose members another program starts and re-parents (a local Ray instance: its raylet's agents and
  workers): a reaper process that waits for the parent's end on a pipe, then kills every process whose environment
  carries the parent's token (:func:`reap_with_this_process`).

Run as a script (``python envs/processes.py TOKEN``), this file is that reaper: it imports nothing but the standard
library.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
import uuid
from functools import partial

PR_SET_PDEATHSIG = 1  # <sys/prctl.h>
REAP_VARIABLE = "RLPIPE_REAP_TOKEN"  # the environment variable that marks a process for the reaper


def die_with(parent: int, signum: int = signal.SIGTERM) -> None:
    """Have the kernel send this process ``signum`` when the process ``parent`` (its parent) dies, even by SIGKILL;
    a parent already gone sends it now. Nothing where the call does not exist (not Linux). (Linux sends it when the
    parent's *thread* that started this process ends: start such processes from a thread that outlives them, such
    as the main thread.)

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


@contextlib.contextmanager
def without_main_module():
    """Processes started by ``multiprocessing``'s spawn within this block do not import this program's main module.

    A spawned child first imports the parent's ``__main__`` (by its module name under ``python -m``, else by its
    path); for a command such as ``pipelines.evaluate`` that is torch and Lightning: a game's emulator process held
    330 MB resident, 60 MB without it (100 of them filled a 24 GB machine). Within the block the
    main module shows neither its ``__spec__`` nor its ``__file__``, so ``multiprocessing.spawn`` records neither;
    the child's target and arguments must then be importable without the main module (their own modules'
    functions and classes). Restored on leaving, also on an error.
    """
    main = sys.modules["__main__"]
    saved = {name: main.__dict__.pop(name) for name in ("__spec__", "__file__") if name in main.__dict__}
    main.__spec__ = None
    try:
        yield
    finally:
        del main.__spec__
        main.__dict__.update(saved)


_reaper: subprocess.Popen | None = None


def reap_with_this_process() -> None:
    """Every process started from now on by this process or its descendants, however far re-parented, is killed
    (SIGKILL) once this process has ended, normally or by any signal (SIGKILL included). For programs that start
    trees this process cannot follow, such as a local Ray instance (its raylet's agents outlived a SIGKILLed run by
    more than 40 s).

    The processes are marked by a token in their environment (``RLPIPE_REAP_TOKEN``, inherited at every start); a
    reaper process (this file run as a script, in its own session) holds the read end of a pipe whose write end only
    this process has, and at its end-of-file kills every process of this user whose ``/proc/<pid>/environ`` holds the
    token. Once per process; nothing where ``/proc`` does not exist (not Linux).
    """
    global _reaper
    if _reaper is not None or not os.path.isdir("/proc"):
        return
    token = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k != REAP_VARIABLE}
    _reaper = subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__), token], stdin=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, env=env, start_new_session=True)
    os.environ[REAP_VARIABLE] = token


def _marked(token: bytes) -> list[int]:
    """The processes whose environment (as it was when they started) holds the token."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if token in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:  # (gone, or another user's)
            pass
    return found


def _reap(token: str) -> None:
    """Wait for end-of-file on stdin (the parent has ended), then kill the marked processes, again until none is
    left (a process may start another while it is being killed), for at most 10 s."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a Ctrl-C of the terminal is the parent's to handle)
    sys.stdin.buffer.read()
    marked = f"{REAP_VARIABLE}={token}".encode()
    deadline = time.monotonic() + 10
    while (pids := _marked(marked)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.1)


if __name__ == "__main__":
    _reap(sys.argv[1])
