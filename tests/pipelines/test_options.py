"""The data path's option objects (``data.collector``, ``data.replay_buffer``): their checks name the key; old flat
keys stop a config with one line naming the new place; a recorded old config is upgraded; PPO's minibatches are
checked against the collector before any work."""

from __future__ import annotations

import copy

import pytest
import yaml

from envs.gym import GymConfig
from pipelines.data import CollectorOptions, OffPolicyDataModule, ReplayOptions
from pipelines.fit import main
from pipelines.renamed import upgrade_config
from tests.pipelines.conftest import REPO

CARTPOLE_PPO = str(REPO / "configs" / "cartpole_ppo.yaml")
CARTPOLE_DQN = str(REPO / "configs" / "cartpole_dqn.yaml")


@pytest.mark.parametrize("options,message", [
    ({"num_envs": 8, "frames_per_batch": 100}, r"data\.collector\.frames_per_batch=100 must be a multiple of "
                                               r"data\.collector\.num_envs=8"),
    ({"num_envs": 8, "workers": 3}, r"data\.collector\.workers=3 is not allowed: 0 .* or a divisor of "
                                    r"data\.collector\.num_envs=8"),
    ({"mode": "async"}, r"data\.collector\.mode=async needs rollout workers"),
    ({"mode": "fast", "workers": 1}, r"data\.collector\.mode='fast' is not allowed: one of sync, async, ray"),
    ({"num_envs": 0}, r"data\.collector\.num_envs must be >= 1, got 0"),
    ({"worker_timeout_s": 0.0}, r"data\.collector\.worker_timeout_s must be > 0"),
    ({"workers": 2, "compile_policy": True}, r"data\.collector\.compile_policy=true needs in-process envs"),
])
def test_collector_options_name_the_key(options, message):
    with pytest.raises(ValueError, match=message):
        CollectorOptions(**options)


@pytest.mark.parametrize("options,message", [
    ({"buffer_size": 0}, r"data\.replay_buffer\.buffer_size must be >= 1, got 0"),
    ({"utd_ratio": 0}, r"data\.replay_buffer\.utd_ratio must be >= 1, got 0"),
    ({"init_random_frames": -1}, r"data\.replay_buffer\.init_random_frames must be >= 0"),
    ({"storage": "disk"}, r"data\.replay_buffer\.storage='disk' is not allowed: one of tensor, memmap"),
    ({"priority_beta": 1.5}, r"data\.replay_buffer\.priority_beta=1\.5 is not allowed: in \[0, 1\]"),
])
def test_replay_options_name_the_key(options, message):
    with pytest.raises(ValueError, match=message):
        ReplayOptions(**options)


def test_the_data_module_checks_options_against_each_other():
    env = GymConfig(env_id="CartPole-v1")
    with pytest.raises(ValueError, match=r"data\.collector\.mode=async needs data\.collector\.workers=1 here, got 2"):
        OffPolicyDataModule(env, CollectorOptions(num_envs=2, frames_per_batch=16, workers=2, mode="async"))
    with pytest.raises(ValueError, match=r"data\.replay_buffer\.buffer_size=4 must be >= data\.collector\.num_envs=8"):
        OffPolicyDataModule(env, CollectorOptions(num_envs=8, frames_per_batch=16),
                            ReplayOptions(buffer_size=4, batch_size=4))
    with pytest.raises(ValueError, match=r"batch_size=128 is larger than data\.replay_buffer\.buffer_size=64"):
        ReplayOptions(buffer_size=64)
    data = OffPolicyDataModule(env, CollectorOptions(num_envs=2, frames_per_batch=16), ReplayOptions(batch_size=32))
    assert (data.num_envs, data.frames_per_batch, data.replay_options.batch_size) == (2, 16, 32)


def _old_layout(config: dict) -> dict:
    """``config`` as written before the collector's and replay buffer's keys were sections and PPO's epochs moved."""
    old = copy.deepcopy(config)
    data, model = old["data"]["init_args"], old["model"]["init_args"]
    collector = data.pop("collector")
    data.update(collector, **({"collector": collector.pop("mode")} if "mode" in collector else {}))
    data.update(data.pop("replay_buffer", {}))
    for key in ("ppo_epochs", "mini_batch_size"):
        if key in model:
            data[key] = model.pop(key)
    return old


@pytest.mark.parametrize("name", ["cartpole_ppo", "cartpole_dqn", "hockey_dqn_selfplay", "dvrp"])
def test_an_old_recorded_config_is_upgraded_to_the_shipped_layout(name):
    config = yaml.safe_load((REPO / "configs" / f"{name}.yaml").read_text())
    config["data"]["init_args"]["collector"]["mode"] = "sync"  # (a recorded config has every key)
    old = _old_layout(config)
    assert "collector" not in old["data"]["init_args"] or isinstance(old["data"]["init_args"]["collector"], str)
    upgraded, moved = upgrade_config(old)
    assert upgraded == config
    assert "data.init_args.num_envs -> data.init_args.collector.num_envs" in moved
    assert upgrade_config(config) == (config, [])  # nothing to move in today's layout


@pytest.mark.parametrize("old,line", [
    ({"num_envs": 8}, "error: data.init_args.num_envs: moved to data.init_args.collector.num_envs (a key of "
                      "pipelines.data.OnPolicyDataModule)"),
    ({"ppo_epochs": 3}, "error: data.init_args.ppo_epochs: moved to model.init_args.ppo_epochs (a key of "
                        "pipelines.data.OnPolicyDataModule)"),
    ({"collector": "async"}, "error: data.init_args.collector: a section now; the value async goes to "
                             "data.init_args.collector.mode (a key of pipelines.data.OnPolicyDataModule)"),
])
def test_an_old_key_in_a_config_file_stops_with_its_new_place(tmp_path, capsys, old, line):
    (tmp_path / "old.yaml").write_text(yaml.safe_dump({"data": {"init_args": old}}))
    with pytest.raises(SystemExit) as stop:
        main(["--config", CARTPOLE_PPO, "--config", str(tmp_path / "old.yaml"),
              f"--trainer.default_root_dir={tmp_path}"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[0] == line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.yaml"]


@pytest.mark.parametrize("args,message", [
    (["--model.init_args.mini_batch_size=100"],
     "error: data.collector.frames_per_batch=256 must be a multiple of model.mini_batch_size=100"),
    (["--data=pipelines.data.OffPolicyDataModule"],
     "error: model.class_path=modules.ppo.PPOModule trains on collected batches in minibatches: its data module is "
     "pipelines.data.OnPolicyDataModule, not pipelines.data.off_policy.OffPolicyDataModule"),
])
def test_ppo_minibatches_are_checked_against_the_data_path_before_any_work(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as stop:
        main(["--config", CARTPOLE_PPO, *args, f"--trainer.default_root_dir={tmp_path}",
              "--trainer.logger.init_args.save_dir=" + str(tmp_path)])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(message)
    assert not list(tmp_path.iterdir())


def test_dqn_on_the_on_policy_data_module_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--config", CARTPOLE_DQN, "--data=pipelines.data.OnPolicyDataModule",
              f"--trainer.default_root_dir={tmp_path}",
              "--trainer.logger.init_args.save_dir=" + str(tmp_path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "hands collected batches in minibatches, which DQNModule does not take" in err, err


def test_a_renamed_callback_class_stops_a_config_and_is_upgraded_in_a_recorded_one(tmp_path, capsys):
    """``callbacks.EmbeddingUpdate`` is ``callbacks.FlexibilityUpdate``: a config naming the old class stops with one
    line naming the new; a recorded config gets the new class path, and a checkpoint's state saved under the old name
    loads into the new class."""
    from callbacks import FlexibilityUpdate

    old = {"class_path": "callbacks.EmbeddingUpdate", "init_args": {"every_n_frames": 960}}
    (tmp_path / "old.yaml").write_text(yaml.safe_dump({"trainer": {"callbacks+": [old]}}))
    with pytest.raises(SystemExit) as stop:
        main(["--config", str(REPO / "configs" / "dvrp_smoke.yaml"), "--config", str(tmp_path / "old.yaml"),
              f"--trainer.default_root_dir={tmp_path}"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        "error: trainer.callbacks.class_path='callbacks.EmbeddingUpdate': renamed callbacks.FlexibilityUpdate")
    recorded = {"trainer": {"callbacks": [{"class_path": "callbacks.embedding.EmbeddingUpdate",
                                           "init_args": {"every_n_frames": 960}}]}}
    upgraded, moved = upgrade_config(recorded)
    assert upgraded["trainer"]["callbacks"][0] == {"class_path": "callbacks.FlexibilityUpdate",
                                                  "init_args": {"every_n_frames": 960}}
    assert moved == ["trainer.callbacks.0.class_path callbacks.embedding.EmbeddingUpdate -> "
                     "callbacks.FlexibilityUpdate"]
    saved = FlexibilityUpdate(every_n_frames=960)
    saved.updates, saved.schedule.next_frames = 3, 3840
    loaded = FlexibilityUpdate(every_n_frames=960)
    loaded.on_load_checkpoint(None, None, {"callbacks": {"EmbeddingUpdate": saved.state_dict()}})
    assert (loaded.updates, loaded.schedule.next_frames) == (3, 3840)


def test_a_network_named_by_its_old_re_export_stops_a_config_and_resumes_a_recorded_run(tmp_path, capsys):
    """One class path per class, the defining module's: ``modules.dqn.QNetwork`` (a re-export until 2026-11-27)
    stops a config with one line naming ``modules.q_networks.QNetwork``; a checkpoint whose recorded config names
    the old path still resumes under today's config (its paths are upgraded, and two import paths of one class are
    the same class), while another network class is refused."""
    import torch

    from pipelines.checkpoints import CONFIG_KEY, check_resume_checkpoint

    old = {"model": {"init_args": {"network": {"class_path": "modules.dqn.QNetwork"}}}}
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(old))
    with pytest.raises(SystemExit) as stop:
        main(["--config", CARTPOLE_DQN, "--config", str(tmp_path / "old.yaml"),
              f"--trainer.default_root_dir={tmp_path}"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        "error: model.init_args.network.class_path='modules.dqn.QNetwork': moved to modules.q_networks.QNetwork")
    now = yaml.safe_load(open(CARTPOLE_DQN))
    recorded = copy.deepcopy(now)
    recorded["model"]["init_args"]["network"]["class_path"] = "modules.dqn.QNetwork"
    recorded["data"]["class_path"] = "pipelines.data.off_policy.OffPolicyDataModule"  # the defining module's path
    torch.save({"state_dict": {}, CONFIG_KEY: recorded}, tmp_path / "old.ckpt")
    assert check_resume_checkpoint(str(tmp_path / "old.ckpt"), now) is None  # (no frame count recorded)
    recorded["model"]["init_args"]["network"]["class_path"] = "modules.q_networks.MultiAgentQNetwork"
    torch.save({"state_dict": {}, CONFIG_KEY: recorded}, tmp_path / "other.ckpt")
    with pytest.raises(ValueError, match="trained with another config: model.init_args.network.class_path='modules"
                                         ".q_networks.MultiAgentQNetwork' there, 'modules.q_networks.QNetwork'"):
        check_resume_checkpoint(str(tmp_path / "other.ckpt"), now)
