"""mkdocs hook: one API reference page per package, generated at build time from the source tree.

Every module of ``envs``, ``modules``, ``callbacks`` and ``pipelines`` (sub-packages included) gets a section on
its package's page, rendered by mkdocstrings from the docstrings; ``api/index.md`` links the pages. Nothing is
listed by hand, so a new module or public class has its API entry the moment it exists. The hook reads file names
only; mkdocstrings' Python handler (griffe) reads the sources statically and imports nothing.
"""

from __future__ import annotations

import pathlib

from mkdocs.structure.files import File, Files

PACKAGES = ("envs", "modules", "callbacks", "pipelines")
ROOT = pathlib.Path(__file__).resolve().parents[2]


def packages() -> dict[str, list[str]]:
    """Package dotted name -> its modules' dotted names (``__init__`` as the package itself), sorted."""
    found: dict[str, list[str]] = {}
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            package = ".".join(rel.parts[:-1])
            if rel.name == "__init__":
                found.setdefault(package, []).insert(0, package)
            elif not rel.name.startswith("_"):
                found.setdefault(package, []).append(".".join(rel.parts))
    return dict(sorted(found.items()))


def page(package: str, modules: list[str]) -> str:
    """The markdown of one package's page: a heading, then one mkdocstrings block per module."""
    lines = [f"# `{package}`", ""]
    for module in modules:
        if module != package:
            lines += [f"## `{module}`", ""]
        lines += [f"::: {module}", "    options:", "      show_root_heading: false", "      heading_level: 3", ""]
    return "\n".join(lines)


def on_files(files: Files, config) -> Files:
    """Add ``api/<package>.md`` for every package and ``api/index.md`` linking them."""
    index = ["# API reference", "", "Generated from the docstrings, one page per package:", ""]
    for package, modules in packages().items():
        files.append(File.generated(config, f"api/{package}.md", content=page(package, modules)))
        index.append(f"- [`{package}`]({package}.md): " + ", ".join(f"`{m.rsplit('.', 1)[-1]}`" for m in modules
                                                                      if m != package))
    files.append(File.generated(config, "api/index.md", content="\n".join(index) + "\n"))
    return files


def on_config(config):
    """Turn the nav's ``API reference: api/index.md`` entry into a section with every package's page."""
    pages = ["api/index.md"] + [{package: f"api/{package}.md"} for package in packages()]
    for i, item in enumerate(config["nav"] or []):
        if isinstance(item, dict) and item.get("API reference") == "api/index.md":
            config["nav"][i] = {"API reference": pages}
    return config
