"""Import game ROMs for stable-retro: ``python -m pipelines.import_roms DIR [DIR ...]``.

stable-retro ships the integration data (memory addresses of score and lives, start states) of about a thousand
console games but only one ROM, ``Airstriker-Genesis-v0``'s. This runs stable-retro's own importer
(``python -m stable_retro.import``: every file in DIR, zip archives included, whose checksum matches a known
game's is copied into stable-retro's data folder), then prints the games that were imported and every game that
is playable now, so that ``env.game: <name>`` (``envs.games.GameConfig``) finds its ROM. Exits 2 when a DIR is
missing, 1 when nothing matched.

Only regular files of at most :data:`MAX_ROM_BYTES` (32 MiB, stable-retro's own limit for one ROM, "the largest
game supported"; cartridge ROMs are a few MB) are handed to the importer, symbolic links resolved: anything else in
a DIR (a FIFO or device, a link to one or to ``/dev/zero``, a dangling link, an unreadable or larger file, a zip
archive above the limit: unpack it) is skipped with one line on stderr naming it. The importer sees links to the
accepted files only, so nothing it opens can block or grow without bound.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading

from envs.games.emulators import playable_retro_games
from pipelines.run_config import CommandParser

MAX_ROM_BYTES = 32 * 2**20  # stable-retro reads at most this much of a ROM (stable_retro.data.groom_rom)


def rom_candidates(paths: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """The files under ``paths`` (walked as stable-retro's importer walks them: ``os.walk``, links to folders not
    followed) that may be read as ROMs: regular files after resolving symbolic links, readable, of at most
    :data:`MAX_ROM_BYTES`.

    Returns:
        The accepted files as ``(resolved path, name)`` (the name as found, whose extension tells stable-retro the
        format; each pair once), and one note per skipped file (its path and why).
    """
    accepted, notes = [], []
    for top in paths:
        for root, _, files in os.walk(top):
            for name in sorted(files):
                path = os.path.join(root, name)
                why = _why_not_a_rom(path)
                if why is None:
                    accepted.append((os.path.realpath(path), name))
                else:
                    notes.append(f"skipped {path}: {why}")
    return list(dict.fromkeys(accepted)), notes


def _why_not_a_rom(path: str) -> str | None:
    """Why ``path`` is not read as a ROM, or None."""
    try:
        info = os.stat(path)  # (follows links)
    except FileNotFoundError:
        return f"a dangling symbolic link (to {os.readlink(path)!r})" if os.path.islink(path) else "gone"
    except OSError as err:
        return f"cannot be read ({err.strerror})"
    if not stat.S_ISREG(info.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(info.st_mode) else "a character device" if stat.S_ISCHR(info.st_mode)
                else "a block device" if stat.S_ISBLK(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode)
                else "not a regular file")
        link = f" (a symbolic link to {os.path.realpath(path)})" if os.path.islink(path) else ""
        return f"{kind}{link}, not a regular file"
    if info.st_size > MAX_ROM_BYTES:
        return f"{info.st_size / 2**20:.1f} MiB, above the {MAX_ROM_BYTES // 2**20} MiB of a ROM (unpack an archive)"
    if not os.access(path, os.R_OK):
        return "not readable"
    return None


def import_roms(paths: list[str], notes: list[str] | None = None) -> tuple[list[str], list[str]]:
    """Run stable-retro's importer on the ROM files under ``paths`` (:func:`rom_candidates`: it reads links to
    those in a temporary folder, nothing else).

    Args:
        paths: the folders searched (recursively). notes: receives a line per skipped file.

    Returns:
        The games it imported (in its order), and every stable-retro game playable afterwards.

    Raises:
        FileNotFoundError: a path that is no directory (nothing is imported then).
        RuntimeError: the importer failed (its output is in the message).
    """
    missing = [p for p in paths if not os.path.isdir(p)]
    if missing:
        raise FileNotFoundError(f"not a directory: {', '.join(missing)}")
    accepted, skipped = rom_candidates(paths)
    if notes is not None:
        notes.extend(skipped)
    imported: list[str] = []
    if accepted:
        with tempfile.TemporaryDirectory(prefix="import_roms.") as staging:
            for i, (path, name) in enumerate(accepted):  # one folder each: files of one name in several DIRs
                os.mkdir(os.path.join(staging, str(i)))
                os.symlink(path, os.path.join(staging, str(i), name))
            run = _run([sys.executable, "-m", "stable_retro.import", staging])
        if run.returncode != 0:
            raise RuntimeError(f"stable-retro's importer failed (exit {run.returncode}): {run.stderr.strip()[-2000:]}")
        imported = [line.removeprefix("Importing ").strip() for line in run.stdout.splitlines()
                    if line.startswith("Importing ")]
    return imported, playable_retro_games()


def _run(command: list[str]) -> subprocess.CompletedProcess:
    """``subprocess.run(command)`` (text output captured) whose child is stopped too when this process is stopped
    (an exception, Ctrl+C, or SIGTERM through :func:`main`'s handler)."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        try:
            stdout, stderr = child.communicate()
        except BaseException:
            child.kill()
            raise
    return subprocess.CompletedProcess(command, child.returncode, stdout, stderr)


def _stop(signum: int, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status (0: a game was imported, 1: none, 2: a DIR is missing).

    Raises:
        SystemExit: 2 for a bad option (argparse), 128 + the signal's number after SIGTERM (the importer stopped).
    """
    parser = CommandParser(prog="python -m pipelines.import_roms", description=__doc__.split("\n\n")[1])
    parser.add_argument("paths", nargs="+", metavar="DIR", help="folders searched (recursively) for ROM files")
    args = parser.parse_args(argv)
    notes: list[str] = []
    handle = threading.current_thread() is threading.main_thread()  # (signal handlers need it)
    previous = signal.signal(signal.SIGTERM, _stop) if handle else None
    try:
        imported, playable = import_roms(args.paths, notes)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        if handle:
            signal.signal(signal.SIGTERM, previous)
        for note in notes:
            print(note, file=sys.stderr)
    print(f"imported {len(imported)} game(s): {', '.join(imported) or 'none (no file matched a known checksum)'}")
    print(f"playable stable-retro games ({len(playable)}): {', '.join(playable)}")
    print("ALE Atari games (ale-py ships their ROMs): ALE/<Name>-v5, e.g. ALE/Pong-v5")
    return 0 if imported else 1


if __name__ == "__main__":
    sys.exit(main())
