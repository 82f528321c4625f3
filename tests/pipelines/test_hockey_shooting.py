"""A short SAC run in TRAIN_SHOOTING (puck at the agent, static opponent) scores more often than the
uniform random policy on the same 1,000 held-out episodes. About 1 min on one thread: ``slow``.

Win rates here are near 6-10%: over 200 episodes (one standard error about 1.7 points) a run that had learned
(mean return -10 against random's -23) tied random's 6.0% on one seed; 1,000 episodes (SE about 0.8) separate
them."""

from __future__ import annotations

import glob
import json

import pytest

from pipelines import evaluate
from pipelines.fit import main
from tests.pipelines.conftest import REPO

CONFIG = str(REPO / "configs" / "hockey_sac.yaml")
SMALL = ["--model.init_args.network.init_args.actor_hidden_dims=[64, 64]",
         "--model.init_args.network.init_args.critic_hidden_dims=[64, 64]"]
SHOOTING = {"mode": "TRAIN_SHOOTING", "opponent": "static", "w_touch": 1.0, "w_direction": 1.0}


@pytest.mark.slow
def test_short_sac_run_in_shooting_mode_scores_more_than_random(tmp_path):
    env = {"class_path": "envs.hockey.HockeyConfig", "init_args": SHOOTING}
    # the config's first curriculum phase alone: 16 envs, one update of 128 transitions per 8 frames, 48k frames
    main(["--config", CONFIG, "--trainer.callbacks=[]", f"--trainer.logger.init_args.save_dir={tmp_path}",
          "--trainer.enable_progress_bar=false", f"--data.init_args.env={json.dumps(env)}",
          "--data.init_args.collector.num_envs=16", "--data.init_args.collector.frames_per_batch=64",
          "--data.init_args.replay_buffer.utd_ratio=8",
          "--data.init_args.total_frames=48000", "--data.init_args.replay_buffer.init_random_frames=2048",
          "--data.init_args.replay_buffer.batch_size=128", *SMALL])
    (ckpt,) = glob.glob(f"{tmp_path}/hockey_sac/version_0/checkpoints/*.ckpt")
    table = evaluate.main(["--config", CONFIG, "--ckpt_path", ckpt, "--episodes", "1000", "--num_envs", "500",
                           "--settings", json.dumps({"shooting": {"mode": "TRAIN_SHOOTING", "opponent": "static"}}),
                           *SMALL])
    sac, random = table["sac"]["shooting"], table["random"]["shooting"]
    assert sac["won_rate"] > random["won_rate"], table
    assert sac["mean_return"] > random["mean_return"], table
