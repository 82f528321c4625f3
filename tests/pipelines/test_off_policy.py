"""The off-policy pipeline end to end on CartPole (DQN): warm-up, updates per batch, epsilon, and the
replay buffer in the checkpoint."""

from __future__ import annotations

import json
import os
import pathlib

import pytest
import torch

from pipelines.evaluate import main as evaluate
from pipelines.fit import main
from tests.conftest import periodic_checkpoints
from tests.pipelines.conftest import REPO, AtTrainStart

CARTPOLE = str(REPO / "configs" / "cartpole_dqn.yaml")


def _run(tmp_path, *extra: str, callbacks: list | None = None):
    return main(["--config", CARTPOLE, "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
                 "--trainer.callbacks+=callbacks.EpsilonDecay",
                 "--trainer.callbacks.annealing_frames=2000",  # eps_end 0.05
                 "--trainer.callbacks+=callbacks.ModelCheckpoint",
                 "--trainer.callbacks.every_n_train_steps=20", "--trainer.callbacks.save_top_k=-1",
                 "--data.init_args.replay_buffer.init_random_frames=512", "--data.init_args.collector.num_envs=4",
                 "--data.init_args.collector.frames_per_batch=64", "--data.init_args.replay_buffer.batch_size=32",
                 "--data.init_args.replay_buffer.utd_ratio=2", "--model.init_args.n_steps=3",
                 "--model.init_args.network.init_args.hidden_dims=[64, 64]",
                 f"--trainer.logger.init_args.save_dir={tmp_path}", *extra], callbacks=callbacks)


def test_warmup_updates_epsilon_and_buffer_resume(tmp_path):
    full = _run(tmp_path / "a", "--data.init_args.total_frames=1920")
    data, module = full.datamodule, full.model
    assert module.collected_frames == 1920
    # 30 batches of 64 frames; the first 8 (512 frames) are random warm-up; 2 updates per batch after it, both
    # in one training step
    assert full.trainer.global_step == (30 - 8) * 2
    assert data.num_training_steps() == 30 - 8 == full.trainer.fit_loop.epoch_loop.batch_progress.total.completed
    assert len(data.buffer) == 1920 - 4 * 3  # n_steps = 3: the last 3 steps of each of the 4 rows are held back
    assert module.epsilon() == pytest.approx(1.0 - 0.95 * 1920 / 2000)
    ckpt_dir = tmp_path / "a" / "cartpole_dqn" / "version_0" / "checkpoints"
    mid = periodic_checkpoints(ckpt_dir)[20]
    state = torch.load(mid, weights_only=True)
    frames = state["rl_state"]["collected_frames"]
    assert 512 < frames < 1920
    saved = state["OffPolicyDataModule"]["replay_buffer"]
    # a resume starts from the checkpoint's buffer, epsilon and target schedule (read before its first batch)
    probe = AtTrainStart(lambda trainer, module: (
        len(trainer.datamodule.buffer),
        trainer.datamodule.buffer.storage[: len(trainer.datamodule.buffer) // 4]["observation"].clone(),
        module.epsilon(), module.target.counter))
    _run(tmp_path / "b", f"--data.init_args.total_frames={frames + 64}", f"--ckpt_path={mid}", callbacks=[probe])
    length, stored, epsilon, counter = probe.value
    assert length == saved["_storage"]["_len"] > 0
    assert torch.equal(stored, saved["_storage"]["_storage"]["observation"][: length // 4])
    assert epsilon == pytest.approx(1.0 - 0.95 * frames / 2000)
    assert epsilon == pytest.approx(float(state["state_dict"]["policy.eps"]))
    # the hard target copy keeps its schedule: 20 updates done, the next copy after update 128
    assert state["rl_state"]["target_counter"] == 20 == counter



def test_evaluate_works_for_a_gym_config(tmp_path, capsys):
    """pipelines.evaluate on a non-DVRP run: the same last-line JSON, {policy: {mean_return, return_se}}."""
    _run(tmp_path, "--data.init_args.total_frames=1280")
    ckpt = periodic_checkpoints(tmp_path / "cartpole_dqn" / "version_0" / "checkpoints")[20]
    capsys.readouterr()
    table = evaluate(["--config", CARTPOLE, "--ckpt_path", str(ckpt), "--episodes", "6", "--num_envs", "4",
                      "--model.init_args.network.init_args.hidden_dims=[64, 64]"])
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last == table and set(table) == {"dqn", "random"}
    for row in table.values():
        assert set(row) == {"mean_return", "return_se"}
        assert 8 <= row["mean_return"] <= 500  # CartPole: every episode lasts 8..500 steps
    assert table["random"]["mean_return"] < 60  # a random CartPole policy falls within ~22 steps


def test_too_few_steps_for_n_step_is_rejected(tmp_path):
    # 4 envs: 16 frames = 4 steps per env, of which the 3-step transform stores 1 (TorchRL's 2-D storage
    # fails on 1-step slices); 20 frames = 5 steps store 2 and train
    with pytest.raises(ValueError, match=r"must be >= model.n_steps \+ 2 = 5"):
        _run(tmp_path, "--data.init_args.collector.frames_per_batch=16", "--data.init_args.total_frames=640")
    _run(tmp_path, "--data.init_args.collector.frames_per_batch=20", "--data.init_args.total_frames=600")


def test_prioritized_sampler_draws_and_weights_by_priority():
    """P(i) = p_i^a / sum p^a and w_i = (N P(i))^-b / max w (Schaul et al. 2016) on a 2-D [T, rows] storage."""
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    from pipelines.data.replay import PrioritizedSampler

    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(40, ndim=2), batch_size=4000,
                                    sampler=PrioritizedSampler(40, rows=2, alpha=0.5, beta=1.0))
    buffer.extend(TensorDict(x=torch.arange(10.0).reshape(2, 5), batch_size=[2, 5]))  # x = 5 * row + t
    first = buffer.sample()
    assert torch.equal(first["priority_weight"], torch.ones(4000))  # new items: equal (max) priority
    buffer.update_priority(torch.tensor([[0, 1], [3, 0]]), torch.tensor([8.0, 3.0]))  # items x = 5 and x = 3
    torch.manual_seed(0)
    drawn = buffer.sample()
    p = torch.ones(10)
    p[5], p[3] = 8.0**0.5, 3.0**0.5
    share = (drawn["x"].long() == 5).float().mean()
    assert share == pytest.approx((p[5] / p.sum()).item(), abs=0.03)
    w = (10 * p / p.sum()) ** -1.0
    expected = (w / w.max())[drawn["x"].long()]
    assert torch.allclose(drawn["priority_weight"], expected, rtol=1e-5)
    with pytest.raises(ValueError, match="alpha"):
        PrioritizedSampler(10, alpha=-1.0)


def test_prioritized_replay_updates_priorities_and_resumes(tmp_path):
    full = _run(tmp_path / "a", "--data.init_args.total_frames=1280", "--data.init_args.replay_buffer.prioritized=true")
    sampler = full.datamodule.buffer.sampler
    filled = sampler._priority[: len(full.datamodule.buffer)]
    assert (filled > 0).all() and filled.unique().numel() > 100  # TD errors, not the uniform start
    ckpt = periodic_checkpoints(tmp_path / "a" / "cartpole_dqn" / "version_0" / "checkpoints")[20]
    state = torch.load(ckpt, weights_only=True)
    probe = AtTrainStart(lambda trainer, module: trainer.datamodule.buffer.sampler._priority.clone())
    _run(tmp_path / "b", f"--data.init_args.total_frames={state['rl_state']['collected_frames'] + 64}",
         "--data.init_args.replay_buffer.prioritized=true", f"--ckpt_path={ckpt}", callbacks=[probe])
    saved = state["OffPolicyDataModule"]["replay_buffer"]["_sampler"]["priority"]
    assert torch.equal(probe.value, saved)


def test_policy_evaluation_keeps_the_best_checkpoint(tmp_path):
    """save_best: best.ckpt holds the weights of the best evaluation; replaying it gives that return."""
    from pipelines.evaluate import load_run, play

    cli = _run(tmp_path, "--data.init_args.total_frames=2560", "--trainer.callbacks+=callbacks.PolicyEvaluation",
               "--trainer.callbacks.every_n_frames=640", "--trainer.callbacks.num_envs=4",
               "--trainer.callbacks.save_best=true", "--trainer.callbacks.seed=99")
    evaluation = next(c for c in cli.trainer.callbacks if type(c).__name__ == "PolicyEvaluation")
    best = tmp_path / "cartpole_dqn" / "version_0" / "checkpoints" / "best.ckpt"
    assert best.is_file() and evaluation.best > 8
    model, data = load_run(CARTPOLE, str(best), ["--model.init_args.network.init_args.hidden_dims=[64, 64]"])
    replay = play(data.env_config, lambda env: model.collector_policy, 4, 4, 99)
    assert replay["episode_return"].mean().item() == pytest.approx(evaluation.best)


def test_memmap_storage_writes_to_scratch_dir_and_resumes(tmp_path):
    from torchrl.data import LazyMemmapStorage

    full = _run(tmp_path / "a", "--data.init_args.total_frames=1280", "--data.init_args.replay_buffer.storage=memmap",
                f"--data.init_args.replay_buffer.scratch_dir={tmp_path / 'scratch_a'}")
    assert isinstance(full.datamodule.buffer.storage, LazyMemmapStorage)
    assert any((tmp_path / "scratch_a" / "rank0").rglob("*.memmap"))
    ckpt = periodic_checkpoints(tmp_path / "a" / "cartpole_dqn" / "version_0" / "checkpoints")[20]
    state = torch.load(ckpt, weights_only=True)
    probe = AtTrainStart(lambda trainer, module: (
        len(trainer.datamodule.buffer),
        trainer.datamodule.buffer.storage[: len(trainer.datamodule.buffer) // 4]["observation"].clone()))
    _run(tmp_path / "b", f"--data.init_args.total_frames={state['rl_state']['collected_frames'] + 64}",
         "--data.init_args.replay_buffer.storage=memmap",
         f"--data.init_args.replay_buffer.scratch_dir={tmp_path / 'scratch_b'}",
         f"--ckpt_path={ckpt}", callbacks=[probe])
    length, stored = probe.value
    saved = state["OffPolicyDataModule"]["replay_buffer"]["_storage"]
    assert length == saved["_len"] > 0
    assert torch.equal(stored, torch.as_tensor(saved["_storage"]["observation"][: length // 4]))


def test_checkpoints_follow_optimizer_updates_when_a_training_step_takes_several(tmp_path):
    """3 updates per training step, a checkpoint every 10 updates: one after every training step that reached a
    multiple of 10 (steps 12, 21, 30, ...), where Lightning's own rule (the count is a multiple) saves at 30 and 60
    only."""
    run = _run(tmp_path, "--data.init_args.total_frames=1920", "--data.init_args.replay_buffer.utd_ratio=3",
               "--trainer.callbacks.every_n_train_steps=10")
    assert run.trainer.global_step == (30 - 8) * 3
    folder = tmp_path / "cartpole_dqn" / "version_0" / "checkpoints"
    checkpoints = periodic_checkpoints(folder)
    assert list(checkpoints) == [12, 21, 30, 42, 51, 60]
    saved = torch.load(checkpoints[21], weights_only=True)
    assert checkpoints[21].name == f"frames={saved['rl_state']['collected_frames']}.ckpt"
    assert saved["global_step"] == 21 and saved["rl_state"]["target_counter"] == 21


def test_memmap_storage_without_scratch_dir_lives_in_the_run_folder(tmp_path):
    """Without ``scratch_dir`` the memmap files go to ``replay/`` in the run's folder (nothing under /tmp), are
    removed when the run finishes, and are kept after a fault."""
    import glob
    import tempfile

    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "replay_*")))
    run = _run(tmp_path / "ok", "--data.init_args.total_frames=768", "--data.init_args.replay_buffer.storage=memmap")
    folder = pathlib.Path(run.trainer.log_dir) / "replay"
    assert str(run.datamodule.buffer.storage.scratch_dir).startswith(str(folder))
    assert not folder.exists() and set(glob.glob(os.path.join(tempfile.gettempdir(), "replay_*"))) == before
    with pytest.raises(RuntimeError, match="injected learner fault"):
        _run(tmp_path / "fault", "--data.init_args.total_frames=1280", "--data.init_args.replay_buffer.storage=memmap",
             "--trainer.callbacks+=tests.pipelines.fault_probe.FaultProbe",
             f"--trainer.callbacks.out_file={tmp_path / 'pids.json'}", "--trainer.callbacks.at_step=4",
             "--trainer.callbacks.raise_error=true")
    assert any((tmp_path / "fault" / "cartpole_dqn" / "version_0" / "replay" / "rank0").rglob("*.memmap"))


def test_one_seed_seeds_the_run(tmp_path):
    """``--seed_everything=S`` alone makes another run: the data module's env rows take S (recorded in the saved
    config), the same S gives the same weights, another S other weights."""
    import yaml

    runs = [_run(tmp_path / name, "--data.init_args.total_frames=768", f"--seed_everything={seed}")
            for name, seed in (("a", 3), ("b", 3), ("c", 4))]
    assert [run.datamodule.seed for run in runs] == [3, 3, 4]
    saved = yaml.safe_load((tmp_path / "a" / "cartpole_dqn" / "version_0" / "config.yaml").read_text())
    assert saved["data"]["init_args"]["seed"] == 3
    weights = [run.model.network.state_dict() for run in runs]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert not all(torch.equal(weights[0][k], weights[2][k]) for k in weights[0])
