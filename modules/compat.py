"""The modules' uses of other libraries' private APIs, in one place. Each was written for the versions in
:data:`WRITTEN_FOR`; ``tests/test_compat.py`` fails when an installed version differs, so each use is read again
against the new release before the pins move."""

from __future__ import annotations

import torch
from jsonargparse._common import denying_import_path_entry, parsing_settings
from lightning.pytorch.core.mixins.hparams_mixin import _given_hyperparameters
from tensordict.nn.functional_modules import _exclude_td_from_pytree
from torch import Tensor
from torch.utils._pytree import tree_map

WRITTEN_FOR = {"torch": "2.13", "lightning": "2.6", "jsonargparse": "4.53", "tensordict": "0.14"}

__all__ = ["WRITTEN_FOR", "denying_import_path_entry", "exclude_tensordict_from_pytree", "given_hyperparameters",
           "import_path_settings", "lerp_", "optimizer_progress", "optimizer_step_between_hooks",
           "set_import_path_settings", "tree_map"]


def given_hyperparameters() -> dict | None:
    """The config LightningCLI is building the module from, while it builds it (Lightning's context variable
    ``_given_hyperparameters``, which ``save_hyperparameters`` reads), or None."""
    return _given_hyperparameters.get()


def lerp_(targets: list[Tensor], sources: list[Tensor], weight: float) -> None:
    """``t += weight * (s - t)`` for every pair, as one fused kernel per device (``torch._foreach_lerp_``)."""
    torch._foreach_lerp_(targets, sources, weight)


def optimizer_step_between_hooks(optimizer) -> None:
    """A ``LightningOptimizer``'s wrapped torch step between the manual loop's progress calls, which its ``step``
    makes (``_on_before_step`` / ``_on_after_step``), without the strategy's and precision plugin's hook calls."""
    optimizer_progress(optimizer, optimizer.optimizer.step)


def exclude_tensordict_from_pytree() -> None:
    """Remove TensorDict from torch's pytree registry for the rest of the process, as tensordict's
    ``CudaGraphModule`` needs (it warns and does so itself otherwise)."""
    _exclude_td_from_pytree().set()


def optimizer_progress(optimizer, step):
    """``step()`` (which steps the wrapped torch optimiser once, e.g. a CUDA graph's replay) between a
    ``LightningOptimizer``'s progress calls, as :func:`optimizer_step_between_hooks` makes them; a plain torch
    optimiser's just ``step()``. Returns what ``step`` returns."""
    if not hasattr(optimizer, "_on_before_step"):
        return step()
    optimizer._on_before_step()
    out = step()
    optimizer._on_after_step()
    return out


def import_path_settings() -> tuple[dict, bool]:
    """jsonargparse's process-wide import-path policy as it is now: its verdicts (``{entry: allowed}``) and whether
    they are enforced (its ``parsing_settings``; ``set_parsing_settings`` only adds entries, it has no getter)."""
    return dict(parsing_settings["import_path_verdicts"]), bool(parsing_settings["import_paths_enforced"])


def set_import_path_settings(settings: tuple[dict, bool]) -> None:
    """Put back the import-path policy :func:`import_path_settings` read."""
    parsing_settings["import_path_verdicts"], parsing_settings["import_paths_enforced"] = dict(settings[0]), settings[1]
