"""A run's logged scalars, read back from its TensorBoard event files (the curves ``pipelines.seeds`` and
``pipelines.tune`` summarise)."""

from __future__ import annotations

import glob
import os

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def read_scalars(folder: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every scalar a run logged under ``folder`` (searched recursively for ``events.out.tfevents.*``): ``{tag:
    (steps, values)}``, steps (collected frames here) ascending. Several event files of one run folder (a run
    resumed in place) are read as one run, as TensorBoard shows it; of several run folders, the last one found
    wins a tag.

    Returns:
        int64 ``[K]`` steps and float64 ``[K]`` values per tag; ``{}`` when no event file is there.
    """
    runs = sorted({os.path.dirname(p) for p in glob.glob(os.path.join(folder, "**", "events.out.tfevents.*"),
                                                          recursive=True)})
    scalars: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for run in runs:
        events = EventAccumulator(run, size_guidance={"scalars": 0})  # 0: keep every point
        events.Reload()
        for tag in events.Tags()["scalars"]:
            points = sorted((e.step, e.value) for e in events.Scalars(tag))
            scalars[tag] = (np.array([s for s, _ in points], dtype=np.int64),
                            np.array([v for _, v in points], dtype=np.float64))
    return scalars
