"""``pipelines.fit --ckpt_path`` with a file that cannot resume this config (missing, truncated, random bytes,
trained with another model or data module) stops with one message naming the file and what is wrong, exit
status 2, before anything is written."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.pipelines.conftest import REPO, SMOKE

CARTPOLE = str(REPO / "configs" / "cartpole_dqn.yaml")


def _fit(cwd, config: str, ckpt: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.fit", "--config", config, "--ckpt_path", ckpt],
                          cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("case,message", [
    ("missing", r"--ckpt_path='.*missing\.ckpt': no such file"),
    ("truncated", r"truncated\.ckpt' is not a readable checkpoint: truncated, corrupt"),
    ("random", r"random\.ckpt' is not a readable checkpoint"),
    ("other_model", r"other_model\.ckpt' was trained with model modules\.ppo\.PPOModule; this config's model is "
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
    run = _fit(tmp_path, CARTPOLE, str(path))
    assert run.returncode == 2, run.stderr[-2000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert re.search(message, errors[0]), errors[0]
    assert not (tmp_path / "runs").exists()  # nothing written


def test_same_model_with_other_networks_is_named(smoke_run, tmp_path):
    """A checkpoint of the config's own model class whose weights fit other networks: one message, exit 2."""
    run = subprocess.run([sys.executable, "-m", "pipelines.fit", "--config", SMOKE, "--ckpt_path", smoke_run["last"],
                          "--model.init_args.network.init_args.embed_dim=8", "--trainer.logger=false",
                          "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "its weights do not fit this config's networks" in run.stderr
