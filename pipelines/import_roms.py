"""Import game ROMs for stable-retro: ``python -m pipelines.import_roms DIR [DIR ...]``.

stable-retro ships the integration data (memory addresses of score and lives, start states) of about a thousand
console games but only one ROM, ``Airstriker-Genesis-v0``'s. This runs stable-retro's own importer
(``python -m stable_retro.import``: every file in DIR, zip archives included, whose checksum matches a known
game's is copied into stable-retro's data folder), then prints the games that were imported and every game that
is playable now, so that ``env.game: <name>`` (``envs.games.GameConfig``) finds its ROM. Exits 2 when a DIR is
missing, 1 when nothing matched.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from envs.games.emulators import playable_retro_games


def import_roms(paths: list[str]) -> tuple[list[str], list[str]]:
    """Run stable-retro's importer on ``paths``.

    Returns:
        The games it imported (in its order), and every stable-retro game playable afterwards.

    Raises:
        FileNotFoundError: a path that is no directory (nothing is imported then).
        RuntimeError: the importer failed (its output is in the message).
    """
    missing = [p for p in paths if not os.path.isdir(p)]
    if missing:
        raise FileNotFoundError(f"not a directory: {', '.join(missing)}")
    run = subprocess.run([sys.executable, "-m", "stable_retro.import", *paths], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"stable-retro's importer failed (exit {run.returncode}): {run.stderr.strip()[-2000:]}")
    imported = [line.removeprefix("Importing ").strip() for line in run.stdout.splitlines()
                if line.startswith("Importing ")]
    return imported, playable_retro_games()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.import_roms", description=__doc__.split("\n\n")[1])
    parser.add_argument("paths", nargs="+", metavar="DIR", help="folders searched (recursively) for ROM files")
    args = parser.parse_args(argv)
    try:
        imported, playable = import_roms(args.paths)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"imported {len(imported)} game(s): {', '.join(imported) or 'none (no file matched a known checksum)'}")
    print(f"playable stable-retro games ({len(playable)}): {', '.join(playable)}")
    print("ALE Atari games (ale-py ships their ROMs): ALE/<Name>-v5, e.g. ALE/Pong-v5")
    return 0 if imported else 1


if __name__ == "__main__":
    sys.exit(main())
