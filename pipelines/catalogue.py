"""What a config can name, one line each: this project's algorithms (``model``), data pipelines (``data``), envs
(``data.init_args.env``) and callbacks (``trainer.callbacks``), and the shipped configs. ``pipelines.fit --help``
ends with it; importing this module also registers every class with jsonargparse, so ``--model.help DQNModule``
and short class names work."""

from __future__ import annotations

import glob
import importlib
import inspect
import os
import re
import sys

import lightning as L

from envs import EnvConfig
from modules.base import RLModule
from pipelines.data import RLDataModule

OWN = ("modules.", "pipelines.", "envs.", "callbacks.")
# imported here so that jsonargparse knows them as subclasses (its help lists them, short names resolve)
REGISTERED = ("callbacks", "envs.dvrp", "envs.games.config", "envs.gym", "envs.hockey", "envs.vacuum", "envs.vrptw",
              "modules.dqn", "modules.nature_cnn", "modules.ppo", "modules.reinforce", "modules.sac", "modules.td3",
              "pipelines.episodes", "pipelines.data.off_policy", "pipelines.data.on_policy")
for _name in REGISTERED:
    importlib.import_module(_name)
CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def subclasses(base: type) -> list[type]:
    """The subclasses of ``base`` (at any depth) defined in this project, by class path."""
    found, todo = [], list(base.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith(OWN) and not cls.__name__.startswith("_") and cls not in found:
            found.append(cls)
    return sorted(found, key=lambda c: f"{c.__module__}.{c.__qualname__}")


def sections() -> dict[str, list[type]]:
    """``{config key: [class, ...]}`` of the classes a config can name."""
    return {"model": subclasses(RLModule), "data": subclasses(RLDataModule),
            "data.init_args.env": subclasses(EnvConfig),
            "trainer.callbacks": [c for c in subclasses(L.Callback)  # (callbacks.base: the protocol, not a behaviour)
                                  if c.__module__.startswith("callbacks.") and c.__module__ != "callbacks.base"]}


def summary_line(cls: type, width: int = 110) -> str:
    """The first sentence of a class's docstring (cut at ``width`` characters)."""
    paragraph = " ".join((inspect.getdoc(cls) or "").strip().split("\n\n")[0].split())
    sentence = re.split(r"(?<!e\.g)(?<!i\.e)(?<! al)\. ", paragraph)[0].rstrip(".:")
    return sentence if len(sentence) <= width else sentence[:width - 3].rsplit(" ", 1)[0] + " ..."


def class_path(cls: type) -> str:
    """The shortest import path of ``cls`` (``pipelines.data.OffPolicyDataModule``, as configs write it)."""
    parts = cls.__module__.split(".")
    for end in range(1, len(parts) + 1):
        module = sys.modules.get(".".join(parts[:end]))
        if module is not None and getattr(module, cls.__name__, None) is cls:
            return f"{module.__name__}.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def catalogue() -> str:
    """The text: each section's classes (class path and first docstring line), then the shipped configs."""
    lines = []
    for key, classes in sections().items():
        lines.append(f"{key}:")
        lines.extend(f"  {class_path(c)}: {summary_line(c)}" for c in classes)
    configs = [p for p in sorted(glob.glob(os.path.join(CONFIGS, "*.yaml"))) if os.path.basename(p) != "defaults.yaml"]
    parts = sorted(glob.glob(os.path.join(CONFIGS, "envs", "*.yaml"))) + sorted(
        glob.glob(os.path.join(CONFIGS, "algos", "*.yaml")))
    for heading, paths in (("configs (--config; each read after configs/defaults.yaml, the trainer block they share):",
                            configs),
                           ("config parts (an env part and an algorithm part: --config configs/envs/<env>.yaml "
                            "--config configs/algos/<algo>.yaml):", parts)):
        if paths:
            lines.append(heading)
            lines.extend(f"  {os.path.relpath(path, os.path.dirname(CONFIGS))}: {_first_comment(path)}"
                         for path in paths)
    return "\n".join(lines)


def _first_comment(path: str) -> str:
    """A config's first line, without its ``#``, or "" when it is not a comment."""
    with open(path) as f:
        first = f.readline().strip()
    return first.lstrip("# ") if first.startswith("#") else ""
