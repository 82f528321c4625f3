"""The pipelines' uses of other libraries' private APIs, in one place. Each was written for the versions in
:data:`WRITTEN_FOR`; ``tests/test_compat.py`` fails when an installed version differs, so each use is read again
against the new release before the pins move."""

from __future__ import annotations

from jsonargparse._common import debug_mode_active
from tensordict import TensorDict

WRITTEN_FOR = {"jsonargparse": "4.53", "lightning": "2.6", "torchrl": "0.14", "ray": "2.60"}

__all__ = ["WRITTEN_FOR", "collector_carry", "ddp_finds_unused_parameters", "debug_mode_active",
           "ray_actor_state", "set_collector_carry", "set_logger_purge_step",
           "set_transform_buffer", "transform_buffer"]


def set_logger_purge_step(logger, step: int) -> None:
    """Make a Lightning ``TensorBoardLogger`` whose ``SummaryWriter`` is not made yet purge events from ``step`` on
    (the writer's ``purge_step``, read from the logger's ``_kwargs`` when the writer is made)."""
    logger._kwargs["purge_step"] = step


def transform_buffer(transform) -> TensorDict | None:
    """The steps a TorchRL ``MultiStepTransform`` holds back to complete their n-step returns with the next batch
    (its ``_buffer``; it does not save them itself), or None."""
    return getattr(transform, "_buffer", None)


def set_transform_buffer(transform, data: TensorDict) -> None:
    """Put the steps a TorchRL ``MultiStepTransform`` holds back (its ``_buffer``) in place, as a checkpoint kept
    them."""
    transform._buffer = data


def collector_carry(collector, keys: list) -> dict | None:
    """Copies of the entries ``keys`` that a TorchRL ``Collector`` carries from its last step to its next (its
    ``_carrier``, e.g. a recurrent policy's states and ``is_init``), or None before it has any."""
    carrier = getattr(collector, "_carrier", None)
    return None if carrier is None else {key: carrier.get(key).clone() for key in keys}


def set_collector_carry(collector, carry: dict) -> None:
    """Put :func:`collector_carry`'s entries back into a TorchRL ``Collector``'s ``_carrier`` (after its first reset,
    before its first step)."""
    for key, value in carry.items():
        collector._carrier.set(key, value.to(collector._carrier.device))


def ray_actor_state(handle) -> dict:
    """Ray's record of an actor (node, pid, state, restarts) from the cluster's control store
    (``ray._private.state``: the public state API needs the dashboard, which the ray extra does not install)."""
    from ray._private import state as gcs

    return gcs.actors(handle._actor_id.hex()) or {}


def ddp_finds_unused_parameters(strategy) -> bool:
    """Whether a Lightning ``DDPStrategy`` was made with ``find_unused_parameters=True`` (``ddp_find_unused_parameters
    _true``): its ``_ddp_kwargs``, the arguments it hands ``DistributedDataParallel`` (no public getter)."""
    return bool(getattr(strategy, "_ddp_kwargs", {}).get("find_unused_parameters", False))
