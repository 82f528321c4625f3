"""Loading a checkpoint never runs code from it: a file that carries a pickled callable is refused by the
evaluation loader and by a resumed fit, and an exported model may only name a class of ``modules``."""

from __future__ import annotations

import os
import pathlib
import signal
import sys

import pytest
import torch

from pipelines.evaluate import load_run
from pipelines.fit import main
from tests.pipelines.conftest import REPO, SMOKE
from tests.warm_python import run_python

CARTPOLE = str(REPO / "configs" / "cartpole_dqn.yaml")


class Payload:
    """Unpickling this object calls ``Path.touch`` on its marker file (what a hostile file would do)."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (self.marker,)


@pytest.fixture
def hostile(smoke_run, tmp_path) -> tuple[str, pathlib.Path]:
    """The smoke run's last checkpoint with one extra entry that runs code when unpickled."""
    checkpoint = torch.load(smoke_run["last"], map_location="cpu", weights_only=True)
    marker = tmp_path / "code_ran"
    checkpoint["extra"] = Payload(marker)
    path = tmp_path / "hostile.ckpt"
    torch.save(checkpoint, path)
    return str(path), marker


def test_evaluation_loader_refuses_code_in_a_checkpoint(hostile, capsys):
    """The evaluation loader checks the file as fit does: one message naming it, exit 2, the payload never runs."""
    path, marker = hostile
    with pytest.raises(SystemExit) as stop:
        load_run(SMOKE, path, [])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "is not a readable checkpoint" in err and "weights-only" in err
    assert not marker.exists()


def test_resume_refuses_code_in_a_checkpoint(hostile, tmp_path, capsys):
    """fit checks the file before building anything: one message naming it, exit 2, the payload never runs."""
    path, marker = hostile
    with pytest.raises(SystemExit) as stop:
        main(["--config", SMOKE, "--ckpt_path", path, "--trainer.logger=false", "--trainer.callbacks=[]",
              "--trainer.enable_checkpointing=false", f"--trainer.default_root_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "is not a readable checkpoint" in err and "weights-only" in err
    assert not marker.exists()


def test_a_kill_during_a_save_leaves_the_previous_checkpoint(tmp_path):
    """SIGKILL halfway through writing the third ``last.ckpt``: the second one is still there, complete, and a
    run resumed from it ends normally (pipelines.fit writes checkpoints atomically: AtomicCheckpointIO)."""
    common = ["--config", CARTPOLE, "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
              "--trainer.callbacks+=callbacks.ModelCheckpoint", "--trainer.callbacks.every_n_train_steps=2",
              "--trainer.callbacks.save_top_k=0", "--trainer.callbacks.save_last=true",
              "--data.init_args.replay_buffer.init_random_frames=256", "--data.init_args.collector.num_envs=4",
              "--data.init_args.collector.frames_per_batch=64", "--data.init_args.replay_buffer.batch_size=32",
              "--data.init_args.replay_buffer.utd_ratio=2",
              "--model.init_args.network.init_args.hidden_dims=[32, 32]", f"--trainer.default_root_dir={tmp_path}"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    killed = run_python([sys.executable, "-m", "pipelines.fit", *common, "--data.init_args.total_frames=6400",
                         "--trainer.callbacks+=tests.pipelines.fault_probe.KillDuringSave",
                         "--trainer.callbacks.save_number=3"],
                        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    folder = tmp_path / "runs" / "cartpole_dqn" / "version_0" / "checkpoints"
    assert [p.name for p in folder.glob("*.ckpt")] == ["last.ckpt"]
    last = torch.load(folder / "last.ckpt", map_location="cpu", weights_only=True)  # complete: it loads
    assert last["global_step"] == 4  # the second save's (every 2 optimiser steps); the third never replaced it
    resumed = run_python([sys.executable, "-m", "pipelines.fit", *common, "--data.init_args.total_frames=640",
                          f"--ckpt_path={folder / 'last.ckpt'}"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    end = torch.load(folder / "last.ckpt", weights_only=True)  # (the run goes on in its own folder)
    assert end["global_step"] > last["global_step"]
