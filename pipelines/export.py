"""Export a trained policy for deployment:

    python -m pipelines.export --ckpt_path CKPT [--format torchscript|onnx] [--out PATH] [--batch_size B]
        [--device cpu|cuda|cuda:<k>]

The checkpoint alone is enough (:meth:`modules.base.RLModule.load_from_checkpoint`: no config, no env). The
file holds the evaluation policy (greedy Q-values, the most likely action, SAC's squashed mean), traced under
TorchRL's ``ExplorationType.DETERMINISTIC``: ``action = policy(*inputs)``, the inputs batched ``[B, ...]`` in
the order of ``inputs`` in the JSON written beside it (``<out>.json``: each input's key, per-sample shape and
dtype, the action's, and what was exported). A recurrent policy (PPO's ``modules.recurrent.LSTMActorCritic``) takes
``is_init`` and its LSTM states after the observation and returns its next states after the action (the JSON's
``next_states``): start each episode with zero states and ``is_init`` True, and feed each step's states back. A
discrete action is its index (int64), whatever the env's action encoding. TorchScript (``torch.jit.load``)
and ONNX (any ONNX runtime) files run without this package; the ONNX file has a dynamic batch dimension, the
TorchScript one follows the traced ops (batch-independent here).

The policy is traced on ``--device`` (default ``cpu``; the JSON records it), whatever device the run trained on.
Default ``--out``: ``<run folder>/export/<checkpoint stem>.pt`` (``.onnx``); an existing file is never
overwritten (exit 2). Both files are written to temporary files in ``--out``'s folder and renamed into place
together (a stop signal waits for the two renames), so an interrupted export leaves neither file, and its rerun
works. An unreadable checkpoint (empty, truncated, random bytes, objects other than tensors and plain data) or a
device this machine does not have is one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import sys
import threading
import warnings

import torch
from torchrl.envs.utils import ExplorationType, set_exploration_type

from modules.base import RLModule
from modules.loading import read_checkpoint
from pipelines.published_files import STOP_SIGNALS, new_temporary, publish, remove_stale, sync_file
from pipelines.run_config import CommandParser

SUFFIX = {"torchscript": ".pt", "onnx": ".onnx"}
# torch 2.13's default ONNX exporter (torch.export-based) needs onnxscript besides onnx; the TorchScript-based
# one exports the traced policies here (tests/pipelines/test_export.py runs them in onnxruntime)
warnings.filterwarnings("ignore", message="You are using the legacy TorchScript-based ONNX export")


def _name(key) -> str:
    return ".".join(key) if isinstance(key, tuple) else str(key)


def resolve_device(device: str) -> torch.device:
    """The torch device ``device`` names, checked to exist on this machine (``--device`` of ``pipelines.export``
    and ``pipelines.evaluate``).

    Raises:
        ValueError: a name torch does not know, a CUDA device on a machine without one (or with fewer), or another
            accelerator this torch build cannot use (one line naming it).
    """
    try:
        found = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"--device={device!r} is not a device: cpu, cuda or cuda:<index>") from None
    if found.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (found.index or 0) >= count:
            raise ValueError(f"--device={device}: this machine has {count or 'no'} CUDA device{'s' * (count != 1)}"
                             f" (use --device cpu)")
    elif found.type != "cpu":
        try:
            torch.empty(0, device=found)
        except Exception as err:  # (torch's error for a backend it was not built with, or without the hardware)
            raise ValueError(f"--device={device}: not usable here ({type(err).__name__}; use --device cpu)") from None
    return found


def read_module(ckpt_path: str) -> RLModule:
    """The trained module of ``ckpt_path`` (:meth:`modules.base.RLModule.load_from_checkpoint`), after the file is
    checked to read as a training checkpoint (weights only, as ``pipelines.fit --ckpt_path`` checks it).

    Raises:
        ValueError: an empty, truncated or corrupt file, one holding objects other than tensors and plain data, a
            file that is no training checkpoint, or one whose module cannot be rebuilt from it (one line, naming
            the file).
    """
    checkpoint = read_checkpoint(ckpt_path, "--ckpt_path")
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ValueError(f"--ckpt_path={ckpt_path!r} is not a training checkpoint of pipelines.fit (no state_dict)")
    del checkpoint
    return RLModule.load_from_checkpoint(ckpt_path)


def export(ckpt_path: str, fmt: str, out: str, batch_size: int = 1, device: str = "cpu") -> dict:
    """Write ``ckpt_path``'s policy to ``out`` in ``fmt`` and its description to ``out + ".json"``, traced on
    ``device``. Each file is first written to a temporary file in ``out``'s folder; the two are renamed into place
    one after the other with the stop signals (SIGINT, SIGTERM, SIGHUP) held back in between (in the main thread),
    and removed on any error, so an interrupted export leaves both files complete or neither. (A process killed
    outright, or stopped by a signal that has no Python handler while the files are written, may leave its
    temporary files, ``.<name>.<random>.tmp``; they never block another export, and the next export of the same
    name removes them: each export holds a lock on its own temporary files, so only those of no running export go.)

    Returns:
        The description (also written).

    Raises:
        ValueError: an unknown format or device, an unreadable checkpoint (:func:`read_module`), a module whose
            checkpoint records no env specs, or ``out`` (or its JSON) exists.
        NotImplementedError: a policy that cannot be exported (REINFORCE's routing policy).
        ImportError: ``onnx`` format without the ``onnx`` package (``pip install onnx``; ``.[export]``).
    """
    if fmt not in SUFFIX:
        raise ValueError(f"--format={fmt!r} is not allowed: one of {', '.join(SUFFIX)}")
    if fmt == "onnx" and importlib.util.find_spec("onnx") is None:
        raise ImportError("--format=onnx needs the onnx package: pip install onnx (or this project's [export] extra)")
    target = resolve_device(device)
    for path in (out, out + ".json"):
        if os.path.lexists(path):
            raise ValueError(f"{path} exists: an export never overwrites a file (remove it or give --out)")
    module = read_module(ckpt_path)
    if module.env_specs is None:
        raise ValueError(f"{ckpt_path} records no env specs (written before they were recorded): nothing to "
                         f"shape the inputs on")
    module.to(target)
    policy, keys = module.export_policy()
    example = module.export_example()
    inputs = tuple(example.get(key)[:1].expand(batch_size, *example.get(key).shape[1:]).clone().to(target)
                   for key in keys)
    policy.eval()
    folder = os.path.dirname(os.path.abspath(out))
    os.makedirs(folder, exist_ok=True)
    temps: list[str] = []
    locks: list[int] = []
    remove_stale(folder, os.path.basename(out))
    try:
        for _ in range(2):
            path, lock = new_temporary(folder, os.path.basename(out))
            temps.append(path)
            locks.append(lock)
        outputs, output_names = _write(policy, inputs, keys, fmt, temps[0])
        description = _describe(module, ckpt_path, fmt, out, keys, inputs, outputs, output_names, target)
        with open(temps[1], "w") as f:
            json.dump(description, f, indent=1)
        for temp in temps:
            sync_file(temp)
        publish(temps, [out, out + ".json"])
    finally:
        for temp in temps:
            with contextlib.suppress(OSError):
                os.remove(temp)
        for lock in locks:
            os.close(lock)
    return description


def _write(policy: torch.nn.Module, inputs: tuple, keys: list, fmt: str, path: str) -> tuple[tuple, list[str]]:
    """Trace ``policy`` on ``inputs`` under ``ExplorationType.DETERMINISTIC`` into ``path`` in ``fmt``; returns its
    outputs on ``inputs`` (the action, then a recurrent policy's next states) and their names (``action``, then each
    state's ``next.<key>``, named after the inputs that follow ``is_init``)."""
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        outputs = policy(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        output_names = ["action", *(f"next.{_name(k)}" for k in keys[2:len(outputs) + 1])]
        for name, output in zip(output_names, outputs, strict=True):
            if output.is_floating_point() and not bool(torch.isfinite(output).all()):
                raise ValueError(f"the policy's {name} on the example input is not finite: nothing exported")
        if fmt == "torchscript":
            torch.jit.save(torch.jit.trace(policy, inputs), path)
        else:
            names = [_name(k) for k in keys]
            torch.onnx.export(policy, inputs, path, input_names=names, output_names=output_names, dynamo=False,
                              dynamic_axes={n: {0: "batch"} for n in [*names, *output_names]})
    return outputs, output_names


def _describe(module: RLModule, ckpt_path: str, fmt: str, out: str, keys: list, inputs: tuple, outputs: tuple,
              output_names: list[str], device: torch.device) -> dict:
    """The JSON written beside the exported file (``outputs``: a recurrent policy's next states after the action)."""
    action = outputs[0]
    states = [{"key": name, "shape": list(x.shape[1:]), "dtype": str(x.dtype).removeprefix("torch.")}
              for name, x in zip(output_names[1:], outputs[1:], strict=True)]
    return {**({"next_states": states} if states else {}),
        "format": fmt, "file": os.path.basename(out),
        "inputs": [{"key": _name(k), "shape": list(x.shape[1:]), "dtype": str(x.dtype).removeprefix("torch.")}
                   for k, x in zip(keys, inputs, strict=True)],
        "action": {"shape": list(action.shape[1:]), "dtype": str(action.dtype).removeprefix("torch."),
                   "discrete": not action.dtype.is_floating_point},
        "policy": f"{type(module).__module__}.{type(module).__name__} (deterministic)",
        "checkpoint": os.path.abspath(ckpt_path), "frames": module.collected_frames, "device": str(device),
    }


def default_out(ckpt_path: str, fmt: str) -> str:
    """``<run>/export/<stem><suffix>`` for ``<run>/checkpoints/<stem>.ckpt``, else beside the checkpoint."""
    folder = os.path.dirname(os.path.abspath(ckpt_path))
    run = os.path.dirname(folder) if os.path.basename(folder) == "checkpoints" else folder
    stem = os.path.splitext(os.path.basename(ckpt_path))[0]
    return os.path.join(run, "export", stem + SUFFIX[fmt])


class _Stopped(Exception):
    """A stop signal arrived during the export (raised by the handler :func:`main` installs)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum: int, frame) -> None:
    raise _Stopped(signum)


def main(argv: list[str] | None = None) -> dict:
    """The command line (see the module docstring); returns the description.

    Raises:
        SystemExit: 2 for a bad option, checkpoint, device or an existing output (one line on stderr); 128 + the
            signal's number after SIGINT, SIGTERM or SIGHUP (both files written, or neither).
    """
    parser = CommandParser(prog="python -m pipelines.export", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt_path", required=True, help="the trained run's checkpoint")
    parser.add_argument("--format", default="torchscript", choices=list(SUFFIX), help="file format")
    parser.add_argument("--out", default=None, help="the file to write (default <run>/export/<ckpt stem>.pt|.onnx)")
    parser.add_argument("--batch_size", type=int, default=1, help="batch of the traced example inputs")
    parser.add_argument("--device", default="cpu", help="device the policy is traced on (cpu, cuda, cuda:<k>)")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.ckpt_path):
        parser.error(f"--ckpt_path={args.ckpt_path!r}: no such file")
    if args.batch_size < 1:
        parser.error(f"--batch_size must be >= 1, got {args.batch_size}")
    out = args.out or default_out(args.ckpt_path, args.format)
    previous = {}
    if threading.current_thread() is threading.main_thread():  # a signal ends the export through its clean-up
        previous = {s: signal.signal(s, _raise_stopped) for s in STOP_SIGNALS}
    try:
        description = export(args.ckpt_path, args.format, out, args.batch_size, args.device)
    except (ValueError, NotImplementedError, ImportError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except _Stopped as stop:
        written = os.path.isfile(out) and os.path.isfile(out + ".json")
        what = f"{out} and its JSON were written" if written else "nothing written"
        print(f"error: export stopped by {stop}: {what}", file=sys.stderr)
        raise SystemExit(128 + stop.signum) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    inputs = ", ".join(f"{i['key']} {i['shape']} {i['dtype']}" for i in description["inputs"])
    states = "".join(f", {n['key']} {n['shape']}" for n in description.get("next_states", []))
    print(f"{out}: action = policy({inputs}) -> {description['action']['dtype']} {description['action']['shape']}"
          f"{states} per sample (batch first); described in {out}.json")
    return description


if __name__ == "__main__":
    main()
