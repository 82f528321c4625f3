"""Fixtures of the pipeline tests: one tiny trained run shared by the session."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "configs" / "dvrp_smoke.yaml")


def run_module(module: str, *args: str, timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m module args`` from the repo root; returns the completed process (text output)."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory) -> dict:
    """The smoke config trained once in a subprocess: its log dir and checkpoints."""
    out = tmp_path_factory.mktemp("smoke")
    proc = run_module("pipelines.fit", "--config", SMOKE, f"--trainer.logger.init_args.save_dir={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    log_dir = out / "dvrp_smoke" / "version_0"
    return {"dir": log_dir, "last": str(log_dir / "checkpoints" / "last.ckpt"), "stdout": proc.stdout,
            "events": glob.glob(str(log_dir / "events.out.tfevents.*"))}
