"""A config's class paths are checked by name before anything is imported (``modules.import_policy``): a
module outside the project, its libraries and the packages ``RLPIPE_ALLOW_IMPORTS`` names is refused without
running its code; a package the user allows is imported and used."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.pipelines.conftest import REPO

CARTPOLE = str(REPO / "configs" / "cartpole_dqn.yaml")


def _fit(tmp_path, *args: str, allow: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RLPIPE_ALLOW_IMPORTS"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(tmp_path)])
    if allow is not None:
        env["RLPIPE_ALLOW_IMPORTS"] = allow
    return subprocess.run([sys.executable, "-m", "pipelines.fit", "--config", CARTPOLE, *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=env)


def _plant(tmp_path) -> None:
    """A module in the working directory that leaves a marker file when imported, and a user's env config."""
    (tmp_path / "evil_mod.py").write_text(f"open({str(tmp_path / 'RAN')!r}, 'w').close()\nclass Env:\n    pass\n")
    (tmp_path / "my_envs.py").write_text(f"open({str(tmp_path / 'MY_ENVS')!r}, 'w').close()\n"
                                         "from envs.gym import GymConfig\n\n\nclass MyCartPole(GymConfig):\n"
                                         "    '''A user's env config.'''\n")


def test_class_path_outside_the_allowed_packages_is_refused_before_import(tmp_path):
    _plant(tmp_path)
    run = _fit(tmp_path, "--data.init_args.env=evil_mod.Env", "--print_config")
    assert run.returncode == 2, run.stderr[-2000:]
    assert ("data.init_args.env.class_path='evil_mod.Env' is not allowed: outside the project's packages (allow your "
            "own module with the environment variable RLPIPE_ALLOW_IMPORTS, e.g. RLPIPE_ALLOW_IMPORTS=evil_mod"
            ) in run.stderr
    assert not (tmp_path / "RAN").exists()  # its code never ran
    assert sorted(os.listdir(tmp_path)) == ["evil_mod.py", "my_envs.py"]  # nothing written


def test_user_package_allowed_by_name_is_used(tmp_path):
    _plant(tmp_path)
    refused = _fit(tmp_path, "--data.init_args.env=my_envs.MyCartPole", "--print_config")
    assert refused.returncode == 2 and not (tmp_path / "MY_ENVS").exists()
    run = _fit(tmp_path, "--data.init_args.env=my_envs.MyCartPole", "--print_config", allow="my_envs")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "class_path: my_envs.MyCartPole" in run.stdout and (tmp_path / "MY_ENVS").exists()
    assert not (tmp_path / "RAN").exists()  # allowing one package allows no other


def test_parts_of_allowed_libraries_that_load_files_stay_refused(tmp_path):
    run = _fit(tmp_path, "--trainer.callbacks+=torch.hub.Callback", "--print_config")
    assert run.returncode == 2 and "torch.hub can load or run files: never allowed" in run.stderr, run.stderr[-2000:]


def test_malformed_allow_variable_and_help(tmp_path):
    run = _fit(tmp_path, "--print_config", allow="my envs")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "RLPIPE_ALLOW_IMPORTS: 'my envs' is not a dot import path" in run.stderr
    help_text = _fit(tmp_path, "--help").stdout
    assert "RLPIPE_ALLOW_IMPORTS" in " ".join(help_text.split())
