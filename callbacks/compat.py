"""The callbacks' (and the pipelines') uses of other libraries' private APIs, in one place. Each was written for the
versions in :data:`WRITTEN_FOR`; ``tests/test_compat.py`` fails when an installed version differs, so each use is
read again against the new release before the pins move."""

from __future__ import annotations

WRITTEN_FOR = {"torch": "2.13", "tensorboard": "2.", "lightning": "2.6"}


def add_summary(writer, summary, step: int | None = None) -> None:
    """Write a TensorBoard ``Summary`` protobuf through a torch ``SummaryWriter`` (its file writer,
    ``_get_file_writer``: the writer has no public call for a summary built by hand, e.g. a GIF image or a custom
    scalars layout)."""
    writer._get_file_writer().add_summary(summary, step)


def early_stopping_verdict(callback, metrics: dict) -> str | None:
    """Lightning's ``EarlyStopping`` rules applied to ``metrics`` once, outside an epoch or validation end: the
    reason to stop, or None (``_validate_condition_metric``, which raises Lightning's ``RuntimeError`` naming the
    metrics there when the monitored one is missing and ``strict``, then ``_evaluate_stopping_criteria``, which
    updates the best score and the evaluations waited: Lightning's own checks call them in that order)."""
    if not callback._validate_condition_metric(metrics):
        return None
    stop, reason = callback._evaluate_stopping_criteria(metrics[callback.monitor].squeeze())
    return reason if stop else None
