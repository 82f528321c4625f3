"""The worked examples of ``docs/envs/your-own.md`` run as the page says: a user's own gymnasium env (``module:id``)
and a user's own native batched TorchRL env with its config class each train by config alone, once their module is
allowed, and evaluate above the random policy; without the variable the run is refused in one line that says how
to allow it."""

from __future__ import annotations

import json

import pytest

from tests.pipelines.conftest import REPO, run_module

ALLOW = {"RLPIPE_ALLOW_IMPORTS": "examples.line_walk"}


@pytest.mark.parametrize("config", ["line_walk_gym_ppo", "line_walk_ppo"])
def test_your_own_env_trains_and_evaluates_by_config_alone(tmp_path, config):
    path = str(REPO / "examples" / f"{config}.yaml")
    refused = run_module("pipelines.fit", "--config", path, f"--trainer.logger.init_args.save_dir={tmp_path}",
                         timeout=120)
    assert refused.returncode == 2 and "RLPIPE_ALLOW_IMPORTS=examples.line_walk" in refused.stderr, refused.stderr
    assert not list(tmp_path.iterdir())
    fit = run_module("pipelines.fit", "--config", path, f"--trainer.logger.init_args.save_dir={tmp_path}",
                     "--trainer.enable_progress_bar=false", env=ALLOW, timeout=300)
    assert fit.returncode == 0, fit.stderr[-2000:]
    ckpt = tmp_path / config / "version_0" / "checkpoints" / "last.ckpt"
    evaluated = run_module("pipelines.evaluate", "--ckpt_path", str(ckpt), "--episodes", "100", env=ALLOW,
                           timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    rows = json.loads(evaluated.stdout.strip().splitlines()[-1])
    trained, random = rows["ppo"], rows["random"]
    assert trained["mean_return"] > 0.9  # (always stepping right: 1 - 0.01 x the steps before the end)
    assert trained["mean_return"] - random["mean_return"] > 5 * random["return_se"]
