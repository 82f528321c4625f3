"""Lightning's ``ModelCheckpoint`` whose ``last.ckpt`` is the end of training and whose step schedule counts
optimiser steps, several of which one training step may take."""

from __future__ import annotations

import os
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint as LightningModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from envs.restored import RestoredStateError, restored_mapping, restored_tensor
from modules.checks import nonfinite_weights


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
    * with ``save_last``, ``last.ckpt`` is also written when a signal stops training: the data pipelines'
      ``StopRequested`` (it carries the ``signal_name``), raised by the stop check before a collection, or
      Lightning's ``SIGTERMException`` after a training step; both at a step boundary, so the checkpoint
      resumes the run. A crash or a second Ctrl+C (a ``KeyboardInterrupt`` mid-step) writes nothing: the
      checkpoints written before stay.
    * a checkpoint is never written with weights that are not finite (it would replace a good ``last.ckpt``):
      the save raises instead, naming the step and the last checkpoint written.
    * checkpoints are named by the frames collected (``frames=1200000.ckpt``) unless ``filename`` is given; the
      ``filename`` template may use ``{frames}`` besides Lightning's ``{epoch}``, ``{step}`` and metrics.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.filename is None:
            self.filename = "{frames}"

    def _monitor_candidates(self, trainer: L.Trainer) -> dict[str, Any]:
        candidates = super()._monitor_candidates(trainer)
        candidates["frames"] = torch.tensor(getattr(trainer.lightning_module, "collected_frames", 0))
        return candidates

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        """Lightning's save, after checking that every weight is finite (one read-back per save); then the
        loggers are flushed (``logger.save()``), so that the logs up to the checkpoint are on disk with it.

        Raises:
            RuntimeError: a parameter or buffer with nan or inf (named, with the last checkpoint written).
        """
        bad = nonfinite_weights(trainer.lightning_module)
        if bad:
            raise RuntimeError(f"not writing {filepath} at optimiser step {trainer.global_step}: "
                               f"{len(bad)} weights are not finite (e.g. {bad[0]}); the last checkpoint written: "
                               f"{self.last_model_path or 'none'}")
        super()._save_checkpoint(trainer, filepath)
        for logger in trainer.loggers:  # the logs up to the checkpoint reach the disk with it (a resumed run
            logger.save()  # replaces those after it; without this a kill lost the writer's unflushed events)

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

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Lightning's restore, after a check of what it takes from the file: the checkpoints it names (the last,
        the best, the top k) are files of ``.ckpt`` directly in the checkpoint's folder, and their scores numbers
        or None. Lightning deletes a replaced checkpoint by the path the file gives (``fs.rm(recursive=True)``),
        guarded by a test that ``..`` passes: an edited ``last_model_path`` deleted a file outside the run.

        Raises:
            RestoredStateError: names the entry and what it must be.
        """
        state = restored_mapping(state_dict, "ModelCheckpoint", ("best_model_path", "best_model_score"))
        dirpath = state.get("dirpath", self.dirpath)
        if not isinstance(dirpath, str | None):
            raise RestoredStateError(f"ModelCheckpoint.dirpath is {type(dirpath).__name__}, not a folder's path")
        models = state.get("best_k_models") or {}
        if not isinstance(models, dict):
            raise RestoredStateError(f"ModelCheckpoint.best_k_models is {type(models).__name__}, not a mapping")
        paths = {"best_model_path": state["best_model_path"], "kth_best_model_path": state.get("kth_best_model_path"),
                 "last_model_path": state.get("last_model_path"), **{f"best_k_models[{k!r}]": k for k in models}}
        for key, path in paths.items():
            _checked_checkpoint_path(path, dirpath, f"ModelCheckpoint.{key}")
        for key, score in {"best_model_score": state["best_model_score"], "kth_value": state.get("kth_value"),
                           **{f"best_k_models[{k!r}]": v for k, v in models.items()}}.items():
            if score is not None:
                restored_tensor(torch.as_tensor(score) if isinstance(score, float) else score,
                                f"ModelCheckpoint.{key}", shape=(), finite=False)
        super().load_state_dict(state_dict)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        stop = isinstance(exception, SIGTERMException) or getattr(exception, "signal_name", None) is not None
        if self.save_last and stop and not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        super().on_exception(trainer, pl_module, exception)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.fast_dev_run:  # nothing written, as Lightning's docs say (its own save_last wrote last.ckpt)
            return
        if self.save_last and not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        super().on_train_end(trainer, pl_module)


def _checked_checkpoint_path(path: object, dirpath: str | None, key: str) -> None:
    """A restored checkpoint path: empty, or a ``.ckpt`` file directly in ``dirpath`` once both are resolved
    (symbolic links, ``..``).

    Raises:
        RestoredStateError: names ``key``, the path and the folder.
    """
    if path is None or path == "":
        return
    if not isinstance(path, str):
        raise RestoredStateError(f"{key} is {type(path).__name__}, not a path")
    inside = dirpath is not None and os.path.dirname(os.path.realpath(path)) == os.path.realpath(dirpath)
    if not inside or not path.endswith(".ckpt"):
        raise RestoredStateError(f"{key}={path!r} is not a .ckpt file of the checkpoint folder {dirpath!r}: "
                                 f"Lightning would delete it when it replaces that checkpoint")
