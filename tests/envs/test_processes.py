"""Process-pool workers die with the process that started them (the DVRP hindsight solver's and the game-spaces
pool's), and so do a game env's emulator processes: a command killed by SIGKILL, which runs no clean-up, leaves none
running on alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.pipelines.conftest import REPO

POOL = textwrap.dedent("""
    import multiprocessing, os, sys, time
    from concurrent.futures import ProcessPoolExecutor
    from envs.processes import dying_with_this_process
    if __name__ == "__main__":
        pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=dying_with_this_process())
        print(pool.submit(os.getpid).result(), flush=True)
        pool.submit(time.sleep, 120)
        time.sleep(120)
""")


# a game env's emulator processes (gymnasium's AsyncVectorEnv, as envs.games builds it), each inside a step that does
# not return: the pipe's end-of-file would reach them only after it
EMULATORS = textwrap.dedent("""
    import time
    import gymnasium as gym
    import numpy as np
    from envs.games.emulators import vector_env

    class Stuck(gym.Env):
        observation_space = gym.spaces.Box(0, 1, (1,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return np.zeros(1, np.float32), {}

        def step(self, action):
            time.sleep(120)

    if __name__ == "__main__":
        env = vector_env(Stuck, 2, True, (Stuck.observation_space, Stuck.action_space))
        env.reset()
        print(*[p.pid for p in env.processes], flush=True)
        env.step_async(np.zeros(2, np.int64))
        time.sleep(120)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # (a zombie is dead: its parent, now init, has not reaped it yet)
        return f.read().split(")")[-1].split()[0] != "Z"


def _start(tmp_path, name: str, script: str) -> tuple[subprocess.Popen, list[int]]:
    """Run ``script`` (from the repository) as ``tmp_path/name``; returns it and the process ids its first line
    names."""
    path = tmp_path / name
    path.write_text(script)
    parent = subprocess.Popen([sys.executable, str(path)], cwd=REPO, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    return parent, [int(pid) for pid in parent.stdout.readline().split()]


def _survivors(parent: subprocess.Popen, signum: int, pids: list[int]) -> list[int]:
    """Send ``signum`` to ``parent``, wait for its end, then up to 10 s for ``pids`` to end; those still alive."""
    parent.send_signal(signum)
    parent.wait(30)
    deadline = time.monotonic() + 10
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in pids if _alive(pid)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_pool_worker_dies_with_its_sigkilled_parent(tmp_path):
    parent, workers = _start(tmp_path, "pool.py", POOL)  # (the script ends by itself after 120 s)
    assert len(workers) == 1 and _alive(workers[0])
    assert not _survivors(parent, signal.SIGKILL, workers), "the pool's worker outlived its SIGKILLed parent"


TREE = textwrap.dedent("""
    import subprocess, sys, time
    from envs.processes import reap_with_this_process
    if __name__ == "__main__":
        reap_with_this_process()
        # a grandchild in its own session, re-parented to init once its parent ends: no parent-death signal reaches it
        middle = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; "
                                   "p = subprocess.Popen(['sleep', '120'], start_new_session=True); print(p.pid)"],
                                  stdout=subprocess.PIPE, text=True)
        print(middle.stdout.readline().strip(), flush=True)
        middle.wait()
        time.sleep(120)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the reaper reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_detached_descendant_dies_with_its_killed_ancestor(tmp_path, signum):
    parent, grandchild = _start(tmp_path, "tree.py", TREE)
    time.sleep(0.5)
    assert len(grandchild) == 1 and _alive(grandchild[0])
    assert not _survivors(parent, signum, grandchild), "a re-parented descendant outlived its killed ancestor"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_emulator_processes_inside_a_step_die_with_their_killed_parent(tmp_path, signum):
    parent, children = _start(tmp_path, "emulators.py", EMULATORS)
    assert len(children) == 2 and all(map(_alive, children))
    time.sleep(0.5)  # (both inside their step)
    assert not _survivors(parent, signum, children), "an emulator process outlived its killed parent"
