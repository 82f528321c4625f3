"""The GPU path benchmark's size sweep (``benchmarks/gpu_path.py --num_envs``), checked on the CPU: a config scaled
to B envs keeps what its learning depends on per collected frame, and one call reports the fit and the env alone
at each B in one JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from benchmarks.gpu_path import scaled_args
from benchmarks.peer_sb3 import data_settings
from tests.pipelines.conftest import REPO


def _data(name: str) -> dict:
    return data_settings(yaml.safe_load((REPO / "configs" / name).read_text()))


def test_ppo_scaled_to_more_envs_keeps_its_steps_per_env_and_minibatches_per_epoch():
    data = _data("dvrp.yaml")  # 256 envs, 7,680 frames per batch (T = 30), minibatches of 1,920
    assert scaled_args(data, 8192) == {"num_envs": 8192, "frames_per_batch": 245_760, "mini_batch_size": 61_440}
    big = scaled_args(data, 65_536)  # 1,966,080 frames: 4 minibatches would exceed 131,072 frames each
    assert big["frames_per_batch"] == 1_966_080 and big["mini_batch_size"] == 122_880
    assert big["frames_per_batch"] % big["mini_batch_size"] == 0


def test_off_policy_scaled_to_more_envs_keeps_its_replay_ratio():
    data = _data("hockey_dqn.yaml")  # 64 envs, 512 frames per batch, 16 updates of 256: 8 samples per frame
    replay = data["utd_ratio"] * data["batch_size"] / data["frames_per_batch"]
    out = scaled_args(data, 65_536, max_minibatch=65_536)
    assert out["frames_per_batch"] == 524_288 and out["batch_size"] == 65_536 and out["utd_ratio"] == 64
    assert out["utd_ratio"] * out["batch_size"] / out["frames_per_batch"] == replay == 8
    assert out["buffer_size"] >= 4 * out["frames_per_batch"] and out["init_random_frames"] == out["frames_per_batch"]


@pytest.mark.parametrize("sizes", [["8"], pytest.param(["8", "16"], marks=pytest.mark.slow)],  # (2 sizes: 48 s)
                         ids=["one size", "two sizes"])
def test_one_call_reports_every_size_with_the_env_alone(tmp_path, sizes):
    """A GPU config, run on the CPU at 8 (and 16) envs: its fit and its env alone at each size."""
    out = subprocess.run(
        [sys.executable, "benchmarks/gpu_path.py", "--config", "configs/dvrp_gpu.yaml", "--num_envs", *sizes,
         "--runs", "cpu", "--batches", "2", "--warmup_batches", "1", "--env_steps", "5"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])["results"]["configs/dvrp_gpu.yaml"]
    assert set(result) == set(sizes)
    for b, entry in result.items():
        assert entry["settings"]["num_envs"] == int(b)
        run = entry["cpu"]
        assert run["frames_per_s"] > 0 and run["updates"] > 0, run
        assert entry["env_frames_per_s"]["cpu"] > 0
        assert run["fit_over_env"] == run["frames_per_s"] / entry["env_frames_per_s"]["cpu"]
