"""A config value that a constructor rejects ends ``pipelines.fit`` the way a typo does: exit status 2, one
``error:`` line naming the key (or file) and what is allowed, no traceback, nothing written."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.pipelines.conftest import REPO, SMOKE
from tests.warm_python import run_python


@pytest.mark.parametrize("override,message", [
    ("--model.init_args.gamma=1.5", r"model\.gamma=1\.5 is not allowed: in \[0, 1\]"),
    ("--model.init_args.lr=1e300", r"model\.lr=1e\+300 is not allowed: a learning rate in \(0, 1\]"),
    ("--data.init_args.collector.frames_per_batch=1001",
     r"data\.collector\.frames_per_batch=1001 must be a multiple of data\.collector\.num_envs"),
    ("--data.init_args.collector.cudagraph_policy=true",
     r"data\.collector\.cudagraph_policy=true needs a CUDA device .*got cpu"),
    ("--data.init_args.env.init_args.instances={tmp}/none/*.txt", r"env\.instances=.*none/\*\.txt' matches no file"),
    ("--data.init_args.env.init_args.instances={tmp}/broken.txt", r"instance file .*broken\.txt' is malformed"),
])
def test_rejected_value_exits_2_with_one_message(tmp_path, override, message):
    (tmp_path / "broken.txt").write_text("this is not\na solomon file\n")
    run = run_python([sys.executable, "-m", "pipelines.fit", "--config", SMOKE, override.format(tmp=tmp_path)],
                     cwd=tmp_path, capture_output=True, text=True, timeout=300,
                     env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 2, run.stderr[-2000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert re.search(message, errors[0]), errors[0]
    assert sorted(os.listdir(tmp_path)) == ["broken.txt"]  # no run folder, no checkpoint


def _fit(cwd, *args: str) -> subprocess.CompletedProcess:
    return run_python([sys.executable, "-m", "pipelines.fit", "--config", SMOKE, *args], cwd=cwd,
                      capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_outputs_stay_under_default_root_dir(tmp_path):
    """``--trainer.default_root_dir`` holds the run (the config's relative logger ``save_dir: runs`` inside it);
    nothing is written in the working directory."""
    run = _fit(tmp_path, f"--trainer.default_root_dir={tmp_path / 'root'}", "--data.init_args.total_frames=3840")
    assert run.returncode == 0, run.stderr[-2000:]
    assert os.listdir(tmp_path) == ["root"]
    version = tmp_path / "root" / "runs" / "dvrp_smoke" / "version_0"
    assert (version / "config.yaml").is_file() and any((version / "checkpoints").glob("*.ckpt"))


@pytest.mark.parametrize("key,value", [("name", "../../escaped"), ("version", "/tmp/elsewhere")])
def test_logger_folders_that_leave_the_run_root_are_rejected(tmp_path, key, value):
    run = _fit(tmp_path, f"--trainer.logger.init_args.{key}={value}")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert f"trainer.logger.init_args.{key}={value!r} is not allowed" in run.stderr
    assert os.listdir(tmp_path) == [] and not os.path.exists("/tmp/elsewhere")


def test_a_run_without_logger_writes_nothing_into_the_working_directory(tmp_path):
    """``--trainer.logger=false``: the config and checkpoints go to ``runs/unlogged/version_<k>``; the user's own
    ``config.yaml`` in the working directory is left as it was."""
    (tmp_path / "config.yaml").write_text("mine: 1\n")
    for version in (0, 1):
        run = _fit(tmp_path, "--trainer.logger=false", "--data.init_args.total_frames=960")
        assert run.returncode == 0, run.stderr[-2000:]
        folder = tmp_path / "runs" / "unlogged" / f"version_{version}"
        assert (folder / "config.yaml").is_file() and any((folder / "checkpoints").glob("*.ckpt"))
    assert (tmp_path / "config.yaml").read_text() == "mine: 1\n"
    assert sorted(os.listdir(tmp_path)) == ["config.yaml", "runs"]


def test_a_run_never_overwrites_a_config_it_did_not_create(tmp_path):
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "config.yaml").write_text("mine: 1\n")
    run = _fit(tmp_path, "--trainer.logger=false", f"--trainer.default_root_dir={tmp_path / 'own'}",
               "--data.init_args.total_frames=960")
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert "config.yaml exists: a run never overwrites a file it did not create" in run.stderr
    assert (tmp_path / "own" / "config.yaml").read_text() == "mine: 1\n"
    assert os.listdir(tmp_path / "own") == ["config.yaml"]


def test_a_renamed_key_stops_with_one_line_naming_its_new_name(tmp_path):
    config = (REPO / "configs" / "cartpole_dqn.yaml").read_text().replace("annealing_frames", "decay_frames")
    assert "decay_frames" in config
    (tmp_path / "old.yaml").write_text(config)
    run = run_python([sys.executable, "-m", "pipelines.fit", "--config", str(tmp_path / "old.yaml")], cwd=tmp_path,
                     capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 2, run.stderr[-2000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert re.search(r"decay_frames: renamed annealing_frames \(a key of callbacks\.(epsilon\.)?EpsilonDecay\)",
                     errors[0]), errors[0]
    assert sorted(os.listdir(tmp_path)) == ["old.yaml"]
