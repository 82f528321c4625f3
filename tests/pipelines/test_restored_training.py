"""The training state a resumed fit takes from its checkpoint is checked against the run's own objects before it is
used: the checkpoint callback's paths (an edited ``last_model_path`` made Lightning delete a file outside the run),
the optimiser's state (a moment of another shape made fused Adam crash the process), Lightning's loop counters and
version, the evaluation history, the RNG state's content, the replay buffer's and pending n-step entries against the
env's specs, the weights' dtypes. Each ends the run in one line naming the entry, exit 2, nothing deleted; the
config's settings win over a file's loss buffers (``gamma``)."""

from __future__ import annotations

import math
import pathlib
import re
import shutil

import pytest
import torch

from modules.base import RLModule
from pipelines.fit import main as fit
from tests.pipelines.conftest import REPO, run_module

CARTPOLE = str(REPO / "configs" / "cartpole_dqn.yaml")
PENDULUM = str(REPO / "configs" / "pendulum_ppo.yaml")
TINY = ["--data.init_args.replay_buffer.init_random_frames=128", "--data.init_args.replay_buffer.buffer_size=2048",
        "--model.init_args.network.init_args.hidden_dims=[16]", "--model.init_args.n_steps=3",
        "--trainer.enable_progress_bar=false"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> pathlib.Path:
    """A tiny CartPole DQN run (3-step returns: pending steps in the checkpoint), its root folder."""
    out = tmp_path_factory.mktemp("trained")
    proc = run_module("pipelines.fit", "--config", CARTPOLE, *TINY, "--data.init_args.total_frames=512",
                      f"--trainer.default_root_dir={out}", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _callback(checkpoint: dict, name: str) -> dict:
    return next(state for key, state in checkpoint["callbacks"].items() if key.startswith(name))


def _copy(trained: pathlib.Path, tmp_path: pathlib.Path, edit) -> pathlib.Path:
    """The run copied to ``tmp_path``, its checkpoint callback's paths moved with it, then ``edit``ed."""
    root = tmp_path / "run"
    shutil.copytree(trained, root)
    folder = next(root.glob("runs/*/version_0/checkpoints"))
    path = folder / "last.ckpt"
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    state = _callback(checkpoint, "ModelCheckpoint")
    state["dirpath"] = str(folder)
    for key in ("last_model_path", "best_model_path", "kth_best_model_path"):
        if state.get(key):
            state[key] = str(folder / pathlib.Path(state[key]).name)
    state["best_k_models"] = {str(folder / pathlib.Path(k).name): v for k, v in state["best_k_models"].items()}
    edit(checkpoint)
    torch.save(checkpoint, path)
    return path


def _resume(path: pathlib.Path, capsys) -> tuple[int, str]:
    root = path.parents[4]
    with pytest.raises(SystemExit) as stop:
        fit(["--config", CARTPOLE, *TINY, "--data.init_args.total_frames=2048", f"--trainer.default_root_dir={root}",
             "--ckpt_path", str(path)])
    return stop.value.code, capsys.readouterr().err


def _optimizer(checkpoint: dict) -> dict:
    return checkpoint["optimizer_states"][0]


def _replay(checkpoint: dict) -> dict:
    return checkpoint["OffPolicyDataModule"]["replay_buffer"]["_storage"]["_storage"]


def _pending(checkpoint: dict) -> dict:
    return checkpoint["OffPolicyDataModule"]["replay_pending"]["0"]["data"]


CASES = [  # (name, edit given the victim file, what the one line names)
    ("last checkpoint outside the folder",
     lambda c, v: _callback(c, "ModelCheckpoint").update(last_model_path=f"{c['_dir']}/../../../../../{v.name}"),
     "ModelCheckpoint.last_model_path="),
    ("a top-k checkpoint outside the folder",
     lambda c, v: _callback(c, "ModelCheckpoint").update(best_k_models={str(v): torch.tensor(1.0)}),
     "ModelCheckpoint.best_k_models["),
    ("a moment of another shape (fused Adam crashed)",
     lambda c, v: _optimizer(c)["state"][0].update(exp_avg=torch.zeros(3)), "optimizer_states[0].state[0].exp_avg has"),
    ("a negative second moment",
     lambda c, v: _optimizer(c)["state"][0]["exp_avg_sq"].fill_(-1), "optimizer_states[0].state[0].exp_avg_sq ranges"),
    ("another optimiser setting",
     lambda c, v: _optimizer(c)["param_groups"][0].update(fused=False, capturable=True),
     "optimizer_states[0].param_groups[0].capturable=True"),
    ("a NaN learning rate",
     lambda c, v: _optimizer(c)["param_groups"][0].update(lr=math.nan), "optimizer_states[0].param_groups[0].lr=nan"),
    ("a negative loop counter",
     lambda c, v: c["loops"]["fit_loop"]["epoch_loop.manual_optimization.optim_step_progress"]["total"].update(
         completed=-1000), "loops.fit_loop.epoch_loop.manual_optimization.optim_step_progress.total.completed=-1000"),
    ("an unknown Lightning version", lambda c, v: c.update({"pytorch-lightning_version": "0.0.1"}),
     "pytorch-lightning_version='0.0.1' is not allowed"),
    ("an RNG state no generator takes",
     lambda c, v: c["rl_state"]["torch_rng"][0].zero_(), "rl_state.torch_rng[0] is not a generator state"),
    ("a NaN evaluation in the history",
     lambda c, v: _callback(c, "PolicyEvaluation").update(history=[{"frames": 512.0, "eval/episode_return": math.nan}]),
     "PolicyEvaluation.history[0].eval/episode_return=nan"),
    ("an action outside the env's", lambda c, v: _replay(c)["action"][:4].fill_(7), "action holds actions outside"),
    ("observations of another dtype",
     lambda c, v: _replay(c).update(observation=_replay(c)["observation"].double()), "observation is torch.float64"),
    ("pending n-step rewards NaN", lambda c, v: _pending(c)["next"]["reward"].fill_(math.nan),
     "replay_pending.0.data.next.reward holds a nan"),
    ("weights of another dtype",
     lambda c, v: c["state_dict"].update({k: w.double() for k, w in c["state_dict"].items() if w.is_floating_point()}),
     "is torch.float64, this module's is torch.float32"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_tampered_training_state_is_refused_in_one_line(trained, tmp_path, capsys, case):
    _, edit, expected = case
    victim = tmp_path / "victim.txt"
    victim.write_text("kept")

    def with_folder(checkpoint: dict) -> None:
        checkpoint["_dir"] = _callback(checkpoint, "ModelCheckpoint")["dirpath"]
        edit(checkpoint, victim)
        del checkpoint["_dir"]

    code, err = _resume(_copy(trained, tmp_path, with_folder), capsys)
    assert code == 2 and expected in err and "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("error: --ckpt_path=")
    assert victim.read_text() == "kept"


def test_the_untampered_copy_resumes(trained, tmp_path, capsys):
    """The copy the cases edit resumes as it is (so each case's refusal is its edit's)."""
    path = _copy(trained, tmp_path, lambda c: None)
    fit(["--config", CARTPOLE, *TINY, "--data.init_args.total_frames=1024",
         f"--trainer.default_root_dir={path.parents[4]}", "--ckpt_path", str(path)])
    assert torch.load(path, weights_only=True)["rl_state"]["collected_frames"] == 1024


def test_the_config_settings_win_over_a_files_loss_buffers(tmp_path):
    """TorchRL keeps gamma and clip_epsilon as buffers: an edited file's values are replaced by the module's own
    (its config's), so a loaded or resumed module never trains on them."""
    proc = run_module("pipelines.fit", "--config", PENDULUM, "--data.init_args.collector.frames_per_batch=256",
                      "--data.init_args.total_frames=256", "--model.init_args.mini_batch_size=64",
                      "--model.init_args.ppo_epochs=1", "--trainer.enable_progress_bar=false",
                      f"--trainer.default_root_dir={tmp_path}", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = next(tmp_path.glob("runs/*/version_0/checkpoints/last.ckpt"))
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["state_dict"]["gae.gamma"] = torch.tensor(50.0)
    checkpoint["state_dict"]["clip_epsilon"] = torch.tensor(-5.0)
    torch.save(checkpoint, tmp_path / "edited.ckpt")
    module = RLModule.load_from_checkpoint(tmp_path / "edited.ckpt")
    assert float(module.gae.gamma) == pytest.approx(module.hparams.gamma)
    assert float(module.clip_epsilon) == pytest.approx(module.hparams.clip_epsilon)


@pytest.mark.parametrize("edit, expected", [
    (lambda s: s["example_observation"]["observation"].fill_(math.nan),
     "env_specs.example_observation.observation holds a nan"),
    (lambda s: s.update(num_agents="x"), "env_specs.num_agents='x' is not an integer"),
], ids=["a NaN example observation", "a number of agents in words"])
def test_a_tampered_env_spec_record_is_refused_by_load_and_export(trained, tmp_path, edit, expected):
    """The env specs a checkpoint records shape the networks ``load_from_checkpoint`` and ``export`` build: a NaN
    example observation (export traced the policy on it) or a number of agents that is no integer is one line."""
    source = next(trained.glob("runs/*/version_0/checkpoints/last.ckpt"))
    checkpoint = torch.load(source, map_location="cpu", weights_only=True)
    edit(checkpoint["env_specs"])
    torch.save(checkpoint, tmp_path / "t.ckpt")
    with pytest.raises(ValueError, match=re.escape(expected)):
        RLModule.load_from_checkpoint(tmp_path / "t.ckpt")
    proc = run_module("pipelines.export", "--ckpt_path", str(tmp_path / "t.ckpt"), "--out", str(tmp_path / "p.pt"),
                      timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0], proc.stderr
