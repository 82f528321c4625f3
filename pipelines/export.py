"""Export a trained policy for deployment:

    python -m pipelines.export --ckpt_path CKPT [--format torchscript|onnx] [--out PATH] [--batch_size B]

The checkpoint alone is enough (:meth:`modules.base.RLModule.load_from_checkpoint`: no config, no env). The
file holds the evaluation policy (greedy Q-values, the most likely action, SAC's squashed mean), traced under
TorchRL's ``ExplorationType.DETERMINISTIC``: ``action = policy(*inputs)``, the inputs batched ``[B, ...]`` in
the order of ``inputs`` in the JSON written beside it (``<out>.json``: each input's key, per-sample shape and
dtype, the action's, and what was exported). A discrete action is its index (int64), whatever the env's action
encoding. TorchScript (``torch.jit.load``) and ONNX (any ONNX runtime) files run without this package; the ONNX
file has a dynamic batch dimension, the TorchScript one follows the traced ops (batch-independent here).

Default ``--out``: ``<run folder>/export/<checkpoint stem>.pt`` (``.onnx``); an existing file is never
overwritten (exit 2).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import warnings

import torch
from torchrl.envs.utils import ExplorationType, set_exploration_type

from modules.base import RLModule

SUFFIX = {"torchscript": ".pt", "onnx": ".onnx"}
# torch 2.13's default ONNX exporter (torch.export-based) needs onnxscript besides onnx; the TorchScript-based
# one exports the traced policies here (tests/pipelines/test_export.py runs them in onnxruntime)
warnings.filterwarnings("ignore", message="You are using the legacy TorchScript-based ONNX export")


def _name(key) -> str:
    return ".".join(key) if isinstance(key, tuple) else str(key)


def export(ckpt_path: str, fmt: str, out: str, batch_size: int = 1) -> dict:
    """Write ``ckpt_path``'s policy to ``out`` in ``fmt`` and its description to ``out + ".json"``.

    Returns:
        The description (also written).

    Raises:
        ValueError: an unknown format, a module whose checkpoint records no env specs, or ``out`` exists.
        NotImplementedError: a module without a step-wise policy (REINFORCE).
        ImportError: ``onnx`` format without the ``onnx`` package (``pip install onnx``; ``.[export]``).
    """
    if fmt not in SUFFIX:
        raise ValueError(f"--format={fmt!r} is not allowed: one of {', '.join(SUFFIX)}")
    if fmt == "onnx" and importlib.util.find_spec("onnx") is None:
        raise ImportError("--format=onnx needs the onnx package: pip install onnx (or this project's [export] extra)")
    for path in (out, out + ".json"):
        if os.path.exists(path):
            raise ValueError(f"{path} exists: an export never overwrites a file (remove it or give --out)")
    module = RLModule.load_from_checkpoint(ckpt_path)
    if module.env_specs is None:
        raise ValueError(f"{ckpt_path} records no env specs (written before they were recorded): nothing to "
                         f"shape the inputs on")
    policy, keys = module.export_policy()
    example = module.env_specs.example_observation
    inputs = tuple(example.get(key)[:1].expand(batch_size, *example.get(key).shape[1:]).clone() for key in keys)
    policy.eval()
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        action = policy(*inputs)
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        if fmt == "torchscript":
            torch.jit.save(torch.jit.trace(policy, inputs), out)
        else:
            names = [_name(k) for k in keys]
            torch.onnx.export(policy, inputs, out, input_names=names, output_names=["action"], dynamo=False,
                              dynamic_axes={n: {0: "batch"} for n in [*names, "action"]})
    description = {
        "format": fmt, "file": os.path.basename(out),
        "inputs": [{"key": _name(k), "shape": list(x.shape[1:]), "dtype": str(x.dtype).removeprefix("torch.")}
                   for k, x in zip(keys, inputs)],
        "action": {"shape": list(action.shape[1:]), "dtype": str(action.dtype).removeprefix("torch."),
                   "discrete": not action.dtype.is_floating_point},
        "policy": f"{type(module).__module__}.{type(module).__name__} (deterministic)",
        "checkpoint": os.path.abspath(ckpt_path), "frames": module.collected_frames,
    }
    with open(out + ".json", "w") as f:
        json.dump(description, f, indent=1)
    return description


def default_out(ckpt_path: str, fmt: str) -> str:
    """``<run>/export/<stem><suffix>`` for ``<run>/checkpoints/<stem>.ckpt``, else beside the checkpoint."""
    folder = os.path.dirname(os.path.abspath(ckpt_path))
    run = os.path.dirname(folder) if os.path.basename(folder) == "checkpoints" else folder
    stem = os.path.splitext(os.path.basename(ckpt_path))[0]
    return os.path.join(run, "export", stem + SUFFIX[fmt])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m pipelines.export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt_path", required=True, help="the trained run's checkpoint")
    parser.add_argument("--format", default="torchscript", choices=list(SUFFIX), help="file format")
    parser.add_argument("--out", default=None, help="the file to write (default <run>/export/<ckpt stem>.pt|.onnx)")
    parser.add_argument("--batch_size", type=int, default=1, help="batch of the traced example inputs")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.ckpt_path):
        parser.error(f"--ckpt_path={args.ckpt_path!r}: no such file")
    if args.batch_size < 1:
        parser.error(f"--batch_size must be >= 1, got {args.batch_size}")
    out = args.out or default_out(args.ckpt_path, args.format)
    try:
        description = export(args.ckpt_path, args.format, out, args.batch_size)
    except (ValueError, NotImplementedError, ImportError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    inputs = ", ".join(f"{i['key']} {i['shape']} {i['dtype']}" for i in description["inputs"])
    print(f"{out}: action = policy({inputs}) -> {description['action']['dtype']} {description['action']['shape']} "
          f"per sample (batch first); described in {out}.json")
    return description


if __name__ == "__main__":
    main()
