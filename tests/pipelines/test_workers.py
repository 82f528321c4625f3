"""Rollout worker processes (``data.collector.workers``): same seeds per row as in-process envs, calls and weights that
reach the workers' envs exactly as they reach one in-process env, self-play whose snapshots really play in
the workers, and bad settings rejected. The faults (a worker killed or stopped, an error or a signal in the
learner) are in ``test_faults.py``."""

from __future__ import annotations

import json
import os
import time

import lightning as L
import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.collectors import Collector

from callbacks.base import RLCallback
from envs import make_env
from tests.pipelines.conftest import REPO

VACUUM = str(REPO / "configs" / "vacuum.yaml")
SMALL = {"grid_size": 4, "num_robots": 2, "energy": [100, 100], "chargers": [], "max_steps": 10}


class _Batches(RLCallback):
    """Keeps the collected batches."""

    def __init__(self) -> None:
        self.batches = []

    def on_batch_collected(self, trainer, pl_module, batch) -> None:
        self.batches.append(batch.clone())


class _SlowSteps(_Batches):
    """Keeps the collected batches and makes every training step last ``seconds`` longer; after each step it notes
    whether the worker's next batch is already waiting (collected while the learner trained)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds, self.waiting = seconds, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        time.sleep(self.seconds)
        self.waiting.append(not trainer.datamodule.collector()._collector.queue_out.empty())


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
                       "--model.init_args.network.init_args.num_agents=2", "--data.init_args.collector.workers=2",
                       "--data.init_args.total_frames=640", "--data.init_args.replay_buffer.init_random_frames=128",
                       *extra])
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
    assert cli.datamodule._collector is None, "the workers are shut down when training ends"


def test_a_run_with_workers_is_reproducible(tmp_path):
    """Each worker's exploration draws come from its own seeded stream: the same run twice ends with the same
    weights, bit for bit."""
    first, second = (_fit(tmp_path / name, _Batches()).model.state_dict() for name in ("a", "b"))
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def test_one_asynchronous_worker_collects_while_the_learner_trains(tmp_path):
    """Off-policy with ``workers: 1, collector: async``: every batch holds all rows, each row's steps go on from the
    last batch's (what the replay buffer's n-step returns need), the worker collects the next batch while the learner
    trains, batch k was played from start to end by the weights the learner had when batch k - 1 reached it (version
    k - 1: the worker's copy changes only between its batches), and the run repeats bit for bit, whatever the timing
    (the first run's training steps take 0.3 s longer)."""
    runs = [(_SlowSteps(0.3), "a"), (_Batches(), "b")]
    clis = [_fit(tmp_path / name, batches, "--data.init_args.collector.workers=1",
                 "--data.init_args.collector.mode=async")
            for batches, name in runs]
    batches = runs[0][0]
    assert clis[0].model.collected_frames == 640 and clis[0].trainer.global_step == (640 - 128) // 32
    assert len(batches.batches) == 20 and all(batch.shape == (8, 4) for batch in batches.batches)
    checked = 0
    for previous, batch in zip(batches.batches, batches.batches[1:], strict=False):
        going_on = ~previous["next", "done"][:, -1].squeeze(-1)  # rows whose episode did not end at the last step
        assert torch.equal(batch["observation"][going_on, 0], previous["next", "observation"][going_on, -1])
        checked += int(going_on.sum())
    assert checked >= 8 * 19 // 2
    # the first 128 frames (4 batches) are the random warm-up's: no policy played them
    for k, batch in enumerate(batches.batches[4:], start=4):
        assert (batch["policy_version"] == k - 1).all(), (k, batch["policy_version"])
    first, second = (cli.model.state_dict() for cli in clis)
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
    assert all(torch.equal(a["action"], b["action"]) for a, b in zip(batches.batches, runs[1][0].batches, strict=True))
    # the next batch was waiting at the end of most (slowed) training steps: collected while the learner trained
    assert len(batches.waiting) == 16 and sum(batches.waiting) >= 12, batches.waiting


def test_bad_worker_settings_are_rejected(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:  # the data module's own check: one message, exit 2
        _fit(tmp_path, _Batches(), "--data.init_args.collector.workers=3")
    assert stop.value.code == 2 and "data.collector.workers=3" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:  # an asynchronous batch of one of two workers holds half the rows
        _fit(tmp_path, _Batches(), "--data.init_args.collector.mode=async")
    assert stop.value.code == 2
    assert "data.collector.mode=async needs data.collector.workers=1 here, got 2" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the config parser's error names the key
        _fit(tmp_path, _Batches(), "--data.init_args.collector.worker_timeout_s=0")
    assert "worker_timeout_s" in capsys.readouterr().err


class _Elementwise(nn.Module):
    """A batch-size independent policy (no matrix products): ``tanh(scale * observation[:, :4])``."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(scale))

    def forward(self, observation):
        return (self.scale * observation[:, :4]).tanh()


def test_calls_and_weights_between_batches_reach_the_worker_envs():
    """Settings, per-row opponents and an opponent policy set between batches, and new policy weights, change
    the workers' envs exactly as they change one in-process env: both collect the same rows, bit for bit. The
    first calls are made before the workers start (they reach the env builders), the others through map_fn."""
    from callbacks.selfplay import SnapshotPlayer
    from envs.hockey import HockeyConfig
    from pipelines.data.collectors import WorkerCollector
    from pipelines.data.env_control import EnvControl

    config = HockeyConfig(opponent="weak", max_steps=12)
    player = SnapshotPlayer(TensorDictModule(_Elementwise(-0.7), ["observation"], ["action"]))
    kinds = ["policy", "strong", "static", "policy", "policy", "weak", "strong", "policy"]

    def calls(control: EnvControl, batch: int) -> None:
        if batch == 0:  # before the workers start
            control.call("configure", mode="TRAIN_SHOOTING", w_closeness=3.0)
        if batch == 1:
            control.call("configure", mode="TRAIN_DEFENSE", w_closeness=5.0)
            control.call_rows("set_opponent", kinds)
            control.call("set_opponent_policy", player)

    def collect(workers: bool, with_calls: bool) -> list:
        policy = TensorDictModule(_Elementwise(1.0), ["observation"], ["action"])
        env = make_env(config, 8, 3)
        control = EnvControl(env, workers=2 if workers else 0)
        if with_calls:
            calls(control, 0)
        if workers:
            collector = WorkerCollector(config, {}, 8, 2, 3, policy, 160, timeout_s=60.0,
                                        startup_calls=control.startup_calls())
            control.connect(collector)
        else:
            collector = Collector(env, policy, frames_per_batch=160, total_frames=-1, trust_policy=True,
                                  auto_register_policy_transforms=False)
        batches, iterator = [], iter(collector)
        try:
            for i in range(3):
                batches.append(next(iterator).clone())
                with torch.no_grad():
                    policy.module.scale.mul_(-0.5)  # the learner's update: the next batch acts with it
                if with_calls:
                    calls(control, i + 1)
        finally:
            collector.shutdown()
        return batches

    local, remote, unchanged = collect(False, True), collect(True, True), collect(False, False)
    for a, b in zip(local, remote, strict=True):
        assert torch.equal(a["action"], b["action"])
        assert torch.equal(a["next", "observation"], b["next", "observation"])
        assert torch.equal(a["next", "reward"], b["next", "reward"])
    assert not torch.equal(local[0]["next", "reward"], unchanged[0]["next", "reward"])  # the first call had effects
    assert not torch.allclose(local[2]["next", "reward"], unchanged[2]["next", "reward"])


class _WorkerOpponents(L.Callback):
    """After each collected batch once the pool has a snapshot: the workers' envs' opponents and the weights
    of the snapshot they play, read from the workers themselves (TorchRL ``get_distant_attr``)."""

    def __init__(self) -> None:
        self.seen = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        selfplay = next(c for c in trainer.callbacks if type(c).__name__ == "SelfPlay")
        if not selfplay.pool or len(self.seen) >= 3:
            return
        workers = trainer.datamodule.collector()._collector
        next_opponents = torch.cat(workers.get_distant_attr("env.base_env._next_opponent"))
        players = workers.get_distant_attr("env.base_env.opponent_policy")
        learner = trainer.datamodule.env.base_env
        self.seen.append((next_opponents, learner._next_opponent.clone(), players, learner.opponent_policy))


def test_self_play_with_workers_plays_the_snapshots_in_the_workers(tmp_path):
    from callbacks import SelfPlay
    from envs.hockey import OPPONENTS
    from modules.base import RLModule
    from pipelines.data import RLDataModule
    from pipelines.fit import FitCLI
    from tests.pipelines.conftest import hockey_dqn_config

    callbacks = [{"class_path": "callbacks.SelfPlay", "init_args": {"every_n_frames": 384, "pool_size": 2}}]
    cli = FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                 save_config_callback=None, auto_configure_optimizers=False,
                 args=["--config", hockey_dqn_config(tmp_path, callbacks), "--data.init_args.collector.workers=2"])
    probe = _WorkerOpponents()
    cli.trainer.callbacks.append(probe)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    selfplay = next(c for c in cli.trainer.callbacks if isinstance(c, SelfPlay))
    assert len(selfplay.pool) == 2 and len(probe.seen) == 3
    policy_code = OPPONENTS.index("policy")
    for workers, learner, players, learner_player in probe.seen:
        assert torch.equal(workers, learner), "the workers' rows meet the opponents the learner drew"
        assert (workers == policy_code).any(), "some rows meet a snapshot"
        for player in players:  # each worker plays the drawn snapshot, with its weights
            for key, value in learner_player.state_dict().items():
                assert torch.equal(player.state_dict()[key], value)


def _smaps(pid: int) -> dict[str, int]:
    """``/proc/<pid>/smaps_rollup``'s ``Rss`` and ``Pss``, kB."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return {line.split(":")[0]: int(line.split()[1]) for line in f if line.startswith(("Rss:", "Pss:"))}


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_workers_are_forks_of_one_server_that_imported_torch():
    """The workers start from the fork server: both are children of one process that is not the learner, and most of
    their memory (the imported torch and TorchRL, frozen out of the garbage collector's reach) stays shared, so each
    one's proportional share is about half its resident set (0.49 here; 0.62 without ``gc.freeze`` in the server,
    0.81 with ``spawn``, where each worker imports torch itself). They never load Ray (which TorchRL imports where it
    is installed: 0.4-0.6 s of the server's 3 s of imports, 35 MB): no library of Ray's is mapped into them."""
    from envs import EnvSpecs
    from envs.gym import GymConfig
    from modules.dqn import DQNModule
    from modules.q_networks import QNetwork
    from pipelines.data.collectors import WorkerCollector

    config = GymConfig("CartPole-v1")
    module = DQNModule(QNetwork(num_actions=2))
    module.build_on(EnvSpecs.of(make_env(config, 2, 0)))
    collector = WorkerCollector(config, {}, 4, 2, 0, module.collector_policy, 64, timeout_s=60.0)
    try:
        next(iter(collector))
        parents = {_parent(pid) for pid in collector.pids}
        assert len(parents) == 1 and parents != {os.getpid()}
        for pid in collector.pids:
            memory = _smaps(pid)
            assert memory["Pss"] < 0.56 * memory["Rss"], memory
            with open(f"/proc/{pid}/maps") as f:
                assert "_raylet" not in f.read(), f"worker {pid} loaded Ray"
    finally:
        collector.shutdown()


def test_calls_to_running_workers_are_kept_only_for_workers_that_may_be_restarted():
    """Without ``keep_calls`` (local workers: never restarted) the calls reach the workers and are not kept, so a long
    run's list does not grow; with it (Ray actors with ``max_restarts``) each worker's own calls are kept in order."""
    from envs.hockey import HockeyConfig
    from pipelines.data.env_control import EnvControl

    class Sent:
        def __init__(self) -> None:
            self.calls = []

        def map_fn(self, method, args, kwargs):
            self.calls.append((method, args, kwargs))
            return [None] * len(args)

    kinds = ["weak", "strong", "static", "weak"]
    for keep in (False, True):
        control, sent = EnvControl(make_env(HockeyConfig(opponent="weak"), 4, 0), workers=2), Sent()
        control.connect(sent, keep_calls=keep)
        control.call("configure", mode="TRAIN_SHOOTING")
        control.call_rows("set_opponent", kinds)
        assert [method for method, _, _ in sent.calls] == ["env.base_env.configure", "env.base_env.set_opponent"]
        if keep:
            assert control.later_calls(1) == [("configure", (), {"mode": "TRAIN_SHOOTING"}),
                                              ("set_opponent", (kinds[2:],), {})]
        else:
            assert control.later_calls(0) == control.later_calls(1) == []


def test_a_message_to_a_killed_worker_names_it(monkeypatch):
    """A worker killed right after TorchRL's check that all workers live (reproduced by skipping the check): the
    learner's next message to it meets a closed pipe (``BrokenPipeError``), which becomes the same error as any worker
    fault, naming the worker and its exit code."""
    import signal
    import time

    import torchrl.collectors._multi_sync as multi_sync

    from envs import EnvSpecs
    from envs.gym import GymConfig
    from modules.dqn import DQNModule
    from modules.q_networks import QNetwork
    from pipelines.data.collectors import WorkerCollector

    config = GymConfig("CartPole-v1")
    module = DQNModule(QNetwork(num_actions=2))
    module.build_on(EnvSpecs.of(make_env(config, 2, 0)))
    collector = WorkerCollector(config, {}, 4, 2, 0, module.collector_policy, 64, timeout_s=60.0)
    try:
        batches = iter(collector)
        next(batches)
        os.kill(collector.pids[1], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while collector.procs[1].exitcode is None and time.monotonic() < deadline:
            time.sleep(0.05)
        monkeypatch.setattr(multi_sync, "_check_for_faulty_process", lambda procs: None)
        with pytest.raises(RuntimeError, match=rf"rollout worker 1 \(pid {collector.pids[1]}, exit code -9\) died"):
            next(batches)
    finally:
        collector.shutdown()
