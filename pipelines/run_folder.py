"""A fit's run folder: the resolved config saved there without overwriting a file and recorded in every
checkpoint, the folder's lock for the whole fit, a resume in the run's own folder, and the one line for a run that
cannot write (a full disk, a read-only folder, no shared memory for the rollout workers)."""

from __future__ import annotations

import errno
import os
import sys

import lightning as L
import yaml
from jsonargparse import Namespace
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import TensorBoardLogger

from pipelines.checkpoints import CONFIG_KEY
from pipelines.compat import set_logger_purge_step
from pipelines.run_config import LOCK_FILE, lock_run_folder
from pipelines.tensorboard_layout import write_run_header

WRITE_ERRORS = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT)  # a run folder it cannot write
SHARED_MEMORY = "/dev/shm"  # where multiprocessing's semaphores and torch's shared tensors live (Linux)


class OutputExists(ValueError):
    """A run would overwrite a file it did not create."""


class RecordConfig(SaveConfigCallback):
    """LightningCLI's ``SaveConfigCallback`` (the resolved config saved in the run folder) that never overwrites
    a file (a run folder that already holds a ``config.yaml`` belongs to another run; a run resumed in its own
    folder saves ``config.resumed-<frames>.yaml`` beside the first) and also records the config
    in every checkpoint, as plain data under ``checkpoint[CONFIG_KEY]``: a resume can then tell whether a
    checkpoint was trained with the same env and networks (:func:`pipelines.checkpoints.check_resume_checkpoint`).

    It also takes the run folder's lock (:func:`pipelines.run_config.lock_run_folder`) for the whole fit.

    Raises:
        OutputExists: the run folder holds a ``config.yaml`` already, or another run holds its lock (before
            anything but the logger's first events file is written).
    """

    resumed_frames: int | None = None  # set when the run resumes in its own folder: the config goes beside

    _lock: int | None = None  # the run folder's lock (pipelines.run_config.lock_run_folder), held by rank 0

    def setup(self, trainer, pl_module, stage: str) -> None:
        folder = trainer.log_dir
        if self.resumed_frames is not None:  # the run's own folder: the first config stays, this one goes beside
            self.config_filename = f"config.resumed-{self.resumed_frames}.yaml"
        elif not self.already_saved and self.save_to_log_dir:
            path = os.path.join(folder, self.config_filename)
            if trainer.strategy.broadcast(os.path.isfile(path) if trainer.is_global_zero else False):
                raise OutputExists(f"{path} exists: a run never overwrites a file it did not create (give the run "
                                   f"its own folder: --trainer.default_root_dir, or the logger's save_dir or version)")
        if trainer.is_global_zero and self._lock is None:
            self._lock = lock_run_folder(folder)
        if not trainer.strategy.broadcast(self._lock is not None if trainer.is_global_zero else True):
            raise OutputExists(f"{folder} is in use by another run (it holds the lock {LOCK_FILE}): wait for that run "
                               f"to end, or give this one its own folder")
        super().setup(trainer, pl_module, stage)
        if trainer.is_global_zero and self.resumed_frames is None:  # a resumed run's folder has them already
            metrics = [m for m in (*(getattr(c, "best_metric", None) for c in trainer.callbacks),
                                   "rollout/episode_return") if m]
            write_run_header(trainer, plain_config(self.parser, self.config), list(dict.fromkeys(metrics)))

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        if getattr(self, "_record", None) is None:
            self._record = plain_config(self.parser, self.config)
        checkpoint[CONFIG_KEY] = self._record


def plain_config(parser, config: Namespace) -> dict:
    """The resolved config as plain data (what ``config.yaml`` holds: dicts, lists, strings, numbers)."""
    return yaml.safe_load(parser.dump(config, skip_unset=False, skip_validation=True))


def continue_in_folder(trainer: L.Trainer, folder: str, frames: int) -> None:
    """A run resumed in its own folder: its TensorBoard events from the checkpoint's frames on replace those the
    interrupted part wrote after the checkpoint (TensorBoard's ``purge_step``: steps are frames here), and its
    config is saved beside the first as ``config.resumed-<frames>.yaml``."""
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            set_logger_purge_step(logger, frames + 1)  # read when the SummaryWriter is made (its first log)
    for callback in trainer.callbacks:
        if isinstance(callback, RecordConfig):
            callback.resumed_frames = frames
    print(f"resuming {folder} at {frames} frames (the same folder; TensorBoard steps after {frames} from the "
          f"earlier part are replaced)", file=sys.stderr, flush=True)


def write_error(err: BaseException) -> str | None:
    """The one line for a run that could not write: a file (a full disk, a read-only or forbidden folder: the
    file named), or the shared memory its rollout workers need (``/dev/shm`` full, as in a container's default
    64 MB: named with its size); None for any other error.

    The shared memory is recognised by an ``ENOSPC`` that names no file (multiprocessing's semaphores) or torch's
    ``unable to ... shared memory`` error."""
    if isinstance(err, OSError) and err.errno in WRITE_ERRORS and err.filename:
        return f"cannot write {err.filename}: {err.strerror}"
    shm = (isinstance(err, OSError) and err.errno == errno.ENOSPC) or (
        isinstance(err, RuntimeError) and "shared memory" in str(err))
    if not shm:
        return None
    try:
        stats = os.statvfs(SHARED_MEMORY)
        free, total = stats.f_bavail * stats.f_frsize / 2**20, stats.f_blocks * stats.f_frsize / 2**20
        size = f" ({free:,.1f} of {total:,.1f} MiB free)"
    except OSError:
        size = ""
    return (f"no shared memory left in {SHARED_MEMORY}{size} for the rollout workers: enlarge it (docker run "
            f"--shm-size=2g) or collect in this process (data.init_args.collector.workers: 0)")
