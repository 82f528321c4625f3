"""OpenMP's wait policy: a short spin by default, the user's setting kept, and set before torch is loaded."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipelines.threads import SPIN_COUNT, set_wait_policy, side_by_side_env

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


@pytest.mark.parametrize("preset", [None, ("GOMP_SPINCOUNT", str(SPIN_COUNT)), ("OMP_WAIT_POLICY", "ACTIVE"),
                                    ("GOMP_SPINCOUNT", "50000")])
def test_processes_side_by_side_sleep_at_once_unless_the_user_chose(monkeypatch, preset):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    if preset is not None:
        monkeypatch.setenv(*preset)
    env = side_by_side_env()
    if preset is None or preset == ("GOMP_SPINCOUNT", str(SPIN_COUNT)):  # nothing, or this module's own default
        assert env["OMP_WAIT_POLICY"] == "PASSIVE" and "GOMP_SPINCOUNT" not in env
    else:  # the user's choice, as it was
        assert env[preset[0]] == preset[1]
        if preset[0] == "GOMP_SPINCOUNT":
            assert "OMP_WAIT_POLICY" not in env


@pytest.mark.parametrize("parallel", [1, 2])
def test_seeds_run_side_by_side_with_sleeping_threads(monkeypatch, tmp_path, parallel):
    """``pipelines.seeds --parallel N`` (N > 1) starts its fits with ``side_by_side_env``; one at a time keeps the
    environment (the fits spin as usual). Every fit is handed the command's process id (it dies with it)."""
    from pipelines import seed_fits
    from pipelines.stop_signals import PARENT_ENV

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    started = []

    class Done:
        returncode = 0

        def __init__(self, command, env=None, **kwargs):
            started.append(env)

        def poll(self):
            return 0

    monkeypatch.setattr(seed_fits.subprocess, "Popen", Done)
    folders = {s: str(tmp_path / f"seed_{s}") for s in (1, 2)}
    assert seed_fits.run_fits(["cfg.yaml"], [1, 2], folders, parallel, [], {}) == []
    assert len(started) == 2
    for env in started:
        assert env[PARENT_ENV] == str(os.getpid())  # each fit dies with the command
        assert ("OMP_WAIT_POLICY" not in env) if parallel == 1 else (env["OMP_WAIT_POLICY"] == "PASSIVE")
