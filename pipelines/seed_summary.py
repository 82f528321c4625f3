"""The summary of ``pipelines.seeds``: each seed's final and best value of a metric from its run's TensorBoard files,
their mean ± standard error over seeds, and the curves of every seed and their mean."""

from __future__ import annotations

import math

import numpy as np

from pipelines.scalars import read_scalars

# the metric summarised when none is given: the first of these that every run logged (returns first; REINFORCE's
# routing runs log no return but the greedy plans' cost on their validation set)
DEFAULT_METRICS = ("eval/episode_return", "rollout/episode_return", "eval/cost_km")
LOWER_IS_BETTER = ("cost", "loss", "km")  # a metric whose last name part holds one of these: its best is its least


def lower_is_better(metric: str) -> bool:
    """Whether ``metric``'s best value is its least (a cost, a loss, a distance), else its greatest."""
    return any(word in metric.rsplit("/", 1)[-1] for word in LOWER_IS_BETTER)


def summarise(folders: dict[int, str], metric: str | None) -> dict:
    """Per seed the final and best value of ``metric`` (best: the greatest, the least for a cost, loss or
    distance, :func:`lower_is_better`) and the frames of its last point, and the mean ± standard error of the final
    values over seeds (``metric`` None: the first of :data:`DEFAULT_METRICS` every run logged).

    Raises:
        ValueError: a run without that metric, or without any default one (names the seed and the metrics it has).
    """
    curves = {seed: read_scalars(folder) for seed, folder in folders.items()}
    if metric is None:
        metric = next((m for m in DEFAULT_METRICS if all(m in c for c in curves.values())), DEFAULT_METRICS[0])
    rows = {}
    for seed, scalars in curves.items():
        if metric not in scalars:
            raise ValueError(f"seed {seed} ({folders[seed]}) logged no {metric!r}; "
                             f"it has: {', '.join(sorted(scalars))}")
        steps, values = scalars[metric]
        best = values.min() if lower_is_better(metric) else values.max()
        rows[seed] = {"final": float(values[-1]), "best": float(best), "frames": int(steps[-1])}
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
