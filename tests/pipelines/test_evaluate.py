"""pipelines.evaluate: the trained policy and every baseline on the same seeded episodes."""

from __future__ import annotations

import json

import pytest

from envs.dvrp.baselines import BASELINES
from pipelines.evaluate import main
from tests.pipelines.conftest import SMOKE, run_module
from tests.route_check import check_exported_plan

FIELDS = {"mean_return", "return_se", "mean_plan_cost_km", "mean_served", "mean_failure_rate", "mean_refused"}


def _evaluate(smoke_run, tmp_path, capsys, *extra: str, ckpt: str | None = None) -> tuple[dict, dict, str]:
    routes = tmp_path / "routes.json"
    main(["--config", SMOKE, "--ckpt_path", ckpt or smoke_run["last"], "--episodes", "12", "--num_envs", "8",
          "--routes_out", str(routes), *extra])
    stdout = capsys.readouterr().out
    table = json.loads(stdout.strip().splitlines()[-1])  # the last stdout line is the JSON summary
    return table, json.loads(routes.read_text()), stdout


def test_evaluate_table_json_and_feasible_routes(smoke_run, tmp_path, capsys):
    table, routes, stdout = _evaluate(smoke_run, tmp_path, capsys, "--pyvrp_episodes", "2", "--pyvrp_seconds", "0.2")
    assert set(table) == {"ppo", *BASELINES}
    assert all(set(row) == FIELDS for row in table.values())
    assert "gap to PyVRP" in stdout
    assert table["clairvoyant"]["mean_failure_rate"] < table["random"]["mean_failure_rate"]
    assert len(routes["episodes"]) == 12
    served = 0.0
    for episode in routes["episodes"]:
        check_exported_plan(episode)
        served += len(episode["customers"])
    assert served / 12 == pytest.approx(table["ppo"]["mean_served"])


def test_same_seed_gives_same_episodes(smoke_run, tmp_path, capsys):
    first, _, _ = _evaluate(smoke_run, tmp_path, capsys, "--policies", "fallback")
    second, _, _ = _evaluate(smoke_run, tmp_path, capsys, "--policies", "fallback")
    other, _, _ = _evaluate(smoke_run, tmp_path, capsys, "--policies", "fallback", "--seed", "7")
    assert first == second
    assert other["fallback"] != first["fallback"]


def test_evaluate_on_solomon_files(smoke_run, tmp_path, capsys, solomon_dir):
    table, routes, stdout = _evaluate(smoke_run, tmp_path, capsys, "--instances", str(solomon_dir / "solomon_txt" / "R2*.txt"),
                                      "--policies", "preferred", "fallback")
    assert "instances" in stdout
    for episode in routes["episodes"]:
        assert episode["capacity"] == 1000.0 and episode["depot"]["due"] == 1000.0  # R2: from the files
        check_exported_plan(episode)


def test_missing_checkpoint_is_reported(tmp_path):
    proc = run_module("pipelines.evaluate", "--config", SMOKE, "--ckpt_path", str(tmp_path / "none.ckpt"))
    assert proc.returncode != 0 and "none.ckpt" in proc.stderr


def test_learned_env_model_is_restored(smoke_run):
    """The checkpoint's flexibility-model weights are loaded into the evaluation envs' (shared) model."""
    import torch

    from pipelines.evaluate import load_run

    _, data = load_run(SMOKE, smoke_run["last"], [])
    saved = torch.load(smoke_run["last"], weights_only=False)["OnPolicyDataModule"]["embedding_model"]
    restored = data.embedding_model().state_dict()
    assert all(torch.equal(saved[k], restored[k]) for k in saved)


def test_compare_run_plays_the_same_episodes(smoke_run, tmp_path, capsys):
    """A second run given by --compare_config/--compare_ckpt (here the same run 12 optimiser steps earlier) gets
    its own row, which is what that checkpoint scores when evaluated alone on the same seed: the same episodes."""
    early = str(smoke_run["dir"] / "checkpoints" / "epoch=0-step=4.ckpt")
    table, _, _ = _evaluate(smoke_run, tmp_path, capsys, "--policies", "fallback", "--compare_config", SMOKE,
                            "--compare_ckpt", early)
    alone, _, _ = _evaluate(smoke_run, tmp_path, capsys, "--policies", "fallback", ckpt=early)
    assert set(table) == {"ppo", "ppo[dvrp_smoke]", "fallback"}
    assert table["ppo[dvrp_smoke]"] == alone["ppo"]
    assert table["ppo[dvrp_smoke]"] != table["ppo"], "the two checkpoints play differently"
    assert table["fallback"] == alone["fallback"]
