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
stops ends there. Before anything is written, the config of a trial is parsed by ``pipelines.fit``'s parser with
every parameter at each of its values (low and high, or each choice): a key that does not address the config, or a
value of the wrong type, stops the command (exit status 2, one line naming the key).

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
(run it with ``pipelines.fit --config DIR/best.yaml``; its ``trainer.default_root_dir`` is the trial's folder, where
the run takes the next ``version_<k>``), and a table of the trials is printed; the last stdout line is one JSON
object ``{"best_value", "best_params", "best_config", "trials": [...]}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import traceback
import warnings

from pipelines.threads import set_wait_policy

set_wait_policy()  # before torch is imported (pipelines/threads.py)

import lightning as L  # noqa: E402
import yaml  # noqa: E402

from pipelines.console import rounded  # noqa: E402
from pipelines.fit import fit_settings  # noqa: E402
from pipelines.run_config import CommandParser, parse_with_fit_keys  # noqa: E402
from pipelines.settings import SettingsMismatch, describe_diff, settings_diff  # noqa: E402

KINDS = ("float", "int", "categorical")
DIRECTIONS = ("maximize", "minimize")
_INDEX = re.compile(r"^(\w+)\[(\d+)\]$")


SEARCHED = "(searched)"  # a searched key's value in the study's settings (each trial sets its own)


class SearchSpaceError(ValueError):
    """A search file that names an unknown key, kind or setting (the message names it)."""


class StudyError(ValueError):
    """A ``study.db`` that cannot be read as an Optuna study, or one that records no settings."""


class TrialFailed(Exception):
    """Trial ``number``'s fit stopped with an error or by a signal; ``status`` is the command's exit status."""

    def __init__(self, message: str, status: int, number: int) -> None:
        super().__init__(message)
        self.status, self.number = status, number


class _QuietFailures(logging.Filter):
    """Drops Optuna's report of a :class:`TrialFailed` trial (its traceback, then its value): the command says it in
    one line."""

    _VALUE = re.compile(r"^Trial (\d+) failed with value ")

    def __init__(self) -> None:
        super().__init__()
        self.numbers: set[int] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], TrialFailed):
            self.numbers.add(record.exc_info[1].number)
            return False
        value = self._VALUE.match(record.getMessage())
        return not (value and int(value.group(1)) in self.numbers)


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


def _values(spec: dict) -> list:
    """The values a parameter can take that a check should try: ``low`` and ``high``, or every choice."""
    if spec["type"] == "categorical":
        return list(spec["choices"])
    kind = float if spec["type"] == "float" else int
    return [kind(spec["low"]), kind(spec["high"])]


def check_trials(configs: list[str], overrides: list[str], parameters: dict, search_path: str) -> dict:
    """Parse, with ``pipelines.fit``'s parser (nothing is built or written), the configs with the overrides, and
    then the config of a trial with every parameter at each of its values (:func:`_values`; row r sets each
    parameter to its r-th value, or its last); returns the study's settings of the config: the fit's resolved
    settings (:func:`pipelines.fit.fit_settings`) without ``trainer.default_root_dir`` (a trial's folder) and with
    every searched key set to :data:`SEARCHED`.

    Raises:
        ValueError: the configs or overrides refused by the fit's parser (one line naming the key).
        SearchSpaceError: a parameter whose key or value the fit's parser refuses (names the search file and the
            key), or a key that does not address the config.
    """
    base = fit_settings(["--config", yaml.safe_dump(merged_config(configs, overrides, {}), sort_keys=False)],
                        drop=("trainer.default_root_dir",))
    candidates = {key: _values(spec) for key, spec in parameters.items()}
    for row in range(max(len(values) for values in candidates.values())):
        values = {key: options[min(row, len(options) - 1)] for key, options in candidates.items()}
        text = yaml.safe_dump(merged_config(configs, overrides, values), sort_keys=False)
        try:
            fit_settings(["--config", text])
        except ValueError as err:
            raise SearchSpaceError(f"{search_path}: a trial's config is refused: {err}") from None
    for key in parameters:
        _set(base, key, SEARCHED)
    return base


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


def open_study(out: str, search: dict, settings: dict, pruner):
    """The study in ``out/study.db``: a new one, which records ``settings``, or the one there, whose settings must
    equal ``settings``. Nothing is written before the check (a new study's folder and database are made after it).

    Raises:
        StudyError: ``study.db`` is not a readable Optuna study (names the file and the reason), or its study records
            no settings (made by an older ``pipelines.tune``).
        SettingsMismatch: the study was made under other settings (one line: each differing key with its value there
            and now, and to use another ``--out``).
    """
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    path = os.path.abspath(os.path.join(out, "study.db"))
    name = os.path.basename(os.path.abspath(out))
    if not os.path.exists(path):
        os.makedirs(out, exist_ok=True)
    try:
        with warnings.catch_warnings():  # (heartbeats are an experimental feature of Optuna's)
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            # a trial's heartbeat stops with its process: Optuna marks a trial left running by a killed process failed
            storage = optuna.storages.RDBStorage(f"sqlite:///{path}", heartbeat_interval=5, grace_period=15)
        if name in [study.study_name for study in storage.get_all_studies()]:
            study = optuna.load_study(study_name=name, storage=storage, pruner=pruner)
            recorded = study.user_attrs.get("settings")
            if recorded is None and study.trials:
                raise StudyError(f"{path} records no settings (it was made before pipelines.tune recorded them): it "
                                 f"cannot be continued under these settings; use another --out")
            diffs = [(key.removeprefix("config."), there, now)  # (the config's keys as a fit names them)
                     for key, there, now in (settings_diff(recorded, settings) if recorded is not None else [])]
            if diffs:
                raise SettingsMismatch(f"{path} was made under other settings: {describe_diff(diffs)}; use another "
                                       f"--out")
        else:
            study = optuna.create_study(storage=storage, study_name=name, direction=search["direction"], pruner=pruner)
        if study.user_attrs.get("settings") is None:
            study.set_user_attr("settings", settings)
    except SQLAlchemyError as err:
        reason = str(getattr(err, "orig", None) or err).splitlines()[0]
        raise StudyError(f"{path} is not a readable Optuna study ({reason}): move it away or use another --out") \
            from None
    return study


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

    from pipelines.fit import main as fit

    parameters = search["parameters"]
    pruner = _pruner(search["pruner"])  # every key, value and the pruner checked, before anything is written
    settings = {"config": check_trials(configs, overrides, parameters, search_path), "search": search}
    settings = json.loads(json.dumps(settings))  # as the study's storage gives it back
    study = open_study(out, search, settings, pruner)
    study.sampler = _sampler(search["sampler"], parameters, seed=len(study.trials))
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    failures = logging.getLogger("optuna.study._optimize")  # where Optuna reports a failed trial
    if not any(isinstance(f, _QuietFailures) for f in failures.filters):
        failures.addFilter(_QuietFailures())

    def objective(trial) -> float:
        values = sample(trial, parameters)
        folder = os.path.join(out, f"trial_{trial.number}")
        text = yaml.safe_dump(merged_config(configs, overrides, {**values, "trainer.default_root_dir": folder}),
                              sort_keys=False)
        trial.set_user_attr("config", text)  # what best.yaml is made of
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "trial.yaml")
        with open(path, "w") as f:
            f.write(text)
        print(f"trial {trial.number}: {values} in {folder}", file=sys.stderr, flush=True)
        marked = f"marked FAIL in {os.path.join(out, 'study.db')} (the same command continues the study)"
        try:
            cli = fit(["--config", path], callbacks=[_Pruning(trial, search["metric"])])
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
        results = [e[search["metric"]] for e in cli.model.evaluations if search["metric"] in e]
        if not results:
            raise TrialFailed(f"trial {trial.number} ({folder}) logged no {search['metric']!r} (does the config "
                              f"evaluate with callbacks.PolicyEvaluation?); {marked}", 2, trial.number)
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
    text = best.user_attrs.get("config")
    if text is None:  # (every trial of a study with settings records its config)
        raise RuntimeError(f"trial {best.number} of {out} records no config")
    with open(best_path, "w") as f:
        f.write(f"# trial {best.number}'s config (trial_{best.number}/trial.yaml), the best of {len(complete)} "
                f"completed trials of {out}: {search['metric']} = {best.value}\n")
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
