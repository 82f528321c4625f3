"""``model.cuda_graph``: the whole update of a minibatch as one CUDA graph (:mod:`modules.graph_update`). On a CPU the
same function runs without a graph, and must give the plain update's weights, steps and metrics; the settings that
would skip part of the update are refused before any work. The GPU side: ``tests/pipelines/test_gpu_path.py``."""

from __future__ import annotations

import pytest
import torch

from modules.base import RLModule
from modules.graph_update import graph_adam
from pipelines.data import RLDataModule
from pipelines.fit import FitCLI
from tests.pipelines.conftest import REPO, SMOKE

QUIET = ["--trainer.accelerator=cpu", "--trainer.logger=false", "--trainer.enable_checkpointing=false",
         "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]"]
# PPO: 2 batches x 2 epochs x 2 minibatches; DQN: 2 batches after the 2 of random frames, 4 updates each (the target
# copied after 8 updates), each writing its TD errors for the replay's priorities
RUNS = {"ppo": (["--config", SMOKE, "--data.init_args.total_frames=960"], 8, ("train/loss", "train/lr")),
        "dqn": (["--config", str(REPO / "configs" / "cartpole_dqn.yaml"), "--data.init_args.total_frames=1024",
                 "--data.init_args.replay_buffer.init_random_frames=512", "--data.init_args.replay_buffer.utd_ratio=4",
                 "--model.init_args.target_update_interval=8"], 8, ("train/loss", "train/td_error"))}


def _cli(tmp_path, *extra: str) -> FitCLI:
    return FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                  save_config_callback=None, auto_configure_optimizers=False,
                  args=[*extra, *QUIET, f"--trainer.default_root_dir={tmp_path}"])


@pytest.mark.parametrize("algorithm", list(RUNS))
def test_the_graphed_update_on_a_cpu_gives_the_plain_updates_weights(algorithm, tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["fit"])
    args, steps, metrics = RUNS[algorithm]
    runs = []
    for graph in (False, True):
        cli = _cli(tmp_path / str(graph), *args, f"--model.init_args.cuda_graph={str(graph).lower()}")
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        runs.append(cli)
    plain, graphed = runs
    assert graphed.model._graphed_update is not None and plain.model._graphed_update is None
    assert isinstance(graphed.trainer.optimizers[0].param_groups[0]["lr"], torch.Tensor)
    assert graphed.trainer.global_step == plain.trainer.global_step == steps
    for (name, a), b in zip(plain.model.state_dict().items(), graphed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    for key in (*metrics, "train/grad_norm"):
        assert graphed.model.latest_metrics[key] == plain.model.latest_metrics[key], key


def test_a_tensor_learning_rate_follows_the_schedule_without_reading_the_device():
    weight = torch.nn.Parameter(torch.zeros(3))
    optimizer = graph_adam([weight], 0.01, torch.device("cpu"))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / 4)
    rate = optimizer.param_groups[0]["lr"]
    for _ in range(2):
        weight.grad = torch.ones(3)
        optimizer.step()
        schedule.step()
    assert optimizer.param_groups[0]["lr"] is rate  # filled in place: what a captured step reads
    assert rate.item() == pytest.approx(0.005)
    assert optimizer.param_groups[0]["initial_lr"] == 0.01 and isinstance(schedule.base_lrs[0], float)


@pytest.mark.parametrize("extra, message", [
    (["--trainer.precision=bf16-mixed"], "model.cuda_graph=true needs one device"),
    (["--model.init_args.compile=true", "--model.init_args.compile_mode=reduce-overhead"],
     "model.cuda_graph=true captures the whole update already"),
])
def test_settings_the_graph_would_skip_are_refused_before_any_work(tmp_path, monkeypatch, capsys, extra, message):
    monkeypatch.setattr("sys.argv", ["fit"])
    with pytest.raises(SystemExit) as exit_:
        _cli(tmp_path, "--config", SMOKE, "--model.init_args.cuda_graph=true", *extra)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
