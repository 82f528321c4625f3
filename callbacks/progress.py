"""A progress bar counted in collected frames, with ETA and the latest return."""

from __future__ import annotations

import sys

import lightning as L
from lightning.pytorch.callbacks.progress import ProgressBar
from tqdm import tqdm


class FrameProgressBar(ProgressBar):
    """Replaces Lightning's batch-count bar: ``frames / total_frames`` with rate and ETA, plus the
    latest ``rollout/episode_return`` and the optimiser step. Reads the module's checkpointed frame
    counter, so a resumed run starts where it stopped.

    Args:
        refresh_rate: update the bar every this many training steps (0 disables it).
    """

    def __init__(self, refresh_rate: int = 1) -> None:
        super().__init__()
        self.refresh_rate = refresh_rate
        self._bar: tqdm | None = None
        self._enabled = True

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled and self.refresh_rate > 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.is_enabled and trainer.is_global_zero:
            self._bar = tqdm(total=trainer.datamodule.planned_frames, initial=pl_module.collected_frames,
                             unit="frames", unit_scale=True, dynamic_ncols=True, file=sys.stdout,
                             desc="frames", smoothing=0.1)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        if self._bar is None or batch_idx % self.refresh_rate:
            return
        self._bar.update(max(pl_module.collected_frames - self._bar.n, 0))
        metrics = pl_module.latest_metrics
        postfix = {"step": trainer.global_step}
        if "rollout/episode_return" in metrics:
            postfix["return"] = f"{metrics['rollout/episode_return']:.1f}"
        self._bar.set_postfix(postfix, refresh=False)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._bar is not None:
            self._bar.update(max(pl_module.collected_frames - self._bar.n, 0))
            self._bar.close()
            self._bar = None
