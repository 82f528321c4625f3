"""Emulated games (stable-retro consoles, ALE Atari) as TorchRL envs: :class:`GameConfig` builds them
(:mod:`envs.games.config`); :mod:`envs.games.emulators` is the emulator side, which imports no torch (the
emulator processes import only it). Names are imported on first use, as in :mod:`envs`."""

from __future__ import annotations

from envs.lazy import lazy_exports

_EXPORTS = {"GameConfig": "envs.games.config", "GameVectorEnv": "envs.games.config",
            "ResizeFrames": "envs.games.config"}

__all__ = list(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
