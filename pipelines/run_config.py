"""What a run's config gets before anything is built (``pipelines.fit`` applies these in this order): the
callbacks and plugins every run has, one seed for everything, one folder for every output, and the run folder
a resumed run continues in."""

from __future__ import annotations

import argparse
import difflib
import fcntl
import os
import secrets
from pathlib import PurePath

from jsonargparse import Namespace


def add_default_callbacks(trainer: Namespace) -> None:
    """Callbacks and plugins every run has: ``callbacks.NonFiniteGuard`` (stops a run whose updates keep being
    non-finite) and ``pipelines.checkpoints.AtomicCheckpointIO`` (checkpoints written atomically). Both are in
    ``configs/defaults.yaml``, which every run reads first; a config that replaces the defaults' lists
    (``callbacks:`` instead of ``callbacks+:``, or its own ``plugins``) gets them added here where it has none.
    TensorBoard gets its hyper-parameters from :func:`pipelines.tensorboard_layout.write_run_header` (the resolved
    config: the model's, the data pipeline's and the env's settings), so Lightning's own logging of the module's
    (``enable_autolog_hparams``) and its ``hp_metric`` placeholder (a constant -1) are off. With
    ``enable_progress_bar: false`` the config's ``callbacks.FrameProgressBar`` is left out (Lightning refuses a
    progress bar callback then)."""
    trainer.enable_autolog_hparams = False
    for logger in trainer.get("logger") if isinstance(trainer.get("logger"), list) else [trainer.get("logger")]:
        if isinstance(logger, Namespace) and str(logger.get("class_path", "")).endswith("TensorBoardLogger"):
            logger.init_args.default_hp_metric = False
    callbacks = trainer.get("callbacks") or []
    # no bar asked for: the config's frame bar goes (Lightning refuses both)
    if trainer.get("enable_progress_bar") is False:
        callbacks = trainer.callbacks = [c for c in callbacks if not (
            isinstance(c, Namespace) and str(c.get("class_path", "")).endswith("FrameProgressBar"))]
    if not any(isinstance(c, Namespace) and str(c.get("class_path", "")).endswith("NonFiniteGuard") for c in callbacks):
        trainer.callbacks = [*callbacks, Namespace(class_path="callbacks.NonFiniteGuard",
                                                   init_args=Namespace(max_consecutive=100))]
    plugins = trainer.get("plugins")
    plugins = [] if plugins is None else plugins if isinstance(plugins, list) else [plugins]
    if not any(isinstance(p, Namespace) and str(p.get("class_path", "")).endswith("CheckpointIO") for p in plugins):
        trainer.plugins = [*plugins, Namespace(class_path="pipelines.checkpoints.AtomicCheckpointIO",
                                               init_args=Namespace())]


def frames_budget(trainer: Namespace) -> None:
    """The run's budget is the data module's ``total_frames`` alone: the stream of collected batches ends there and
    stops the trainer, so Lightning's epoch count is set unlimited (``max_epochs: -1``) and a resumed run trains on
    up to the budget whether or not its checkpoint was taken at the end of a stream. ``max_epochs`` may be left
    unset, -1 or 1 (configs written before this rule said 1); Lightning's ``max_steps`` and ``max_time`` still stop
    a run early.

    Raises:
        ValueError: another ``trainer.max_epochs`` (it would not be a budget of this run).
    """
    epochs = trainer.get("max_epochs")
    if epochs not in (None, -1, 1):
        raise ValueError(f"trainer.max_epochs={epochs!r} is not allowed: the run's budget is "
                         f"data.init_args.total_frames (frames); leave max_epochs unset")
    trainer.max_epochs = -1


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


LIGHTNING_DEFAULT_NAME = "lightning_logs"  # the name Lightning's TensorBoard and CSV loggers get when none is given


def name_run(config: Namespace) -> None:
    """A logger left at Lightning's default name (``lightning_logs``) is named after the run's config files: their
    stems joined by ``_``, so ``--config configs/envs/cartpole.yaml --config configs/algos/dqn.yaml`` writes
    ``runs/cartpole_dqn/version_<k>`` (a config that names its run, ``logger: {init_args: {name: ...}}``, keeps it)."""
    stems = [os.path.splitext(os.path.basename(str(path)))[0] for path in config.get("config") or []]
    loggers = config.trainer.get("logger")
    for logger in loggers if isinstance(loggers, list) else [loggers]:
        args = logger.get("init_args") if isinstance(logger, Namespace) else None
        if stems and isinstance(args, Namespace) and args.get("name") == LIGHTNING_DEFAULT_NAME:
            args.name = "_".join(stems)


def in_folder(config: dict, folder: str) -> dict[str, object]:
    """The settings (dotted keys) that make a study's run (``pipelines.seeds``, ``pipelines.tune``) of the resolved
    ``config`` write straight into ``folder``: a config with one logger gets it placed there with no name of its own
    (``<folder>/version_<k>/``, the next ``k`` for a rerun), one without a logger (or with several) gets
    ``trainer.default_root_dir`` (``<folder>/checkpoints/``; several loggers each under their own name)."""
    logger = (config.get("trainer") or {}).get("logger")
    if isinstance(logger, dict) and isinstance(logger.get("init_args"), dict):
        return {"trainer.logger.init_args.save_dir": folder, "trainer.logger.init_args.name": ""}
    return {"trainer.default_root_dir": folder}


def place_outputs(trainer: Namespace) -> None:
    """Keep every output of the run under one root: a logger's relative ``save_dir`` is taken inside
    ``trainer.default_root_dir`` when that is given (else the working directory, as Lightning does), ``~`` and
    ``$VAR`` in ``save_dir`` and ``default_root_dir`` are expanded (for every output alike), and a logger's
    ``name``, ``version`` or ``sub_dir`` must be a folder name inside its ``save_dir``. A run without a logger
    (``--trainer.logger=false``, or ``--trainer.fast_dev_run``, under which Lightning drops the logger) and
    without ``default_root_dir`` gets its own folder, ``<save_dir>/<name>/version_<k>`` of the config's logger,
    else ``runs/unlogged/version_<k>`` (the next free k), for its config and checkpoints: Lightning would write
    them into the working directory (``./config.yaml``, ``./checkpoints/``).

    Raises:
        ValueError: a ``name`` / ``version`` / ``sub_dir`` that is absolute, climbs out with ``..`` or holds ``~``
            or ``$``; an unset environment variable in a folder.
    """
    root = trainer.get("default_root_dir")
    if isinstance(root, str):
        root = trainer.default_root_dir = _expand(root, "trainer.default_root_dir")
    loggers = trainer.get("logger")
    logger_list = loggers if isinstance(loggers, list) else [loggers]
    for logger in logger_list:
        args = logger.get("init_args") if isinstance(logger, Namespace) else None
        if args is None:
            continue
        save_dir = args.get("save_dir")
        if isinstance(save_dir, str):
            save_dir = args.save_dir = _expand(save_dir, "trainer.logger.init_args.save_dir")
        if root is not None and isinstance(save_dir, str) and not os.path.isabs(save_dir):
            args.save_dir = os.path.join(root, save_dir)
        for key in ("name", "version", "sub_dir"):
            value = args.get(key)
            if isinstance(value, str) and (os.path.isabs(value) or ".." in PurePath(value).parts
                                           or value.startswith("~") or "$" in value):
                raise ValueError(f"trainer.logger.init_args.{key}={value!r} is not allowed: a folder name inside the "
                                 f"logger's save_dir (not absolute, no '..', '~' or '$')")
    if root is None and (loggers is False or trainer.get("fast_dev_run")):
        # no logger (or Lightning's fast_dev_run, which swaps it for a dummy): the run folder the logger would have
        # given, else runs/unlogged, instead of the working directory
        args = next((lg.get("init_args") for lg in logger_list if isinstance(lg, Namespace)
                     and isinstance(lg.get("init_args"), Namespace)), Namespace())
        folder = os.path.join(args.get("save_dir") or "runs", args.get("name") or "unlogged")
        trainer.default_root_dir = _next_version(folder)


def _expand(path: str, key: str) -> str:
    """``path`` with ``~`` and ``$VAR`` / ``${VAR}`` expanded, so every output of the run (events, config,
    checkpoints) lands in the same folder (TensorBoard expands ``~`` itself, Lightning's checkpoints do not).

    Raises:
        ValueError: a variable that is not set (names it and the key).
    """
    expanded = os.path.expanduser(os.path.expandvars(path))
    if "$" in expanded:
        raise ValueError(f"{key}={path!r}: the environment variable in it is not set")
    return expanded


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


LOCK_FILE = "run.lock"


def lock_run_folder(folder: str) -> int | None:
    """Take the run folder's lock (an exclusive ``flock`` on ``<folder>/run.lock``, held until the process ends
    or the descriptor is closed; the kernel drops it when the process dies, even by SIGKILL), so that two runs
    (e.g. two resumes of one checkpoint) never write one folder at once.

    Returns:
        The lock's file descriptor, or None when another process holds it.
    """
    os.makedirs(folder, exist_ok=True)
    fd = os.open(os.path.join(folder, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _next_version(folder: str) -> str:
    """``<folder>/version_<k>`` for the smallest k >= 0 that does not exist (nothing is created)."""
    taken = {int(n[8:]) for n in (os.listdir(folder) if os.path.isdir(folder) else [])
             if n.startswith("version_") and n[8:].isdigit()}
    return os.path.join(folder, f"version_{min(set(range(len(taken) + 1)) - taken)}")


class CommandParser(argparse.ArgumentParser):
    """The argument parser of the entry points besides ``pipelines.fit`` (whose parser is
    :class:`pipelines.parser.FitArgumentParser`): an option is only ever its full name (argparse would take
    ``--ckpt`` for ``--ckpt_path``), and an error is its one line first, then a pointer to ``--help`` (argparse puts
    the usage block first). Exit status 2."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"error: {message}\n({self.prog} --help lists the options)\n")


# a fit config's options (the first four: the config's keys, which evaluate takes too)
FIT_KEYS = ("--model.", "--data.", "--trainer.", "--seed_everything", "--num_threads", "--weights_from")


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
