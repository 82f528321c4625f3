"""Rollout worker processes (``data.workers``): same seeds per row as in-process envs, different
trajectories per worker, a dead worker stops the run with an error, and bad settings are rejected."""

from __future__ import annotations

import json
import os
import signal

import lightning as L
import pytest
import torch
from torch import nn

from envs import make_env
from tests.pipelines.conftest import REPO

VACUUM = str(REPO / "configs" / "vacuum.yaml")
SMALL = {"grid_size": 4, "num_robots": 2, "energy": [100, 100], "chargers": [], "max_steps": 10}


class _Batches(L.Callback):
    """Keeps the collected batches; optionally kills worker 0 after the ``kill_after``-th batch."""

    def __init__(self, kill_after: int | None = None) -> None:
        self.batches, self.kill_after = [], kill_after

    def on_batch_collected(self, trainer, pl_module, batch) -> None:
        self.batches.append(batch.clone())
        if self.kill_after is not None and len(self.batches) == self.kill_after:
            os.kill(trainer.datamodule._collector.procs[0].pid, signal.SIGKILL)


def _fit(tmp_path, callback: L.Callback, *extra: str):
    from modules.base import RLModule
    from pipelines.data import RLDataModule
    from pipelines.fit import FitCLI

    env = json.dumps({"class_path": "envs.vacuum.VacuumConfig", "init_args": SMALL})
    cli = FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                 save_config_callback=None, auto_configure_optimizers=False,
                 args=["--config", VACUUM, "--trainer.enable_progress_bar=false", "--trainer.logger=false",
                       f"--trainer.default_root_dir={tmp_path}", "--trainer.enable_checkpointing=false",
                       "--trainer.callbacks=[]", f"--data.init_args.env={env}",
                       "--model.init_args.network.init_args.num_agents=2", "--data.init_args.workers=2",
                       "--data.init_args.total_frames=640", "--data.init_args.init_random_frames=128", *extra])
    cli.trainer.callbacks.append(callback)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return cli


def test_workers_collect_the_rows_of_the_in_process_env_and_train(tmp_path):
    batches = _Batches()
    cli = _fit(tmp_path, batches)
    assert cli.model.collected_frames == 640 and cli.trainer.global_step == (640 - 128) // 32
    first = batches.batches[0]
    assert first.shape == (8, 4)  # [num_envs, T]: worker 0's 4 rows, then worker 1's
    # every row starts like the same row of one in-process env seeded alike: worker w's envs are rows
    # w * 4 .. w * 4 + 3, with their own seeds (so the two workers' trajectories differ)
    reference = make_env(cli.datamodule.env_config, 8, cli.datamodule.seed).reset()
    assert torch.equal(first["observation"][:, 0], reference["observation"])
    assert not torch.equal(first["observation"][:4], first["observation"][4:])


def test_a_dead_worker_stops_the_run_with_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="process failed"):
        _fit(tmp_path, _Batches(kill_after=2))


def test_bad_worker_settings_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="data.workers=3"):
        _fit(tmp_path, _Batches(), "--data.init_args.workers=3")


class _Elementwise(nn.Module):
    """A batch-size independent policy (no matrix products): ``tanh(scale * observation[:, :4])``."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(scale))

    def forward(self, observation):
        return (self.scale * observation[:, :4]).tanh()


def test_env_calls_between_batches_reach_the_worker_envs():
    """Settings, per-row opponents and an opponent policy set between batches change the workers' envs
    exactly as they change one in-process env: both collect the same rows."""
    from tensordict.nn import TensorDictModule
    from torchrl.collectors import Collector

    from callbacks.selfplay import SnapshotPlayer
    from envs.hockey import HockeyConfig
    from pipelines.mailbox import EnvCalls
    from pipelines.workers import WorkerCollector

    config, policy = HockeyConfig(opponent="weak", max_steps=12), TensorDictModule(_Elementwise(1.0), ["observation"], ["action"])
    player = SnapshotPlayer(TensorDictModule(_Elementwise(-0.7), ["observation"], ["action"]))
    kinds = ["policy", "strong", "static", "policy", "policy", "weak", "strong", "policy"]

    def on_env(base) -> None:  # the calls on one in-process env ...
        base.configure(mode="TRAIN_DEFENSE", w_closeness=5.0)
        base.set_opponent(kinds)
        base.set_opponent_policy(player)

    def on_workers(env_calls: EnvCalls) -> None:  # ... and on the workers' envs
        env_calls.call("configure", mode="TRAIN_DEFENSE", w_closeness=5.0)
        env_calls.call_rows("set_opponent", kinds)
        env_calls.call("set_opponent_policy", player)

    def collect(workers: bool, with_calls: bool) -> list:
        if workers:
            env_calls = EnvCalls(2, 4)
            collector = WorkerCollector(config, 8, 2, 3, policy, 160, calls=env_calls)
        else:
            env = make_env(config, 8, 3)
            collector = Collector(env, policy, frames_per_batch=160, total_frames=-1, trust_policy=True,
                                  auto_register_policy_transforms=False)
        batches, iterator = [], iter(collector)
        try:
            for i in range(3):
                batches.append(next(iterator).clone())
                if i == 0 and with_calls:
                    on_workers(env_calls) if workers else on_env(env.base_env)
        finally:
            collector.shutdown()
        return batches

    local, remote, unchanged = collect(False, True), collect(True, True), collect(False, False)
    for a, b in zip(local, remote):
        assert torch.equal(a["next", "observation"], b["next", "observation"])
        assert torch.equal(a["next", "reward"], b["next", "reward"])
    assert torch.equal(local[0]["next", "reward"], unchanged[0]["next", "reward"])
    assert not torch.allclose(local[2]["next", "reward"], unchanged[2]["next", "reward"])  # the calls had effects


def test_self_play_with_workers_trains(tmp_path):
    from callbacks import SelfPlay
    from pipelines.fit import main
    from tests.pipelines.conftest import hockey_dqn_config

    callbacks = [{"class_path": "callbacks.SelfPlay", "init_args": {"every_n_frames": 384, "pool_size": 2}}]
    cli = main(["--config", hockey_dqn_config(tmp_path, callbacks), "--data.init_args.workers=2"])
    selfplay = next(c for c in cli.trainer.callbacks if isinstance(c, SelfPlay))
    assert len(selfplay.pool) == 2 and selfplay.drawn["self"] > 0
