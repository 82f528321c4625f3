"""Several seeds of one run, and their summary:

    python -m pipelines.seeds --config configs/<run>.yaml --seeds 0 1 2 [--parallel N] [--out DIR]
        [--metric eval/episode_return] [fit overrides, e.g. --data.init_args.total_frames=100000]

Seed S is ``pipelines.fit --config ... --seed_everything=S`` (one seed seeds the whole run:
:func:`pipelines.run_config.share_seed`) in its own folder ``DIR/seed_<S>`` (default ``DIR``:
``runs/seeds/<config stem>``), its console output in ``DIR/seed_<S>/fit.log``; ``--parallel N`` runs N at once (each
with the config's ``num_threads``, its idle threads sleeping at once: :func:`pipelines.threads.side_by_side_env`).
Then the summary, from each run's TensorBoard files: the final and the best value of ``--metric`` (default
``eval/episode_return``, else ``rollout/episode_return`` where a run has no evaluations) per seed, their mean ±
standard error over seeds, and ``DIR/curves.png``, the metric against collected frames for every seed and their
mean. The last stdout line is one JSON object (also written to ``DIR/summary.json``).

A seed whose folder holds a finished run (``DIR/seed_<S>/finished``) is read, not run again, so a study can be
extended with more seeds or continued after an interruption; a folder holding an unfinished run is refused
(resume it with ``pipelines.fit --ckpt_path`` or remove it). Exit status: 0, or 1 when a seed's fit failed (its
log is named).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

from pipelines.console import rounded
from pipelines.run_config import FIT_KEYS, parse_with_fit_keys
from pipelines.scalars import read_scalars
from pipelines.threads import side_by_side_env

FALLBACK_METRIC = "rollout/episode_return"


def run_seeds(configs: list[str], seeds: list[int], out: str, parallel: int, overrides: list[str]) -> dict[int, str]:
    """Fit every seed not finished yet, ``parallel`` at once; returns ``{seed: folder}``.

    Raises:
        ValueError: a seed's folder holds an unfinished run.
        RuntimeError: a fit failed (names its seed, exit status and log).
    """
    folders = {seed: os.path.join(out, f"seed_{seed}") for seed in seeds}
    todo = [seed for seed in seeds if not os.path.isfile(os.path.join(folders[seed], "finished"))]
    for seed in todo:
        if os.path.exists(folders[seed]):
            raise ValueError(f"{folders[seed]} holds an unfinished run of seed {seed}: resume it with pipelines.fit "
                             f"--ckpt_path, or remove the folder")
    running: dict[int, tuple[subprocess.Popen, object]] = {}
    try:
        failed = _run(configs, todo, folders, parallel, overrides, running)
    except KeyboardInterrupt:  # the fits got the SIGINT too: each stops at its next step and writes last.ckpt
        for proc, _ in running.values():
            proc.wait(timeout=120)
        print("stopped by SIGINT; the unfinished seeds' folders hold their last checkpoints", file=sys.stderr)
        raise SystemExit(130) from None
    if failed:
        raise RuntimeError("fit failed for " + ", ".join(failed))
    return folders


def _run(configs: list[str], todo: list[int], folders: dict[int, str], parallel: int, overrides: list[str],
         running: dict) -> list[str]:
    """Start and reap the fits; returns the failed ones' descriptions."""
    failed: list[str] = []
    env = side_by_side_env() if parallel > 1 else None  # (fits at once: threads sleep when idle)
    while todo or running:
        while todo and len(running) < parallel:
            seed = todo.pop(0)
            os.makedirs(folders[seed])
            log = open(os.path.join(folders[seed], "fit.log"), "w")
            command = [sys.executable, "-m", "pipelines.fit", *(a for c in configs for a in ("--config", c)),
                       f"--seed_everything={seed}", f"--trainer.default_root_dir={folders[seed]}", *overrides]
            running[seed] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), log)
            print(f"seed {seed}: running in {folders[seed]}", file=sys.stderr, flush=True)
        time.sleep(0.2)
        for seed, (proc, log) in list(running.items()):
            if proc.poll() is None:
                continue
            log.close()
            del running[seed]
            if proc.returncode == 0:
                open(os.path.join(folders[seed], "finished"), "w").close()
                print(f"seed {seed}: finished", file=sys.stderr, flush=True)
            else:
                failed.append(f"seed {seed} (exit status {proc.returncode}, log {log.name})")
    return failed


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
            raise ValueError(f"seed {seed} ({folders[seed]}) logged no {metric!r}; it has: {', '.join(sorted(scalars))}")
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
        ax.plot(steps, values, linewidth=0.8, alpha=0.6, label=f"seed {seed}")
    common = sorted(set.intersection(*(set(steps.tolist()) for steps, _ in curves.values())))
    if common:
        mean = np.mean([np.interp(common, steps, values) for steps, values in curves.values()], axis=0)
        ax.plot(common, mean, color="black", linewidth=2.0, label="mean")
    ax.set_xlabel("frames")
    ax.set_ylabel(summary["metric"])
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m pipelines.seeds", description=__doc__,
                                     usage="%(prog)s --config CFG --seeds S [S ...] [options] [fit overrides]",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", required=True, help="the fit config(s) of the run")
    parser.add_argument("--seeds", type=int, nargs="+", required=True, help="the seeds (seed_everything values)")
    parser.add_argument("--parallel", type=int, default=1, help="fits at once (default 1)")
    parser.add_argument("--out", default=None, help="the study's folder (default runs/seeds/<config stem>)")
    parser.add_argument("--metric", default=None, help="the scalar summarised (default eval/episode_return, else "
                                                       f"{FALLBACK_METRIC})")
    args, overrides = parse_with_fit_keys(parser, argv, tuple(k for k in FIT_KEYS if k != "--seed_everything"))
    if args.parallel < 1 or len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--parallel must be >= 1 and --seeds distinct (got {args.parallel}, {args.seeds})")
    for config in args.config:
        if not os.path.isfile(config):
            parser.error(f"--config {config!r}: no such file")
    stem = os.path.splitext(os.path.basename(args.config[-1]))[0]
    out = args.out or os.path.join("runs", "seeds", stem)
    try:
        folders = run_seeds(args.config, args.seeds, out, args.parallel, overrides)
        summary = summarise(folders, args.metric)
    except (ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2 if isinstance(err, ValueError) else 1) from None
    plot(summary, os.path.join(out, "curves.png"), f"{stem}: {len(args.seeds)} seeds")
    print(f"{'seed':>6s} {'final':>12s} {'best':>12s} {'frames':>10s}")
    for seed, row in summary["seeds"].items():
        print(f"{seed:>6d} {row['final']:12.3f} {row['best']:12.3f} {row['frames']:>10d}")
    print(f"{summary['metric']}: final {summary['mean']:.3f} ± {summary['se']:.3f} (mean ± SE over "
          f"{len(args.seeds)} seeds); curves: {os.path.join(out, 'curves.png')}")
    result = rounded({k: v for k, v in summary.items() if k != "curves"})
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
