"""The declared callback protocol: the data stream calls ``on_batch_collected`` of every ``RLCallback`` once per
collected batch, after the module counted its frames, and of no other callback."""

from __future__ import annotations

import lightning as L

from callbacks.base import RLCallback
from modules.base import RLModule
from pipelines.data import RLDataModule
from pipelines.fit import FitCLI
from tests.pipelines.conftest import REPO

CARTPOLE_DQN = str(REPO / "configs" / "cartpole_dqn.yaml")


class _Probe(RLCallback):
    def __init__(self) -> None:
        self.seen: list[tuple[int, int, int]] = []  # (collected_frames, frames of the batch, optimiser steps)

    def on_batch_collected(self, trainer, pl_module, batch) -> None:
        self.seen.append((pl_module.collected_frames, batch.numel(), trainer.global_step))


class _Undeclared(L.Callback):
    """Has a method of the hook's name but is no RLCallback: the stream must not call it."""

    def __init__(self) -> None:
        self.calls = 0

    def on_batch_collected(self, trainer, pl_module, batch) -> None:
        self.calls += 1


def test_rl_callbacks_see_every_batch_after_its_frames_are_counted(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["fit"])
    args = ["--config", CARTPOLE_DQN, "--data.init_args.total_frames=1280",
            "--data.init_args.replay_buffer.init_random_frames=256",
            "--trainer.callbacks=[]", "--trainer.enable_progress_bar=false", "--trainer.logger=false",
            "--trainer.enable_checkpointing=false", f"--trainer.default_root_dir={tmp_path}"]
    cli = FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                 save_config_callback=None, auto_configure_optimizers=False, args=args)
    probe, undeclared = _Probe(), _Undeclared()
    cli.trainer.callbacks.extend([probe, undeclared])
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert [frames for frames, _, _ in probe.seen] == [256, 512, 768, 1024, 1280]  # this batch's frames included
    assert all(size == 256 for _, size, _ in probe.seen)
    steps = [step for _, _, step in probe.seen]
    assert steps[0] == 0 and steps == sorted(steps) and steps[-1] < cli.trainer.global_step  # before its training
    assert undeclared.calls == 0
