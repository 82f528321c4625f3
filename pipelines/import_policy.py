"""Which modules a config may name. A ``class_path`` (or any other import path in a config, on the command line
or in an environment variable) is checked by name before anything is imported: a module outside the allowed
packages is refused without its code running.

Allowed: this project's packages (:data:`PROJECT_PACKAGES`), the libraries it builds on
(:data:`LIBRARY_PACKAGES`), and the packages a user names in the environment variable :data:`ALLOW_ENV`
(comma-separated dot paths, e.g. ``RLPIPE_ALLOW_IMPORTS=my_envs,my_nets.policies``), so that users can plug in
their own env and network classes. A few parts of the allowed libraries that load or run files are refused
anyway (:data:`DENIED_INSIDE`), as are jsonargparse's own defaults (``os``, ``subprocess``, ``pickle``, ...).
The check is jsonargparse's import-path policy (``set_parsing_settings``), switched to deny everything else.
"""

from __future__ import annotations

import os

from jsonargparse import set_parsing_settings

ALLOW_ENV = "RLPIPE_ALLOW_IMPORTS"
PROJECT_PACKAGES = ("envs", "modules", "callbacks", "pipelines")
LIBRARY_PACKAGES = ("torch", "lightning", "torchrl", "tensordict", "gymnasium")
DENIED_INSIDE = ("torch.hub", "torch.load", "torch.serialization", "torch.package", "torch.utils.cpp_extension",
                 "torch.jit.load", "torch.export.load", "torch.compile")

HELP = (f"Class paths may name this project's packages ({', '.join(PROJECT_PACKAGES)}) and the libraries it builds "
        f"on ({', '.join(LIBRARY_PACKAGES)}); a module outside them is refused before it is imported. Allow your own "
        f"packages with the environment variable {ALLOW_ENV}=pkg[,pkg.sub,...].")


def user_packages() -> list[str]:
    """The dot paths named in :data:`ALLOW_ENV` (empty entries ignored).

    Raises:
        ValueError: an entry that is not a dot path of identifiers (names the variable and the entry).
    """
    entries = [e.strip() for e in os.environ.get(ALLOW_ENV, "").split(",") if e.strip()]
    for entry in entries:
        if not all(part.isidentifier() for part in entry.split(".")):
            raise ValueError(f"{ALLOW_ENV}: {entry!r} is not a dot import path (e.g. my_envs or my_pkg.networks)")
    return entries


def restrict_class_paths() -> None:
    """Refuse every import path a parsed value names except the allowed ones (see the module docstring). Call it
    before parsing; it sets jsonargparse's process-wide policy and may be called again (each call adds the
    packages :data:`ALLOW_ENV` names now).

    Raises:
        ValueError: a malformed :data:`ALLOW_ENV`, or one naming jsonargparse.
    """
    set_parsing_settings(import_path_denylist=["*", *DENIED_INSIDE],
                         import_path_allowlist=[*PROJECT_PACKAGES, *LIBRARY_PACKAGES, *user_packages()])
