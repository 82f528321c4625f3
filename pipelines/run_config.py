"""What a run's config gets before anything is built (``pipelines.fit`` applies these in this order): the
callbacks and plugins every run has, one seed for everything, one folder for every output, and the run folder
a resumed run continues in."""

from __future__ import annotations

import argparse
import difflib
import os
import secrets
from pathlib import PurePath

from jsonargparse import Namespace


def add_default_callbacks(trainer: Namespace) -> None:
    """Callbacks and plugins every run has unless its config lists its own: ``callbacks.NonFiniteGuard`` (stops
    a run whose updates keep being non-finite) and ``pipelines.checkpoints.AtomicCheckpointIO`` (checkpoints
    written atomically). TensorBoard gets its hyper-parameters from :func:`pipelines.board.write_run_header`
    (the resolved config: the model's, the data pipeline's and the env's settings), so Lightning's own logging of
    the module's (``enable_autolog_hparams``) and its ``hp_metric`` placeholder (a constant -1) are off."""
    trainer.enable_autolog_hparams = False
    for logger in trainer.get("logger") if isinstance(trainer.get("logger"), list) else [trainer.get("logger")]:
        if isinstance(logger, Namespace) and str(logger.get("class_path", "")).endswith("TensorBoardLogger"):
            logger.init_args.default_hp_metric = False
    callbacks = trainer.get("callbacks") or []
    if not any(isinstance(c, Namespace) and str(c.get("class_path", "")).endswith("NonFiniteGuard") for c in callbacks):
        trainer.callbacks = [*callbacks, Namespace(class_path="callbacks.NonFiniteGuard",
                                                   init_args=Namespace(max_consecutive=100))]
    plugins = trainer.get("plugins")
    plugins = [] if plugins is None else plugins if isinstance(plugins, list) else [plugins]
    if not any(isinstance(p, Namespace) and str(p.get("class_path", "")).endswith("CheckpointIO") for p in plugins):
        trainer.plugins = [*plugins, Namespace(class_path="pipelines.checkpoints.AtomicCheckpointIO",
                                               init_args=Namespace())]


def share_seed(config: Namespace) -> None:
    """One seed for the whole run: every ``seed`` of the data module and the callbacks that the config leaves
    unset (null) takes the run's ``seed_everything`` (which also seeds torch, numpy and Python's RNGs: the
    model's initial weights, exploration), so ``--seed_everything=S`` alone gives another run. Seeds the config
    sets stay (e.g. ``PolicyEvaluation``'s, the evaluation episodes, the same for every run). With
    ``seed_everything: false`` (no seeding) they get a random seed, recorded in the saved config."""
    seed = config.get("seed_everything")
    if seed is False or seed is None:
        seed = secrets.randbelow(2**31)
    trainer = config.get("trainer") or Namespace()
    callbacks = trainer.get("callbacks") or []
    for section in [config.get("data"), *callbacks]:
        args = section.get("init_args") if isinstance(section, Namespace) else None
        if args is not None and "seed" in args and args.seed is None:
            args.seed = int(seed)


def place_outputs(trainer: Namespace) -> None:
    """Keep every output of the run under one root: a logger's relative ``save_dir`` is taken inside
    ``trainer.default_root_dir`` when that is given (else the working directory, as Lightning does), and a
    logger's ``name``, ``version`` or ``sub_dir`` must be a folder name inside its ``save_dir``. A run without
    a logger (``--trainer.logger=false``) and without ``default_root_dir`` gets its own folder,
    ``runs/unlogged/version_<k>`` (the next free k), for its config and checkpoints: Lightning would write them
    into the working directory (``./config.yaml``, ``./checkpoints/``).

    Raises:
        ValueError: a ``name`` / ``version`` / ``sub_dir`` that is absolute or climbs out with ``..``.
    """
    root = trainer.get("default_root_dir")
    loggers = trainer.get("logger")
    if loggers is False and root is None:
        trainer.default_root_dir = _next_version(os.path.join("runs", "unlogged"))
    for logger in loggers if isinstance(loggers, list) else [loggers]:
        args = logger.get("init_args") if isinstance(logger, Namespace) else None
        if args is None:
            continue
        save_dir = args.get("save_dir")
        if root is not None and isinstance(save_dir, str) and not os.path.isabs(save_dir):
            args.save_dir = os.path.join(root, save_dir)
        for key in ("name", "version", "sub_dir"):
            value = args.get(key)
            if isinstance(value, str) and (os.path.isabs(value) or ".." in PurePath(value).parts):
                raise ValueError(f"trainer.logger.init_args.{key}={value!r} is not allowed: a folder name inside the "
                                 f"logger's save_dir (not absolute, no '..')")


def resume_in_place(trainer: Namespace, ckpt_path: str, frames: int | None) -> tuple[str, int] | None:
    """Continue a run in its own folder: when ``ckpt_path`` is ``<save_dir>/<name>/<version>/checkpoints/*.ckpt``
    of the config's TensorBoard logger (and the config sets no ``version``), the logger's ``version`` is set to
    that folder, so the resumed run's logs, config and checkpoints join the run's (see ``pipelines.fit`` for the
    TensorBoard steps it replaces). Otherwise the resumed run gets a new folder, as Lightning does.

    Returns:
        ``(run folder, the checkpoint's frames)`` when resuming in place, else None.
    """
    logger = trainer.get("logger")
    args = logger.get("init_args") if isinstance(logger, Namespace) else None
    if (args is None or frames is None or args.get("version") is not None or args.get("sub_dir")
            or not str(logger.get("class_path", "")).endswith("TensorBoardLogger") or args.get("save_dir") is None):
        return None
    folder = os.path.dirname(os.path.abspath(ckpt_path))
    run = os.path.dirname(folder)
    logs = os.path.abspath(os.path.join(args.save_dir, args.get("name") or "lightning_logs"))
    if os.path.basename(folder) != "checkpoints" or os.path.dirname(run) != logs:
        return None
    args.version = os.path.basename(run)
    return run, frames


def _next_version(folder: str) -> str:
    """``<folder>/version_<k>`` for the smallest k >= 0 that does not exist (nothing is created)."""
    taken = {int(n[8:]) for n in (os.listdir(folder) if os.path.isdir(folder) else [])
             if n.startswith("version_") and n[8:].isdigit()}
    return os.path.join(folder, f"version_{min(set(range(len(taken) + 1)) - taken)}")


FIT_KEYS = ("--model.", "--data.", "--trainer.", "--seed_everything", "--num_threads")  # a fit config's options


def parse_with_fit_keys(parser: argparse.ArgumentParser, argv: list[str] | None, keys: tuple[str, ...] = FIT_KEYS,
                        one_token: bool = False) -> tuple[argparse.Namespace, list[str]]:
    """``parser.parse_known_args`` for a command that also takes the fit config's options (handed on to
    ``pipelines.fit``): the rest must start with one of ``keys`` (``one_token``: as ``--key=value``); anything
    else ends the command with ``parser.error`` (exit 2) naming it and the closest option of the command's own.

    Returns:
        The command's arguments, and the fit options in their order.
    """
    args, rest = parser.parse_known_args(argv)
    for token in rest:
        name = token.split("=")[0]
        if (name.startswith("-") or one_token) and not (token.startswith(keys) and (not one_token or "=" in token)):
            close = difflib.get_close_matches(name, [o for a in parser._actions for o in a.option_strings], n=1)
            parser.error(f"unrecognized argument {name}" + (f" (did you mean {close[0]}?)" if close else "")
                         + " (the run's config keys go as --model.<key>=..., --data.<key>=..., --trainer.<key>=..."
                         + (", one argument each, list entries as key[i]" if one_token else "") + ")")
    return args, rest
