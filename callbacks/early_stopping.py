"""Lightning's ``EarlyStopping`` judged on the periodic evaluations of ``callbacks.PolicyEvaluation``."""

from __future__ import annotations

import logging

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping as LightningEarlyStopping
from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason
from torch import Tensor

from callbacks.compat import early_stopping_verdict
from callbacks.evaluation import PolicyEvaluation, new_evaluation
from envs.restored import RestoredStateError, restored_mapping, restored_number

log = logging.getLogger(__name__)


class EarlyStopping(LightningEarlyStopping):
    """Stop training on an evaluation of the deterministic policy, with Lightning's rules: ``stopping_threshold``
    (stop once the metric passes it, as SB3's ``StopTrainingOnRewardThreshold``), ``patience`` evaluations without
    an improvement of ``min_delta`` (SB3's ``StopTrainingOnNoModelImprovement``), ``divergence_threshold``, and a
    non-finite metric (``check_finite``).

    Lightning checks at the end of an epoch or of a validation run; an RL run is one epoch without validation, so
    this one checks after every training batch that follows a new evaluation of the run's
    ``callbacks.PolicyEvaluation`` (its validation episodes, seed 1,000,000: not the held-out ones of
    ``pipelines.evaluate``, so a published figure is not chosen on its own episodes). Training then ends as at its
    budget: the final evaluation is the stopping one, ``last.ckpt`` holds the policy that met the rule, and the
    run's summary gives the frames it trained. A final policy is what a run publishes; stopping on a threshold
    keeps a config whose policy swings late in training (continuous and recurrent PPO) at the policy that met it.
    The state (best score, evaluations waited, the reason) is in the checkpoint: a continued run goes on training
    and stops again at its next evaluation that meets a rule. Under DDP rank 0 decides (it alone evaluates) and the
    decision is broadcast.

    Args:
        monitor: an evaluation metric, e.g. ``eval/episode_return`` or ``eval/weak/won``.
        mode: ``max`` (a return, a win rate) or ``min``.
        stopping_threshold: stop once the metric is above (``max``) or below (``min``) this, strictly (Lightning's
            test: a threshold of 500 never stops a CartPole run, whose returns are at most 500); null: never.
        patience: evaluations in a row without an improvement of ``min_delta`` that stop the run.
        min_delta: the least change that counts as an improvement.
        divergence_threshold: stop once the metric is worse than this; null: never.
        check_finite: stop on a NaN or infinite metric.

    Raises:
        ValueError: a ``monitor`` not under ``eval/`` (when built from the config); at the start of training, no
            ``callbacks.PolicyEvaluation`` in ``trainer.callbacks``; in training, Lightning's ``RuntimeError`` for
            an evaluation without the metric (naming the ones it has).
    """

    def __init__(self, monitor: str = "eval/episode_return", mode: str = "max", stopping_threshold: float | None = None,
                 patience: int = 1_000_000, min_delta: float = 0.0, divergence_threshold: float | None = None,
                 check_finite: bool = True) -> None:
        if not monitor.startswith("eval/"):
            raise ValueError(f"EarlyStopping.monitor={monitor!r} is not allowed: an evaluation metric, eval/<name> "
                             "(e.g. eval/episode_return)")
        super().__init__(monitor=monitor, mode=mode, stopping_threshold=stopping_threshold, patience=patience,
                         min_delta=min_delta, divergence_threshold=divergence_threshold, check_finite=check_finite,
                         check_on_train_epoch_end=False, strict=True)
        self._read_frames: float | None = None  # eval/frames of the last evaluation judged
        self.stopped_at: int | None = None  # frames at which this process stopped training (not in the checkpoint)

    def load_state_dict(self, state_dict: dict) -> None:
        """Lightning's, with each value checked (a tampered checkpoint's stops the run naming it) and the configured
        ``patience`` kept (Lightning's would take the checkpoint's)."""
        state = restored_mapping(state_dict, "EarlyStopping", ("wait_count", "best_score"))
        restored_number(state["wait_count"], "EarlyStopping.wait_count", low=0)
        best = state["best_score"]
        if not isinstance(best, Tensor) or best.numel() != 1:
            raise RestoredStateError(f"EarlyStopping.best_score={best!r} is not a one-number tensor")
        restored_number(best.item(), "EarlyStopping.best_score", integer=False, infinite=True)
        reason = state.get("stopping_reason", EarlyStoppingReason.NOT_STOPPED.value)
        if reason not in {r.value for r in EarlyStoppingReason}:
            raise RestoredStateError(f"EarlyStopping.stopping_reason={reason!r} is not one of Lightning's reasons")
        if not isinstance(state.get("stopping_reason_message"), (str, type(None))):
            raise RestoredStateError("EarlyStopping.stopping_reason_message is not a string")
        super().load_state_dict({**state, "stopped_epoch": 0, "patience": self.patience})

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not any(isinstance(c, PolicyEvaluation) for c in trainer.callbacks):
            raise ValueError("EarlyStopping: needs a callbacks.PolicyEvaluation in trainer.callbacks (it judges its "
                             "evaluations)")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Nothing: an RL run has no validation loop (the evaluations are judged after a training batch)."""

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        reason = None
        if trainer.is_global_zero and not trainer.fast_dev_run:
            reason = self._judge_new_evaluation(trainer)
        reason = trainer.strategy.broadcast(reason, src=0)
        if reason is not None:
            trainer.should_stop = True
            self.stopping_reason_message, self.stopped_at = reason, int(pl_module.collected_frames)
            log.info("EarlyStopping: training stops at %s frames: %s", f"{pl_module.collected_frames:,}", reason)

    def _judge_new_evaluation(self, trainer: L.Trainer) -> str | None:
        """The reason to stop given by an evaluation published since the last one judged, or None."""
        frames = new_evaluation(trainer, self._read_frames)
        if frames is None:
            return None
        self._read_frames = frames
        return early_stopping_verdict(self, trainer.callback_metrics)
