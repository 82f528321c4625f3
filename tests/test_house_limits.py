"""The size rules of the house, read from the source: a README that stays a front door, files in the run layers
(``pipelines``, ``callbacks``, ``modules``) of at most 300 lines, and functions of at most 60 lines anywhere in the
package (docstring included), so that each reads in one screen."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README_LINES = 200
FILE_LINES = 300
FUNCTION_LINES = 60
PACKAGES = ("envs", "modules", "callbacks", "pipelines")


def long_files(root: Path, packages: tuple[str, ...], limit: int) -> list[str]:
    """``path: lines`` of each ``.py`` file under ``packages`` longer than ``limit`` lines."""
    out = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > limit:
                out.append(f"{path.relative_to(root)}: {lines}")
    return out


def long_functions(root: Path, packages: tuple[str, ...], limit: int) -> list[str]:
    """``path:line name: lines`` of each function or method (nested ones too) longer than ``limit`` lines."""
    out = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > limit:
                        out.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {lines}")
    return out


def test_the_readme_is_a_front_door_of_at_most_200_lines() -> None:
    lines = len((REPO / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_no_file_of_the_run_layers_is_over_300_lines() -> None:
    assert long_files(REPO, ("pipelines", "callbacks", "modules"), FILE_LINES) == []


def test_no_function_of_the_package_is_over_60_lines() -> None:
    assert long_functions(REPO, PACKAGES, FUNCTION_LINES) == []


def test_the_checkers_find_what_they_look_for(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    (tmp_path / "pkg" / "a.py").write_text(f"def long():\n{body}\n\n\ndef short():\n    return 1\n")
    assert long_functions(tmp_path, ("pkg",), 60) == ["pkg/a.py:1 long: 62"]
    assert long_files(tmp_path, ("pkg",), 60) == ["pkg/a.py: 66"]
    assert long_files(tmp_path, ("pkg",), 66) == []


def test_every_data_module_takes_at_most_six_arguments() -> None:
    """A data module takes its env, option objects (collector, replay buffer), budget, seed and device: the
    collector's and the buffer's own keys live in their sections (``pipelines.data.options``)."""
    import inspect

    import pipelines.data.off_policy  # noqa: F401  (the modules that define data modules)
    import pipelines.data.on_policy  # noqa: F401
    import pipelines.episodes  # noqa: F401
    from pipelines.catalogue import subclasses
    from pipelines.data import RLDataModule

    modules = [cls for cls in subclasses(RLDataModule) if not inspect.isabstract(cls)]
    assert {cls.__name__ for cls in modules} >= {"OnPolicyDataModule", "OffPolicyDataModule", "EpisodeDataModule"}
    wide = {cls.__name__: n for cls in modules if (n := len(inspect.signature(cls.__init__).parameters) - 1) > 6}
    assert wide == {}
