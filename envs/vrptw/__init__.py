"""Static VRPTW route construction: the problem batch (:mod:`~envs.vrptw.problem`), the construction rules
(:mod:`~envs.vrptw.construction`), an instance source drawn from DVRP episodes (:mod:`~envs.vrptw.source`)
and a batched TorchRL env over them (:mod:`~envs.vrptw.env`), the training ground of the neural oracle.

``VRPTWConfig``, ``VRPTWEnv`` and ``DVRPServedSets`` are resolved on first access (PEP 562): the DVRP
package imports the problem and construction modules for its neural oracle, and an eager import of the
source here (which imports the DVRP package) would close an import cycle.
"""

from __future__ import annotations

import importlib

_LAZY = {"VRPTWConfig": "envs.vrptw.config", "VRPTWEnv": "envs.vrptw.env", "DVRPServedSets": "envs.vrptw.source"}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'envs.vrptw' has no attribute {name!r}")
