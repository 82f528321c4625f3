"""pipelines.tune: an Optuna study over a config, pruned on its evaluations, stored in SQLite and resumable, whose
best config pipelines.fit runs."""

from __future__ import annotations

import json

import optuna
import yaml

from tests.pipelines.conftest import REPO, run_module

CARTPOLE = str(REPO / "configs" / "cartpole_dqn.yaml")
TINY = ["--data.init_args.total_frames=2048", "--data.init_args.init_random_frames=256",
        "--trainer.callbacks[2].init_args.every_n_frames=1024", "--trainer.callbacks[2].init_args.num_envs=4"]


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
    printed = run_module("pipelines.fit", "--config", str(out / "best.yaml"), "--print_config", timeout=120)
    assert printed.returncode == 0, printed.stderr[-2000:]
    assert yaml.safe_load(printed.stdout)["model"]["init_args"]["lr"] == 3.0e-3


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
    for settings, message in (({"parameters": {"model.init_args.lr": {"type": "uniform", "low": 0, "high": 1}}},
                               "parameters.model.init_args.lr.type='uniform'"),
                              ({"pruner": {"type": "median", "warmup": 3}}, "pruner median {'warmup': 3}")):
        proc = run_module("pipelines.tune", "--config", CARTPOLE, "--search", _search(tmp_path, **settings),
                          "--trials", "1", "--out", str(tmp_path / "s"), timeout=120)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
        assert not (tmp_path / "s").exists(), "nothing written before the search file is checked"
