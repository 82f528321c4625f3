"""The off-policy pipeline end to end on CartPole (DQN): warm-up, updates per batch, epsilon, and the
replay buffer in the checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from pipelines.evaluate import main as evaluate
from pipelines.fit import main
from tests.pipelines.conftest import REPO

CARTPOLE = str(REPO / "configs" / "cartpole_dqn.yaml")


def _run(tmp_path, *extra: str):
    return main(["--config", CARTPOLE, "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
                 "--trainer.callbacks+=callbacks.EpsilonDecay", "--trainer.callbacks.decay_frames=2000",  # eps_end 0.05
                 "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
                 "--trainer.callbacks.every_n_train_steps=20", "--trainer.callbacks.save_top_k=-1",
                 "--data.init_args.init_random_frames=512", "--data.init_args.num_envs=4",
                 "--data.init_args.frames_per_batch=64", "--data.init_args.batch_size=32",
                 f"--trainer.logger.init_args.save_dir={tmp_path}", *extra])


def test_warmup_updates_epsilon_and_buffer_resume(tmp_path):
    full = _run(tmp_path / "a", "--data.init_args.total_frames=1920")
    data, module = full.datamodule, full.model
    assert module.collected_frames == 1920
    # 30 batches of 64 frames; the first 8 (512 frames) are random warm-up; 2 updates per batch after it
    assert full.trainer.global_step == (30 - 8) * 2 == data.num_training_steps()
    assert len(data.buffer) == 1920 - 4 * 3  # n_step = 3: the last 3 steps of each of the 4 rows are held back
    assert module.epsilon() == pytest.approx(1.0 - 0.95 * 1920 / 2000)
    ckpt_dir = tmp_path / "a" / "cartpole_dqn" / "version_0" / "checkpoints"
    mid = ckpt_dir / "epoch=0-step=20.ckpt"
    state = torch.load(mid, weights_only=False)
    frames = state["rl_state"]["collected_frames"]
    assert 512 < frames < 1920
    saved = state["OffPolicyDataModule"]["replay_buffer"]
    # resuming with the budget already spent restores buffer and epsilon without collecting more
    resumed = _run(tmp_path / "b", f"--data.init_args.total_frames={frames}", f"--ckpt_path={mid}")
    buffer = resumed.datamodule.buffer
    assert len(buffer) == saved["_storage"]["_len"] > 0
    stored = buffer.storage[: len(buffer) // 4]
    assert torch.equal(stored["observation"], saved["_storage"]["_storage"]["observation"][: len(buffer) // 4])
    assert resumed.model.epsilon() == pytest.approx(1.0 - 0.95 * frames / 2000)
    assert resumed.model.epsilon() == pytest.approx(float(state["state_dict"]["egreedy.eps"]))



def test_evaluate_works_for_a_gym_config(tmp_path, capsys):
    """pipelines.evaluate on a non-DVRP run: the same last-line JSON, {policy: {mean_return, return_se}}."""
    _run(tmp_path, "--data.init_args.total_frames=1280")
    ckpt = tmp_path / "cartpole_dqn" / "version_0" / "checkpoints" / "epoch=0-step=20.ckpt"
    capsys.readouterr()
    table = evaluate(["--config", CARTPOLE, "--ckpt_path", str(ckpt), "--episodes", "6", "--num_envs", "4"])
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last == table and set(table) == {"dqn"}
    assert set(table["dqn"]) == {"mean_return", "return_se"}
    assert 8 <= table["dqn"]["mean_return"] <= 500  # CartPole: every episode lasts 8..500 steps


def test_too_few_steps_for_n_step_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="must exceed model.n_step=3"):
        _run(tmp_path, "--data.init_args.frames_per_batch=12", "--data.init_args.total_frames=120")
