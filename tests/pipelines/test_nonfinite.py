"""Nothing non-finite is trained on in silence: non-finite updates are skipped, counted and logged, and a run
that keeps producing them stops naming the step and the last checkpoint; a non-finite env value stops the run
naming the entry; a checkpoint is never written with non-finite weights."""

from __future__ import annotations

import types

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from callbacks.checkpoint import ModelCheckpoint
from callbacks.evaluation import PolicyEvaluation
from modules.base import check_finite
from pipelines.fit import main
from tests.pipelines.conftest import REPO

CARTPOLE = str(REPO / "configs" / "cartpole_dqn.yaml")


def _run(tmp_path, *extra: str):
    return main(["--config", CARTPOLE, "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
                 "--trainer.callbacks+=callbacks.ModelCheckpoint", "--trainer.callbacks.every_n_train_steps=10",
                 "--trainer.callbacks.save_last=true",
                 "--trainer.callbacks+=tests.pipelines.fault_probe.PoisonBatch", "--trainer.callbacks.from_step=20",
                 "--data.init_args.replay_buffer.init_random_frames=256", "--data.init_args.collector.num_envs=4",
                 "--data.init_args.collector.frames_per_batch=64", "--data.init_args.replay_buffer.batch_size=32",
                 "--data.init_args.replay_buffer.utd_ratio=2", "--data.init_args.total_frames=6400",
                 "--model.init_args.network.init_args.hidden_dims=[32, 32]",
                 f"--trainer.logger.init_args.save_dir={tmp_path}", *extra])


def test_nonfinite_updates_are_skipped_then_the_run_stops(tmp_path, monkeypatch):
    """From step 20 every update is nan: each is skipped (the weights stay those of step 20), counted, and the
    default guard (added by pipelines.fit) stops the run after 100 in a row, naming the last checkpoint."""
    weights = {}

    def remember(self, trainer, pl_module, outputs, batch, batch_idx, _orig=ModelCheckpoint.on_train_batch_end):
        if trainer.global_step == 20:
            weights["at_20"] = {k: v.clone() for k, v in pl_module.network.state_dict().items()}
        weights["now"] = pl_module.network.state_dict()
        weights["model"] = pl_module
        return _orig(self, trainer, pl_module, outputs, batch, batch_idx)

    monkeypatch.setattr(ModelCheckpoint, "on_train_batch_end", remember)
    with pytest.raises(RuntimeError, match=r"100 non-finite updates in a row .* up to optimiser step 120: .*"
                                           r"the last checkpoint: .*last\.ckpt"):
        _run(tmp_path)
    assert all(torch.equal(weights["at_20"][k], v) for k, v in weights["now"].items())
    assert int(weights["model"].nonfinite_updates) == 100
    last = torch.load(tmp_path / "cartpole_dqn" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    assert all(torch.isfinite(v).all() for v in last["state_dict"].values() if v.is_floating_point())
    skipped = last["global_step"] - 20  # the counts resume with the run
    assert skipped > 0 and last["rl_state"]["nonfinite_updates"] == last["rl_state"]["consecutive_nonfinite"] == skipped


def test_a_listed_guard_sets_the_limit(tmp_path):
    """max_consecutive 5, read after every training step of 2 updates: the step that reaches 6 stops the run."""
    with pytest.raises(RuntimeError, match=r"6 non-finite updates in a row .* up to optimiser step 26"):
        _run(tmp_path, "--trainer.callbacks+=callbacks.NonFiniteGuard", "--trainer.callbacks.max_consecutive=5")


def test_nonfinite_env_values_stop_naming_the_entry():
    batch = TensorDict(observation=torch.zeros(4, 3, 2), next=TensorDict(reward=torch.zeros(4, 3, 1),
                                                                        batch_size=[4, 3]), batch_size=[4, 3])
    check_finite(batch)
    batch["next", "reward"][2, 1] = float("inf")
    with pytest.raises(RuntimeError, match=r"non-finite value in \('next', 'reward'\)"):
        check_finite(batch)


def test_a_nan_observation_is_named_before_the_action_computed_from_it():
    """A NaN observation makes the policy's action NaN: the env's entry is named, the action after it."""
    batch = TensorDict(action=torch.zeros(4, 3, 1), observation=torch.zeros(4, 3, 2),
                       next=TensorDict(observation=torch.zeros(4, 3, 2), reward=torch.zeros(4, 3, 1),
                                       batch_size=[4, 3]), batch_size=[4, 3])
    batch["action"][1, 2] = float("nan")
    batch["next", "observation"][1, 1] = float("nan")
    with pytest.raises(RuntimeError, match=r"non-finite value in \('next', 'observation'\) \(nan or inf\) "
                                           r"\(and in 'action'\)"):
        check_finite(batch)


def test_no_checkpoint_with_nonfinite_weights(tmp_path):
    callback = ModelCheckpoint(dirpath=tmp_path)
    module = nn.Linear(2, 2)
    trainer = types.SimpleNamespace(lightning_module=module, global_step=7)
    with torch.no_grad():
        module.weight[0, 0] = float("nan")
    with pytest.raises(RuntimeError, match=r"not writing .*x\.ckpt at optimiser step 7: 1 weights are not finite "
                                           r"\(e\.g\. weight\)"):
        callback._save_checkpoint(trainer, str(tmp_path / "x.ckpt"))
    assert not (tmp_path / "x.ckpt").exists()


def test_no_best_checkpoint_with_nonfinite_weights(tmp_path, monkeypatch):
    """An evaluation that beats the best one while the weights are not finite writes no best.ckpt."""
    module = nn.Linear(2, 2)
    saved = []
    trainer = types.SimpleNamespace(strategy=types.SimpleNamespace(broadcast=lambda value, src: value),
                                    checkpoint_callback=types.SimpleNamespace(dirpath=str(tmp_path)),
                                    save_checkpoint=lambda path, weights_only=None: saved.append(path))
    callback = PolicyEvaluation(save_best=True)
    monkeypatch.setattr(callback, "evaluate", lambda trainer, pl_module: {"eval/episode_return": 10.0})
    module.collected_frames = 100
    callback._evaluate_and_keep_best(trainer, module)
    assert saved == [str(tmp_path / "best.ckpt")] and callback.best == 10.0
    with torch.no_grad():
        module.weight[0, 0] = float("inf")
    monkeypatch.setattr(callback, "evaluate", lambda trainer, pl_module: {"eval/episode_return": 20.0})
    callback._evaluate_and_keep_best(trainer, module)
    assert len(saved) == 1 and callback.best == 10.0


def test_the_update_skips_lightning_only_where_lightning_would_add_nothing(tmp_path):
    """With no backward or optimiser-step hook in the run the update calls torch's backward and step itself
    (``direct_update``); a callback with ``on_after_backward`` sends every update through Lightning (the hook is
    called once per optimiser step). Both runs count the same optimiser steps and end with the same weights."""
    from tests.pipelines.fault_probe import CountBackward

    def run(out, *extra):
        return main(["--config", CARTPOLE, "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
                     "--trainer.enable_checkpointing=false", "--data.init_args.replay_buffer.init_random_frames=256",
                     "--data.init_args.collector.num_envs=4", "--data.init_args.collector.frames_per_batch=64",
                     "--data.init_args.replay_buffer.batch_size=32", "--data.init_args.replay_buffer.utd_ratio=2",
                     "--data.init_args.total_frames=2048", "--model.init_args.network.init_args.hidden_dims=[32, 32]",
                     f"--trainer.logger.init_args.save_dir={out}", *extra])

    plain = run(tmp_path / "plain")
    CountBackward.calls = 0
    hooked = run(tmp_path / "hooked", "--trainer.callbacks+=tests.pipelines.fault_probe.CountBackward")
    assert plain.model.direct_update() and not hooked.model.direct_update()
    steps = hooked.trainer.global_step
    assert steps == plain.trainer.global_step > 0 and CountBackward.calls == steps
    ours, theirs = plain.model.network.state_dict(), hooked.model.network.state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in ours.items())
