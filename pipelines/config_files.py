"""The bounds a config file must keep before it is read (:func:`check_config_inputs`): a regular UTF-8 file of at most
1 MiB whose YAML is well formed, nested at most 64 levels, gives no key twice in one mapping, and expands (through
aliases) to at most 100,000 nodes."""

from __future__ import annotations

import os

import yaml

MAX_CONFIG_BYTES = 1 << 20  # a config file's largest size (the shipped ones are under 4 kB)
MAX_CONFIG_NODES = 100_000  # its most YAML nodes once aliases are expanded (the shipped ones: under 200)
MAX_CONFIG_DEPTH = 64  # its deepest nesting of mappings and lists (the shipped ones: under 10)
_CONFIG_FLAGS = ("--config", "-c")


def check_config_text(text: str, name: str) -> None:
    """Refuse YAML that is malformed, nested deeper than :data:`MAX_CONFIG_DEPTH` (YAML's readers recurse once per
    level: 50,000 levels ended in a ``RecursionError``; the depth is counted first on the parser's events, which do not
    recurse), that gives a key twice in one mapping (a YAML loader keeps the last silently), or that expands, through
    aliases, to more than :data:`MAX_CONFIG_NODES` nodes (an "alias bomb" of a few lines grows without bound when
    loaded). The document is composed without being constructed (aliases stay references), then its expanded size
    is counted once per distinct node.

    Raises:
        ValueError: names ``name`` and what is wrong.
    """
    try:
        depth = deepest = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                deepest = max(deepest, depth)
                if deepest > MAX_CONFIG_DEPTH:
                    raise ValueError(f"{name}: nested deeper than {MAX_CONFIG_DEPTH} levels (line "
                                     f"{event.start_mark.line + 1}): no config of this project is that deep")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        raise ValueError(f"{name}: not valid YAML ({' '.join(str(err).split())[:160]})") from None
    _check_duplicate_keys(root, name)
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


def _check_duplicate_keys(root, name: str) -> None:
    """Refuse a mapping of the composed YAML that gives one key twice (each node visited once, aliases included).

    Raises:
        ValueError: names ``name``, the key and its two lines.
    """
    seen, todo = set(), [root]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            lines: dict[str, int] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value != "<<":
                    if key.value in lines:
                        raise ValueError(f"{name}: key {key.value!r} is given twice in one mapping (lines "
                                         f"{lines[key.value]} and {key.start_mark.line + 1}): remove one")
                    lines[key.value] = key.start_mark.line + 1
                todo.extend((key, value))
        elif isinstance(node, yaml.SequenceNode):
            todo.extend(node.value)


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
