"""Lightning's ``ModelCheckpoint`` whose ``last.ckpt`` is the end of training."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint as LightningModelCheckpoint


class ModelCheckpoint(LightningModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` (same arguments), plus: with ``save_last``, ``last.ckpt`` is written
    again when training ends, whatever ``every_n_train_steps`` is.

    Lightning 2.6 writes ``last.ckpt`` only at the steps where it saves a checkpoint anyway (and at the end
    only if it never saved one), so with ``every_n_train_steps`` the run's final policy was lost: a 1M-frame
    hockey DQN run's ``last.ckpt`` held the policy of 660k frames (it won 70.5% of 200 games against weak,
    the final one 97.5%).
    """

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.save_last and not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        super().on_train_end(trainer, pl_module)
