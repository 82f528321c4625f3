"""Fixtures of the pipeline tests: one tiny trained run shared by the session."""

from __future__ import annotations

import glob
import os
import subprocess
from pathlib import Path

import lightning as L
import pytest
import yaml

from tests.warm_python import run_warm

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "configs" / "dvrp_smoke.yaml")


def hockey_dqn_config(tmp_path: Path, callbacks: list[dict]) -> str:
    """A small DQN run on the hockey env's discrete actions (8 envs, 40-step episodes, 2,560 frames, a
    checkpoint every 10 updates) with ``callbacks``, written to ``tmp_path / hockey.yaml``; returns the path."""
    config = {
        "seed_everything": 0,
        "model": {"class_path": "modules.dqn.DQNModule",
                  "init_args": {"network": {"class_path": "modules.q_networks.QNetwork",
                                            "init_args": {"num_actions": 8, "hidden_dims": [32]}},
                                "lr": 1e-3, "n_steps": 1}},
        "data": {"class_path": "pipelines.data.OffPolicyDataModule",
                 "init_args": {"env": {"class_path": "envs.hockey.HockeyConfig",
                                       "init_args": {"discrete_actions": True, "max_steps": 40, "max_steps_train": 40}},
                               "collector": {"num_envs": 8, "frames_per_batch": 64}, "total_frames": 2560,
                               "replay_buffer": {"buffer_size": 10000, "batch_size": 32, "utd_ratio": 1,
                                                 "init_random_frames": 64},
                               "seed": 0}},
        "trainer": {"accelerator": "cpu", "devices": 1, "enable_progress_bar": False,
                    "enable_model_summary": False,
                    "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                               "init_args": {"save_dir": str(tmp_path), "name": "hockey"}},
                    "callbacks": [*callbacks,
                                  {"class_path": "callbacks.ModelCheckpoint",
                                   "init_args": {"every_n_train_steps": 10, "save_top_k": -1, "save_last": True}}]},
    }
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "hockey.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def run_module(module: str, *args: str, timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m module args`` from the repo root; returns the completed process (text output). It runs as a
    child of a warm interpreter (:mod:`tests.warm_python`: torch and Lightning imported once); a test of a fresh
    start-up (the environment read at import, the import policy) starts its own interpreter with ``subprocess``.

    Raises:
        subprocess.TimeoutExpired: it ran past ``timeout`` seconds.
    """
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)  # (keep the caller's)
    return run_warm(module, list(args), str(REPO), {**os.environ, "PYTHONPATH": path, **(env or {})}, timeout)


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory) -> dict:
    """The smoke config trained once in a subprocess: its log dir and checkpoints."""
    out = tmp_path_factory.mktemp("smoke")
    proc = run_module("pipelines.fit", "--config", SMOKE, f"--trainer.logger.init_args.save_dir={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    log_dir = out / "dvrp_smoke" / "version_0"
    return {"dir": log_dir, "last": str(log_dir / "checkpoints" / "last.ckpt"),
            "stdout": proc.stdout, "stderr": proc.stderr,
            "events": glob.glob(str(log_dir / "events.out.tfevents.*"))}


class AtTrainStart(L.Callback):
    """Calls ``read(trainer, module)`` at ``on_train_start`` (after a resume has restored everything, before the
    first collection) and keeps what it returns in ``value``: what a resumed run starts from, read before it
    trains on (a resume must train at least one batch: ``pipelines.fit`` refuses a budget already spent)."""

    def __init__(self, read) -> None:
        self.read, self.value = read, None

    def on_train_start(self, trainer, pl_module) -> None:
        self.value = self.read(trainer, pl_module)
