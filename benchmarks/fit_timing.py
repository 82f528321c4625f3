"""Timing a ``pipelines.fit`` run from inside the benchmark's process: frames, episodes and updates per
second between the first and the last training batch (the warm-up and set-up are not counted)."""

from __future__ import annotations

import time

import lightning as L

from modules.base import RLModule
from pipelines.data import RLDataModule
from pipelines.fit import FitCLI


class _Clock(L.Callback):
    """Wall time, finished episodes and collected frames between training batch ``start_batch`` and the last."""

    def __init__(self, start_batch: int = 0) -> None:
        self.start_batch = start_batch
        self.created = time.perf_counter()  # before the run is built: start - created is its start-up time

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx == self.start_batch:
            self.start = time.perf_counter()
            self.episodes0, self.frames0 = pl_module.finished_episodes, pl_module.collected_frames
            self.step0 = trainer.global_step

    def on_train_end(self, trainer, pl_module) -> None:
        self.seconds = time.perf_counter() - self.start
        self.episodes = pl_module.finished_episodes - self.episodes0
        self.frames = pl_module.collected_frames - self.frames0
        self.updates = trainer.global_step - self.step0


def timed_fit(args: list[str], start_batch: int = 0,
              callbacks: list[L.Callback] = ()) -> tuple[dict[str, float], FitCLI]:
    """Fit with the ``pipelines.fit`` command-line ``args`` (no logger or checkpoints are added here), timed from
    training batch ``start_batch`` on (the batches before it warm up: CUDA start, compilation), with ``callbacks``
    added to the config's.

    Returns:
        ``{frames_per_s, episodes_per_min, updates_per_s, frames, episodes, updates, seconds}`` of the timed
        part and ``startup_s`` (from building the run to the first timed batch), and the CLI (its ``model``,
        ``trainer``).
    """
    clock = _Clock(start_batch)
    cli = FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                 save_config_callback=None, auto_configure_optimizers=False, args=args)
    cli.trainer.callbacks.extend([clock, *callbacks])
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return {"startup_s": clock.start - clock.created, "frames_per_s": clock.frames / clock.seconds,
            "episodes_per_min": clock.episodes / clock.seconds * 60,
            "updates_per_s": clock.updates / clock.seconds, "frames": clock.frames, "episodes": clock.episodes,
            "updates": clock.updates, "seconds": clock.seconds}, cli
