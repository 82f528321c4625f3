"""The help a user discovers the project with: the catalogue of what a config can name, and a help line for
every constructor argument."""

from __future__ import annotations

import inspect
import os
import sys

import pytest
from jsonargparse import ArgumentParser

from modules.actor_critic import ActorCriticNetwork
from modules.flexibility import FlexibilityModel
from modules.q_networks import MultiAgentQNetwork, QNetwork
from modules.routing import RoutingPolicy
from modules.sac import SACNetworks
from modules.td3 import TD3Networks
from pipelines.catalogue import class_path, sections, subclasses
from tests.pipelines.conftest import REPO, run_module
from tests.warm_python import run_python

NETWORKS = [QNetwork, MultiAgentQNetwork, *subclasses(ActorCriticNetwork), SACNetworks, TD3Networks, RoutingPolicy,
            FlexibilityModel]
CLASSES = [c for classes in sections().values() for c in classes] + NETWORKS


def test_fit_help_lists_what_a_config_can_name():
    proc = run_module("pipelines.fit", "--help", timeout=120)
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: python -m pipelines.fit ")
    catalogue = proc.stdout[proc.stdout.index("What a config can name:"):]
    for name in ("modules.dqn.DQNModule: DQN", "modules.ppo.PPOModule: ", "modules.sac.SACModule: SAC",
                 "pipelines.data.OffPolicyDataModule: ", "envs.gym.GymConfig: ", "envs.hockey.HockeyConfig: ",
                 "callbacks.PolicyEvaluation: ", "configs/dvrp.yaml: The headline run"):
        assert f"\n  {name}" in catalogue, name
    algorithms = run_module("pipelines.fit", "--model.help", "PPOModule", timeout=120)  # a short name
    assert algorithms.returncode == 0, algorithms.stderr[-2000:]
    assert "--model.clip_epsilon" in algorithms.stdout and "PPO ratio clip" in algorithms.stdout


@pytest.mark.parametrize("cls", CLASSES, ids=class_path)
def test_every_constructor_argument_has_a_help_line(cls):
    parser = ArgumentParser()
    parser.add_class_arguments(cls, "x", fail_untyped=False)
    helped = {a.dest[2:] for a in parser._actions if a.dest.startswith("x.") and a.help}
    init = next(c.__init__ for c in cls.__mro__ if any(  # the first constructor with named arguments
        p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for n, p in inspect.signature(c.__init__).parameters.items()
        if n != "self"))
    arguments = [n for n, p in inspect.signature(init).parameters.items()
                 if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert arguments, "a class without constructor arguments has nothing to check"
    assert [n for n in arguments if n not in helped] == []


@pytest.mark.parametrize("config", ["dvrp_smoke.yaml", "vacuum.yaml"])
def test_print_config_of_a_dataclass_env_config_is_quiet(config):
    """The env configs are dataclasses with tuple defaults: the resolved config prints without a warning."""
    run = run_module("pipelines.fit", "--config", f"configs/{config}", "--print_config", timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Warning" not in run.stderr, run.stderr[-2000:]


def test_every_run_reads_the_shared_defaults_first(tmp_path):
    """``configs/defaults.yaml`` is read before the run's config, from any working directory: the trainer block,
    the progress bar and the non-finite guard before the run's own callbacks (``callbacks+:``), atomic checkpoints;
    a ``callbacks:`` list replaces the defaults' (``pipelines.fit`` then adds the guard: test_nonfinite.py)."""
    import yaml

    from tests.pipelines.conftest import REPO

    def resolved(*args: str) -> dict:
        run = run_python([sys.executable, "-m", "pipelines.fit", *args, "--print_config"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert run.returncode == 0, run.stderr[-2000:]
        return yaml.safe_load(run.stdout)["trainer"]

    trainer = resolved("--config", str(REPO / "configs" / "cartpole_ppo.yaml"))
    assert [c["class_path"] for c in trainer["callbacks"]] == [
        "callbacks.FrameProgressBar", "callbacks.NonFiniteGuard", "callbacks.PolicyEvaluation",
        "callbacks.ModelCheckpoint"]
    assert trainer["logger"]["init_args"]["save_dir"] == "runs" and trainer["logger"]["init_args"]["name"] == \
        "cartpole_ppo"
    assert (trainer["accelerator"], trainer["devices"], trainer["enable_model_summary"]) == ("cpu", 1, False)
    assert [p["class_path"] for p in trainer["plugins"]] == ["pipelines.checkpoints.AtomicCheckpointIO"]
    replaced = resolved("--config", str(REPO / "configs" / "cartpole_ppo.yaml"),
                        "--trainer.callbacks=[callbacks.ModelCheckpoint]")
    assert [c["class_path"] for c in replaced["callbacks"]] == ["callbacks.ModelCheckpoint"]


def _class_paths(node: object) -> list[str]:
    if isinstance(node, dict):
        own = [node["class_path"]] if isinstance(node.get("class_path"), str) else []
        return own + [p for value in node.values() for p in _class_paths(value)]
    return [p for value in node for p in _class_paths(value)] if isinstance(node, list) else []


@pytest.mark.parametrize("path", sorted(str(p) for p in (REPO / "configs").rglob("*.yaml")), ids=os.path.basename)
def test_configs_name_each_class_by_the_path_help_lists(path):
    """The class-path policy: a shipped config names a class by the shortest import path of its defining module
    (``pipelines.catalogue.class_path``: ``pipelines.data.OnPolicyDataModule``, ``modules.q_networks.QNetwork``),
    never by a re-export elsewhere; Lightning's and torch's classes by their public path."""
    import importlib

    import yaml

    paths = _class_paths(yaml.safe_load(open(path)))
    for name in paths:
        module, _, attribute = name.rpartition(".")
        cls = getattr(importlib.import_module(module), attribute)
        if cls.__module__.split(".")[0] in ("envs", "modules", "callbacks", "pipelines"):
            assert name == class_path(cls), f"{name} is {class_path(cls)}"
        else:
            assert not any(part.startswith("_") for part in name.split(".")), name
    if "search" not in path and "defaults" not in path:
        assert paths, "a run config names its classes"
