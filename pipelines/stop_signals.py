"""How a fit stops early on SIGINT or SIGTERM: at the next step boundary (nothing interrupted midway), or at once
while its envs or collector are being built or its first batch collected (``RLDataModule.interruptible``: nothing
new to save), with a last-resort deadline (:data:`STOP_GRACE_S`), and an exit status of 128 + the signal's number;
and how a fit started by another command ends with it (:func:`die_with_parent`)."""

from __future__ import annotations

import faulthandler
import os
import signal
import sys

import lightning as L

from envs.processes import die_with
from pipelines.data import RLDataModule, StopRequested

STOP_GRACE_S = 9  # seconds from a stop signal to the forced exit, if the run has not ended by then
# the environment variable by which a command that starts fits (pipelines.seeds) gives them its process id
PARENT_ENV = "RLPIPE_PARENT_PID"


def die_with_parent() -> None:
    """Where :data:`PARENT_ENV` names this process's parent, have the kernel send it SIGTERM when that parent dies
    (Linux's parent-death signal, ``prctl(PR_SET_PDEATHSIG)``), even by SIGKILL: a fit started by
    ``pipelines.seeds`` then stops (writing ``last.ckpt``) instead of running on alone. A parent already gone
    stops it now. Nothing without the variable, or where the call does not exist.
    """
    parent = os.environ.get(PARENT_ENV, "")
    if parent.isdigit():
        die_with(int(parent))


def on_stop_signal(data: RLDataModule, signum: int, frame) -> None:
    """SIGINT or SIGTERM: ask training to stop at the next step boundary (nothing is interrupted midway, so no
    library is left holding a lock), and arm the :data:`STOP_GRACE_S` deadline; a second SIGINT interrupts at
    once. (It writes with ``os.write``: a print could re-enter a stream the interrupted code is writing to.)"""
    name = signal.Signals(signum).name
    if data.stop_request is not None:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        return
    data.request_stop(name)
    faulthandler.dump_traceback_later(STOP_GRACE_S, exit=True)
    if data.building:  # envs or the collector being built, the first batch collected: nothing new to save
        raise StopRequested(name)
    os.write(2, f"{name}: training stops after the current step (Ctrl+C again to stop at once)\n".encode())


def stopped(trainer: L.Trainer, collected_frames: int, signal_name: str) -> None:
    """Say why the run stopped and where its last checkpoint is, then exit with 128 + the signal's number."""
    callback = trainer.checkpoint_callback
    last = getattr(callback, "last_model_path", "") or getattr(callback, "best_model_path", "") or "none written"
    print(f"training stopped by {signal_name} at {collected_frames} frames, optimiser step "
          f"{trainer.global_step}; last checkpoint: {last} (resume with --ckpt_path)", file=sys.stderr, flush=True)
    raise SystemExit(128 + signal.Signals[signal_name])
