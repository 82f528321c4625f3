"""``python -m <module> <args>`` for the tests, from a warm interpreter: a helper process that has imported torch,
Lightning, TorchRL and ``pipelines.fit`` once forks a child per command, and the child runs the module as
``__main__`` (``runpy``) with the command's arguments, working directory and environment, its output in files, and
ends as an interpreter does (``SystemExit``: threads joined, ``atexit`` handlers run). A fresh interpreter spends
about 6 s of a 2-core machine importing those before a command starts; the suite runs about a hundred commands.

The child is a real process of its own (its own pid, signals, exit status, file descriptors), but it is not a fresh
interpreter: the modules the helper imported are imported already (as they are in a fit by the time it reads its
config), environment variables read while they were imported were read in the helper's environment, and every child
has the helper's hash seed. A test of what a fresh interpreter does (start-up, the environment at import, the import
policy) starts its own with ``subprocess``. The helper refuses to fork once it has more threads than its imports
left it (a fork copies one thread and whatever locks the others held): the command then runs in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRELOAD = ("torch", "tensordict", "torchrl.envs", "lightning.pytorch.cli", "pipelines.fit")


def _serve() -> None:  # the helper: one command at a time, from JSON lines on stdin
    import importlib
    import runpy

    for name in PRELOAD:
        importlib.import_module(name)
    # torch's import leaves one idle native thread (as a DataLoader's fork workers find it); any other thread
    # started since makes a fork unsafe
    threads = len(os.listdir("/proc/self/task"))
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    for line in requests:
        request = json.loads(line)
        if len(os.listdir("/proc/self/task")) > threads or threading.active_count() > 1:
            replies.write(b'{"pid": null}\n')
            replies.flush()
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, runpy)  # (never returns: ends by SystemExit)
        replies.write(json.dumps({"pid": pid}).encode() + b"\n")
        replies.flush()
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
        replies.flush()


def _child(request: dict, runpy) -> None:
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for entry in reversed(request["env"].get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY),
                            (2, request["stderr"], os.O_WRONLY)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv = [request["module"], *request["args"]]
    raise SystemExit(_run(runpy, request["module"]))


def _run(runpy, module: str) -> object:
    sys.modules.pop(module, None)  # (as in a fresh `python -m`: the module is not imported before it runs)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        return stop.code
    return 0


class _Helper:
    """The helper process of this test process, started at its first command."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None

    def start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH"))
                                                               if p)}
            self.proc = subprocess.Popen([sys.executable, "-c", "from tests.warm_python import _serve; _serve()"],
                                         cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL)
        return self.proc

    def run(self, module: str, args: list[str], cwd: str, env: dict, timeout: float
            ) -> subprocess.CompletedProcess | None:
        """The command's result, or None where the helper cannot fork (run it fresh then)."""
        command = [sys.executable, "-m", module, *args]
        with self.lock, tempfile.TemporaryDirectory(prefix="warm_") as folder:
            out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
            for path in (out, err):
                open(path, "w").close()
            proc = self.start()
            request = {"module": module, "args": args, "cwd": cwd, "env": env, "stdout": out, "stderr": err}
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
            pid = json.loads(proc.stdout.readline() or b'{"pid": null}')["pid"]
            if pid is None:
                return None
            box: dict = {}  # the helper's second reply: the command's exit status
            waiter = threading.Thread(target=lambda: box.update(json.loads(proc.stdout.readline())), daemon=True)
            waiter.start()
            waiter.join(timeout)
            if waiter.is_alive():
                os.kill(pid, 9)
                waiter.join()
                raise subprocess.TimeoutExpired(command, timeout, Path(out).read_text(), Path(err).read_text())
            return subprocess.CompletedProcess(command, box["returncode"], Path(out).read_text(),
                                               Path(err).read_text())


_HELPER = _Helper()


def run_warm(module: str, args: list[str], cwd: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """``python -m module args`` in ``cwd`` with the environment ``env``: its completed process (text output);
    from the warm helper, or a fresh interpreter where the helper cannot fork.

    Raises:
        subprocess.TimeoutExpired: it ran past ``timeout`` seconds (it is killed, as ``subprocess.run`` does).
    """
    started = time.monotonic()
    done = _HELPER.run(module, list(args), cwd, env, timeout)
    if done is not None:
        return done
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=max(1.0, timeout - (time.monotonic() - started)))


def run_python(command: list[str], *, cwd: str | os.PathLike, env: dict, timeout: float, capture_output: bool = True,
               text: bool = True) -> subprocess.CompletedProcess:
    """``subprocess.run(command, cwd=..., env=..., timeout=..., capture_output=True, text=True)`` for a command
    ``[sys.executable, "-m", module, *args]``, run by :func:`run_warm`.

    Raises:
        ValueError: another command, or output not captured as text.
    """
    if command[:2] != [sys.executable, "-m"] or not (capture_output and text):
        raise ValueError(f"run_python runs `python -m <module> ...` with its output captured as text, not {command}")
    return run_warm(command[2], [str(a) for a in command[3:]], str(cwd), dict(env), timeout)
