"""A config's published figure from its final policies: train it on several seeds, evaluate each seed's final
``last.ckpt`` (not its best checkpoint) with ``pipelines.evaluate`` on held-out episodes, and write one dated JSON.

    python benchmarks/results.py --config configs/pendulum_ppo.yaml --seeds 0 1 2 3 4 [--parallel 2]
        [--episodes 100] [--num_envs 256] [--evaluations JSON] [--fresh] [--out results] [--runs runs/results]
        [fit overrides, e.g. --data.init_args.total_frames=...]

The seeds run as ``pipelines.seeds`` runs them (their folders under ``runs/results/<config stem>``, a finished seed
read back rather than run again); each final policy plays ``--episodes`` episodes of ``pipelines.evaluate`` (its
held-out evaluation seed, ``--num_envs`` episodes at once), beside the env's reference policies on the same episodes
(played with the command's first seed only: every seed plays the same episodes; the others play their policy alone,
with the hindsight oracle where the env has one), once: its table is kept in the seed's folder (``evaluation.json``)
and read back by a later command under the same checkpoint and options (``--fresh`` evaluates again), so seeds can be
added to a study one session at a time; where the earlier seeds' folders are gone (another checkout),
``--add_to FILE`` adds this command's seeds to the results file FILE of the same config and options (checked before
any seed trains: the same config, episodes, ``--num_envs``, ``--evaluations`` and fit overrides, no seed in both), its
reference policies played again and required to reproduce FILE's within 2 SE (bit-equal on one machine only; the
time-limited hindsight oracle not held to it; FILE's rows kept, the differences under ``reference_differences``),
FILE's commands and machines kept under ``earlier``. The file ``<out>/<config stem>-<date>.json`` holds each seed's
return ± SE over its episodes, the mean ± SE over seeds of those returns (the figure to publish; the SE is null for
one seed), every reference row, the machine and the command; its content is also the last stdout line. For an env
that evaluates under several settings (the hockey opponents) each setting has its own figures. ``--evaluations
'{name: [options]}'`` evaluates each final policy once per name with those ``pipelines.evaluate`` options added, each
name a setting of the file (``name/setting`` where the env has its own): e.g. a DVRP policy trained on mixed sizes,
on 100-customer days and on whole Solomon R2 days::

    --evaluations '{"N100": ["--data.init_args.env.init_args.num_customers=100",
                             "--data.init_args.env.init_args.num_vehicles=7"],
                    "R2": ["--instances=../shared/data/solomon/solomon_txt/R2[0-9]*.txt",
                           "--data.init_args.env.init_args.num_customers=100",
                           "--data.init_args.env.init_args.num_vehicles=4"]}'
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import io
import json
import math
import os
import platform
import re
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from pipelines import evaluate, seeds  # noqa: E402
from pipelines.results_table import HINDSIGHT  # noqa: E402
from pipelines.settings import write_json  # noqa: E402

EVALUATION = "evaluation.json"  # a seed's evaluation, in its folder: read back under the same checkpoint and options
SETTING_NAME = re.compile(r"\w+")  # a name of --evaluations (the README's figures name it: letters, digits, _)


def _call(main, *args: str) -> dict:
    """A command's ``main(args)`` in this process (one interpreter's imports for the whole script), its printed
    output sent to stderr so that this script's last stdout line stays its JSON; its returned summary or table.
    A failing command ends the script with the command's own exit status (``SystemExit``)."""
    with contextlib.redirect_stdout(sys.stderr):
        return main(list(args))


def evaluate_seed(folder: str, options: list[str], fresh: bool = False, name: str | None = None,
                  baselines: bool = True) -> dict:
    """``pipelines.evaluate``'s table of the final policy (``last.ckpt``) of the seed run in ``folder`` under
    ``options`` (without ``baselines``: ``--no_baselines``, the trained policy alone and any hindsight oracle):
    read back from ``folder/evaluation.json`` (``evaluation-<name>.json`` for a named evaluation of
    ``--evaluations``) when that file holds the same checkpoint's (its SHA-256) under the same options, with the
    reference rows if ``baselines``, and not ``fresh``; else played and written there (replacing the file at once,
    so an interrupted command leaves the seeds it evaluated). The code is not compared: after a change to the env or
    to the evaluation, evaluate again (``fresh``).

    Raises:
        SystemExit: no ``last.ckpt`` in ``folder``, or the evaluation's own exit status.
    """
    found = seeds.last_checkpoint(folder)
    if found is None:
        raise SystemExit(f"error: {folder} holds no last.ckpt")
    with open(found, "rb") as f:
        key = {"checkpoint_sha256": hashlib.file_digest(f, "sha256").hexdigest(), "options": options}
    path = os.path.join(folder, EVALUATION if name is None else f"evaluation-{name}.json")
    try:
        with open(path) as f:
            stored = json.load(f)
        if (not fresh and isinstance(stored, dict) and {k: stored.get(k) for k in key} == key
                and (stored.get("baselines", True) or not baselines)):
            print(f"{folder}: its final policy was evaluated under the same options before, read back", file=sys.stderr)
            return stored["table"]
    except (OSError, ValueError, KeyError):
        pass  # none yet, or unreadable: evaluate
    table = _call(evaluate.main, "--ckpt_path", found, *options, *([] if baselines else ["--no_baselines"]))
    write_json(path, {**key, "baselines": baselines, "table": table})
    return table


def _mean_se(values: list[float]) -> tuple[float, float | None]:
    """The mean and its standard error (None for one value: no SE over seeds)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))


def _rows(table: dict) -> dict[str | None, dict]:
    """``pipelines.evaluate``'s table by setting (None: a table of one setting): ``{setting: {policy: row}}``, each
    setting's policies in the table's order (a policy evaluated under some settings only is left out of the
    others)."""
    first = next(iter(table.values()))
    if "mean_return" in first:
        return {None: table}
    settings = dict.fromkeys(setting for rows in table.values() for setting in rows)
    return {setting: {policy: rows[setting] for policy, rows in table.items() if setting in rows}
            for setting in settings}


def merged(tables: dict[str, dict]) -> dict:
    """One seed's named evaluations (``{name: pipelines.evaluate's table}``, of ``--evaluations``) as one table with
    a setting per name, ``{policy: {name: row}}`` (``name/setting`` for an env evaluated under settings of its own),
    the trained policy first."""
    out: dict = {}
    for name, table in tables.items():
        for setting, rows in _rows(table).items():
            for policy, row in rows.items():
                out.setdefault(policy, {})[name if setting is None else f"{name}/{setting}"] = row
    return out


def summarise(evaluations: dict[int, dict]) -> dict:
    """Per setting: each seed's trained row, the mean ± SE over seeds of their returns (and, under ``rates``, of
    each 0/1 outcome's rate), and the reference rows of the first seed's table (the same episodes for every
    seed)."""
    out: dict = {}
    for seed, table in evaluations.items():
        for setting, rows in _rows(table).items():
            name = next(iter(rows))  # the trained policy's row comes first
            entry = out.setdefault(str(setting), {"policy": name, "seeds": {}, "references": {
                k: v for k, v in rows.items() if k != name}})
            entry["seeds"][str(seed)] = rows[name]
    for entry in out.values():
        _over_seeds(entry)
    return out


def _over_seeds(entry: dict) -> None:
    """A setting's mean ± SE over its seeds' returns (``mean``, ``se``) and, under ``rates``, over each 0/1
    outcome's rate, from its ``seeds`` rows (in place)."""
    rows = list(entry["seeds"].values())
    entry["mean"], entry["se"] = _mean_se([row["mean_return"] for row in rows])
    rates = [key for key in rows[0] if key.endswith("_rate")]  # 0/1 outcomes, e.g. the hockey env's won_rate
    if rates:
        entry["rates"] = {}
        for key in rates:
            mean, se = _mean_se([row[key] for row in rows])
            entry["rates"][key] = {"mean": mean, "se": se}


def added_to(earlier: dict, settings: dict, path: str) -> tuple[dict, dict]:
    """``settings`` (:func:`summarise`'s, of this command's seeds) with the seeds of the results file ``earlier``
    (read from ``path``) added, each setting's mean ± SE over all their seeds, the seeds in numeric order, and the
    file's reference rows kept; with, per setting, this command's reference returns minus the file's where they
    differ (``{setting: {policy: difference}}``). Runs are bit-identical on one machine only: a reference policy
    played again must reproduce the file's return within 2 of the file's SE over its episodes (``return_se``; equal
    where the row has none). The hindsight oracle is not held to it: time-limited, it differs between any two runs
    and with the machine's load, and each seed's gap is to the oracle played with it.

    Raises:
        SystemExit: the two hold other settings or other reference policies, or a reference policy's return differs
            by more than 2 SE (the env or the evaluation changed: evaluate every seed again, without ``--add_to``).
    """
    if set(settings) != set(earlier["settings"]):
        raise SystemExit(f"error: --add_to {path}: its settings {sorted(earlier['settings'])} are not this "
                         f"command's {sorted(settings)}")
    out, differences = {}, {}
    for name, entry in settings.items():
        before = earlier["settings"][name]
        differences[name] = _reference_differences(before["references"], entry["references"], f"{path} ({name})")
        seeds = {**before["seeds"], **entry["seeds"]}
        out[name] = {**entry, "references": before["references"],
                     "seeds": {k: seeds[k] for k in sorted(seeds, key=int)}}
        _over_seeds(out[name])
    return out, {name: found for name, found in differences.items() if found}


def _reference_differences(before: dict, now: dict, where: str) -> dict[str, float]:
    """The reference rows ``now`` minus ``before`` (their returns) where they differ, each policy's within 2 of
    ``before``'s SE (:func:`added_to`; the hindsight oracle's unchecked); ``SystemExit`` naming ``where`` otherwise."""
    again = "(the env or the evaluation changed): evaluate every seed again, without --add_to"
    if set(before) != set(now):
        raise SystemExit(f"error: --add_to {where}: its reference policies {sorted(before)} are not the ones played "
                         f"now {sorted(now)} {again}")
    out = {}
    for policy, row in before.items():
        difference = now[policy]["mean_return"] - row["mean_return"]
        if policy != HINDSIGHT and abs(difference) > 2 * (row.get("return_se") or 0.0):
            raise SystemExit(f"error: --add_to {where}: the reference rows differ from the ones played now: "
                             f"{policy} {now[policy]['mean_return']} against {row['mean_return']} ± "
                             f"{row.get('return_se')}, beyond 2 SE {again}")
        if difference:
            out[policy] = round(difference, 6)
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--num_envs", type=int, default=256,
                        help="episodes played at once (pipelines.evaluate's --num_envs; fewer for envs whose rows are "
                             "processes, e.g. emulators: every row steps until the last row's episodes end)")
    parser.add_argument("--evaluations", type=json.loads, default=None,
                        help="JSON {name: [pipelines.evaluate options]}: each final policy evaluated once per name "
                             "with those options added, each name a setting of the file (default: one evaluation "
                             "of the run as configured)")
    parser.add_argument("--fresh", action="store_true",
                        help="evaluate every seed again (default: a seed evaluated before under the same checkpoint "
                             "and options is read back from its folder's evaluation.json)")
    parser.add_argument("--out", default=os.path.join(ROOT, "results"))
    parser.add_argument("--runs", default=os.path.join(ROOT, "runs", "results"), help="where the seeds' runs go")
    parser.add_argument("--add_to", metavar="FILE", default=None,
                        help="a results file of the same config and options (its seeds' folders gone) to which this "
                             "command's seeds are added; the joined file is written under today's date")
    return parser


def _earlier(parser: argparse.ArgumentParser, args: argparse.Namespace, overrides: list[str]) -> dict:
    """The results file that ``--add_to`` names, checked against this command (``parser.error`` refuses it).

    Raises:
        SystemExit: (exit 2) the file is unreadable, of another config or options (episodes, ``--num_envs``,
            ``--evaluations``, fit overrides), or holds one of this command's seeds.
    """
    path = args.add_to

    def refuse(why: str):
        parser.error(f"--add_to {path}: {why}")

    try:
        with open(path) as f:
            earlier = json.load(f)
        words = shlex.split(earlier["command"])[2:]  # (after "python benchmarks/results.py")
        settings = earlier["settings"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        refuse(f"not a results file of benchmarks/results.py ({e})")
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            before, before_overrides = _parser().parse_known_args(words)
    except SystemExit:
        refuse(f"its command cannot be read: {earlier['command']}")
    mine = {"config": os.path.abspath(args.config), "episodes": args.episodes, "num_envs": args.num_envs,
            "evaluations": args.evaluations, "fit overrides": overrides}
    theirs = {"config": os.path.normpath(os.path.join(ROOT, earlier["config"])), "episodes": before.episodes,
              "num_envs": before.num_envs, "evaluations": before.evaluations, "fit overrides": before_overrides}
    for key, value in mine.items():
        if theirs[key] != value:
            refuse(f"its {key} ({theirs[key]}) is not this command's ({value})")
    both = sorted({int(s) for entry in settings.values() for s in entry["seeds"]} & set(args.seeds))
    if both:
        refuse(f"it holds seed(s) {' '.join(map(str, both))} already")
    return earlier


def main() -> None:
    parser = _parser()
    args, overrides = parser.parse_known_args()
    named = args.evaluations
    if named is not None and not (
            isinstance(named, dict) and named and all(
                isinstance(k, str) and SETTING_NAME.fullmatch(k) and isinstance(v, list)
                and all(isinstance(o, str) for o in v) for k, v in named.items())):
        parser.error(f"--evaluations must be a JSON object of names (letters, digits, _) to lists of "
                     f"pipelines.evaluate options (got {json.dumps(named)})")
    options = ["--episodes", str(args.episodes), "--num_envs", str(args.num_envs)]
    for extra in [[]] if named is None else named.values():  # refused before any seed trains
        evaluate.check_options(["--ckpt_path", "last.ckpt", *options, *extra])
    earlier = None if args.add_to is None else _earlier(parser, args, overrides)
    stem = os.path.splitext(os.path.basename(args.config))[0]
    runs = os.path.join(os.path.abspath(args.runs), stem)
    _call(seeds.main, "--config", args.config, "--seeds", *map(str, args.seeds), "--parallel", str(args.parallel),
          "--out", runs, *overrides)
    evaluations = {}
    for seed in args.seeds:  # the reference rows are the first seed's (the same episodes): the others play without
        folder, first = os.path.join(runs, f"seed_{seed}"), seed == args.seeds[0]
        evaluations[seed] = (evaluate_seed(folder, options, args.fresh, baselines=first) if named is None else merged(
            {name: evaluate_seed(folder, [*options, *extra], args.fresh, name, first or "--policies" in extra)
             for name, extra in named.items()}))
    today = datetime.date.today().isoformat()
    result = {"config": os.path.relpath(os.path.abspath(args.config), ROOT), "date": today,
              "command": shlex.join(["python", "benchmarks/results.py", *sys.argv[1:]]), "episodes": args.episodes,
              "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
              "settings": summarise(evaluations)}
    if earlier is not None:  # its seeds joined, and its commands kept
        result["settings"], differences = added_to(earlier, result["settings"], args.add_to)
        if differences:  # this command's reference rows against the file's, each within 2 SE
            result["reference_differences"] = differences
        result["earlier"] = [*earlier.get("earlier", []), {
            key: earlier[key] for key in ("date", "command", "machine", "reference_differences") if key in earlier}]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{stem}-{today}.json"), "w") as f:
        json.dump(result, f, indent=1)
    for setting, entry in result["settings"].items():
        where = "" if setting == "None" else f" ({setting})"
        if entry["se"] is None:  # one seed: its figures over its episodes
            [row] = entry["seeds"].values()
            rates = "".join(f", {key} {100 * row[key]:.1f}%" for key in entry.get("rates", {}))
            print(f"{stem}{where}: {entry['policy']} {row['mean_return']:.1f} ± {row['return_se']:.1f}{rates} on "
                  f"seed {next(iter(entry['seeds']))} (its final policy, ± SE over its {args.episodes} episodes; "
                  f"one seed: no SE over seeds)", file=sys.stderr)
            continue
        rates = "".join(f", {key} {100 * v['mean']:.1f} ± {100 * v['se']:.1f}%"
                        for key, v in entry.get("rates", {}).items())
        print(f"{stem}{where}: {entry['policy']} {entry['mean']:.1f} ± {entry['se']:.1f}{rates} over seeds "
              f"{', '.join(entry['seeds'])} (final policies, {args.episodes} episodes each)", file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
