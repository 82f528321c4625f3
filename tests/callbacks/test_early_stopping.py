"""callbacks.EarlyStopping on PPO on CartPole: a threshold or a patience rule met at an evaluation ends training
there (the last checkpoint and the final evaluation are that policy's), a continued run goes on and stops again at
its next evaluation, and a config without an evaluation or with a metric that is not one is refused."""

from __future__ import annotations

import pytest
import torch
import yaml

from callbacks import EarlyStopping
from callbacks.evaluation import evaluations
from envs.restored import RestoredStateError
from pipelines.fit import main as fit
from tests.pipelines.conftest import REPO

EVERY = 512  # an evaluation every batch of 8 envs x 64 steps


def _config(tmp_path, stopping: dict | None, evaluate: bool = True) -> list[str]:
    callbacks = []
    if evaluate:
        callbacks.append({"class_path": "callbacks.PolicyEvaluation",
                          "init_args": {"every_n_frames": EVERY, "num_envs": 2, "max_steps": 100}})
    if stopping is not None:
        callbacks.append({"class_path": "callbacks.EarlyStopping", "init_args": stopping})
    callbacks.append({"class_path": "callbacks.ModelCheckpoint",
                      "init_args": {"every_n_train_steps": 1000, "save_last": True}})
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({
        "seed_everything": 0,
        "model": {"init_args": {"ppo_epochs": 1, "mini_batch_size": 256}},
        "data": {"init_args": {"env": {"class_path": "envs.gym.GymConfig",
                                       "init_args": {"env_id": "CartPole-v1", "backend": "vector"}},
                               "collector": {"num_envs": 8, "frames_per_batch": 512}, "total_frames": 4096}},
        "trainer": {"logger": {"init_args": {"save_dir": str(tmp_path), "name": "es"}}, "callbacks": callbacks}}))
    return ["--config", str(REPO / "configs" / "algos" / "ppo.yaml"), "--config", str(path)]


def _last_frames(tmp_path) -> int:
    state = torch.load(tmp_path / "es" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    return state["rl_state"]["collected_frames"]


def test_a_threshold_met_at_an_evaluation_ends_training_there(tmp_path, capsys):
    cli = fit(_config(tmp_path, {"stopping_threshold": 0.0}))  # any CartPole return is >= 0: the first evaluation
    assert f"stopped early at {EVERY} frames by callbacks.EarlyStopping: Stopping threshold reached" in (
        capsys.readouterr().out)
    history = evaluations(cli.trainer)
    assert cli.model.collected_frames == EVERY == _last_frames(tmp_path)
    assert [h["frames"] for h in history] == [EVERY]  # the stopping evaluation is the final one
    stopper = next(c for c in cli.trainer.callbacks if isinstance(c, EarlyStopping))
    assert "Stopping threshold reached" in stopper.stopping_reason_message


def test_a_threshold_not_met_trains_the_whole_budget(tmp_path):
    cli = fit(_config(tmp_path, {"stopping_threshold": 10_000.0}))
    assert cli.model.collected_frames == 4096 == _last_frames(tmp_path)


def test_patience_stops_after_evaluations_without_improvement_and_a_continued_run_stops_again(tmp_path):
    rule = {"patience": 2, "min_delta": 1e9}  # nothing improves by 1e9: the 1st sets the best, the 3rd stops
    fit(_config(tmp_path, rule))
    assert _last_frames(tmp_path) == 3 * EVERY
    ckpt = tmp_path / "es" / "version_0" / "checkpoints" / "last.ckpt"
    cli = fit([*_config(tmp_path, rule), f"--ckpt_path={ckpt}"])  # its wait count restored: the next one stops
    assert cli.model.collected_frames == 4 * EVERY


def test_a_stopping_rule_without_an_evaluation_metric_is_refused(tmp_path):
    with pytest.raises(ValueError, match="EarlyStopping.monitor='train/episode_return' is not allowed"):
        EarlyStopping(monitor="train/episode_return")  # (built from the config: before anything is written)
    with pytest.raises(ValueError, match="needs a callbacks.PolicyEvaluation"):
        fit(_config(tmp_path, {"stopping_threshold": 0.0}, evaluate=False))


def test_a_restored_state_is_checked_and_keeps_the_configured_patience():
    saved = EarlyStopping(patience=2).state_dict()
    stopper = EarlyStopping(patience=5)
    stopper.load_state_dict({**saved, "wait_count": 1})
    assert (stopper.wait_count, stopper.patience) == (1, 5)
    for key, value, message in (("best_score", torch.tensor(float("nan")), "best_score=nan is not a finite"),
                                ("best_score", [1.0], "not a one-number tensor"),
                                ("wait_count", -1, "wait_count=-1 is outside"),
                                ("stopping_reason", 9, "stopping_reason=9 is not one of")):
        with pytest.raises(RestoredStateError, match=message):
            EarlyStopping().load_state_dict({**saved, key: value})
