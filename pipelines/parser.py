"""The command line's parser: LightningCLI's, with no abbreviated options, errors said in one line and ``null`` taken
for a nullable key of a nested class (:func:`nulls_as_dicts`); and the one-line end of a run on a bad config value
(:func:`config_exit`, :func:`config_error`). The bounds a config file must keep before it is read are
:mod:`pipelines.config_files`'.

argparse (and so jsonargparse) accepts any unique prefix of an option by default: ``--trainer.max_epoch=2`` was
taken as ``--trainer.max_epochs``. Here an option is only ever its full name. A parse error is printed as one line
naming the config key (``error: model.init_args.network.init_args.hiden: no such key of modules.q_networks.QNetwork (did
you mean hidden_dims?)``) and a pointer to ``--help``, instead of the usage block and jsonargparse's nested
report of every union member it tried.
"""

from __future__ import annotations

import difflib
import inspect
import json
import os
import re
import sys
import typing
from typing import NoReturn

from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import LightningArgumentParser

from modules.import_policy import how_to_allow
from pipelines.compat import debug_mode_active
from pipelines.renamed import given_key, new_place, renamed_class, renamed_key, retyped_key

PACKAGES = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), p) + os.sep
                 for p in ("pipelines", "modules", "envs", "callbacks"))  # the project's own code

_PARSER_KEY = re.compile(r'^(?:- )?Parser key "([^"]+)":$')
_CLASS_PATH = re.compile(r"^(?:- )?Problem with given class_path '([^']+)':$")
_NOT_ACCEPTED = re.compile(r"^Option '([^']+)' is not accepted$")
_CALLABLE_OPTION = re.compile(r"^Type .* expects a function or a callable class: Option '([^']+)' is not accepted")
_UNRECOGNIZED = re.compile(r"^unrecognized arguments: (.+)$")
_STRUCTURE = ("Does not validate against any of the Union subtypes", "Subtypes:", "Errors:", "Given value type:",
              "Given value:")
# a union's other members, tried and failed as a matter of course: the member that names the problem follows
_ALTERNATIVES = ("Expected a path but", "Expected a <class 'NoneType'>", "Does not validate against any of the Union")


def _class_keys(class_path: str) -> list[str]:
    """The constructor arguments of an already imported class (nothing is imported here), or []."""
    module, _, name = class_path.rpartition(".")
    cls = getattr(sys.modules.get(module), name, None)
    if not inspect.isclass(cls):
        return []
    try:
        return [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "args", "kwargs")]
    except (TypeError, ValueError):
        return []


def one_line(message: str, options: list[str] = ()) -> str | None:
    """The one line that matters in a jsonargparse / argparse error ``message``: the dotted config key and what is
    wrong with it, or None where the message has no shape known here.

    Args:
        options: the parser's option strings, for a close match to an unrecognised option.
    """
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return None
    unrecognized = _UNRECOGNIZED.match(lines[0])
    if unrecognized:
        name = unrecognized.group(1).split()[0].split("=")[0]
        close = difflib.get_close_matches(name, [o for o in options if ("." in o) == ("." in name)], n=1)
        return f"unrecognized option {name}" + (f" (did you mean {close[0]}?)" if close else "")
    path: list[str] = []
    class_path = None
    after_class = False
    for line in lines:
        key, cls = _PARSER_KEY.match(line), _CLASS_PATH.match(line)
        if key:
            path.extend(key.group(1).split("."))
            after_class = False
        elif cls:
            class_path, after_class = cls.group(1), True
            path.append("init_args")
        elif line.startswith(_STRUCTURE):
            continue
        else:
            leaf = line.removeprefix("- ").split(" Add the import path to import_path_allowlist")[0]
            if leaf.startswith(_ALTERNATIVES):
                continue
            given = _CALLABLE_OPTION.match(leaf)
            if given and class_path and path and given_key(class_path, path[-1], given.group(1)):
                return (f"{'.'.join([*path, 'init_args', given.group(1)])}: given by the env now "
                        f"({given_key(class_path, path[-1], given.group(1))}); remove it")
            option = _NOT_ACCEPTED.match(leaf)
            if option and class_path and renamed_key(class_path, option.group(1)):
                new = renamed_key(class_path, option.group(1))
                said = f"moved to {new_place(path, new)}" if "." in new else f"renamed {new}"
                return f"{'.'.join([*path, option.group(1)])}: {said} (a key of {class_path})"
            if option and class_path:
                keys = _class_keys(class_path)
                close = difflib.get_close_matches(option.group(1), keys, n=1)
                hint = f" (did you mean {close[0]}?)" if close else (f" (its keys: {', '.join(keys)})" if keys else "")
                return f"{'.'.join([*path, option.group(1)])}: no such key of {class_path}{hint}"
            retyped = retyped_key(class_path, path[-1]) if class_path and path else None
            if retyped and leaf.startswith("Unable to load config"):  # an old key's value where a section is now
                value = leaf.removeprefix("Unable to load config").strip(" '\"")
                return (f"{'.'.join(path)}: a section now; the value {value} goes to "
                        f"{new_place(path[:-1], retyped)} (a key of {class_path})")
            if after_class:  # the class itself was refused (renamed, not allowed, not importable)
                return _class_refused(f"{'.'.join([*path[:-1], 'class_path'])}={class_path!r}", class_path, leaf)
            return f"{'.'.join(path)}: {leaf}" if path else leaf
    return None


def _class_refused(key: str, class_path: str, leaf: str) -> str:
    """The line for a class path jsonargparse refused (``key`` is ``<dotted key>=<class path>``)."""
    if renamed_class(class_path):
        new = renamed_class(class_path)
        said = "moved to" if new.rpartition(".")[2] == class_path.rpartition(".")[2] else "renamed"
        return f"{key}: {said} {new}"
    if "import path denylist" in leaf:  # refused by the import policy
        return f"{key} is not allowed: outside the project's packages ({how_to_allow(class_path.rpartition('.')[0])})"
    return f"{key}: {leaf}"


class FitArgumentParser(LightningArgumentParser):
    """LightningCLI's parser without prefix matching of options (``allow_abbrev=False``) and with one-line errors
    (:func:`one_line`; the full report follows only where its shape is not known). Exit status 2, as argparse's."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_args(self, args=None, *rest, **kwargs):
        """jsonargparse's ``parse_args``, with ``null`` given on the command line to a key of a class inside the
        model's or the data module's class (:func:`nulls_as_dicts`, :func:`check_nulls`)."""
        args = sys.argv[1:] if args is None else args
        nulls: list[str] = []
        if isinstance(args, (list, tuple)):
            args, nulls = nulls_as_dicts(list(args))
        if nulls:  # checked before --print_config prints (and exits)
            plain = [a for a in args if not a.startswith("--print_config")]
            refused = check_nulls(super().parse_args(plain, *rest, **kwargs), nulls)
            if refused is not None:
                self.error(refused)
        return super().parse_args(args, *rest, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or debug_mode_active():  # a nested parser (the root one reports), or debugging
            super().error(message, ex)
        summary = one_line(message, [o for a in self._actions for o in a.option_strings])
        sys.stderr.write(f"error: {summary or message.strip()}\n({self.prog} --help lists every key)\n")
        self.exit(2)


_NULLS = ("null", "Null", "NULL", "~")


def nulls_as_dicts(args: list[str]) -> tuple[list[str], list[str]]:
    """``--<section>.init_args.<x>.init_args.<key>=null`` (or ``--... null``: a key of a class inside the model's or
    the data module's class) given as the nested mapping ``--data={"init_args": {"env": {"init_args": {"capacity":
    null}}}}``, which jsonargparse merges into the section's config as YAML would. (jsonargparse 4.53 hands such a
    value on through each nested class as text, and ``None`` comes out as the string ``"None"``: the key was refused
    with "Expected a float" though it takes null.) jsonargparse does not check a null inside a mapping:
    :func:`check_nulls` does, once the classes are known.

    Returns:
        The arguments, and the dotted keys given null this way.
    """
    out, keys, i = [], [], 0
    while i < len(args):
        token = args[i]
        key, has_value, value = token.partition("=")
        if not has_value and key.startswith("--") and i + 1 < len(args) and args[i + 1] in _NULLS:
            value, has_value, i = args[i + 1], True, i + 1
            token = f"{key}={value}"
        parts = key[2:].split(".") if key.startswith("--") else []
        if (has_value and value in _NULLS and parts[:1] in (["model"], ["data"]) and parts.count("init_args") >= 2
                and parts[-2] == "init_args" and all(p.isidentifier() for p in parts)):
            nested = None
            for part in reversed(parts[1:]):
                nested = {part: nested}
            out.append(f"--{parts[0]}={json.dumps(nested)}")
            keys.append(".".join(parts))
        else:
            out.append(token)
        i += 1
    return out, keys


def check_nulls(config, keys: list[str]) -> str | None:
    """The first of :func:`nulls_as_dicts`' ``keys`` whose constructor argument does not take null (its class found
    in ``config``, the parsed config), as an error line; None when they all do."""
    for key in keys:
        owner, _, name = key.rpartition(".init_args.")
        module, _, class_name = str(config.get(f"{owner}.class_path") or "").rpartition(".")
        cls = getattr(sys.modules.get(module), class_name, None)
        try:
            parameter = inspect.signature(cls).parameters[name]
        except (TypeError, ValueError, KeyError):
            continue  # (jsonargparse's own checks stand)
        if parameter.default is not None and not _takes_none(parameter.annotation):
            return f"{key}: null is not allowed (expected {parameter.annotation})"
    return None


def _takes_none(annotation: object) -> bool:
    """Whether a constructor argument's annotation (a type, or its text under ``from __future__ import
    annotations``) admits None: ``X | None``, ``Optional[X]``, ``Union[..., None]``."""
    if isinstance(annotation, str):
        text = annotation.replace(" ", "")
        depth, parts, start = 0, [], 0
        for i, char in enumerate(text):  # the top-level members of a | union
            depth += char in "[(" and 1 or -(char in "])" and 1 or 0)
            if char == "|" and depth == 0:
                parts.append(text[start:i])
                start = i + 1
        parts.append(text[start:])
        return "None" in parts or text.startswith(("Optional[", "typing.Optional[")) or (
            text.startswith(("Union[", "typing.Union[")) and ",None]" in text)
    return annotation is None or annotation is type(None) or type(None) in typing.get_args(annotation)


def config_exit(err: Exception) -> None:
    """End the run on a bad config value or file: its one message on stderr, exit status 2."""
    print(f"error: {err}", file=sys.stderr)
    raise SystemExit(2) from None


def config_error(err: BaseException) -> Exception | None:
    """The ``ValueError`` / ``FileNotFoundError`` raised by this project's own code (its innermost frame in one of
    the project's packages), or Lightning's ``MisconfigurationException``, somewhere in ``err``'s chain of causes,
    or None: a constructor's rejection of a config value, which jsonargparse wraps in its own errors."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, MisconfigurationException):  # Lightning's rejection of a trainer setting
            return err
        if isinstance(err, (ValueError, FileNotFoundError)) and err.__traceback__ is not None:
            frame = err.__traceback__
            while frame.tb_next is not None:
                frame = frame.tb_next
            if os.path.abspath(frame.tb_frame.f_code.co_filename).startswith(PACKAGES):
                return err
        err = err.__cause__ or err.__context__
    return None
