"""Checkpoint files: writing them atomically (:class:`AtomicCheckpointIO`), checking one before a resume, the run
configs a checkpoint belongs to (read by :func:`modules.loading.read_checkpoint`, plain data only). The learned models
an env needs are built and read from their checkpoint files by :mod:`pipelines.env_models`."""

from __future__ import annotations

import contextlib
import errno
import glob
import importlib
import os
import sys
import tempfile
from typing import Any

import torch
import yaml
from lightning.pytorch.plugins.io import TorchCheckpointIO

from modules.import_policy import PROJECT_PACKAGES
from modules.loading import check_lightning_version, read_checkpoint
from pipelines.config_files import check_config_inputs
from pipelines.renamed import upgrade_config
from pipelines.settings import MISSING, settings_diff


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``TorchCheckpointIO`` whose local saves are atomic in the checkpoint's own folder: the file is
    written to a temporary file beside it (``<name>.<random>.tmp``), flushed to disk (``fsync``), and renamed over
    the target (``os.replace``, atomic on one file system), then the folder is synced. A crash at any moment
    leaves either the previous file or the new one, complete; the temporary file of a process killed while writing
    is removed by the next save of that name (one run at a time writes a run folder: ``pipelines.fit`` locks it).
    (Lightning's own save writes its temporary file in the system's temporary folder, which ``shutil.move`` copies
    non-atomically when that is another file system, and which a crash leaves behind there.) ``pipelines.fit`` adds
    it unless the config lists a checkpoint IO plugin. Remote paths (``s3://`` ...) are left to Lightning.

    Raises:
        TypeError: ``storage_options`` (as Lightning's).
        OSError: the write failed; a full disk is ``ENOSPC`` naming the file (torch's own error for it says
            "unexpected pos").
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        path = os.fspath(path)
        if storage_options is not None or "://" in path:
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        for stale in glob.glob(glob.escape(os.path.join(folder, os.path.basename(path))) + ".*.tmp"):
            with contextlib.suppress(OSError):  # left by a process killed while writing (the run folder is locked)
                os.remove(stale)
        fd, temp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temp, path)
        except BaseException as err:
            with contextlib.suppress(OSError):
                os.remove(temp)
            if isinstance(err, Exception) and not isinstance(err, OSError) and _disk_full(folder):
                # torch's writer reports a full disk as "unexpected pos ..." (a RuntimeError without errno)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path) from err
            raise
        with contextlib.suppress(OSError):  # the rename itself reaches the disk
            dir_fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


def _disk_full(folder: str, margin: int = 1 << 20) -> bool:
    """Whether the file system of ``folder`` has less than ``margin`` bytes left for this user."""
    try:
        stats = os.statvfs(folder)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < margin


CONFIG_KEY = "fit_config"  # a training checkpoint's record of the resolved config it was trained with
MODEL_KEYS = (("model", "class_path"), ("model", "init_args", "network"))  # what an evaluation must share
IDENTITY_KEYS = (*MODEL_KEYS, ("data", "class_path"), ("data", "init_args", "env"))  # ... and a resumed run


def check_resume_checkpoint(path: str, config: dict, keys: tuple[tuple[str, ...], ...] = IDENTITY_KEYS) -> int | None:
    """Check, before anything is built or written, that ``path`` is a training checkpoint of this config's kind:
    it exists, reads as tensors and plain data (``weights_only``), is a Lightning checkpoint, and was trained
    with the config's model class, networks, data module class and env (as the checkpoint's record of its config,
    ``checkpoint[CONFIG_KEY]``, says, with renamed keys in their new places and two import paths of one class taken
    as the same class; checkpoints without that record are
    checked by the model class in ``hyper_parameters`` and the data module entry). Other keys (learning rate,
    ``total_frames``, callbacks...) may change on resume.

    Args:
        path: the ``--ckpt_path`` file. config: the resolved config as plain data (``model``, ``data``, ...).
        keys: the config entries that must equal the checkpoint's (:data:`IDENTITY_KEYS` to resume;
            :data:`MODEL_KEYS` to evaluate, where the env may differ).

    Returns:
        The frames the checkpoint's run had collected (``rl_state``), or None when it does not say.

    Raises:
        ValueError: what is wrong, naming the file (and the first key whose value differs, with both values).
    """
    if not os.path.isfile(path):
        raise ValueError(f"--ckpt_path={path!r}: no such file")
    checkpoint = read_checkpoint(path, "--ckpt_path")
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ValueError(f"--ckpt_path={path!r} is not a training checkpoint of pipelines.fit (no state_dict)")
    check_lightning_version(checkpoint, f"--ckpt_path={path!r}")
    model_class, data_class = config["model"]["class_path"], config["data"]["class_path"]
    trained = checkpoint.get(CONFIG_KEY)
    if isinstance(trained, dict):
        trained = upgrade_config(trained)[0]  # recorded before a key was renamed or moved: compared in its new place
        for entry in keys:
            differences = [d for d in settings_diff(_get(trained, entry), _get(config, entry), ".".join(entry))
                           if not _same_class(*d)]
            if differences:
                key, was, now = (None if v is MISSING else v for v in differences[0])
                raise ValueError(f"--ckpt_path={path!r} was trained with another config: {key}={was!r} there, "
                                 f"{now!r} in this config")
        return _frames(checkpoint)
    trained_model = (checkpoint.get("hyper_parameters") or {}).get("_class_path")
    if trained_model is not None and trained_model != model_class:
        raise ValueError(f"--ckpt_path={path!r} was trained with model {trained_model}; this config's model is "
                         f"{model_class}")
    data_name = data_class.rpartition(".")[2]
    trained_data = [k for k in checkpoint if isinstance(k, str) and k.endswith("DataModule")]
    if trained_data and data_name not in trained_data:
        raise ValueError(f"--ckpt_path={path!r} was trained with data module {trained_data[0]}; this config's data "
                         f"module is {data_class}")
    return _frames(checkpoint)


def _same_class(key: str, was: object, now: object) -> bool:
    """Whether two values of a ``class_path`` key name the same class under two import paths (e.g. a re-export,
    ``modules.dqn.QNetwork``, and the defining module's path, ``modules.q_networks.QNetwork``)."""
    if not (key.endswith("class_path") and isinstance(was, str) and isinstance(now, str)):
        return False
    classes = [_resolved(path) for path in (was, now)]
    return classes[0] is not None and classes[0] is classes[1]


def _resolved(path: str) -> type | None:
    """The class at the import path ``path``: imported only from this project's packages (a recorded config's paths
    run no other code), else looked up among the modules already imported; None when it is not found."""
    module_name, _, name = path.rpartition(".")
    module = sys.modules.get(module_name)
    if module is None and module_name.split(".")[0] in PROJECT_PACKAGES:
        with contextlib.suppress(ImportError):
            module = importlib.import_module(module_name)
    cls = getattr(module, name, None)
    return cls if isinstance(cls, type) else None


def run_configs(path: str) -> tuple[list[str], str]:
    """The fit config of the run a checkpoint belongs to, for a command given only ``--ckpt_path``: the
    ``config.yaml`` of its run folder (``<run>/checkpoints/<file>.ckpt``, as ``pipelines.fit`` writes it), else
    the config the checkpoint records (``checkpoint[CONFIG_KEY]``, as a YAML string that LightningCLI's
    ``--config`` takes). A config written before keys were renamed or moved comes with them in their new places
    (:func:`pipelines.renamed.upgrade_config`, said in the message).

    Returns:
        The ``--config`` values, and where they came from (a message).

    Raises:
        ValueError: no such file, an unreadable one, or one with neither (names the places looked at).
    """
    if not os.path.isfile(path):
        raise ValueError(f"--ckpt_path={path!r}: no such file")
    folder = os.path.dirname(os.path.abspath(path))
    run_folder = os.path.dirname(folder) if os.path.basename(folder) == "checkpoints" else folder
    beside = os.path.join(run_folder, "config.yaml")
    if os.path.isfile(beside):
        check_config_inputs(["--config", beside])
        with open(beside, encoding="utf-8") as f:
            record, source = yaml.safe_load(f), beside
        if not isinstance(record, dict):
            return [beside], beside  # (the parser says what is wrong with it)
    else:
        record, source = read_checkpoint(path, "--ckpt_path"), f"the config recorded in {path}"
        record = record.get(CONFIG_KEY) if isinstance(record, dict) else None
        if not isinstance(record, dict):
            raise ValueError(f"--ckpt_path={path!r}: no {beside} and the checkpoint records no config; give --config")
    record, moved = upgrade_config({k: v for k, v in record.items() if k != "ckpt_path"})
    if source == beside and not moved:
        return [beside], beside
    return [yaml.safe_dump(record)], source + (f" (keys moved since: {', '.join(moved)})" if moved else "")


def _frames(checkpoint: dict) -> int | None:
    frames = (checkpoint.get("rl_state") or {}).get("collected_frames")
    return int(frames) if isinstance(frames, int) else None


def weights_mismatch(err: BaseException, path: str, what: str = "--ckpt_path") -> ValueError | None:
    """The message for loading ``path``'s weights into networks of another shape (torch's ``load_state_dict``
    ``RuntimeError``), or None for any other error. ``what``: the file's role in the message."""
    if not isinstance(err, RuntimeError) or not str(err).startswith("Error(s) in loading state_dict"):
        return None
    detail = " ".join(str(err).split())[:200]
    named = f"{what}={path!r}" if what.startswith("--") else f"{what} {path!r}"
    return ValueError(f"{named}: its weights do not fit this config's networks (was it trained with "
                      f"another config?): {detail}")


def _get(tree: object, keys: tuple[str, ...]) -> object:
    for key in keys:
        tree = tree.get(key) if isinstance(tree, dict) else None
    return tree
