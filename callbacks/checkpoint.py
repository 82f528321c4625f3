"""Lightning's ``ModelCheckpoint`` whose ``last.ckpt`` is the end of training and whose step schedule counts
optimiser steps, several of which one training step may take."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint as LightningModelCheckpoint


class ModelCheckpoint(LightningModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` (same arguments), plus:

    * with ``save_last``, ``last.ckpt`` is written again when training ends, whatever ``every_n_train_steps``
      is. Lightning 2.6 writes ``last.ckpt`` only at the steps where it saves a checkpoint anyway (and at the
      end only if it never saved one), so with ``every_n_train_steps`` the run's final policy was lost: a
      1M-frame hockey DQN run's ``last.ckpt`` held the policy of 660k frames (it won 70.5% of 200 games
      against weak, the final one 97.5%).
    * ``every_n_train_steps`` (manual optimisation, no ``monitor``) counts optimiser steps
      (``trainer.global_step``): a checkpoint is written after every training step in which the count reached
      a multiple of it. A training step of the data pipelines takes all the updates of a collected batch
      (``OffPolicyDataModule``, ``OnPolicyDataModule``), so Lightning's own test (the count *is* a multiple
      after the step) would skip every multiple that falls inside a step.
    * a checkpoint is never written with weights that are not finite (it would replace a good ``last.ckpt``):
      the save raises instead, naming the step and the last checkpoint written.
    """

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        """Lightning's save, after checking that every weight is finite (one read-back per save).

        Raises:
            RuntimeError: a parameter or buffer with nan or inf (named, with the last checkpoint written).
        """
        tensors = [(k, v) for k, v in trainer.lightning_module.state_dict().items()
                   if isinstance(v, torch.Tensor) and v.is_floating_point()]
        finite = torch.stack([torch.isfinite(v).all() for _, v in tensors]) if tensors else torch.ones(1, dtype=torch.bool)
        if not bool(finite.all()):
            bad = [k for (k, _), ok in zip(tensors, finite.tolist()) if not ok]
            raise RuntimeError(f"not writing {filepath} at optimiser step {trainer.global_step}: {len(bad)} weights are "
                               f"not finite (e.g. {bad[0]}); the last checkpoint written: "
                               f"{self.last_model_path or 'none'}")
        super()._save_checkpoint(trainer, filepath)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._steps_checked = trainer.global_step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        n, step = self._every_n_train_steps, trainer.global_step
        if n < 1 or pl_module.automatic_optimization or self.monitor is not None:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            return
        previous, self._steps_checked = getattr(self, "_steps_checked", 0), step
        if step // n > previous // n and not self._should_skip_saving_checkpoint(trainer):
            candidates = self._monitor_candidates(trainer)
            self._save_topk_checkpoint(trainer, candidates)
            self._save_last_checkpoint(trainer, candidates)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.save_last and not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        super().on_train_end(trainer, pl_module)
