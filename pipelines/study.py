"""The Optuna study of ``pipelines.tune``: stored in ``study.db`` under the settings it was made with, its sampler
and pruner, the callback that reports a trial's evaluations to it, and how a failed trial is told."""

from __future__ import annotations

import json
import logging
import os
import re
import warnings

import lightning as L

from callbacks.evaluation import evaluations
from pipelines.search_space import SearchSpaceError
from pipelines.settings import SettingsMismatch, describe_diff, settings_diff


class StudyError(ValueError):
    """A ``study.db`` that cannot be read as an Optuna study, or one that records no settings."""


class TrialFailed(Exception):
    """Trial ``number``'s fit stopped with an error or by a signal; ``status`` is the command's exit status."""

    def __init__(self, message: str, status: int, number: int) -> None:
        super().__init__(message)
        self.status, self.number = status, number


class QuietFailures(logging.Filter):
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


class TrialPruning(L.Callback):
    """Reports every new evaluation of ``metric`` to the trial (step: collected frames) and ends a trial the
    pruner stops (``optuna.TrialPruned``, raised out of the fit)."""

    def __init__(self, trial, metric: str) -> None:
        self.trial, self.metric, self.seen = trial, metric, 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        import optuna

        history = evaluations(trainer)
        for evaluation in history[self.seen:]:
            if self.metric in evaluation:
                self.trial.report(float(evaluation[self.metric]), int(evaluation["frames"]))
                if self.trial.should_prune():
                    raise optuna.TrialPruned(f"pruned at {int(evaluation['frames'])} frames")
        self.seen = len(history)


def make_pruner(spec: dict):
    """Optuna's pruner of the search file's ``pruner`` spec (``type`` and Optuna's arguments).

    Raises:
        SearchSpaceError: an unknown type, or arguments Optuna refuses.
    """
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


def make_sampler(kind: str, parameters: dict, seed: int):
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
