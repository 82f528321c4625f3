"""pipelines.evaluate: the trained policy and every baseline on the same seeded episodes."""

from __future__ import annotations

import json

import pytest

from envs.dvrp.baselines import BASELINES
from pipelines.evaluate import main
from tests.conftest import periodic_checkpoints
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
    assert served / 12 == pytest.approx(table["ppo"]["mean_served"], rel=1e-5)  # JSON: 6 significant digits


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
    saved = torch.load(smoke_run["last"], weights_only=True)["OnPolicyDataModule"]["embedding_model"]
    restored = data.embedding_model().state_dict()
    assert all(torch.equal(saved[k], restored[k]) for k in saved)


def test_compare_run_plays_the_same_episodes(smoke_run, tmp_path, capsys):
    """A second run given by --compare_config/--compare_ckpt (here the same run 12 optimiser steps earlier) gets
    its own row, which is what that checkpoint scores when evaluated alone on the same seed: the same episodes."""
    early = str(periodic_checkpoints(smoke_run["dir"] / "checkpoints")[4])
    table, _, _ = _evaluate(smoke_run, tmp_path, capsys, "--policies", "fallback", "--compare_config", SMOKE,
                            "--compare_ckpt", early)
    alone, _, _ = _evaluate(smoke_run, tmp_path, capsys, "--policies", "fallback", ckpt=early)
    assert set(table) == {"ppo", "ppo[dvrp_smoke]", "fallback"}
    assert table["ppo[dvrp_smoke]"] == alone["ppo"]
    assert table["ppo[dvrp_smoke]"] != table["ppo"], "the two checkpoints play differently"
    assert table["fallback"] == alone["fallback"]


def test_evaluate_finds_the_runs_config(smoke_run, tmp_path, capsys):
    """Without --config, evaluate reads the config.yaml beside the checkpoint's checkpoints/ folder, and for a
    checkpoint moved away from its run, the config the checkpoint records: the same table as with --config."""
    import shutil

    args = ["--ckpt_path", smoke_run["last"], "--episodes", "8", "--num_envs", "8", "--policies", "fallback"]
    main(["--config", SMOKE, *args])
    given = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    main(args)
    out = capsys.readouterr()
    assert json.loads(out.out.strip().splitlines()[-1]) == given
    assert f"config: {smoke_run['dir'] / 'config.yaml'}" in out.err
    alone = tmp_path / "moved.ckpt"
    shutil.copy(smoke_run["last"], alone)
    main(["--ckpt_path", str(alone), *args[2:]])
    out = capsys.readouterr()
    assert json.loads(out.out.strip().splitlines()[-1]) == given
    assert "the config recorded in" in out.err


def test_evaluate_typo_names_the_option(smoke_run):
    proc = run_module("pipelines.evaluate", "--ckpt_path", smoke_run["last"], "--epsiodes", "8", timeout=120)
    assert proc.returncode == 2
    assert "unrecognized argument --epsiodes (did you mean --episodes?)" in proc.stderr
    assert proc.stderr.count("\n") < 12, "one short message, not fit's usage"


def test_a_module_loads_from_its_checkpoint_alone(smoke_run):
    """RLModule.load_from_checkpoint(path) builds the trained algorithm's module with its networks from the
    checkpoint alone (no YAML, no env), in eval mode, with the trained weights: it acts like the module that
    evaluate builds from the run's config."""
    import torch
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    from modules.base import RLModule
    from modules.ppo import PPOModule
    from pipelines.evaluate import load_run

    loaded = RLModule.load_from_checkpoint(smoke_run["last"])
    assert type(loaded) is PPOModule and not loaded.training
    reference, data = load_run(SMOKE, smoke_run["last"], [])
    assert loaded.state_dict().keys() == reference.state_dict().keys()
    assert all(torch.equal(v, reference.state_dict()[k]) for k, v in loaded.state_dict().items())
    env = data.make_eval_env(4, seed=3)
    observation = env.reset()
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        a = loaded.collector_policy(observation.clone())["action"]
        b = reference.collector_policy(observation.clone())["action"]
    env.close()
    assert torch.equal(a, b)


def test_evaluate_writes_a_video_of_one_episode(smoke_run, tmp_path, capsys):
    """--video: one frame per decision of row 0's episode (the DVRP plan growing): 30 requests, 30 frames."""
    import imageio.v2 as imageio

    main(["--ckpt_path", smoke_run["last"], "--episodes", "2", "--num_envs", "2", "--policies", "fallback",
          "--video", str(tmp_path / "episode.mp4")])
    assert "video of one episode (30 frames)" in capsys.readouterr().out
    assert imageio.get_reader(str(tmp_path / "episode.mp4")).count_frames() == 30
