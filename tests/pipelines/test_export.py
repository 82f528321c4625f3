"""pipelines.export: a trained policy as a TorchScript or ONNX file that runs without this package and plays the
module's own (deterministic) actions."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from torchrl.envs.utils import ExplorationType, set_exploration_type

from modules.base import RLModule
from pipelines.evaluate import load_run
from pipelines.export import main as export
from pipelines.fit import main as fit
from tests.pipelines.conftest import REPO, SMOKE, run_module

PENDULUM = str(REPO / "configs" / "pendulum_sac.yaml")
# the exported file is loaded with this project's packages and TorchRL made unimportable
WITHOUT_PACKAGE = """
import sys, json, torch
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("modules", "envs", "pipelines", "callbacks", "torchrl", "tensordict"):
            raise ImportError(f"{name} is blocked")
sys.meta_path.insert(0, Blocked())
inputs = [torch.tensor(x) for x in json.load(open(sys.argv[2]))]
print(json.dumps(torch.jit.load(sys.argv[1])(*inputs).tolist()))
"""


def _observations(data, keys, steps: int = 3, num_envs: int = 8) -> list[tuple[torch.Tensor, ...]]:
    """Inputs of a few real (random-action) steps of the run's env."""
    env = data.make_eval_env(num_envs, seed=5)
    td, found = env.reset(), []
    for _ in range(steps):
        found.append(tuple(td.get(k).clone() for k in keys))
        td = env.step_and_maybe_reset(env.rand_action(td))[1]
    env.close()
    return found


def _check_round_trip(ckpt: str, data, tmp_path) -> None:
    module = RLModule.load_from_checkpoint(ckpt)
    policy, keys = module.export_policy()
    for fmt in ("torchscript", "onnx"):
        out = tmp_path / f"policy.{fmt}"
        description = export(["--ckpt_path", ckpt, "--format", fmt, "--out", str(out)])
        assert json.loads((tmp_path / f"policy.{fmt}.json").read_text()) == description
        assert [i["key"] for i in description["inputs"]] == [".".join(k) if isinstance(k, tuple) else k for k in keys]
    import onnxruntime

    session = onnxruntime.InferenceSession(str(tmp_path / "policy.onnx"))
    scripted = torch.jit.load(str(tmp_path / "policy.torchscript"))
    for inputs in _observations(data, keys):
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            expected = module.collector_policy(_as_td(keys, inputs))["action"]
        assert torch.equal(scripted(*inputs), expected)
        onnx_action = session.run(["action"], {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)})[0]
        if expected.dtype.is_floating_point:
            np.testing.assert_allclose(onnx_action, expected.numpy(), rtol=1e-5, atol=1e-6)
        else:
            assert np.array_equal(onnx_action, expected.numpy())
    # without this package (and TorchRL) in the process
    inputs = _observations(data, keys, steps=1)[0]
    (tmp_path / "inputs.json").write_text(json.dumps([x.tolist() for x in inputs]))
    proc = subprocess.run([sys.executable, "-c", WITHOUT_PACKAGE, str(tmp_path / "policy.torchscript"),
                           str(tmp_path / "inputs.json")], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        expected = module.collector_policy(_as_td(keys, inputs))["action"]
    assert np.allclose(json.loads(proc.stdout), expected.numpy(), atol=1e-6)


def _as_td(keys, inputs):
    from tensordict import TensorDict

    td = TensorDict({}, batch_size=inputs[0].shape[:1])
    for key, value in zip(keys, inputs):
        td.set(key, value.clone())
    return td


def test_ppo_policy_round_trip(smoke_run, tmp_path):
    """The DVRP PPO policy (six inputs, an action mask): the exported files play the module's actions."""
    _, data = load_run(SMOKE, smoke_run["last"], [])
    _check_round_trip(smoke_run["last"], data, tmp_path)


def test_sac_policy_round_trip(tmp_path):
    """SAC on Pendulum (a continuous, bounded action): the exported squashed mean equals the module's."""
    run = fit(["--config", PENDULUM, "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
               "--data.init_args.total_frames=160", "--data.init_args.init_random_frames=104",
               "--model.init_args.network.init_args.actor_hidden_dims=[32, 32]",
               "--model.init_args.network.init_args.critic_hidden_dims=[32, 32]",
               "--trainer.callbacks+=callbacks.ModelCheckpoint", "--trainer.callbacks.save_last=true",
               f"--trainer.logger.init_args.save_dir={tmp_path}"])
    ckpt = str(tmp_path / "pendulum_sac" / "version_0" / "checkpoints" / "last.ckpt")
    _check_round_trip(ckpt, run.datamodule, tmp_path)


def test_export_refuses_to_overwrite_and_default_folder(smoke_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(smoke_run["dir"] / "checkpoints", run / "checkpoints")
    ckpt = str(run / "checkpoints" / "last.ckpt")
    first = run_module("pipelines.export", "--ckpt_path", ckpt, timeout=120)
    assert first.returncode == 0, first.stderr[-2000:]
    assert (run / "export" / "last.pt").is_file() and (run / "export" / "last.pt.json").is_file()
    again = run_module("pipelines.export", "--ckpt_path", ckpt, timeout=120)
    assert again.returncode == 2 and "exists" in again.stderr


def test_reinforce_has_no_step_policy_to_export():
    from modules.reinforce import REINFORCEModule
    from modules.routing import RoutingPolicy

    with pytest.raises(NotImplementedError):
        REINFORCEModule(RoutingPolicy()).export_policy()
