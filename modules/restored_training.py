"""Checks of the training state a resumed fit takes from its checkpoint, against the objects this run built: the
optimisers' states (a moment of another shape made fused Adam read past its memory: a segmentation fault), the
learning-rate schedulers' and Lightning's loop counters. Made between the optimisers' creation and Lightning's
restore of them (``on_fit_start``), so nothing of a refused file is used."""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor

from envs.restored import RestoredStateError, restored_mapping, restored_number, restored_tensor
from modules.import_policy import leaves

# optimiser state entries that are second moments (never negative) and the step counter (a scalar)
NON_NEGATIVE = ("exp_avg_sq", "max_exp_avg_sq", "square_avg", "sum", "acc_delta")
STEP = "step"
COUNTER_MAX = 2**53  # a loop counter or step beyond it is no count a run reaches


def check_training_state(checkpoint: dict, optimizers: list, schedulers: list) -> None:
    """Check ``checkpoint``'s ``optimizer_states``, ``lr_schedulers``, ``loops``, ``epoch`` and ``global_step``
    against this run's ``optimizers`` and ``schedulers`` (built, not yet restored): each optimiser's parameter
    groups as this run's config gives them (the learning rate, which a schedule moves, in [0, 1]), each
    per-parameter tensor of its parameter's shape and dtype and finite, second moments non-negative, steps
    non-negative; each scheduler's entries of the kind this run's has, its base learning rates this run's; every
    loop counter a non-negative integer.

    Raises:
        RestoredStateError: names the first entry that is not what this run saves.
    """
    for index, (state, optimizer) in _paired(checkpoint, "optimizer_states", optimizers):
        _check_optimizer(state, optimizer, f"optimizer_states[{index}]")
    for index, (state, scheduler) in _paired(checkpoint, "lr_schedulers", schedulers):
        _check_like(state, scheduler.state_dict(), f"lr_schedulers[{index}]")
    for key in ("epoch", "global_step"):
        if key in checkpoint:
            restored_number(checkpoint[key], key, low=0, high=COUNTER_MAX)
    for key, value in leaves(checkpoint.get("loops") or {}, "loops"):  # (counters, and a few flags)
        if not isinstance(value, bool) and value is not None:
            restored_number(value, key, low=0, high=COUNTER_MAX)


def _paired(checkpoint: dict, key: str, mine: list) -> Iterator[tuple[int, tuple[object, object]]]:
    """``(index, (saved, this run's))`` for the list ``checkpoint[key]`` (none when the file has no such entry), which
    must hold one entry per object of this run's ``mine``."""
    saved = checkpoint.get(key)
    if saved is None:
        return iter(())
    if not isinstance(saved, list) or len(saved) != len(mine):
        raise RestoredStateError(f"{key} holds {len(saved) if isinstance(saved, list) else type(saved).__name__} "
                                 f"entries, this run has {len(mine)}")
    return enumerate(zip(saved, mine, strict=True))


def _check_optimizer(state: object, optimizer: torch.optim.Optimizer, key: str) -> None:
    fresh = optimizer.state_dict()
    state = restored_mapping(state, key, ("state", "param_groups"))
    groups = state["param_groups"]
    if not isinstance(groups, list) or len(groups) != len(fresh["param_groups"]):
        raise RestoredStateError(f"{key}.param_groups is not a list of this run's {len(fresh['param_groups'])} "
                                 f"parameter groups")
    for g, (group, mine) in enumerate(zip(groups, fresh["param_groups"], strict=True)):
        where = f"{key}.param_groups[{g}]"
        group = restored_mapping(group, where)
        if set(group) != set(mine):
            raise RestoredStateError(f"{where} has the settings {sorted(group)}, this run's {sorted(mine)}")
        for name, value in group.items():
            if name == "lr":
                restored_number(value, f"{where}.lr", integer=False, low=0.0, high=max(1.0, float(mine["lr"])))
            elif not _same(value, mine[name]):
                raise RestoredStateError(f"{where}.{name}={value!r}, this run's config gives {mine[name]!r}")
    params = {i: p for group, mine in zip(optimizer.param_groups, fresh["param_groups"], strict=True)
              for i, p in zip(mine["params"], group["params"], strict=True)}
    per_param = restored_mapping(state["state"], f"{key}.state")
    for index, entries in per_param.items():
        if index not in params:
            raise RestoredStateError(f"{key}.state[{index!r}] is no parameter of this run's optimiser")
        for name, value in restored_mapping(entries, f"{key}.state[{index}]").items():
            where, param = f"{key}.state[{index}].{name}", params[index]
            if name == STEP:
                if isinstance(value, Tensor):
                    restored_tensor(value, where, low=0, high=COUNTER_MAX)
                    if value.numel() != 1:
                        raise RestoredStateError(f"{where} has shape {list(value.shape)}, not a count")
                else:
                    restored_number(value, where, integer=False, low=0, high=COUNTER_MAX)
            elif isinstance(value, Tensor):
                restored_tensor(value, where, param, low=0 if name in NON_NEGATIVE else None)
            else:
                restored_number(value, where, integer=False)


def _check_like(value: object, mine: object, key: str) -> None:
    """``value`` of the kind of ``mine`` (this run's): the same keys and lengths, finite non-negative numbers where
    it has numbers (its ``base_lrs`` equal), tensors of its shapes, other values equal."""
    if isinstance(mine, dict):
        value = restored_mapping(value, key)
        if set(value) != set(mine):
            raise RestoredStateError(f"{key} has the entries {sorted(map(str, value))}, this run's "
                                     f"{sorted(map(str, mine))}")
        for name in mine:
            if name == "base_lrs" and not _same(value[name], mine[name]):
                raise RestoredStateError(f"{key}.base_lrs={value[name]!r}, this run's config gives {mine[name]!r}")
            _check_like(value[name], mine[name], f"{key}.{name}")
    elif isinstance(mine, (list, tuple)):
        if not isinstance(value, (list, tuple)) or len(value) != len(mine):
            raise RestoredStateError(f"{key} is not a list of {len(mine)} entries")
        for i, (item, own) in enumerate(zip(value, mine, strict=True)):
            _check_like(item, own, f"{key}[{i}]")
    elif isinstance(mine, Tensor):
        restored_tensor(value, key, mine)
    elif isinstance(mine, (int, float)) and not isinstance(mine, bool):
        restored_number(value, key, integer=False, low=0 if mine >= 0 else None)
    elif not _same(value, mine):
        raise RestoredStateError(f"{key}={value!r}, this run's is {mine!r}")


def _same(value: object, mine: object) -> bool:
    """Equal plain values, lists and tuples alike, numbers without nan."""
    if isinstance(mine, (list, tuple)):
        return isinstance(value, (list, tuple)) and len(value) == len(mine) and all(
            _same(v, m) for v, m in zip(value, mine, strict=True))
    if isinstance(value, float) and math.isnan(value):
        return False
    return type(value) is type(mine) and value == mine if isinstance(mine, bool) or mine is None else value == mine
