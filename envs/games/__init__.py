"""Emulated games (stable-retro consoles, ALE Atari) as TorchRL envs: :class:`GameConfig` builds them
(:mod:`envs.games.config`); :mod:`envs.games.emulators` is the emulator side, which imports no torch (the
emulator processes import only it). Names are imported on first use, as in :mod:`envs`."""

from __future__ import annotations

import importlib

_EXPORTS = {"GameConfig": "envs.games.config", "GameVectorEnv": "envs.games.config",
            "ResizeFrames": "envs.games.config"}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'envs.games' has no attribute {name!r}")
