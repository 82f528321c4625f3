"""The tables of ``pipelines.evaluate``: a row of results per policy, the gaps to the hindsight oracle and to
PyVRP's re-solve of each policy's plans, and the human-readable table."""

from __future__ import annotations

import math

import torch

from envs import EnvConfig

HINDSIGHT = "hindsight"  # the label of the hindsight oracle (EnvConfig.hindsight) in evaluate's tables


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


def pyvrp_gaps(results: dict[str, dict], config: EnvConfig, episodes: int,
               seconds: float) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """Each policy's plans of the first ``episodes`` episodes re-solved by the env's reference solver (PyVRP,
    ``seconds`` each): the mean gap of the online plan's cost to it, and (with the hindsight oracle's results
    under ``HINDSIGHT``) the gap to hindsight, % ± SE, with the plans re-solved."""
    gaps, resolved = {}, {}
    for label, result in results.items():
        found = [(plan["cost_km"], config.reference_cost(plan, seconds))
                 for plan in result.get("plans", [])[:episodes]]
        ratios = [online / ref - 1.0 for online, ref in found if ref]
        if found:
            gaps[label] = sum(ratios) / max(len(ratios), 1)
        if found and HINDSIGHT in results:  # the same decisions, the plan re-solved: what the decisions alone lose
            # (the better of the two plans: an env that improves its own plan can beat a short PyVRP run)
            saved = torch.tensor([max(online - ref, 0.0) if ref is not None else 0.0 for online, ref in found],
                                 dtype=torch.float64)
            k = len(found)
            resolved[label] = hindsight_gap(results[HINDSIGHT]["episode_return"][:k],
                                            result["episode_return"][:k] + saved)
    return gaps, resolved


def print_table(results: dict[str, dict], rows: dict[str, dict], mine: str, gaps: dict[str, float],
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
