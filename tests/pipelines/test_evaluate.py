"""pipelines.evaluate: the trained policy and every baseline on the same seeded episodes."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from envs.dvrp.baselines import BASELINES
from pipelines.evaluate import main
from pipelines.results_table import HINDSIGHT, pyvrp_gaps
from tests.conftest import periodic_checkpoints
from tests.pipelines.conftest import SMOKE, run_module
from tests.route_check import check_exported_plan

FIELDS = {"mean_return", "return_se", "mean_plan_cost_km", "mean_served", "mean_failure_rate", "mean_refused"}
GAP = {"gap_to_hindsight_pct", "gap_to_hindsight_se_pct"}
RESOLVED = {"gap_to_hindsight_resolved_pct", "gap_to_hindsight_resolved_se_pct"}


def _evaluate(smoke_run, tmp_path, capsys, *extra: str, ckpt: str | None = None) -> tuple[dict, dict, str]:
    routes = tmp_path / "routes.json"
    routes.unlink(missing_ok=True)  # (evaluate never overwrites a file)
    main(["--config", SMOKE, "--ckpt_path", ckpt or smoke_run["last"], "--episodes", "12", "--num_envs", "8",
          "--routes_out", str(routes), *extra])
    stdout = capsys.readouterr().out
    table = json.loads(stdout.strip().splitlines()[-1])  # the last stdout line is the JSON summary
    return table, json.loads(routes.read_text()), stdout


def test_evaluate_table_json_and_feasible_routes(smoke_run, tmp_path, capsys):
    table, routes, stdout = _evaluate(smoke_run, tmp_path, capsys, "--pyvrp_episodes", "2", "--pyvrp_seconds", "0.2",
                                      "--hindsight_seconds", "0.3")
    assert set(table) == {"ppo", *BASELINES, "hindsight"}
    assert set(table["hindsight"]) == FIELDS | GAP
    assert all(set(row) == FIELDS | GAP | RESOLVED for policy, row in table.items() if policy != "hindsight")
    assert "gap to PyVRP" in stdout and "gap to hindsight" in stdout
    # the hindsight oracle knows the day: above every online policy, and so every gap to it is positive
    hindsight = table["hindsight"]
    assert hindsight["gap_to_hindsight_pct"] == 0.0 and hindsight["mean_refused"] == 0.0
    for policy, row in table.items():
        if policy != "hindsight":
            assert row["mean_return"] < hindsight["mean_return"] and row["gap_to_hindsight_pct"] > 0, policy
    assert table["clairvoyant"]["mean_failure_rate"] < table["random"]["mean_failure_rate"]
    assert len(routes["episodes"]) == 12
    served = 0.0
    for episode in routes["episodes"]:
        check_exported_plan(episode)
        served += len(episode["customers"])
    assert served / 12 == pytest.approx(table["ppo"]["mean_served"], rel=1e-5)  # JSON: 6 significant digits


def test_no_baselines_plays_the_policy_and_the_hindsight_oracle_alone(smoke_run, tmp_path, capsys):
    """``--no_baselines`` (a study's later seeds): no reference rule, the hindsight oracle kept for the gap; the
    policy's row is the one a full evaluation gives on the same episodes. With ``--policies`` it is refused."""
    table, _, _ = _evaluate(smoke_run, tmp_path, capsys, "--no_baselines", "--hindsight_seconds", "0.3")
    full, _, _ = _evaluate(smoke_run, tmp_path, capsys, "--policies", "fallback", "hindsight",
                           "--hindsight_seconds", "0.3")
    assert list(table) == ["ppo", "hindsight"] and set(table["ppo"]) == FIELDS | GAP
    assert table["ppo"]["mean_return"] == full["ppo"]["mean_return"]
    proc = run_module("pipelines.evaluate", "--ckpt_path", smoke_run["last"], "--no_baselines", "--policies",
                      "fallback", timeout=120)
    assert proc.returncode == 2 and "--no_baselines" in proc.stderr and "Traceback" not in proc.stderr


def test_same_seed_gives_same_episodes(smoke_run, tmp_path, capsys):
    first, _, _ = _evaluate(smoke_run, tmp_path, capsys, "--policies", "fallback")
    second, _, _ = _evaluate(smoke_run, tmp_path, capsys, "--policies", "fallback")
    other, _, _ = _evaluate(smoke_run, tmp_path, capsys, "--policies", "fallback", "--seed", "7")
    assert first == second
    assert other["fallback"] != first["fallback"]


def test_evaluate_on_solomon_files(smoke_run, tmp_path, capsys, solomon_dir):
    files = str(solomon_dir / "solomon_txt" / "R2*.txt")
    table, routes, stdout = _evaluate(smoke_run, tmp_path, capsys, "--instances", files,
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
    saved = torch.load(smoke_run["last"], weights_only=True)["OnPolicyDataModule"]["env_models"]["flexibility"]
    restored = data.env_models["flexibility"].state_dict()
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


def _fallback_table(ckpt: str, capsys, *extra: str) -> dict:
    """evaluate's JSON table of ``ckpt`` (the trained policy and ``fallback``, 8 episodes)."""
    main(["--ckpt_path", ckpt, "--episodes", "8", "--num_envs", "8", "--policies", "fallback", *extra])
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _run_folder(smoke_run, tmp_path, data: dict, trainer: dict) -> str:
    """A copy of the smoke run's last checkpoint in ``tmp_path/run/checkpoints`` beside the run's config.yaml with
    ``data`` and ``trainer`` entries changed; returns the checkpoint."""
    import shutil

    import yaml

    config = yaml.safe_load((smoke_run["dir"] / "config.yaml").read_text())
    for key, value in data.items():
        if isinstance(value, dict):
            config["data"]["init_args"][key].update(value)
        else:
            config["data"]["init_args"][key] = value
    config["trainer"].update(trainer)
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump(config))
    shutil.copy(smoke_run["last"], tmp_path / "run" / "checkpoints" / "last.ckpt")
    return str(tmp_path / "run" / "checkpoints" / "last.ckpt")


def test_evaluate_under_a_config_with_other_num_envs(smoke_run, tmp_path, capsys):
    """Issue 38: the checkpoint holds the training envs' resume state (16 rows); a config of another num_envs (here
    8) plays it all the same, and the same episodes: evaluation restores the env's learned model, not the
    training's resume positions."""
    import yaml

    config = yaml.safe_load(open(SMOKE))
    config["data"]["init_args"]["collector"]["num_envs"] = 8
    other = tmp_path / "dvrp_smoke_8.yaml"
    other.write_text(yaml.safe_dump(config))
    assert _fallback_table(smoke_run["last"], capsys, "--config", str(other)) == \
        _fallback_table(smoke_run["last"], capsys, "--config", SMOKE)


@pytest.mark.parametrize("data,trainer", [
    ({"collector": {"cudagraph_policy": True, "compile_policy": True}, "device": "cuda"},
     {"accelerator": "gpu", "devices": 2, "strategy": "ddp", "precision": "16-mixed"}),
    ({"collector": {"workers": 4, "mode": "async"}}, {}),
    ({"collector": {"workers": 2, "mode": "ray", "ray": {"address": "auto", "num_cpus": 2}}}, {"num_nodes": 2}),
], ids=["gpu_collector", "async_workers", "ray"])
def test_collector_options_of_other_hardware_do_not_get_in_the_way(smoke_run, tmp_path, capsys, data, trainer):
    """Issue 38: a run whose config.yaml names collector and trainer options for its own hardware (a CUDA-graph
    policy on a GPU, DDP, rollout workers, a Ray cluster) is evaluated on this CPU, on the same episodes as under
    the smoke config."""
    ckpt = _run_folder(smoke_run, tmp_path, data, trainer)
    assert _fallback_table(ckpt, capsys) == _fallback_table(smoke_run["last"], capsys, "--config", SMOKE)


def test_a_run_folder_of_the_old_key_layout_still_evaluates(smoke_run, tmp_path, capsys):
    """A run written before the collector's keys and PPO's epochs moved (``data.init_args.num_envs``,
    ``data.init_args.collector: sync``, ``data.init_args.ppo_epochs``), and before the flexibility model left the
    env config (its ``num_types``/``num_attributes`` keys, its weights under the data module's ``embedding_model``),
    is evaluated from its own config.yaml, which is read with the keys in their new places (said on stderr), on the
    same episodes and with the same flexibility model as under today's config."""
    import yaml

    config = yaml.safe_load((smoke_run["dir"] / "config.yaml").read_text())
    data, model = config["data"]["init_args"], config["model"]["init_args"]
    collector = data.pop("collector")
    mode = collector.pop("mode")
    data.update(collector, collector=mode)
    data.update(ppo_epochs=model.pop("ppo_epochs"), mini_batch_size=model.pop("mini_batch_size"))
    data["env"]["init_args"]["flexibility"]["init_args"].update(num_types=4, num_attributes=4)
    assert "num_envs" in data and data["collector"] == "sync"
    ckpt = _run_folder(smoke_run, tmp_path, {}, {})
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump(config))
    old = torch.load(ckpt, weights_only=True)
    old["OnPolicyDataModule"]["embedding_model"] = old["OnPolicyDataModule"].pop("env_models")["flexibility"]
    torch.save(old, ckpt)
    main(["--ckpt_path", ckpt, "--episodes", "8", "--num_envs", "8", "--policies", "fallback"])
    out = capsys.readouterr()
    assert "keys moved since: data.init_args.collector -> data.init_args.collector.mode" in out.err, out.err
    assert "data.init_args.ppo_epochs -> model.init_args.ppo_epochs" in out.err, out.err
    assert ("data.init_args.env.init_args.flexibility.init_args.num_types -> removed (given: K, the length of "
            "env.type_mix)") in out.err, out.err
    table = json.loads(out.out.strip().splitlines()[-1])
    assert table == _fallback_table(smoke_run["last"], capsys, "--config", SMOKE)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_a_cuda_device_without_one_is_one_line(smoke_run):
    proc = run_module("pipelines.evaluate", "--ckpt_path", smoke_run["last"], "--device", "cuda", timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "error: --device=cuda: this machine has no CUDA devices (use --device cpu)"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_evaluate_plays_on_the_gpu(smoke_run, tmp_path, capsys):
    """--device cuda: the envs, the trained policy and the baselines play on the GPU (a CPU-trained run)."""
    table, routes, _ = _evaluate(smoke_run, tmp_path, capsys, "--policies", "fallback", "--device", "cuda")
    assert set(table) == {"ppo", "fallback"} and all(set(row) == FIELDS for row in table.values())
    for episode in routes["episodes"]:
        check_exported_plan(episode)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_run_trained_with_a_cuda_graph_policy_is_evaluated_on_the_cpu(tmp_path, capsys):
    """Issue 38, on the GPU: the smoke run trained with --data.init_args.collector.cudagraph_policy=true on the GPU,
    then evaluated on the CPU (its own config.yaml names the GPU options) and on the GPU."""
    proc = run_module("pipelines.fit", "--config", SMOKE, f"--trainer.logger.init_args.save_dir={tmp_path}",
                      "--trainer.accelerator=gpu", "--data.init_args.collector.cudagraph_policy=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ckpt = str(tmp_path / "dvrp_smoke" / "version_0" / "checkpoints" / "last.ckpt")
    on_cpu = _fallback_table(ckpt, capsys)
    on_gpu = _fallback_table(ckpt, capsys, "--device", "cuda")
    assert set(on_cpu) == set(on_gpu) == {"ppo", "fallback"}


@pytest.mark.parametrize("option,name", [("--routes_out", "routes.json"), ("--video", "episode.gif")])
def test_outputs_never_overwrite_a_file(smoke_run, tmp_path, option, name):
    """Issue 38: an existing --routes_out or --video is refused before any work, one line naming it; the file is
    kept."""
    routes = tmp_path / name
    routes.write_text("mine")
    proc = run_module("pipelines.evaluate", "--ckpt_path", smoke_run["last"], "--episodes", "2", "--num_envs", "2",
                      "--policies", "fallback", option, str(routes), timeout=300)
    assert proc.returncode == 2 and routes.read_text() == "mine"
    assert proc.stderr.strip() == (f"error: {option}={str(routes)!r} exists: evaluate never overwrites a file "
                                   f"(remove it or give another name)")
    assert proc.stdout == ""


def test_size_table_benchmark(smoke_run, capsys):
    """benchmarks/dvrp_sizes.py plays the trained policy, the rules and the hindsight oracle on days of other sizes
    with their fleets; the oracle is above every online policy and the table says what each costs to play."""
    from benchmarks.dvrp_sizes import main as sizes

    table = sizes(["--ckpt_path", smoke_run["last"], "--days", "N30", "N50", "--episodes", "6",
                   "--policies", "fallback", "clairvoyant", "--hindsight_seconds_per_customer", "0.01",
                   "--workers", "1"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == table
    assert set(table) == {"N30", "N50"}
    for _days, rows in table.items():
        assert set(rows) == {"dvrp_smoke/version_0", "fallback", "clairvoyant", "hindsight"}
        for policy, row in rows.items():
            assert row["seconds_per_episode"] > 0
            if policy != "hindsight":
                assert row["mean_return"] < rows["hindsight"]["mean_return"] and row["gap_to_hindsight_pct"] > 0
    assert table["N50"]["hindsight"]["served"] > 40 >= table["N30"]["hindsight"]["served"]  # 50 customers, 4 vehicles


def test_size_table_on_whole_solomon_days(smoke_run, capsys, solomon_dir):
    """The size table's Solomon rows play whole days: every one of a file's 100 customers, the family's fleet and
    the file's capacity (R2: 4 vehicles of 1,000)."""
    from benchmarks.dvrp_sizes import main as sizes

    table = sizes(["--ckpt_path", smoke_run["last"], "--days", "R2", "--episodes", "2", "--policies", "fallback",
                   "--hindsight_seconds_per_customer", "0.005", "--workers", "1", "--data_dir", str(solomon_dir)])
    rows = table["R2"]
    assert rows["hindsight"]["served"] > 90 and rows["fallback"]["served"] > 90  # of 100 customers
    assert rows["hindsight"]["mean_return"] > rows["fallback"]["mean_return"]


def test_the_resolved_gap_keeps_the_better_of_the_online_and_the_pyvrp_plan():
    """An env that improves its own plan can beat a short PyVRP run: the re-solved return never falls below the
    online one (here PyVRP saves 10 km on the first day and would lose 10 on the second)."""
    results = {"online": {"plans": [{"cost_km": 100.0}, {"cost_km": 50.0}],
                          "episode_return": torch.tensor([10.0, 20.0])},
               HINDSIGHT: {"episode_return": torch.tensor([100.0, 100.0])}}
    config = SimpleNamespace(reference_cost=lambda plan, seconds: {100.0: 90.0, 50.0: 60.0}[plan["cost_km"]])
    gaps, resolved = pyvrp_gaps(results, config, episodes=2, seconds=0.1)
    assert resolved["online"][0] == pytest.approx(80.0)  # returns 20 and 20 against 100 (not 20 and 10)
    assert gaps["online"] == pytest.approx((100 / 90 - 1 + 50 / 60 - 1) / 2)
