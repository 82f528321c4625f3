"""Entry points (``fit``, ``evaluate``, ``export``, ``seeds``, ``tune``, ``import_roms``) and the data pipeline.

Importing this package first checks that the project's other top-level packages (``envs``, ``modules``,
``callbacks``) are this project's own: Python finds a module of the same name in the working directory (a user's
``callbacks.py`` or ``envs/`` folder) before the installed project, and would run it. Every entry point is a
module of this package, so each one stops before that happens (:func:`check_not_shadowed`).
"""

from __future__ import annotations

import importlib.util
import os
import sys

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the folder holding the packages
PACKAGES = ("envs", "modules", "callbacks")  # the project's top-level packages besides this one


def check_not_shadowed() -> None:
    """Stop (exit status 2, one line naming the file) when one of :data:`PACKAGES` would be imported from
    somewhere other than this project: found by ``importlib.util.find_spec``, which locates a top-level module
    without running it.

    Raises:
        SystemExit: 2, for a shadowed package.
    """
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        origin = None if spec is None else (spec.origin or next(iter(spec.submodule_search_locations or []), None))
        if origin is None:
            continue
        own = os.path.join(PROJECT, name)
        if os.path.abspath(origin) != own and not os.path.abspath(origin).startswith(own + os.sep):
            print(f"error: {origin} shadows this project's package {name!r} ({own}): Python would import it "
                  f"instead; rename it or run from another folder", file=sys.stderr)
            raise SystemExit(2)


check_not_shadowed()
