"""Videos of an agent: the frames of one episode (an env's ``render_frame``), written as MP4 or GIF by imageio
(MP4 through the ffmpeg binary imageio-ffmpeg ships, GIF through Pillow)."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import tempfile
from collections.abc import Callable

import numpy as np
from tensordict import TensorDictBase
from torchrl.envs import EnvBase

from envs import has, unwrap
from envs.episodes import play_episodes

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame (gymnasium's classic-control drawing) opens no display
FORMATS = (".mp4", ".gif")


def can_render(env: EnvBase) -> bool:
    """Whether ``env``'s base env draws its frames (``render_frame(row)``; gymnasium envs built with
    ``render_mode: rgb_array``)."""
    base = unwrap(env)
    return has(base, "render_frame") and getattr(base, "render_mode", "rgb_array") == "rgb_array"


def record_episode(env: EnvBase, policy: Callable[[TensorDictBase], TensorDictBase], max_frames: int | None = None,
                   max_steps: int = 100_000, stochastic: bool = False, sample_seed: int = 0) -> list[np.ndarray]:
    """Row 0's first episode of ``env`` played by ``policy`` (deterministically, or with sampled actions when
    ``stochastic``, seeded ``sample_seed``), one frame after every step
    (the state the step left, before a finished episode is reset), at most ``max_frames``.

    Returns:
        ``T`` frames ``[H, W, 3]`` uint8, T = the episode's steps (or ``max_frames``).

    Raises:
        ValueError: an env that does not draw itself (:func:`can_render`).
    """
    if not can_render(env):
        raise ValueError(f"{type(unwrap(env)).__name__} cannot draw itself (no render_frame, or a gymnasium env "
                         f"without env.render_mode: rgb_array)")
    base, frames, done = unwrap(env), [], False

    def draw(step, finished) -> None:
        nonlocal done
        if not done and (max_frames is None or len(frames) < max_frames):
            frames.append(base.render_frame(0))
        done = done or bool(finished[0])

    play_episodes(env, policy, 1, max_steps, on_step=draw, stochastic=stochastic, sample_seed=sample_seed)
    return frames


def write_video(path: str, frames: list[np.ndarray], fps: float = 25.0) -> None:
    """Write ``frames`` (``[H, W, 3]`` uint8, one size) to ``path``: ``.mp4`` (H.264, one video frame per frame)
    or ``.gif`` (looping; Pillow merges identical consecutive frames into one that lasts as long).

    The file appears whole or not at all: it is written to a temporary file in its folder and renamed.

    Raises:
        ValueError: another extension, or no frames.
        OSError: the file could not be written (a full disk is ``ENOSPC`` naming ``path``, whatever the encoder
            said); nothing is left behind.
    """
    extension = os.path.splitext(path)[1].lower()
    if extension not in FORMATS or not frames:
        raise ValueError(f"video {path!r}: needs a {' or '.join(FORMATS)} file name and at least one frame "
                         f"(got {len(frames)})")
    import imageio.v2 as imageio

    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    if extension == ".mp4":  # H.264 in yuv420p needs even sizes: repeat the last row / column where odd
        frames = [np.pad(f, ((0, f.shape[0] % 2), (0, f.shape[1] % 2), (0, 0)), mode="edge") for f in frames]
    fd, temp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=extension, dir=folder)
    os.close(fd)
    try:
        if extension == ".gif":  # encoded in memory, then written: a write error is the OS's own
            data = gif_bytes(frames, fps)
            with open(temp, "wb") as f:
                f.write(data)
        else:  # macro_block_size 1: imageio resizes nothing
            imageio.mimwrite(temp, frames, format="FFMPEG", fps=fps, macro_block_size=1, ffmpeg_log_level="quiet")
            # imageio does not hear of ffmpeg's failed writes (a full disk leaves a truncated file): count them back
            try:
                with imageio.get_reader(temp, format="FFMPEG") as reader:
                    written = reader.count_frames()
            except OSError:  # no readable video at all ("Could not load meta information")
                written = 0
            if written != len(frames):
                raise RuntimeError(f"ffmpeg wrote {written} of {len(frames)} frames")
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except Exception as err:
        with contextlib.suppress(OSError):
            os.remove(temp)
        stats = os.statvfs(folder)
        if not isinstance(err, OSError) and stats.f_bavail * stats.f_frsize < (1 << 20):  # ffmpeg's "broken pipe"
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path) from err
        raise


def gif_bytes(frames: list[np.ndarray], fps: float = 10.0) -> bytes:
    """``frames`` as an animated GIF in memory (TensorBoard shows a GIF image summary as a clip)."""
    import imageio.v2 as imageio

    buffer = io.BytesIO()
    imageio.mimwrite(buffer, frames, format="GIF", duration=1000.0 / fps, loop=0)
    return buffer.getvalue()
