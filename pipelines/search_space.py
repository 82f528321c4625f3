"""The search file of ``pipelines.tune``: read and checked, a trial's sampled values, a trial's config (the fit
configs, the overrides and the values, merged), and the check of every trial's config by ``pipelines.fit``'s parser
before anything is written."""

from __future__ import annotations

import json
import os
import re

import yaml

from pipelines.fit import DEFAULTS
from pipelines.fit_settings import fit_settings

KINDS = ("float", "int", "categorical")
DIRECTIONS = ("maximize", "minimize")
_INDEX = re.compile(r"^(\w+)\[(\d+)\]$")
SEARCHED = "(searched)"  # a searched key's value in the study's settings (each trial sets its own)


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
    """``configs/defaults.yaml`` and the configs (later ones over earlier ones; a ``key+:`` list is appended to the
    list before it, as LightningCLI reads it), then ``--key=value`` overrides, then ``values``, as one config. A list
    index (``trainer.callbacks[3]``) counts the defaults' entries too, as ``--print_config`` lists them.

    Raises:
        SearchSpaceError: a key that does not address the config (names it).
    """
    config: dict = {}
    for path in [DEFAULTS, *configs]:
        with open(path) as f:
            _merge(config, yaml.safe_load(f) or {})
    pairs = [o[2:].split("=", 1) for o in overrides if o.startswith("--") and "=" in o]
    for key, value in [*((k, yaml.safe_load(v)) for k, v in pairs), *values.items()]:
        _set(config, key, value)
    return config


def _merge(into: dict, new: dict) -> None:
    for key, value in new.items():
        if key.endswith("+") and isinstance(value, list):
            into[key[:-1]] = [*(into.get(key[:-1]) or []), *value]
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
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
    settings (:func:`~pipelines.fit_settings.fit_settings`) without ``trainer.default_root_dir`` (a trial's folder)
    and with every searched key set to :data:`SEARCHED`.

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
