"""pipelines.seeds: several seeds of one config, their summary and learning curves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import matplotlib.image
import pytest

import pipelines.seed_fits as seed_fits
import pipelines.seeds as seeds
from pipelines.fit_settings import fit_settings
from pipelines.scalars import read_scalars
from pipelines.settings import describe_diff, settings_diff
from tests.pipelines.conftest import REPO, run_module

CARTPOLE = str(REPO / "configs" / "cartpole_dqn.yaml")
TINY = ["--data.init_args.total_frames=1024", "--data.init_args.replay_buffer.init_random_frames=256",
        "--data.init_args.replay_buffer.utd_ratio=4",
        "--model.init_args.network.init_args.hidden_dims=[32]"]


def test_two_seeds_run_and_are_summarised(tmp_path):
    out = tmp_path / "study"
    proc = run_module("pipelines.seeds", "--config", CARTPOLE, "--seeds", "1", "2", "--parallel", "2",
                      "--out", str(out), *TINY, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["metric"] == "eval/episode_return"
    finals = {}
    for seed in (1, 2):
        steps, values = read_scalars(str(out / f"seed_{seed}"))["eval/episode_return"]
        finals[seed] = values[-1]
        assert summary["seeds"][str(seed)]["final"] == pytest.approx(values[-1])
        assert summary["seeds"][str(seed)]["frames"] == 1024
        run = out / f"seed_{seed}" / "version_0"  # the run straight in the seed's folder, not nested again
        assert (run / "checkpoints" / "last.ckpt").is_file() and seeds.last_checkpoint(str(run.parent)) == str(
            run / "checkpoints" / "last.ckpt")
        config = (run / "config.yaml").read_text()
        assert f"seed_everything: {seed}" in config and f"seed: {seed}" in config
    assert summary["mean"] == pytest.approx((finals[1] + finals[2]) / 2)
    image = matplotlib.image.imread(out / "curves.png")
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert json.loads((out / "summary.json").read_text())["mean"] == summary["mean"]
    # a finished seed is read, not run again; a new one runs
    again = run_module("pipelines.seeds", "--config", CARTPOLE, "--seeds", "1", "3", "--out", str(out), *TINY,
                       timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "seed 1: running" not in again.stderr and "seed 3: running" in again.stderr
    assert "seed 1: finished under the same settings, read back" in again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1])["seeds"]["1"] == summary["seeds"]["1"]
    recorded = json.loads((out / "settings.json").read_text())
    assert recorded == json.loads((out / "seed_3" / "settings.json").read_text())
    assert recorded["data"]["init_args"]["total_frames"] == 1024 and "seed_everything" not in recorded
    # other settings: refused before anything starts, naming the folder and the key with both values
    written = (out / "summary.json").read_text()
    for other, seeds_asked, message in (
            (["--model.init_args.lr=0.001"], ["1", "4"],
             f"error: {out / 'seed_1'} was run with other settings: model.init_args.lr=0.0023 there, 0.001 now; "
             f"use another --out"),
            (["--data.init_args.total_frames=768"], ["4"],  # a new seed beside seeds run under other settings
             "data.init_args.total_frames=1024 there, 768 now")):
        refused = run_module("pipelines.seeds", "--config", CARTPOLE, "--seeds", *seeds_asked, "--out", str(out),
                             *TINY, *other, timeout=300)
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert refused.stderr.strip().splitlines() == [refused.stderr.strip()] and message in refused.stderr, \
            refused.stderr[-3000:]
        assert not (out / "seed_4").exists() and (out / "summary.json").read_text() == written


def test_an_unknown_option_is_named():
    proc = run_module("pipelines.seeds", "--config", CARTPOLE, "--seeds", "1", "--paralel", "2", timeout=60)
    assert proc.returncode == 2 and "unrecognized argument --paralel" in proc.stderr


def test_settings_are_resolved_by_the_fits_parser():
    """Two spellings of one setting are the same settings; a changed value is named with both values; a key the fit
    does not know is refused in one line."""
    base = ["--config", CARTPOLE]
    settings = fit_settings(base, drop=seeds.PER_SEED_KEYS)
    assert fit_settings([*base, "--model.lr=2.3e-3", "--seed_everything=7"], drop=seeds.PER_SEED_KEYS) == settings
    other = fit_settings([*base, "--model.init_args.lr=0.001"], drop=seeds.PER_SEED_KEYS)
    assert describe_diff(settings_diff(settings, other)) == "model.init_args.lr=0.0023 there, 0.001 now"
    with pytest.raises(ValueError, match=r"model.init_args.lrr: no such key .*did you mean lr"):
        fit_settings([*base, "--model.init_args.lrr=0.001"])
    # a study recorded before an option was added (unset: null) is still under the same settings; set, it is not
    assert settings["weights_from"] is None
    assert settings_diff({k: v for k, v in settings.items() if k != "weights_from"}, settings) == []
    assert settings_diff(settings, {**settings, "weights_from": "a.ckpt"}) == [("weights_from", None, "a.ckpt")]


def _processes_naming(text: str) -> list[int]:
    """The live processes (not this one) whose command line holds ``text``."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read().decode(errors="replace")
        except (OSError, ValueError):
            continue
        if entry.isdigit() and int(entry) != os.getpid() and text in command:
            pids.append(int(entry))
    return pids


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_stops_the_fits_and_leaves_no_orphan(tmp_path):
    """SIGTERM to ``--parallel 2``: both fits get it and stop (they say so in their logs), the command waits for
    them and exits 143, and no fit outlives it."""
    out = tmp_path / "study"
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.seeds", "--config", CARTPOLE, "--seeds", "1", "2",
                             "--parallel", "2", "--out", str(out), *TINY, "--data.init_args.total_frames=10000000"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 300
        while not all(any((out / f"seed_{seed}").rglob("config.yaml")) for seed in (1, 2)):  # both fits training
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=60)
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=240)
    finally:
        proc.kill()
        proc.wait()
        orphans = _processes_naming(str(out))
        for pid in orphans:  # (only the fits this test started name its folder)
            os.kill(pid, signal.SIGKILL)
    assert not orphans, f"fits outlived the command: {orphans}"
    assert proc.returncode == 143, stderr[-3000:]
    assert "stopped by SIGTERM" in stderr.strip().splitlines()[-1] and "Traceback" not in stderr, stderr[-3000:]
    for seed in (1, 2):
        assert "training stopped by SIGTERM" in (out / f"seed_{seed}" / "fit.log").read_text()
        assert not (out / f"seed_{seed}" / "finished").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; the parent-death signal is Linux's")
def test_sigkill_of_the_command_takes_its_fits_with_it(tmp_path):
    """SIGKILL to ``--parallel 2`` (no handler can run): both fits get SIGTERM from the kernel as their parent dies,
    stop within seconds and say so in their logs; a rerun then names their folders unfinished (they were)."""
    out = tmp_path / "study"
    command = ["--config", CARTPOLE, "--seeds", "1", "2", "--parallel", "2", "--out", str(out), *TINY]
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.seeds", *command,
                             "--data.init_args.total_frames=10000000"], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 300
        while not all(any((out / f"seed_{seed}").rglob("config.yaml")) for seed in (1, 2)):  # both fits training
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 15
        while _processes_naming(str(out)) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        orphans = _processes_naming(str(out))
        for pid in orphans:
            os.kill(pid, signal.SIGKILL)
    assert not orphans, f"fits outlived the killed command: {orphans}"
    for seed in (1, 2):
        assert "training stopped by SIGTERM" in (out / f"seed_{seed}" / "fit.log").read_text()
    rerun = run_module("pipelines.seeds", *command, "--data.init_args.total_frames=10000000", timeout=300)
    assert rerun.returncode == 2 and "holds an unfinished run of seed 1" in rerun.stderr, rerun.stderr[-2000:]


def test_a_run_that_reached_its_budget_is_finished_without_the_mark(tmp_path):
    """A seed whose fit trained its ``total_frames`` but whose command died before marking it (a killed command,
    an older orphan) is read back, not refused as unfinished."""
    out = tmp_path / "study"
    command = ["--config", CARTPOLE, "--seeds", "1", "--out", str(out), *TINY]
    first = run_module("pipelines.seeds", *command, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    (out / "seed_1" / "finished").unlink()
    again = run_module("pipelines.seeds", *command, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "seed 1: finished under the same settings, read back" in again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1]) == json.loads(first.stdout.strip().splitlines()[-1])
    assert (out / "seed_1" / "finished").is_file()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_waits_for_the_fits_and_keeps_the_finished_ones(tmp_path, monkeypatch, signum):
    """Stand-in fits that ignore the signal: the one that then ends with status 0 is marked finished, the one that
    does not end is killed :data:`pipelines.seed_fits.STOP_WAIT_S` seconds after the signal; the command exits with
    128 + the signal's number."""
    monkeypatch.setattr(seed_fits, "STOP_WAIT_S", 4.0)
    sleeps = {1: 1.5, 2: 600.0}

    def stand_in(configs, seed, folder, overrides, settings):
        code = (f"import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                f"signal.signal(signal.SIGINT, signal.SIG_IGN); "
                f"open(os.path.join({folder!r}, 'ready'), 'w').write(str(os.getpid())); time.sleep({sleeps[seed]})")
        return [sys.executable, "-c", code]

    monkeypatch.setattr(seed_fits, "fit_command", stand_in)
    out = tmp_path / "study"

    def signal_when_ready() -> None:
        deadline = time.monotonic() + 60
        while not all((out / f"seed_{seed}" / "ready").is_file() for seed in sleeps) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)  # (the pid is written)
        os.kill(os.getpid(), signum)

    def unhandled(signum, frame):  # without the command's own handler, SIGTERM must not end pytest
        raise AssertionError(f"{signal.Signals(signum).name} was not handled by pipelines.seeds")

    previous = signal.signal(signal.SIGTERM, unhandled)
    sender = threading.Thread(target=signal_when_ready, daemon=True)
    try:
        sender.start()
        started = time.monotonic()
        with pytest.raises(SystemExit) as stop:
            seeds.run_seeds([CARTPOLE], [1, 2], str(out), 2, [], {"stand-in": True})
        took = time.monotonic() - started
    finally:
        signal.signal(signal.SIGTERM, previous)
        sender.join(timeout=60)
    assert stop.value.code == 128 + signum
    assert (out / "seed_1" / "finished").is_file() and not (out / "seed_2" / "finished").exists()
    assert took < 60, took  # the endless one was killed, not waited for
    for seed in sleeps:
        pid = int((out / f"seed_{seed}" / "ready").read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_an_override_of_where_runs_are_written_stops_before_any_fit(tmp_path, capsys):
    """Each seed's run is written in the study's folder: a logger save_dir (or default_root_dir) on the command line
    would send the runs elsewhere and leave the seed folders empty, so it stops the command with one line."""
    with pytest.raises(SystemExit) as stop:
        seeds.main(["--config", CARTPOLE, "--seeds", "0", "1", "--out", str(tmp_path / "study"),
              f"--trainer.logger.init_args.save_dir={tmp_path / 'elsewhere'}"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --trainer.logger.init_args.save_dir: each seed's run is written under --out"), err
    assert not (tmp_path / "study").exists() and not (tmp_path / "elsewhere").exists()


def test_curves_of_one_evaluation_per_seed_show_a_point_per_seed(tmp_path):
    """A study whose runs evaluated once: each seed's curve is one point, which a line alone never drew (the picture
    held axes only)."""
    import numpy as np

    from pipelines.seed_summary import plot

    summary = {"metric": "eval/episode_return",
               "curves": {0: (np.array([1024]), np.array([50.0])), 1: (np.array([1024]), np.array([80.0]))}}
    plot(summary, str(tmp_path / "curves.png"), "one evaluation")
    image = matplotlib.image.imread(tmp_path / "curves.png")[..., :3]
    seed_0 = np.array([0x1F, 0x77, 0xB4]) / 255  # matplotlib's first colour, seed 0's
    near = np.abs(image - seed_0).max(-1) < 0.15
    assert near.sum() > 5, "seed 0's point is not drawn"


def test_a_routing_oracles_seeds_summarise_their_plan_cost_whose_best_is_the_least(tmp_path):
    """REINFORCE routing runs log no return: the summary takes their greedy plans' cost (``eval/cost_km``), and
    the best of a cost is its least (the study ended on an error naming the return it lacked)."""
    from torch.utils.tensorboard import SummaryWriter

    from pipelines.seed_summary import summarise

    folders = {}
    for seed, costs in ((0, [900.0, 700.0, 750.0]), (1, [880.0, 720.0, 690.0])):
        folders[seed] = str(tmp_path / f"seed_{seed}")
        with SummaryWriter(folders[seed]) as writer:
            for step, cost in enumerate(costs):
                writer.add_scalar("eval/cost_km", cost, (step + 1) * 1000)
                writer.add_scalar("train/loss", 1.0, (step + 1) * 1000)
    summary = summarise(folders, None)
    assert summary["metric"] == "eval/cost_km"
    assert summary["seeds"][0] == {"final": 750.0, "best": 700.0, "frames": 3000}
    assert summary["seeds"][1]["best"] == 690.0 and summary["mean"] == pytest.approx(720.0)
    assert summarise(folders, "train/loss")["seeds"][0]["best"] == 1.0
    with pytest.raises(ValueError, match="logged no 'eval/episode_return'; it has: eval/cost_km, train/loss"):
        summarise({0: folders[0], 2: str(tmp_path / "empty")}, None)
