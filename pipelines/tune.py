"""Hyper-parameter search on Optuna:

    python -m pipelines.tune --config configs/<run>.yaml --search configs/search/<run>.yaml --trials N
        [--out DIR] [fit overrides as --key=value, e.g. --data.init_args.total_frames=20000]

The search file names the metric (an evaluation metric, e.g. ``eval/episode_return``, so the config needs a
``callbacks.PolicyEvaluation``), its direction, the sampler (``tpe``, ``random``, or ``grid`` over categorical
parameters), the pruner (``median``, ``threshold`` or ``none``, with Optuna's arguments; steps are collected
frames) and the parameters: dotted config keys (``model.init_args.lr``; ``trainer.callbacks[1].init_args.x``
for a list entry) with ``{type: float|int, low, high[, log][, step]}`` or ``{type: categorical, choices: [...]}``.

Trial k trains the config with its sampled values (written as ``DIR/trial_<k>/trial.yaml``) in ``DIR/trial_<k>``
(``DIR/trial_<k>/version_0/``; default ``DIR``: ``runs/tune/<config stem>``), in this process; every evaluation is
reported to the trial and a trial the pruner stops ends there. Before anything is written, the config of a trial is
parsed by ``pipelines.fit``'s parser with every parameter at each of its values (low and high, or each choice): a
key that does not address the config, or a value of the wrong type, stops the command (exit status 2, one line
naming the key).

The study is stored in ``DIR/study.db`` (SQLite): running the command again continues it up to ``--trials``
finished trials (a trial left running by a killed process is marked failed once its heartbeat is 15 s old; one
process per study), but only under the same settings: the study records them when it is made (its user attribute
``settings``: the fit's settings as ``pipelines.fit`` resolves the configs and overrides, the searched keys left
out, and the search file), and continuing it under others stops the command before anything is written, naming
the keys that differ (exit status 2; use another ``--out``). A trial that fails (its fit stopped with an error, or
by a signal) is marked FAIL in the study and ends the command with one line (the fit's exit status: 2 for a value
the fit refused, 130 / 143 after SIGINT / SIGTERM, else 1; an unexpected error's traceback is in
``DIR/trial_<k>/error.log``); the same command then continues the study with a new trial. At the end the best
trial's config is written to ``DIR/best.yaml``: the ``trial.yaml`` that trial ran, unchanged under a comment line
(run it with ``pipelines.fit --config DIR/best.yaml``; it writes into the trial's folder, as the trial did
(:func:`pipelines.run_config.in_folder`), where the run takes the next ``version_<k>``), and a table of the trials
is printed; the last stdout line is one JSON object ``{"best_value", "best_params", "best_config", "trials":
[...]}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import traceback
from functools import partial

from pipelines.threads import set_wait_policy

set_wait_policy()  # before torch is imported (pipelines/threads.py)

import yaml  # noqa: E402

from callbacks.evaluation import evaluations  # noqa: E402
from pipelines.console import rounded  # noqa: E402
from pipelines.run_config import CommandParser, in_folder, parse_with_fit_keys  # noqa: E402
from pipelines.search_space import check_trials, merged_config, read_search, sample  # noqa: E402
from pipelines.study import QuietFailures, TrialFailed, TrialPruning, make_pruner, make_sampler, open_study  # noqa: E402


def run_study(configs: list[str], search: dict, trials: int, out: str, overrides: list[str],
              search_path: str = "the search file") -> dict:
    """Run (or continue) the study until ``trials`` trials finished (completed or pruned); returns the summary.

    Raises:
        SearchSpaceError: a parameter key or value that the fit's config refuses (before anything is written).
        ValueError: the configs or overrides refused by the fit's parser (before anything is written).
        StudyError: an unreadable ``study.db``. SettingsMismatch: a study made under other settings.
        TrialFailed: a trial's fit failed or was stopped by a signal (the trial is marked FAIL).
        RuntimeError: no trial completed.
    """
    import optuna

    parameters = search["parameters"]
    pruner = make_pruner(search["pruner"])  # every key, value and the pruner checked, before anything is written
    settings = {"config": check_trials(configs, overrides, parameters, search_path), "search": search}
    settings = json.loads(json.dumps(settings))  # as the study's storage gives it back
    study = open_study(out, search, settings, pruner)
    study.sampler = make_sampler(search["sampler"], parameters, seed=len(study.trials))
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    failures = logging.getLogger("optuna.study._optimize")  # where Optuna reports a failed trial
    if not any(isinstance(f, QuietFailures) for f in failures.filters):
        failures.addFilter(QuietFailures())
    objective = partial(run_trial, configs=configs, overrides=overrides, search=search, out=out)
    while len(study.get_trials(deepcopy=False, states=finished)) < trials:
        if search["sampler"] == "grid" and study.sampler.is_exhausted(study):
            break
        study.optimize(objective, n_trials=1, catch=())
    return write_best(study, parameters, out, search["metric"])


def run_trial(trial, configs: list[str], overrides: list[str], search: dict, out: str) -> float:
    """One trial: its config written as ``out/trial_<k>/trial.yaml`` and fitted there; returns its last evaluation
    of the search's metric.

    Raises:
        optuna.TrialPruned: the pruner stopped it.
        TrialFailed: its fit failed, was stopped by a signal or logged no value of the metric.
    """
    import optuna

    from pipelines.fit import main as fit

    values = sample(trial, search["parameters"])
    folder = os.path.join(out, f"trial_{trial.number}")
    config = merged_config(configs, overrides, values)
    text = yaml.safe_dump(merged_config(configs, overrides, {**values, **in_folder(config, folder)}), sort_keys=False)
    trial.set_user_attr("config", text)  # what best.yaml is made of
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "trial.yaml")
    with open(path, "w") as f:
        f.write(text)
    print(f"trial {trial.number}: {values} in {folder}", file=sys.stderr, flush=True)
    marked = f"marked FAIL in {os.path.join(out, 'study.db')} (the same command continues the study)"
    try:
        cli = fit(["--config", path], callbacks=[TrialPruning(trial, search["metric"])])
    except optuna.TrialPruned:
        raise
    except SystemExit as stop:  # the fit's own ending: its message is above
        status = stop.code if isinstance(stop.code, int) else 1
        if status in (128 + signal.SIGINT, 128 + signal.SIGTERM):
            raise TrialFailed(f"trial {trial.number} ({folder}) stopped by {signal.Signals(status - 128).name}: "
                              f"{marked}", status, trial.number) from None
        raise TrialFailed(f"trial {trial.number} ({folder}) failed: its fit exited with status {status} (its "
                          f"message is above); {marked}", 2 if status == 2 else 1, trial.number) from None
    except Exception as err:
        log = os.path.join(folder, "error.log")
        with open(log, "w") as f:
            f.write(traceback.format_exc())
        raise TrialFailed(f"trial {trial.number} ({folder}) failed: {type(err).__name__}: "
                          f"{' '.join(str(err).split())[:300]} (traceback in {log}); {marked}", 1,
                          trial.number) from None
    results = [e[search["metric"]] for e in evaluations(cli.trainer) if search["metric"] in e]
    if not results:
        raise TrialFailed(f"trial {trial.number} ({folder}) logged no {search['metric']!r} (does the config "
                          f"evaluate with callbacks.PolicyEvaluation?); {marked}", 2, trial.number)
    return float(results[-1])


def write_best(study, parameters: dict, out: str, metric: str) -> dict:
    """Write the best trial's config to ``out/best.yaml``; the summary: the best value, parameters and config, and
    every trial.

    Raises:
        RuntimeError: no trial completed.
    """
    import optuna

    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not complete:
        raise RuntimeError(f"no trial of {out} completed")
    best = study.best_trial
    best_values = {k: json.loads(v) if parameters[k]["type"] == "categorical" else v for k, v in best.params.items()}
    best_path = os.path.join(out, "best.yaml")
    text = best.user_attrs.get("config")
    if text is None:  # (every trial of a study with settings records its config)
        raise RuntimeError(f"trial {best.number} of {out} records no config")
    with open(best_path, "w") as f:
        f.write(f"# trial {best.number}'s config (trial_{best.number}/trial.yaml), the best of {len(complete)} "
                f"completed trials of {out}: {metric} = {best.value}\n")
        f.write(text)
    rows = [{"number": t.number, "state": t.state.name, "value": t.value,
             "params": {k: json.loads(v) if parameters[k]["type"] == "categorical" else v for k, v in t.params.items()}}
            for t in study.get_trials(deepcopy=False)]
    return {"best_value": best.value, "best_params": best_values, "best_config": best_path, "trials": rows}


def main(argv: list[str] | None = None) -> dict:
    """The command (see the module docstring); returns the summary printed last.

    Raises:
        SystemExit: 2 for a usage, search file, settings or study error (nothing written) and a trial whose value
            the fit refused; 1 when no trial completed or a trial failed otherwise; 130 / 143 for a trial stopped by
            SIGINT / SIGTERM.
    """
    parser = CommandParser(prog="python -m pipelines.tune", description=__doc__,
                           usage="%(prog)s --config CFG --search SEARCH --trials N [options] [fit overrides]",
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", required=True, help="the fit config(s) of the run")
    parser.add_argument("--search", required=True, help="the search space (configs/search/<run>.yaml)")
    parser.add_argument("--trials", type=int, required=True, help="finished trials the study should have")
    parser.add_argument("--out", default=None, help="the study's folder (default runs/tune/<config stem>)")
    args, overrides = parse_with_fit_keys(parser, argv, one_token=True)
    if args.trials < 1:
        parser.error(f"--trials must be >= 1, got {args.trials}")
    out = args.out or os.path.join("runs", "tune", os.path.splitext(os.path.basename(args.config[-1]))[0])
    try:
        for config in args.config:
            if not os.path.isfile(config):
                raise FileNotFoundError(f"--config {config!r}: no such file")
        summary = run_study(args.config, read_search(args.search), args.trials, out, overrides, args.search)
    except TrialFailed as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(err.status) from None
    except KeyboardInterrupt:  # Ctrl+C between trials (a trial's fit handles its own)
        print("error: stopped by SIGINT (the same command continues the study)", file=sys.stderr)
        raise SystemExit(130) from None
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2 if not isinstance(err, RuntimeError) else 1) from None
    print(f"{'trial':>5s} {'state':>9s} {'value':>12s}  params")
    for row in summary["trials"]:
        value = "" if row["value"] is None else f"{row['value']:12.3f}"
        print(f"{row['number']:>5d} {row['state']:>9s} {value:>12s}  {row['params']}")
    print(f"best: {summary['best_value']:.3f} with {summary['best_params']}; config: {summary['best_config']}")
    summary = rounded(summary)
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
