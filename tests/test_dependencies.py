"""The installed stack: the withdrawn lightning releases are excluded, and ``constraints.txt`` (what ``make``
installs within) pins every dependency to one version that ``pyproject.toml`` allows."""

from __future__ import annotations

import pathlib

import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for group in project["optional-dependencies"].values() for r in group]
    return [Requirement(r) for r in [*project["dependencies"], *extras]]


def _pins() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = Version(version)
    return pins


def test_withdrawn_lightning_releases_are_excluded():
    """lightning 2.6.2 and 2.6.3 (withdrawn, GHSA-w37p-236h-pfx3) are outside the allowed range."""
    (lightning,) = [r for r in _requirements() if r.name == "lightning"]
    assert not lightning.specifier.contains("2.6.2") and not lightning.specifier.contains("2.6.3")
    assert lightning.specifier.contains("2.6.6")


def test_constraints_pin_every_dependency_within_its_range():
    pins = _pins()
    for requirement in _requirements():
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"constraints.txt does not pin {requirement.name}"
        assert requirement.specifier.contains(pins[name], prereleases=True), (requirement, pins[name])
