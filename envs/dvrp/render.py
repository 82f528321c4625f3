"""Route plot of one DVRP episode, drawn from its exported record (see ``DVRPEnv.export_episodes``)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


def plot_routes(record: dict, title: str | None = None) -> np.ndarray:
    """Draw the depot, served customers and each vehicle's route; returns RGB ``[H, W, 3]`` uint8.

    Args:
        record: one episode as written by ``DVRPEnv.export_episodes`` / ``--routes_out``.
        title: figure title; default gives the cost (km) and the number served.
    """
    fig, ax = plt.subplots(figsize=(5, 5), dpi=80)
    depot = (record["depot"]["x"], record["depot"]["y"])
    where = {c["id"]: (c["x"], c["y"]) for c in record["customers"]}
    for k, route in enumerate(record["routes"]):
        if not route:
            continue
        path = np.array([depot] + [where[i] for i in route] + [depot])
        ax.plot(path[:, 0], path[:, 1], "-o", ms=3, lw=1.2, color=f"C{k % 10}", label=f"vehicle {k}")
    ax.plot(*depot, "ks", ms=8, label="depot")
    ax.set_title(title or f"{record['cost_km']:.1f} km, {len(record['customers'])} served")
    ax.set_aspect("equal")
    ax.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.canvas.draw()
    image = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    plt.close(fig)
    return image
