"""Train anything: ``python -m pipelines.fit --config configs/<run>.yaml [--key.sub=value ...]``.

LightningCLI over ``model`` (an ``RLModule`` subclass), ``data`` (an ``RLDataModule`` subclass) and
``trainer``; ``--print_config`` prints the resolved run, ``--ckpt_path`` resumes one. The resolved
config is saved next to the logs. ``num_threads`` and ``float32_matmul_precision`` are applied here,
once, before anything is built.
"""

from __future__ import annotations

import os
import warnings

# One torch thread is the measured default on shared 2-core machines; with more, OpenMP threads must
# not spin-wait while another process computes (matrix products slowed down up to 50x).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from lightning.pytorch.cli import LightningCLI  # noqa: E402

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
    """Parse, build and fit; returns the CLI (its ``trainer``, ``model``, ``datamodule``)."""
    cli = FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                 save_config_kwargs={"overwrite": True}, args=args, auto_configure_optimizers=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.config.ckpt_path)
    return cli


if __name__ == "__main__":
    main()
