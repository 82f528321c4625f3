"""Evaluate a trained policy against its env's reference policies, on the same seeded episodes.

    python -m pipelines.evaluate --ckpt_path CKPT [--config configs/<run>.yaml] [--episodes 256] [--seed S]
        [--policies NAME ...] [--settings JSON] [--routes_out FILE] [--pyvrp_episodes K] [--hindsight_seconds S]
        [--instances GLOB] [--video FILE.mp4|.gif] [--compare_ckpt CKPT2 [--compare_config CFG ...]] [--device DEV]
        [dotted overrides]

The run's config is the ``config.yaml`` of the checkpoint's run folder (else the one the checkpoint records) unless
``--config`` gives it. Every policy plays the same episodes (the env is rebuilt with the same seed for each): the trained one
(deterministic; sampled for games, ``EnvConfig.stochastic_evaluation``), the env's reference policies (``EnvConfig.baseline_policies``: ``random`` for any env, the
scripted offer rules on DVRP), and with ``--compare_ckpt`` a second trained run (its own configs, e.g. an
ablation) as the row ``<name>[<its last config's stem, or its run folder>]``. A row has the mean return with its standard error and
the mean of every ``report`` entry the env gives at an episode's end (``<key>_rate`` for 0/1 outcomes such as
the hockey env's ``win``); the table adds the paired difference to the trained policy. Envs with evaluation
settings (hockey: the weak and strong opponents; ``--settings`` chooses others) get one table per setting.
The last stdout line is one JSON object: ``{policy: row}``, or ``{policy: {setting: row}}`` with settings.

Envs that export their episodes' plans (DVRP) also take ``--routes_out`` (the trained policy's plans as JSON
that other tools can check without this code) and ``--pyvrp_episodes K`` (each policy's final plans of K
episodes re-solved by the env's reference solver, PyVRP; the online plan's mean gap is a column).
DVRP also has the ``hindsight`` row (in the default ``--policies``): the hindsight (anticipative) oracle, which knows the
whole day at the start (every request and the customer's type) and picks each customer's window, or none, and the
routes to maximise the same return, solved with PyVRP in ``--hindsight_seconds`` per episode on ``--hindsight_workers``
processes (:mod:`envs.dvrp.hindsight`); every row then gets its gap to it, the mean over episodes of
``(hindsight - return) / hindsight`` in % ± SE (``gap_to_hindsight_pct`` in the JSON line). With ``--pyvrp_episodes K``
too, each row also gets the gap of its return with its K plans re-solved (``gap_to_hindsight_resolved_pct``): the
same decisions with the online insertion plan replaced by PyVRP's, so what remains is what the decisions lose.
``--video FILE.mp4|.gif`` also writes one episode of the trained policy as a video (envs that draw themselves:
hockey, vacuum, gymnasium envs, DVRP's plan growing over an episode). ``--instances GLOB`` is short for
``--data.init_args.env.init_args.instances=GLOB`` with the files' own capacity. A run's learned env model (the
flexibility model) is restored with its weights; nothing else of the training's state is (the envs' resume
positions, the replay buffer), so a checkpoint plays under any config whose model and networks it fits (e.g.
another ``num_envs``).

Everything plays on ``--device`` (default ``cpu``), whatever the run trained on: the config's collector and
trainer options for its own hardware (``data.workers``, ``collector``, ``ray``, ``compile_policy``,
``cudagraph_policy``, ``device``; ``trainer.accelerator``, ``devices``, ``strategy``, ``num_nodes``,
``precision``) are set aside (:data:`PLAY_HERE`). ``--routes_out`` and ``--video`` never overwrite a file (checked before any
work). A wrong option, config, checkpoint or device ends with one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from collections.abc import Callable

from pipelines.threads import set_wait_policy

set_wait_policy()  # before torch is imported (pipelines/threads.py)

import torch  # noqa: E402
from jsonargparse import Namespace  # noqa: E402

from envs import EnvConfig, make_env, unwrap  # noqa: E402
from envs.episodes import play_episodes  # noqa: E402
from envs.video import FORMATS, record_episode, write_video  # noqa: E402
from modules.base import RLModule  # noqa: E402
from pipelines.checkpoints import MODEL_KEYS, run_configs, weights_mismatch  # noqa: E402
from pipelines.console import rounded  # noqa: E402
from pipelines.data import RLDataModule  # noqa: E402
from pipelines.export import resolve_device  # noqa: E402
from pipelines.fit import FitCLI, config_exit  # noqa: E402
from pipelines.run_config import FIT_KEYS, CommandParser, parse_with_fit_keys  # noqa: E402


HINDSIGHT = "hindsight"  # the label of the hindsight oracle (EnvConfig.hindsight) in evaluate's tables

# what a config's data module and trainer get for playing episodes here: the collector and trainer options meant
# for the training's hardware (rollout workers, Ray, a compiled or CUDA-graph collector policy, GPUs, DDP) play
# no part in evaluation, which steps its own envs with the policy in this process
PLAY_HERE = {"data": {"workers": 0, "collector": "sync", "ray": None, "compile_policy": False,
                      "cudagraph_policy": False},
             "trainer": {"accelerator": "cpu", "devices": 1, "strategy": "auto", "num_nodes": 1, "precision": None}}


class _EvaluationCLI(FitCLI):
    """Fit's CLI for an evaluation: the checkpoint must share the model and networks only (the env may differ),
    and the config is set to play on ``device`` (:data:`PLAY_HERE`, ``data.device``) before anything is built."""

    checkpoint_keys = MODEL_KEYS  # the same model and networks; the env may differ (other instances, sizes)
    trains = False  # the checkpoint is played, not continued

    def __init__(self, *args, device: str = "cpu", **kwargs) -> None:
        self.play_device = device
        super().__init__(*args, **kwargs)

    def before_instantiate_classes(self) -> None:
        data = (self.config.get("data") or Namespace()).get("init_args") or Namespace()
        trainer = self.config.get("trainer") or Namespace()
        for node, values in ((data, {**PLAY_HERE["data"], "device": self.play_device}),
                             (trainer, PLAY_HERE["trainer"])):
            for key, value in values.items():
                if key in node:  # (the keys a data module has: EpisodeDataModule has no collector)
                    node[key] = value
        super().before_instantiate_classes()


def load_run(configs: str | list[str] | None, ckpt_path: str, overrides: list[str],
             device: str = "cpu") -> tuple[RLModule, RLDataModule]:
    """Build model and data module from fit configs (later ones override earlier ones, then the dotted
    overrides; None: the run's own, :func:`pipelines.checkpoints.run_configs`), set to play on ``device``
    (:data:`PLAY_HERE`), and load the checkpoint: the weights and the env's learned model (the data module's
    ``embedding_model``, if any), nothing else of the training's state (the envs' resume positions, which are the
    training's and fit only its ``num_envs``). The checkpoint is checked as ``pipelines.fit --ckpt_path`` checks
    it, before anything is built, except that the env may differ from the one it was trained on.

    Returns:
        The module (eval mode, on ``device``) and the data module (its env on ``device``).

    Raises:
        FileNotFoundError: a config or the checkpoint does not exist.
        SystemExit: 2, for a checkpoint that is unreadable, was trained with another config, has weights or an env
            model that do not fit this config's, or (without ``configs``) has no config beside it or in it (one
            message).
    """
    if configs is None:
        try:
            configs, source = run_configs(ckpt_path)
        except ValueError as err:
            config_exit(err)
        print(f"config: {source}", file=sys.stderr)
    configs = [configs] if isinstance(configs, str) else list(configs)
    for path, what in [*((c, "config") for c in configs if "\n" not in c), (ckpt_path, "checkpoint")]:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{what} not found: {path!r}")
    cli = _EvaluationCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                 save_config_callback=None, auto_configure_optimizers=False, device=device,
                 args=[*(a for c in configs for a in ("--config", c)), f"--ckpt_path={ckpt_path}",  # checked first
                       "--trainer.logger=false",
                       "--trainer.enable_checkpointing=false", "--trainer.callbacks=[]", *overrides])
    model, data = cli.model, cli.datamodule
    data.setup("validate")
    model.build_on(data.env_specs())  # (specs on the CPU: the module moves to the device once loaded)
    checkpoint = torch.load(ckpt_path, map_location="cpu", weights_only=True)  # tensors and plain data only
    try:
        model.load_state_dict(checkpoint["state_dict"])
    except RuntimeError as err:
        mismatch = weights_mismatch(err, ckpt_path)
        if mismatch is None:
            raise
        config_exit(mismatch)
    env_model = (checkpoint.get(type(data).__qualname__) or {}).get("embedding_model")
    if env_model is not None:
        _restore_env_model(data, env_model, ckpt_path)
    model.to(device)
    model.eval()
    return model, data


def _restore_env_model(data: RLDataModule, weights: dict, ckpt_path: str) -> None:
    """Load the checkpoint's env model (e.g. the DVRP flexibility model) into the config's.

    Raises:
        SystemExit: 2, for a config whose env has no such model or one of other shapes (one message).
    """
    if data.embedding_model() is None:
        config_exit(ValueError(f"--ckpt_path={ckpt_path!r} has a learned env model (embedding_model) but this "
                               f"config's env has none (was it trained with another env config?)"))
    try:
        data.update_embedding(weights)
    except RuntimeError as err:
        mismatch = weights_mismatch(err, ckpt_path)
        if mismatch is None:
            raise
        config_exit(ValueError(f"{mismatch} (its env model)"))


def _run_name(ckpt_path: str) -> str:
    """A checkpoint's run, for a table label: ``<name>/<version>`` of ``<name>/<version>/checkpoints/x.ckpt``."""
    parts = os.path.abspath(ckpt_path).split(os.sep)
    return "/".join(parts[-4:-2]) if len(parts) > 3 and parts[-2] == "checkpoints" else os.path.basename(ckpt_path)


def play(config: EnvConfig, make_policy: Callable, episodes: int, num_envs: int, seed: int,
         settings: dict | None = None, keep_plans: bool = False, device: str | torch.device = "cpu") -> dict:
    """Play ``episodes`` episodes of ``config``'s env (``num_envs`` rows seeded ``seed, seed + 1, ...``, the
    first ``ceil(episodes / num_envs)`` episodes of each) with the policy ``make_policy(env)``, deterministically
    (sampled for an env config with ``stochastic_evaluation``: games).

    Args:
        settings: runtime settings applied through the env's ``configure`` first (e.g. an opponent).
        keep_plans: also keep each episode's exported plan (the env's ``export_episodes``) under ``plans``, and
            its whole day (``export_days``, where the env has it: the hindsight oracle's input) under ``days``.
        device: where the env steps (the policy must be there too).

    Returns:
        :func:`envs.episodes.play_episodes`'s per-episode results ``[episodes]`` (float64), plus ``plans``.

    Raises:
        ValueError: ``settings`` the env rejects, or ``keep_plans`` for an env that exports no plans.
    """
    env = _env(config, num_envs, seed, settings, device)
    base = unwrap(env)
    if keep_plans and not hasattr(base, "export_episodes"):
        raise ValueError(f"--routes_out / --pyvrp_episodes need an env that exports its plans, got {type(base).__name__}")
    plans: list[tuple[int, dict]] = []
    days: list[tuple[int, dict]] = []
    counts = torch.zeros(num_envs, dtype=torch.long)

    def export(step, finished) -> None:  # before the finished rows are reset
        rows = finished.nonzero().squeeze(-1).tolist()
        plans.extend((int(counts[r]) * num_envs + r, plan) for r, plan in zip(rows, base.export_episodes(rows)))
        if hasattr(base, "export_days"):
            days.extend((int(counts[r]) * num_envs + r, day) for r, day in zip(rows, base.export_days(rows)))
        counts[finished] += 1

    result = play_episodes(env, make_policy(env), -(-episodes // num_envs), on_step=export if keep_plans else None,
                           stochastic=config.stochastic_evaluation, sample_seed=seed)
    env.close()
    out = {key: value[:episodes].double().cpu() for key, value in result.items()}
    out["plans"] = [plan for _, plan in sorted(plans, key=lambda p: p[0])][:episodes]
    out["days"] = [day for _, day in sorted(days, key=lambda p: p[0])][:episodes]
    return out


def _env(config: EnvConfig, num_envs: int, seed: int, settings: dict | None, device: str | torch.device = "cpu"):
    """``config``'s env on ``device`` with runtime ``settings`` applied (``configure``).

    Raises:
        ValueError: ``settings`` for an env without ``configure``, or ones it rejects.
    """
    env = make_env(config, num_envs, seed, device)
    if settings:
        base = unwrap(env)
        if not hasattr(base, "configure"):
            raise ValueError(f"evaluation settings {settings} need an env with configure(), got {type(base).__name__}")
        base.configure(**settings)
    return env


def record_video(config: EnvConfig, make_policy: Callable, path: str, seed: int, settings: dict | None,
                 fps: float, device: str | torch.device = "cpu") -> int:
    """One episode of ``config``'s env (row 0, seeded ``seed``, with ``settings``, on ``device``) played by
    ``make_policy(env)``,
    written to ``path`` (:func:`envs.video.write_video`); a gymnasium env is built with ``render_mode: rgb_array``.

    Returns:
        The frames written (one per step of the episode).

    Raises:
        ValueError: an env that cannot draw itself, or a file name that is not ``.mp4`` / ``.gif``.
    """
    if getattr(config, "render_mode", "") is None:
        config = copy.copy(config)
        config.render_mode = "rgb_array"
    env = _env(config, 1, seed, settings, device)
    try:
        frames = record_episode(env, make_policy(env), stochastic=config.stochastic_evaluation, sample_seed=seed)
    finally:
        env.close()
    write_video(path, frames, fps)
    return len(frames)


def summary(result: dict, outcome_keys: tuple[str, ...]) -> dict[str, float]:
    """A table row: ``mean_return``, ``return_se`` and ``mean_<key>`` (``<key>_rate`` for outcomes) of every
    other result (``agent<i>/<key>`` as ``mean_agent<i>_<key>``)."""
    r = result["episode_return"]
    row = {"mean_return": r.mean().item(), "return_se": (r.std() / math.sqrt(r.numel())).item()}
    for key, value in result.items():
        if key in ("episode_return", "plans", "days"):
            continue
        name = key.replace("/episode_return", "_return").replace("/", "_")
        row[f"{name}_rate" if key in outcome_keys else f"mean_{name}"] = value.mean().item()
    return row


def hindsight_gap(hindsight: torch.Tensor, returns: torch.Tensor) -> tuple[float, float]:
    """The gap to the hindsight oracle in %: the mean over episodes of ``(hindsight - return) / |hindsight|``
    ``[E]`` and its standard error (episodes where the oracle scores 0 count as 0)."""
    gap = 100.0 * (hindsight - returns) / hindsight.abs().clamp_min(1e-9)
    gap = torch.where(hindsight.abs() > 1e-9, gap, 0.0)
    return gap.mean().item(), (gap.std() / math.sqrt(gap.numel())).item() if gap.numel() > 1 else 0.0


def _print_table(results: dict[str, dict], rows: dict[str, dict], mine: str, gaps: dict[str, float],
                 hindsight: dict[str, tuple[float, float]]) -> None:
    """The human-readable table: return, every other column, the paired difference to ``mine``, the gap to the
    PyVRP re-solve of each policy's plans (``gaps``), the gap to the hindsight oracle (``hindsight``, % ± SE)."""
    width = max(12, *(len(p) for p in rows))
    columns = [k for k in next(iter(rows.values())) if k not in ("mean_return", "return_se")]
    labels = {c: c.removeprefix("mean_") for c in columns}
    widths = {c: max(9, len(labels[c])) for c in columns}
    print(f"{'policy':{width}s} {'return':>17s} " + " ".join(f"{labels[c]:>{widths[c]}s}" for c in columns)
          + f" {mine + ' - row':>16s}" + ("  gap to PyVRP" if gaps else "")
          + ("  gap to hindsight" if hindsight else ""))
    n, reference = results[mine]["episode_return"].numel(), results[mine]["episode_return"]
    for policy, row in rows.items():
        diff = reference - results[policy]["episode_return"]
        paired = "" if policy == mine else f"{diff.mean().item():+8.2f} ± {(diff.std() / math.sqrt(n)).item():5.2f}"
        gap = f"  {100 * gaps[policy]:+12.1f}%" if policy in gaps else ("" if not gaps else " " * 15)
        if policy in hindsight:
            gap += f"  {hindsight[policy][0]:7.2f} ± {hindsight[policy][1]:4.2f}%"
        print(f"{policy:{width}s} {row['mean_return']:9.2f} ± {row['return_se']:5.2f} "
              + " ".join(f"{row[c]:{widths[c]}.3f}" for c in columns) + f" {paired:>16s}{gap}")


def main(argv: list[str] | None = None) -> dict:
    """The command line (see the module docstring); returns the JSON table it prints last.

    Raises:
        SystemExit: 2, for a wrong option, config, checkpoint or ``--device``, or an existing ``--routes_out`` or
            ``--video`` (one line on stderr, before any episode is played); 1 when the video cannot be written (after
            the tables and the JSON line).
    """
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
    parser.add_argument("--settings", type=json.loads, default=None,
                        help='JSON {name: env settings}: one table per setting (default: the env\'s evaluation_settings, '
                             'e.g. {"weak": {"mode": "NORMAL", "opponent": "weak"}, ...} on hockey); {} for one table')
    parser.add_argument("--routes_out", default=None, help="write the trained policy's plans to this JSON file")
    parser.add_argument("--pyvrp_episodes", type=int, default=0, help="re-solve this many episodes per policy with PyVRP")
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
    parser.add_argument("--video", default=None, help="write one episode of the trained policy (row 0 of the evaluation "
                        "seed; the first setting) to this .mp4 or .gif file")
    parser.add_argument("--video_fps", type=float, default=25.0, help="frames per second of --video")
    parser.add_argument("--num_threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--device", default="cpu", help="device the envs and policies play on (cpu, cuda, cuda:<k>), "
                        "whatever the run trained on")
    args, overrides = parse_with_fit_keys(parser, argv, FIT_KEYS[:4])
    if args.episodes < 1 or args.num_envs < 1:
        parser.error(f"--episodes and --num_envs must be >= 1 (got {args.episodes}, {args.num_envs})")
    if not args.hindsight_seconds > 0 or args.hindsight_workers < 1:
        parser.error(f"--hindsight_seconds must be > 0 and --hindsight_workers >= 1 (got {args.hindsight_seconds}, "
                     f"{args.hindsight_workers})")
    if args.video is not None and os.path.splitext(args.video)[1].lower() not in FORMATS:
        parser.error(f"--video {args.video!r}: a {' or '.join(FORMATS)} file")
    if args.compare_config is not None and args.compare_ckpt is None:
        parser.error("--compare_config needs --compare_ckpt (the second run's checkpoint)")
    for option, path in (("--routes_out", args.routes_out), ("--video", args.video)):
        if path is not None and os.path.lexists(path):
            config_exit(ValueError(f"{option}={path!r} exists: evaluate never overwrites a file (remove it or give "
                                   f"another name)"))
    try:
        device = resolve_device(args.device)
    except ValueError as err:
        config_exit(err)
    torch.set_num_threads(args.num_threads)
    if args.instances is not None:
        env = {"init_args": {"instances": args.instances, "capacity": None}}  # the run's env class, these keys
        overrides = ["--data.init_args.env", json.dumps(env), *overrides]
    model, data = load_run(args.config, args.ckpt_path, overrides, str(device))
    config, name = data.env_config, type(model).__name__.removesuffix("Module").lower()
    baselines = config.baseline_policies()
    offline = [HINDSIGHT] if type(config).hindsight is not EnvConfig.hindsight else []
    chosen = [*baselines, *offline] if args.policies is None else args.policies
    unknown = [p for p in chosen if p not in baselines and p not in offline]
    if unknown:
        parser.error(f"unknown --policies {unknown}; this env's: {', '.join([*baselines, *offline])}")
    with_hindsight = HINDSIGHT in chosen
    chosen = [p for p in chosen if p != HINDSIGHT]
    # label -> (the env config it plays on, with its own learned env model; its policy factory)
    policies = {name: (config, lambda env: model.collector_policy)}
    if args.compare_ckpt is not None:
        other, other_data = load_run(args.compare_config, args.compare_ckpt, overrides, str(device))
        stem = (os.path.splitext(os.path.basename(args.compare_config[-1]))[0] if args.compare_config
                else _run_name(args.compare_ckpt))
        policies[f"{name}[{stem}]"] = (other_data.env_config, lambda env: other.collector_policy)
    policies.update({p: (config, lambda env, make=baselines[p]: make(env, args.seed)) for p in chosen})
    settings = config.evaluation_settings if args.settings is None else args.settings
    num_envs = min(args.num_envs, args.episodes)
    table = {}
    for setting, values in (settings or {None: None}).items():
        results = {}
        for label, (env_config, make_policy) in policies.items():
            torch.manual_seed(args.seed)  # a policy drawing from the global generator: the same draws every time
            keep = (args.pyvrp_episodes > 0 or (label == name and (args.routes_out is not None or with_hindsight)))
            results[label] = play(env_config, make_policy, args.episodes, num_envs, args.seed, values, keep, device)
        hindsight = {}
        if with_hindsight:  # every policy plays the same days: the trained policy's export has them
            started = time.perf_counter()
            results[HINDSIGHT] = config.hindsight(results[name]["days"], args.hindsight_seconds, args.hindsight_workers)
            print(f"hindsight: {args.episodes} episodes solved by PyVRP in {time.perf_counter() - started:.1f} s "
                  f"({args.hindsight_seconds:g} s each on {min(args.hindsight_workers, args.episodes)} processes)")
            hindsight = {label: hindsight_gap(results[HINDSIGHT]["episode_return"], result["episode_return"])
                         for label, result in results.items()}
        gaps, resolved = {}, {}
        for label, result in results.items():
            found = [(plan["cost_km"], config.reference_cost(plan, args.pyvrp_seconds))
                     for plan in result.get("plans", [])[:args.pyvrp_episodes]]
            ratios = [online / ref - 1.0 for online, ref in found if ref]
            if found:
                gaps[label] = sum(ratios) / max(len(ratios), 1)
            if found and with_hindsight:  # the same decisions, the plan re-solved: what the decisions alone lose
                saved = torch.tensor([online - ref if ref is not None else 0.0 for online, ref in found],
                                     dtype=torch.float64)
                k = len(found)
                resolved[label] = hindsight_gap(results[HINDSIGHT]["episode_return"][:k],
                                                result["episode_return"][:k] + saved)
        rows = {label: summary(result, config.outcome_keys) for label, result in results.items()}
        where = f", setting {setting} {values}" if setting is not None else ""
        print(f"{args.episodes} episodes, seed {args.seed}{where}" + (f", instances {args.instances}" if args.instances else ""))
        _print_table(results, rows, name, gaps, hindsight)
        for label, (gap, se) in hindsight.items():
            rows[label].update(gap_to_hindsight_pct=gap, gap_to_hindsight_se_pct=se)
        if resolved:
            print(f"gap to hindsight with each policy's plans of the first {args.pyvrp_episodes} episodes re-solved by "
                  f"PyVRP (the same customers and windows; the routing's share of the gap removed):")
            for label, (gap, se) in resolved.items():
                print(f"  {label:12s} {gap:7.2f} ± {se:4.2f}%")
                rows[label].update(gap_to_hindsight_resolved_pct=gap, gap_to_hindsight_resolved_se_pct=se)
        for label, row in rows.items():
            table[label] = row if setting is None else {**table.get(label, {}), setting: row}
        if args.routes_out and setting is None:
            os.makedirs(os.path.dirname(os.path.abspath(args.routes_out)), exist_ok=True)
            with open(args.routes_out, "w") as f:
                json.dump({"policy": name, "episodes": results[name]["plans"]}, f)
            print(f"routes of {len(results[name]['plans'])} episodes written to {args.routes_out}")
    failed = None
    if args.video is not None:
        values = next(iter(settings.values())) if settings else None
        try:
            count = record_video(config, policies[name][1], args.video, args.seed, values, args.video_fps, device)
            print(f"video of one episode ({count} frames) written to {args.video}")
        except OSError as err:  # a full disk, a folder it cannot write: the table above still stands
            failed = f"error: cannot write the video {err.filename or args.video}: {err.strerror or err}"
    table = rounded(table)
    print(json.dumps(table))
    sys.stdout.flush()
    if failed:
        print(failed, file=sys.stderr)
        raise SystemExit(1)
    return table


if __name__ == "__main__":
    main()
