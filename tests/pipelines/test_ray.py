"""Ray actors for collection (``data.collector.mode: ray``) on a simulated two-node cluster
(``ray.cluster_utils.Cluster``, 1 CPU per node): both nodes deliver frames, the actors' policy version follows the
learner's, an actor that dies is restarted and, past ``data.collector.ray.max_restarts``, stops the run naming it;
without Ray installed, the config stops before any work with the install command."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time

import lightning as L
import pytest
import torch

from callbacks.base import RLCallback
from modules.base import RLModule
from pipelines.data import RLDataModule
from pipelines.fit import FitCLI, main
from tests.pipelines.conftest import REPO, SMOKE, hockey_dqn_config, run_module

CARTPOLE_DQN = str(REPO / "configs" / "cartpole_dqn.yaml")


def test_ray_without_the_extra_stops_before_any_work(monkeypatch, tmp_path, capsys):
    real = __import__("importlib").util.find_spec
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    monkeypatch.setattr("sys.argv", ["fit"])
    with pytest.raises(SystemExit) as exit_info:
        main(["--config", CARTPOLE_DQN, "--data.init_args.collector.mode=ray", "--data.init_args.collector.workers=1",
              f"--trainer.logger.init_args.save_dir={tmp_path}"])
    assert exit_info.value.code == 2
    assert "pip install -e .[ray]" in capsys.readouterr().err
    assert not list(tmp_path.iterdir()), "nothing may be written"


def test_ray_options_need_the_ray_collector():
    from pipelines.data import CollectorOptions, RayOptions

    with pytest.raises(ValueError, match="data.collector.ray is set but data.collector.mode is not ray"):
        CollectorOptions(workers=1, ray=RayOptions())
    with pytest.raises(ValueError, match="data.collector.ray.max_restarts=-1"):
        RayOptions(max_restarts=-1)


def test_actor_batches_leave_as_one_buffer():
    """An actor's batches are consolidated (one storage, pickled as one buffer by tensordict's reducer) and carry the
    same entries as TorchRL's plain collector's on the same seeds."""
    import pickle

    from tensordict import TensorDict
    from torchrl.collectors import Collector

    from envs import make_env
    from envs.gym import GymConfig
    from pipelines.data.ray_collector import ConsolidatedCollector

    batches = []
    for cls in (Collector, ConsolidatedCollector):
        torch.manual_seed(0)
        env = make_env(GymConfig(env_id="CartPole-v1"), 2, 0)
        batches.append(cls(env, None, frames_per_batch=64, total_frames=-1, track_traj_ids=False).next())
    plain, consolidated = batches
    assert consolidated.is_consolidated() and not plain.is_consolidated()
    storages = {v.untyped_storage().data_ptr() for v in consolidated.values(True, True)}
    assert len(storages) == 1
    received = pickle.loads(pickle.dumps(consolidated))
    assert isinstance(received, TensorDict) and set(received.keys(True, True)) == set(plain.keys(True, True))
    assert (received == plain).all()


class RayProbe(RLCallback):
    """On every collected batch: the frames' policy versions against the learner's, the actors' nodes and restarts;
    kills actor 0 (``ray.kill``, a restart allowed) after the batches in ``kill_after``."""

    def __init__(self, kill_after: tuple[int, ...] = (), stop_after: int | None = None) -> None:
        self.kill_after, self.stop_after, self.seen = kill_after, stop_after, []

    def on_batch_collected(self, trainer, module, batch) -> None:
        import ray

        collector = trainer.datamodule.collector()
        versions = batch["policy_version"].unique().tolist()
        states = collector.actor_states()
        self.seen.append({"versions": versions, "learner": int(collector.policy.version),
                          "nodes": [s["node_id"] for s in states], "restarts": [s["restarts"] for s in states],
                          "rows": batch.shape[0]})
        if len(self.seen) == 1:
            self.initial = [p.detach().clone() for p in module.parameters()]
        if len(self.seen) in self.kill_after:
            ray.kill(collector._collector.remote_collectors[0], no_restart=False)
        if len(self.seen) == self.stop_after:  # a stuck actor: its process stopped (the nodes are this machine)
            os.kill(states[1]["pid"], signal.SIGSTOP)


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e .[ray])")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, configure_logging=False, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def _run(tmp_path, args: list[str], *callbacks: L.Callback):
    """``pipelines.fit`` in this process on ``args`` (no logger, checkpoints, progress bar or config callbacks), with
    ``callbacks``; returns the CLI."""
    args = [*args, "--trainer.callbacks=[]", "--trainer.enable_progress_bar=false", "--trainer.logger=false",
            "--trainer.enable_checkpointing=false", f"--trainer.default_root_dir={tmp_path}"]
    cli = FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                 save_config_callback=None, auto_configure_optimizers=False, args=args)
    cli.trainer.callbacks.extend(callbacks)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return cli


def _fit(cluster, tmp_path, probe: RayProbe, frames: int, max_restarts: int, extra: list = (), timeout_s: float = 300):
    """The CartPole DQN config on 2 Ray actors of 1 env row each, 512 random warm-up frames."""
    return _run(tmp_path, ["--config", CARTPOLE_DQN, "--data.init_args.collector.mode=ray",
                           "--data.init_args.collector.workers=2",
                           "--data.init_args.collector.num_envs=2", f"--data.init_args.total_frames={frames}",
                           "--data.init_args.replay_buffer.init_random_frames=512",
                           f"--data.init_args.collector.ray.address={cluster.address}",
                           f"--data.init_args.collector.ray.max_restarts={max_restarts}",
                           f"--data.init_args.collector.worker_timeout_s={timeout_s}"], probe, *extra)


@pytest.mark.slow  # (26 s; `make test-slow`)
def test_two_node_cluster_trains_dqn_with_versions_following_the_learner(cluster, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr("sys.argv", ["fit"])
    probe = RayProbe(kill_after=(6,))
    with caplog.at_level(logging.WARNING, logger="pipelines.data.ray_collector"):
        cli = _fit(cluster, tmp_path, probe, frames=3072, max_restarts=1)
    assert cli.model.collected_frames == 3072 and cli.trainer.global_step > 0
    assert all(s["rows"] == 2 for s in probe.seen)  # every round: one env row from each actor
    assert len(set(probe.seen[0]["nodes"])) == 2, "the two actors must run on the two nodes"
    # every frame of round i was played by the weights the learner had after i training rounds (the first 2 rounds,
    # init_random_frames = 512, are random actions: no policy played them)
    assert [s["learner"] for s in probe.seen] == list(range(len(probe.seen)))
    assert [s["versions"] for s in probe.seen[2:]] == [[s["learner"]] for s in probe.seen[2:]], probe.seen
    # actor 0 was killed after round 6, restarted by Ray (logged), and went on with the learner's weights
    assert probe.seen[-1]["restarts"] == [1, 0]
    assert "Ray actor 0" in caplog.text and "restarted (1 of data.collector.ray.max_restarts=1)" in caplog.text
    assert torch.isfinite(torch.tensor(cli.model.latest_metrics.get("train/loss", float("nan"))))


@pytest.mark.slow  # (40 s; `make test-slow`)
def test_an_actor_dying_past_max_restarts_stops_the_run(cluster, tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["fit"])
    with pytest.raises(RuntimeError, match=r"Ray actor 0 .* data.collector.ray.max_restarts=1 restarts are used up"):
        _fit(cluster, tmp_path, RayProbe(kill_after=(2, 4)), frames=3072, max_restarts=1)


class _FirstBatch(RLCallback):
    def on_batch_collected(self, trainer, module, batch) -> None:
        if not hasattr(self, "batch"):
            self.batch = batch.select("observation", "action", ("next", "observation")).clone()


def test_actors_are_seeded_like_the_local_workers(cluster, tmp_path, monkeypatch):
    """Actor w's rows are the local worker w's rows (same env seeds, same torch seed for the random warm-up):
    the first round of a Ray run equals the first batch of a run with 2 worker processes."""
    monkeypatch.setattr("sys.argv", ["fit"])
    ray_first, local_first = _FirstBatch(), _FirstBatch()
    _fit(cluster, tmp_path / "ray", RayProbe(), frames=1024, max_restarts=0, extra=[ray_first])
    _run(tmp_path / "local", ["--config", CARTPOLE_DQN, "--data.init_args.collector.workers=2",
                              "--data.init_args.collector.num_envs=2",
                              "--data.init_args.total_frames=1024",
                              "--data.init_args.replay_buffer.init_random_frames=512"],
         local_first)
    assert ray_first.batch.shape == local_first.batch.shape == (2, 128)
    assert (ray_first.batch == local_first.batch).all()
    assert not torch.equal(ray_first.batch["observation"][0], ray_first.batch["observation"][1])


def test_ppo_trains_on_the_actors_in_synchronous_rounds(cluster, tmp_path, monkeypatch):
    """On-policy: every PPO batch is one round of both actors, played by the learner's latest weights."""
    monkeypatch.setattr("sys.argv", ["fit"])
    probe = RayProbe()
    cli = _run(tmp_path, ["--config",
                          str(REPO / "configs" / "cartpole_ppo.yaml"), "--data.init_args.collector.mode=ray",
                          "--data.init_args.collector.workers=2", "--data.init_args.total_frames=1024",
                          f"--data.init_args.collector.ray.address={cluster.address}"], probe)
    assert cli.model.collected_frames == 1024 and len(probe.seen) == 4
    assert [s["versions"] for s in probe.seen] == [[i] for i in range(4)]
    assert len(set(probe.seen[0]["nodes"])) == 2
    assert any(not torch.equal(a, b) for a, b in zip(probe.initial, cli.model.parameters(), strict=True))


def test_a_stuck_actor_stops_the_run_after_the_timeout(cluster, tmp_path, monkeypatch):
    """An actor that stops answering (its process stopped) ends the run after ``data.collector.worker_timeout_s``,
    naming the actors, even with restarts left: never a hang."""
    monkeypatch.setattr("sys.argv", ["fit"])
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"Ray actors 0 \(node .*, pid .*\), 1 .* gave no batch within "
                                           r"data.collector.worker_timeout_s=5 s"):
        _fit(cluster, tmp_path, RayProbe(stop_after=3), frames=3072, max_restarts=2, timeout_s=5)
    assert time.monotonic() - start < 300  # (15-20 s alone; 89 s once beside two trainings, 156 s beside one and CI)


@pytest.mark.slow  # (23 s)
def test_ray_actors_with_two_ddp_ranks(cluster, tmp_path):
    """Both together: two DDP ranks (two CPU processes) each collect through their own Ray actor on the cluster, with
    their own row seeds; the ranks end with identical weights and count frames over both."""
    probe = tmp_path / "probe"
    proc = run_module("pipelines.fit", "--config", SMOKE, "--trainer.strategy=ddp", "--trainer.accelerator=cpu",
                      "--trainer.devices=2", "--trainer.callbacks=[]", "--trainer.enable_progress_bar=false",
                      "--trainer.callbacks+=tests.pipelines.ddp_probe.DDPProbe", f"--trainer.callbacks.out_dir={probe}",
                      "--data.init_args.collector.mode=ray", "--data.init_args.collector.workers=1",
                      f"--data.init_args.collector.ray.address={cluster.address}",
                      f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}", timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((probe / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert set(ranks[0]["row_seed"]).isdisjoint(ranks[1]["row_seed"]), "the ranks' actors must have their own seeds"
    assert ranks[0]["params"] == ranks[1]["params"], "weights diverged across ranks"
    assert ranks[0]["frames"] == ranks[1]["frames"] == 1920


class _ConfigureThenKill(RLCallback):
    """Round 2: an env call on the training envs (as a curriculum phase makes); round 4: kill actor 0 (restart
    allowed); at the end, read the call's setting back from both actors."""

    def __init__(self) -> None:
        self.rounds, self.w_touch = 0, None

    def on_batch_collected(self, trainer, module, batch) -> None:
        import ray

        self.rounds += 1
        data = trainer.datamodule
        if self.rounds == 2:
            data.control.call("configure", w_touch=0.123)
        if self.rounds == 4:
            ray.kill(data.collector()._collector.remote_collectors[0], no_restart=False)

    def on_train_end(self, trainer, module) -> None:
        collector = trainer.datamodule.collector()
        self.restarts = [s["restarts"] for s in collector.actor_states()]
        self.w_touch = collector.map_fn("env.base_env.__getattribute__", [("w_touch",)] * 2, [{}] * 2)


@pytest.mark.slow  # (30 s; `make test-slow`)
def test_a_restarted_actor_gets_the_env_calls_made_since_the_start(cluster, tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["fit"])
    probe = _ConfigureThenKill()
    _run(tmp_path, ["--config", hockey_dqn_config(tmp_path, []), "--data.init_args.collector.mode=ray",
                    "--data.init_args.collector.workers=2", "--data.init_args.total_frames=640",
                    f"--data.init_args.collector.ray.address={cluster.address}",
                    "--data.init_args.collector.ray.max_restarts=1"], probe)
    assert probe.restarts == [1, 0]
    assert probe.w_touch == [0.123, 0.123], "the restarted actor's env lost the call made before its restart"


@pytest.mark.slow  # (28 s; `make test-slow`)
def test_sigterm_stops_a_ray_run_at_a_step_with_its_checkpoint(cluster, tmp_path):
    """``ray.init`` sets its own SIGTERM handler (``sys.exit``): the run ended without its checkpoint (and by the
    stop's deadline). The run's handlers are put back once Ray is up: exit 143, ``last.ckpt`` written."""
    import ray

    before = {a["ActorID"] for a in ray._private.state.actors().values()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.fit", "--config", CARTPOLE_DQN, "--data.init_args.collector.mode=ray",
         "--data.init_args.collector.workers=2", "--data.init_args.collector.num_envs=2",
         "--data.init_args.total_frames=10000000", "--data.init_args.replay_buffer.init_random_frames=512",
         f"--data.init_args.collector.ray.address={cluster.address}", "--trainer.enable_progress_bar=false",
         f"--trainer.default_root_dir={tmp_path}"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None and not any(
                a["State"] == "ALIVE" and a["ActorID"] not in before for a in ray._private.state.actors().values()):
            time.sleep(0.5)
        time.sleep(5)  # (training on the actors' frames)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, stderr[-3000:]
    assert "training stopped by SIGTERM" in stderr and next(tmp_path.glob("runs/*/version_0/checkpoints/last.ckpt"))
