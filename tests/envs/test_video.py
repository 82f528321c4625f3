"""Videos: every env that draws itself records one frame per step of an episode, and the files decode to them."""

from __future__ import annotations

import imageio.v2 as imageio
import numpy as np
import pytest
import torch
from PIL import Image, ImageSequence

from envs import make_env
from envs.episodes import play_episodes
from envs.gym import GymConfig
from envs.hockey import HockeyConfig
from envs.vacuum import VacuumConfig
from envs.video import can_render, record_episode, write_video


def _random_policy(env):
    def act(td):
        return env.rand_action(td)
    return act


def _length(config, seed: int) -> int:
    """Row 0's first episode length under the same random policy and seed, from its results."""
    torch.manual_seed(0)
    env = make_env(config, 1, seed)
    results = play_episodes(env, _random_policy(env), 1)
    env.close()
    return int(results["steps"][0]) if "steps" in results else int(results["episode_return"][0])  # CartPole: 1 a step


@pytest.mark.parametrize("config", [HockeyConfig(max_steps=60, max_steps_train=60), VacuumConfig(max_steps=40),
                                    GymConfig("CartPole-v1", render_mode="rgb_array")],
                         ids=["hockey", "vacuum", "cartpole"])
def test_one_frame_per_step_and_files_decode(config, tmp_path):
    expected = _length(config, seed=3)
    torch.manual_seed(0)
    env = make_env(config, 1, 3)
    frames = record_episode(env, _random_policy(env))
    env.close()
    assert len(frames) == expected
    assert len({f.shape for f in frames}) == 1 and frames[0].dtype == np.uint8 and frames[0].shape[2] == 3
    assert len({f.tobytes() for f in frames}) > 1, "the frames show the episode moving"
    write_video(str(tmp_path / "a.mp4"), frames)
    write_video(str(tmp_path / "a.gif"), frames)
    assert imageio.get_reader(str(tmp_path / "a.mp4")).count_frames() == expected
    # a GIF merges identical consecutive frames (Pillow), adding their durations: the clip keeps its length
    with Image.open(tmp_path / "a.gif") as gif:
        durations = [frame.info["duration"] for frame in ImageSequence.Iterator(gif)]
        first = np.asarray(ImageSequence.Iterator(gif)[0].convert("RGB"))
    assert sum(durations) == pytest.approx(expected * 1000 / 25, abs=expected)  # 25 fps, whole milliseconds
    assert np.array_equal(first, frames[0])  # lossless (these pictures have few colours)


def test_gym_env_without_render_mode_cannot_draw():
    env = make_env(GymConfig("CartPole-v1"), 1, 0)
    assert not can_render(env)
    with pytest.raises(ValueError, match="render_mode"):
        record_episode(env, _random_policy(env))
    with pytest.raises(ValueError, match="render_mode"):
        GymConfig("CartPole-v1", backend="serial", render_mode="rgb_array")


def test_a_video_needs_a_known_extension(tmp_path):
    with pytest.raises(ValueError, match=".mp4 or .gif"):
        write_video(str(tmp_path / "a.avi"), [np.zeros((4, 4, 3), np.uint8)])


@pytest.mark.parametrize("extension", [".gif", ".mp4"])
def test_a_video_that_cannot_be_written_leaves_nothing_and_names_a_full_disk(tmp_path, monkeypatch, extension):
    """Issue 38: a full disk mid-write (Pillow's OSError for a GIF; for an MP4, ffmpeg's truncated file that imageio
    reports as written) raises ``ENOSPC`` naming the file, and no partial file is left."""
    import errno
    import os

    frames = [np.full((6, 8, 3), i, dtype=np.uint8) for i in range(5)]
    if extension == ".gif":
        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr("envs.video.gif_bytes", lambda *a, **k: b"GIF89a")
        monkeypatch.setattr("builtins.open", full)
    else:
        def truncated(*args, **kwargs):
            raise OSError("Could not load meta information")

        monkeypatch.setattr(imageio, "get_reader", truncated)

        class Full:
            f_bavail, f_frsize = 0, 4096

        monkeypatch.setattr("os.statvfs", lambda folder: Full())
    path = tmp_path / f"episode{extension}"
    with pytest.raises(OSError) as err:
        write_video(str(path), frames)
    assert err.value.errno == errno.ENOSPC and (extension == ".gif" or err.value.filename == str(path))
    assert os.listdir(tmp_path) == []  # neither the video nor its temporary file
