"""The command line's parser: LightningCLI's, with no abbreviated options and errors said in one line; the bounds a
config file must keep before it is read (:func:`check_config_inputs`); and the one-line end of a run on a bad config
value (:func:`config_exit`, :func:`config_error`).

argparse (and so jsonargparse) accepts any unique prefix of an option by default: ``--trainer.max_epoch=2`` was
taken as ``--trainer.max_epochs``. Here an option is only ever its full name. A parse error is printed as one line
naming the config key (``error: model.init_args.network.init_args.hiden: no such key of modules.q_networks.QNetwork (did
you mean hidden_dims?)``) and a pointer to ``--help``, instead of the usage block and jsonargparse's nested
report of every union member it tried.
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
import sys
from typing import NoReturn

import yaml
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import LightningArgumentParser

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
            if after_class and renamed_class(class_path):
                new = renamed_class(class_path)
                said = "moved to" if new.rpartition(".")[2] == class_path.rpartition(".")[2] else "renamed"
                return f"{'.'.join([*path[:-1], 'class_path'])}={class_path!r}: {said} {new}"
            if after_class:  # the class itself was refused (not importable, not allowed)
                return f"{'.'.join([*path[:-1], 'class_path'])}={class_path!r}: {leaf}"
            return f"{'.'.join(path)}: {leaf}" if path else leaf
    return None


class FitArgumentParser(LightningArgumentParser):
    """LightningCLI's parser without prefix matching of options (``allow_abbrev=False``) and with one-line errors
    (:func:`one_line`; the full report follows only where its shape is not known). Exit status 2, as argparse's."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or debug_mode_active():  # a nested parser (the root one reports), or debugging
            super().error(message, ex)
        summary = one_line(message, [o for a in self._actions for o in a.option_strings])
        sys.stderr.write(f"error: {summary or message.strip()}\n({self.prog} --help lists every key)\n")
        self.exit(2)


MAX_CONFIG_BYTES = 1 << 20  # a config file's largest size (the shipped ones are under 4 kB)
MAX_CONFIG_NODES = 100_000  # its most YAML nodes once aliases are expanded (the shipped ones: under 200)
_CONFIG_FLAGS = ("--config", "-c")


def check_config_text(text: str, name: str) -> None:
    """Refuse YAML that is malformed or that expands, through aliases, to more than :data:`MAX_CONFIG_NODES` nodes
    (an "alias bomb" of a few lines grows without bound when loaded). The document is composed without being
    constructed (aliases stay references), then its expanded size is counted once per distinct node.

    Raises:
        ValueError: names ``name`` and what is wrong.
    """
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        raise ValueError(f"{name}: not valid YAML ({' '.join(str(err).split())[:160]})") from None
    sizes: dict[int, int] = {}

    def size(node, active: set[int]) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in active:  # a recursive alias: it expands for ever
            return MAX_CONFIG_NODES + 1
        active.add(id(node))
        children = ([n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode)
                    else node.value if isinstance(node, yaml.SequenceNode) else [])
        total = 1
        for child in children:
            total += size(child, active)
            if total > MAX_CONFIG_NODES:
                break
        active.discard(id(node))
        sizes[id(node)] = total
        return total

    if root is not None and size(root, set()) > MAX_CONFIG_NODES:
        raise ValueError(f"{name}: expands to more than {MAX_CONFIG_NODES:,} YAML nodes (aliases repeating "
                         f"aliases?): no config of this project is that large")


def check_config_inputs(argv: list[str]) -> None:
    """Check every ``--config`` / ``-c`` value of a command line before jsonargparse reads it: a file must be a
    regular file (not a FIFO or a device, which could be read for ever) of at most :data:`MAX_CONFIG_BYTES`,
    UTF-8 text, and YAML within :func:`check_config_text`'s bounds; a value holding YAML text itself (``pipelines
    .evaluate`` hands a checkpoint's recorded config over that way) is checked as text. Missing files are left to
    jsonargparse's message.

    Raises:
        ValueError: names the file and what is wrong.
    """
    values = [argv[i + 1] for i, token in enumerate(argv[:-1]) if token in _CONFIG_FLAGS]
    values += [token.split("=", 1)[1] for token in argv if token.startswith("--config=")]
    for value in values:
        if "\n" in value:
            check_config_text(value, "--config (YAML text)")
            continue
        if not os.path.exists(value):
            continue
        name = f"--config {value}"
        if not os.path.isfile(value):
            raise ValueError(f"{name}: not a regular file")
        if os.path.getsize(value) > MAX_CONFIG_BYTES:
            raise ValueError(f"{name}: {os.path.getsize(value):,} bytes; a config is at most {MAX_CONFIG_BYTES:,}")
        with open(value, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{name}: not a text file (a YAML config is UTF-8 text)") from None
        check_config_text(text, name)


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
