"""The headline claim, end to end (slow: the full default budget, about 20 minutes on 2 CPU cores).

`make fit`'s run (configs/dvrp.yaml) must beat every attribute-blind baseline in mean return by more
than two standard errors of the paired difference, on 256 held-out generated episodes and, when the
benchmark files are present, on Solomon-based long-horizon episodes (N=30 from R2 and RC2 files).
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from envs import unwrap
from envs.dvrp.baselines import ATTRIBUTE_BLIND, ScriptedOfferPolicy
from pipelines.evaluate import load_run, play
from pipelines.fit import main as fit
from tests.pipelines.conftest import REPO

CONFIG = str(REPO / "configs" / "dvrp.yaml")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("headline")
    fit(["--config", CONFIG, f"--trainer.logger.init_args.save_dir={out}"])
    return str(out / "dvrp" / "version_0" / "checkpoints" / "last.ckpt")


def _beats_blind_baselines(ckpt: str, overrides: list[str], episodes: int) -> dict:
    model, data = load_run(CONFIG, ckpt, overrides)
    mine = play(data.env_config, lambda env: model.collector_policy, episodes, min(episodes, 256),
                10_000_000)["episode_return"]
    report = {}
    for name in ATTRIBUTE_BLIND:
        theirs = play(data.env_config, lambda env, n=name: ScriptedOfferPolicy(n, unwrap(env)), episodes,
                      min(episodes, 256), 10_000_000)["episode_return"]
        diff = mine - theirs
        se = (diff.std() / math.sqrt(episodes)).item()
        report[name] = (diff.mean().item(), se)
        assert diff.mean().item() > 2 * se, f"{name}: paired difference {diff.mean():.1f} +- {se:.1f}"
    return report


@pytest.mark.slow
def test_headline_run_beats_attribute_blind_baselines(trained):
    torch.set_num_threads(1)
    print(json.dumps(_beats_blind_baselines(trained, [], 256)))


@pytest.mark.slow
@pytest.mark.parametrize("family", ["R2", "RC2"])
def test_headline_run_beats_them_on_solomon_episodes(trained, solomon_dir, family):
    files = str(solomon_dir / "solomon_txt" / f"{family}*.txt")
    env = {"class_path": "envs.dvrp.DVRPConfig", "init_args": {"instances": files, "capacity": None}}
    print(json.dumps(_beats_blind_baselines(trained, ["--data.init_args.env", json.dumps(env)], 256)))
