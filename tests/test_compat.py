"""The compat modules hold every use of another library's private API (one per layer). Each names the versions it was
written for: these tests fail when an installed version differs, so the private uses are read again against the new
release before the pins move (and no private use hides outside them)."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COMPAT = ["envs.compat", "modules.compat", "callbacks.compat", "pipelines.compat"]
LIBRARIES = ("jsonargparse", "lightning", "torch", "torchrl", "tensordict", "gymnasium", "ray", "tensorboard")


@pytest.mark.parametrize("name", COMPAT)
def test_the_installed_libraries_are_those_the_private_uses_were_written_for(name):
    written_for = importlib.import_module(name).WRITTEN_FOR
    for package, version in written_for.items():
        try:
            installed = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue  # an extra that is not installed (ray): nothing of it runs
        assert installed.startswith(version), (
            f"{name} was written for {package} {version}.*, {installed} is installed: read its private uses again "
            f"against this release, then update WRITTEN_FOR")


def private_uses(path: Path) -> list[str]:
    """``module._name`` imports and ``<library object>._name`` attribute reads of the libraries in ``LIBRARIES`` in
    one file: imports from a private module, and calls of a private name on an imported library name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in LIBRARIES:
            if any(part.startswith("_") for part in node.module.split(".")) or any(
                    a.name.startswith("_") for a in node.names):
                found.append(f"{path.relative_to(REPO)}:{node.lineno} from {node.module} import ...")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("torch", "TensorDict", "ray"):
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {base.id}.{node.attr}")
    return found


def test_no_private_use_outside_the_compat_modules():
    compat = {REPO / (name.replace(".", "/") + ".py") for name in COMPAT}
    files = [p for package in ("envs", "modules", "callbacks", "pipelines")
             for p in sorted((REPO / package).rglob("*.py")) if p not in compat]
    assert [use for path in files for use in private_uses(path)] == []


def test_the_checker_finds_what_it_looks_for(tmp_path, monkeypatch):
    source = tmp_path / "a.py"
    source.write_text("from torch.utils._pytree import tree_map\nimport torch\ntorch._foreach_lerp_([], [], 0.1)\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert private_uses(source) == ["a.py:1 from torch.utils._pytree import ...", "a.py:3 torch._foreach_lerp_"]
