"""Package names imported on first use (PEP 562): a package's ``__init__`` declares ``{name: module}`` and gets a
module ``__getattr__`` that imports the module when the name is first read. A process that needs one leaf module
of the package then imports only that module's own dependencies (a game's emulator process imports no torch; a
rollout worker no Lightning). This module imports nothing heavy."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package`` that serves ``exports`` (``{name: defining module}``).

    Raises (the returned function):
        AttributeError: a name that is not exported (Python then tries the submodule of that name).
    """

    def __getattr__(name: str) -> object:
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
