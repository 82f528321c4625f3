"""Benchmark instance files (Solomon text layout, VRPLIB ``.vrp``) as a source of DVRP episodes.

Each episode draws one file uniformly at random, N distinct customers of it and their arrival order
(a uniformly random ordered subset). The file supplies depot, horizon H (the depot's due time),
windows, service times, demands and (unless overridden) the vehicle capacity; the shift slot is each
customer's own window width. Types and attributes are drawn as in the generator. Files are read
once, from paths the user gives; nothing is shipped with the project.
"""

from __future__ import annotations

import glob
import math
import os

import numpy as np
import torch
import vrplib
from tensordict import TensorDict
from torch import Tensor

from envs import rng
from envs.dvrp.generator import _FILE, _PICK, assemble


def read_instance_file(path: str) -> dict[str, np.ndarray | float | str]:
    """Read one VRPTW file: Solomon text layout (``.txt``) or VRPLIB (``.vrp``), via ``vrplib``.

    Returns:
        dict with ``name``, ``xy`` ``[C + 1, 2]`` (row 0 = depot), ``demand``, ``ready``, ``due``,
        ``service`` (each ``[C + 1]``) and ``capacity`` (float).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file cannot be parsed, or misses coordinates / demands / time windows, or its
            depot is not the first node; or a value is out of range: a number that is not finite, a negative
            demand or service time, a time window that closes before it opens, a demand above the capacity, a
            capacity that is not positive. The message names the file (and the line of the value).
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"instance file not found: {path!r}")
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".txt", ".vrp"):
        raise ValueError(f"instance file {path!r}: unknown extension {ext!r} (allowed: .txt Solomon, .vrp VRPLIB)")
    raw = _read_sections(path, ext)
    xy = np.asarray(raw["node_coord"], dtype=np.float64)
    n = xy.shape[0]
    service = np.broadcast_to(np.asarray(raw.get("service_time", 0.0), dtype=np.float64), (n,)).copy()
    service[0] = 0.0
    tw = np.asarray(raw["time_window"], dtype=np.float64)
    demand = np.asarray(raw["demand"], dtype=np.float64)
    if xy.ndim != 2 or xy.shape[1] != 2 or tw.shape != (n, 2) or demand.shape != (n,) or n < 2:
        raise ValueError(f"instance file {path!r} is malformed: inconsistent section sizes "
                         f"(coords {xy.shape}, windows {tw.shape}, demands {demand.shape})")
    ready, due = tw[:, 0], tw[:, 1]
    capacity = float(raw["capacity"])
    _check_values(path, ext, demand, service, ready, due, capacity)
    return dict(name=str(raw.get("name", os.path.basename(path))), xy=xy, demand=demand, ready=ready,
                due=due, service=service, capacity=capacity)


def _read_sections(path: str, ext: str) -> dict:
    """vrplib's sections of the file, checked to have coordinates, demands, time windows, a capacity and the depot
    as the first node."""
    _reject_non_finite(path)  # vrplib would read "nan" into an integer section as some integer
    try:
        raw = vrplib.read_instance(path, instance_format="solomon" if ext == ".txt" else "vrplib",
                                   compute_edge_weights=False)
    except Exception as err:  # vrplib raises many types on malformed input
        raise ValueError(f"instance file {path!r} is malformed: {type(err).__name__}: {err}") from err
    missing = [k for k in ("node_coord", "demand", "time_window", "capacity") if k not in raw]
    if missing:
        raise ValueError(f"instance file {path!r} is malformed: missing {', '.join(missing)}")
    depot = np.atleast_1d(raw.get("depot", [0]))
    if len(depot) != 1 or int(depot[0]) != 0:
        raise ValueError(f"instance file {path!r}: the depot must be the first node (got depots {depot.tolist()})")
    return raw


def _check_values(path: str, ext: str, demand: np.ndarray, service: np.ndarray, ready: np.ndarray,
                  due: np.ndarray, capacity: float) -> None:
    """Raise ``ValueError`` naming the file and line of the first value out of range (node 0 is the depot)."""
    n = demand.shape[0]
    checks = [("demand", "demand", demand < 0, "is negative"),
              ("service time", "service", service < 0, "is negative"),
              ("time window", "time_window", due < ready, "closes before it opens"),
              ("time window", "time_window", (due <= ready) & (np.arange(n) > 0),
               "is empty (it opens when it closes: a customer's window must be open for a positive time)"),
              ("time window", "time_window", (np.arange(n) == 0) & (due <= 0),
               "closes at time 0 (the day has no time to serve anyone)"),
              ("time window", "time_window", (ready >= due[0]) & (np.arange(n) > 0),
               f"opens when the depot has closed (at {due[0]:g})"),
              ("demand", "demand", demand > capacity, f"is above the capacity {capacity:g}")]
    if capacity <= 0:
        raise ValueError(f"instance file {path!r}, line {_line(path, ext, 'capacity', 0)}: the capacity "
                         f"{capacity:g} is not a positive number")
    for name, field, bad, what in checks:
        if bad.any():
            node = int(np.flatnonzero(bad)[0])
            raise ValueError(f"instance file {path!r}, line {_line(path, ext, field, node)}: the {name} of node "
                             f"{node} ({'the depot' if node == 0 else 'a customer'}) {what}")


def _reject_non_finite(path: str) -> None:
    """Raise ``ValueError`` naming the file and line of the first number that is not finite (nan, inf)."""
    with open(path, errors="replace") as f:
        for number, line in enumerate(f, start=1):
            for token in line.replace(":", " ").split():
                try:
                    value = float(token)
                except ValueError:
                    continue
                if not math.isfinite(value):
                    raise ValueError(f"instance file {path!r}, line {number}: {token!r} is not a finite number")


_SECTIONS = {"xy": "NODE_COORD_SECTION", "demand": "DEMAND_SECTION", "time_window": "TIME_WINDOW_SECTION",
             "service": "SERVICE_TIME_SECTION"}


def _line(path: str, ext: str, field: str, node: int) -> int | str:
    """The 1-based line of ``path`` that holds ``field`` of ``node`` (0 = the depot), for error messages: in a
    Solomon text file the node's row of seven numbers (the capacity: the row after the ``CAPACITY`` heading); in
    a VRPLIB file the node's row of the field's section (the ``CAPACITY`` / ``SERVICE_TIME`` header where the
    file gives one value). ``?`` where the layout is not the expected one."""
    with open(path) as f:
        lines = f.read().splitlines()
    if ext == ".txt":
        if field == "capacity":
            heading = [i for i, line in enumerate(lines) if "CAPACITY" in line.upper()]
            return heading[0] + 2 if heading else "?"
        rows = [i for i, line in enumerate(lines) if len(line.split()) == 7 and line.split()[0].isdigit()]
        return rows[node] + 1 if node < len(rows) else "?"
    headers = {line.split(":")[0].strip().upper(): i for i, line in enumerate(lines)}
    section = _SECTIONS.get(field)
    if section in headers:
        return headers[section] + 2 + node
    header = {"capacity": "CAPACITY", "service": "SERVICE_TIME"}.get(field)
    return headers[header] + 1 if header in headers else "?"


def expand_instance_paths(pattern: str) -> list[str]:
    """Sorted files matching a glob (or one path). Raises ``FileNotFoundError`` when nothing matches."""
    paths = sorted(glob.glob(os.path.expanduser(pattern)))
    if not paths:
        raise FileNotFoundError(f"env.instances={pattern!r} matches no file")
    return paths


class FileInstances:
    """Episodes drawn from benchmark files; see the module docstring.

    Args:
        paths: instance files (``.txt`` Solomon or ``.vrp`` VRPLIB).
        num_customers: N customers drawn per episode (at most the smallest file's customer count).
        type_mix: ``[K]`` type probabilities; ``separation``: attribute separation.
        capacity: vehicle capacity override; ``None`` takes each file's own.

    Raises:
        FileNotFoundError / ValueError: from :func:`read_instance_file`, or a file with fewer than N customers.
    """

    def __init__(self, paths: list[str], num_customers: int, type_mix: Tensor, separation: float,
                 capacity: float | None = None) -> None:
        files = [read_instance_file(p) for p in paths]
        for p, f in zip(paths, files, strict=True):
            if f["xy"].shape[0] - 1 < num_customers:
                raise ValueError(f"instance file {p!r} has {f['xy'].shape[0] - 1} customers, fewer than "
                                 f"env.num_customers={num_customers}")
        self.names = [f["name"] for f in files]
        self.num_customers = num_customers
        self.type_mix = type_mix
        self.separation = separation
        width = max(f["xy"].shape[0] for f in files)

        def pad(key: str) -> Tensor:
            out = np.zeros((len(files), width) + files[0][key].shape[1:])
            for i, f in enumerate(files):
                out[i, : f[key].shape[0]] = f[key]
            return torch.as_tensor(out, dtype=torch.float64)

        self.xy, self.demand, self.ready = pad("xy"), pad("demand"), pad("ready")
        self.due, self.service = pad("due"), pad("service")
        self.count = torch.tensor([f["xy"].shape[0] - 1 for f in files])
        self.capacity = torch.tensor([capacity if capacity is not None else f["capacity"] for f in files],
                                     dtype=torch.float64)

    def sample(self, key: Tensor, dtype: torch.dtype = torch.float32) -> TensorDict:
        """One episode per key: int64 ``[R]`` -> instance TensorDict ``[R]`` (see ``generator``)."""
        n, device = self.num_customers, key.device
        nfiles, width = self.xy.shape[0], self.xy.shape[1]
        f = (rng.uniform(key, _FILE, (), torch.float64) * nfiles).long().clamp_max(nfiles - 1).cpu()
        scores = rng.uniform(key, _PICK, (width - 1,), torch.float64).cpu()
        scores = scores.masked_fill(torch.arange(width - 1) >= self.count[f].unsqueeze(-1), -1.0)
        pick = scores.topk(n, dim=-1).indices + 1  # customer rows, in a uniformly random order
        rows = f.unsqueeze(-1)

        def take(t: Tensor) -> Tensor:
            return t[rows, pick].to(dtype=dtype, device=device)

        return assemble(key, self.type_mix, self.separation, depot=self.xy[f, 0].to(dtype=dtype, device=device),
                        horizon=self.due[f, 0].to(dtype=dtype, device=device),
                        capacity=self.capacity[f].to(dtype=dtype, device=device), xy=take(self.xy),
                        demand=take(self.demand), service=take(self.service), ready=take(self.ready),
                        due=take(self.due))
