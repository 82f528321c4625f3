"""Train anything: ``python -m pipelines.fit --config configs/<run>.yaml [--key.sub=value ...]``.

LightningCLI over ``model`` (an ``RLModule`` subclass), ``data`` (an ``RLDataModule`` subclass) and
``trainer``; ``--print_config`` prints the resolved run, ``--ckpt_path`` resumes one. The resolved
config is saved next to the logs. ``num_threads`` and ``float32_matmul_precision`` are applied here,
once, before anything is built.

A run that stops early ends with a non-zero exit status and its rollout workers stopped: 130 after
SIGINT (Ctrl+C), 143 after SIGTERM (Lightning stops at the next batch), 1 after an error (a worker
that died or stalled names itself in the error). Checkpoints written before are kept intact.
"""

from __future__ import annotations

import os
import signal
import sys
import warnings

# One torch thread is the measured default on shared 2-core machines; with more, OpenMP threads must
# not spin-wait while another process computes (matrix products slowed down up to 50x).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from lightning.pytorch.cli import LightningCLI  # noqa: E402
from lightning.pytorch.trainer.states import TrainerStatus  # noqa: E402
from lightning.pytorch.utilities.exceptions import SIGTERMException  # noqa: E402

from modules.base import RLModule  # noqa: E402
from pipelines.data import RLDataModule  # noqa: E402

# Checkpoints hold the weights after the optimiser step, which is what resuming needs.
warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")


class FitCLI(LightningCLI):
    """LightningCLI without subcommands, plus ``--ckpt_path``, ``--num_threads`` and
    ``--float32_matmul_precision``."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--ckpt_path", type=str | None, default=None, help="resume from this checkpoint")
        parser.add_argument("--num_threads", type=int, default=1, help="torch intra-op threads (per process)")
        parser.add_argument("--float32_matmul_precision", type=str, default="highest",
                            choices=["highest", "high", "medium"], help="torch.set_float32_matmul_precision")

    def before_instantiate_classes(self) -> None:
        torch.set_num_threads(self.config.num_threads)
        torch.set_float32_matmul_precision(self.config.float32_matmul_precision)


def main(args: list[str] | None = None) -> FitCLI:
    """Parse, build and fit; returns the CLI (its ``trainer``, ``model``, ``datamodule``).

    Raises:
        SystemExit: 130 after SIGINT, 143 after SIGTERM (the run stopped early; see the module docstring).
    """
    cli = FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                 save_config_kwargs={"overwrite": True}, args=args, auto_configure_optimizers=False)
    try:
        cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.config.ckpt_path)
    except SIGTERMException:
        _stopped(cli, "SIGTERM", 128 + signal.SIGTERM)
    except SystemExit as stop:  # Lightning's answer to KeyboardInterrupt (SIGINT): sys.exit(1) after its teardown
        if cli.trainer.state.status == TrainerStatus.INTERRUPTED:
            _stopped(cli, "SIGINT", 128 + signal.SIGINT)
        raise stop
    finally:
        cli.datamodule.shutdown_collector()  # no worker may outlive the run, whatever ended it
    return cli


def _stopped(cli: FitCLI, signal_name: str, status: int) -> None:
    """Say why the run stopped and where its checkpoints are, then exit with ``status``."""
    folder = getattr(cli.trainer.checkpoint_callback, "dirpath", None)
    print(f"training stopped by {signal_name} at {cli.model.collected_frames} frames, optimiser step "
          f"{cli.trainer.global_step}; checkpoints written before are in {folder}", file=sys.stderr, flush=True)
    raise SystemExit(status)


if __name__ == "__main__":
    main()
