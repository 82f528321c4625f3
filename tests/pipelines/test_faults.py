"""Faults with rollout workers end the run, never hang it: a worker killed or stopped, an error in the learner,
SIGINT or SIGTERM to the learner alone. Each run is a subprocess with its own time limit; each stops within
30 s of the fault (or of ``data.collector.worker_timeout_s``) with a non-zero exit status and an error naming the worker
or the signal, its checkpoints intact, and no worker process or shared-memory file left behind (also when the
learner itself is killed)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import weakref

import pytest
import torch

from envs.gym import GymConfig
from pipelines.data import CollectorOptions, OnPolicyDataModule, StopRequested
from tests.pipelines.conftest import REPO

VACUUM = str(REPO / "configs" / "vacuum.yaml")
SMALL = {"grid_size": 4, "num_robots": 2, "energy": [100, 100], "chargers": [], "max_steps": 10}
STOP_WITHIN_S = 30.0
STARTUP_LIMIT_S = 180.0


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _shm_files(pids: list[int]) -> set[str]:
    """The shared-memory files (``/dev/shm``) the processes map or hold open (queues' semaphores, shared tensors)."""
    found = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                found.update(line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6)
            found.update(os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            continue
    return {path for path in found if path.startswith("/dev/shm/") and not path.endswith("(deleted)")}


VACUUM_RUN = ("vacuum", ["--config", VACUUM, "--data.init_args.env=" + json.dumps(
    {"class_path": "envs.vacuum.VacuumConfig", "init_args": SMALL}), "--model.init_args.network.init_args.num_agents=2",
    "--data.init_args.collector.workers=2", "--data.init_args.replay_buffer.init_random_frames=64"])
# PPO on a game, one emulator per worker process (stable-retro's rule): killing the worker kills the emulator
GAME_RUN = ("airstriker_ppo", ["--config", str(REPO / "configs" / "airstriker_ppo.yaml"),
                               "--data.init_args.collector.num_envs=2",
                               "--data.init_args.collector.workers=2", "--data.init_args.collector.frames_per_batch=64",
                               "--model.init_args.mini_batch_size=64", "--model.init_args.ppo_epochs=1"])


def _run_with_fault(tmp_path, fault, *extra: str, raise_error: bool = False, run=VACUUM_RUN):
    """Start a worker run (``run``: its logger name and arguments), wait until it has a checkpoint, inject
    ``fault(pids)``; check that no worker process and no shared-memory file of the run outlives it; returns (exit
    status, stderr, seconds from the fault to the exit, pids, checkpoint folder). The run is killed if it outlives
    its limits."""
    ready = tmp_path / "pids.json"
    name, arguments = run
    probe = json.dumps({"class_path": "tests.pipelines.fault_probe.FaultProbe",
                        "init_args": {"out_file": str(ready), "raise_error": raise_error}})
    command = [sys.executable, "-m", "pipelines.fit", *arguments, "--data.init_args.total_frames=100000000",
               "--trainer.enable_progress_bar=false", f"--trainer.logger.init_args.save_dir={tmp_path}",
               "--trainer.callbacks=[]", "--trainer.callbacks+=callbacks.ModelCheckpoint",
               "--trainer.callbacks.every_n_train_steps=2", "--trainer.callbacks.save_last=true",
               f"--trainer.callbacks+={probe}", *extra]
    proc = subprocess.Popen(command, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        start = time.monotonic()
        while not ready.exists():
            assert proc.poll() is None, f"the run ended before the fault: {proc.communicate()[1][-3000:]}"
            assert time.monotonic() - start < STARTUP_LIMIT_S, "the run never reached its first checkpoint"
            time.sleep(0.2)
        pids = json.loads(ready.read_text())
        shm = _shm_files([pids["learner"], *pids["workers"]])
        fault(pids)
        faulted = time.monotonic()
        try:
            _, stderr = proc.communicate(timeout=STOP_WITHIN_S + 30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run did not stop within {STOP_WITHIN_S + 30:.0f} s of the fault")
        elapsed = time.monotonic() - faulted
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 10  # orphaned workers notice the learner's end; its resource tracker unlinks
    while ((any(_alive(pid) for pid in pids["workers"]) or any(map(os.path.exists, shm)))
           and time.monotonic() < deadline):
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in pids["workers"]), "a worker process outlived the run"
    assert not [path for path in shm if os.path.exists(path)], "shared-memory files left behind"
    folder = tmp_path / name / "version_0" / "checkpoints"
    return proc.returncode, stderr, elapsed, pids, folder


def _checkpoints_intact(folder) -> None:
    files = sorted(folder.glob("*.ckpt"))
    assert files, "no checkpoint was written"
    for path in files:
        state = torch.load(path, map_location="cpu", weights_only=True)
        assert state["rl_state"]["collected_frames"] > 0 and state["state_dict"], path


def test_a_killed_worker_stops_the_run(tmp_path):
    status, stderr, elapsed, pids, folder = _run_with_fault(
        tmp_path, lambda pids: os.kill(pids["workers"][1], signal.SIGKILL))
    assert status != 0 and elapsed < STOP_WITHIN_S
    assert f"rollout worker 1 (pid {pids['workers'][1]}, exit code -9) died" in stderr, stderr[-3000:]
    _checkpoints_intact(folder)


@pytest.mark.slow  # (16 s; `make test-slow`)
def test_a_killed_emulator_worker_stops_the_run_with_its_name(tmp_path):
    status, stderr, elapsed, pids, folder = _run_with_fault(
        tmp_path, lambda pids: os.kill(pids["workers"][0], signal.SIGKILL), run=GAME_RUN)
    assert status != 0 and elapsed < STOP_WITHIN_S
    assert f"rollout worker 0 (pid {pids['workers'][0]}, exit code -9) died" in stderr, stderr[-3000:]
    _checkpoints_intact(folder)


def test_a_stopped_worker_stops_the_run_after_the_worker_timeout(tmp_path):
    status, stderr, elapsed, pids, folder = _run_with_fault(
        tmp_path, lambda pids: os.kill(pids["workers"][0], signal.SIGSTOP),
        "--data.init_args.collector.worker_timeout_s=5")
    assert status != 0 and 5 <= elapsed < 5 + STOP_WITHIN_S
    assert (f"rollout workers 0 (pid {pids['workers'][0]}, stopped) gave no batch within "
            "data.collector.worker_timeout_s=5 s") in stderr, stderr[-3000:]
    _checkpoints_intact(folder)


def test_an_error_in_the_learner_stops_the_workers(tmp_path):
    status, stderr, elapsed, pids, folder = _run_with_fault(tmp_path, lambda pids: None, raise_error=True)
    assert status != 0 and elapsed < STOP_WITHIN_S
    assert "RuntimeError: injected learner fault" in stderr, stderr[-3000:]
    _checkpoints_intact(folder)


def test_a_killed_learner_leaves_no_worker_or_file_behind(tmp_path):
    status, _, elapsed, pids, folder = _run_with_fault(tmp_path, lambda pids: os.kill(pids["learner"], signal.SIGKILL))
    assert status == -signal.SIGKILL and elapsed < STOP_WITHIN_S  # the workers' and files' checks are in the helper
    _checkpoints_intact(folder)


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_the_learner_stops_the_run(tmp_path, signum, status):
    """Exit 128 + the signal after writing ``last.ckpt`` at the step where training stopped; resuming from it
    continues the run (frames and optimiser steps on from there) and ends with exit 0."""
    got, stderr, elapsed, pids, folder = _run_with_fault(tmp_path, lambda pids: os.kill(pids["learner"], signum))
    assert got == status and elapsed < STOP_WITHIN_S, (got, elapsed, stderr[-3000:])
    said = re.search(rf"training stopped by {signal.Signals(signum).name} at (\d+) frames, optimiser step (\d+); "
                     rf"last checkpoint: (\S+last\.ckpt)", stderr)
    assert said, stderr[-3000:]
    _checkpoints_intact(folder)
    last = torch.load(said[3], map_location="cpu", weights_only=True)
    frames, step = int(said[1]), int(said[2])
    assert last["rl_state"]["collected_frames"] == frames and last["global_step"] == step  # written at the stop
    if signum != signal.SIGTERM:
        return
    resumed = subprocess.run(
        [sys.executable, "-m", "pipelines.fit", "--config", VACUUM, f"--ckpt_path={said[3]}",
         f"--data.init_args.env={json.dumps({'class_path': 'envs.vacuum.VacuumConfig', 'init_args': SMALL})}",
         "--model.init_args.network.init_args.num_agents=2", "--data.init_args.collector.workers=2",
         f"--data.init_args.total_frames={frames + 512}", "--data.init_args.replay_buffer.init_random_frames=64",
         "--trainer.enable_progress_bar=false", f"--trainer.logger.init_args.save_dir={tmp_path / 'resumed'}",
         "--trainer.callbacks=[]", "--trainer.callbacks+=callbacks.ModelCheckpoint",
         "--trainer.callbacks.save_last=true"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    end = torch.load(tmp_path / "resumed" / "vacuum" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    assert end["rl_state"]["collected_frames"] >= frames + 512 and end["global_step"] > step


def test_a_stop_asked_for_before_an_interruptible_stretch_ends_the_run_as_it_begins():
    """A signal that came where the run waits for a step boundary (the config being written), just before the envs
    are built (minutes for a million gymnasium envs), ends the run when that build begins, not after it; the stop is a
    ``BaseException``, which torchrl's ``except Exception`` fallbacks inside the build do not swallow."""
    data = OnPolicyDataModule(GymConfig(env_id="CartPole-v1"), CollectorOptions(num_envs=1, frames_per_batch=8))
    built = []
    with data.interruptible():  # no stop asked for: the stretch runs
        built.append(True)
    data.request_stop("SIGTERM")
    with pytest.raises(StopRequested, match="SIGTERM"), data.interruptible():
        built.append(False)
    assert built == [True] and not data.building and not issubclass(StopRequested, Exception)


class Workers:
    """A stand-in for a half-started collector."""


def test_a_stop_that_breaks_the_code_it_interrupts_still_ends_the_run_as_a_stop():
    """A SIGTERM inside TorchRL's worker start made TorchRL's own clean-up raise a ``RuntimeError`` ("Converting a
    tensordict to boolean value"), which hid the stop: the run printed a traceback and hung at exit until the grace
    deadline (exit 1 after 9 s). An error inside the stretch after a stop is the stop; before one, the error."""
    data = OnPolicyDataModule(GymConfig(env_id="CartPole-v1"), CollectorOptions(num_envs=1, frames_per_batch=8))
    with pytest.raises(RuntimeError, match="broken"), data.interruptible():
        raise RuntimeError("broken")
    half_built = []

    def start_workers(stop: bool) -> None:
        workers = Workers()  # (its finaliser hung at the interpreter's exit when the error's frames kept it)
        half_built.append(weakref.ref(workers))
        if stop:
            data.request_stop("SIGTERM")
        raise RuntimeError("broken on the way out")

    with pytest.raises(StopRequested, match="SIGTERM"), data.interruptible():
        start_workers(stop=True)
    assert half_built[0]() is None and not data.building


def test_sigterm_while_a_million_envs_are_built_ends_the_run_at_once(tmp_path):
    """``num_envs`` of a million gymnasium envs takes minutes to build: a SIGTERM meanwhile (nothing trained yet,
    nothing to save) ends the run within seconds with 143 and its one line, not after the build."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.fit", "--config", str(REPO / "configs" / "cartpole_ppo.yaml"),
         "--data.init_args.collector.num_envs=1024000", "--data.init_args.collector.frames_per_batch=1024000",
         "--data.init_args.total_frames=2048000", "--trainer.enable_progress_bar=false",
         f"--trainer.default_root_dir={tmp_path}"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    try:
        seen = ""
        while "TPU available" not in seen:  # the trainer is built: the run's signal handlers come next
            line = proc.stderr.readline()
            assert line, "the run ended before building its envs"
            seen += line
        time.sleep(2.0)  # building the envs
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[1]
        took = time.monotonic() - sent
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 143 and took < 10, (proc.returncode, took, rest[-2000:])
    assert "training stopped by SIGTERM at 0 frames" in rest and "Traceback" not in rest, rest[-2000:]
