"""Hockey evaluation: game frame strips in TensorBoard, and ``pipelines.evaluate`` win / draw / loss
rates per scripted opponent."""

from __future__ import annotations

import glob
import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from pipelines import evaluate
from pipelines.fit import main
from tests.pipelines.conftest import REPO

CONFIG = str(REPO / "configs" / "hockey_dqn_selfplay.yaml")
SMALL = "--model.init_args.network.init_args.hidden_dims=[16]"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The self-play DQN config on a tiny budget (its end-of-training evaluation included)."""
    out = tmp_path_factory.mktemp("hockey")
    cli = main(["--config", CONFIG, f"--trainer.logger.init_args.save_dir={out}",
                "--data.init_args.total_frames=640", "--data.init_args.replay_buffer.init_random_frames=256",
                "--data.init_args.collector.num_envs=8", "--data.init_args.collector.frames_per_batch=64",
                "--data.init_args.replay_buffer.utd_ratio=1",
                SMALL])
    return cli, out


def test_evaluation_logs_a_frame_strip_of_one_game_per_opponent(trained):
    _, out = trained
    (events,) = glob.glob(f"{out}/hockey_dqn_selfplay/version_0/events.*")
    accumulator = EventAccumulator(events, size_guidance={"images": 0})
    accumulator.Reload()
    assert {"eval/weak/game", "eval/strong/game"} <= set(accumulator.Tags()["images"])
    strip = accumulator.Images("eval/weak/game")[-1]
    table_height, table_width = 160, 188  # the 6.67 x 7.83 m table at 24 pixels per metre
    # eight snapshots, two rows of four, 2-pixel gaps
    assert (strip.height, strip.width) == (2 * (table_height + 2) - 2, 4 * (table_width + 2) - 2)


def test_evaluate_reports_rates_per_opponent(trained, capsys):
    _, out = trained
    (ckpt,) = glob.glob(f"{out}/hockey_dqn_selfplay/version_0/checkpoints/last.ckpt")
    table = evaluate.main(["--config", CONFIG, "--ckpt_path", ckpt, "--episodes", "32", "--num_envs", "32", SMALL])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == table
    for policy in ("dqn", "random"):
        assert set(table[policy]) == {"weak", "strong"}
        for row in table[policy].values():
            assert row["won_rate"] + row["drawn_rate"] + row["lost_rate"] == pytest.approx(1.0)
            assert 1 <= row["mean_steps"] <= 250
    # each setting plays its own opponent: on the same seeds the random policy's games differ between them
    assert table["random"]["strong"] != table["random"]["weak"]
    one = evaluate.main(["--config", CONFIG, "--ckpt_path", ckpt, "--episodes", "8", "--policies",
                         "--settings", '{"static": {"opponent": "static"}}', SMALL])
    assert set(one) == {"dqn"} and set(one["dqn"]) == {"static"}
