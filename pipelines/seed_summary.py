"""The summary of ``pipelines.seeds``: each seed's final and best value of a metric from its run's TensorBoard files,
their mean ± standard error over seeds, and the curves of every seed and their mean."""

from __future__ import annotations

import math

import numpy as np

from pipelines.scalars import read_scalars

FALLBACK_METRIC = "rollout/episode_return"


def summarise(folders: dict[int, str], metric: str | None) -> dict:
    """Per seed the final and best value of ``metric`` and the frames of its last point, and the mean ± standard
    error of the final values over seeds (``metric`` None: ``eval/episode_return`` where every run logged it, else
    ``rollout/episode_return``).

    Raises:
        ValueError: a run without that metric (names the seed and the metrics it has).
    """
    curves = {seed: read_scalars(folder) for seed, folder in folders.items()}
    if metric is None:
        metric = "eval/episode_return" if all("eval/episode_return" in c for c in curves.values()) else FALLBACK_METRIC
    rows = {}
    for seed, scalars in curves.items():
        if metric not in scalars:
            raise ValueError(f"seed {seed} ({folders[seed]}) logged no {metric!r}; "
                             f"it has: {', '.join(sorted(scalars))}")
        steps, values = scalars[metric]
        rows[seed] = {"final": float(values[-1]), "best": float(values.max()), "frames": int(steps[-1])}
    finals = np.array([row["final"] for row in rows.values()])
    se = float(finals.std(ddof=1) / math.sqrt(len(finals))) if len(finals) > 1 else float("nan")
    return {"metric": metric, "seeds": rows, "mean": float(finals.mean()), "se": se,
            "curves": {seed: scalars[metric] for seed, scalars in curves.items()}}


def plot(summary: dict, path: str, title: str) -> None:
    """The metric against frames, a thin line per seed and their mean (on the frames every seed logged) thick."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    curves = summary["curves"]
    for seed, (steps, values) in curves.items():
        ax.plot(steps, values, linewidth=0.8, alpha=0.6, marker="o", markersize=3, label=f"seed {seed}")  # (a
        # run of one evaluation is one point: a line alone draws nothing)
    common = sorted(set.intersection(*(set(steps.tolist()) for steps, _ in curves.values())))
    if common:
        mean = np.mean([np.interp(common, steps, values) for steps, values in curves.values()], axis=0)
        ax.plot(common, mean, color="black", linewidth=2.0, marker="o", markersize=4, label="mean")
    ax.set_xlabel("frames")
    ax.set_ylabel(summary["metric"])
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
