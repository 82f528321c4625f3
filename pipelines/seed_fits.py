"""The fits of ``pipelines.seeds``, one process each: started in their own process group with their output in their
folder's ``fit.log``, handed on the signals the command receives, killed :data:`STOP_WAIT_S` seconds after the first
one, and ended with the command even when it is killed outright (each fit's parent-death signal:
:func:`pipelines.stop_signals.die_with_parent`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from pipelines.run_config import in_folder
from pipelines.settings import write_settings
from pipelines.stop_signals import PARENT_ENV
from pipelines.threads import side_by_side_env

# seconds the fits get to stop after a handed-on signal (their own deadline: pipelines.stop_signals.STOP_GRACE_S)
STOP_WAIT_S = 60.0


class Stopped(Exception):
    """The fits were stopped by signal ``signum`` (handed on to them)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def fit_command(configs: list[str], seed: int, folder: str, overrides: list[str], settings: dict) -> list[str]:
    """The command line of seed ``seed``'s fit: ``pipelines.fit`` on ``configs`` and ``overrides`` with
    ``--seed_everything=<seed>``, written straight into ``folder`` (:func:`pipelines.run_config.in_folder` of the
    resolved ``settings``)."""
    placed = [f"--{key}={value}" for key, value in in_folder(settings, folder).items()]
    return [sys.executable, "-m", "pipelines.fit", *(a for c in configs for a in ("--config", c)),
            f"--seed_everything={seed}", *placed, *overrides]


class Fits:
    """The running fits of :func:`run_fits`, by seed: each started in its own process group with its output in its
    folder's ``fit.log``, handed on the signals this process receives, killed :data:`STOP_WAIT_S` seconds after the
    first signal, and reaped."""

    def __init__(self, configs: list[str], folders: dict[int, str], overrides: list[str], settings: dict,
                 env: dict[str, str] | None) -> None:
        self.configs, self.folders, self.overrides, self.settings, self.env = configs, folders, overrides, settings, env
        self.running: dict[int, tuple[subprocess.Popen, Any]] = {}
        self.signals: list[int] = []  # the signals received, first one first
        self.told: set[int] = set()  # the seeds whose fit was handed the first signal
        self.killed: set[int] = set()  # the seeds whose fit was killed, past the deadline
        self.deadline: float | None = None
        self.failed: list[str] = []  # the failed fits' descriptions

    def hand_on(self, signum: int, frame) -> None:
        """The signal handler: hand ``signum`` on to every running fit."""
        self.signals.append(signum)
        for seed, (proc, _) in list(self.running.items()):
            self.told.add(seed)
            if proc.returncode is None:
                with contextlib.suppress(OSError):  # (ended meanwhile)
                    proc.send_signal(signum)

    def start(self, seed: int) -> None:
        """Start seed ``seed``'s fit in its folder, with the settings recorded there first."""
        folder = self.folders[seed]
        os.makedirs(folder)
        write_settings(folder, self.settings)
        log = open(os.path.join(folder, "fit.log"), "w")
        env = {**(self.env or os.environ), PARENT_ENV: str(os.getpid())}  # (it dies with this process)
        proc = subprocess.Popen(fit_command(self.configs, seed, folder, self.overrides, self.settings), stdout=log,
                                stderr=subprocess.STDOUT, env=env, process_group=0)
        self.running[seed] = (proc, log)
        print(f"seed {seed}: running in {folder}", file=sys.stderr, flush=True)

    def stop(self) -> None:
        """After a signal: hand the first one to the fits started as it came, and kill the fits still running
        :data:`STOP_WAIT_S` seconds after it."""
        for seed, (proc, _) in self.running.items():  # a fit started as the signal came
            if seed not in self.told and proc.poll() is None:
                self.told.add(seed)
                proc.send_signal(self.signals[0])
        self.deadline = self.deadline or time.monotonic() + STOP_WAIT_S
        if time.monotonic() > self.deadline:
            for seed, (proc, _) in self.running.items():
                if seed not in self.killed and proc.poll() is None:
                    self.killed.add(seed)
                    proc.kill()
                    print(f"seed {seed}: killed ({STOP_WAIT_S:.0f} s after the signal)", file=sys.stderr, flush=True)

    def reap(self) -> None:
        """Forget the fits that ended: a fit that ended with status 0 is marked finished (even after a signal), one
        stopped by a signal is said so, any other is failed."""
        for seed, (proc, log) in list(self.running.items()):
            if proc.poll() is None:
                continue
            log.close()
            del self.running[seed]
            if proc.returncode == 0:
                open(os.path.join(self.folders[seed], "finished"), "w").close()
                print(f"seed {seed}: finished", file=sys.stderr, flush=True)
            elif self.signals:
                print(f"seed {seed}: stopped (exit status {proc.returncode}, log {log.name})", file=sys.stderr,
                      flush=True)
            else:
                said = last_error(log.name)
                self.failed.append(f"seed {seed} (exit status {proc.returncode}, log {log.name})"
                                   + (f": {said}" if said else ""))

    def kill_all(self) -> None:
        """Kill the fits still running (only on an error in :func:`run_fits`: no fit outlives the command)."""
        for proc, _ in self.running.values():
            proc.kill()
            proc.wait()


def last_error(path: str) -> str | None:
    """The last ``error: ...`` line of a fit's log (its one-line message for a user error or a fault), or None."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 16384))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    said = [line.strip() for line in lines if line.startswith("error:")]
    return said[-1] if said else None


def run_fits(configs: list[str], todo: list[int], folders: dict[int, str], parallel: int, overrides: list[str],
         settings: dict) -> list[str]:
    """Start and reap the fits; returns the failed ones' descriptions, or raises :class:`Stopped` after a signal.

    SIGTERM and SIGINT are handed on to every running fit (each is started in its own process group, so it gets a
    terminal's Ctrl+C from here alone, once); then no new fit starts, the running ones get :data:`STOP_WAIT_S`
    seconds to stop before they are killed, and a fit that ended with status 0 is still marked finished."""
    fits = Fits(configs, folders, overrides, settings,
                 side_by_side_env() if parallel > 1 else None)  # (fits at once: threads sleep when idle)
    previous = {}
    if threading.current_thread() is threading.main_thread():  # (signal handlers need it)
        previous = {s: signal.signal(s, fits.hand_on) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while (todo and not fits.signals) or fits.running:
            while todo and not fits.signals and len(fits.running) < parallel:
                fits.start(todo.pop(0))
            if fits.signals:
                fits.stop()
            time.sleep(0.2)
            fits.reap()
    finally:
        fits.kill_all()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if fits.signals:
        raise Stopped(fits.signals[0])
    return fits.failed
