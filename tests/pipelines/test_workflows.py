"""A user's workflow never gives a wrong result with exit 0: continuing a finished run trains on to the new budget,
a budget that trains nothing is refused, options are never abbreviated, errors are one line, every output stays in
the run folder, one run at a time writes a folder, and config files and names that would run code or never end
are refused before anything is read into memory or written (issue 38)."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys

import pytest
import torch

from pipelines.checkpoints import AtomicCheckpointIO
from pipelines.fit import main as fit
from pipelines.run_config import lock_run_folder
from tests.pipelines.conftest import REPO, SMOKE

CARTPOLE = str(REPO / "configs" / "cartpole_dqn.yaml")
QUIET = ("--trainer.enable_progress_bar=false", "--trainer.callbacks=[]")  # (no bar, no evaluation: fast)


def _cartpole(root, *args: str):
    return fit(["--config", CARTPOLE, f"--trainer.logger.init_args.save_dir={root}", *QUIET,
                "--trainer.callbacks+=callbacks.ModelCheckpoint", "--trainer.callbacks.save_last=true", *args])


def _refused(capsys, *args: str) -> str:
    """Run fit with ``args``; it must stop with exit 2 and one ``error:`` line first; returns that line."""
    with pytest.raises(SystemExit) as stop:
        fit(list(args))
    assert stop.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("Seed set", "GPU ", "TPU ",
                                                                                        "HPU ", "💡"))]
    assert lines and lines[0].startswith("error: ") and len(lines) <= 2 and "Traceback" not in err, err[-2000:]
    return lines[0]


def test_continuing_a_finished_run_trains_up_to_the_new_budget(tmp_path, capsys):
    first = _cartpole(tmp_path, "--data.init_args.total_frames=1200")
    assert first.model.collected_frames == 1280
    steps = first.trainer.global_step
    last = tmp_path / "cartpole_dqn" / "version_0" / "checkpoints" / "last.ckpt"
    capsys.readouterr()
    more = _cartpole(tmp_path, "--data.init_args.total_frames=2000", f"--ckpt_path={last}")
    assert "continuing" in capsys.readouterr().err
    assert more.model.collected_frames == 2048  # three more batches of 256
    assert more.trainer.global_step == steps + 3 * 128  # utd_ratio 128 updates per batch
    assert torch.load(last, weights_only=True)["rl_state"]["collected_frames"] == 2048
    line = _refused(capsys, "--config", CARTPOLE, f"--trainer.logger.init_args.save_dir={tmp_path}",
                    "--data.init_args.total_frames=1500", f"--ckpt_path={last}")
    assert "has trained 2,048 frames already" in line and "total_frames=1,500 leaves nothing to train" in line


def test_continuing_a_finished_on_policy_run(tmp_path, capsys):
    """DVRP PPO: the final checkpoint records its epoch's last batch as done; continuing still trains on."""
    args = ["--config", SMOKE, f"--trainer.logger.init_args.save_dir={tmp_path}", "--trainer.enable_progress_bar=false",
            "--trainer.callbacks=[]", "--trainer.callbacks+=callbacks.ModelCheckpoint",
            "--trainer.callbacks.save_last=true"]
    first = fit([*args, "--data.init_args.total_frames=480"])
    last = tmp_path / "dvrp_smoke" / "version_0" / "checkpoints" / "last.ckpt"
    more = fit([*args, "--data.init_args.total_frames=960", f"--ckpt_path={last}"])
    assert (first.model.collected_frames, more.model.collected_frames) == (480, 960)
    assert more.trainer.global_step == 2 * first.trainer.global_step


def test_a_budget_below_the_first_update_is_refused_before_anything_is_written(tmp_path, capsys):
    line = _refused(capsys, "--config", CARTPOLE, f"--trainer.logger.init_args.save_dir={tmp_path}",
                    "--data.init_args.total_frames=100")
    assert "total_frames=100 gives no update" in line and "init_random_frames=1000" in line
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("args,needle", [
    (("--trainer.max_epoch=2",), "unrecognized option --trainer.max_epoch (did you mean --trainer.max_epochs?)"),
    (("--trainer.max_epochs=2",),
     "trainer.max_epochs=2 is not allowed: the run's budget is data.init_args.total_frames"),
    (("--ckpt=x",), "unrecognized option --ckpt (did you mean --ckpt_path?)"),
    (("--model.init_args.network.init_args.hiden=3",),
     "model.init_args.network.init_args.hiden: no such key of modules.q_networks.QNetwork (did you mean hidden_dims?)"),
    (("--model.init_args.lr=abc",), "model.init_args.lr: Expected a <class 'float'>"),
    (("--seed_everything=-1",), "seed_everything=-1 is not allowed: an integer in [0, 4294967295]"),
    (("--num_threads=0",), "num_threads: Not of type PositiveInt"),
    (("--data.init_args.env.init_args.env_id=CartPol-v1",), "env.env_id='CartPol-v1': Environment `CartPol` doesn't"),
    (("--trainer.callbacks+=callbacks.ModelCheckpoint", "--trainer.callbacks.every_n_train_steps=-1"),
     "Invalid value for every_n_train_steps=-1. Must be >= 0"),  # (Lightning's MisconfigurationException)
])
def test_options_are_never_abbreviated_and_errors_are_one_line(tmp_path, capsys, args, needle):
    line = _refused(capsys, "--config", CARTPOLE, f"--trainer.logger.init_args.save_dir={tmp_path}", *args)
    assert needle in line, line
    assert os.listdir(tmp_path) == []


def test_fast_dev_run_writes_nothing_and_home_relative_folders_write_under_the_run_folder(tmp_path, monkeypatch,
                                                                                         capsys):
    monkeypatch.chdir(tmp_path)
    cli = _cartpole("runs", "--trainer.fast_dev_run=true", "--trainer.callbacks+=callbacks.PolicyEvaluation",
                    "--trainer.callbacks.save_best=true")
    assert cli.trainer.global_step > 0
    assert os.listdir(tmp_path) == []  # Lightning's own save_last wrote ./checkpoints/last.ckpt, the run best.ckpt
    assert "run folder: none (fast_dev_run writes nothing)" in capsys.readouterr().out
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cli = _cartpole("~/x", "--data.init_args.total_frames=1100")
    run = tmp_path / "home" / "x" / "cartpole_dqn" / "version_0"
    assert (run / "config.yaml").is_file() and (run / "checkpoints" / "last.ckpt").is_file()
    assert os.listdir(tmp_path) == ["home"]  # no folder named "~"


def test_a_run_folder_is_written_by_one_run_at_a_time(tmp_path, capsys):
    _cartpole(tmp_path, "--data.init_args.total_frames=1100")
    run = tmp_path / "cartpole_dqn" / "version_0"
    before = sorted(os.listdir(run / "checkpoints"))
    fd = lock_run_folder(str(run))  # another run holds the folder
    assert fd is not None and lock_run_folder(str(run)) is None
    try:
        with pytest.raises(SystemExit) as stop:
            _cartpole(tmp_path, "--data.init_args.total_frames=1400",
                      f"--ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    finally:
        os.close(fd)
    assert stop.value.code == 2 and "is in use by another run" in capsys.readouterr().err
    assert sorted(os.listdir(run / "checkpoints")) == before


def test_a_save_removes_the_temporary_file_of_a_killed_save_and_names_a_full_disk(tmp_path, monkeypatch):
    stale = tmp_path / "last.ckpt.k1ll3d.tmp"
    stale.write_bytes(b"half a checkpoint")
    (tmp_path / "other.ckpt.x.tmp").write_bytes(b"another file's")
    io = AtomicCheckpointIO()
    io.save_checkpoint({"a": torch.ones(2)}, tmp_path / "last.ckpt")
    assert sorted(os.listdir(tmp_path)) == ["last.ckpt", "other.ckpt.x.tmp"]

    def full(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 24000 vs 23952")

    monkeypatch.setattr(torch, "save", full)
    monkeypatch.setattr("pipelines.checkpoints._disk_full", lambda folder: True)
    with pytest.raises(OSError) as err:
        io.save_checkpoint({"a": torch.ones(2)}, tmp_path / "last.ckpt")
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(tmp_path / "last.ckpt")
    assert sorted(os.listdir(tmp_path)) == ["last.ckpt", "other.ckpt.x.tmp"]


def _bomb(path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 12)]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("kind,needle", [
    ("bomb", "expands to more than 100,000 YAML nodes"), ("binary", "not a text file"),
    ("fifo", "not a regular file"), ("large", "a config is at most 1,048,576"), ("recursive", "expands to more than"),
    ("deep", "nested deeper than 64 levels"), ("deep block", "nested deeper than 64 levels"),
    ("duplicate", "key 'lr' is given twice in one mapping (lines 3 and 4)"),
])
def test_config_files_that_never_end_are_refused_before_they_are_read(tmp_path, capsys, kind, needle):
    path = tmp_path / "c.yaml"
    if kind == "bomb":
        _bomb(path)
    elif kind == "binary":
        path.write_bytes(bytes(range(256)) * 8)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "large":
        path.write_text("model: [" + "1, " * 400_000 + "1]\n")
    elif kind == "deep":  # 50,000 levels: YAML's composer recursed into a RecursionError
        path.write_text("model: " + "[" * 50_000 + "]" * 50_000 + "\n")
    elif kind == "deep block":
        path.write_text("".join(f"{' ' * i}k{i}:\n" for i in range(100)) + " " * 100 + "v: 1\n")
    elif kind == "duplicate":  # a YAML loader keeps the last one silently
        path.write_text("model:\n  init_args:\n    lr: 0.1\n    lr: 0.2\n")
    else:
        path.write_text("a: &a [*a]\n")
    line = _refused(capsys, "--config", CARTPOLE, "--config", str(path))
    assert needle in line and str(path) in line, line


def test_null_on_the_command_line_for_a_nullable_key_of_a_nested_class(tmp_path):
    """``--data.init_args.env.init_args.capacity=null`` (and ``--key null``) sets the key to null, as YAML does (it was
    refused with "Expected a float": jsonargparse hands nested values on as text); a key that is not nullable is
    still refused in one line."""
    from pipelines.fit_settings import fit_settings

    smoke = str(REPO / "configs" / "dvrp_smoke.yaml")
    env = fit_settings(["--config", smoke, "--data.init_args.env.init_args.capacity=null",
                        "--data.init_args.env.init_args.refusal_mask_threshold=0.3",
                        "--data.init_args.env.init_args.refusal_mask_threshold", "null"])["data"]["init_args"]["env"]
    assert env["init_args"]["capacity"] is None and env["init_args"]["refusal_mask_threshold"] is None
    assert env["init_args"]["num_customers"] == 30  # the rest of the section kept
    with pytest.raises(ValueError, match=r"env.init_args.num_vehicles: null is not allowed \(expected int"):
        fit_settings(["--config", smoke, "--data.init_args.env.init_args.num_vehicles=null"])


def test_a_config_names_only_what_a_run_may_call(tmp_path, capsys, monkeypatch):
    """A gymnasium id's module part and a callback's callables are judged by what would run: a module in the
    working directory never runs, nor does torch's file loading reached through another name."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evilmod.py").write_text(f"open({str(tmp_path / 'RAN')!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    line = _refused(capsys, "--config", CARTPOLE, "--data.init_args.env.init_args.env_id=evilmod:CartPole-v1")
    assert "would import module 'evilmod', which is not allowed" in line
    for target in ("torch.jit._serialization.load", "torch.utils.collect_env.run",
                   "lightning.pytorch.callbacks.model_checkpoint.torch.load"):
        (tmp_path / "cb.yaml").write_text("trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks."
                                          f"LambdaCallback\n      init_args: {{on_fit_start: {target}}}\n")
        line = _refused(capsys, "--config", CARTPOLE, "--config", str(tmp_path / "cb.yaml"), "--print_config")
        assert "is not allowed, denied by the" in line, line
    assert sorted(os.listdir(tmp_path)) == ["cb.yaml", "evilmod.py"]  # nothing ran, nothing written


def test_a_shadowed_package_stops_every_entry_point_before_it_runs(tmp_path):
    (tmp_path / "callbacks.py").write_text(f"open({str(tmp_path / 'RAN')!r}, 'w').close()\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for entry in ("fit", "evaluate", "export", "seeds", "tune", "import_roms"):
        run = subprocess.run([sys.executable, "-m", f"pipelines.{entry}", "--help"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120, env=env)
        assert run.returncode == 2, (entry, run.stderr[-2000:])
        assert run.stderr.startswith(f"error: {tmp_path / 'callbacks.py'} shadows this project's package 'callbacks'")
    assert sorted(os.listdir(tmp_path)) == ["callbacks.py"]


def test_write_errors_name_the_file_or_the_shared_memory():
    from pipelines.fit import write_error

    assert write_error(OSError(errno.ENOSPC, "No space left on device", "/r/last.ckpt")) == \
        "cannot write /r/last.ckpt: No space left on device"
    assert write_error(OSError(errno.EROFS, "Read-only file system", "/r")) == "cannot write /r: Read-only file system"
    for err in (OSError(errno.ENOSPC, "No space left on device"),  # multiprocessing's semaphore in /dev/shm
                RuntimeError("unable to allocate shared memory(shm) for file </torch_1_2>: Resource unavailable")):
        line = write_error(err)
        assert line.startswith("no shared memory left in /dev/shm") and "data.init_args.collector.workers: 0" in line
    assert write_error(RuntimeError("index 2 is out of bounds")) is None
    assert write_error(OSError(errno.ENOENT, "No such file", "/x")) is None


def test_a_full_disk_stops_the_run_with_one_line(tmp_path, capsys):
    """A 200 kB file system (a tmpfs mounted for the test; skipped where mounting is not allowed) fills up at the
    first checkpoints: one line naming the file, exit 1 (torch's own error said "unexpected pos ...")."""
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(tiny)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        with pytest.raises(SystemExit) as stop:
            fit(["--config", CARTPOLE, f"--trainer.logger.init_args.save_dir={tiny}",
                 "--trainer.enable_progress_bar=false",
                 "--data.init_args.total_frames=1500"])
    finally:
        subprocess.run(["umount", str(tiny)], capture_output=True)
    err = capsys.readouterr().err
    assert stop.value.code == 1 and "Traceback" not in err, err[-2000:]
    assert re.search(r"error: cannot write \S+\.ckpt: No space left on device \(the run stopped", err), err[-2000:]
