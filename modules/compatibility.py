"""Whether a module can train on an env, checked before any work (:meth:`modules.base.RLModule.check_env`, which
``pipelines.fit`` calls on a throwaway one-row env of the config), and network sizes checked at construction.

Every check raises ``ValueError`` with one line that names the config key and both sides: what the config asks
for and what the env gives (``pipelines.fit`` prints it as ``error: ...`` and exits with status 2)."""

from __future__ import annotations

from collections.abc import Sequence

from tensordict import NestedKey
from torchrl.data import Bounded

from envs import EnvSpecs

NETWORK = "model.init_args.network.init_args"  # the config section of a module's network's own arguments
# which algorithms take which kind of action (for the hint of a mismatch)
ALGORITHMS_FOR = {"discrete": "modules.dqn.DQNModule, modules.ppo.PPOModule or modules.sac.SACModule",
                  "continuous": "modules.ppo.PPOModule, or modules.sac.SACModule or modules.td3.TD3Module (bounded "
                                "actions)"}


def class_path(obj: object) -> str:
    """``module.Class`` of ``obj``'s class, as a config's ``class_path`` names it."""
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def check_sizes(section: str = NETWORK, **sizes: int | Sequence[int] | None) -> None:
    """Network sizes at construction: each value (a size, or a sequence of layer widths such as ``hidden_dims``;
    None is skipped: a size taken from the env later) must be >= 1. An empty sequence is allowed (no hidden layer).

    Args:
        section: the config section of the keys (default: a module's network's ``init_args``).
        sizes: ``key=value`` pairs.

    Raises:
        ValueError: ``<section>.<key>=<value> is not allowed: ...`` for the first value that is not.
    """
    for key, value in sizes.items():
        if value is None:
            continue
        many = isinstance(value, (list, tuple))
        values = list(value) if many else [value]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
            allowed = "every width >= 1 (e.g. [256, 256]; [] for no hidden layer)" if many else ">= 1"
            raise ValueError(f"{section}.{key}={values if many else value!r} is not allowed: {allowed}")


def require_action_kind(specs: EnvSpecs, kinds: tuple[str, ...], module: str) -> None:
    """The env's actions (one agent's, :attr:`envs.EnvSpecs.action_kind`) must be of one of ``kinds``.

    Args:
        specs: the env's specs (a ``name`` makes the message name the env).
        kinds: what the module takes (``discrete``, ``continuous``, ``multi-discrete``).
        module: the module's class path, for the message.

    Raises:
        ValueError: ``model.class_path=<module> takes <kinds> actions, but the env (<name>) has <actions>``, with
            the algorithms that take the env's kind where there are any.
    """
    kind = specs.action_kind
    if kind in kinds:
        return
    other = ALGORITHMS_FOR.get(kind)
    hint = f": for {kind} actions use {other}" if other else ""
    raise ValueError(f"model.class_path={module} takes {' or '.join(kinds)} actions, but {specs.describe_env()} has "
                     f"{specs.describe_actions()}{hint}")


def require_bounded(specs: EnvSpecs, module: str, reason: str) -> None:
    """Continuous actions must have bounds (a ``Bounded`` spec); discrete ones pass.

    Raises:
        ValueError: the env's continuous actions are unbounded (the message names the module, the env and
            ``reason``).
    """
    if specs.action_kind == "continuous" and not isinstance(specs.agent_action_spec, Bounded):
        raise ValueError(f"model.class_path={module} takes bounded continuous actions ({reason}), but "
                         f"{specs.describe_env()} has {specs.describe_actions()}")


def check_count(configured: int | None, env_count: int | None, what: str, env: str = "the env",
                key: str | None = None, detail: str = "") -> None:
    """A network's configured number of ``what`` (``actions``, ``agents``) must be the env's (None: taken from the
    env, nothing to check). The one check behind :func:`require_num_actions`, :func:`require_num_agents` and the
    networks' own ``shape_actions`` / ``shape_agents`` (which are called without specs, e.g. on ``build_on`` in
    Python).

    Args:
        env: the env, for the message (``the env (Acrobot-v1)``). key: the config key (default
            ``<network>.num_<what>``). detail: how the env's count reads (default ``<env_count> <what>``).

    Raises:
        ValueError: ``<key>=<configured> but <env> has <env_count> <what>: remove num_<what> to take it from the env``.
    """
    if configured is None or configured == env_count:
        return
    key = key or f"{NETWORK}.num_{what}"
    raise ValueError(f"{key}={configured} but {env} has {detail or f'{env_count} {what}'}: remove "
                     f"{key.rpartition('.')[2]} to take it from the env")


def require_num_actions(specs: EnvSpecs, configured: int | None, key: str = f"{NETWORK}.num_actions") -> None:
    """A network's configured number of actions must be the env's (:func:`check_count`).

    Raises:
        ValueError: ``<key>=<configured> but the env (<name>) has <n> discrete actions: remove num_actions ...``.
    """
    check_count(configured, specs.num_actions, "actions", specs.describe_env(), key, specs.describe_actions())


def require_single_agent(specs: EnvSpecs, module: str, alternatives: str) -> None:
    """A module that trains single-agent envs only must get one.

    Raises:
        ValueError: the env has ``num_agents`` agents (the message names the module, the env and ``alternatives``).
    """
    if specs.num_agents is not None:
        raise ValueError(f"model.class_path={module} trains single-agent envs, but {specs.describe_env()} has "
                         f"{specs.num_agents} agents (env.num_agents={specs.num_agents}): use {alternatives}")


def require_num_agents(specs: EnvSpecs, network: str, configured: int | None,
                       key: str = f"{NETWORK}.num_agents") -> None:
    """A multi-agent network needs a multi-agent env, of its configured number of agents (None: the env's).

    Args:
        network: the network's class path, for the message.
        configured: the network's number of agents, or None (taken from the env).

    Raises:
        ValueError: a single-agent env, or another number of agents than ``configured`` (both sides named).
    """
    require_multi_agent(specs.num_agents, network, specs.describe_env())
    check_count(configured, specs.num_agents, "agents", specs.describe_env(), key,
                f"{specs.num_agents} agents (env.num_agents={specs.num_agents}, e.g. the vacuum env's num_robots)")


def require_multi_agent(num_agents: int | None, network: str, env: str = "the env") -> None:
    """A multi-agent network needs an env with ``num_agents``.

    Raises:
        ValueError: a single-agent env (``num_agents`` None), naming the network.
    """
    if num_agents is None:
        raise ValueError(f"{NETWORK.removesuffix('.init_args')}.class_path={network} is a multi-agent network, but "
                         f"{env} has one agent (env.num_agents=None): use modules.q_networks.QNetwork")


def require_keys(specs: EnvSpecs, key: str, entries: Sequence[NestedKey], hint: str = "") -> None:
    """Every entry a module or network reads (``entries``, named by the config key ``key``) must be in the env's
    observation.

    Args:
        hint: what to do instead, appended to the message (e.g. ``set it to null``).

    Raises:
        ValueError: ``<key> reads '<entry>', but the env (<name>) gives no '<entry>' (it gives: ...)``.
    """
    given = set(specs.example_observation.keys(True))
    for entry in entries:
        if entry not in given:
            names = ", ".join(str(k) for k in specs.example_observation.keys())
            raise ValueError(f"{key} reads {entry!r}, but {specs.describe_env()} gives no {entry!r} (it gives: "
                             f"{names}){': ' + hint if hint else ''}")
