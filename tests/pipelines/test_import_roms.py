"""pipelines.import_roms: only regular files of ROM size are read; a FIFO, a device or a dangling link in a ROM
folder is skipped with one line naming it (issue 38). Each run is a subprocess in its own session with a timeout
and an address-space limit, so a hang or an endless read fails the test instead of the machine."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys

import pytest

from pipelines.import_roms import MAX_ROM_BYTES
from tests.pipelines.conftest import REPO

MEMORY_LIMIT = 2**30  # bytes of address space for the command (and its importer)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _import_roms(*paths, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m pipelines.import_roms paths``; on timeout its whole process group is killed (an importer
    blocked on a FIFO included) and the test fails."""
    command = [sys.executable, "-m", "pipelines.import_roms", *map(str, paths)]
    child = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True, preexec_fn=_limit_memory,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        pytest.fail(f"import_roms did not finish in {timeout} s")
    return subprocess.CompletedProcess(command, child.returncode, stdout, stderr)


@pytest.mark.parametrize("case", ["fifo", "dev_zero", "dangling"])
def test_a_file_that_is_no_rom_is_skipped_with_one_line(tmp_path, case):
    roms = tmp_path / "roms"
    (roms / "sub").mkdir(parents=True)
    (roms / "notes.txt").write_text("not a rom")
    path = roms / "sub" / {"fifo": "pipe.md", "dev_zero": "zero.nes", "dangling": "gone.sfc"}[case]
    if case == "fifo":
        os.mkfifo(path)
        why = "a FIFO, not a regular file"
    elif case == "dev_zero":
        path.symlink_to("/dev/zero")
        why = "a character device (a symbolic link to /dev/zero), not a regular file"
    else:
        path.symlink_to(tmp_path / "nowhere.sfc")
        why = f"a dangling symbolic link (to {str(tmp_path / 'nowhere.sfc')!r})"
    run = _import_roms(roms)
    assert run.returncode == 1, run.stderr[-2000:]  # nothing matched (and nothing failed)
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == [f"skipped {path}: {why}"]
    assert "imported 0 game(s)" in run.stdout


def test_links_to_roms_are_read_and_large_files_skipped(tmp_path):
    """A link to a regular file is read (the bundled Airstriker ROM, linked under another name, is imported); a file
    above the ROM size limit is not (a sparse file: nothing is written)."""
    import stable_retro

    rom = stable_retro.data.get_romfile_path("Airstriker-Genesis-v0", stable_retro.data.Integrations.ALL)
    before = open(rom, "rb").read()
    roms = tmp_path / "roms"
    (roms / "a").mkdir(parents=True)
    (roms / "a" / "my dump.md").symlink_to(rom)
    with open(roms / "huge.bin", "wb") as f:
        f.truncate(MAX_ROM_BYTES + 1)
    run = _import_roms(roms)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "imported 1 game(s): Airstriker-Genesis-v0" in run.stdout
    assert run.stderr.strip() == f"skipped {roms / 'huge.bin'}: 32.0 MiB, above the 32 MiB of a ROM (unpack an archive)"
    assert open(rom, "rb").read() == before
