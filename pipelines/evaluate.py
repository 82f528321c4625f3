"""Evaluate a trained policy: on DVRP configs against the scripted baselines on the same seeded
episodes; on any other config, against the uniform random policy (``{policy: {mean_return, return_se,
mean_<report>}, random: {...}}`` as the last stdout line, with every ``report`` entry the env gives at
the end of an episode; ``--policies`` without ``random`` leaves that row out). Envs with evaluation
settings (hockey: the weak and strong opponents; ``--settings`` to choose others) get one row per setting,
``{policy: {weak: {mean_return, win_rate, draw_rate, loss_rate, ...}, strong: {...}}, random: {...}}``.

    python -m pipelines.evaluate --config configs/dvrp.yaml --ckpt_path CKPT [--episodes 256]
        [--instances GLOB] [--routes_out FILE] [--pyvrp_episodes K] [--seed S] [dotted overrides]
        [--compare_config CFG [--compare_config CFG2] --compare_ckpt CKPT2]

Every policy plays the same episodes (same instances, arrival orders, types and attributes): the
env is rebuilt with the same seed for each. Prints a table (mean return +- standard error, cost,
failure rate, served, refused offers, the paired difference to the trained policy, and with
``--pyvrp_episodes`` the online plan's gap to a PyVRP re-solve of the same served set), then, as the
last stdout line, one JSON object ``{policy: {mean_return, return_se, mean_cost_km, failure_rate,
mean_served}}``. ``--routes_out`` writes the trained policy's plans as JSON (see
``DVRPEnv.export_episodes``) that other tools can check without this code. ``--compare_ckpt`` adds a
second trained run (its own configs, e.g. an ablation) as the row ``<name>[<last config's stem>]``, on
the same episodes. A run's learned env model (the flexibility model) is restored with its weights.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch
from torchrl.envs import ExplorationType, set_exploration_type

from envs import EnvConfig, make_env
from envs.dvrp.baselines import BASELINES, ScriptedOfferPolicy
from envs.dvrp.config import DVRPConfig
from envs.dvrp.env import DVRPEnv
from envs.dvrp.reference import solve_with_pyvrp
from modules.base import RLModule
from pipelines.data import RLDataModule
from pipelines.fit import FitCLI


def load_run(configs: str | list[str], ckpt_path: str, overrides: list[str]) -> tuple[RLModule, RLDataModule]:
    """Build model and data module from fit configs (later ones override earlier ones, then the dotted
    overrides) and load the checkpoint: the weights and the data module's state (the env's learned
    model, if any).

    Raises:
        FileNotFoundError: a config or the checkpoint does not exist.
    """
    configs = [configs] if isinstance(configs, str) else list(configs)
    for path, what in [*((c, "config") for c in configs), (ckpt_path, "checkpoint")]:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{what} not found: {path!r}")
    cli = FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                 save_config_callback=None, auto_configure_optimizers=False,
                 args=[*(a for c in configs for a in ("--config", c)), "--trainer.logger=false",
                       "--trainer.enable_checkpointing=false", "--trainer.callbacks=[]", *overrides])
    model, data = cli.model, cli.datamodule
    model.prepare(data)
    checkpoint = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    model.load_state_dict(checkpoint["state_dict"])
    data_state = checkpoint.get(type(data).__qualname__)
    if data_state:
        data.load_state_dict(data_state)
    model.eval()
    return model, data


def play(config: DVRPConfig, make_policy, episodes: int, num_envs: int, seed: int,
         keep_records: bool = False) -> dict:
    """Play ``episodes`` episodes (``num_envs`` at a time) of ``config``'s env with the policy
    ``make_policy(env)``; returns per-episode ``return``, ``cost_km``, ``failure_rate``, ``served``,
    ``refused`` (tensors ``[episodes]``) and, if asked, the exported plans."""
    env: DVRPEnv = config.make(num_envs=num_envs, seed=seed)
    policy = make_policy(env)
    out: dict[str, list] = {k: [] for k in ("return", "cost_km", "failure_rate", "served", "refused", "records")}
    while len(out["return"]) * num_envs < episodes:
        td = env.reset()
        total = torch.zeros(num_envs)
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            while True:
                td = env.step(policy(td))
                total += td["next", "reward"].squeeze(-1)
                td = td["next"]
                if bool(td["done"].all()):
                    break
        report = td["report"]
        out["return"].append(total)
        out["cost_km"].append(report["plan_cost_km"].squeeze(-1))
        out["failure_rate"].append(report["failure_rate"].squeeze(-1))
        out["served"].append(report["served"].squeeze(-1))
        out["refused"].append(report["refused"].squeeze(-1))
        if keep_records:
            out["records"].extend(env.export_episodes())
    result = {k: torch.cat(v)[:episodes].double() for k, v in out.items() if k != "records"}
    result["records"] = out["records"][:episodes]
    return result


def play_any(config: EnvConfig, policy, episodes: int, num_envs: int, seed: int,
             settings: dict | None = None) -> dict[str, torch.Tensor]:
    """Play the first ``ceil(episodes / num_envs)`` episodes of every row of ``config``'s env (seeds
    ``seed, seed + 1, ...``; ``settings`` applied through the env's ``configure`` first) with ``policy``
    (deterministic); returns per-episode ``return`` (a multi-agent env's: summed over agents, and per
    agent as ``agent<i>_return``) and every ``report`` entry of the env at the episode's end (a per-agent
    entry: its mean, and per agent as ``agent<i>_<key>``), ``[episodes]`` each (rows in order).

    Raises:
        ValueError: ``settings`` for an env without ``configure``, or settings it rejects.
    """
    env = make_env(config, num_envs, seed)
    if settings:
        base = getattr(env, "base_env", env)
        if not hasattr(base, "configure"):
            raise ValueError(f"evaluation settings {settings} need an env with configure(), got {type(base).__name__}")
        base.configure(**settings)
    per_row = -(-episodes // num_envs)
    counts = torch.zeros(num_envs, dtype=torch.long)
    out: dict[str, list] = {}
    td = env.reset()
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        while bool((counts < per_row).any()):
            step, td = env.step_and_maybe_reset(policy(td))
            nxt = step["next"]
            keep = nxt["done"].reshape(num_envs) & (counts < per_row)
            if bool(keep.any()):
                returns = nxt["episode_reward"].reshape(num_envs, -1)[keep]  # [k, R]: one column per agent
                out.setdefault("return", []).append(returns.sum(-1))
                if returns.shape[1] > 1:
                    for i in range(returns.shape[1]):
                        out.setdefault(f"agent{i}_return", []).append(returns[:, i])
                if "report" in nxt.keys():
                    for key, value in nxt["report"].items():
                        value = value.reshape(num_envs, -1)[keep].float()  # [k, 1], or [k, R] per agent
                        out.setdefault(key, []).append(value.mean(-1))
                        if value.shape[1] > 1:
                            for i in range(value.shape[1]):
                                out.setdefault(f"agent{i}_{key}", []).append(value[:, i])
            counts += keep.long()
    env.close()
    return {k: torch.cat(v)[:episodes].double() for k, v in out.items()}


class UniformRandomPolicy:
    """The random baseline of any env: uniform over each agent's allowed actions (``action_mask``,
    ``[*B, A]`` -> categorical ``action`` ``[*B]``), else a draw from the per-sample ``action_spec``."""

    def __init__(self, action_spec) -> None:
        self.action_spec = action_spec

    def __call__(self, td):
        if "action_mask" in td.keys():
            mask = td["action_mask"]
            draw = torch.multinomial(mask.float().reshape(-1, mask.shape[-1]), 1)
            td["action"] = draw.reshape(mask.shape[:-1])
        else:
            td["action"] = self.action_spec.rand(td.batch_size)
        return td


def evaluate_any(model: RLModule, data: RLDataModule, name: str, episodes: int, num_envs: int,
                 seed: int, random: bool = True, settings: dict[str, dict] | None = None) -> dict:
    """The trained policy on any env config, and with ``random`` the uniform random policy on the same
    episodes. Prints ``{name: row, random: row}`` as the last stdout line and returns it; a row is
    ``{mean_return, return_se, mean_<report key>, <outcome key>_rate}``. With ``settings`` (default: the
    env config's ``evaluation_settings``, e.g. the hockey opponents) each policy gets one row per setting:
    ``{name: {setting: row}, ...}``."""
    settings = data.env_config.evaluation_settings if settings is None else settings
    policies = {name: model.collector_policy}
    if random:
        policies["random"] = UniformRandomPolicy(data.env.action_spec_unbatched)
    outcomes = data.env_config.outcome_keys
    table = {}
    for label, policy in policies.items():
        for setting, values in (settings or {None: None}).items():
            torch.manual_seed(seed)  # the random policy draws from the global generator: the same draws every time
            result = play_any(data.env_config, policy, episodes, num_envs, seed, values)
            r = result["return"]
            row = {"mean_return": r.mean().item(), "return_se": (r.std() / math.sqrt(r.numel())).item()}
            row.update({f"{k}_rate" if k in outcomes else f"mean_{k}": v.mean().item()
                        for k, v in result.items() if k != "return"})
            where = f" vs {setting}" if setting else ""
            print(f"{r.numel()} episodes, seed {seed}: {label}{where} return {row['mean_return']:.2f} ± "
                  f"{row['return_se']:.2f}, " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()
                                                           if k not in ("mean_return", "return_se")))
            if setting is None:
                table[label] = row
            else:
                table.setdefault(label, {})[setting] = row
    print(json.dumps(table))
    sys.stdout.flush()
    return table


def summary(result: dict) -> dict[str, float]:
    r = result["return"]
    return {"mean_return": r.mean().item(), "return_se": (r.std() / math.sqrt(r.numel())).item(),
            "mean_cost_km": result["cost_km"].mean().item(), "failure_rate": result["failure_rate"].mean().item(),
            "mean_served": result["served"].mean().item()}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, action="append", help="the fit config(s) of the run")
    parser.add_argument("--ckpt_path", required=True, help="checkpoint of the trained policy")
    parser.add_argument("--episodes", type=int, default=256, help="episodes per policy")
    parser.add_argument("--instances", default=None, help="glob of Solomon .txt / VRPLIB .vrp files "
                        "(episodes draw N customers of a random file; capacity from the files)")
    parser.add_argument("--routes_out", default=None, help="write the trained policy's plans to this JSON file")
    parser.add_argument("--seed", type=int, default=10_000_000, help="seed of the evaluation episodes")
    parser.add_argument("--num_envs", type=int, default=256, help="episodes played at once")
    parser.add_argument("--policies", nargs="*", default=list(BASELINES),
                        help="baselines to include (off DVRP only `random`, uniform over the allowed actions)")
    parser.add_argument("--pyvrp_episodes", type=int, default=0, help="re-solve this many episodes per policy with PyVRP")
    parser.add_argument("--pyvrp_seconds", type=float, default=1.0, help="PyVRP time per episode")
    parser.add_argument("--num_threads", type=int, default=1)
    parser.add_argument("--settings", type=json.loads, default=None,
                        help='JSON {name: env settings}: one row per setting (default: the env\'s evaluation_settings, '
                             'e.g. {"weak": {"mode": "NORMAL", "opponent": "weak"}, ...} on hockey); {} for one row')
    parser.add_argument("--compare_config", action="append", default=None, help="config(s) of a second run")
    parser.add_argument("--compare_ckpt", default=None, help="checkpoint of a second run, played on the same episodes")
    args, overrides = parser.parse_known_args(argv)
    if args.episodes < 1 or args.num_envs < 1:
        parser.error(f"--episodes and --num_envs must be >= 1 (got {args.episodes}, {args.num_envs})")
    unknown = [p for p in args.policies if p not in BASELINES]
    if unknown:
        parser.error(f"unknown --policies {unknown}; allowed: {', '.join(BASELINES)}")
    if (args.compare_ckpt is None) != (args.compare_config is None):
        parser.error("--compare_ckpt and --compare_config go together")
    torch.set_num_threads(args.num_threads)
    if args.instances is not None:
        env = {"class_path": "envs.dvrp.DVRPConfig", "init_args": {"instances": args.instances, "capacity": None}}
        overrides = ["--data.init_args.env", json.dumps(env), *overrides]
    model, data = load_run(args.config, args.ckpt_path, overrides)
    name = type(model).__name__.removesuffix("Module").lower()
    if not isinstance(data.env_config, DVRPConfig):
        return evaluate_any(model, data, name, args.episodes, min(args.num_envs, args.episodes), args.seed,
                            random="random" in args.policies, settings=args.settings)
    num_envs = min(args.num_envs, args.episodes)
    keep = args.routes_out is not None or args.pyvrp_episodes > 0
    results = {name: play(data.env_config, lambda env: model.collector_policy, args.episodes, num_envs, args.seed, keep)}
    if args.compare_ckpt is not None:
        other, other_data = load_run(args.compare_config, args.compare_ckpt, overrides)
        label = f"{name}[{os.path.splitext(os.path.basename(args.compare_config[-1]))[0]}]"
        results[label] = play(other_data.env_config, lambda env: other.collector_policy, args.episodes, num_envs,
                              args.seed, keep)
    for baseline in args.policies:
        results[baseline] = play(data.env_config, lambda env, b=baseline: ScriptedOfferPolicy(b, env, seed=args.seed),
                                 args.episodes, num_envs, args.seed, args.pyvrp_episodes > 0)
    gaps = {}
    if args.pyvrp_episodes > 0:
        vehicles = data.env_config.num_vehicles
        for policy, result in results.items():
            found = [(rec["cost_km"], solve_with_pyvrp(rec, vehicles, args.pyvrp_seconds))
                     for rec in result["records"][: args.pyvrp_episodes]]
            ratios = [online / ref[0] - 1.0 for online, ref in found if ref is not None and ref[0] > 0]
            gaps[policy] = sum(ratios) / max(len(ratios), 1)
    mine = results[name]["return"]
    print(f"{args.episodes} episodes, seed {args.seed}" + (f", instances {args.instances}" if args.instances else ""))
    width = max(12, *(len(p) for p in results))
    header = (f"{'policy':{width}s} {'return':>16s} {'cost km':>8s} {'failure':>8s} {'served':>7s} {'refused':>8s} "
              f"{name + ' - row':>14s}")
    print(header + ("  gap to PyVRP" if gaps else ""))
    table = {}
    for policy, result in results.items():
        table[policy] = summary(result)
        s, n = table[policy], mine.numel()
        diff = mine - result["return"]
        paired = "" if policy == name else f"{diff.mean().item():+7.1f} ± {(diff.std() / math.sqrt(n)).item():4.1f}"
        gap = f"  {100 * gaps[policy]:+.1f}%" if policy in gaps else ""
        print(f"{policy:{width}s} {s['mean_return']:8.1f} ± {s['return_se']:5.1f} {s['mean_cost_km']:8.1f} "
              f"{s['failure_rate']:8.3f} {s['mean_served']:7.2f} {result['refused'].mean().item():8.2f} {paired:>14s}{gap}")
    if "prior" in table and "informed" in table:
        lo, hi = table["prior"]["mean_return"], table["informed"]["mean_return"]
        share = (table[name]["mean_return"] - lo) / (hi - lo) if hi != lo else float("nan")
        print(f"{name} closes {100 * share:.0f}% of the prior -> informed gap")
    if args.routes_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.routes_out)), exist_ok=True)
        with open(args.routes_out, "w") as f:
            json.dump({"policy": name, "episodes": results[name]["records"]}, f)
        print(f"routes of {len(results[name]['records'])} episodes written to {args.routes_out}")
    print(json.dumps(table))
    sys.stdout.flush()
    return table


if __name__ == "__main__":
    main()
