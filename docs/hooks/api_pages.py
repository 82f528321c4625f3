"""mkdocs hook: one API reference page per package, generated at build time from the source tree.

Every module of ``envs``, ``modules``, ``callbacks`` and ``pipelines`` (sub-packages included) gets a section on
its package's page, rendered by mkdocstrings from the docstrings; ``api/index.md`` links the pages. Nothing is
listed by hand, so a new module or public class has its API entry the moment it exists. The hook reads file names
only; mkdocstrings' Python handler (griffe) reads the sources statically and imports nothing.
"""

from __future__ import annotations

import pathlib
import re

from mkdocs.structure.files import File, Files

PACKAGES = ("envs", "modules", "callbacks", "pipelines")
# a Sphinx role the docstrings use (``:meth:`x` ``), as the rendered HTML has it: ``:meth:<code>x</code>``
ROLE = re.compile(r":(?:py:)?(?:meth|class|func|mod|attr|data|obj|exc|const):<code>(~?)([\w.]+)(\(\))?</code>")
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


def index() -> str:
    """The markdown of ``api/index.md``: every package's page, and each of its modules linked to its entry."""
    lines = ["# API reference", "", "Generated from the docstrings, one page per package:", ""]
    for package, modules in packages().items():
        lines.append(f"- [`{package}`]({package}.md): " + ", ".join(
            f"[`{m.rsplit('.', 1)[-1]}`]({package}.md#{m})" for m in modules if m != package))
    return "\n".join(lines) + "\n"


def on_files(files: Files, config) -> Files:
    """Add ``api/<package>.md`` for every package and ``api/index.md`` linking them."""
    for package, modules in packages().items():
        files.append(File.generated(config, f"api/{package}.md", content=page(package, modules)))
    files.append(File.generated(config, "api/index.md", content=index()))
    return files


def on_config(config):
    """Turn the nav's ``API reference: api/index.md`` entry into a section with every package's page."""
    pages = ["api/index.md"] + [{package: f"api/{package}.md"} for package in packages()]
    for i, item in enumerate(config["nav"] or []):
        if isinstance(item, dict) and item.get("API reference") == "api/index.md":
            config["nav"][i] = {"API reference": pages}
    return config


def on_page_content(html: str, page, config, files) -> str:
    """On the API pages, a docstring's Sphinx role (``:class:`envs.EnvConfig` ``, ``:meth:`~x.y` ``; shown raw
    before) becomes its name in code, linked to the object's entry where it names one of the project's packages."""
    if not page.file.src_uri.startswith("api/"):
        return html
    names = sorted(packages(), key=len, reverse=True)

    def replace(match: re.Match) -> str:
        short, path, call = match.group(1), match.group(2), match.group(3) or ""
        shown = f"<code>{path.rsplit('.', 1)[-1] if short else path}{call}</code>"
        package = next((n for n in names if path == n or path.startswith(n + ".")), None)
        return f'<a href="../{package}/#{path}">{shown}</a>' if package else shown

    return ROLE.sub(replace, html)
