"""Evaluate a trained policy against its env's reference policies, on the same seeded episodes.

    python -m pipelines.evaluate --ckpt_path CKPT [--config configs/<run>.yaml] [--episodes 256] [--seed S]
        [--policies NAME ... | --no_baselines] [--settings JSON] [--routes_out FILE] [--pyvrp_episodes K]
        [--hindsight_seconds S] [--instances GLOB] [--video FILE.mp4|.gif] [--compare_ckpt CKPT2
        [--compare_config CFG ...]] [--device DEV]
        [dotted overrides]

The run's config is the ``config.yaml`` of the checkpoint's run folder (else the one the checkpoint records) unless
``--config`` gives it. Every policy plays the same episodes (the env is rebuilt with the same seed for each): the
trained one (deterministic; sampled for games, ``EnvConfig.stochastic_evaluation``), the env's reference policies
(``EnvConfig.baseline_policies``: ``random`` for any env, the scripted offer rules on DVRP), and with
``--compare_ckpt`` a second trained run (its own configs, e.g. an ablation) as the row
``<name>[<its last config's stem, or its run folder>]``. A row has the mean return with its standard error and the
mean of every ``info`` entry the env gives at an episode's end (``<key>_rate`` for 0/1 outcomes such as the hockey
env's ``win``); the table adds the paired difference to the trained policy. Envs with evaluation settings (hockey: the
weak and strong opponents; ``--settings`` chooses others) get one table per setting. The last stdout line is one JSON
object: ``{policy: row}``, or ``{policy: {setting: row}}`` with settings.

Envs that export their episodes' plans (DVRP) also take ``--routes_out`` (the trained policy's plans as JSON that
other tools can check without this code) and ``--pyvrp_episodes K`` (each policy's final plans of K episodes re-solved
by the env's reference solver, PyVRP; the online plan's mean gap is a column). DVRP also has the ``hindsight`` row (in
the default ``--policies``): the hindsight (anticipative) oracle, which knows the whole day at the start (every
request and the customer's type) and picks each customer's window, or none, and the routes to maximise the same
return, solved with PyVRP in ``--hindsight_seconds`` per episode on ``--hindsight_workers`` processes
(:mod:`envs.dvrp.hindsight`); every row then gets its gap to it, the mean over episodes of
``(hindsight - return) / hindsight`` in % ± SE (``gap_to_hindsight_pct`` in the JSON line). With
``--pyvrp_episodes K`` too, each row also gets the gap of its return with its K plans re-solved
(``gap_to_hindsight_resolved_pct``): the same decisions with the online insertion plan replaced by PyVRP's, so what
remains is what the decisions lose. ``--video FILE.mp4|.gif`` also writes one episode of the trained policy as a video
(envs that draw themselves: hockey, vacuum, gymnasium envs, DVRP's plan growing over an episode). ``--instances GLOB``
is short for ``--data.init_args.env.init_args.instances=GLOB`` with the files' own capacity. A run's learned env model
(the flexibility model) is restored with its weights; nothing else of the training's state is (the envs' resume
positions, the replay buffer), so a checkpoint plays under any config whose model and networks it fits (e.g. another
``num_envs``).

Everything plays on ``--device`` (default ``cpu``), whatever the run trained on: the config's collector and trainer
options for its own hardware (``data.collector``'s ``workers``, ``mode``, ``ray``, ``compile_policy``,
``cudagraph_policy``; ``data.device``; ``trainer.accelerator``, ``devices``, ``strategy``, ``num_nodes``, ``precision``)
are set aside (:data:`pipelines.trained_run.PLAY_HERE`). ``--routes_out`` and ``--video`` never overwrite a file
(checked before any work). A wrong option, config, checkpoint or device ends with one line on stderr, exit status 2. """

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable

from pipelines.threads import set_wait_policy

set_wait_policy()  # before torch is imported (pipelines/threads.py)

import torch  # noqa: E402

from envs import EnvConfig  # noqa: E402
from envs.video import FORMATS  # noqa: E402
from modules.base import RLModule  # noqa: E402
from pipelines.console import json_line, rounded  # noqa: E402
from pipelines.data import RLDataModule  # noqa: E402
from pipelines.export import resolve_device  # noqa: E402
from pipelines.parser import config_exit  # noqa: E402
from pipelines.play import play, record_video  # noqa: E402
from pipelines.results_table import HINDSIGHT, hindsight_gap, print_table, pyvrp_gaps, summary  # noqa: E402
from pipelines.run_config import FIT_KEYS, CommandParser, parse_with_fit_keys  # noqa: E402
from pipelines.trained_run import load_run, run_name  # noqa: E402

# what plays one table row: the env config, the run's learned env models (``RLDataModule.env_models``), and the
# policy factory (env -> policy)
Policy = tuple[EnvConfig, dict, Callable]


def _parser() -> CommandParser:
    """The command line's options (see the module docstring)."""
    parser = CommandParser(prog="python -m pipelines.evaluate", description=__doc__,
                            usage="%(prog)s --ckpt_path CKPT [options] [--model.<key>=... --data.<key>=...]",
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", default=None,
                        help="the fit config(s) of the run (default: config.yaml of the checkpoint's run folder, else "
                             "the config the checkpoint records)")
    parser.add_argument("--ckpt_path", required=True, help="checkpoint of the trained policy")
    parser.add_argument("--episodes", type=int, default=256, help="episodes per policy (and setting)")
    parser.add_argument("--seed", type=int, default=10_000_000, help="seed of the evaluation episodes")
    parser.add_argument("--num_envs", type=int, default=256, help="episodes played at once")
    parser.add_argument("--policies", nargs="*", default=None,
                        help="the env's reference policies to include (default: all of them; DVRP: preferred, greedy, "
                             "fallback, prior, informed, random, clairvoyant and hindsight; other envs: random)")
    parser.add_argument("--no_baselines", action="store_true",
                        help="play no reference policy: the trained one alone, with the hindsight oracle where the "
                             "env has one (its gap is measured against it); for a study whose reference rows come from "
                             "another evaluation of the same episodes (benchmarks/results.py)")
    parser.add_argument("--settings", type=json.loads, default=None,
                        help='JSON {name: env settings}: one table per setting (default: the env\'s '
                             'evaluation_settings, e.g. {"weak": {"mode": "NORMAL", "opponent": "weak"}, ...} on '
                             'hockey); {} for one table')
    parser.add_argument("--routes_out", default=None, help="write the trained policy's plans to this JSON file")
    parser.add_argument("--pyvrp_episodes", type=int, default=0,
                        help="re-solve this many episodes per policy with PyVRP")
    parser.add_argument("--pyvrp_seconds", type=float, default=1.0, help="PyVRP time per episode")
    parser.add_argument("--hindsight_seconds", type=float, default=2.0,
                        help="the hindsight oracle's time limit per episode (s; policy hindsight, DVRP)")
    parser.add_argument("--hindsight_workers", type=int, default=len(os.sched_getaffinity(0)),
                        help="processes solving the hindsight oracle's episodes (default: the CPUs available)")
    parser.add_argument("--instances", default=None, help="glob of Solomon .txt / VRPLIB .vrp files for the DVRP env "
                        "(episodes draw N customers of a random file; capacity from the files)")
    parser.add_argument("--compare_config", action="append", default=None,
                        help="config(s) of the second run (default: its own, as --config)")
    parser.add_argument("--compare_ckpt", default=None, help="checkpoint of a second run, played on the same episodes")
    parser.add_argument("--video", default=None, help="write one episode of the trained policy (row 0 of the "
                        "evaluation seed; the first setting) to this .mp4 or .gif file")
    parser.add_argument("--video_fps", type=float, default=25.0, help="frames per second of --video")
    parser.add_argument("--num_threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--device", default="cpu", help="device the envs and policies play on (cpu, cuda, cuda:<k>), "
                        "whatever the run trained on")
    return parser


def _checked_device(parser: CommandParser, args: argparse.Namespace) -> torch.device:
    """Stop on options that do not fit together or would overwrite a file (before any work); the ``--device``."""
    if args.episodes < 1 or args.num_envs < 1:
        parser.error(f"--episodes and --num_envs must be >= 1 (got {args.episodes}, {args.num_envs})")
    if not args.hindsight_seconds > 0 or args.hindsight_workers < 1:
        parser.error(f"--hindsight_seconds must be > 0 and --hindsight_workers >= 1 (got {args.hindsight_seconds}, "
                     f"{args.hindsight_workers})")
    if args.video is not None and os.path.splitext(args.video)[1].lower() not in FORMATS:
        parser.error(f"--video {args.video!r}: a {' or '.join(FORMATS)} file")
    if args.no_baselines and args.policies is not None:
        parser.error("--no_baselines plays no reference policy: give it or --policies, not both")
    if args.compare_config is not None and args.compare_ckpt is None:
        parser.error("--compare_config needs --compare_ckpt (the second run's checkpoint)")
    for option, path in (("--routes_out", args.routes_out), ("--video", args.video)):
        if path is not None and os.path.lexists(path):
            config_exit(ValueError(f"{option}={path!r} exists: evaluate never overwrites a file (remove it or give "
                                   f"another name)"))
    try:
        return resolve_device(args.device)
    except ValueError as err:
        config_exit(err)


def check_options(argv: list[str] | None) -> tuple[CommandParser, argparse.Namespace, list[str], torch.device]:
    """The command line parsed, stopping on what :func:`main` refuses before loading anything (exit 2, one line on
    stderr): an unknown option, values that do not fit together, a file it would overwrite, an unusable
    ``--device``. A script that trains first (``benchmarks/results.py``) calls it to refuse its evaluation's options
    before any training.

    Returns:
        The parser, its arguments, the fit config's dotted overrides and the ``--device``.
    """
    parser = _parser()
    args, overrides = parse_with_fit_keys(parser, argv, FIT_KEYS[:4])
    return parser, args, overrides, _checked_device(parser, args)


def build_policies(parser: CommandParser, args: argparse.Namespace, model: RLModule, data: RLDataModule, name: str,
                   overrides: list[str], device: torch.device) -> tuple[dict[str, Policy], bool]:
    """The policies to play, ``label -> (the env config it plays on, that run's learned env models, its policy
    factory)``: the trained one (``name``), the ``--compare_ckpt`` run's and the env's chosen reference policies;
    and whether the hindsight oracle is chosen too."""
    config, models = data.env_config, data.env_models
    baselines = config.baseline_policies()
    offline = [HINDSIGHT] if type(config).hindsight is not EnvConfig.hindsight else []
    chosen = offline if args.no_baselines else [*baselines, *offline] if args.policies is None else args.policies
    unknown = [p for p in chosen if p not in baselines and p not in offline]
    if unknown:
        parser.error(f"unknown --policies {unknown}; this env's: {', '.join([*baselines, *offline])}")
    with_hindsight = HINDSIGHT in chosen
    chosen = [p for p in chosen if p != HINDSIGHT]
    policies = {name: (config, models, lambda env: model.collector_policy)}
    if args.compare_ckpt is not None:
        other, other_data = load_run(args.compare_config, args.compare_ckpt, overrides, str(device))
        stem = (os.path.splitext(os.path.basename(args.compare_config[-1]))[0] if args.compare_config
                else run_name(args.compare_ckpt))
        policies[f"{name}[{stem}]"] = (other_data.env_config, other_data.env_models, lambda env: other.collector_policy)
    policies.update({p: (config, models, lambda env, make=baselines[p]: make(env, args.seed)) for p in chosen})
    return policies, with_hindsight


def play_setting(args: argparse.Namespace, policies: dict[str, Policy], config: EnvConfig,
                 name: str, values: dict | None, with_hindsight: bool, device: torch.device) -> dict[str, dict]:
    """Every policy's results on the same episodes under one setting's ``values``, and the hindsight oracle's on
    the days the trained policy played (``HINDSIGHT``, when chosen)."""
    num_envs = min(args.num_envs, args.episodes)
    results = {}
    for label, (env_config, models, make_policy) in policies.items():
        torch.manual_seed(args.seed)  # a policy drawing from the global generator: the same draws every time
        keep = (args.pyvrp_episodes > 0 or (label == name and (args.routes_out is not None or with_hindsight)))
        results[label] = play(env_config, make_policy, args.episodes, num_envs, args.seed, values, keep, device,
                              models)
    if with_hindsight:  # every policy plays the same days: the trained policy's export has them
        started = time.perf_counter()
        results[HINDSIGHT] = config.hindsight(results[name]["days"], args.hindsight_seconds, args.hindsight_workers)
        print(f"hindsight: {args.episodes} episodes solved by PyVRP in {time.perf_counter() - started:.1f} s "
              f"({args.hindsight_seconds:g} s each on {min(args.hindsight_workers, args.episodes)} processes)")
    return results


def report_setting(args: argparse.Namespace, results: dict[str, dict], config: EnvConfig, name: str,
                   setting: str | None, values: dict | None) -> dict[str, dict]:
    """Print one setting's table (and the gaps to the hindsight oracle with the plans re-solved); its rows."""
    hindsight = {}
    if HINDSIGHT in results:
        hindsight = {label: hindsight_gap(results[HINDSIGHT]["episode_return"], result["episode_return"])
                     for label, result in results.items()}
    gaps, resolved = pyvrp_gaps(results, config, args.pyvrp_episodes, args.pyvrp_seconds)
    rows = {label: summary(result, config.outcome_keys) for label, result in results.items()}
    where = f", setting {setting} {values}" if setting is not None else ""
    print(f"{args.episodes} episodes, seed {args.seed}{where}"
          + (f", instances {args.instances}" if args.instances else ""))
    print_table(results, rows, name, gaps, hindsight)
    for label, (gap, se) in hindsight.items():
        rows[label].update(gap_to_hindsight_pct=gap, gap_to_hindsight_se_pct=se)
    if resolved:
        print(f"gap to hindsight with each policy's plans of the first {args.pyvrp_episodes} episodes re-solved by "
              f"PyVRP (the same customers and windows; the routing's share of the gap removed):")
        for label, (gap, se) in resolved.items():
            print(f"  {label:12s} {gap:7.2f} ± {se:4.2f}%")
            rows[label].update(gap_to_hindsight_resolved_pct=gap, gap_to_hindsight_resolved_se_pct=se)
    return rows


def write_routes(path: str, name: str, plans: list[dict]) -> None:
    """The trained policy's plans as JSON (``--routes_out``)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"policy": name, "episodes": plans}, f)
    print(f"routes of {len(plans)} episodes written to {path}")


def write_video_of(args: argparse.Namespace, policy: Policy, settings: dict | None, device: torch.device) -> str | None:
    """One episode of the trained policy as ``--video`` (the first setting); the error line when it cannot be
    written (a full disk, a folder it cannot write: the tables still stand), else None."""
    values = next(iter(settings.values())) if settings else None
    try:
        config, models, make_policy = policy
        count = record_video(config, make_policy, args.video, args.seed, values, args.video_fps, device, models)
        print(f"video of one episode ({count} frames) written to {args.video}")
    except OSError as err:
        return f"error: cannot write the video {err.filename or args.video}: {err.strerror or err}"
    return None


def main(argv: list[str] | None = None) -> dict:
    """The command line (see the module docstring); returns the JSON table it prints last.

    Raises:
        SystemExit: 2, for a wrong option, config, checkpoint or ``--device``, or an existing ``--routes_out`` or
            ``--video`` (one line on stderr, before any episode is played); 1 when the video cannot be written, or
            when a result is not a finite number (after the tables and the JSON line, where it is ``null``).
    """
    parser, args, overrides, device = check_options(argv)
    torch.set_num_threads(args.num_threads)
    if args.instances is not None:
        env = {"init_args": {"instances": args.instances, "capacity": None}}  # the run's env class, these keys
        overrides = ["--data.init_args.env", json.dumps(env), *overrides]
    model, data = load_run(args.config, args.ckpt_path, overrides, str(device))
    config, name = data.env_config, type(model).__name__.removesuffix("Module").lower()
    policies, with_hindsight = build_policies(parser, args, model, data, name, overrides, device)
    settings = config.evaluation_settings if args.settings is None else args.settings
    table = {}
    for setting, values in (settings or {None: None}).items():
        results = play_setting(args, policies, config, name, values, with_hindsight, device)
        rows = report_setting(args, results, config, name, setting, values)
        for label, row in rows.items():
            table[label] = row if setting is None else {**table.get(label, {}), setting: row}
        if args.routes_out and setting is None:
            write_routes(args.routes_out, name, results[name]["plans"])
    failed = write_video_of(args, policies[name], settings, device) if args.video is not None else None
    table = rounded(table)
    line, nonfinite = json_line(table)
    print(line)
    sys.stdout.flush()
    if nonfinite:  # (null in the JSON line): a result that is no number is no result
        print(f"error: results that are not finite numbers: {', '.join(nonfinite[:5])}", file=sys.stderr)
    if failed:
        print(failed, file=sys.stderr)
    if failed or nonfinite:
        raise SystemExit(1)
    return table


if __name__ == "__main__":
    main()
