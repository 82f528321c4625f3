"""``pipelines.fit --ckpt_path`` (and ``pipelines.evaluate --ckpt_path``) with a file that cannot resume this
config (missing, truncated, random bytes, trained with another model, networks or env) stops with one message
naming the file and what is wrong, exit status 2, before anything is written."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

from pipelines.checkpoints import CONFIG_KEY
from tests.pipelines.conftest import REPO, SMOKE
from tests.warm_python import run_python

CARTPOLE = str(REPO / "configs" / "cartpole_dqn.yaml")


def _fit(cwd, config: str, ckpt: str) -> subprocess.CompletedProcess:
    return run_python([sys.executable, "-m", "pipelines.fit", "--config", config, "--ckpt_path", ckpt],
                      cwd=cwd, capture_output=True, text=True, timeout=300,
                      env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("case,message", [
    ("missing", r"--ckpt_path='.*missing\.ckpt': no such file"),
    ("truncated", r"truncated\.ckpt' is not a readable checkpoint: truncated, corrupt"),
    ("random", r"random\.ckpt' is not a readable checkpoint"),
    ("other_model", r"other_model\.ckpt' was trained with another config: model\.class_path='modules\.ppo\.PPOModule' "
                    r"there, 'modules\.dqn\.DQNModule' in this config"),
    ("unrecorded", r"unrecorded\.ckpt' was trained with model modules\.ppo\.PPOModule; this config's model is "
                   r"modules\.dqn\.DQNModule"),
])
def test_bad_checkpoint_exits_2_naming_the_file(smoke_run, tmp_path, case, message):
    path = tmp_path / f"{case}.ckpt"
    data = open(smoke_run["last"], "rb").read()
    if case == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif case == "random":
        path.write_bytes(os.urandom(4096))
    elif case == "other_model":  # the DVRP PPO smoke run's checkpoint given to the CartPole DQN config
        path.write_bytes(data)
    elif case == "unrecorded":  # the same, written before checkpoints recorded their config
        checkpoint = torch.load(smoke_run["last"], map_location="cpu", weights_only=True)
        del checkpoint[CONFIG_KEY]
        torch.save(checkpoint, path)
    run = _fit(tmp_path, CARTPOLE, str(path))
    assert run.returncode == 2, run.stderr[-2000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert re.search(message, errors[0]), errors[0]
    assert not (tmp_path / "runs").exists()  # nothing written


@pytest.mark.parametrize("override,message", [
    ("--model.init_args.network.init_args.embed_dim=8",
     r"was trained with another config: model\.init_args\.network\.init_args\.embed_dim=32 there, 8 in this config"),
    ("--data.init_args.env.init_args.num_customers=20",
     r"was trained with another config: data\.init_args\.env\.init_args\.num_customers=30 there, 20 in this "
     r"config"),
])
def test_same_model_with_other_networks_or_env_is_named(smoke_run, tmp_path, override, message):
    """A checkpoint of the config's own model class trained with other networks or another env: the first key
    that differs, with both values, exit 2, nothing written (the checkpoint records its config)."""
    run = run_python([sys.executable, "-m", "pipelines.fit", "--config", SMOKE, "--ckpt_path", smoke_run["last"],
                      override, "--data.init_args.collector.frames_per_batch=320",
                      "--model.init_args.mini_batch_size=160"],
                     cwd=tmp_path, capture_output=True, text=True, timeout=300,
                     env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 2, run.stderr[-2000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in run.stderr and re.search(message, errors[0]), run.stderr[-2000:]
    assert os.listdir(tmp_path) == []


def test_evaluate_names_a_bad_checkpoint(smoke_run, tmp_path):
    """``pipelines.evaluate`` refuses the same files the same way."""
    (tmp_path / "random.ckpt").write_bytes(os.urandom(4096))
    for ckpt, args, message in ((tmp_path / "random.ckpt", [], "random.ckpt' is not a readable checkpoint"),
                                (smoke_run["last"], ["--model.init_args.network.init_args.embed_dim=8"],
                                 "embed_dim=32 there, 8 in this config")):
        run = run_python([sys.executable, "-m", "pipelines.evaluate", "--config", SMOKE, "--ckpt_path", str(ckpt),
                          "--episodes", "2", *args], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
        assert run.returncode == 2 and "Traceback" not in run.stderr and message in run.stderr, run.stderr[-2000:]


def test_checkpoint_without_config_record_and_other_networks_is_named(smoke_run, tmp_path):
    """A checkpoint without the config record (written before it existed) whose weights fit other networks: the
    weights' shapes are caught when they are loaded; one message, exit 2."""
    checkpoint = torch.load(smoke_run["last"], map_location="cpu", weights_only=True)
    del checkpoint[CONFIG_KEY]
    old = tmp_path / "old.ckpt"
    torch.save(checkpoint, old)
    run = run_python([sys.executable, "-m", "pipelines.fit", "--config", SMOKE, "--ckpt_path", str(old),
                      "--model.init_args.network.init_args.embed_dim=8", "--trainer.logger=false",
                      "--data.init_args.total_frames=3840",  # (more than it trained: a continuation)
                      "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false"],
                     cwd=tmp_path, capture_output=True, text=True, timeout=300,
                     env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "its weights do not fit this config's networks" in run.stderr
