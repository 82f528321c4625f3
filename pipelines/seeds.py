"""Several seeds of one run, and their summary:

    python -m pipelines.seeds --config configs/<run>.yaml --seeds 0 1 2 [--parallel N] [--out DIR]
        [--metric eval/episode_return] [fit overrides, e.g. --data.init_args.total_frames=100000]

Seed S is ``pipelines.fit --config ... --seed_everything=S`` (one seed seeds the whole run:
:func:`pipelines.run_config.share_seed`) in its own folder ``DIR/seed_<S>`` (the run in ``DIR/seed_<S>/version_0/``:
:func:`pipelines.run_config.in_folder`; default ``DIR``: ``runs/seeds/<config stem>``), its console output in
``DIR/seed_<S>/fit.log``; ``--parallel N`` runs N at once (each with the config's ``num_threads``, its idle threads
sleeping at once: :func:`pipelines.threads.side_by_side_env`). Then the summary, from each run's TensorBoard files:
the final and the best value of ``--metric`` (default ``eval/episode_return``, else ``rollout/episode_return`` where
a run has no evaluations, else ``eval/cost_km`` for a routing oracle's REINFORCE run, whose best is its least) per
seed, their mean ± standard error over seeds, and ``DIR/curves.png``, the metric against collected frames for every
seed and their mean. The last stdout line is one JSON object (also written to
``DIR/summary.json``).

A seed whose folder holds a finished run (``DIR/seed_<S>/finished``) is read, not run again, so a study can be
extended with more seeds or continued after an interruption, but only under the same settings: each seed's folder and
the study's record the settings they were run with (``settings.json``: the fit's settings as ``pipelines.fit``
resolves them, :func:`~pipelines.fit_settings.fit_settings`), and a folder run with other settings stops the command
before anything starts, naming the keys that differ (exit status 2; use another ``--out``), as does an override of
where a fit writes (``trainer.default_root_dir``, the logger's ``save_dir``). A folder holding an unfinished run is
refused (resume it with ``pipelines.fit --ckpt_path`` or remove it).

SIGTERM or SIGINT (Ctrl+C) is handed on to the running fits (each in its own process group, so a terminal's Ctrl+C
reaches them once), which stop after their current step and write ``last.ckpt``; the command waits for them (at most
:data:`~pipelines.seed_fits.STOP_WAIT_S` seconds, then kills them), marks the seeds whose fit ended with status 0
finished and exits with 128 + the signal's number (130 / 143), starting no further seed; a second Ctrl+C stops the fits
at once. A command killed outright (SIGKILL) takes its fits with it: each gets SIGTERM when the command dies
(:func:`pipelines.stop_signals.die_with_parent`). A seed's folder without the ``finished`` mark whose run reached the
budget (its ``last.ckpt`` has ``data.total_frames`` frames) is finished too: marked, and read back. Exit status
otherwise: 0; 1 when a seed's fit failed (its log is named, with the fit's ``error:`` line); 2 for a usage or
settings error.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import sys

from pipelines.threads import set_wait_policy

set_wait_policy()  # before torch is imported (pipelines/threads.py)

from modules.loading import read_checkpoint  # noqa: E402
from pipelines.console import json_line, rounded  # noqa: E402
from pipelines.fit_settings import fit_settings  # noqa: E402
from pipelines.run_config import FIT_KEYS, CommandParser, parse_with_fit_keys  # noqa: E402
from pipelines.seed_fits import Stopped, run_fits  # noqa: E402
from pipelines.seed_summary import DEFAULT_METRICS, plot, summarise  # noqa: E402
from pipelines.settings import (  # noqa: E402
    SETTINGS_FILE,
    SettingsMismatch,
    describe_diff,
    read_settings,
    settings_diff,
    write_settings,
)

PER_SEED_KEYS = ("seed_everything", "trainer.default_root_dir")  # settings that differ between seeds by design


def check_settings(out: str, folders: dict[int, str], settings: dict) -> None:
    """Check, before anything is started or written, that the study in ``out`` and every seed folder in it (the
    seeds asked for, then any other ``seed_<S>``) were made under ``settings``.

    Raises:
        SettingsMismatch: a folder made under other settings (one line: the folder, each differing key with its
            value there and now, and to use another ``--out``); a finished seed whose folder records no settings
            (made by an older ``pipelines.seeds``: they cannot be compared).
        ValueError: an unreadable settings record.
    """
    others = sorted(os.path.join(out, n) for n in (os.listdir(out) if os.path.isdir(out) else [])
                    if n.startswith("seed_") and os.path.join(out, n) not in folders.values())
    for folder in [*folders.values(), *others]:
        if not os.path.isdir(folder):
            continue
        recorded = read_settings(folder)
        if recorded is None:
            if os.path.isfile(os.path.join(folder, "finished")):
                raise SettingsMismatch(f"{folder} records no settings (it was run before {SETTINGS_FILE} was "
                                       f"written): it cannot be reused under these settings; use another --out")
            continue  # a run that never got started: run_seeds refuses it as unfinished
        diffs = settings_diff(recorded, settings)
        if diffs:
            raise SettingsMismatch(f"{folder} was run with other settings: {describe_diff(diffs)}; use another --out")
    recorded = read_settings(out) if os.path.isdir(out) else None
    diffs = settings_diff(recorded, settings) if recorded is not None else []
    if diffs:
        raise SettingsMismatch(f"{out} is a study run with other settings ({SETTINGS_FILE}): {describe_diff(diffs)}; "
                               f"use another --out")


def run_seeds(configs: list[str], seeds: list[int], out: str, parallel: int, overrides: list[str],
              settings: dict) -> dict[int, str]:
    """Fit every seed not finished yet under ``settings`` (:func:`~pipelines.fit_settings.fit_settings` of the fit's
    command line without its per-seed keys), ``parallel`` at once; returns ``{seed: folder}``. A finished seed run
    under the same settings is read back (and says so). Each seed's folder and ``out`` record ``settings`` before a
    fit starts.

    Raises:
        SettingsMismatch: a folder in ``out`` made under other settings (see :func:`check_settings`).
        ValueError: a seed's folder holds an unfinished run.
        RuntimeError: a fit failed (names its seed, exit status and log).
        SystemExit: 128 + the signal's number after SIGTERM or SIGINT (the fits were stopped first).
    """
    folders = {seed: os.path.join(out, f"seed_{seed}") for seed in seeds}
    check_settings(out, folders, settings)
    budget = ((settings.get("data") or {}).get("init_args") or {}).get("total_frames")
    for seed in seeds:  # a run that reached its budget is finished, whether or not this command saw it end
        if not os.path.isfile(os.path.join(folders[seed], "finished")) and reached(folders[seed], budget):
            open(os.path.join(folders[seed], "finished"), "w").close()
    todo = [seed for seed in seeds if not os.path.isfile(os.path.join(folders[seed], "finished"))]
    for seed in todo:
        if os.path.exists(folders[seed]):
            raise ValueError(f"{folders[seed]} holds an unfinished run of seed {seed}: resume it with pipelines.fit "
                             f"--ckpt_path, or remove the folder")
    for seed in seeds:
        if seed not in todo:
            print(f"seed {seed}: finished under the same settings, read back", file=sys.stderr, flush=True)
    os.makedirs(out, exist_ok=True)
    if read_settings(out) is None:
        write_settings(out, settings)
    try:
        failed = run_fits(configs, todo, folders, parallel, overrides, settings)
    except Stopped as stopped:
        signum = stopped.signum
        done = [seed for seed in seeds if os.path.isfile(os.path.join(folders[seed], "finished"))]
        print(f"stopped by {signal.Signals(signum).name}; finished seeds: {done or 'none'} (the same command reads "
              f"them back); an unfinished seed's folder holds its last checkpoint if one was written (resume it with "
              f"pipelines.fit --ckpt_path, or remove it)", file=sys.stderr, flush=True)
        raise SystemExit(128 + signum) from None
    if failed:
        raise RuntimeError("fit failed for " + ", ".join(failed))
    return folders


def last_checkpoint(folder: str) -> str | None:
    """The newest ``last.ckpt`` of the run in a seed's ``folder`` (``version_<k>/checkpoints/``; any depth, as
    older studies wrote ``runs/<name>/version_<k>/checkpoints/``), or None."""
    paths = sorted(glob.glob(os.path.join(glob.escape(folder), "**", "checkpoints", "last.ckpt"), recursive=True),
                   key=os.path.getmtime)
    return paths[-1] if paths else None


def reached(folder: str, total_frames: object) -> bool:
    """Whether the run in a seed's ``folder`` trained ``total_frames`` frames: its :func:`last_checkpoint` (read as
    plain data) records as many collected frames."""
    path = last_checkpoint(folder)
    if not isinstance(total_frames, int) or path is None:
        return False
    try:
        state = read_checkpoint(path, "checkpoint").get("rl_state") or {}
    except (ValueError, AttributeError):
        return False
    frames = state.get("collected_frames")
    return isinstance(frames, int) and frames >= total_frames


def main(argv: list[str] | None = None) -> dict:
    """The command (see the module docstring); returns the summary printed last.

    Raises:
        SystemExit: 2 for a usage error, a fit setting the fit's parser refuses or a folder made under other
            settings; 1 when a fit failed; 128 + the signal's number after SIGTERM / SIGINT.
    """
    parser = CommandParser(prog="python -m pipelines.seeds", description=__doc__,
                           usage="%(prog)s --config CFG --seeds S [S ...] [options] [fit overrides]",
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", required=True, help="the fit config(s) of the run")
    parser.add_argument("--seeds", type=int, nargs="+", required=True, help="the seeds (seed_everything values)")
    parser.add_argument("--parallel", type=int, default=1, help="fits at once (default 1)")
    parser.add_argument("--out", default=None, help="the study's folder (default runs/seeds/<config stem>)")
    parser.add_argument("--metric", default=None, help="the scalar summarised (default: the first of "
                        f"{', '.join(DEFAULT_METRICS)} that every seed logged)")
    args, overrides = parse_with_fit_keys(parser, argv, tuple(k for k in FIT_KEYS if k != "--seed_everything"))
    if args.parallel < 1 or len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--parallel must be >= 1 and --seeds distinct (got {args.parallel}, {args.seeds})")
    for config in (c for c in args.config if not os.path.isfile(c)):
        parser.error(f"--config {config!r}: no such file")
    for arg in overrides:  # a fit writing elsewhere would leave its seed's folder empty
        if arg.split("=")[0].lstrip("-") in ("trainer.default_root_dir", "trainer.logger.init_args.save_dir"):
            parser.error(f"{arg.split('=')[0]}: each seed's run is written under --out (DIR/seed_<S>): give --out")
    stem = os.path.splitext(os.path.basename(args.config[-1]))[0]
    out = args.out or os.path.join("runs", "seeds", stem)
    try:
        settings = fit_settings([a for c in args.config for a in ("--config", c)] + overrides, drop=PER_SEED_KEYS)
        folders = run_seeds(args.config, args.seeds, out, args.parallel, overrides, settings)
        summary = summarise(folders, args.metric)
    except (ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2 if isinstance(err, ValueError) else 1) from None
    plot(summary, os.path.join(out, "curves.png"), f"{stem}: {len(args.seeds)} seeds")
    print(f"{'seed':>6s} {'final':>12s} {'best':>12s} {'frames':>10s}")
    for seed, row in summary["seeds"].items():
        print(f"{seed:>6d} {row['final']:12.3f} {row['best']:12.3f} {row['frames']:>10d}")
    spread = (f"± {summary['se']:.3f} (mean ± SE over {len(args.seeds)} seeds)" if len(args.seeds) > 1
              else "(one seed: no SE over seeds)")
    print(f"{summary['metric']}: final {summary['mean']:.3f} {spread}; curves: {os.path.join(out, 'curves.png')}")
    result = rounded({k: v for k, v in summary.items() if k != "curves"})
    line, nonfinite = json_line(result)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(json.loads(line), f, indent=1)
    print(line)
    nonfinite = [key for key in nonfinite if key != "se"]  # (one seed has no standard error: null)
    if nonfinite:  # (null in the JSON): a result that is no number is no result
        print(f"error: results that are not finite numbers: {', '.join(nonfinite[:5])}", file=sys.stderr)
        raise SystemExit(1)
    return result


if __name__ == "__main__":
    main()
