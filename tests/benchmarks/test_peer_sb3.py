"""The peer benchmark's mapping of our configs onto SB3's hyper-parameters (RL Zoo's values), its refusals, and the
summary of repeated rounds."""

from __future__ import annotations

import copy

import pytest

from benchmarks.peer_sb3 import sb3_hyperparameters, summarise_rounds, training_seed
from pipelines.search_space import merged_config
from tests.pipelines.conftest import REPO


def _config(name: str) -> dict:
    return merged_config([str(REPO / "configs" / name)], [], {})  # (as the benchmark reads it)


def test_cartpole_ppo_maps_to_rl_zoo_settings():
    hp, caveats = sb3_hyperparameters(_config("cartpole_ppo.yaml"), 100_000, 0)
    assert hp == {"algorithm": "PPO", "env_id": "CartPole-v1", "n_envs": 8, "total_timesteps": 100_000, "seed": 0,
                  "n_steps": 32, "batch_size": 256, "n_epochs": 20, "gamma": 0.98, "gae_lambda": 0.8,
                  "clip_range": "lin_0.2", "learning_rate": "lin_0.001", "ent_coef": 0.0, "vf_coef": 0.5,
                  "max_grad_norm": 0.5, "normalize_advantage": True,
                  "policy_kwargs": {"net_arch": {"pi": [64, 64], "vf": [64, 64]}, "activation_fn": "tanh",
                                    "ortho_init": True, "log_std_init": 0.0}}
    assert any("eps" in c for c in caveats) and "normalize" not in hp


def test_pendulum_ppo_maps_its_normalisation_to_vec_normalize():
    hp, caveats = sb3_hyperparameters(_config("pendulum_ppo.yaml"), 100_000, 0)
    assert (hp["n_envs"], hp["n_steps"], hp["batch_size"], hp["n_epochs"], hp["gamma"]) == (4, 1024, 64, 10, 0.98)
    assert hp["ent_coef"] == 0.01
    assert hp["normalize"] == {"norm_obs": True, "norm_reward": True, "clip_obs": 10.0, "clip_reward": 10.0,
                               "gamma": 0.98}
    assert any("VecNormalize" in c for c in caveats)
    config = copy.deepcopy(_config("pendulum_ppo.yaml"))
    config["model"]["init_args"]["squash"] = "tanh"
    with pytest.raises(ValueError, match="model.squash must be clip"):
        sb3_hyperparameters(config, 1000, 0)


def test_ppo_settings_sb3_cannot_mirror_are_refused():
    config = copy.deepcopy(_config("cartpole_ppo.yaml"))
    config["model"]["init_args"]["action_mask_key"] = "action_mask"
    config["model"]["init_args"]["reward_scale"] = 0.5
    with pytest.raises(ValueError, match="action_mask_key.*reward_scale"):
        sb3_hyperparameters(config, 1000, 0)


def test_dqn_sac_and_td3_configs_map():
    dqn, _ = sb3_hyperparameters(_config("cartpole_dqn.yaml"), 50_000, 0)
    assert (dqn["train_freq"], dqn["gradient_steps"], dqn["batch_size"]) == (256, 128, 64)
    sac, _ = sb3_hyperparameters(_config("pendulum_sac.yaml"), 20_000, 0)
    assert (sac["train_freq"], sac["gradient_steps"], sac["ent_coef"]) == (8, 8, "auto_1.0")
    td3, _ = sb3_hyperparameters(_config("pendulum_td3.yaml"), 20_000, 0)
    assert (td3["learning_starts"], td3["action_noise"], td3["policy_delay"], td3["gamma"]) == (10_000, "normal_0.1",
                                                                                                2, 0.98)
    assert td3["policy_kwargs"]["net_arch"] == {"pi": [400, 300], "qf": [400, 300]}
    config = copy.deepcopy(_config("pendulum_td3.yaml"))
    config["model"]["init_args"]["loss_function"] = "smooth_l1"
    with pytest.raises(ValueError, match="loss_function must be l2"):
        sb3_hyperparameters(config, 1000, 0)


def test_repeated_rounds_report_each_sides_median_run():
    ours = [{"steps_per_s": speed, "wall_s": i} for i, speed in enumerate([900.0, 1200.0, 1000.0], 1)]
    sb3 = [{"steps_per_s": speed, "wall_s": i} for i, speed in enumerate([500.0, 800.0, 400.0], 4)]
    out = summarise_rounds({"ours": ours, "sb3": sb3})
    assert out["ours"]["wall_s"] == 3 and out["sb3"]["wall_s"] == 4  # the median runs, whole
    assert out["ours"]["rounds_steps_per_s"] == [900.0, 1200.0, 1000.0]
    assert out["ratio"] == pytest.approx(1000.0 / 500.0)
    assert out["round_ratios"] == pytest.approx([1.8, 1.5, 2.5])
    even = summarise_rounds({"ours": ours[:2], "sb3": []})
    assert even["ours"]["wall_s"] == 1 and "ratio" not in even  # the lower middle run; one side only: no ratio


def test_both_trainers_get_a_seed_when_the_config_has_no_data_seed():
    config = _config("cartpole_dqn.yaml")
    assert "seed" not in config["data"]["init_args"] and config["seed_everything"] == 0
    assert training_seed(config) == 0 and training_seed(config, 3) == 3  # (SB3 given None trains unseeded)
    seeded = copy.deepcopy(config)
    seeded["data"]["init_args"]["seed"], seeded["seed_everything"] = 7, 5
    assert training_seed(seeded) == 7
    del seeded["data"]["init_args"]["seed"]
    assert training_seed(seeded) == 5


def test_recurrent_ppo_maps_to_sb3_contribs_recurrent_ppo():
    hp, caveats = sb3_hyperparameters(_config("cartpole_novel_ppo_lstm.yaml"), 100_000, 0)
    assert (hp["algorithm"], hp["env_id"], hp["n_envs"], hp["n_steps"], hp["batch_size"], hp["n_epochs"]) == (
        "RecurrentPPO", "CartPoleNoVel-v1", 8, 32, 256, 20)
    assert hp["policy_kwargs"] == {"net_arch": {"pi": [64], "vf": [64]}, "activation_fn": "relu", "log_std_init": 0.0,
                                   "ortho_init": False, "lstm_hidden_size": 64, "n_lstm_layers": 1,
                                   "enable_critic_lstm": True, "shared_lstm": False}
    assert hp["normalize"]["norm_obs"] and hp["normalize"]["norm_reward"]
    assert any("RecurrentPPO" in c for c in caveats)
