"""The GPU path (marked ``gpu``; skipped without CUDA): ``--trainer.accelerator=gpu`` trains each algorithm with its
env, networks and replay on the device, and an update never waits for the host: every ``training_step`` runs under
``torch.cuda.set_sync_debug_mode("error")``, which raises at the first host synchronisation: PPO, DQN and TD3 (passed
on an H100, 2026-11-27). (Not SAC yet: its
update no longer builds TorchRL's ``TanhNormal``, whose bound check read the host twice per update, but the hockey
SAC run on an H200 still counted one host read per training step, at a site not yet traced.)"""

from __future__ import annotations

import pytest
import torch

from modules.base import RLModule
from modules.graph_update import WARMUP_CALLS
from pipelines.data import RLDataModule
from pipelines.fit import FitCLI
from tests.pipelines.conftest import REPO

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (--trainer.accelerator=gpu)")]

PPO = ["--config", str(REPO / "configs" / "dvrp_smoke.yaml")]
DQN = ["--config", str(REPO / "configs" / "cartpole_dqn.yaml"), "--data.init_args.replay_buffer.init_random_frames=256"]
GRAPH = "--model.init_args.cuda_graph=true"
RUNS = {"ppo": PPO, "ppo_cuda_graph": [*PPO, GRAPH],
        "dqn": [*DQN, "--data.init_args.total_frames=2048"],
        "dqn_cuda_graph": [*DQN, "--data.init_args.total_frames=2048", GRAPH],
        "td3": ["--config", str(REPO / "configs" / "pendulum_td3.yaml"), "--data.init_args.total_frames=504",
                "--data.init_args.replay_buffer.init_random_frames=104"]}


@pytest.mark.parametrize("algorithm", list(RUNS))
def test_updates_on_the_gpu_never_synchronise_with_the_host(algorithm, tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["fit"])
    args = [*RUNS[algorithm], "--trainer.accelerator=gpu", "--trainer.enable_checkpointing=false",
            "--trainer.logger=false", "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
            f"--trainer.default_root_dir={tmp_path}"]
    cli = FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                 save_config_callback=None, auto_configure_optimizers=False, args=args)
    module, step = cli.model, cli.model.training_step
    steps = []

    def strict_step(batch, batch_idx):
        torch.cuda.set_sync_debug_mode("error")
        try:
            return step(batch, batch_idx)
        finally:
            torch.cuda.set_sync_debug_mode(0)
            steps.append((module.device.type, cli.datamodule.env.device.type))

    module.training_step = strict_step
    cli.trainer.fit(module, datamodule=cli.datamodule)
    assert steps and set(steps) == {("cuda", "cuda")} and cli.trainer.global_step > 0


def test_a_dqn_run_under_cuda_graphs_keeps_every_updates_td_errors(tmp_path, monkeypatch):
    """``model.compile_mode: reduce-overhead`` with many updates per training step: the TD errors of the step's
    updates are stacked after the last one ran; the graph's replays used to overwrite them ("accessing tensor
    output of CUDAGraphs that has been overwritten by a subsequent run", the hockey DQN at 65,536 envs)."""
    monkeypatch.setattr("sys.argv", ["fit"])
    args = [*RUNS["dqn"], "--trainer.accelerator=gpu", "--model.init_args.compile=true",
            "--model.init_args.compile_mode=reduce-overhead", "--trainer.enable_checkpointing=false",
            "--trainer.logger=false", "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
            f"--trainer.default_root_dir={tmp_path}"]
    cli = FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                 save_config_callback=None, auto_configure_optimizers=False, args=args)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert cli.trainer.global_step > 128


# the same data for both runs: PPO one collected batch (the same weights collect it), 4 updates at a constant learning
# rate; DQN the batches of random frames, then one batch, 4 updates (sampled by the same generator)
GRAPHED = {"ppo": [*PPO, "--data.init_args.total_frames=480", "--model.init_args.lr_schedule=constant"],
           "dqn": [*DQN, "--data.init_args.total_frames=512", "--data.init_args.replay_buffer.utd_ratio=4"]}


@pytest.mark.parametrize("algorithm", list(GRAPHED))
def test_the_graphed_update_replays_the_eager_one(algorithm, tmp_path, monkeypatch):
    """``model.cuda_graph``: 4 updates, the last two replays of the captured graph; the weights end as the eager
    updates leave them, to float32 rounding (the graph's Adam reads a float32 learning rate)."""
    monkeypatch.setattr("sys.argv", ["fit"])
    runs = []
    for graph in ("false", "true"):
        args = [*GRAPHED[algorithm], "--trainer.accelerator=gpu", "--trainer.enable_checkpointing=false",
                "--trainer.logger=false", "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
                f"--model.init_args.cuda_graph={graph}", f"--trainer.default_root_dir={tmp_path / graph}"]
        cli = FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                     save_config_callback=None, auto_configure_optimizers=False, args=args)
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        runs.append(cli)
    eager, graphed = runs
    graph = graphed.model._graphed_update._graph
    assert graph.counter == WARMUP_CALLS and isinstance(graph.graph, torch.cuda.CUDAGraph)  # captured, replayed
    assert eager.trainer.global_step == graphed.trainer.global_step == 4
    assert isinstance(graphed.trainer.optimizers[0].param_groups[0]["lr"], torch.Tensor)  # the one the graph reads
    for (name, a), b in zip(eager.model.state_dict().items(), graphed.model.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=name)
