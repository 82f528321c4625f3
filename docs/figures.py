"""Draws the documentation's pictures into ``docs/images/`` (PNG), from a run and a routes file the user gives.

    python docs/figures.py --run runs/dvrp/version_0 --routes routes.json [--out docs/images]

* ``dvrp-learning-curve.png``: ``rollout/episode_return`` and ``eval/episode_return`` of a DVRP run (its TensorBoard
  files) against collected frames;
* ``dvrp-routes.png``: the first episode of a ``pipelines.evaluate --routes_out`` file (``envs.dvrp.render``);
* ``hockey-game.png``: one air-hockey game as a frame strip (``envs.hockey.render``): the weak scripted player as
  the agent (red) against the strong one (blue), seed 0.

Each figure says what drew it in its title. Nothing is trained here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def learning_curve(run: str, path: str) -> None:
    """Plot a run's training and evaluation return against frames."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pipelines.scalars import read_scalars

    scalars = read_scalars(run)
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    for tag, label in (("rollout/episode_return", "training episodes"), ("eval/episode_return", "evaluation")):
        if tag in scalars:
            frames, values = scalars[tag]
            ax.plot(frames, values, label=label, marker="o" if tag.startswith("eval") else None, ms=3)
    ax.set_xlabel("collected frames")
    ax.set_ylabel("episode return")
    name = os.path.basename(os.path.dirname(os.path.normpath(run)))  # runs/<name>/version_<k>
    ax.set_title(f"PPO on the DVRP: configs/{name}.yaml")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def routes(routes_file: str, path: str) -> None:
    """Draw the first episode of a routes file."""
    import imageio.v3 as iio

    from envs.dvrp.render import plot_routes

    with open(routes_file, encoding="utf-8") as f:
        records = json.load(f)
    record = records["episodes"][0]  # {"policy": name, "episodes": [...]}, as pipelines.evaluate writes it
    iio.imwrite(path, plot_routes(record))


def hockey_game(path: str) -> None:
    """Play one game of the weak scripted player against the strong one and draw 8 snapshots in two rows."""
    import imageio.v3 as iio
    import torch

    from envs import make_env
    from envs.hockey import BasicOpponent, HockeyConfig
    from envs.hockey.render import render_game

    env = make_env(HockeyConfig(mode="NORMAL", opponent="strong"), 1, 0)
    player = BasicOpponent(weak=True, seed=0)
    td, seen = env.reset(), []
    for _ in range(250):
        seen.append(td["observation"][0].clone())
        td["action"] = player(td["observation"])
        td = env.step(td)
        if bool(td["next", "done"].any()):
            break
        td = td["next"]
    iio.imwrite(path, render_game(torch.stack(seen), frames=8, pixels_per_metre=24.0, columns=4))


def main() -> None:
    """Draw the figures whose inputs were given (the hockey game always)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", help="a DVRP run folder (runs/<name>/version_<k>) for the learning curve")
    parser.add_argument("--routes", help="a pipelines.evaluate --routes_out file for the route plot")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "images"), help="output folder")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.run:
        learning_curve(args.run, os.path.join(args.out, "dvrp-learning-curve.png"))
    if args.routes:
        routes(args.routes, os.path.join(args.out, "dvrp-routes.png"))
    hockey_game(os.path.join(args.out, "hockey-game.png"))


if __name__ == "__main__":
    main()
