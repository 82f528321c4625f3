"""Which objects a config may name. A ``class_path`` (or any other import path in a config, on the command line
or in an environment variable: a callable argument, a type) is checked before anything is imported: a module
outside the allowed packages is refused without its code running. The check is made on the name given and again
on where the named object is defined (jsonargparse's canonical path), so an allowed module's alias of another
object (``lightning.pytorch.callbacks.model_checkpoint.torch.load``) is judged by what would be called.

Allowed: this project's packages (:data:`PROJECT_PACKAGES`), the parts of the libraries it builds on that a
config has reason to name (:data:`LIBRARY_PARTS`: Lightning's loggers, callbacks, strategies, plugins,
accelerators and profilers, torch's optimisers and network layers), and the packages a user names in the
environment variable :data:`ALLOW_ENV` (comma-separated dot paths, e.g.
``RLPIPE_ALLOW_IMPORTS=my_envs,my_nets.policies``), so that users can plug in their own env and network classes.
The rest of those libraries is refused (torch's ``jit``, ``hub``, ``utils``, serialisation...: a config never needs
a function that loads or runs files), with a few named parts refused under any rule (:data:`DENIED_INSIDE`), as
are jsonargparse's own defaults (``os``, ``subprocess``, ``pickle``, ...). The check is jsonargparse's import-path
policy (``set_parsing_settings``), switched to deny everything else.
"""

from __future__ import annotations

import os

from jsonargparse import Namespace, set_parsing_settings

from pipelines.compat import denying_import_path_entry

ALLOW_ENV = "RLPIPE_ALLOW_IMPORTS"
PROJECT_PACKAGES = ("envs", "modules", "callbacks", "pipelines")
LIBRARY_PARTS = ("lightning.pytorch.loggers", "lightning.pytorch.callbacks", "lightning.pytorch.strategies",
                 "lightning.pytorch.plugins", "lightning.pytorch.accelerators", "lightning.pytorch.profilers",
                 "lightning.fabric.plugins.environments", "torch.optim", "torch.nn")
DENIED_INSIDE = ("torch.hub", "torch.load", "torch.serialization", "torch.package", "torch.utils.cpp_extension",
                 "torch.jit.load", "torch.export.load", "torch.compile")

HELP = (f"Class paths may name this project's packages ({', '.join(PROJECT_PACKAGES)}) and these parts of the "
        f"libraries it builds on: {', '.join(LIBRARY_PARTS)}; anything else is refused before it is imported. "
        f"Allow your own packages with the environment variable {ALLOW_ENV}=pkg[,pkg.sub,...].")


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
                         import_path_allowlist=[*PROJECT_PACKAGES, *LIBRARY_PARTS, *user_packages()])


def check_env_ids(config: Namespace, where: str = "") -> None:
    """Refuse a gymnasium ``env_id`` of the form ``module:EnvName-v0`` whose module the policy above would refuse:
    gymnasium imports that module itself (``gym.make``), past jsonargparse's check. Registered ids (no ``:``) are
    left to the env config, which refuses unknown ones.

    Raises:
        ValueError: names the key, the id and the module.
    """
    items = (config.items() if isinstance(config, (Namespace, dict))  # (a Namespace's items are its dotted leaves)
             else enumerate(config) if isinstance(config, list) else ())
    for key, value in items:
        path = f"{where}.{key}" if where else str(key)
        if str(key).rpartition(".")[2] == "env_id" and isinstance(value, str) and ":" in value:
            module = value.partition(":")[0].strip()
            if not module or not all(p.isidentifier() for p in module.split(".")) or denying_import_path_entry(module):
                raise ValueError(f"{path}={value!r} would import module {module!r}, which is not allowed: "
                                 f"registered gymnasium ids only, or a module of {', '.join(PROJECT_PACKAGES)} or of "
                                 f"a package {ALLOW_ENV} names")
        elif isinstance(value, (Namespace, dict, list)):
            check_env_ids(value, path)
