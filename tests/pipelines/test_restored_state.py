"""Restored state is data, never names, and every restored value is checked: a checkpoint edited by hand (or
downloaded) that names a generator to call, changes an env's physics, or holds numbers no run writes (a negative
variance, a NaN puck, a step counter of -1e9, an opponent id of 99, LSTM states of another shape, a replay buffer
fuller than its capacity) ends ``pipelines.fit --ckpt_path`` (and ``evaluate``, ``export``, ``load_from_checkpoint``)
in one line naming the entry, exit 2: never a NaN result with exit 0, never a traceback, never code run."""

from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest
import torch

from envs.restored import RestoredStateError
from modules.base import RLModule
from pipelines.evaluate import main as evaluate
from pipelines.export import main as export
from pipelines.fit import main as fit
from tests.pipelines.conftest import REPO, hockey_dqn_config, run_module

PENDULUM = str(REPO / "configs" / "pendulum_ppo.yaml")
LSTM = str(REPO / "configs" / "cartpole_novel_ppo_lstm.yaml")
CARTPOLE = str(REPO / "configs" / "cartpole_dqn.yaml")
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false"]
TINY = {PENDULUM: ["--data.init_args.collector.frames_per_batch=256", "--data.init_args.total_frames=512",
                   "--model.init_args.mini_batch_size=64", "--model.init_args.ppo_epochs=1"],
        LSTM: ["--data.init_args.total_frames=512", "--model.init_args.ppo_epochs=1"],
        CARTPOLE: ["--data.init_args.total_frames=512", "--data.init_args.replay_buffer.init_random_frames=128",
                   "--data.init_args.replay_buffer.buffer_size=2048",
                   "--model.init_args.network.init_args.hidden_dims=[16]"]}


def _trained(config: str, out: pathlib.Path) -> str:
    """``last.ckpt`` of a tiny run of ``config`` (pipelines.fit in a subprocess)."""
    proc = run_module("pipelines.fit", "--config", config, *TINY[config], "--trainer.enable_progress_bar=false",
                      f"--trainer.default_root_dir={out}", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return str(next(out.glob("runs/*/version_0/checkpoints/last.ckpt")))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("trained")
    return {name: _trained(config, root / name) for name, config in
            (("pendulum", PENDULUM), ("lstm", LSTM), ("cartpole", CARTPOLE))}


def _edited(source: str, path: pathlib.Path, edit) -> str:
    checkpoint = torch.load(source, map_location="cpu", weights_only=True)
    edit(checkpoint)
    torch.save(checkpoint, path)
    return str(path)


def _resume(config: str, ckpt: str, tmp_path: pathlib.Path, capsys, *extra: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as stop:
        fit(["--config", config, *TINY[config], "--data.init_args.total_frames=2048", *QUIET, *extra,
             f"--trainer.default_root_dir={tmp_path / 'resumed'}", "--ckpt_path", ckpt])
    return stop.value.code, capsys.readouterr().err


def _gym_layer(checkpoint: dict, depth: int) -> dict:
    """The state of wrapper layer ``depth`` (0 outermost: TimeLimit; 3: the env itself) of row 0's env."""
    return checkpoint["OnPolicyDataModule"]["env_rng"]["envs"][0][depth]


def _set(path: tuple, value):
    def edit(checkpoint: dict) -> None:
        node = checkpoint
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


GYM_CASES = [  # (name, edit, what the one line names)
    ("a generator named by the file", lambda c: _gym_layer(c, 3)["_np_random"].update(bit_generator="test"),
     "_np_random.bit_generator='test' is not allowed"),
    ("tampered gravity", lambda c: _gym_layer(c, 3).update(g=-1000.0), "(PendulumEnv).g=-1000.0 differs"),
    ("tampered torque", lambda c: _gym_layer(c, 3).update(max_torque=1e6), "max_torque=1000000.0 differs"),
    ("3-step episodes", lambda c: _gym_layer(c, 0).update(_max_episode_steps=3), "_max_episode_steps=3 differs"),
    ("a step count past the limit", lambda c: _gym_layer(c, 0).update(_elapsed_steps=10 ** 9), "_elapsed_steps"),
    ("a NaN pendulum", lambda c: _gym_layer(c, 3).update(state=torch.full((2,), math.nan, dtype=torch.float64)),
     "(PendulumEnv).state holds a nan"),
    ("an attribute the env lacks", lambda c: _gym_layer(c, 3).update(__class__=3), "no such attribute"),
    ("observations of another shape", lambda c: c["OnPolicyDataModule"]["env_rng"]["last"].update(
        observation=torch.zeros(4, 7)), "env state.last.observation has shape [4, 7]"),
]
MODULE_CASES = [
    ("a negative variance", _set(("state_dict", "normalization.observation.var"), -torch.ones(3, dtype=torch.float64)),
     "normalization.observation.var ranges over"),
    ("a NaN mean", _set(("state_dict", "normalization.observation.mean"),
                        torch.full((3,), math.nan, dtype=torch.float64)), "observation.mean holds a nan"),
    ("a negative count", _set(("state_dict", "normalization.observation.count"),
                              torch.tensor(-5.0, dtype=torch.float64)), "observation.count ranges over"),
    ("a NaN weight", lambda c: next(v for k, v in c["state_dict"].items() if k.endswith("weight")).fill_(math.nan),
     "holds a nan, an infinity"),
    ("a negative frame count", _set(("rl_state", "collected_frames"), -10), "rl_state.collected_frames=-10"),
    ("a torch RNG state of another size", _set(("rl_state", "torch_rng"), [torch.zeros(3, dtype=torch.uint8)]),
     "rl_state.torch_rng[0] has shape [3]"),
    ("reward returns of another kind", _set(("rl_state", "reward_returns"), [torch.zeros(2, 2)]),
     "rl_state.reward_returns[0] is not a vector"),
]


@pytest.mark.parametrize("case", GYM_CASES + MODULE_CASES, ids=[c[0] for c in GYM_CASES + MODULE_CASES])
def test_resume_refuses_a_tampered_state_in_one_line(checkpoints, tmp_path, capsys, case, monkeypatch):
    """``pipelines.fit --ckpt_path``: exit 2, one line naming the entry, no traceback; ``numpy.random.test`` (the
    generator the file names) is never called."""
    called = []
    monkeypatch.setattr(np.random, "test", lambda *a, **k: called.append(a), raising=False)
    name, edit, expected = case
    path = _edited(checkpoints["pendulum"], tmp_path / "tampered.ckpt", edit)
    code, err = _resume(PENDULUM, path, tmp_path, capsys)
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1 and expected in lines[0] and "Traceback" not in err, err[-3000:]
    assert not called


@pytest.mark.parametrize("case", MODULE_CASES[:4], ids=[c[0] for c in MODULE_CASES[:4]])
def test_evaluate_export_and_python_refuse_tampered_weights(checkpoints, tmp_path, capsys, case):
    """The same checkpoint under ``pipelines.evaluate`` and ``pipelines.export`` (exit 2, one line, nothing written)
    and ``RLModule.load_from_checkpoint`` (RestoredStateError naming the entry): no NaN return, no NaN policy."""
    name, edit, expected = case
    path = _edited(checkpoints["pendulum"], tmp_path / "tampered.ckpt", edit)
    for command, args in ((evaluate, ["--config", PENDULUM, "--ckpt_path", path, "--episodes", "2"]),
                          (export, ["--ckpt_path", path, "--out", str(tmp_path / "p.pt")])):
        with pytest.raises(SystemExit) as stop:
            command(args)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and expected in err and "Traceback" not in err, err[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tampered.ckpt"]
    with pytest.raises(RestoredStateError, match=expected.split(" ")[0]):
        RLModule.load_from_checkpoint(path)


def test_recurrent_states_of_another_shape_are_refused(checkpoints, tmp_path, capsys):
    def edit(checkpoint: dict) -> None:
        carry = checkpoint["OnPolicyDataModule"]["policy_carry"]
        key = next(k for k, v in carry.items() if v.is_floating_point())
        carry[key] = torch.zeros(*carry[key].shape[:-1], carry[key].shape[-1] + 1)

    code, err = _resume(LSTM, _edited(checkpoints["lstm"], tmp_path / "t.ckpt", edit), tmp_path, capsys)
    assert code == 2 and "policy_carry." in err and "has shape" in err and "Traceback" not in err, err[-2000:]


@pytest.mark.parametrize("edit, expected", [
    (lambda rb: rb["_storage"].update(_len=10 ** 9), "replay_buffer._storage._len=1000000000 is outside"),
    (lambda rb: rb["_writer"].update(_cursor=-1), "replay_buffer._writer._cursor=-1 is outside"),
    (lambda rb: rb["_storage"]["_storage"]["observation"].fill_(math.nan), "observation holds a nan"),
    (lambda rb: rb["_storage"]["_storage"].update(action=torch.zeros(3, 1)), "action is [3, 1]"),
], ids=["fill count", "cursor", "NaN observation", "entry shape"])
def test_a_tampered_replay_buffer_is_refused(checkpoints, tmp_path, capsys, edit, expected):
    path = _edited(checkpoints["cartpole"], tmp_path / "t.ckpt",
                   lambda c: edit(c["OffPolicyDataModule"]["replay_buffer"]))
    code, err = _resume(CARTPOLE, path, tmp_path, capsys)
    assert code == 2 and expected in err and "Traceback" not in err, err[-2000:]


@pytest.mark.parametrize("name, value, expected", [
    ("puck", lambda g: g["puck"].fill_(1e6), "games.puck (x) ranges over"),
    ("puck", lambda g: g["puck"].fill_(math.nan), "games.puck holds a nan"),
    ("t", lambda g: g["t"].fill_(-10 ** 9), "games.t ranges over"),
    ("opponent", lambda g: g["opponent"].fill_(99), "games.opponent ranges over"),
    ("players", lambda g: g.update(players=torch.zeros(6, 2, 3)), "games.players has shape [6, 2, 3]"),
    ("players", lambda g: g["players"][2].fill_(1e20), "games.players (angle) ranges over"),
], ids=["puck far away", "NaN puck", "negative step", "opponent 99", "rackets of other rows", "a racket's angle"])
def test_tampered_hockey_games_are_refused(tmp_path, capsys, name, value, expected):
    config = hockey_dqn_config(tmp_path / "run", [])
    run = run_module("pipelines.fit", "--config", config, "--data.init_args.total_frames=256", timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    source = next((tmp_path / "run").glob("hockey/version_0/checkpoints/last.ckpt"))
    path = _edited(str(source), tmp_path / "t.ckpt",
                   lambda c: value(c["OffPolicyDataModule"]["env_rng"]["games"]))
    with pytest.raises(SystemExit) as stop:
        fit(["--config", config, "--data.init_args.total_frames=512", f"--trainer.default_root_dir={tmp_path / 'b'}",
             "--trainer.logger=false", "--ckpt_path", path])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and expected in err and "Traceback" not in err, err[-2000:]
