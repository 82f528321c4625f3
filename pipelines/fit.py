"""Train anything: ``python -m pipelines.fit --config configs/<run>.yaml [--key.sub=value ...]``.

LightningCLI over ``model`` (an ``RLModule`` subclass), ``data`` (an ``RLDataModule`` subclass) and
``trainer``; ``--print_config`` prints the resolved run, ``--ckpt_path`` resumes one (in its own run folder
when the checkpoint is in it: :func:`pipelines.run_config.resume_in_place`), or continues a finished one up to a
larger ``data.total_frames`` (the budget is the only one: :func:`pipelines.run_config.frames_budget`);
``--weights_from`` starts a new run from a trained checkpoint's weights (fine-tuning on other envs or settings:
:mod:`pipelines.trained_weights`). The resolved config is saved in the run folder. Before anything is built or
written, the config's files are bounded
(:func:`pipelines.config_files.check_config_inputs`), what it names is checked against the import policy
(:mod:`modules.import_policy`), and the env against the algorithm (:func:`pipelines.compatibility.check_env_fit`);
a user error is one line on stderr, exit status 2 (:class:`pipelines.parser.FitArgumentParser`). A full disk or a
run folder it cannot write ends the run with one line, exit status 1.
``num_threads``, ``float32_matmul_precision`` and ``flush_denormal`` are applied here, once, before anything is built.

A run that stops early ends with a non-zero exit status and its rollout workers stopped: 130 after SIGINT (Ctrl+C:
training stops before the next collection, writing ``last.ckpt`` when the config's ``ModelCheckpoint`` has
``save_last``; a second Ctrl+C stops it at once), 143 after SIGTERM (the same), 1 after an error (a worker that died
or stalled names itself in the error). A signal while the envs or the collector are being built (nothing to
save yet; a million gymnasium envs take minutes) stops the run at once; anywhere else, at the next step boundary.
A signal arms a last-resort deadline: a run still alive :data:`pipelines.stop_signals.STOP_GRACE_S` seconds after it
(e.g. inside one very long collection) prints every thread's stack and exits with status 1. A fit started by
``pipelines.seeds`` stops when that command dies, even by SIGKILL (:func:`pipelines.stop_signals.die_with_parent`).
Checkpoints written before are kept intact (:class:`pipelines.checkpoints.AtomicCheckpointIO` writes each to a
temporary file in its folder and renames it).
"""

from __future__ import annotations

import argparse
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
from lightning.pytorch.cli import LightningCLI  # noqa: E402
from lightning.pytorch.trainer.states import TrainerStatus  # noqa: E402
from lightning.pytorch.utilities.exceptions import SIGTERMException  # noqa: E402

from envs.restored import RestoredStateError  # noqa: E402
from modules.base import RLModule  # noqa: E402
from modules.import_policy import HELP as IMPORT_HELP  # noqa: E402
from modules.import_policy import check_env_ids, check_named_objects, restrict_class_paths  # noqa: E402
from pipelines.catalogue import catalogue  # noqa: E402
from pipelines.checkpoints import IDENTITY_KEYS, check_resume_checkpoint, weights_mismatch  # noqa: E402
from pipelines.compatibility import check_data_fit, check_env_fit, check_graph_fit, check_strategy_fit  # noqa: E402
from pipelines.config_files import check_config_inputs  # noqa: E402
from pipelines.console import quiet_console, run_summary  # noqa: E402
from pipelines.data import RLDataModule, StopRequested  # noqa: E402
from pipelines.memory_check import allocation_failure, check_memory  # noqa: E402
from pipelines.parser import FitArgumentParser, config_error, config_exit  # noqa: E402
from pipelines.run_config import (  # noqa: E402
    add_default_callbacks,
    frames_budget,
    name_run,
    place_outputs,
    resume_in_place,
    share_seed,
)
from pipelines.run_folder import OutputExists, RecordConfig, continue_in_folder, plain_config, write_error  # noqa: E402
from pipelines.stop_signals import die_with_parent, on_stop_signal, stopped  # noqa: E402
from pipelines.trained_weights import InitialWeights, initial_weights  # noqa: E402

# what every run config shares (the trainer block, the progress bar, the non-finite guard, atomic checkpoints), read
# before the run's own config
DEFAULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "defaults.yaml")

# Checkpoints hold the weights after the optimiser step, which is what resuming needs.
warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")


class FitCLI(LightningCLI):
    """LightningCLI without subcommands, plus ``--ckpt_path``, ``--num_threads``, ``--float32_matmul_precision``
    and ``--flush_denormal``. Class paths are checked by name before anything is imported
    (:mod:`modules.import_policy`); ``--help`` says which packages are allowed.

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
        epilog = f"What a config can name:\n{catalogue()}\n\n{textwrap.fill(IMPORT_HELP, 100)}"
        kwargs["parser_kwargs"] = {"prog": "python -m pipelines.fit", "formatter_class": _HelpFormatter,
                                   "epilog": epilog, "default_config_files": [DEFAULTS],
                                   **(kwargs.get("parser_kwargs") or {})}
        kwargs.setdefault("parser_class", FitArgumentParser)
        super().__init__(*args, **kwargs)

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--ckpt_path", type=str | None, default=None, help="resume from this checkpoint")
        parser.add_argument("--weights_from", type=str | None, default=None,
                            help="start this new run from a trained checkpoint's weights (fine-tuning, as RL Zoo's "
                                 "--trained-agent): the module's (policy, critic, target network, normaliser) and "
                                 "the env's learned models; this config's env, settings and budget, fresh "
                                 "optimiser, schedules and frame count. The networks must have the checkpoint's "
                                 "shapes. Not applied when --ckpt_path resumes a run (its checkpoint holds them)")
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
            name_run(self.config)
            place_outputs(self.config.trainer)
            frames_budget(self.config.trainer)
            check_env_ids(self.config)
            check_named_objects(self.config, "", plain_strings=False)  # class paths reach classes, at any depth
        except ValueError as err:
            config_exit(err)
        self.resumed_in_place: tuple[str, int] | None = None
        self.continue_message: str | None = None
        self.initial_weights: dict | None = None
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
        (:func:`pipelines.compatibility.check_env_fit`), the sizes against the machine's memory
        (:func:`pipelines.memory_check.check_memory`), the data path against the algorithm
        (:func:`~pipelines.compatibility.check_data_fit`) and, for a run that trains, the budget
        (``RLDataModule.check_budget``); a ``--weights_from`` checkpoint's weights checked against the networks and
        its env models loaded (:func:`pipelines.trained_weights.initial_weights`).

        Raises:
            SystemExit: 2, for a ``ValueError`` or ``FileNotFoundError`` raised by this project's code, Lightning's
                ``MisconfigurationException``, or an allocation that failed while the objects were built.
        """
        try:
            super().instantiate_classes()
            self.datamodule.check_device(self.datamodule.device or self.trainer.strategy.root_device)
            specs = check_env_fit(self.model, self.datamodule)  # env <-> algorithm, before anything is written
            check_memory(self.model, self.datamodule, specs)  # networks, batches and buffer that cannot fit
            check_data_fit(self.model, self.datamodule)  # data path <-> algorithm
            check_strategy_fit(self.model, self.trainer.strategy)  # DDP <-> the algorithm's updates
            check_graph_fit(self.model, self.trainer)  # model.cuda_graph <-> the strategy, precision and hooks
            if self.trains:
                self.datamodule.check_budget(self.trainer.world_size)
            if self.trains and self.config.weights_from is not None and self.config.ckpt_path is None:
                self.initial_weights = initial_weights(self.model, self.datamodule, self.config.weights_from, specs)
        except Exception as err:
            rejected = config_error(err)
            if rejected is None and allocation_failure(err) is not None:  # (a constructor's, e.g. a routing policy's)
                rejected = ValueError(allocation_failure(err))
            if rejected is None:
                raise
            config_exit(rejected)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, DefaultHelpFormatter):
    """jsonargparse's help, with the epilog's lines kept (the catalogue is one entry per line)."""


def _end_on(err: BaseException, ckpt_path: str | None) -> None:
    """End the run in one line on an error it can name: a checkpoint (without a config record) whose weights fit
    other networks (exit 2); an allocation that failed, a full disk, a folder it cannot write, no shared memory for
    the workers (exit 1); return on any other error (the caller re-raises it)."""
    mismatch = weights_mismatch(err, ckpt_path) if ckpt_path is not None else None
    if mismatch is not None:
        config_exit(mismatch)
    message = allocation_failure(err) or write_error(err)
    if message is not None:
        print(f"error: {message} (the run stopped; checkpoints written before are kept)", file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def main(args: list[str] | None = None, callbacks: list | None = None) -> FitCLI:
    """Parse, build and fit; returns the CLI (its ``trainer``, ``model``, ``datamodule``). ``callbacks``: callback
    objects added to the config's (a caller's own, e.g. ``pipelines.tune``'s pruning), last.

    Raises:
        SystemExit: 130 after SIGINT, 143 after SIGTERM (the run stopped early; see the module docstring).
    """
    started = time.monotonic()
    die_with_parent()  # a fit started by pipelines.seeds stops when that command dies
    cli = FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                 save_config_callback=RecordConfig, save_config_kwargs={"overwrite": True},  # RecordConfig checks
                 args=args, auto_configure_optimizers=False)
    if cli.resumed_in_place is not None:
        continue_in_folder(cli.trainer, *cli.resumed_in_place)
    if cli.continue_message:
        print(cli.continue_message, file=sys.stderr, flush=True)
    if cli.config.weights_from is not None:
        print(f"weights from {cli.config.weights_from}" if cli.initial_weights is not None else
              f"--weights_from={cli.config.weights_from!r} not applied: --ckpt_path resumes the run with its own "
              f"weights", file=sys.stderr, flush=True)
    if cli.initial_weights is not None:
        cli.trainer.callbacks.append(InitialWeights(cli.initial_weights))
    cli.trainer.callbacks.extend(callbacks or [])
    in_main_thread = threading.current_thread() is threading.main_thread()  # (signal handlers need it)
    previous = {}
    if in_main_thread:  # Lightning adds its own SIGTERM handler to this one at fit start
        previous = {s: signal.signal(s, partial(on_stop_signal, cli.datamodule))
                    for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.config.ckpt_path,
                        weights_only=True)  # a checkpoint is read as tensors and plain data, never run
    except StopRequested as stop:
        stopped(cli.trainer, cli.model.collected_frames, stop.signal_name)
    except OutputExists as err:
        config_exit(err)
    except RestoredStateError as err:  # a checkpoint's state that no run of this config could have written
        config_exit(ValueError(f"--ckpt_path={cli.config.ckpt_path!r}: {err}"))
    except SIGTERMException:  # Lightning's own check, at the end of a training step
        stopped(cli.trainer, cli.model.collected_frames, "SIGTERM")
    except (OSError, RuntimeError, MemoryError) as err:
        _end_on(err, cli.config.ckpt_path)
        raise
    except SystemExit as stop:  # Lightning's answer to KeyboardInterrupt (a second SIGINT): sys.exit(1)
        if cli.trainer.state.status == TrainerStatus.INTERRUPTED:
            stopped(cli.trainer, cli.model.collected_frames, "SIGINT")
        raise stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        cli.datamodule.shutdown_collector()  # no worker may outlive the run, whatever ended it
    if cli.trainer.is_global_zero:
        print(run_summary(cli.trainer, cli.model, started), flush=True)
    return cli


if __name__ == "__main__":
    main()
