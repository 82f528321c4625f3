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
        feeds = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs, strict=True)}
        onnx_action = session.run(["action"], feeds)[0]
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
    for key, value in zip(keys, inputs, strict=True):
        td.set(key, value.clone())
    return td


def test_ppo_policy_round_trip(smoke_run, tmp_path):
    """The DVRP PPO policy (six inputs, an action mask): the exported files play the module's actions."""
    _, data = load_run(SMOKE, smoke_run["last"], [])
    _check_round_trip(smoke_run["last"], data, tmp_path)


def test_sac_policy_round_trip(tmp_path):
    """SAC on Pendulum (a continuous, bounded action): the exported squashed mean equals the module's."""
    run = fit(["--config", PENDULUM, "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
               "--data.init_args.total_frames=160", "--data.init_args.replay_buffer.init_random_frames=104",
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


def test_reinforce_routing_policy_is_not_exportable():
    from modules.reinforce import REINFORCEModule
    from modules.routing import RoutingPolicy

    with pytest.raises(NotImplementedError):
        REINFORCEModule(RoutingPolicy()).export_policy()


class _Payload:
    """A pickled object whose loading would run code (weights-only loading refuses it)."""

    def __reduce__(self):
        return (print, ("the payload ran",))


@pytest.mark.parametrize("case", ["empty", "truncated", "garbage", "payload", "not_a_training_checkpoint"])
def test_an_unreadable_checkpoint_is_one_line(smoke_run, tmp_path, case):
    """Issue 38: export refuses a file that is no readable training checkpoint as fit and evaluate do: one line
    naming it, exit 2, nothing written."""
    import os

    path = tmp_path / f"{case}.ckpt"
    data = open(smoke_run["last"], "rb").read()
    if case == "empty":
        path.write_bytes(b"")
    elif case == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif case == "garbage":
        path.write_bytes(os.urandom(4096))
    elif case == "payload":
        torch.save({"state_dict": {}, "hyper_parameters": _Payload()}, path)
    else:
        torch.save({"weights": torch.zeros(3)}, path)
    proc = run_module("pipelines.export", "--ckpt_path", str(path), "--out", str(tmp_path / "out" / "p.pt"),
                      timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "payload ran" not in proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error: --ckpt_path"), proc.stderr
    assert f"{case}.ckpt" in proc.stderr
    assert not (tmp_path / "out").exists()


# export's CLI in a subprocess, stopped by SIGTERM at a given moment: before the description is written (json.dump),
# or right after the first file is renamed into place (os.replace)
STOPPED_EXPORT = """
import json, os, signal, sys
import pipelines.export as export
where = sys.argv[1]
def stop(real):
    def call(*args, **kwargs):
        result = real(*args, **kwargs) if where == "replace" else None
        os.kill(os.getpid(), signal.SIGTERM)
        return result if where == "replace" else real(*args, **kwargs)
    return call
if where == "dump":
    json.dump = stop(json.dump)
else:
    os.replace = stop(os.replace)
export.main(sys.argv[2:])
"""


@pytest.mark.parametrize("where", ["dump", "replace"])
def test_an_interrupted_export_leaves_both_files_or_neither(smoke_run, tmp_path, where):
    """Issue 38: SIGTERM between the two files: the folder holds neither file (stopped while writing) or both,
    complete (stopped between the renames: the signal waits for the second); a rerun then works."""
    import os

    out = tmp_path / "export" / "p.pt"
    args = ["--ckpt_path", smoke_run["last"], "--out", str(out)]
    proc = subprocess.run([sys.executable, "-c", STOPPED_EXPORT, where, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode in (143, -15), proc.stderr[-2000:]
    if where == "dump":
        assert os.listdir(out.parent) == [], "neither file, and no temporary file"
        assert "error: export stopped by SIGTERM: nothing written" in proc.stderr
        rerun = run_module("pipelines.export", *args, timeout=120)
        assert rerun.returncode == 0, rerun.stderr[-2000:]
    else:
        assert sorted(os.listdir(out.parent)) == ["p.pt", "p.pt.json"]
        assert "were written" in proc.stderr
    assert json.loads((tmp_path / "export" / "p.pt.json").read_text())["file"] == "p.pt"
    torch.jit.load(str(out))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_a_cuda_device_without_one_is_one_line(smoke_run, tmp_path):
    proc = run_module("pipelines.export", "--ckpt_path", smoke_run["last"], "--out", str(tmp_path / "p.pt"),
                      "--device", "cuda:0", timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "error: --device=cuda:0: this machine has no CUDA devices (use --device cpu)"
    assert not (tmp_path / "p.pt").exists()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_export_on_the_gpu(smoke_run, tmp_path):
    """--device cuda: the policy traced on the GPU plays the module's actions there."""
    out = tmp_path / "p.pt"
    description = export(["--ckpt_path", smoke_run["last"], "--out", str(out), "--device", "cuda"])
    assert description["device"] == "cuda"
    module = RLModule.load_from_checkpoint(smoke_run["last"]).to("cuda")
    _, keys = module.export_policy()
    _, data = load_run(SMOKE, smoke_run["last"], [])
    scripted = torch.jit.load(str(out))
    for inputs in _observations(data, keys):
        inputs = tuple(x.cuda() for x in inputs)
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            expected = module.collector_policy(_as_td(keys, inputs))["action"]
        assert torch.equal(scripted(*inputs), expected)


def test_a_killed_exports_temporary_files_go_at_the_next_export_of_that_name(smoke_run, tmp_path):
    """A SIGKILLed export leaves ``.p.pt.<hex>.tmp`` files; the next export of ``p.pt`` removes them, and leaves the
    temporary files of an export still running (it holds a lock on its own) and of other names alone."""
    import fcntl
    import os

    folder = tmp_path / "export"
    folder.mkdir()
    (folder / ".p.pt.dead0001.tmp").write_text("a killed export's (its lock went with its process)")
    (folder / ".q.pt.other001.tmp").write_text("another name's")
    running = folder / ".p.pt.live0001.tmp"
    running.write_text("a running export's")
    fd = os.open(running, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        export(["--ckpt_path", smoke_run["last"], "--out", str(folder / "p.pt")])
    finally:
        os.close(fd)
    assert sorted(os.listdir(folder)) == [".p.pt.live0001.tmp", ".q.pt.other001.tmp", "p.pt", "p.pt.json"]
