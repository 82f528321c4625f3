"""Sizes that cannot fit, refused before any work (:func:`check_memory`), and an allocation that fails anyway said in
one line (:func:`allocation_failure`): a network of ``hidden_dims: [100000, 100000]`` (80 GB) or an LSTM of a
million units, a replay buffer of 1e11 transitions, a collected batch of 1e9 frames printed the allocator's traceback
(or, where the kernel lets a process over-commit, got it killed by the out-of-memory killer midway).

The estimates are lower bounds from what the config gives: the networks shaped on the env's specs on torch's ``meta``
device (no memory taken, no random draw made; their weights, gradients and Adam's two moments), the bytes of one
frame of the env's example observation (a transition holds it twice), times the buffer's transitions or the batch's
frames. They are compared with the machine's memory (its physical memory, or the control group's limit where that is
lower)."""

from __future__ import annotations

import copy
import dataclasses
import os

import torch
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter

from envs import EnvSpecs
from modules.base import RLModule
from pipelines.compatibility import random_states_kept
from pipelines.data import RLDataModule

GB = 1e9
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
_ALLOCATION_ERRORS = ("can't allocate memory", "not enough memory", "out of memory")


def machine_memory() -> int:
    """Bytes of memory this process may use: the physical memory, or its control group's limit where lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in _CGROUP_LIMITS:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def network_bytes(model: RLModule, specs: EnvSpecs) -> int | None:
    """The bytes of ``model``'s parameters and buffers once shaped on ``specs``, found by shaping a copy on torch's
    ``meta`` device (no memory taken, the random streams untouched), or None where the module cannot be shaped so."""
    try:
        shaped = copy.deepcopy(model)
        for module in shaped.modules():
            for table, uninitialized in ((module._parameters, UninitializedParameter),
                                         (module._buffers, UninitializedBuffer)):
                for name, tensor in list(table.items()):
                    table[name] = _on_meta(tensor, uninitialized)
        example = specs.example_observation.to("meta")
        with random_states_kept(), torch.device("meta"):
            shaped.build_on(dataclasses.replace(specs, example_observation=example))
    except Exception:  # (a module that reads a value while it is shaped: nothing can be said in advance)
        return None
    return sum(t.numel() * t.element_size() for t in (*shaped.parameters(), *shaped.buffers()))


def _on_meta(tensor, uninitialized):
    if tensor is None:
        return None
    if isinstance(tensor, uninitialized):
        return (UninitializedParameter(tensor.requires_grad, device="meta", dtype=tensor.dtype)
                if uninitialized is UninitializedParameter else UninitializedBuffer(device="meta", dtype=tensor.dtype))
    meta = torch.empty_like(tensor, device="meta")
    return torch.nn.Parameter(meta, tensor.requires_grad) if isinstance(tensor, torch.nn.Parameter) else meta


def frame_bytes(specs: EnvSpecs) -> int:
    """Bytes of one frame of the env's observation (every entry of its example observation, one row)."""
    example = specs.example_observation
    rows = max(1, example.batch_size.numel())
    return sum(t.numel() * t.element_size() for t in example.values(True, True)) // rows


def check_memory(model: RLModule, data: RLDataModule, specs: EnvSpecs | None) -> None:
    """Refuse, before any work, a config whose networks, replay buffer or collected batch cannot fit in this
    machine's memory (:func:`machine_memory`), naming the key (see the module docstring for the estimates).

    Raises:
        ValueError: the key, what it needs and what the machine has.
    """
    if specs is None:
        return
    memory = machine_memory()
    have = f"this machine has {memory / GB:.1f} GB"
    weights = network_bytes(model, specs)
    if weights is not None and 4 * weights > memory:
        raise ValueError(f"model.init_args.network: the networks this config builds on its env need at least "
                         f"{4 * weights / GB:,.1f} GB ({weights / GB:,.1f} GB of weights, their gradients and Adam's "
                         f"two moments) and {have}: give them smaller sizes (e.g. hidden_dims)")
    frame = frame_bytes(specs)
    batch = 2 * frame * data.frames_per_batch
    if batch > memory:
        raise ValueError(f"data.collector.frames_per_batch={data.frames_per_batch:,} needs at least "
                         f"{batch / GB:,.1f} GB per collected batch ({frame:,} bytes per observation, twice per "
                         f"frame) and {have}: collect fewer frames per batch")
    options = getattr(data, "replay_options", None)
    if options is not None and options.storage == "tensor" and 2 * frame * options.buffer_size > memory:
        raise ValueError(f"data.replay_buffer.buffer_size={options.buffer_size:,} needs at least "
                         f"{2 * frame * options.buffer_size / GB:,.1f} GB ({frame:,} bytes per observation, twice "
                         f"per transition) and {have}: give a smaller buffer_size, or storage: memmap (on disk)")


def allocation_failure(err: BaseException) -> str | None:
    """The one line for an allocation that failed (torch's allocator, Python's ``MemoryError``) somewhere in ``err``'s
    chain of causes, or None."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        text = " ".join(str(err).split())
        if isinstance(err, MemoryError) or (isinstance(err, RuntimeError) and any(
                e in text.lower() for e in _ALLOCATION_ERRORS)):
            return (f"the run needs more memory than this machine has ({machine_memory() / GB:.1f} GB; "
                    f"{text[:160] or type(err).__name__}): give its networks, batches or buffer smaller sizes")
        err = err.__cause__ or err.__context__
    return None
