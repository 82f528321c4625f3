"""PPO's policy on an env: the checks that it fits, and its head, categorical or Gaussian, with the observation
normalisation in front where there is one."""

from __future__ import annotations

import math

import torch
from torch import nn

from envs import EnvSpecs
from modules.actor_critic import ActorCriticNetwork
from modules.compatibility import (
    check_count,
    class_path,
    require_action_kind,
    require_bounded,
    require_keys,
    require_num_actions,
    require_single_agent,
)
from modules.gaussian import GaussianPolicy, Squash


def check_policy_fits(specs: EnvSpecs, module: str, network: ActorCriticNetwork, action_mask_key: str | None,
                      squash: Squash, normalize_observation: bool) -> None:
    """PPO trains one agent with discrete actions (a categorical policy over the actor's logits) or continuous ones
    (a Gaussian policy; ``squash: tanh`` needs bounds); the network's ``num_actions``, where given, must be the
    env's (a continuous action's width); the entries the network reads (``in_keys``, ``policy_keys``) and
    ``action_mask_key`` must be in the env's observation; the normalised observation must be the network's one entry,
    a float vector.

    Args:
        specs: the env's. module: the module's class path. network, action_mask_key, squash, normalize_observation:
            the module's.

    Raises:
        ValueError: the first mismatch, naming the config key and both sides (e.g. PPO on a multi-discrete env:
            ``... takes discrete or continuous actions, but the env has ...``).
    """
    require_single_agent(specs, module, "modules.dqn.DQNModule or modules.sac.SACModule (multi-agent replay)")
    require_action_kind(specs, ("discrete", "continuous"), module)
    if specs.action_kind == "continuous":
        check_count(getattr(network, "num_actions", None), specs.agent_action_spec.shape[-1], "actions",
                    specs.describe_env(), "model.init_args.network.init_args.num_actions", specs.describe_actions())
        if squash == "tanh":
            require_bounded(specs, module, "model.squash=tanh maps into the spec's low and high")
    else:
        require_num_actions(specs, getattr(network, "num_actions", None))
    keys = [*network.in_keys, *network.policy_keys]
    require_keys(specs, f"model.init_args.network (class_path={class_path(network)})", keys)
    if action_mask_key is not None:
        require_keys(specs, "model.init_args.action_mask_key", [action_mask_key],
                     "set it to null for an env without an action mask")
    if normalize_observation:
        entry = specs.example_observation.get(network.in_keys[0])
        if len(network.in_keys) != 1 or not entry.is_floating_point():
            raise ValueError(f"model.normalize_observation=true standardises one float observation entry, but the "
                             f"network reads {network.in_keys} ({entry.dtype} first): set it to false")


def policy_head(specs: EnvSpecs, network: ActorCriticNetwork, categorical: nn.Module, squash: Squash,
                log_std_init: float) -> nn.Module:
    """The policy module for the env's actions, after fitting the network's policy output to them: ``categorical``
    (the module's categorical policy) for discrete actions (``num_actions`` = n), a
    :class:`~modules.gaussian.GaussianPolicy` on the spec's bounds (+-inf where it has none) for continuous ones
    (``num_actions`` = the action's width A).

    Raises:
        ValueError: the network was built for another number of actions.
    """
    spec = specs.agent_action_spec
    space = getattr(spec, "space", None)
    if specs.action_kind == "continuous":
        network.shape_actions(int(spec.shape[-1]))
        if hasattr(space, "low"):
            low, high = space.low.float(), space.high.float()
        else:
            low, high = torch.full(spec.shape, -math.inf), torch.full(spec.shape, math.inf)
        return GaussianPolicy(network, low, high, squash, log_std_init)
    if hasattr(space, "n"):
        network.shape_actions(int(space.n))
    return categorical


def policy_out_keys(continuous: bool) -> list[str]:
    """What PPO's collector policy writes: the action (and the Gaussian's draw ``raw_action``), its log-probability
    and the hidden state."""
    return ["action", *(["raw_action"] if continuous else []), "action_log_prob", "hidden"]
