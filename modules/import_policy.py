"""Which objects a config or a file may name: one policy for every path that builds an object from text a user
or a file gives (a config's ``class_path``, a callable argument, a type, a checkpoint's recorded hyper-parameters,
a gymnasium ``module:Env`` id).

A name is checked before anything is imported: a module outside the allowed packages is refused without its code
running. The check is made on the name given and again on where the named object is defined (jsonargparse's
canonical path, :func:`check_named_objects`'s resolution), so an allowed module's alias of another object
(``lightning.pytorch.callbacks.model_checkpoint.torch.load``) is judged by what would be called. Nested names count
like top-level ones: a network's ``activation_class``, a ``norm_class``, a hook, Lightning's ``_instantiator``.

Allowed: this project's packages (:data:`PROJECT_PACKAGES`), the parts of the libraries it builds on that a
config has reason to name (:data:`LIBRARY_PARTS`: Lightning's loggers, callbacks, strategies, plugins,
accelerators and profilers, torch's optimisers and network layers), and the packages a user names in the
environment variable :data:`ALLOW_ENV` (comma-separated dot paths, e.g.
``RLPIPE_ALLOW_IMPORTS=my_envs,my_nets.policies``), so that users can plug in their own env and network classes.
Everything else is refused ("already imported" allows nothing: all of torchrl is imported, and its constructors
call the classes they are given), with a few named parts refused under any rule (:data:`DENIED_INSIDE`). The
command line's parser applies it process-wide (:func:`restrict_class_paths`); a checkpoint loaded from Python
applies it while it builds (:func:`enforced`), and leaves the process's own settings as they were.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
from collections.abc import Iterator

from jsonargparse import Namespace, set_parsing_settings

from modules.compat import denying_import_path_entry, import_path_settings, set_import_path_settings

ALLOW_ENV = "RLPIPE_ALLOW_IMPORTS"
PROJECT_PACKAGES = ("envs", "modules", "callbacks", "pipelines")
LIBRARY_PARTS = ("lightning.pytorch.loggers", "lightning.pytorch.callbacks", "lightning.pytorch.strategies",
                 "lightning.pytorch.plugins", "lightning.pytorch.accelerators", "lightning.pytorch.profilers",
                 "lightning.fabric.plugins.environments", "torch.optim", "torch.nn")
DENIED_INSIDE = ("torch.hub", "torch.load", "torch.serialization", "torch.package", "torch.utils.cpp_extension",
                 "torch.jit.load", "torch.export.load", "torch.compile")
# the modules whose functions a file may name as a callable argument (an activation); any other function is refused
NAMED_FUNCTIONS = ("torch.nn.functional",)
# the one instantiator a checkpoint may name: Lightning's own (``hyper_parameters._instantiator``)
LIGHTNING_INSTANTIATOR = "lightning.pytorch.cli.instantiate_module"

HELP = (f"Class paths may name this project's packages ({', '.join(PROJECT_PACKAGES)}) and these parts of the "
        f"libraries it builds on: {', '.join(LIBRARY_PARTS)}; anything else is refused before it is imported. "
        f"Allow your own packages with the environment variable {ALLOW_ENV}=pkg[,pkg.sub,...].")

_DOT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def how_to_allow(module: str) -> str:
    """The line that tells a user how to let a run import their own ``module`` (a class path's module part)."""
    denied = next((d for d in DENIED_INSIDE if module == d or module.startswith(d + ".")), None)
    if denied is not None:
        return f"{denied} can load or run files: never allowed, even by {ALLOW_ENV}"
    return (f"allow your own module with the environment variable {ALLOW_ENV}, e.g. {ALLOW_ENV}={module} "
            f"python -m pipelines.fit ...")


def user_packages() -> list[str]:
    """The dot paths named in :data:`ALLOW_ENV` (empty entries ignored).

    Raises:
        ValueError: an entry that is not a dot path of identifiers, or one under jsonargparse (names the variable
            and the entry).
    """
    entries = [e.strip() for e in os.environ.get(ALLOW_ENV, "").split(",") if e.strip()]
    for entry in entries:
        if not all(part.isidentifier() for part in entry.split(".")):
            raise ValueError(f"{ALLOW_ENV}: {entry!r} is not a dot import path (e.g. my_envs or my_pkg.networks)")
        if entry.split(".")[0] == "jsonargparse":
            raise ValueError(f"{ALLOW_ENV}: {entry!r} is not allowed (it would let a value change this policy)")
    return entries


def restrict_class_paths() -> None:
    """Refuse every import path a parsed value names except the allowed ones (see the module docstring), for the
    rest of the process (the command line's parser). Call it before parsing; it may be called again (each call adds
    the packages :data:`ALLOW_ENV` names now).

    Raises:
        ValueError: a malformed :data:`ALLOW_ENV`.
    """
    set_parsing_settings(import_path_denylist=["*", *DENIED_INSIDE],
                         import_path_allowlist=[*PROJECT_PACKAGES, *LIBRARY_PARTS, *user_packages()])


@contextlib.contextmanager
def enforced() -> Iterator[None]:
    """The policy applied to jsonargparse inside the block (what a checkpoint's hyper-parameters build, through
    Lightning's instantiator), and the process's own settings back afterwards (a Python user's own parsers are
    left as they were).

    Raises:
        ValueError: a malformed :data:`ALLOW_ENV`.
    """
    before = import_path_settings()
    try:
        restrict_class_paths()
        yield
    finally:
        set_import_path_settings(before)


def check_named_objects(tree: object, where: str, plain_strings: bool = True) -> None:
    """Check every object that the plain data ``tree`` (a checkpoint's hyper-parameters, a recorded or given config)
    names, before anything is built from it. Each ``class_path`` / ``_class_path`` value must be allowed by name
    and, where the name is allowed, by where the object it reaches is defined (only allowed modules are imported
    to see it), and it must reach a class: a function given as a class path is called with the file's arguments
    (``{class_path: pipelines.import_roms._run, init_args: {command: [...]}}`` for a callable argument ran the
    command). A string that is a dot path of identifiers (a callable or a class given by name:
    ``activation_class: os.system``) is checked the same way, and may reach a class or a function of
    :data:`NAMED_FUNCTIONS` only; ``_instantiator`` may only be Lightning's own (:data:`LIGHTNING_INSTANTIATOR`).

    Args:
        where: the name of the tree's root in messages (``<file> hyper_parameters``).
        plain_strings: whether a dot-path string the policy refuses by name is refused (a checkpoint's
            hyper-parameters); False for a command line's config, where such a string may be a file name
            (``oracle.pt``), and jsonargparse refuses the names it would import by itself. Either way a dot-path
            string that reaches an allowed object must reach a class or a named function.

    Raises:
        ValueError: the first refused entry, naming its key, its value and why.
    """
    with enforced():  # (jsonargparse's own verdicts: the ones it enforces while it builds)
        for key, value in leaves(tree, where):
            last = key.rpartition(".")[2]
            if last == "_instantiator":
                if value != LIGHTNING_INSTANTIATOR:
                    raise ValueError(f"{key}={value!r} is not allowed: only Lightning's own instantiator "
                                     f"({LIGHTNING_INSTANTIATOR}) builds a module from a file")
            elif isinstance(value, str) and last in ("class_path", "_class_path"):
                _refuse(key, value, _refusal(value, by_name=True, class_only=True))
            elif isinstance(value, str) and _DOT_PATH.fullmatch(value.strip()):
                _refuse(key, value, _refusal(value.strip(), by_name=plain_strings, class_only=False))


def _refuse(key: str, value: str, reason: str | None) -> None:
    if reason is not None:
        raise ValueError(f"{key}={value!r} is not allowed: {reason}. {HELP}")


def _refusal(path: str, by_name: bool, class_only: bool) -> str | None:
    """Why the import path ``path`` is refused (by name where ``by_name``, by where the object it reaches is
    defined, and by what it is: a class, or where not ``class_only`` a function of :data:`NAMED_FUNCTIONS`), or
    None."""
    entry = denying_import_path_entry(path)
    if entry is not None:
        return f"it is outside the allowed packages ({how_to_allow(path.rpartition('.')[0])})" if by_name else None
    target = _resolve(path)
    if target is None:
        return None  # (not found: building from it fails with its own message; nothing ran)
    defined = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', '')}"
    entry = denying_import_path_entry(defined) if getattr(target, "__module__", None) else None
    if entry is not None:
        return f"it names {defined}, outside the allowed packages (the {entry!r} entry refuses it)"
    if isinstance(target, type):
        return None
    if class_only:
        return f"it names {type(target).__name__} {defined}, not a class"
    if callable(target) and getattr(target, "__module__", None) not in NAMED_FUNCTIONS:
        return (f"it names the {type(target).__name__} {defined}: a file may name classes, and functions of "
                f"{', '.join(NAMED_FUNCTIONS)} only")
    return None


def _resolve(path: str) -> object | None:
    """The object at the allowed import path ``path`` (its longest importable module, then attributes), or None."""
    parts = path.split(".")
    for num in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:num]))
        except Exception:  # (no such module; an allowed module that fails to import says so when it is built)
            continue
        for name in parts[num:]:
            target = getattr(target, name, None)
        return target
    return None


def leaves(tree: object, where: str) -> Iterator[tuple[str, object]]:
    """``(dotted key, value)`` of every leaf of nested dicts / Namespaces / lists (list items as ``key[i]``)."""
    if isinstance(tree, Namespace):
        tree = tree.as_dict()
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from leaves(value, f"{where}.{key}" if where else str(key))
    elif isinstance(tree, (list, tuple)):
        for i, value in enumerate(tree):
            yield from leaves(value, f"{where}[{i}]")
    else:
        yield where, tree


def check_env_ids(config: Namespace, where: str = "") -> None:
    """Refuse a gymnasium ``env_id`` of the form ``module:EnvName-v0`` whose module the policy above refuses (call it
    after :func:`restrict_class_paths`):
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
                                 f"a package {ALLOW_ENV} names ({how_to_allow(module)})")
        elif isinstance(value, (Namespace, dict, list)):
            check_env_ids(value, path)
