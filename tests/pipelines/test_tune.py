"""pipelines.tune: an Optuna study over a config, pruned on its evaluations, stored in SQLite and resumable, whose
best config pipelines.fit runs."""

from __future__ import annotations

import json

import optuna
import pytest
import yaml

from tests.pipelines.conftest import REPO, run_module

CARTPOLE = str(REPO / "configs" / "cartpole_dqn.yaml")
TINY = ["--data.init_args.total_frames=2048", "--data.init_args.replay_buffer.init_random_frames=256",
        "--trainer.callbacks[3].init_args.every_n_frames=1024", "--trainer.callbacks[3].init_args.num_envs=4"]


def _search(tmp_path, **settings) -> str:
    search = {"metric": "eval/episode_return", "direction": "maximize", "sampler": "grid", "pruner": {"type": "none"},
              "parameters": {"model.init_args.lr": {"type": "categorical", "choices": [1.0e-7, 3.0e-3]}}, **settings}
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(search))
    return str(path)


def test_a_tiny_study_finds_the_better_config_and_resumes(tmp_path):
    out, search = tmp_path / "study", _search(tmp_path)
    first = run_module("pipelines.tune", "--config", CARTPOLE, "--search", search, "--trials", "1", "--out", str(out),
                       *TINY, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert len(json.loads(first.stdout.strip().splitlines()[-1])["trials"]) == 1
    written = (out / "trial_0" / "trial.yaml").stat().st_mtime_ns
    second = run_module("pipelines.tune", "--config", CARTPOLE, "--search", search, "--trials", "2", "--out", str(out),
                        *TINY, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "trial 0:" not in second.stderr and "trial 1:" in second.stderr  # continued, not restarted
    assert (out / "trial_0" / "trial.yaml").stat().st_mtime_ns == written
    summary = json.loads(second.stdout.strip().splitlines()[-1])
    values = {t["params"]["model.init_args.lr"]: t["value"] for t in summary["trials"]}
    assert set(values) == {1.0e-7, 3.0e-3}
    assert values[3.0e-3] > values[1.0e-7], values  # learning beats a learning rate that cannot learn
    assert summary["best_params"] == {"model.init_args.lr": 3.0e-3} and summary["best_value"] == values[3.0e-3]
    study = optuna.load_study(study_name="study", storage=f"sqlite:///{out / 'study.db'}")
    assert len(study.trials) == 2
    best = yaml.safe_load((out / "best.yaml").read_text())
    assert best["model"]["init_args"]["lr"] == 3.0e-3 and best["data"]["init_args"]["total_frames"] == 2048
    number = next(t["number"] for t in summary["trials"] if t["params"]["model.init_args.lr"] == 3.0e-3)
    comment, body = (out / "best.yaml").read_text().split("\n", 1)
    assert comment.startswith("#") and body == (out / f"trial_{number}" / "trial.yaml").read_text()  # what it ran
    printed = run_module("pipelines.fit", "--config", str(out / "best.yaml"), "--print_config", timeout=120)
    assert printed.returncode == 0, printed.stderr[-2000:]
    assert yaml.safe_load(printed.stdout)["model"]["init_args"]["lr"] == 3.0e-3
    assert sorted(p.name for p in (out / f"trial_{number}").iterdir() if p.is_dir()) == ["version_0"]  # not nested
    assert (out / f"trial_{number}" / "version_0" / "checkpoints" / "last.ckpt").is_file()
    # continuing the study under other overrides and another search space: refused before anything is written
    best_written = (out / "best.yaml").stat().st_mtime_ns
    other = _search(tmp_path, parameters={"model.init_args.lr": {"type": "categorical", "choices": [1.0e-7, 1.0e-3]}})
    refused = run_module("pipelines.tune", "--config", CARTPOLE, "--search", other, "--trials", "3", "--out", str(out),
                         *TINY, "--data.init_args.total_frames=3072", timeout=300)
    assert refused.returncode == 2, refused.stderr[-3000:]
    line = refused.stderr.strip()
    assert line.splitlines() == [line] and line.startswith(f"error: {out / 'study.db'} was made under other settings")
    assert "data.init_args.total_frames=2048 there, 3072 now" in line, line
    assert "search.parameters.model.init_args.lr.choices[1]=0.003 there, 0.001 now" in line, line
    assert not (out / "trial_2").exists() and (out / "best.yaml").stat().st_mtime_ns == best_written
    assert len(optuna.load_study(study_name="study", storage=f"sqlite:///{out / 'study.db'}").trials) == 2


@pytest.mark.slow  # (15 s; `make test-slow`)
def test_a_pruned_trial_stops_at_its_first_evaluation(tmp_path):
    """A pruner that stops every trial: each ends at its first evaluation; a continued random search draws new
    values (its sampler is not restarted from the first run's seed)."""
    out = tmp_path / "study"
    search = _search(tmp_path, sampler="random", pruner={"type": "threshold", "lower": 1.0e9},
                     parameters={"model.init_args.lr": {"type": "float", "low": 1.0e-4, "high": 1.0e-2, "log": True}})
    for trials in (1, 2):
        proc = run_module("pipelines.tune", "--config", CARTPOLE, "--search", search, "--trials", str(trials),
                          "--out", str(out), *TINY, timeout=600)
        assert proc.returncode == 1 and "no trial" in proc.stderr  # every trial was pruned
    first, second = optuna.load_study(study_name="study", storage=f"sqlite:///{out / 'study.db'}").trials
    assert first.state == second.state == optuna.trial.TrialState.PRUNED
    assert list(first.intermediate_values) == [1024]  # reported once, then stopped (2,048 frames were planned)
    assert first.params["model.init_args.lr"] != second.params["model.init_args.lr"]


def test_a_search_file_error_names_the_key(tmp_path):
    """The search file's own errors, and keys or values the fit's config refuses (checked with the fit's parser for
    every value of every parameter): one line naming the key, before anything is written."""
    for settings, message in (({"parameters": {"model.init_args.lr": {"type": "uniform", "low": 0, "high": 1}}},
                               "parameters.model.init_args.lr.type='uniform'"),
                              ({"pruner": {"type": "median", "warmup": 3}}, "pruner median {'warmup': 3}"),
                              ({"sampler": "random",
                                "parameters": {"model.init_args.lrr": {"type": "float", "low": 1e-4, "high": 1e-2}}},
                               "model.init_args.lrr: no such key of modules.dqn.DQNModule (did you mean lr?)"),
                              ({"parameters": {"model.init_args.lr": {"type": "categorical", "choices": [1e-3]},
                                               "model.init_args.gamma": {"type": "categorical",
                                                                         "choices": [0.99, 0.9, "high"]}}},
                               "model.init_args.gamma: Expected a <class 'float'>. Got value: high")):
        proc = run_module("pipelines.tune", "--config", CARTPOLE, "--search", _search(tmp_path, **settings),
                          "--trials", "1", "--out", str(tmp_path / "s"), timeout=120)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
        assert not (tmp_path / "s").exists(), "nothing written before the search file is checked"


def test_a_failing_trial_is_marked_failed_and_ends_the_command(tmp_path):
    """A value the fit refuses only once it builds the run (no update within the budget): the trial is FAIL, not
    RUNNING, and the command ends with one line (after the fit's own), no traceback."""
    out = tmp_path / "study"
    search = _search(tmp_path, parameters={"data.init_args.replay_buffer.init_random_frames": {"type": "categorical",
                                                                                 "choices": [100000]}})
    proc = run_module("pipelines.tune", "--config", CARTPOLE, "--search", search, "--trials", "1", "--out", str(out),
                      *TINY, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: trial 0 ({out / 'trial_0'}) failed") and "marked FAIL" in last, last
    assert "Traceback" not in proc.stderr and "gives no update" in proc.stderr, proc.stderr[-3000:]
    trial, = optuna.load_study(study_name="study", storage=f"sqlite:///{out / 'study.db'}").trials
    assert trial.state == optuna.trial.TrialState.FAIL


def test_a_corrupt_study_db_is_one_line(tmp_path):
    out = tmp_path / "study"
    out.mkdir()
    (out / "study.db").write_bytes(b"not a database, " * 200)
    proc = run_module("pipelines.tune", "--config", CARTPOLE, "--search", _search(tmp_path), "--trials", "1",
                      "--out", str(out), *TINY, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [f"error: {out / 'study.db'} is not a readable Optuna study (file is "
                                                f"not a database): move it away or use another --out"], proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["study.db"]
