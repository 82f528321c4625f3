"""Benchmark instance files (Solomon text, VRPLIB) and the DVRP config's validation."""

from __future__ import annotations

import glob
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from envs.dvrp import DVRPConfig
from envs.dvrp.reader import FileInstances, expand_instance_paths, read_instance_file
from envs.rng import episode_keys

MIX = torch.tensor([0.3, 0.3, 0.2, 0.2], dtype=torch.float64)
ARRAYS = ("xy", "demand", "ready", "due", "service")


# ----------------------------------------------------------------------------- writing small files
def write_solomon(path: Path, depot: tuple, nodes: list[tuple], capacity: int = 200, vehicles: int = 25) -> Path:
    """Solomon text layout; ``depot`` = (x, y, due), ``nodes`` = (x, y, demand, ready, due, service) ints."""
    lines = [path.stem.upper(), "", "VEHICLE", "NUMBER     CAPACITY", f"  {vehicles}         {capacity}", "",
             "CUSTOMER", "CUST NO.  XCOORD.   YCOORD.    DEMAND   READY TIME  DUE DATE   SERVICE   TIME", "",
             f"    0  {depot[0]:8d}  {depot[1]:8d}  {0:8d}  {0:8d}  {depot[2]:8d}  {0:8d}"]
    for i, (x, y, d, a, b, s) in enumerate(nodes, start=1):
        lines.append(f"  {i:3d}  {x:8d}  {y:8d}  {d:8d}  {a:8d}  {b:8d}  {s:8d}")
    path.write_text("\n".join(lines) + "\n")
    return path


def write_vrplib(path: Path, depot: tuple, nodes: list[tuple], capacity: int = 200, vehicles: int = 25) -> Path:
    """VRPLIB layout of the same data (one global service time, as in the Solomon VRPLIB files)."""
    services = {s for *_, s in nodes}
    assert len(services) == 1
    everything = [(depot[0], depot[1], 0, 0, depot[2])] + [n[:5] for n in nodes]
    lines = [f"NAME : {path.stem.upper()}", "TYPE : CVRPTW", f"DIMENSION : {len(everything)}",
             f"VEHICLES : {vehicles}", f"CAPACITY : {capacity}", f"SERVICE_TIME : {services.pop()}",
             "EDGE_WEIGHT_TYPE : EUC_2D", "NODE_COORD_SECTION"]
    lines += [f"{i} {x} {y}" for i, (x, y, *_) in enumerate(everything, start=1)]
    lines.append("DEMAND_SECTION")
    lines += [f"{i} {d}" for i, (_, _, d, _, _) in enumerate(everything, start=1)]
    lines.append("TIME_WINDOW_SECTION")
    lines += [f"{i} {a} {b}" for i, (_, _, _, a, b) in enumerate(everything, start=1)]
    lines += ["DEPOT_SECTION", "1", "-1", "EOF"]
    path.write_text("\n".join(lines) + "\n")
    return path


def random_nodes(count: int, seed: int, service: int = 10, horizon: int = 1000) -> list[tuple]:
    """Customers with distinct demands 1..count (so a drawn customer identifies its file row)."""
    rnd = random.Random(seed)
    nodes = []
    for i in range(count):
        ready = rnd.randrange(0, horizon - 200)
        nodes.append((rnd.randrange(0, 101), rnd.randrange(0, 101), i + 1, ready, ready + rnd.randrange(10, 150),
                      service))
    return nodes


# ----------------------------------------------------------------------------- the two formats agree
def test_synthetic_txt_and_vrp_read_the_same(tmp_path):
    nodes = random_nodes(12, seed=1)
    a = read_instance_file(str(write_solomon(tmp_path / "toy.txt", (35, 45, 900), nodes, capacity=120)))
    b = read_instance_file(str(write_vrplib(tmp_path / "toy.vrp", (35, 45, 900), nodes, capacity=120)))
    expected_xy = np.array([[35, 45]] + [n[:2] for n in nodes], dtype=np.float64)
    for f in (a, b):
        np.testing.assert_array_equal(f["xy"], expected_xy)
        np.testing.assert_array_equal(f["demand"], [0] + [n[2] for n in nodes])
        np.testing.assert_array_equal(f["ready"], [0] + [n[3] for n in nodes])
        np.testing.assert_array_equal(f["due"], [900] + [n[4] for n in nodes])
        np.testing.assert_array_equal(f["service"], [0] + [10] * len(nodes))  # the depot has no service
        assert f["capacity"] == 120.0
        assert all(f[k].dtype == np.float64 for k in ARRAYS)


def test_solomon_txt_and_vrplib_identical(solomon_dir):
    names = sorted(Path(p).stem for p in glob.glob(str(solomon_dir / "solomon_txt" / "*.txt")))
    assert len(names) >= 50
    for name in names:
        a = read_instance_file(str(solomon_dir / "solomon_txt" / f"{name}.txt"))
        b = read_instance_file(str(solomon_dir / "vrplib" / f"{name}.vrp"))
        for key in ARRAYS:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{name}: {key}")
        assert a["capacity"] == b["capacity"], name
        assert a["xy"].shape == (101, 2) and a["service"][0] == 0.0, name
    c101 = read_instance_file(str(solomon_dir / "vrplib" / "C101.vrp"))
    assert c101["capacity"] == 200.0 and c101["due"][0] == 1236.0 and tuple(c101["xy"][0]) == (40.0, 50.0)
    assert c101["service"][1] == 90.0 and (c101["ready"][1], c101["due"][1]) == (912.0, 967.0)


# ----------------------------------------------------------------------------- episodes drawn from files
def _keys(count: int, seed: int = 0) -> torch.Tensor:
    return episode_keys(torch.arange(count) + seed, torch.zeros(count, dtype=torch.long))


def test_file_episodes_draw_distinct_customers_of_one_file(tmp_path):
    files = {  # different sizes, depots, horizons, capacities; demands identify the customer
        "a": ((20, 30, 1000), random_nodes(15, seed=2), 150),
        "b": ((70, 60, 800), random_nodes(12, seed=3, service=5), 90),
    }
    paths = [str(write_solomon(tmp_path / f"{k}.txt", d, nodes, capacity=q)) for k, (d, nodes, q) in files.items()]
    n, count = 10, 400
    source = FileInstances(paths, n, MIX, 1.5)
    inst = source.sample(_keys(count), torch.float64)
    assert inst.batch_size == torch.Size([count])
    used = {"a": 0, "b": 0}
    seen = {"a": set(), "b": set()}
    firsts = set()
    for row in range(count):
        depot = tuple(inst["depot"][row].tolist())
        name = "a" if depot == (20.0, 30.0) else "b"
        (dx, dy, due), nodes, q = files[name]
        assert depot == (dx, dy)
        assert float(inst["horizon"][row]) == due and float(inst["capacity"][row]) == q
        demand = [int(d) for d in inst["demand"][row].tolist()]
        assert len(set(demand)) == n, f"row {row}: a customer drawn twice ({demand})"
        for i, d in enumerate(demand):
            x, y, _, a, b, s = nodes[d - 1]  # demand d is customer d of that file (never padding)
            assert tuple(inst["xy"][row, i].tolist()) == (x, y)
            assert (float(inst["ready"][row, i]), float(inst["due"][row, i])) == (a, b)
            assert float(inst["service"][row, i]) == s
            assert float(inst["slot"][row, i]) == b - a
        used[name] += 1
        seen[name].update(demand)
        firsts.add((name, demand[0]))
    assert min(used.values()) > count * 0.35, used  # the file is drawn uniformly
    assert seen["a"] == set(range(1, 16)) and seen["b"] == set(range(1, 13))
    assert len(firsts) > 15, "arrival orders should vary"
    assert inst["kind"].shape == (count, n) and inst["attributes"].shape == (count, n, 4)
    # a capacity override replaces each file's own
    override = FileInstances(paths, n, MIX, 1.5, capacity=500.0).sample(_keys(8), torch.float32)
    assert bool((override["capacity"] == 500.0).all()) and override["xy"].dtype == torch.float32


def test_benchmark_episodes_draw_distinct_customers(solomon_dir):
    paths = expand_instance_paths(str(solomon_dir / "solomon_txt" / "C1*.txt"))
    files = [read_instance_file(p) for p in paths]
    rows_of = [{tuple(r) for r in np.column_stack([f[k] for k in ("demand", "ready", "due")] + [f["xy"]])[1:]}
               for f in files]
    n = 30
    inst = FileInstances(paths, n, MIX, 1.5).sample(_keys(64, seed=5), torch.float64)
    for row in range(inst.batch_size[0]):
        drawn = np.column_stack([inst[k][row].numpy() for k in ("demand", "ready", "due")] + [inst["xy"][row].numpy()])
        drawn = [tuple(r) for r in drawn]
        assert len(set(drawn)) == n, f"row {row}: repeated customer"
        owners = [i for i, rows in enumerate(rows_of) if set(drawn) <= rows]
        assert owners, f"row {row}: customers of no single file"
        assert float(inst["horizon"][row]) == files[owners[0]]["due"][0]


# ----------------------------------------------------------------------------- errors
def test_missing_file_raises_file_not_found(tmp_path):
    missing = tmp_path / "nowhere" / "R101.txt"
    with pytest.raises(FileNotFoundError, match="R101.txt"):
        read_instance_file(str(missing))
    with pytest.raises(FileNotFoundError, match="R101.txt"):
        FileInstances([str(missing)], 5, MIX, 1.5)


@pytest.mark.parametrize("name,text", [
    ("broken.txt", "this is not\na solomon file\n at all\n"),
    ("broken.vrp", "NAME : X\nNODE_COORD_SECTION\n1 2\n2 x y\nEOF\n"),
    ("short.txt", None),  # Solomon text with a truncated customer line
    ("nowindows.vrp", None),  # VRPLIB without a TIME_WINDOW_SECTION
    ("backwards.txt", None),  # a window that ends before it starts
    ("table.csv", "a,b\n1,2\n"),
])
def test_malformed_file_raises_value_error_naming_it(tmp_path, name, text):
    path = tmp_path / name
    nodes = random_nodes(6, seed=4)
    if name == "short.txt":
        write_solomon(path, (50, 50, 1000), nodes)
        lines = path.read_text().splitlines()
        lines[-1] = "  6  10  20  5"
        path.write_text("\n".join(lines) + "\n")
    elif name == "nowindows.vrp":
        write_vrplib(path, (50, 50, 1000), nodes)
        text = path.read_text()
        head, tail = text.split("TIME_WINDOW_SECTION")
        path.write_text(head + "DEPOT_SECTION" + tail.split("DEPOT_SECTION")[1])
    elif name == "backwards.txt":
        nodes[2] = (1, 2, 3, 500, 400, 10)
        write_solomon(path, (50, 50, 1000), nodes)
    else:
        path.write_text(text)
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        read_instance_file(str(path))
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        DVRPConfig(instances=str(path), num_customers=3)


def test_glob_matching_nothing_raises(tmp_path):
    pattern = str(tmp_path / "*.vrp")
    with pytest.raises(FileNotFoundError, match="matches no file"):
        expand_instance_paths(pattern)
    with pytest.raises(FileNotFoundError, match=r"env\.instances"):
        DVRPConfig(instances=pattern)


def test_file_with_too_few_customers_raises(tmp_path):
    write_solomon(tmp_path / "big.txt", (50, 50, 1000), random_nodes(40, seed=5))
    write_solomon(tmp_path / "small.txt", (50, 50, 1000), random_nodes(5, seed=6))
    with pytest.raises(ValueError, match=r"small\.txt.*env\.num_customers"):
        DVRPConfig(instances=str(tmp_path / "*.txt"), num_customers=30)
    cfg = DVRPConfig(instances=str(tmp_path / "*.txt"), num_customers=5)  # 5 of 5 is allowed
    assert cfg.make(num_envs=2, seed=0).reset()["customers"].shape[:2] == (2, 5)


def test_file_config_takes_files_parameters(tmp_path):
    write_solomon(tmp_path / "one.txt", (50, 50, 777), random_nodes(8, seed=7), capacity=99)
    env = DVRPConfig(instances=str(tmp_path / "one.txt"), num_customers=8, capacity=None).make(num_envs=3, seed=0)
    env.reset()
    assert bool((env.instances["horizon"] == 777.0).all()) and bool((env.instances["capacity"] == 99.0).all())
    # every customer of the file, in some order
    assert sorted(env.instances["demand"][0].tolist()) == list(range(1, 9))


# ----------------------------------------------------------------------------- config validation
@pytest.mark.parametrize("kwargs,key", [
    (dict(num_customers=0), "num_customers"),
    (dict(num_vehicles=0), "num_vehicles"),
    (dict(capacity=0.0), "capacity"),
    (dict(capacity=None), "capacity"),  # generated instances need one
    (dict(max_shift=-1), "max_shift"),
    (dict(type_mix=[0.5, 0.4]), "type_mix"),
    (dict(type_mix=[1.2, -0.2]), "type_mix"),
    (dict(attribute_separation=-1.0), "attribute_separation"),
    (dict(layout="X"), "layout"),
    (dict(oracle="exact"), "oracle"),
    (dict(dtype="float16"), "dtype"),
    (dict(max_demand=0), "max_demand"),
    (dict(num_clusters=0), "num_clusters"),
    (dict(window_width=0.0), "window_width"),
    (dict(service_time=-1.0), "service_time"),
    (dict(horizon=100.0), "horizon"),  # too short for a corner customer's window
])
def test_bad_config_values_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=rf"env\.{key}\b"):
        DVRPConfig(**kwargs)


def test_config_derived_sizes():
    cfg = DVRPConfig(max_shift=2, type_mix=[0.5, 0.5])
    assert cfg.num_actions == 6 and cfg.num_types == 2
    assert DVRPConfig().num_actions == 8 and DVRPConfig().num_types == 4


def _solomon_with(tmp_path: Path, node: int, column: int, value: str) -> tuple[Path, int]:
    """A Solomon file whose customer ``node`` has ``value`` in ``column`` (1 x, 2 y, 3 demand, 4 ready, 5 due,
    6 service); returns the path and that row's 1-based line number."""
    path = write_solomon(tmp_path / "bad.txt", (50, 50, 1000), random_nodes(6, seed=4), capacity=100)
    lines = path.read_text().splitlines()
    row = [i for i, line in enumerate(lines) if line.split()[:1] == [str(node)]][-1]
    fields = lines[row].split()
    fields[column] = value
    lines[row] = "  ".join(fields)
    path.write_text("\n".join(lines) + "\n")
    return path, row + 1


@pytest.mark.parametrize("node,ready,due,message", [
    (3, None, "same", "time window of node 3 .* is empty"),
    (0, None, "0", "time window of node 0 .* closes at time 0"),
    (3, "2000", "2100", "time window of node 3 .* opens when the depot has closed"),
])
def test_windows_the_env_cannot_serve_are_rejected(tmp_path, node, ready, due, message):
    """A customer window of zero width, a depot that closes at time 0 and a window opening after the depot closes
    (the env crashed on the first two mid-run)."""
    path, line = _solomon_with(tmp_path, node, 4, ready) if ready else _solomon_with(tmp_path, node, 4, "0")
    lines = path.read_text().splitlines()
    fields = lines[line - 1].split()
    fields[5] = fields[4] if due == "same" else due
    lines[line - 1] = "  ".join(fields)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"bad\.txt', line {line}: the {message}"):
        read_instance_file(str(path))


@pytest.mark.parametrize("column,value,message", [
    (1, "nan", "'nan' is not a finite number"),
    (4, "inf", "'inf' is not a finite number"),
    (3, "-500", "demand of node 3 .* is negative"),
    (3, "150", "demand of node 3 .* is above the capacity 100"),
    (6, "-1", "service time of node 3 .* is negative"),
    (5, "1", "time window of node 3 .* closes before it opens"),
])
def test_out_of_range_values_are_rejected_naming_file_and_line(tmp_path, column, value, message):
    """Each bad value stops the read (and the config) with the file, the line and what is wrong."""
    path, line = _solomon_with(tmp_path, 3, column, value)
    with pytest.raises(ValueError, match=rf"bad\.txt', line {line}: (the )?{message}"):
        read_instance_file(str(path))
    with pytest.raises(ValueError, match=rf"line {line}"):
        DVRPConfig(instances=str(path), num_customers=3)


def test_vrplib_values_name_their_section_line(tmp_path):
    nodes = random_nodes(6, seed=4)
    nodes[1] = (*nodes[1][:2], -500, *nodes[1][3:])
    path = write_vrplib(tmp_path / "bad.vrp", (50, 50, 1000), nodes)
    lines = path.read_text().splitlines()
    line = lines.index("DEMAND_SECTION") + 1 + 3  # node 2 (0 = depot) is the section's third row
    assert lines[line - 1].split() == ["3", "-500"]
    with pytest.raises(ValueError, match=rf"bad\.vrp', line {line}: the demand of node 2 .* is negative"):
        read_instance_file(str(path))
