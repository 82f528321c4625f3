"""DDP on two CPU processes (gloo): ranks collect with different seeds, weights stay identical."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import torch

from modules.flexibility import FlexibilityModel
from tests.pipelines.conftest import REPO, SMOKE, run_module


def test_ddp_two_cpu_ranks(tmp_path):
    probe = tmp_path / "probe"
    proc = run_module("pipelines.fit", "--config", SMOKE, "--trainer.strategy=ddp", "--trainer.accelerator=cpu",
                      "--trainer.devices=2", "--trainer.callbacks=[]", "--trainer.enable_progress_bar=false",
                      "--trainer.callbacks+=callbacks.FlexibilityUpdate", "--trainer.callbacks.every_n_frames=960",
                      "--trainer.callbacks+=tests.pipelines.ddp_probe.DDPProbe", f"--trainer.callbacks.out_dir={probe}",
                      f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}", timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((probe / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert all(r["world"] == 2 for r in ranks)
    assert set(ranks[0]["row_seed"]).isdisjoint(ranks[1]["row_seed"]), "ranks must collect with different seeds"
    assert ranks[0]["first_xy"] != ranks[1]["first_xy"], "ranks played the same instances"
    assert ranks[0]["params"] == ranks[1]["params"], "weights diverged across ranks"
    initial = torch.cat([p.flatten() for p in FlexibilityModel(4, 4, 4, 32).parameters()]).tolist()
    assert ranks[0]["embedding"] == ranks[1]["embedding"], "flexibility models diverged across ranks"
    assert ranks[0]["embedding"] != initial, "the flexibility model was never updated"
    # the frame budget counts both ranks: 1920 frames = 2 batches of 480 per rank
    assert ranks[0]["frames"] == ranks[1]["frames"] == 1920
    assert ranks[0]["steps"] == ranks[1]["steps"] == 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # (16 s; `make test-slow`)
def test_td3_on_two_cpu_ranks_with_unused_parameters_found(tmp_path):
    """TD3 under DDP (``ddp_find_unused_parameters_true``: its critic-only updates leave the actor out): both ranks
    train, and their weights stay identical."""
    probe = tmp_path / "probe"
    proc = run_module("pipelines.fit", "--config", str(REPO / "configs" / "pendulum_td3.yaml"),
                      "--trainer.strategy=ddp_find_unused_parameters_true", "--trainer.accelerator=cpu",
                      "--trainer.devices=2", "--trainer.callbacks=[]", "--trainer.enable_progress_bar=false",
                      "--data.init_args.total_frames=512", "--data.init_args.replay_buffer.init_random_frames=104",
                      "--model.init_args.network.init_args.actor_hidden_dims=[32, 32]",
                      "--model.init_args.network.init_args.critic_hidden_dims=[32, 32]",
                      "--trainer.callbacks+=tests.pipelines.ddp_probe.DDPProbe", f"--trainer.callbacks.out_dir={probe}",
                      f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}", timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((probe / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["params"] == ranks[1]["params"], "weights diverged across ranks"
    assert ranks[0]["steps"] == ranks[1]["steps"] > 0


@pytest.mark.slow  # (17 s; `make test-slow`)
def test_ddp_two_nodes_on_loopback(tmp_path):
    """``--trainer.num_nodes=2`` as on two machines (one process per node, ``NODE_RANK`` 0 and 1, the master on
    loopback): the nodes collect with different seeds, end with identical weights, and count frames over both."""
    probe, port = tmp_path / "probe", str(_free_port())
    args = [sys.executable, "-m", "pipelines.fit", "--config", SMOKE, "--trainer.strategy=ddp",
            "--trainer.accelerator=cpu", "--trainer.num_nodes=2", "--trainer.devices=1", "--trainer.callbacks=[]",
            "--trainer.enable_progress_bar=false", "--trainer.callbacks+=tests.pipelines.ddp_probe.DDPProbe",
            f"--trainer.callbacks.out_dir={probe}", f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}"]
    nodes = []
    for node in (0, 1):
        env = {**os.environ, "PYTHONPATH": str(REPO), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
               "NODE_RANK": str(node)}
        nodes.append(subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    try:
        outputs = [node.communicate(timeout=600) for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    for node, (_, err) in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, err[-4000:]
    ranks = [json.loads((probe / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert all(r["world"] == 2 for r in ranks)
    assert set(ranks[0]["row_seed"]).isdisjoint(ranks[1]["row_seed"]), "nodes must collect with different seeds"
    assert ranks[0]["first_xy"] != ranks[1]["first_xy"], "nodes played the same instances"
    assert ranks[0]["params"] == ranks[1]["params"], "weights diverged across nodes"
    assert ranks[0]["frames"] == ranks[1]["frames"] == 1920  # 2 batches of 480 frames on each node
