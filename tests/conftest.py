"""Shared fixtures of the test suite: single-threaded torch, tiny DVRP configs, the benchmark data folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# The suite runs on small CPU machines next to other work: one intra-op thread keeps timings stable.
torch.set_num_threads(1)
# Test configs plug in probe callbacks from this package (modules.import_policy allows it by name).
os.environ.setdefault("RLPIPE_ALLOW_IMPORTS", "tests")


# The files that take longest (seconds of one worker, measured 2026-11-29 with --durations), run first: `make test`
# hands whole files to its workers (--dist loadfile) in collection order, so a long file collected last would leave
# the other worker idle while it runs.
LONGEST_FIRST = ("pipelines/test_ray.py", "pipelines/test_faults.py", "pipelines/test_resume.py",
                 "pipelines/test_seeds.py", "pipelines/test_game_training.py", "pipelines/test_tune.py",
                 "benchmarks/test_scripts.py", "benchmarks/test_gpu_path_sweep.py", "benchmarks/test_results.py")


def pytest_collection_modifyitems(items: list) -> None:
    """Collect :data:`LONGEST_FIRST` before the other files (in its order; the rest keep theirs)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    here = Path(__file__).parent

    def key(item) -> int:
        path = Path(str(item.path)).resolve()
        name = path.relative_to(here).as_posix() if path.is_relative_to(here) else ""
        return rank.get(name, len(rank))

    items.sort(key=key)  # (stable: the order within a file and among the rest is pytest's)


@pytest.fixture(autouse=True)
def _single_thread():
    """Every test runs with one torch thread (a test that changes it gets it back)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def solomon_dir() -> Path:
    """The Solomon benchmark folder (``solomon_txt/``, ``vrplib/``), or a clean skip when it is absent.

    ``DVRP_DATA_DIR`` overrides the default, ``<repo>/../shared/data/solomon`` (data is never copied into
    the repository).
    """
    env = os.environ.get("DVRP_DATA_DIR")
    path = Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data" / "solomon"
    if not (path / "solomon_txt").is_dir() or not (path / "vrplib").is_dir():
        pytest.skip(f"Solomon benchmark data not found at {path} (set DVRP_DATA_DIR)")
    return path


@pytest.fixture
def tiny_config():
    """A small generated DVRP config (N=8, M=2, default windows) for fast env tests."""
    from envs.dvrp import DVRPConfig

    return DVRPConfig(num_customers=8, num_vehicles=2)


def periodic_checkpoints(folder: str | os.PathLike) -> dict[int, Path]:
    """The periodic checkpoints of a run's ``checkpoints/`` folder (``frames=<n>.ckpt``), by optimiser step."""
    paths = Path(folder).glob("frames=*.ckpt")
    return dict(sorted((torch.load(p, map_location="cpu", weights_only=True)["global_step"], p) for p in paths))
