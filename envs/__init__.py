"""Environments, the one factory that builds any of them from its config (:func:`make_env`), and what a learner
needs to know of an env before it acts in it (:class:`EnvSpecs`).

The names are imported on first use (PEP 562), so that a process that needs one leaf module of ``envs`` imports
only that module's own dependencies: the emulator processes of :mod:`envs.games` import gymnasium and the
emulators, not torch.
"""

from __future__ import annotations

from envs.lazy import lazy_exports

_EXPORTS = {"EnvConfig": "envs.config", "EnvSpecs": "envs.factory", "make_env": "envs.factory",
            "unwrap": "envs.factory", "has": "envs.factory"}

__all__ = list(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
