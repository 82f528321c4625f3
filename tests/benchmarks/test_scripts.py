"""Every benchmark script runs to its JSON line at a tiny size, so none rots unseen (their figures are measured at full
size by hand; see ``docs/benchmarks.md``). ``benchmarks/fit_timing.py`` runs inside ``vacuum_throughput``'s fit; the
scripts with tests of their own (``dvrp_router``, ``dvrp_gap``, ``dvrp_fleets``, ``gpu_path``, ``peer_sb3``,
``results``, ``scale_out``; ``dvrp_sizes`` in ``tests/pipelines/test_evaluate.py``) are not repeated here."""

from __future__ import annotations

import json

import pytest
import torch

from modules.routing import RoutingPolicy
from tests.pipelines.conftest import run_module

SCRIPTS = {  # script: (tiny arguments, keys its JSON line must hold)
    "dvrp_baselines": (["--episodes", "4", "--num_envs", "4"], ["clairvoyant", "fallback"]),
    "dvrp_throughput": (["--batch_sizes", "8", "--threads", "1", "--steps", "3", "--loop_batch_sizes", "2",
                         "--loop_steps", "1", "--skip_fit", "--improved_batch_sizes", "8"], ["env", "improved"]),
    "games_throughput": (["--workers", "1", "--seconds", "2", "--skip_sb3"], ["scaling"]),
    "gym_collection": (["--frames", "256", "--num_envs", "2", "--skip_sb3"], ["num_envs"]),
    "hockey_fidelity": (["--games", "2", "--contact", "swept"], ["seconds"]),
    "hockey_throughput": (["--batch_sizes", "8", "--steps", "3", "--fit_frames", "0", "--selfplay_frames", "0"],
                          ["env_steps_per_s"]),
    "update_overhead": (["--updates", "4", "--repeats", "1"], ["dqn", "sac", "ppo"]),
    "vacuum_env_throughput": (["--batch_sizes", "8", "--steps", "3"], ["env_steps_per_s"]),
    "vacuum_throughput": (["--envs", "8", "--seconds", "2", "--batch_sizes", "8", "--steps", "3"],
                          ["env_steps_per_s"]),
}


def _last_json(name: str, *args: str) -> dict:
    proc = run_module(f"benchmarks.{name}", *args, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_benchmark_script_prints_its_json_at_a_tiny_size(name):
    args, keys = SCRIPTS[name]
    result = _last_json(name, *args)
    assert all(key in result for key in keys), sorted(result)


def test_the_oracle_quality_script_runs_on_an_untrained_routing_policy(tmp_path):
    policy = RoutingPolicy(embed_dim=16, num_heads=4, num_layers=1)
    path = tmp_path / "oracle.ckpt"
    torch.save({"state_dict": {f"policy.{k}": v for k, v in policy.state_dict().items()},
                "routing_policy": {"class_path": "modules.routing.RoutingPolicy", "config": dict(policy.config),
                                   "num_customers": 30, "num_vehicles": 2}}, path)
    result = _last_json("oracle_quality", "--checkpoint", str(path), "--instances", "4", "--pyvrp_instances", "1",
                        "--pyvrp_seconds", "0.1", "--batch_sizes", "4", "--step_batch_sizes", "4", "--repeats", "1",
                        "--augment", "1", "--warm_steps", "1", "--timed_steps", "1",
                        "--data_dir", str(tmp_path / "no_data"))
    assert "speed" in result


def test_the_soak_script_compares_a_run_with_itself(tmp_path):
    """``benchmarks.soak`` at a tiny size and no kill (the kill interval outlasts the run): the soaked run is the
    reference run again, so the two end identical and their TensorBoard steps match."""
    result = _last_json("soak", "--total_frames", "960", "--kill_every_s", "300", "--out", str(tmp_path))
    assert result["kills"] == 0 and result["identical"], result["mismatched"]
