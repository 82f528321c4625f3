"""Env <-> algorithm checks before any work: :func:`check_env_fit` builds a throwaway one-row env of the config,
reads its specs and asks the module whether it can train on them (:meth:`modules.base.RLModule.check_env`: the
kind and number of actions, the number of agents, the observation entries its networks read).

``pipelines.fit`` calls it while it builds the config's objects, before the logger makes the run folder (Lightning
makes it before the data module's ``setup``, where the real env is built), so a mismatch ends the run with one
``error:`` line and exit status 2, and nothing is written."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from lightning.pytorch.strategies import DDPStrategy

from envs import EnvConfig, EnvSpecs, make_env
from modules.base import RLModule
from modules.compatibility import class_path
from modules.updates import lightning_adds_only_hooks
from pipelines.compat import ddp_finds_unused_parameters
from pipelines.data import OnPolicyDataModule, RLDataModule


def env_name(config: EnvConfig) -> str:
    """What messages call ``config``'s env: its gymnasium id or game where it has one, else its class name
    (``Acrobot-v1``, ``ALE/Pong-v5``, ``VacuumConfig``)."""
    for key in ("env_id", "game"):
        value = getattr(config, key, None)
        if isinstance(value, str) and value:
            return value
    return type(config).__name__


@contextmanager
def random_states_kept() -> Iterator[None]:
    """Run the body and put torch's (CPU), numpy's and Python's global random states back as they were: building
    a probe env must not change the run's draws (initial weights, exploration) from an unchecked run's."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def probe_specs(data: RLDataModule) -> EnvSpecs:
    """The specs of ``data``'s env as the training env will have them (:meth:`RLDataModule.env_specs`), read off a
    throwaway env of one row seeded ``data.seed``, on the CPU, closed before this returns (stable-retro allows
    one emulator per process: the real env is built after). The global random states are kept
    (:func:`random_states_kept`).

    Raises:
        ValueError: the env's config rejects the build (the env's own message).
    """
    with random_states_kept():
        env = make_env(data.env_config, 1, data.seed, models=data.env_models)
        try:
            return EnvSpecs.of(env, data.num_agents, env_name(data.env_config))
        finally:
            env.close()


def check_env_fit(model: RLModule, data: RLDataModule) -> EnvSpecs | None:
    """Check that ``model`` can train on ``data``'s env, before any work: :meth:`RLModule.check_env` on
    :func:`probe_specs`. A module that checks nothing (the base's ``check_env``, e.g. REINFORCE on whole problems)
    builds no probe env.

    Returns:
        The probe env's specs (None where none was built).

    Raises:
        ValueError: the module's one-line message naming the config key and both sides (e.g.
            ``model.init_args.network.init_args.num_actions=2 but the env (Acrobot-v1) has 3 discrete actions:
            remove num_actions to take it from the env``).
    """
    if type(model).check_env is RLModule.check_env:
        return None
    specs = probe_specs(data)
    model.check_env(specs)
    return specs


def check_data_fit(model: RLModule, data: RLDataModule) -> None:
    """Check that ``model`` trains on ``data``'s kind of batches, before any work: an on-policy data module
    (collected batches cut into minibatches) needs a module with ``ppo_epochs`` and ``mini_batch_size`` (PPO), and
    ``collector.frames_per_batch`` must be a multiple of ``mini_batch_size``; such a module needs an on-policy
    data module.

    Raises:
        ValueError: the mismatch, naming the keys and both values.
    """
    on_policy, minibatched = isinstance(data, OnPolicyDataModule), hasattr(model, "mini_batch_size")
    if on_policy and not minibatched:
        raise ValueError(f"data.class_path=pipelines.data.OnPolicyDataModule hands collected batches in minibatches, "
                         f"which {type(model).__name__} does not take: use it with modules.ppo.PPOModule, or give "
                         f"{type(model).__name__} its data module (pipelines.data.OffPolicyDataModule for replay)")
    if minibatched and not on_policy:
        raise ValueError(f"model.class_path={class_path(model)} trains on collected batches in minibatches: "
                         f"its data module is pipelines.data.OnPolicyDataModule, not {class_path(data)}")
    if on_policy and data.frames_per_batch % model.mini_batch_size:
        raise ValueError(f"data.collector.frames_per_batch={data.frames_per_batch} must be a multiple of "
                         f"model.mini_batch_size={model.mini_batch_size} (whole minibatches per collected batch)")
    if not (on_policy and getattr(model, "recurrent", False)):
        return
    options = data.collector_options  # T, the steps of each env row per batch (asynchronous: one worker's rows)
    steps = data.frames_per_batch // (data.num_envs // options.workers if options.mode == "async" else data.num_envs)
    if model.mini_batch_size % steps:
        raise ValueError(f"model.mini_batch_size={model.mini_batch_size} must be a multiple of the {steps} steps each "
                         f"env row takes per batch (data.collector.frames_per_batch over the rows of a batch): a "
                         f"recurrent network's minibatches are whole rows")


def check_strategy_fit(model: RLModule, strategy) -> None:
    """Check, before any work, that a module whose updates leave some parameters without gradients
    (``updates_all_parameters = False``: TD3's critic-only updates) runs under a DDP strategy that looks for unused
    parameters; plain DDP would stop at the first such update with a traceback.

    Raises:
        ValueError: the strategy to use instead, naming the module.
    """
    if not model.updates_all_parameters and isinstance(strategy, DDPStrategy) and not ddp_finds_unused_parameters(
            strategy):
        raise ValueError(f"trainer.strategy: model.class_path={class_path(model)} leaves some parameters out of some "
                         f"updates, which DDP must be told: use --trainer.strategy=ddp_find_unused_parameters_true")


def check_graph_fit(model: RLModule, trainer) -> None:
    """Check, before any work, that ``model.cuda_graph`` can capture the whole update in ``trainer``'s fit: the graph
    replays torch's backward and step alone, so it needs one device, full precision and no callback or module hook
    around the backward or the step (:func:`modules.updates.lightning_adds_only_hooks`), which it would skip.

    Raises:
        ValueError: what stands in the way, naming ``model.cuda_graph``.
    """
    if getattr(model, "cuda_graph", False) and not lightning_adds_only_hooks(model, trainer):
        raise ValueError(f"model.cuda_graph=true needs one device (trainer.strategy: auto, one device), "
                         f"trainer.precision=32-true and no callback overriding on_before_backward, "
                         f"on_after_backward or on_before_optimizer_step; this run has the strategy "
                         f"{type(trainer.strategy).__name__} and the precision plugin "
                         f"{type(trainer.precision_plugin).__name__}")
