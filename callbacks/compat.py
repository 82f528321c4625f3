"""The callbacks' (and the pipelines') uses of other libraries' private APIs, in one place. Each was written for the
versions in :data:`WRITTEN_FOR`; ``tests/test_compat.py`` fails when an installed version differs, so each use is
read again against the new release before the pins move."""

from __future__ import annotations

WRITTEN_FOR = {"torch": "2.13", "tensorboard": "2."}


def add_summary(writer, summary, step: int | None = None) -> None:
    """Write a TensorBoard ``Summary`` protobuf through a torch ``SummaryWriter`` (its file writer,
    ``_get_file_writer``: the writer has no public call for a summary built by hand, e.g. a GIF image or a custom
    scalars layout)."""
    writer._get_file_writer().add_summary(summary, step)
