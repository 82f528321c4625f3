"""Stop a run that keeps producing non-finite updates."""

from __future__ import annotations

from typing import Any

import lightning as L
from torch import Tensor


class NonFiniteGuard(L.Callback):
    """The run stops after ``max_consecutive`` non-finite updates in a row.

    Every update whose loss or gradient norm is not finite is skipped by the module
    (``modules.base.RLModule.optimizer_update``), counted, and logged as ``train/nonfinite_updates``. This callback
    reads the count of consecutive ones once per training step. Every run has one: it is in
    ``configs/defaults.yaml``, and ``pipelines.fit`` adds one with the default to a callback list without it; list it
    to set ``max_consecutive``.

    Args:
        max_consecutive: non-finite updates in a row that stop the run (>= 1).

    Raises:
        ValueError: ``max_consecutive < 1``.
        RuntimeError: from the training step that reached ``max_consecutive``; names the step and the last
            checkpoint written (whose weights are finite: see ``callbacks.ModelCheckpoint``).
    """

    def __init__(self, max_consecutive: int = 100) -> None:
        if max_consecutive < 1:
            raise ValueError(f"NonFiniteGuard.max_consecutive={max_consecutive} is not allowed: >= 1")
        self.max_consecutive = max_consecutive

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        consecutive = getattr(pl_module, "consecutive_nonfinite", 0)
        if isinstance(consecutive, Tensor):
            consecutive = int(consecutive)
        if consecutive >= self.max_consecutive:
            last = getattr(trainer.checkpoint_callback, "last_model_path", "") or "none written"
            raise RuntimeError(f"{consecutive} non-finite updates in a row (loss or gradient nan or inf) up to "
                               f"optimiser step {trainer.global_step}: every one was skipped and the run stops; "
                               f"the last checkpoint: {last} (lower the learning rate or the reward scale)")
