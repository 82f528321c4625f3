"""Hyper-parameter search on Optuna:

    python -m pipelines.tune --config configs/<run>.yaml --search configs/search/<run>.yaml --trials N
        [--out DIR] [fit overrides as --key=value, e.g. --data.init_args.total_frames=20000]

The search file names the metric (an evaluation metric, e.g. ``eval/episode_return``, so the config needs a
``callbacks.PolicyEvaluation``), its direction, the sampler (``tpe``, ``random``, or ``grid`` over categorical
parameters), the pruner (``median``, ``threshold`` or ``none``, with Optuna's arguments; steps are collected
frames) and the parameters: dotted config keys (``model.init_args.lr``; ``trainer.callbacks[1].init_args.x``
for a list entry) with ``{type: float|int, low, high[, log][, step]}`` or ``{type: categorical, choices: [...]}``.

Trial k trains the config with its sampled values (written as ``DIR/trial_<k>/trial.yaml``) in ``DIR/trial_<k>`` (default ``DIR``:
``runs/tune/<config stem>``), in this process; every evaluation is reported to the trial and a trial the pruner
stops ends there. The study is stored in ``DIR/study.db`` (SQLite): running the command again continues it up to
``--trials`` finished trials (a trial left running by a killed process is marked failed once its heartbeat is
15 s old; one process per study). At the end the best
trial's config is written to ``DIR/best.yaml`` (the given configs, the overrides and the best values; run it with
``pipelines.fit --config DIR/best.yaml``), and a table of the trials is printed; the last stdout line is one JSON
object ``{"best_value", "best_params", "best_config", "trials": [...]}``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

import lightning as L
import yaml

from pipelines.console import rounded
from pipelines.run_config import parse_with_fit_keys

KINDS = ("float", "int", "categorical")
DIRECTIONS = ("maximize", "minimize")
_INDEX = re.compile(r"^(\w+)\[(\d+)\]$")


class SearchSpaceError(ValueError):
    """A search file that names an unknown key, kind or setting (the message names it)."""


def read_search(path: str) -> dict:
    """The search file, checked: ``metric`` (str), ``direction``, ``sampler``, ``pruner``, ``parameters``.

    Raises:
        FileNotFoundError: no such file. SearchSpaceError: what is wrong, with the allowed values.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--search {path!r}: no such file")
    with open(path) as f:
        search = yaml.safe_load(f) or {}
    unknown = set(search) - {"metric", "direction", "sampler", "pruner", "parameters"}
    if unknown:
        raise SearchSpaceError(f"{path}: unknown keys {sorted(unknown)}; allowed: metric, direction, sampler, pruner, "
                               f"parameters")
    search.setdefault("metric", "eval/episode_return")
    search.setdefault("direction", "maximize")
    search.setdefault("sampler", "tpe")
    search.setdefault("pruner", {"type": "median"})
    if search["direction"] not in DIRECTIONS:
        raise SearchSpaceError(f"{path}: direction={search['direction']!r}; allowed: {', '.join(DIRECTIONS)}")
    if search["sampler"] not in ("tpe", "random", "grid"):
        raise SearchSpaceError(f"{path}: sampler={search['sampler']!r}; allowed: tpe, random, grid")
    if not isinstance(search.get("parameters"), dict) or not search["parameters"]:
        raise SearchSpaceError(f"{path}: parameters must map dotted config keys to their ranges")
    for key, spec in search["parameters"].items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if kind not in KINDS:
            raise SearchSpaceError(f"{path}: parameters.{key}.type={kind!r}; allowed: {', '.join(KINDS)}")
        needed = {"choices"} if kind == "categorical" else {"low", "high"}
        if not needed <= set(spec) or (search["sampler"] == "grid" and kind != "categorical"):
            raise SearchSpaceError(f"{path}: parameters.{key} ({kind}) needs {sorted(needed)}"
                                   + ("; the grid sampler takes categorical parameters only" if kind != "categorical"
                                      else ""))
    return search


def sample(trial, parameters: dict) -> dict:
    """The trial's values of every parameter (categorical choices of any YAML value, e.g. lists)."""
    values = {}
    for key, spec in parameters.items():
        if spec["type"] == "categorical":
            encoded = [json.dumps(c) for c in spec["choices"]]  # Optuna's choices are scalars
            values[key] = json.loads(trial.suggest_categorical(key, encoded))
        elif spec["type"] == "float":
            values[key] = trial.suggest_float(key, float(spec["low"]), float(spec["high"]), log=bool(spec.get("log")),
                                              step=spec.get("step"))
        else:
            values[key] = trial.suggest_int(key, int(spec["low"]), int(spec["high"]), log=bool(spec.get("log")),
                                            step=int(spec.get("step", 1)))
    return values


def merged_config(configs: list[str], overrides: list[str], values: dict) -> dict:
    """The configs (later ones over earlier ones), then ``--key=value`` overrides, then ``values``, as one config.

    Raises:
        SearchSpaceError: a key that does not address the config (names it).
    """
    config: dict = {}
    for path in configs:
        with open(path) as f:
            _merge(config, yaml.safe_load(f) or {})
    pairs = [o[2:].split("=", 1) for o in overrides if o.startswith("--") and "=" in o]
    for key, value in [*((k, yaml.safe_load(v)) for k, v in pairs), *values.items()]:
        _set(config, key, value)
    return config


def _merge(into: dict, new: dict) -> None:
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _set(config: dict, key: str, value) -> None:
    node = config
    parts = key.split(".")
    for i, part in enumerate(parts):
        match = _INDEX.match(part)
        last = i == len(parts) - 1
        if match:
            name, index = match.group(1), int(match.group(2))
            entries = node.get(name) if isinstance(node, dict) else None
            if not isinstance(entries, list) or index >= len(entries):
                raise SearchSpaceError(f"{key}: {name} has no entry {index}")
            if last:
                entries[index] = value
            node = entries[index]
        elif last:
            node[part] = value
        else:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SearchSpaceError(f"{key}: {part} is not a section")


class _Pruning(L.Callback):
    """Reports every new evaluation of ``metric`` to the trial (step: collected frames) and ends a trial the
    pruner stops (``optuna.TrialPruned``, raised out of the fit)."""

    def __init__(self, trial, metric: str) -> None:
        self.trial, self.metric, self.seen = trial, metric, 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        import optuna

        for evaluation in pl_module.evaluations[self.seen:]:
            if self.metric in evaluation:
                self.trial.report(float(evaluation[self.metric]), int(evaluation["frames"]))
                if self.trial.should_prune():
                    raise optuna.TrialPruned(f"pruned at {int(evaluation['frames'])} frames")
        self.seen = len(pl_module.evaluations)


def _pruner(spec: dict):
    import optuna

    spec = dict(spec or {"type": "none"})
    kind = spec.pop("type", "none")
    pruners = {"median": optuna.pruners.MedianPruner, "threshold": optuna.pruners.ThresholdPruner,
               "none": optuna.pruners.NopPruner}
    if kind not in pruners:
        raise SearchSpaceError(f"pruner.type={kind!r}; allowed: {', '.join(pruners)}")
    try:
        return pruners[kind](**spec)
    except (TypeError, ValueError) as err:
        raise SearchSpaceError(f"pruner {kind} {spec}: {err}") from None


def _sampler(kind: str, parameters: dict, seed: int):
    """Optuna's sampler of that kind; TPE and random are seeded ``seed`` (the trials the study has already: a
    continued study does not draw its first trials' values again)."""
    import optuna

    if kind == "grid":
        return optuna.samplers.GridSampler({k: [json.dumps(c) for c in v["choices"]] for k, v in parameters.items()},
                                           seed=0)
    return (optuna.samplers.TPESampler if kind == "tpe" else optuna.samplers.RandomSampler)(seed=seed)


def run_study(configs: list[str], search: dict, trials: int, out: str, overrides: list[str]) -> dict:
    """Run (or continue) the study until ``trials`` trials finished (completed or pruned); returns the summary.

    Raises:
        SearchSpaceError: a parameter key that does not address the config.
        RuntimeError: no trial completed.
    """
    import optuna

    from pipelines.fit import main as fit

    parameters = search["parameters"]
    for parameter in parameters:  # every key addresses the config and the pruner is valid, before anything is written
        merged_config(configs, overrides, {parameter: None})
    pruner = _pruner(search["pruner"])
    os.makedirs(out, exist_ok=True)
    # a trial's heartbeat stops with its process: Optuna marks a trial left running by a killed process failed
    storage = optuna.storages.RDBStorage(f"sqlite:///{os.path.abspath(os.path.join(out, 'study.db'))}",
                                         heartbeat_interval=5, grace_period=15)
    study = optuna.create_study(storage=storage, study_name=os.path.basename(os.path.abspath(out)),
                                direction=search["direction"], pruner=pruner, load_if_exists=True)
    study.sampler = _sampler(search["sampler"], parameters, seed=len(study.trials))
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)

    def objective(trial) -> float:
        values = sample(trial, parameters)
        folder = os.path.join(out, f"trial_{trial.number}")
        config = merged_config(configs, overrides, {**values, "trainer.default_root_dir": folder})
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "trial.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(config, f, sort_keys=False)
        print(f"trial {trial.number}: {values} in {folder}", file=sys.stderr, flush=True)
        cli = fit(["--config", path], callbacks=[_Pruning(trial, search["metric"])])
        results = [e[search["metric"]] for e in cli.model.evaluations if search["metric"] in e]
        if not results:
            raise SearchSpaceError(f"trial {trial.number} logged no {search['metric']!r} (does the config evaluate "
                                   f"with callbacks.PolicyEvaluation?)")
        return float(results[-1])

    while len(study.get_trials(deepcopy=False, states=finished)) < trials:
        if search["sampler"] == "grid" and study.sampler.is_exhausted(study):
            break
        study.optimize(objective, n_trials=1, catch=())
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not complete:
        raise RuntimeError(f"no trial of {out} completed")
    best = study.best_trial
    best_values = {k: json.loads(v) if parameters[k]["type"] == "categorical" else v for k, v in best.params.items()}
    best_path = os.path.join(out, "best.yaml")
    with open(best_path, "w") as f:
        f.write(f"# best of {len(complete)} completed trials of {out}: trial {best.number}, "
                f"{search['metric']} = {best.value}\n")
        yaml.safe_dump(merged_config(configs, overrides, best_values), f, sort_keys=False)
    rows = [{"number": t.number, "state": t.state.name, "value": t.value,
             "params": {k: json.loads(v) if parameters[k]["type"] == "categorical" else v for k, v in t.params.items()}}
            for t in study.get_trials(deepcopy=False)]
    return {"best_value": best.value, "best_params": best_values, "best_config": best_path, "trials": rows}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m pipelines.tune", description=__doc__,
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
        summary = run_study(args.config, read_search(args.search), args.trials, out, overrides)
    except (FileNotFoundError, SearchSpaceError, RuntimeError) as err:
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
