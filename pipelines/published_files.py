"""Files published whole or not at all, by the commands that write a named output (``pipelines.export``): each
written to a temporary file beside its target, locked by the writing process, synced, then renamed into place with
the stop signals held back; a killed writer's temporary files are removed by the next write of the same name."""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import secrets
import signal
import threading

# the stop signals, held back while the files are renamed
STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


def new_temporary(folder: str, name: str) -> tuple[str, int]:
    """A new empty file ``<folder>/.<name>.<random>.tmp``, with the permissions a new file gets here (the umask's:
    ``tempfile.mkstemp`` would make it private to its owner), and a descriptor holding an exclusive ``flock`` on it
    (the kernel drops it when the process ends, even by SIGKILL: :func:`_remove_stale` then knows it is left over)."""
    while True:
        path = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        return path, fd


def remove_stale(folder: str, name: str) -> None:
    """Remove the temporary files of exports of ``name`` that no running export holds (a killed one's)."""
    for path in glob.glob(os.path.join(glob.escape(folder), f".{glob.escape(name)}.*.tmp")):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a running export's
        else:
            with contextlib.suppress(OSError):
                os.remove(path)
        finally:
            os.close(fd)


def sync_file(path: str) -> None:
    """Flush a written file to disk (before it is renamed into place)."""
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def publish(temps: list[str], targets: list[str]) -> None:
    """Rename each of ``temps`` over its target (``os.replace``, atomic in one folder; the JSON last), then sync the
    folder. Called in the main thread, it holds the stop signals back meanwhile (their handlers only note them,
    whichever thread the kernel hands them to) and raises the first one noted afterwards, so that it takes effect
    after both renames."""
    held: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in STOP_SIGNALS}
    try:
        for temp, target in zip(temps, targets, strict=True):
            os.replace(temp, target)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
    with contextlib.suppress(OSError):  # the new names reach the disk
        fd = os.open(os.path.dirname(os.path.abspath(targets[0])), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    if held:
        signal.raise_signal(held[0])
