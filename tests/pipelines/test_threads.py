"""OpenMP's wait policy: a short spin by default, the user's setting kept, and set before torch is loaded."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipelines.threads import SPIN_COUNT, set_wait_policy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("preset", [None, ("OMP_WAIT_POLICY", "PASSIVE"), ("GOMP_SPINCOUNT", "0")])
def test_a_short_spin_unless_the_environment_chose(monkeypatch, preset):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    if preset is not None:
        monkeypatch.setenv(*preset)
    set_wait_policy()
    if preset is None:
        assert os.environ["GOMP_SPINCOUNT"] == str(SPIN_COUNT)
        assert "OMP_WAIT_POLICY" not in os.environ
    else:  # the user's variable as it was, and the other one not added
        assert os.environ[preset[0]] == preset[1]
        other = "GOMP_SPINCOUNT" if preset[0] == "OMP_WAIT_POLICY" else "OMP_WAIT_POLICY"
        assert other not in os.environ


def test_the_fit_entry_point_sets_it_before_torch_is_loaded():
    """libgomp reads the variable once, when torch loads it: the entry point must set it first (the subprocess
    is bounded by its timeout)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    probe = ("import sys, os, pipelines.threads as t\n"
             "real = t.set_wait_policy\n"
             "def spy():\n"
             "    assert 'torch' not in sys.modules, 'torch was imported before the wait policy was set'\n"
             "    real()\n"
             "t.set_wait_policy = spy\n"
             "import pipelines.fit\n"
             "print(os.environ['GOMP_SPINCOUNT'])\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == str(SPIN_COUNT)
