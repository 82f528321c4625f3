"""TorchRL specs as plain data (dicts, lists, strings, numbers and tensors): what a checkpoint read with
``torch.load(weights_only=True)`` can hold, so a trained module can be rebuilt without its env
(:meth:`envs.EnvSpecs.record`). Only the spec families below are known; a record never names a class to import."""

from __future__ import annotations

import torch
from torchrl.data import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    TensorSpec,
    Unbounded,
)

# most specific first: MultiOneHot is a OneHot, MultiCategorical and Binary are Categoricals
_FAMILIES = (("Composite", Composite), ("MultiOneHot", MultiOneHot), ("OneHot", OneHot),
             ("MultiCategorical", MultiCategorical), ("Binary", Binary), ("Categorical", Categorical),
             ("Bounded", Bounded), ("Unbounded", Unbounded))


def spec_record(spec: TensorSpec) -> dict:
    """``spec`` as plain data: ``{"family", "shape", "dtype", ...}`` plus ``n`` (Categorical, OneHot), ``nvec``
    (the Multi- families), ``low`` / ``high`` tensors (Bounded) or ``entries`` (Composite, by key). Masks are
    not kept (they change at every step).

    Raises:
        TypeError: a spec of another family (the message lists the known ones).
    """
    family = next((name for name, cls in _FAMILIES if isinstance(spec, cls)), None)
    if family is None:
        raise TypeError(f"no record for a {type(spec).__name__} spec; known: {', '.join(n for n, _ in _FAMILIES)}")
    record = {"family": family, "shape": list(spec.shape)}
    if family == "Composite":
        record["entries"] = {key: spec_record(entry) for key, entry in spec.items()}
        return record
    record["dtype"] = str(spec.dtype).removeprefix("torch.")
    if family in ("OneHot", "Categorical"):
        record["n"] = int(spec.space.n)
    elif family in ("MultiOneHot", "MultiCategorical"):
        record["nvec"] = spec.nvec.flatten().tolist() if family == "MultiOneHot" else spec.nvec.tolist()
    elif family == "Bounded":
        record["low"], record["high"] = spec.space.low.detach().cpu().clone(), spec.space.high.detach().cpu().clone()
    return record


def spec_from_record(record: dict) -> TensorSpec:
    """The spec :func:`spec_record` recorded (on CPU).

    Raises:
        ValueError: an unknown family or dtype (a damaged record).
    """
    family, shape = record.get("family"), torch.Size(record.get("shape", []))
    if family == "Composite":
        return Composite({key: spec_from_record(entry) for key, entry in record["entries"].items()}, shape=shape)
    dtype = getattr(torch, str(record.get("dtype")), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"spec record: unknown dtype {record.get('dtype')!r}")
    if family in ("OneHot", "Categorical"):
        return (OneHot if family == "OneHot" else Categorical)(record["n"], shape=shape, dtype=dtype)
    if family in ("MultiOneHot", "MultiCategorical"):
        return (MultiOneHot if family == "MultiOneHot" else MultiCategorical)(record["nvec"], shape=shape, dtype=dtype)
    if family == "Binary":
        return Binary(shape=shape, dtype=dtype)
    if family == "Bounded":
        return Bounded(record["low"], record["high"], shape=shape, dtype=dtype)
    if family == "Unbounded":
        return Unbounded(shape=shape, dtype=dtype)
    raise ValueError(f"spec record: unknown family {family!r}; known: {', '.join(n for n, _ in _FAMILIES)}")
