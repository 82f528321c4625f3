"""Every README figure that cites a results file (``results/<config>-<date>.json``, written by
``benchmarks/results.py``) equals that file: each "M ± S on seeds a-b" is the mean ± standard error of those seeds'
final policies in the file ("M ± S% against <setting> on seeds a-b": the setting's rate of wins, e.g. the hockey
wins against one opponent; "M ± S% <outcome> on seeds a-b": the rate of another outcome, e.g. feasible plans), and
"M ± S on seed a" is one seed's final policy, ± the standard error over its episodes (of a rate: the binomial one,
sqrt(p(1 - p) / episodes)); "G% below the hindsight oracle on seeds a-b" (or "on seed a") the mean of those seeds'
gaps to hindsight; each "random R" (or "random R% against <setting>") its reference row; the docs' pages cite the
same files. A setting that is not an opponent (a named evaluation, e.g. the DVRP's 100-customer days) reads "in
<setting>" where an opponent reads "against <setting>"."""

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
# "M ± S on seeds a-b" (a return), "M ± S% against <setting> on seeds a-b" (the rate of wins under one setting),
# "M ± S% <outcome> on seeds a-b" (the rate of another 0/1 outcome, e.g. the routing oracle's feasible plans),
# each also "on seed a": one seed, ± the SE over its episodes
SETTING = r"(?: (?:against|in) ([A-Za-z]\w*))?"  # a setting's name begins with a letter
FIGURE = re.compile(rf"({NUMBER}) ± (\d+(?:\.\d+)?)(%?)(?: (?!against\b|in\b)(\w+))?{SETTING} on "
                    rf"(?:seeds (\d+)-(\d+)|seed (\d+))")
# "G% below the hindsight oracle [in <setting>] on seeds a-b" (or "on seed a"): the mean of those seeds' gaps
GAP = re.compile(rf"(\d+(?:\.\d+)?)% below the hindsight oracle{SETTING} on (?:seeds (\d+)-(\d+)|seed (\d+))")


def _number(text: str) -> float:
    return float(text.replace("−", "-"))


def _digits(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def _seeds(first: str, last: str, only: str) -> list[str]:
    """The seeds a figure names: "seed a" (``only``) or "seeds a-b" (``first``-``last``, both included)."""
    return [only] if only else [str(s) for s in range(int(first), int(last) + 1)]


def _rows() -> list[tuple[str, str]]:
    lines = (REPO / "README.md").read_text().splitlines()
    return [(m, line) for line in lines for m in CITED.findall(line)]


def _rounds_to(quoted: float, value: float, digits: int) -> bool:
    """Whether ``quoted`` is ``value`` rounded to ``digits`` decimals (a value half-way, such as 66.25 to one
    decimal, may be rounded either way: its float may lie on either side)."""
    return abs(quoted - value) <= 0.5 * 10.0 ** -digits + 1e-9


def _value(row: dict, percent: str, outcome: str = "") -> float:
    """A row's return, or (``percent``) its rate of ``outcome`` in % (``<outcome>_rate``; default the wins,
    ``won_rate``)."""
    return 100.0 * row[f"{outcome or 'won'}_rate"] if percent else row["mean_return"]


def test_readme_cites_results_files():
    assert _rows(), "the README cites no results file"


@pytest.mark.parametrize("path, line", _rows(), ids=lambda v: v if v.startswith("results/") else "")
def test_each_readme_figure_equals_its_results_file(path, line):
    results = json.loads((REPO / path).read_text())
    settings = results["settings"]
    figures = FIGURE.findall(line)
    assert figures, f"no 'M ± S on seeds a-b' (or 'on seed a') beside {path}"
    for mean, se, percent, outcome, setting, first, last, only in figures:
        entry = settings[setting or "None"]
        digits = _digits(mean)
        if only:  # one seed: its value ± the SE over its episodes
            row = entry["seeds"][only]
            value = _value(row, percent, outcome)
            spread = math.sqrt(value * (100.0 - value) / results["episodes"]) if percent else row["return_se"]
            assert _rounds_to(_number(mean), value, digits), (path, mean, value)
            assert _rounds_to(float(se), spread, digits), (path, se, spread)
            continue
        values = [_value(entry["seeds"][s], percent, outcome) for s in _seeds(first, last, only)]
        assert _rounds_to(_number(mean), statistics.fmean(values), digits), (path, mean, values)
        assert _rounds_to(float(se), statistics.stdev(values) / math.sqrt(len(values)), digits), (path, se, values)
    for gap, setting, first, last, only in GAP.findall(line):
        values = [settings[setting or "None"]["seeds"][s]["gap_to_hindsight_pct"] for s in _seeds(first, last, only)]
        assert _rounds_to(float(gap), statistics.fmean(values), _digits(gap)), (path, gap, values)
    names = {name for entry in settings.values() for name in entry.get("references", {})}
    for name in names:  # a quoted reference names a setting of the file (none: its only one) that has the row
        for quoted, percent, where in re.findall(rf"\b{name} ({NUMBER})(%?){SETTING}", line):
            reference = settings[where or "None"]["references"][name]
            assert _rounds_to(_number(quoted), _value(reference, percent), _digits(quoted)), (path, name, where)
    pages = [p for p in (REPO / "docs").rglob("*.md") if path in p.read_text()]
    assert pages, f"no docs page cites {path}"
