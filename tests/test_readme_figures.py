"""Every README figure that cites a results file (``results/<config>-<date>.json``, written by
``benchmarks/results.py``) equals that file: each "M ± S on seeds a-b" is the mean ± standard error of those seeds'
final policies in the file, and each "random R" its reference row; the docs' pages cite the same files."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CITED = re.compile(r"`(results/[\w.-]+\.json)`")
FIGURE = re.compile(r"(−?\d+(?:\.\d+)?) ± (\d+(?:\.\d+)?) on seeds (\d+)-(\d+)")


def _number(text: str) -> float:
    return float(text.replace("−", "-"))


def _rows() -> list[tuple[str, str]]:
    lines = (REPO / "README.md").read_text().splitlines()
    return [(m, line) for line in lines for m in CITED.findall(line)]


def test_readme_cites_results_files():
    assert _rows(), "the README cites no results file"


@pytest.mark.parametrize("path, line", _rows(), ids=lambda v: v if v.startswith("results/") else "")
def test_each_readme_figure_equals_its_results_file(path, line):
    result = json.loads((REPO / path).read_text())
    (entry,) = result["settings"].values()
    seeds = {int(s): row["mean_return"] for s, row in entry["seeds"].items()}
    figures = FIGURE.findall(line)
    assert figures, f"no 'M ± S on seeds a-b' beside {path}"
    for mean, se, first, last in figures:
        values = [seeds[s] for s in range(int(first), int(last) + 1)]
        digits = len(mean.split(".")[1]) if "." in mean else 0
        assert _number(mean) == round(statistics.fmean(values), digits), (path, mean, values)
        assert float(se) == round(statistics.stdev(values) / math.sqrt(len(values)), digits), (path, se, values)
    for name, reference in entry.get("references", {}).items():
        quoted = re.search(rf"{name} (−?\d+(?:\.\d+)?)", line)
        if quoted:
            digits = len(quoted.group(1).split(".")[1]) if "." in quoted.group(1) else 0
            assert _number(quoted.group(1)) == round(reference["mean_return"], digits), (path, name)
    pages = [p for p in (REPO / "docs").rglob("*.md") if path in p.read_text()]
    assert pages, f"no docs page cites {path}"
