"""A config value that a constructor rejects ends ``pipelines.fit`` the way a typo does: exit status 2, one
``error:`` line naming the key (or file) and what is allowed, no traceback, nothing written."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.pipelines.conftest import REPO, SMOKE


@pytest.mark.parametrize("override,message", [
    ("--model.init_args.gamma=1.5", r"model\.gamma=1\.5 is not allowed: in \[0, 1\]"),
    ("--model.init_args.lr=1e300", r"model\.lr=1e\+300 is not allowed: a learning rate in \(0, 1\]"),
    ("--data.init_args.frames_per_batch=1001", r"data\.frames_per_batch=1001 must be a multiple of data\.num_envs"),
    ("--data.init_args.env.init_args.instances={tmp}/none/*.txt", r"env\.instances=.*none/\*\.txt' matches no file"),
    ("--data.init_args.env.init_args.instances={tmp}/broken.txt", r"instance file .*broken\.txt' is malformed"),
])
def test_rejected_value_exits_2_with_one_message(tmp_path, override, message):
    (tmp_path / "broken.txt").write_text("this is not\na solomon file\n")
    run = subprocess.run([sys.executable, "-m", "pipelines.fit", "--config", SMOKE, override.format(tmp=tmp_path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 2, run.stderr[-2000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert re.search(message, errors[0]), errors[0]
    assert sorted(os.listdir(tmp_path)) == ["broken.txt"]  # no run folder, no checkpoint
