"""mkdocs hook: the site's home page is the README, and the changelog and license are pages, all from the files at
the repository root (one source each).

The README links the docs as ``docs/<page>.md`` (so they work on a code host); on the site those become
``<page>.md``, and ``LICENSE`` / ``CHANGELOG.md`` become the generated ``license.md`` / ``changelog.md``.
"""

from __future__ import annotations

import pathlib
import re

from mkdocs.structure.files import File, Files

ROOT = pathlib.Path(__file__).resolve().parents[2]
LINKS = ((re.compile(r"\]\(docs/"), "]("), (re.compile(r"\]\(LICENSE\)"), "](license.md)"),
         (re.compile(r"\]\(CHANGELOG\.md\)"), "](changelog.md)"))


def readme_as_home() -> str:
    """The README with its links rewritten for the site."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for pattern, replacement in LINKS:
        text = pattern.sub(replacement, text)
    return text


def on_files(files: Files, config) -> Files:
    """Add ``index.md`` (the README), ``changelog.md`` and ``license.md``."""
    files.append(File.generated(config, "index.md", content=readme_as_home()))
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    files.append(File.generated(config, "changelog.md", content=changelog))
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    files.append(File.generated(config, "license.md", content="# License\n\n```text\n" + license_text + "```\n"))
    return files
