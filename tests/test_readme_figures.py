"""Every README figure that cites a results file (``results/<config>-<date>.json``, written by
``benchmarks/results.py``) equals that file: each "M ± S on seeds a-b" is the mean ± standard error of those seeds'
final policies in the file ("M ± S% against <setting> on seeds a-b": the setting's rate of wins, e.g. the hockey
wins against one opponent), and each "random R" (or "random R% against <setting>") its reference row; the docs'
pages cite the same files."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CITED = re.compile(r"`(results/[\w.-]+\.json)`")
NUMBER = r"−?\d+(?:\.\d+)?"
# "M ± S on seeds a-b" (a return), "M ± S% against <setting> on seeds a-b" (an outcome's rate under one setting)
FIGURE = re.compile(rf"({NUMBER}) ± (\d+(?:\.\d+)?)(%?)(?: against (\w+))? on seeds (\d+)-(\d+)")


def _number(text: str) -> float:
    return float(text.replace("−", "-"))


def _digits(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def _rows() -> list[tuple[str, str]]:
    lines = (REPO / "README.md").read_text().splitlines()
    return [(m, line) for line in lines for m in CITED.findall(line)]


def _value(row: dict, percent: str) -> float:
    """A row's return, or (``percent``) its rate of wins in % (``won_rate``)."""
    return 100.0 * row["won_rate"] if percent else row["mean_return"]


def test_readme_cites_results_files():
    assert _rows(), "the README cites no results file"


@pytest.mark.parametrize("path, line", _rows(), ids=lambda v: v if v.startswith("results/") else "")
def test_each_readme_figure_equals_its_results_file(path, line):
    settings = json.loads((REPO / path).read_text())["settings"]
    figures = FIGURE.findall(line)
    assert figures, f"no 'M ± S on seeds a-b' beside {path}"
    for mean, se, percent, setting, first, last in figures:
        entry = settings[setting or "None"]
        values = [_value(entry["seeds"][str(s)], percent) for s in range(int(first), int(last) + 1)]
        digits = _digits(mean)
        assert _number(mean) == round(statistics.fmean(values), digits), (path, mean, values)
        assert float(se) == round(statistics.stdev(values) / math.sqrt(len(values)), digits), (path, se, values)
    names = {name for entry in settings.values() for name in entry.get("references", {})}
    for name in names:  # a quoted reference names a setting of the file (none: its only one) that has the row
        for quoted, percent, where in re.findall(rf"\b{name} ({NUMBER})(%?)(?: against (\w+))?", line):
            reference = settings[where or "None"]["references"][name]
            assert _number(quoted) == round(_value(reference, percent), _digits(quoted)), (path, name, where)
    pages = [p for p in (REPO / "docs").rglob("*.md") if path in p.read_text()]
    assert pages, f"no docs page cites {path}"
