"""The console of a run: library messages that are known and harmless here are filtered (each with its reason),
TorchRL's log lines are written through the progress bar, and a finished run ends with one summary."""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
import warnings

# (message pattern, why it says nothing to a user of these pipelines)
QUIET_WARNINGS = (
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated",
     "Lightning 2.6's own call of a torch pytree API that torch 2.13 deprecated; nothing a config can change"),
    (r"Your `IterableDataset` has `__len__` defined",
     "the data modules' streams are IterableDatasets whose length is the number of training steps, iterated in "
     "the main process (no DataLoader workers): the duplicate-data case it warns about cannot arise"),
    (r"The number of training batches \(\d+\) is smaller than the logging interval",
     "metrics are written once per collected batch against frames (RLModule.flush_metrics), not on Lightning's "
     "log_every_n_steps"),
    (r"You're resuming from a checkpoint that ended before the epoch ended and your dataloader is not resumable",
     "the data modules save and restore their own stream (RLDataModule.state_dict): a resumed run is exact, "
     "tests/pipelines/test_resume.py"),
    (r"Checkpoint directory .* exists and is not empty",
     "a run resumed in its own folder saves beside its earlier checkpoints (a new run's folder is new, and one "
     "run at a time writes a folder: pipelines.run_config.lock_run_folder)"),
    (r"LightningCLI's args parameter is intended",
     "pipelines.evaluate, seeds and tune hand LightningCLI the run's own argument list while sys.argv holds theirs"),
)
# Lightning's informational lines (rank_zero_info) that are advertisements or repeat what the summary says
QUIET_INFO = (
    ("💡 Tip:", "advertisements for Lightning's cloud services"),
    ("`Trainer.fit` stopped:", "every run ends after one epoch of its stream; the run's summary says how it ended"),
)


class _DropInfo(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(message.startswith(prefix) for prefix, _ in QUIET_INFO)


class _ThroughProgressBar(logging.Handler):
    """Writes a record with ``tqdm.write``: the line goes above the progress bar instead of into it."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        try:
            tqdm.write(self.format(record), file=sys.stdout)  # where the progress bar is (Lightning: stdout)
        except Exception:  # a closed stream at exit
            self.handleError(record)


def quiet_console() -> None:
    """Apply the filters above (idempotent) and route the ``torchrl`` logger's lines through the progress bar
    (``torchrl: <message>``; TorchRL writes its own coloured lines into the bar otherwise)."""
    for pattern, _ in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _DropInfo) for f in rank_zero.filters):
        rank_zero.addFilter(_DropInfo())
    torchrl = logging.getLogger("torchrl")
    if not any(isinstance(h, _ThroughProgressBar) for h in torchrl.handlers):
        for handler in list(torchrl.handlers):
            torchrl.removeHandler(handler)
        handler = _ThroughProgressBar()
        handler.setFormatter(logging.Formatter("torchrl: %(message)s"))
        torchrl.addHandler(handler)
        torchrl.propagate = False


def run_summary(trainer, model, started: float) -> str:
    """The lines a finished run ends with: its folder, frames and wall time, the final and best evaluation (when
    an evaluation callback ran), and the checkpoints written."""
    logger = trainer.logger  # its own log_dir: Trainer.log_dir is a collective under DDP, and only rank 0 prints
    folder = getattr(logger, "log_dir", None) or trainer.default_root_dir
    seconds = time.monotonic() - started
    before = int(getattr(model, "frames_at_start", 0))  # a resumed checkpoint's frames, not this process's
    frames = int(model.collected_frames) - before
    where = "none (fast_dev_run writes nothing)" if trainer.fast_dev_run else os.path.abspath(folder)
    lines = [f"run folder: {where}",
             f"frames: {frames:,} in {_duration(seconds)} ({frames / max(seconds, 1e-9):,.0f} frames/s overall)"
             + (f" after the checkpoint's {before:,}" if before else "") + f", {trainer.global_step:,} optimiser steps"]
    from callbacks.early_stopping import EarlyStopping  # (torch loads after the thread settings)
    from callbacks.evaluation import PolicyEvaluation
    from callbacks.evaluation import evaluations as run_evaluations

    lines += [f"stopped early at {c.stopped_at:,} frames by callbacks.EarlyStopping: {c.stopping_reason_message}"
              for c in trainer.callbacks if isinstance(c, EarlyStopping) and c.stopped_at is not None]

    evaluations = [e for e in run_evaluations(trainer) if len(e) > 1]
    if evaluations:
        chosen = [getattr(c, "best_metric", None) for c in trainer.callbacks]
        returns = [k for k in evaluations[-1] if k.endswith("episode_return")]
        metric = next((m for m in chosen if m in evaluations[-1]), None) or next(
            iter(returns), next(k for k in evaluations[-1] if k != "frames"))
        final = evaluations[-1]
        best = max((e for e in evaluations if metric in e), key=lambda e: e[metric])
        se = final.get(f"{metric}_se")
        evaluator = next((c for c in trainer.callbacks if isinstance(c, PolicyEvaluation)), None)
        episodes = (f" ({evaluator.num_envs} validation episodes, seed {evaluator.seed:,}; held-out ones: "
                    f"pipelines.evaluate)") if evaluator is not None else ""
        lines.append(f"evaluation {metric}: final {final[metric]:.3f}" + (f" ± {se:.3f}" if se is not None else "")
                     + f" at {int(final['frames']):,} frames; best {best[metric]:.3f} at {int(best['frames']):,} "
                     f"frames{episodes}")
    paths = []
    for callback in trainer.callbacks:
        for name in ("last_model_path", "best_path"):
            path = getattr(callback, name, None)
            path = path(trainer) if callable(path) else path
            if isinstance(path, str) and path and os.path.isfile(path) and path not in paths:
                paths.append(path)
    if paths:
        lines.append("checkpoints: " + ", ".join(paths))
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    minutes, s = divmod(int(round(seconds)), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours} h {m} min {s} s" if hours else f"{m} min {s} s" if m else f"{seconds:.1f} s"


def json_line(value) -> tuple[str, list[str]]:
    """``value`` (nested dicts and lists of numbers) as one line of strict JSON, a nan or an infinity written as
    ``null`` (``NaN`` is no JSON), and the dotted keys of those entries (a caller ends with a non-zero status then:
    no NaN result with exit 0)."""
    bad: list[str] = []

    def clean(node, key: str):
        if isinstance(node, float) and not math.isfinite(node):
            bad.append(key or "(the value)")
            return None
        if isinstance(node, dict):
            return {k: clean(v, f"{key}.{k}" if key else str(k)) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return [clean(v, f"{key}[{i}]") for i, v in enumerate(node)]
        return node

    return json.dumps(clean(value, ""), allow_nan=False), bad


def rounded(value, digits: int = 6):
    """``value`` (nested dicts and lists of numbers) with every float cut to ``digits`` significant digits, for
    JSON a person reads (``12.3457`` rather than ``12.345678901234567``); nan and inf stay."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    return value
