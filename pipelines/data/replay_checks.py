"""A checkpoint's replay state checked against the buffer it is loaded into and the env's specs before it is used
(restored state is data: :mod:`envs.restored`): the buffer's own state (:func:`check_replay_state`, loaded by
TorchRL) and the steps its n-step transform held back (:func:`load_pending_steps`)."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import Tensor
from torchrl.data import TensorDictReplayBuffer

from envs import EnvSpecs
from envs.restored import RestoredStateError, restored_mapping, restored_number, restored_tensor
from pipelines.compat import set_transform_buffer
from pipelines.data.replay import PrioritizedSampler, transforms


def check_replay_state(state: object, buffer: TensorDictReplayBuffer, rows: int, specs: EnvSpecs | None = None) -> None:
    """Check a checkpoint's replay buffer state (TorchRL's ``state_dict``) against ``buffer`` (``rows`` items per
    time step) before it is loaded: every stored entry ``[capacity / rows, rows, ...]``, its filled part finite, the
    fill count and the write cursor within the capacity, a prioritised sampler's priorities of its shape, finite
    and non-negative; with the env's ``specs``, the entries of the kinds the env gives (:func:`check_entries`).

    Raises:
        RestoredStateError: names the first entry that is not what this buffer saves.
    """
    state = restored_mapping(state, "replay_buffer", ("_storage", "_writer"))
    storage = restored_mapping(state["_storage"], "replay_buffer._storage", ("_storage", "_len"))
    capacity, steps = buffer.storage.max_size, buffer.storage.max_size // rows
    filled = restored_number(storage["_len"], "replay_buffer._storage._len", low=0, high=capacity)
    writer = restored_mapping(state["_writer"], "replay_buffer._writer", ("_cursor",))
    restored_number(writer["_cursor"], "replay_buffer._writer._cursor", low=0, high=steps)
    for key, value in restored_mapping(storage["_storage"], "replay_buffer._storage._storage").items():
        name = f"replay_buffer._storage._storage.{key}"
        if not isinstance(value, Tensor) or value.dim() < 2 or tuple(value.shape[:2]) != (steps, rows):
            found = list(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise RestoredStateError(f"{name} is {found}, this buffer stores [{steps}, {rows}, ...]")
        restored_tensor(value[:-(-filled // rows)], name)
    if specs is not None:
        check_entries(storage["_storage"], -(-filled // rows), specs)
    sampler = getattr(buffer, "_sampler", None)
    if isinstance(sampler, PrioritizedSampler):
        saved = restored_mapping(state.get("_sampler"), "replay_buffer._sampler", ("priority", "max"))
        restored_tensor(saved["priority"], "replay_buffer._sampler.priority", sampler.state_dict()["priority"], low=0)
        restored_number(saved["max"], "replay_buffer._sampler.max", integer=False, low=0)


def check_entries(stored: dict, steps: int, specs: EnvSpecs, where: str = "replay_buffer._storage._storage") -> None:
    """Stored entries (``{dotted key: [steps, rows, ...]}``, the first ``steps`` filled) of the kinds the env gives:
    observations (and ``next.`` ones) of its dtypes, and of its shapes with one agent per row; actions of its action
    spec's dtype and within it (a discrete action one of its choices); done flags boolean.

    Raises:
        RestoredStateError: names the entry and what the env gives.
    """
    observations = specs.example_observation.flatten_keys(".")
    action = specs.agent_action_spec
    for key, value in stored.items():
        name, entry = f"{where}.{key}", key.removeprefix("next.")
        like = (observations[entry] if entry in observations.keys() else action if entry == "action" else None)
        if entry in ("done", "terminated", "truncated") and value.dtype != torch.bool:
            raise RestoredStateError(f"{name} is {value.dtype}, the env's flags are torch.bool")
        if like is None:
            continue
        shape = like.shape[observations.batch_dims:] if entry != "action" else like.shape
        if value.dtype != like.dtype or (specs.num_agents is None and tuple(value.shape[2:]) != tuple(shape)):
            raise RestoredStateError(f"{name} is {value.dtype} {list(value.shape[2:])} per item, the env gives "
                                     f"{like.dtype} {list(shape)}")
        if entry == "action" and not action.is_in(value[:steps].reshape(-1, *action.shape)):
            raise RestoredStateError(f"{name} holds actions outside the env's action spec ({type(action).__name__} "
                                     f"{list(action.shape)}{_choices(action)})")


def _choices(spec) -> str:
    n = getattr(getattr(spec, "space", None), "n", None)
    return f" of {n} choices" if n is not None else ""


def load_pending_steps(buffer: TensorDictReplayBuffer, state: dict, rows: int, specs: EnvSpecs | None = None) -> None:
    """Restore :func:`pending_steps` into the buffer's transforms, each checked first: ``rows`` rows of steps,
    finite, of the env's kinds (:func:`check_entries`, with ``specs``).

    Raises:
        RestoredStateError: names the first entry that is not what this buffer's transforms hold.
    """
    restored_mapping(state, "replay_pending")
    for i, transform in enumerate(transforms(buffer)):
        if str(i) not in state:
            continue
        key = f"replay_pending.{i}"
        entry = restored_mapping(state[str(i)], key, ("data", "batch_size"))
        size = entry["batch_size"]
        if not isinstance(size, list) or len(size) != 2 or size[0] != rows or not isinstance(size[1], int):
            raise RestoredStateError(f"{key}.batch_size={size!r}, this buffer's transforms hold [{rows}, steps]")
        restored_number(size[1], f"{key}.batch_size[1]", low=0, high=1024)
        try:
            held = TensorDict(restored_mapping(entry["data"], f"{key}.data"), batch_size=size)
        except RestoredStateError:
            raise
        except Exception as err:  # (not tensors, or not of the batch size)
            raise RestoredStateError(f"{key}.data is not a batch of {size} steps ({' '.join(str(err).split())[:200]})"
                                     ) from None
        flat = held.flatten_keys(".")
        for name in flat.keys():
            restored_tensor(flat[name], f"{key}.data.{name}")
        if specs is not None:
            check_entries({name: flat[name] for name in flat.keys()}, size[1], specs, f"{key}.data")
        set_transform_buffer(transform, held)
