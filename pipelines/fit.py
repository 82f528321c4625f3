"""Train anything: ``python -m pipelines.fit --config configs/<run>.yaml [--key.sub=value ...]``.

LightningCLI over ``model`` (an ``RLModule`` subclass), ``data`` (an ``RLDataModule`` subclass) and
``trainer``; ``--print_config`` prints the resolved run, ``--ckpt_path`` resumes one (in its own run folder
when the checkpoint is in it: :func:`pipelines.run_config.resume_in_place`), or continues a finished one up to a
larger ``data.total_frames`` (the budget is the only one: :func:`pipelines.run_config.frames_budget`). The resolved
config is saved in the run folder. Before anything is built or written, the config's files are bounded
(:func:`pipelines.parser.check_config_inputs`), what it names is checked against the import policy
(:mod:`pipelines.import_policy`), and the env against the algorithm (:func:`pipelines.compatibility.check_env_fit`);
a user error is one line on stderr, exit status 2 (:class:`pipelines.parser.FitArgumentParser`). A full disk or a
run folder it cannot write ends the run with one line, exit status 1.
``num_threads``, ``float32_matmul_precision`` and ``flush_denormal`` are applied here, once, before anything is built.

A run that stops early ends with a non-zero exit status and its rollout workers stopped: 130 after
SIGINT (Ctrl+C: training stops before the next collection, writing ``last.ckpt`` when the config's
``ModelCheckpoint`` has ``save_last``; a second Ctrl+C stops it at once), 143 after SIGTERM (the same), 1
after an error (a worker that died or stalled names itself in the error). A signal arms a last-resort
deadline: a run still alive :data:`STOP_GRACE_S` seconds after it (e.g. inside one very long collection)
prints every thread's stack and exits with status 1. Checkpoints written before are kept intact
(:class:`pipelines.checkpoints.AtomicCheckpointIO` writes each to a temporary file in its folder and renames
it).
"""

from __future__ import annotations

import argparse
import errno
import faulthandler
import json
import os
import signal
import sys
import textwrap
import threading
import time
import warnings
from functools import partial
from typing import Literal

from pipelines.threads import set_wait_policy

set_wait_policy()  # before torch is imported: how idle OpenMP threads wait (a short spin, then sleep)

import torch  # noqa: E402
from jsonargparse import DefaultHelpFormatter, Namespace  # noqa: E402
from jsonargparse.typing import PositiveInt  # noqa: E402
import yaml  # noqa: E402
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback  # noqa: E402
from lightning.pytorch.loggers import TensorBoardLogger  # noqa: E402
from lightning.pytorch.trainer.states import TrainerStatus  # noqa: E402
from lightning.fabric.utilities.exceptions import MisconfigurationException  # noqa: E402
from lightning.pytorch.utilities.exceptions import SIGTERMException  # noqa: E402

from modules.base import RLModule  # noqa: E402
from pipelines.board import write_run_header  # noqa: E402
from pipelines.catalogue import catalogue  # noqa: E402
from pipelines.compatibility import check_env_fit  # noqa: E402
from pipelines.checkpoints import CONFIG_KEY, IDENTITY_KEYS, check_resume_checkpoint, weights_mismatch  # noqa: E402
from pipelines.console import quiet_console, run_summary  # noqa: E402
from pipelines.data import RLDataModule, StopRequested  # noqa: E402
from pipelines.import_policy import HELP as IMPORT_HELP  # noqa: E402
from pipelines.import_policy import check_env_ids, restrict_class_paths  # noqa: E402
from pipelines.parser import FitArgumentParser, check_config_inputs, one_line  # noqa: E402
from pipelines.run_config import (LOCK_FILE, add_default_callbacks, frames_budget, lock_run_folder, place_outputs,  # noqa: E402
                                  resume_in_place, share_seed)

PACKAGES = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), p) + os.sep
                 for p in ("pipelines", "modules", "envs", "callbacks"))  # the project's own code
WRITE_ERRORS = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT)  # a run folder it cannot write
STOP_GRACE_S = 30  # seconds from a stop signal to the forced exit, if the run has not ended by then

# Checkpoints hold the weights after the optimiser step, which is what resuming needs.
warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")


class FitCLI(LightningCLI):
    """LightningCLI without subcommands, plus ``--ckpt_path``, ``--num_threads``, ``--float32_matmul_precision``
    and ``--flush_denormal``. Class paths are checked by name before anything is imported
    (:mod:`pipelines.import_policy`); ``--help`` says which packages are allowed.

    Raises:
        SystemExit: 2, for a malformed ``RLPIPE_ALLOW_IMPORTS``.
    """

    checkpoint_keys = IDENTITY_KEYS  # the config entries a --ckpt_path must have been trained with
    trains = True  # a --ckpt_path is continued (pipelines.evaluate's subclass only plays it)

    def __init__(self, *args, **kwargs) -> None:
        quiet_console()
        argv = kwargs.get("args")
        try:
            restrict_class_paths()
            check_config_inputs(sys.argv[1:] if argv is None else argv if isinstance(argv, list) else [])
        except ValueError as err:
            config_exit(err)
        kwargs["parser_kwargs"] = {"prog": "python -m pipelines.fit", "formatter_class": _HelpFormatter,
                                   "epilog": f"What a config can name:\n{catalogue()}\n\n{textwrap.fill(IMPORT_HELP, 100)}",
                                   **(kwargs.get("parser_kwargs") or {})}
        kwargs.setdefault("parser_class", FitArgumentParser)
        super().__init__(*args, **kwargs)

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--ckpt_path", type=str | None, default=None, help="resume from this checkpoint")
        parser.add_argument("--num_threads", type=PositiveInt, default=1, help="torch intra-op threads (per process)")
        parser.add_argument("--float32_matmul_precision", type=Literal["highest", "high", "medium"], default="highest",
                            help="torch.set_float32_matmul_precision")
        parser.add_argument("--flush_denormal", type=bool, default=True,
                            help="torch.set_flush_denormal on CPU: floats below 1.2e-38 (denormals) count as 0. "
                                 "Adam's second moments of near-zero gradients become denormals, and the CPU "
                                 "computes with those many times slower: CartPole DQN's Adam step took 550 us "
                                 "with them and 52 us without")

    def _set_seed(self) -> None:
        """LightningCLI's seeding, after a check of ``seed_everything`` (Lightning's own check is a traceback).

        Raises:
            SystemExit: 2, for a seed outside [0, 2**32 - 1].
        """
        seed = self.config.get("seed_everything")
        if not isinstance(seed, bool) and isinstance(seed, int) and not 0 <= seed <= 2**32 - 1:
            config_exit(ValueError(f"seed_everything={seed} is not allowed: an integer in [0, {2**32 - 1}], true (a "
                                   f"random seed, recorded in the saved config) or false"))
        super()._set_seed()

    def before_instantiate_classes(self) -> None:
        torch.set_num_threads(self.config.num_threads)
        torch.set_float32_matmul_precision(self.config.float32_matmul_precision)
        # a per-thread CPU flag: the threads started after it (torch's intra-op pool) inherit it
        torch.set_flush_denormal(self.config.flush_denormal)
        add_default_callbacks(self.config.trainer)
        share_seed(self.config)
        try:
            place_outputs(self.config.trainer)
            frames_budget(self.config.trainer)
            check_env_ids(self.config)
        except ValueError as err:
            config_exit(err)
        self.resumed_in_place: tuple[str, int] | None = None
        self.continue_message: str | None = None
        if self.config.ckpt_path is not None:  # a bad checkpoint stops the run before anything is built or written
            try:
                frames = check_resume_checkpoint(self.config.ckpt_path, plain_config(self.parser, self.config),
                                                 self.checkpoint_keys)
                if self.trains:
                    self.continue_message = self.check_continue(frames)
            except ValueError as err:
                config_exit(err)
            self.resumed_in_place = resume_in_place(self.config.trainer, self.config.ckpt_path, frames)

    def check_continue(self, frames: int | None) -> str | None:
        """What resuming a checkpoint of ``frames`` collected frames will do under this config's
        ``data.total_frames``: a message that the run continues up to the budget (frames, schedules and
        exploration go on from the checkpoint's frames), or None when the checkpoint does not say.

        Raises:
            ValueError: the budget is not above the checkpoint's frames (nothing would be trained).
        """
        total = (self.config.get("data") or Namespace()).get("init_args", Namespace()).get("total_frames")
        if frames is None or not isinstance(total, int):
            return None
        if frames >= total:
            raise ValueError(f"--ckpt_path={self.config.ckpt_path!r} has trained {frames:,} frames already; "
                             f"data.init_args.total_frames={total:,} leaves nothing to train: give a larger "
                             f"total_frames to continue it (e.g. --data.init_args.total_frames={2 * frames})")
        return (f"continuing {self.config.ckpt_path} from {frames:,} frames up to data.init_args.total_frames="
                f"{total:,} (frames, schedules and exploration go on from {frames:,})")

    def instantiate_classes(self) -> None:
        """Build the config's objects. A value that one of this project's constructors rejects ends the run
        like a typo does: its one message on stderr (the key and the allowed values), exit status 2, no
        traceback, nothing written.

        Then, still before anything is written: the device options, the env against the algorithm
        (:func:`pipelines.compatibility.check_env_fit`) and, for a run that trains, the budget
        (``RLDataModule.check_budget``).

        Raises:
            SystemExit: 2, for a ``ValueError`` or ``FileNotFoundError`` raised by this project's code, or Lightning's
                ``MisconfigurationException``.
        """
        try:
            super().instantiate_classes()
            self.datamodule.check_device(self.datamodule.device or self.trainer.strategy.root_device)
            check_env_fit(self.model, self.datamodule)  # env <-> algorithm, before anything is written
            if self.trains:
                self.datamodule.check_budget(self.trainer.world_size)
        except Exception as err:
            rejected = config_error(err)
            if rejected is None:
                raise
            config_exit(rejected)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, DefaultHelpFormatter):
    """jsonargparse's help, with the epilog's lines kept (the catalogue is one entry per line)."""


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


class _ParseOnlyCLI(FitCLI):
    """``pipelines.fit``'s command line, parsed and checked by its own parser (every key, type and class path),
    with nothing seeded, built or written."""

    def _set_seed(self) -> None:
        pass

    def before_instantiate_classes(self) -> None:
        pass

    def instantiate_classes(self) -> None:
        pass


def fit_settings(args: list[str], drop: tuple[str, ...] = ()) -> dict:
    """The settings ``pipelines.fit <args>`` runs with, resolved by its own parser without building anything: the
    config files' contents merged, the overrides applied and every default filled in, as plain data (what the run's
    ``config.yaml`` holds before ``pipelines.fit`` adds its per-run entries), less the dotted keys in ``drop``.

    This is what tells two runs' settings apart, rather than the config files' text or the ``config.yaml`` a fit
    writes: two spellings of one setting (``--model.lr=0.001`` and ``--model.init_args.lr=1.0e-3``, a value written
    in the file or left to its default) resolve the same; a changed config file's content counts (not its path),
    and so does a changed default in the code; and the new settings are known before any fit starts (a fit's
    ``config.yaml`` also holds what it adds per run: seeds shared from ``seed_everything``, its output folders).

    Raises:
        ValueError: the fit's parser refused ``args`` (one line naming the key), or a config file it refused.
    """
    try:
        cli = _ParseOnlyCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                            auto_configure_optimizers=False, args=list(args),
                            parser_kwargs={"exit_on_error": False})
    except argparse.ArgumentError as err:
        raise ValueError(one_line(str(err)) or " ".join(str(err).split())) from None
    settings = plain_config(cli.parser, cli.config)
    for key in drop:
        *parents, last = key.split(".")
        node = settings
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return json.loads(json.dumps(settings))  # as a settings.json file gives it back


def config_exit(err: Exception) -> None:
    """End the run on a bad config value or file: its one message on stderr, exit status 2."""
    print(f"error: {err}", file=sys.stderr)
    raise SystemExit(2) from None


def config_error(err: BaseException) -> Exception | None:
    """The ``ValueError`` / ``FileNotFoundError`` raised by this project's own code (its innermost frame in one of
    the project's packages), or Lightning's ``MisconfigurationException``, somewhere in ``err``'s chain of causes,
    or None: a constructor's rejection of a config value, which jsonargparse wraps in its own errors."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, MisconfigurationException):  # Lightning's rejection of a trainer setting
            return err
        if isinstance(err, (ValueError, FileNotFoundError)) and err.__traceback__ is not None:
            frame = err.__traceback__
            while frame.tb_next is not None:
                frame = frame.tb_next
            if os.path.abspath(frame.tb_frame.f_code.co_filename).startswith(PACKAGES):
                return err
        err = err.__cause__ or err.__context__
    return None


def main(args: list[str] | None = None, callbacks: list | None = None) -> FitCLI:
    """Parse, build and fit; returns the CLI (its ``trainer``, ``model``, ``datamodule``). ``callbacks``: callback
    objects added to the config's (a caller's own, e.g. ``pipelines.tune``'s pruning), last.

    Raises:
        SystemExit: 130 after SIGINT, 143 after SIGTERM (the run stopped early; see the module docstring).
    """
    started = time.monotonic()
    cli = FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                 save_config_callback=RecordConfig, save_config_kwargs={"overwrite": True}, args=args,  # RecordConfig checks
                 auto_configure_optimizers=False)
    if cli.resumed_in_place is not None:
        _continue_in(cli, *cli.resumed_in_place)
    if cli.continue_message:
        print(cli.continue_message, file=sys.stderr, flush=True)
    cli.trainer.callbacks.extend(callbacks or [])
    in_main_thread = threading.current_thread() is threading.main_thread()  # (signal handlers need it)
    previous = {}
    if in_main_thread:  # Lightning adds its own SIGTERM handler to this one at fit start
        previous = {s: signal.signal(s, partial(_on_stop_signal, cli.datamodule)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.config.ckpt_path,
                        weights_only=True)  # a checkpoint is read as tensors and plain data, never run
    except StopRequested as stop:
        _stopped(cli, stop.signal_name)
    except OutputExists as err:
        config_exit(err)
    except SIGTERMException:  # Lightning's own check, at the end of a training step
        _stopped(cli, "SIGTERM")
    except (OSError, RuntimeError) as err:
        # a checkpoint (without a config record) whose weights fit other networks
        mismatch = weights_mismatch(err, cli.config.ckpt_path) if cli.config.ckpt_path is not None else None
        if mismatch is not None:
            config_exit(mismatch)
        message = write_error(err)  # a full disk, a folder it cannot write, no shared memory for the workers
        if message is None:
            raise
        print(f"error: {message} (the run stopped; checkpoints written before are kept)", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    except SystemExit as stop:  # Lightning's answer to KeyboardInterrupt (a second SIGINT): sys.exit(1)
        if cli.trainer.state.status == TrainerStatus.INTERRUPTED:
            _stopped(cli, "SIGINT")
        raise stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        cli.datamodule.shutdown_collector()  # no worker may outlive the run, whatever ended it
    if cli.trainer.is_global_zero:
        print(run_summary(cli.trainer, cli.model, started), flush=True)
    return cli


SHARED_MEMORY = "/dev/shm"  # where multiprocessing's semaphores and torch's shared tensors live (Linux)


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
        size = f" ({stats.f_bavail * stats.f_frsize / 2**20:,.1f} of {stats.f_blocks * stats.f_frsize / 2**20:,.1f} MiB free)"
    except OSError:
        size = ""
    return (f"no shared memory left in {SHARED_MEMORY}{size} for the rollout workers: enlarge it (docker run "
            f"--shm-size=2g) or collect in this process (data.init_args.workers: 0)")


def _continue_in(cli: FitCLI, folder: str, frames: int) -> None:
    """A run resumed in its own folder: its TensorBoard events from the checkpoint's frames on replace those the
    interrupted part wrote after the checkpoint (TensorBoard's ``purge_step``: steps are frames here), and its
    config is saved beside the first as ``config.resumed-<frames>.yaml``."""
    for logger in cli.trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            logger._kwargs["purge_step"] = frames + 1  # read when the SummaryWriter is made (its first log)
    for callback in cli.trainer.callbacks:
        if isinstance(callback, RecordConfig):
            callback.resumed_frames = frames
    print(f"resuming {folder} at {frames} frames (the same folder; TensorBoard steps after {frames} from the "
          f"interrupted part are replaced)", file=sys.stderr, flush=True)


def _on_stop_signal(data: RLDataModule, signum: int, frame) -> None:
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
    os.write(2, f"{name}: training stops after the current step (Ctrl+C again to stop at once)\n".encode())


def _stopped(cli: FitCLI, signal_name: str) -> None:
    """Say why the run stopped and where its last checkpoint is, then exit with 128 + the signal's number."""
    callback = cli.trainer.checkpoint_callback
    last = getattr(callback, "last_model_path", "") or getattr(callback, "best_model_path", "") or "none written"
    print(f"training stopped by {signal_name} at {cli.model.collected_frames} frames, optimiser step "
          f"{cli.trainer.global_step}; last checkpoint: {last} (resume with --ckpt_path)", file=sys.stderr, flush=True)
    raise SystemExit(128 + signal.Signals[signal_name])


if __name__ == "__main__":
    main()
