"""Telling two runs' settings apart: what a fit's command line resolves to
(:func:`~pipelines.fit_settings.fit_settings`) is compared key by key (:func:`settings_diff`, said in one line by
:func:`describe_diff`), and recorded beside a study's runs (``settings.json``: :func:`read_settings`,
:func:`write_settings`), so that ``pipelines.seeds`` and ``pipelines.tune`` never reuse a run made under other
settings, and a resume can name the first key its checkpoint was trained with otherwise
(:mod:`pipelines.checkpoints`)."""

from __future__ import annotations

import json
import os
from typing import Any

SETTINGS_FILE = "settings.json"  # the settings a seed's run (in its folder) or a study (in its folder) was made with
MISSING = object()  # a key one of two settings lacks


class SettingsMismatch(ValueError):
    """A folder (a seed's run, a study) that was made under other settings (the message names the keys)."""


def settings_diff(there: Any, now: Any, key: str = "") -> list[tuple[str, Any, Any]]:
    """The dotted keys (list entries as ``key[i]``) whose values differ between two settings, with both values
    (a key one side lacks has :data:`MISSING` there), in the order of ``now``'s keys. A key one side lacks and the
    other holds as null is no difference: an option added to ``pipelines.fit`` since (e.g. ``weights_from``), unset,
    leaves the settings recorded before it as they were."""
    if isinstance(there, dict) and isinstance(now, dict):
        diffs = []
        for name in [*now, *(k for k in there if k not in now)]:
            if there.get(name) is None and now.get(name) is None:  # (null, or absent)
                continue
            diffs += settings_diff(there.get(name, MISSING), now.get(name, MISSING),
                                   f"{key}.{name}" if key else str(name))
        return diffs
    if isinstance(there, list) and isinstance(now, list) and len(there) == len(now):
        return [d for i, (a, b) in enumerate(zip(there, now, strict=True)) for d in settings_diff(a, b, f"{key}[{i}]")]
    same = there == now and isinstance(there, bool) == isinstance(now, bool)  # (True == 1 in Python)
    return [] if same else [(key, there, now)]


def describe_diff(diffs: list[tuple[str, Any, Any]], most: int = 6) -> str:
    """``key=<value there> there, <value now> now`` for the first ``most`` differences, on one line."""

    def show(value: Any) -> str:
        text = "unset" if value is MISSING else json.dumps(value)
        return text if len(text) <= 80 else text[:77] + "..."

    parts = [f"{key}={show(a)} there, {show(b)} now" for key, a, b in diffs[:most]]
    return "; ".join(parts) + (f"; and {len(diffs) - most} more keys" if len(diffs) > most else "")


def read_settings(folder: str) -> dict | None:
    """The settings recorded in ``folder/settings.json``, or None when it records none.

    Raises:
        ValueError: the file is not readable JSON (names it).
    """
    path = os.path.join(folder, SETTINGS_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as err:
        raise ValueError(f"{path} is not a readable settings record ({err}); use another --out") from None


def write_json(path: str, data: Any) -> None:
    """``data`` as JSON at ``path``, written whole or not at all (a temporary file beside it, renamed)."""
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=1)
    os.replace(path + ".tmp", path)


def write_settings(folder: str, settings: dict) -> None:
    """``folder/settings.json``, written whole or not at all (:func:`write_json`)."""
    write_json(os.path.join(folder, SETTINGS_FILE), settings)
