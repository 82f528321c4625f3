"""Many-worker PPO on emulated games (``configs/airstriker_ppo.yaml``): a short run with rollout workers logs the
raw game score and episodes per hour and evaluates and films its checkpoint; workers' emulators are seeded
reproducibly and differently; ROMs are imported by stable-retro's importer; the Nature CNN fits the game's
actions. The learning check is the slow ``test_airstriker_ppo_beats_random``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from envs import EnvSpecs, make_env
from envs.games import GameConfig
from modules.nature_cnn import NatureCNNActorCritic
from modules.ppo import PPOModule
from pipelines.data.collectors import WorkerCollector
from pipelines.scalars import read_scalars
from tests.pipelines.conftest import REPO

AIRSTRIKER = str(REPO / "configs" / "airstriker_ppo.yaml")
SHORT = ["--data.init_args.collector.num_envs=2", "--data.init_args.collector.workers=2",
         "--data.init_args.collector.frames_per_batch=128",
         "--model.init_args.mini_batch_size=64", "--data.init_args.env.init_args.max_episode_steps=40"]


def _fit(tmp_path, frames: int, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pipelines.fit", "--config", AIRSTRIKER, *SHORT,
               f"--data.init_args.total_frames={frames}", "--trainer.enable_progress_bar=false",
               "--trainer.callbacks=[]", "--trainer.callbacks+=callbacks.ModelCheckpoint",
               "--trainer.callbacks.every_n_train_steps=1", "--trainer.callbacks.save_last=true",
               f"--trainer.logger.init_args.save_dir={tmp_path}", *extra]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.slow  # (52 s; `make test-slow`)
def test_a_worker_run_logs_the_game_score_and_its_checkpoint_plays_and_films_a_game(tmp_path, capsys):
    evaluation = json.dumps({"class_path": "callbacks.PolicyEvaluation",
                             "init_args": {"every_n_frames": 256, "num_envs": 2, "video_frames": 8}})
    run = _fit(tmp_path, 512, f"--trainer.callbacks+={evaluation}")
    assert run.returncode == 0, run.stderr[-3000:]
    folder = tmp_path / "airstriker_ppo" / "version_0"
    scalars = read_scalars(str(folder))
    assert {"rollout/game_score", "time/episodes_per_hour", "time/frames_per_s", "train/loss",
            "eval/game_score"} <= set(scalars)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"images": 0})
    events.Reload()
    assert "eval/video" in events.Tags()["images"]  # the clip of an evaluation game
    # the raw score of whole games (the episode's return is the unclipped game score too)
    assert (scalars["rollout/game_score"][1] == scalars["rollout/episode_return"][1]).all()
    from pipelines.evaluate import main

    video = tmp_path / "game.gif"
    main(["--ckpt_path", str(folder / "checkpoints" / "last.ckpt"), "--episodes", "4", "--num_envs", "2",
          "--video", str(video)])
    table = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(table) == {"ppo", "random"} and {"mean_return", "return_se", "mean_game_score"} <= set(table["ppo"])
    assert video.stat().st_size > 0


def _first_batch(seed: int) -> torch.Tensor:
    """The first batch of 2 Airstriker workers (one emulator each) under an untrained PPO policy: pixels [2, T, ...]."""
    config = GameConfig("Airstriker-Genesis-v0")
    torch.manual_seed(0)
    module = PPOModule(NatureCNNActorCritic(), action_mask_key=None)
    probe = make_env(config, 1, 0)
    module.build_on(EnvSpecs.of(probe))
    probe.close()
    collector = WorkerCollector(config, {}, 2, 2, seed, module.collector_policy, frames_per_batch=64, timeout_s=120.0)
    try:
        batch = next(iter(collector))
    finally:
        collector.shutdown()
    return batch["next", "pixels"]


def test_workers_play_different_games_and_a_rerun_plays_the_same():
    first = _first_batch(seed=0)
    assert first.shape[:2] == (2, 32)
    assert not torch.equal(first[0], first[1])  # worker 0 and worker 1: own no-op starts and own action draws
    torch.testing.assert_close(_first_batch(seed=0), first)
    assert not torch.equal(_first_batch(seed=5)[0], first[0])


def test_the_nature_cnn_takes_the_games_number_of_actions():
    for game, actions in (("ALE/Pong-v5", 6), ("Airstriker-Genesis-v0", 12)):
        env = make_env(GameConfig(game), 1, 0)
        module = PPOModule(NatureCNNActorCritic(), action_mask_key=None)
        module.build_on(EnvSpecs.of(env))
        td = module.collector_policy(env.reset())
        env.close()
        assert module.network.actor.out_features == actions and td["action"].shape == (1,)
        assert module.network.encode(torch.zeros(3, 5, 4, 84, 84, dtype=torch.uint8)).shape == (3, 5, 512)
    wrong = PPOModule(NatureCNNActorCritic(num_actions=4), action_mask_key=None)
    env = make_env(GameConfig("ALE/Pong-v5"), 1, 0)
    with pytest.raises(ValueError,
                       match=r"model\.init_args\.network\.init_args\.num_actions=4 but the env has 6 actions"):
        wrong.build_on(EnvSpecs.of(env))
    env.close()


def test_loaded_weights_give_the_same_policy():
    """The channels-last trunk survives a state-dict round trip (a checkpoint's load)."""
    env = make_env(GameConfig("ALE/Pong-v5"), 2, 0)
    source, target = (PPOModule(NatureCNNActorCritic(), action_mask_key=None) for _ in range(2))
    for module in (source, target):
        module.build_on(EnvSpecs.of(env))
    target.load_state_dict(source.state_dict())
    pixels = env.reset()["pixels"]
    env.close()
    net_s, net_t = source.network, target.network
    torch.testing.assert_close(net_t.policy(net_t.encode(pixels)), net_s.policy(net_s.encode(pixels)))


def test_import_roms_imports_a_renamed_rom_and_lists_the_playable_games(tmp_path):
    """A renamed copy of the bundled Airstriker ROM is found by its checksum (stable-retro writes the same bytes
    back where it keeps the game)."""
    import stable_retro

    rom = stable_retro.data.get_romfile_path("Airstriker-Genesis-v0", stable_retro.data.Integrations.ALL)
    before = open(rom, "rb").read()
    (tmp_path / "roms" / "nested").mkdir(parents=True)
    shutil.copy(rom, tmp_path / "roms" / "nested" / "my airstriker dump.md")
    (tmp_path / "roms" / "notes.txt").write_text("not a rom")
    run = subprocess.run([sys.executable, "-m", "pipelines.import_roms", str(tmp_path / "roms")], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "imported 1 game(s): Airstriker-Genesis-v0" in run.stdout
    assert "playable stable-retro games" in run.stdout and "Airstriker-Genesis-v0" in run.stdout.splitlines()[1]
    assert open(rom, "rb").read() == before
    (tmp_path / "empty").mkdir()
    nothing = subprocess.run([sys.executable, "-m", "pipelines.import_roms", str(tmp_path / "empty")], cwd=REPO,
                             capture_output=True, text=True, timeout=120)
    assert nothing.returncode == 1 and "none (no file matched a known checksum)" in nothing.stdout
    missing = subprocess.run([sys.executable, "-m", "pipelines.import_roms", str(tmp_path / "nope")], cwd=REPO,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "not a directory" in missing.stderr


def test_the_jackal_config_without_its_rom_stops_before_any_work(tmp_path):
    command = [sys.executable, "-m", "pipelines.fit", "--config", str(REPO / "configs" / "jackal_ppo.yaml"),
               f"--trainer.logger.init_args.save_dir={tmp_path}"]
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode != 0
    assert "env.game='Jackal-Nes-v0': its ROM is not installed" in run.stderr
    assert "python -m pipelines.import_roms DIR" in run.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.slow  # (27 s; `make test-slow`)
def test_an_asynchronous_collector_trains_on_batches_of_recent_weights(tmp_path):
    """``data.collector.mode: async``: each batch is one worker's, and its frames' weights were at most a few training
    steps older than the learner's (``time/policy_lag``, in training steps: about workers - 1 on average)."""
    run = _fit(tmp_path, 1024, "--data.init_args.collector.mode=async",
               "--data.init_args.collector.frames_per_batch=64",
               "--model.init_args.ppo_epochs=1")
    assert run.returncode == 0, run.stderr[-3000:]
    scalars = read_scalars(str(tmp_path / "airstriker_ppo" / "version_0"))
    steps, lag = scalars["time/policy_lag"]
    assert steps[-1] == 1024 and (lag >= 0).all() and (lag <= 4).all() and 0.3 < lag[1:].mean() < 2.0


def test_an_asynchronous_collector_without_workers_is_refused(tmp_path):
    run = _fit(tmp_path, 256, "--data.init_args.collector.mode=async", "--data.init_args.collector.workers=0",
               "--data.init_args.collector.num_envs=1", timeout=120)
    assert run.returncode != 0 and "data.collector.mode=async needs rollout workers" in run.stderr, run.stderr[-2000:]


@pytest.mark.slow
def test_airstriker_ppo_beats_random(tmp_path, capsys):
    """``configs/airstriker_ppo.yaml`` (8 workers) at a smaller budget, 120k frames (about 10 minutes on 2 cores): the
    greedy policy's mean raw score over 32 held-out games beats the random policy's on the same seeded games by more
    than 2 standard errors of the difference."""
    command = [sys.executable, "-m", "pipelines.fit", "--config", AIRSTRIKER, "--data.init_args.total_frames=122880",
               "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
               "--trainer.callbacks+=callbacks.ModelCheckpoint", "--trainer.callbacks.save_last=true",
               f"--trainer.logger.init_args.save_dir={tmp_path}"]
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=3000,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-3000:]
    from pipelines.evaluate import main

    main(["--ckpt_path", str(tmp_path / "airstriker_ppo" / "version_0" / "checkpoints" / "last.ckpt"),
          "--episodes", "32", "--num_envs", "8"])
    table = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    ppo, random = table["ppo"], table["random"]
    margin = 2 * (ppo["return_se"] ** 2 + random["return_se"] ** 2) ** 0.5
    assert ppo["mean_game_score"] - random["mean_game_score"] > margin, table


def test_games_are_evaluated_with_sampled_actions():
    """``GameConfig.stochastic_evaluation``: evaluations play the policy's samples (RL Zoo's Atari convention);
    other envs play its mode."""
    from torchrl.envs.utils import ExplorationType, exploration_type

    from envs.episodes import play_episodes
    from envs.gym import GymConfig

    seen = []

    def policy(td):
        seen.append(exploration_type())
        td["action"] = torch.zeros(td.batch_size, dtype=torch.long)
        return td

    for config, expected in ((GameConfig("ALE/Pong-v5"), ExplorationType.RANDOM),
                             (GymConfig("CartPole-v1"), ExplorationType.DETERMINISTIC)):
        seen.clear()
        env = make_env(config, 1, 0)
        play_episodes(env, policy, 1, max_steps=3, stochastic=config.stochastic_evaluation)
        env.close()
        assert seen and set(seen) == {expected}


def test_a_sampled_evaluation_is_seeded_and_leaves_the_callers_random_stream_alone():
    config = GameConfig("ALE/Pong-v5", max_episode_steps=60)
    module = PPOModule(NatureCNNActorCritic(), action_mask_key=None)
    env = make_env(config, 2, 0)
    module.build_on(EnvSpecs.of(env))
    env.close()

    def actions_of(sample_seed: int) -> torch.Tensor:
        from envs.episodes import play_episodes

        actions = []
        env = make_env(config, 2, 0)
        play_episodes(env, module.collector_policy, 1, stochastic=True, sample_seed=sample_seed,
                      on_step=lambda step, finished: actions.append(step["action"].clone()))
        env.close()
        return torch.stack(actions)

    torch.manual_seed(123)
    state = torch.get_rng_state()
    first = actions_of(7)
    assert torch.equal(torch.get_rng_state(), state)
    torch.testing.assert_close(actions_of(7), first)
    assert not torch.equal(actions_of(8), first)
