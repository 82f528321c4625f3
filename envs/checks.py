"""Invariant checks of batched envs that cost no host synchronisation on an accelerator."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


class Checks:
    """The per-row invariant checks of a batched env or its cost oracle: an action outside its mask, a step past
    the episode's end, an insertion that was not quoted feasible.

    Reading a flag from the device is a host synchronisation, which on a GPU stalls the stream: four of them
    per step of the DVRP env (counted on an H200, 2026-11-26). With ``defer`` set (the envs set it on every device
    but the CPU), a check ORs its flags on the device and :meth:`read` reads every pending check in one transfer,
    together with a flag the caller needs anyway: the env's done flags, once per ``step_and_maybe_reset``
    (:meth:`envs.seeding.NativeBatchedEnv.any_done`), and its resets. The error is then raised after the faulty step
    has run, inside the same ``step_and_maybe_reset`` call, so a collector never returns its data; the env's state
    is broken by then, as the run stops anyway. Without ``defer`` the check raises before the step changes
    anything.

    Args:
        defer: OR the flags on the device and raise at :meth:`read` (else: raise at once).
    """

    def __init__(self, defer: bool = False) -> None:
        self.defer = defer
        self._pending: dict[str, tuple[Tensor, Callable[[Tensor], Exception]]] = {}

    def __call__(self, key: str, bad: Tensor, error: Callable[[Tensor], Exception]) -> None:
        """Raise ``error(bad)`` if any of ``bad`` (bool ``[B]``: the faulty rows) is set: at once, or at the next
        :meth:`read` under ``defer`` (flags of the same ``key`` are OR-ed until then, so memory stays bounded).

        Raises:
            Exception: ``error(bad)``, at once where the check is not deferred.
        """
        if not self.defer:
            if bool(bad.any()):
                raise error(bad)
            return
        pending = self._pending.get(key)
        self._pending[key] = (bad if pending is None else pending[0] | bad, error)

    def read(self, flag: Tensor | None = None) -> bool:
        """Raise the first pending check's error if any of its rows is set, then forget them; return ``flag``
        (a one-element bool tensor, e.g. ``done.any()``) as a Python bool, read in the same host transfer
        (False when None).

        Raises:
            Exception: the error of the first pending check with a faulty row.
        """
        if not self._pending:
            return flag is not None and bool(flag)
        pending, self._pending = self._pending, {}
        flags = [bad.any() for bad, _ in pending.values()]
        if flag is not None:
            flags.append(flag.reshape(()))
        values = torch.stack(flags).tolist()
        for (bad, error), value in zip(pending.values(), values, strict=False):  # (values may end with flag's)
            if value:
                raise error(bad)
        return flag is not None and values[-1]


def rows_of(bad: Tensor, limit: int = 5) -> list[int]:
    """The first ``limit`` faulty rows of ``bad`` (bool ``[B]``), for error messages."""
    return bad.reshape(-1).nonzero().squeeze(-1)[:limit].tolist()
