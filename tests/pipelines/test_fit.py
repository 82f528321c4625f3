"""The real entry point, end to end: training, logging, checkpoints, resume, bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from modules.flexibility import FlexibilityModel
from pipelines.fit import main
from tests.conftest import periodic_checkpoints
from tests.pipelines.conftest import REPO, SMOKE, run_module

REQUIRED_SCALARS = {
    "rollout/episode_return", "rollout/plan_cost_km", "rollout/failure_rate", "rollout/served",
    "train/loss_objective", "train/loss_critic", "train/loss_entropy", "train/entropy", "train/kl_approx",
    "train/clip_fraction", "train/lr", "time/frames", "time/frames_per_s", "eval/episode_return",
    "flexibility/loss", "flexibility/accuracy", "flexibility/bayes_accuracy", "flexibility/share_0",
}


def test_smoke_run_logs_and_checkpoints(smoke_run):
    assert (smoke_run["dir"] / "config.yaml").is_file(), "the resolved config is saved beside the logs"
    assert (smoke_run["dir"] / "checkpoints" / "last.ckpt").is_file()
    acc = EventAccumulator(smoke_run["events"][0])
    acc.Reload()
    assert REQUIRED_SCALARS <= set(acc.Tags()["scalars"]), REQUIRED_SCALARS - set(acc.Tags()["scalars"])
    assert "eval/routes" in acc.Tags()["images"]
    assert "flexibility/predicted_type" in acc.Tags()["histograms"]
    frames = [e.step for e in acc.Scalars("rollout/episode_return")]
    assert frames == sorted(frames) and frames[-1] == 1920, "x-axis = collected frames"
    assert "frames" in smoke_run["stdout"], "progress bar counted in frames"
    ckpt = torch.load(smoke_run["last"], weights_only=True)
    assert ckpt["rl_state"]["collected_frames"] == 1920
    assert ckpt["global_step"] == 16  # 4 batches x 2 epochs x 2 minibatches


def test_flexibility_updates_at_the_configured_interval_and_in_the_checkpoint(smoke_run):
    """The smoke config updates the flexibility model every 960 frames; the checkpoint holds the schedule,
    the outcome store and the pushed weights, which differ from the initial ones."""
    acc = EventAccumulator(smoke_run["events"][0])
    acc.Reload()
    assert [e.step for e in acc.Scalars("flexibility/updates")] == [960, 1920]
    assert [e.value for e in acc.Scalars("flexibility/updates")] == [1.0, 2.0]
    ckpt = torch.load(smoke_run["last"], weights_only=True)
    state = next(v for k, v in ckpt["callbacks"].items() if k.startswith("FlexibilityUpdate"))
    assert state["updates"] == 2 and state["next_frames"] == 2880
    stored = state["store"]["_storage"]["_len"]
    assert 0 < stored <= 1920, stored
    weights = ckpt["OnPolicyDataModule"]["env_models"]["flexibility"]
    initial = FlexibilityModel(4, 4, embedding_dim=4, hidden_dim=32).state_dict()
    assert weights.keys() == initial.keys()
    assert not all(torch.equal(weights[k], initial[k]) for k in weights), "the trained model was not saved"


def test_a_checkpoint_from_before_the_env_models_left_the_config_continues_the_same(smoke_run, tmp_path):
    """A checkpoint written while the flexibility model lived in the env config (its recorded config with the model's
    ``num_types`` and ``num_attributes``, its weights under the data module's ``embedding_model``) continues to the
    same weights and flexibility model as today's checkpoint of the same run."""
    old = torch.load(smoke_run["last"], weights_only=True)
    flexibility = old["fit_config"]["data"]["init_args"]["env"]["init_args"]["flexibility"]["init_args"]
    flexibility.update(num_types=4, num_attributes=4)
    old["OnPolicyDataModule"]["embedding_model"] = old["OnPolicyDataModule"].pop("env_models")["flexibility"]
    torch.save(old, tmp_path / "old.ckpt")
    common = ["--config", SMOKE, "--trainer.enable_progress_bar=false", "--data.init_args.total_frames=2880"]
    runs = [main([*common, f"--trainer.logger.init_args.save_dir={tmp_path / name}", f"--ckpt_path={ckpt}"])
            for name, ckpt in (("now", smoke_run["last"]), ("old", tmp_path / "old.ckpt"))]
    assert all(run.model.collected_frames == 2880 for run in runs)
    a, b = (run.model.state_dict() for run in runs)
    assert all(torch.equal(a[k], b[k]) for k in a), "the old checkpoint continued to other weights"
    fa, fb = (run.datamodule.env_models["flexibility"].state_dict() for run in runs)
    assert all(torch.equal(fa[k], fb[k]) for k in fa), "the old checkpoint's flexibility model was not restored"


def test_the_retrained_flexibility_model_reaches_the_rollout_workers(tmp_path, monkeypatch):
    """With 2 rollout worker processes, each worker's envs hold a copy of the run's flexibility model; every update
    (``callbacks.FlexibilityUpdate``) is loaded into the learner's model and the workers' copies alike."""
    import lightning as L

    from modules.base import RLModule
    from pipelines.data import RLDataModule
    from pipelines.fit import FitCLI

    monkeypatch.setattr("sys.argv", ["fit"])
    cli = FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                 save_config_callback=None, auto_configure_optimizers=False,
                 args=["--config", SMOKE, "--data.init_args.collector.workers=2", "--trainer.logger=false",
                       "--trainer.enable_checkpointing=false", "--trainer.enable_progress_bar=false",
                       "--trainer.callbacks=[]", "--trainer.callbacks+=callbacks.FlexibilityUpdate",
                       "--trainer.callbacks.every_n_frames=960", f"--trainer.default_root_dir={tmp_path}"])
    seen = {}

    class WorkerWeights(L.Callback):
        def on_train_end(self, trainer, pl_module) -> None:  # (before the data module stops the workers)
            collector = trainer.datamodule._collector
            seen["workers"] = collector.map_fn("env.base_env.flexibility.state_dict", [()] * 2, [{}] * 2)

    cli.trainer.callbacks.append(WorkerWeights())
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    learner = cli.datamodule.env_models["flexibility"].state_dict()
    initial = FlexibilityModel(4, 4, embedding_dim=4, hidden_dim=32).state_dict()
    assert not all(torch.equal(learner[k], initial[k]) for k in learner), "the model was never updated"
    assert len(seen["workers"]) == 2
    for weights in seen["workers"]:
        assert all(torch.equal(weights[k], learner[k]) for k in learner), "a worker plays an outdated model"


def test_print_config_shows_the_whole_run():
    proc = run_module("pipelines.fit", "--config", SMOKE, "--print_config")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for key in ("frames_per_batch", "total_frames", "envs.dvrp.DVRPConfig", "served_reward", "clip_epsilon"):
        assert key in proc.stdout


def _params(path: str) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["state_dict"]


def test_resume_continues_frames_optimizer_and_rng(tmp_path, capsys):
    """A run stopped at a checkpoint and resumed with --ckpt_path ends exactly where the uninterrupted
    run ends: same frames, optimiser steps and weights (so the same data, optimiser and RNG state)."""
    common = ["--config", SMOKE, "--trainer.callbacks=[]", "--trainer.enable_progress_bar=false"]
    checkpointing = ["--trainer.callbacks+=callbacks.FlexibilityUpdate", "--trainer.callbacks.every_n_frames=960",
                     "--trainer.callbacks.epochs=2",
                     '--trainer.callbacks+=callbacks.ModelCheckpoint',
                     "--trainer.callbacks.every_n_train_steps=4", "--trainer.callbacks.save_top_k=-1",
                     "--trainer.callbacks.save_last=true"]
    full = main([*common, *checkpointing, f"--trainer.logger.init_args.save_dir={tmp_path / 'a'}"])
    ckpt_dir = tmp_path / "a" / "dvrp_smoke" / "version_0" / "checkpoints"
    mid = periodic_checkpoints(ckpt_dir)[8]
    assert mid.is_file(), sorted(p.name for p in ckpt_dir.iterdir())
    assert torch.load(mid, weights_only=True)["rl_state"]["collected_frames"] == 960
    capsys.readouterr()
    resumed = main([*common, *checkpointing, f"--trainer.logger.init_args.save_dir={tmp_path / 'b'}",
                    f"--ckpt_path={mid}"])
    assert resumed.model.collected_frames == full.model.collected_frames == 1920
    assert "frames: 960 in " in capsys.readouterr().out  # this process's frames (it printed 1,920 before)
    assert resumed.trainer.global_step == full.trainer.global_step == 16
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from the uninterrupted run"
    ea, eb = (run.datamodule.env_models["flexibility"].state_dict() for run in (full, resumed))
    assert all(torch.equal(ea[k], eb[k]) for k in ea), "resumed flexibility model differs"
    store_a, store_b = (next(c for c in run.trainer.callbacks if type(c).__name__ == "FlexibilityUpdate").outcomes()
                        for run in (full, resumed))
    assert store_a.numel() > 0 and (store_a == store_b).all(), "resumed outcome store differs"
    sa, sb = full.trainer.optimizers[0].state_dict(), resumed.trainer.optimizers[0].state_dict()
    assert all(torch.equal(sa["state"][i]["exp_avg"], sb["state"][i]["exp_avg"]) for i in sa["state"])


def _fails_before_training(proc, *needles: str) -> None:
    assert proc.returncode != 0
    text = proc.stderr + proc.stdout
    for needle in needles:
        assert needle in text, f"{needle!r} not in error output:\n{text[-2000:]}"
    assert "frames/s" not in proc.stdout, "training started"


def test_unknown_key_is_rejected(tmp_path):
    _fails_before_training(run_module("pipelines.fit", "--config", SMOKE, "--data.init_args.num_envz=4",
                                      f"--trainer.logger.init_args.save_dir={tmp_path}"), "num_envz")
    assert not any(tmp_path.iterdir())


def test_negative_num_envs_is_rejected(tmp_path):
    _fails_before_training(run_module("pipelines.fit", "--config", SMOKE, "--data.init_args.collector.num_envs=-4",
                                      f"--trainer.logger.init_args.save_dir={tmp_path}"), "num_envs")


def test_missing_instance_file_is_rejected(tmp_path):
    missing = str(tmp_path / "nowhere" / "R201.txt")
    _fails_before_training(run_module("pipelines.fit", "--config", SMOKE,
                                      f"--data.init_args.env.init_args.instances={missing}",
                                      f"--trainer.logger.init_args.save_dir={tmp_path}"), missing)


def test_flexibility_update_without_a_model_is_rejected(tmp_path):
    env = {"class_path": "envs.dvrp.DVRPConfig", "init_args": {"flexibility": None}}
    _fails_before_training(run_module("pipelines.fit", "--config", SMOKE, "--data.init_args.env", json.dumps(env),
                                      f"--trainer.logger.init_args.save_dir={tmp_path}"),
                           "FlexibilityUpdate needs an env with a flexibility model")


def test_missing_oracle_checkpoint_is_rejected(tmp_path):
    missing = str(tmp_path / "no_oracle.ckpt")
    _fails_before_training(run_module("pipelines.fit", "--config", SMOKE,
                                      "--data.init_args.env.init_args.oracle=neural",
                                      "--data.init_args.env.init_args.improve_every=0",  # (the insertion payment:
                                      "--data.init_args.env.init_args.cutoff_sweeps=0",  # the neural oracle's)
                                      f"--data.init_args.env.init_args.oracle_checkpoint={missing}",
                                      f"--trainer.logger.init_args.save_dir={tmp_path}"), missing, "no such file")


def test_malformed_instance_file_is_rejected(tmp_path):
    bad = tmp_path / "broken.txt"
    bad.write_text("R201\n\nVEHICLE\nNUMBER CAPACITY\n  25  oops\n\nCUSTOMER\n0 1 2\n")
    env = {"class_path": "envs.dvrp.DVRPConfig", "init_args": {"instances": str(bad), "capacity": None}}
    _fails_before_training(run_module("pipelines.fit", "--config", SMOKE, "--data.init_args.env", json.dumps(env),
                                      f"--trainer.logger.init_args.save_dir={tmp_path}"), str(bad), "malformed")


def test_last_checkpoint_holds_the_end_of_training(tmp_path):
    """``callbacks.ModelCheckpoint`` writes last.ckpt when training ends, though 39 steps are no multiple of
    its ``every_n_train_steps: 10`` (Lightning's own last.ckpt would hold step 30)."""
    from tests.pipelines.conftest import hockey_dqn_config

    cli = main(["--config", hockey_dqn_config(tmp_path, [])])
    state = torch.load(tmp_path / "hockey" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    assert cli.trainer.global_step == 39 and state["global_step"] == 39
    assert state["rl_state"]["collected_frames"] == cli.model.collected_frames
    assert all(torch.equal(v, state["state_dict"][k]) for k, v in cli.model.state_dict().items())


def test_the_data_device_follows_the_trainer(tmp_path):
    """One flag for the device: ``data.device`` unset takes the trainer's root device (here the CPU); the envs,
    collector and batches live there."""
    cli = main(["--config", str(REPO / "configs" / "cartpole_dqn.yaml"), "--trainer.enable_progress_bar=false",
                "--trainer.callbacks=[]", f"--trainer.default_root_dir={tmp_path}", "--trainer.logger=false",
                "--data.init_args.total_frames=512", "--data.init_args.replay_buffer.init_random_frames=256"])
    assert cli.config.data.init_args.device is None
    assert cli.datamodule.device == str(cli.trainer.strategy.root_device) == "cpu"


def test_a_warm_up_of_part_of_a_batch_is_collected_in_whole_batches_without_a_warning(tmp_path):
    """``init_random_frames: 1000`` in batches of 256 (``cartpole_dqn.yaml``): TorchRL collects 1,024 random frames
    either way and warned so on every run; the collector now gets the whole batches, and updates still start after
    the frames the config names."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli = main(["--config", str(REPO / "configs" / "cartpole_dqn.yaml"), "--trainer.enable_progress_bar=false",
                    "--trainer.callbacks=[]", f"--trainer.default_root_dir={tmp_path}", "--trainer.logger=false",
                    "--data.init_args.total_frames=1536", "--data.init_args.replay_buffer.init_random_frames=1000"])
    assert not [w for w in caught if "multiple of frames_per_batch" in str(w.message)]
    # batches at 256 ... 1,536 frames: the random ones up to 1,024, updates from the batch past 1,000 (1,024) on
    assert cli.trainer.global_step == 3 * cli.datamodule.replay_options.utd_ratio


def test_a_run_ends_with_its_summary_and_no_library_noise(smoke_run):
    """The smoke fit's console: none of the known harmless library messages, TorchRL lines through the
    progress bar, and one summary at the end naming the run folder, frames, the evaluation and checkpoints."""
    from pipelines.console import QUIET_INFO

    out, err = smoke_run["stdout"], smoke_run["stderr"]
    for noise in ("IterableDataset", "LeafSpec", "smaller than the logging interval", *(p for p, _ in QUIET_INFO)):
        assert noise not in out and noise not in err, noise
    summary = out[out.index("run folder: "):]
    assert f"run folder: {smoke_run['dir']}\n" in summary
    assert "frames: 1,920 in " in summary
    line = next(x for x in summary.splitlines() if x.startswith("evaluation "))
    assert re.fullmatch(r"evaluation eval/episode_return: final -?[\d.]+ ± [\d.]+ at [\d,]+ frames; best -?[\d.]+ at "
                        r"[\d,]+ frames \(\d+ validation episodes, seed [\d,]+; held-out ones: pipelines.evaluate\)",
                        line), line
    assert f"checkpoints: {smoke_run['dir'] / 'checkpoints' / 'last.ckpt'}" in summary


def test_tensorboard_holds_the_config_and_reference_charts(smoke_run):
    """HPARAMS: the model's, data pipeline's and env's settings from the resolved config (no hp_metric); the
    custom-scalars layout charts a metric with its references; no constant series."""
    from tensorboard.backend.event_processing import plugin_event_accumulator
    from tensorboard.plugins.custom_scalar import layout_pb2
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = plugin_event_accumulator.EventAccumulator(str(smoke_run["dir"]))
    events.Reload()
    scalars = list(events.PluginTagToContent("scalars"))
    assert "hp_metric" not in scalars and "rollout/episodes" not in scalars
    start = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = plugin_data_pb2.HParamsPluginData.FromString(start).session_start_info.hparams
    assert hparams["env.num_customers"].number_value == 30 and hparams["model.class"].string_value == "PPOModule"
    assert hparams["model.network.embed_dim"].number_value == 32
    assert hparams["data.collector.frames_per_batch"].number_value == 480
    layout = layout_pb2.Layout.FromString(events.Tensors("custom_scalars__config__")[0].tensor_proto.string_val[0])
    charts = {c.title: list(c.multiline.tag) for category in layout.category for c in category.chart}
    assert charts["flexibility accuracy"] == ["flexibility/accuracy", "flexibility/bayes_accuracy"]
    assert charts["episode return"] == ["rollout/episode_return", "eval/episode_return"]


DENORMAL_PROBE = """
import sys, torch
from modules.base import RLModule
from pipelines.data import RLDataModule
from pipelines.fit import FitCLI
FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
       save_config_callback=None, auto_configure_optimizers=False, args=sys.argv[1:])
print((torch.tensor([1e-30]) * 1e-10).item())  # 1e-40: a denormal float32
"""


def test_denormals_are_flushed_unless_the_run_says_otherwise(tmp_path):
    """A fit computes with denormal floats flushed to zero (Adam's second moments of near-zero gradients are
    denormal, and the CPU is many times slower with them); ``--flush_denormal=false`` keeps them."""
    values = []
    for extra in ([], ["--flush_denormal=false"]):
        proc = subprocess.run([sys.executable, "-c", DENORMAL_PROBE, "--config", SMOKE, "--trainer.logger=false",
                               f"--trainer.default_root_dir={tmp_path}", *extra], cwd=REPO, capture_output=True,
                              text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert proc.returncode == 0, proc.stderr[-2000:]
        values.append(float(proc.stdout.strip().splitlines()[-1]))
    assert values[0] == 0.0 and 0.0 < values[1] < 1e-38


@pytest.mark.slow  # (17 s; `make test-slow`)
def test_the_large_config_trains_on_days_of_mixed_sizes(tmp_path):
    """configs/dvrp_large.yaml as shipped, but for the budget and batch: its days of 30, 50 and 100 customers are
    collected and trained on together, the periodic evaluation plays them, and the run's checkpoint plays a
    200-customer day with 14 vehicles (an env of other N and M than any it trained on)."""
    small = ["--data.init_args.collector.num_envs=6", "--data.init_args.collector.frames_per_batch=600",
             "--data.init_args.total_frames=1200",
             "--model.init_args.mini_batch_size=300", "--trainer.callbacks=[]",
             "--trainer.callbacks+=callbacks.FlexibilityUpdate", "--trainer.callbacks.every_n_frames=600",
             "--trainer.callbacks+=callbacks.PolicyEvaluation", "--trainer.callbacks.every_n_frames=600",
             "--trainer.callbacks.num_envs=4", "--trainer.callbacks+=callbacks.ModelCheckpoint",
             "--trainer.callbacks.save_last=true", f"--trainer.logger.init_args.save_dir={tmp_path}"]
    proc = run_module("pipelines.fit", "--config", "configs/dvrp_large.yaml", *small, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ckpt = tmp_path / "dvrp_large" / "version_0" / "checkpoints" / "last.ckpt"
    out = tmp_path / "routes.json"
    proc = run_module("pipelines.evaluate", "--ckpt_path", str(ckpt), "--episodes", "2", "--policies", "fallback",
                      "--data.init_args.env.init_args.num_customers=200",
                      "--data.init_args.env.init_args.num_vehicles=14", "--routes_out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    routes = json.loads(out.read_text())["episodes"]
    assert all(r["num_vehicles"] == 14 and len(r["customers"]) > 100 for r in routes)


def test_the_gpu_config_is_the_headline_cut_into_shorter_batches(tmp_path):
    """configs/dvrp_gpu.yaml trains the headline's env and network with its budget and learning rate, only on more
    envs with batches of T = 6 steps (episodes run on across batches); on a CPU, with few envs, it trains through
    several cut episodes and writes its checkpoint."""
    gpu, cpu = (yaml.safe_load((REPO / "configs" / name).read_text()) for name in ("dvrp_gpu.yaml", "dvrp.yaml"))
    assert gpu["data"]["init_args"]["env"] == cpu["data"]["init_args"]["env"]
    # (the GPU's batches are cut into its own minibatches; cuda_graph replays the same update as one CUDA graph)
    minibatches = ("ppo_epochs", "mini_batch_size", "cuda_graph")
    assert {k: v for k, v in gpu["model"]["init_args"].items() if k not in minibatches} == \
        {k: v for k, v in cpu["model"]["init_args"].items() if k not in minibatches}
    data = gpu["data"]["init_args"]
    assert data["total_frames"] >= cpu["data"]["init_args"]["total_frames"]
    collector = data["collector"]
    assert collector["frames_per_batch"] // collector["num_envs"] == 6 and collector["num_envs"] == 8192
    small = ["--trainer.accelerator=cpu", "--data.init_args.collector.num_envs=8",
             "--data.init_args.collector.frames_per_batch=48",
             "--data.init_args.total_frames=480", "--model.init_args.mini_batch_size=24", "--trainer.callbacks=[]",
             "--trainer.callbacks+=callbacks.ModelCheckpoint", "--trainer.callbacks.save_last=true",
             f"--trainer.logger.init_args.save_dir={tmp_path}"]
    proc = run_module("pipelines.fit", "--config", "configs/dvrp_gpu.yaml", *small, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "dvrp_gpu" / "version_0" / "checkpoints" / "last.ckpt").exists()
