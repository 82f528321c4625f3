"""pipelines.seeds: several seeds of one config, their summary and learning curves."""

from __future__ import annotations

import json

import matplotlib.image
import pytest

from pipelines.scalars import read_scalars
from tests.pipelines.conftest import REPO, run_module

CARTPOLE = str(REPO / "configs" / "cartpole_dqn.yaml")
TINY = ["--data.init_args.total_frames=1024", "--data.init_args.init_random_frames=256", "--data.init_args.utd_ratio=4",
        "--model.init_args.network.init_args.hidden_dims=[32]"]


def test_two_seeds_run_and_are_summarised(tmp_path):
    out = tmp_path / "study"
    proc = run_module("pipelines.seeds", "--config", CARTPOLE, "--seeds", "1", "2", "--parallel", "2",
                      "--out", str(out), *TINY, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["metric"] == "eval/episode_return"
    finals = {}
    for seed in (1, 2):
        steps, values = read_scalars(str(out / f"seed_{seed}"))["eval/episode_return"]
        finals[seed] = values[-1]
        assert summary["seeds"][str(seed)]["final"] == pytest.approx(values[-1])
        assert summary["seeds"][str(seed)]["frames"] == 1024
        config = next((out / f"seed_{seed}").rglob("config.yaml")).read_text()
        assert f"seed_everything: {seed}" in config and f"seed: {seed}" in config
    assert summary["mean"] == pytest.approx((finals[1] + finals[2]) / 2)
    image = matplotlib.image.imread(out / "curves.png")
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert json.loads((out / "summary.json").read_text())["mean"] == summary["mean"]
    # a finished seed is read, not run again; a new one runs
    again = run_module("pipelines.seeds", "--config", CARTPOLE, "--seeds", "1", "3", "--out", str(out), *TINY,
                       timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "seed 1: running" not in again.stderr and "seed 3: running" in again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1])["seeds"]["1"] == summary["seeds"]["1"]


def test_an_unknown_option_is_named():
    proc = run_module("pipelines.seeds", "--config", CARTPOLE, "--seeds", "1", "--paralel", "2", timeout=60)
    assert proc.returncode == 2 and "unrecognized argument --paralel" in proc.stderr
