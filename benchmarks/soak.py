"""Soak: a run killed (SIGKILL) and resumed in a new process every few minutes ends with exactly the weights of
the same run without the kills, with flat memory and TensorBoard steps that continue without a gap or a repeat.

    python -m benchmarks.soak [--config configs/dvrp_smoke.yaml] [--total_frames 96000] [--kill_every_s 240]
        [--together] [--out DIR]

Two runs of the config (``pipelines.fit`` subprocesses, ``--trainer.default_root_dir`` under ``--out``): the
reference, uninterrupted; and the soaked one, killed with SIGKILL every ``--kill_every_s`` seconds and resumed
from its newest ``last.ckpt`` each time, until it finishes. By default the reference runs first, then the soaked
run (each alone on the machine); ``--together`` runs them at the same time (half the wall time; memory and
weights are unaffected). Each process's resident memory is sampled every second (``/proc/<pid>/status``).

Prints one JSON object: ``identical`` (every tensor of the final checkpoints' weights, optimiser state, data
module state and RNG states equal, bit for bit), ``mismatched`` (the keys that differ), frames and wall time of
each run, the kills, ``memory`` (peak, first and last minute's mean, and the least-squares slope after the
first minute, MB/min) of the reference run and of each soaked segment, and ``tensorboard``: whether the soaked
run's one TensorBoard run (each resume continues in its folder) has exactly the reference's steps.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Sampler(threading.Thread):
    """Samples a process's resident memory (MB) once a second, with the time since its start (s)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.samples, self.start_time = pid, [], time.monotonic()

    def run(self) -> None:
        while True:
            try:
                with open(f"/proc/{self.pid}/status") as f:
                    rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
            except (OSError, StopIteration):
                return
            self.samples.append((time.monotonic() - self.start_time, rss / 1024))
            time.sleep(1.0)


def memory(samples: list[tuple[float, float]]) -> dict:
    """Peak, first and last minute's mean, and the least-squares slope (MB/min) after the first minute."""
    if not samples:
        return {}
    t = torch.tensor([s[0] for s in samples], dtype=torch.float64)
    m = torch.tensor([s[1] for s in samples], dtype=torch.float64)
    late = t > 60
    slope = float("nan")
    if late.sum() > 10:
        tl, ml = t[late] / 60, m[late]
        slope = float(((tl - tl.mean()) * (ml - ml.mean())).sum() / ((tl - tl.mean()) ** 2).sum())
    return {"peak_mb": round(float(m.max()), 1), "first_min_mb": round(float(m[t <= 60].mean()), 1),
            "last_min_mb": round(float(m[t >= t[-1] - 60].mean()), 1), "slope_mb_per_min": round(slope, 3),
            "seconds": round(float(t[-1]), 1)}


def start(config: str, root: str, total_frames: int, ckpt: str | None) -> subprocess.Popen:
    command = [sys.executable, "-m", "pipelines.fit", "--config", config, f"--trainer.default_root_dir={root}",
               f"--data.init_args.total_frames={total_frames}"]
    if ckpt is not None:
        command.append(f"--ckpt_path={ckpt}")
    return subprocess.Popen(command, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def newest_last(root: str) -> str | None:
    found = glob.glob(os.path.join(root, "**", "last.ckpt"), recursive=True)
    return max(found, key=os.path.getmtime) if found else None


def reference(config: str, root: str, total_frames: int) -> dict:
    began = time.monotonic()
    proc = start(config, root, total_frames, None)
    sampler = Sampler(proc.pid)
    sampler.start()
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"the reference run failed ({proc.returncode}): {err[-2000:]}")
    return {"seconds": round(time.monotonic() - began, 1), "memory": memory(sampler.samples)}


def soaked(config: str, root: str, total_frames: int, kill_every_s: float) -> dict:
    """Run, kill every ``kill_every_s`` seconds, resume from the newest last.ckpt, until the run finishes."""
    began, segments, ckpt = time.monotonic(), [], None
    while True:
        proc = start(config, root, total_frames, ckpt)
        sampler = Sampler(proc.pid)
        sampler.start()
        try:
            proc.wait(timeout=kill_every_s)
            killed = False
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed = True
        err = proc.stderr.read()
        segments.append({"resumed_from": ckpt, "killed": killed, "memory": memory(sampler.samples)})
        if not killed:
            if proc.returncode != 0:
                raise RuntimeError(f"a soaked segment failed ({proc.returncode}): {err[-2000:]}")
            break
        ckpt = newest_last(root)
        if ckpt is None:
            raise RuntimeError("killed before the first checkpoint: raise --kill_every_s")
    return {"seconds": round(time.monotonic() - began, 1), "segments": segments}


def _walk(u, v, key: str, rows: int | None = None, *, mismatched: list[str]) -> None:
    """Append to ``mismatched`` the dotted keys under ``key`` where the states ``u`` and ``v`` differ; a tensor
    compares only its first ``rows`` rows when given (a replay buffer's written part)."""
    walk = partial(_walk, mismatched=mismatched)
    if isinstance(u, dict) and isinstance(v, dict) and isinstance(u.get("_writer"), dict) and "_storage" in u:
        # a replay buffer: its storage's rows (dim 0) past the writes were never written (uninitialised
        # memory, saved as it is); a storage that has wrapped around is compared whole
        writes = u["_writer"].get("_write_count")
        walk({k: w for k, w in u.items() if k != "_storage"}, {k: w for k, w in v.items() if k != "_storage"}, key)
        walk(u["_storage"], v.get("_storage"), f"{key}._storage", writes)
    elif isinstance(u, dict) and isinstance(v, dict):
        for k in set(u) | set(v):
            walk(u.get(k), v.get(k), f"{key}.{k}" if key else str(k), rows)
    elif isinstance(u, (list, tuple)) and isinstance(v, (list, tuple)) and len(u) == len(v):
        for i, (p, q) in enumerate(zip(u, v, strict=True)):
            walk(p, q, f"{key}[{i}]", rows)
    elif isinstance(u, torch.Tensor) and isinstance(v, torch.Tensor):
        if rows is not None and u.dim() > 0 and u.shape == v.shape and rows < u.shape[0]:
            u, v = u[:rows], v[:rows]
        if u.shape != v.shape or u.dtype != v.dtype or not torch.equal(u, v):
            mismatched.append(key)
    elif u != v:
        mismatched.append(key)


def compare(a: str, b: str) -> list[str]:
    """The keys (dotted) of the two checkpoints whose values differ (tensors bit for bit, the rest by ==): weights,
    optimiser state, RNG states and frame counter, Lightning's loop counters, the data module's state (env,
    replay buffer) and the callbacks' states (all but the checkpoint callback's, which names its folder)."""
    x, y = (torch.load(p, map_location="cpu", weights_only=True) for p in (a, b))
    mismatched: list[str] = []
    walk = partial(_walk, mismatched=mismatched)
    for key in ("state_dict", "optimizer_states", "rl_state", "global_step", "epoch", "loops"):
        walk(x.get(key), y.get(key), key)
    for key in x:
        if isinstance(key, str) and key.endswith("DataModule"):
            walk(x[key], y.get(key), key)
    for key, state in x.get("callbacks", {}).items():  # (ModelCheckpoint's state names its own folder)
        if not str(key).startswith("ModelCheckpoint"):
            walk(state, y.get("callbacks", {}).get(key), f"callbacks.{key}")
    return sorted(mismatched)


def tensorboard_steps(root: str, reference: str, tag: str = "train/loss") -> dict:
    """The soaked run's TensorBoard steps under ``tag`` (one run folder: each resume continues in it, replacing
    the steps the killed part logged after its checkpoint) against the reference run's: equal means no gap and
    no repeat."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def steps(folder: str) -> list[int]:
        versions = glob.glob(os.path.join(folder, "runs", "*", "version_*"))
        events = EventAccumulator(versions[0], size_guidance={"scalars": 0}) if len(versions) == 1 else None
        if events is None:
            return []
        events.Reload()
        return [e.step for e in events.Scalars(tag)] if tag in events.Tags()["scalars"] else []

    soaked, ref = steps(root), steps(reference)
    return {"steps": len(soaked), "reference_steps": len(ref), "same_as_reference": bool(ref) and soaked == ref}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=os.path.join(REPO, "configs", "dvrp_smoke.yaml"))
    parser.add_argument("--total_frames", type=int, default=96_000)
    parser.add_argument("--kill_every_s", type=float, default=240.0)
    parser.add_argument("--together", action="store_true", help="run the reference and the soaked run at once")
    parser.add_argument("--out", default=None, help="folder for the two runs (default: a temporary one)")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="soak_")
    ref_root, soak_root = os.path.join(out, "reference"), os.path.join(out, "soaked")
    result = {"config": os.path.relpath(args.config, REPO), "total_frames": args.total_frames,
              "kill_every_s": args.kill_every_s, "together": args.together, "out": out}
    if args.together:
        box = {}
        thread = threading.Thread(target=lambda: box.update(reference=reference(args.config, ref_root,
                                                                                args.total_frames)))
        thread.start()
        result["soaked"] = soaked(args.config, soak_root, args.total_frames, args.kill_every_s)
        thread.join()
        result["reference"] = box["reference"]
    else:
        result["reference"] = reference(args.config, ref_root, args.total_frames)
        result["soaked"] = soaked(args.config, soak_root, args.total_frames, args.kill_every_s)
    segments = result["soaked"]["segments"]
    result["kills"] = sum(s["killed"] for s in segments)
    result["mismatched"] = compare(newest_last(ref_root), newest_last(soak_root))
    result["identical"] = not result["mismatched"]
    result["tensorboard"] = tensorboard_steps(soak_root, ref_root)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
