"""The one factory that builds any env from its config (:func:`make_env`), and what a learner needs to know
of an env before it acts in it (:class:`EnvSpecs`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from tensordict import TensorDict
from torch import nn
from torchrl.data import Binary, Bounded, Categorical, MultiCategorical, MultiOneHot, OneHot, TensorSpec
from torchrl.envs import ActionMask, Compose, EnvBase, RewardSum, TransformedEnv

from envs.config import EnvConfig
from envs.restored import restored_number, restored_tensor
from envs.spec_record import spec_from_record, spec_record


def make_env(config: EnvConfig, num_envs: int, seed: int, device: torch.device | str = "cpu",
             models: Mapping[str, nn.Module] | None = None) -> EnvBase:
    """Build ``config``'s env with ``num_envs`` rows seeded ``seed, seed + 1, ...``, the run's learned ``models``
    (``{name: model}``, see ``EnvConfig.new_models``; shared, not copied) and the standard
    transforms: ``RewardSum`` (``episode_reward``, the undiscounted return of the running episode) unless the
    env writes ``episode_reward`` itself (``envs.gym.GymVectorEnv``, the native envs of
    :class:`envs.seeding.NativeBatchedEnv`) and, where the env emits ``action_mask`` and its own ``rand_action`` does
    not draw from it (as ``NativeBatchedEnv``'s does), ``ActionMask`` (keeps ``action_spec``'s mask current, so
    ``rand_action`` and random rollouts respect it). An env that needs no transform is returned as built (no
    ``TransformedEnv`` layer, whose per-step cost shows on small batches); :func:`unwrap` gives the base env
    either way.

    Raises:
        ValueError: ``num_envs < 1``; ``models`` other than those the config names (``EnvConfig.check_models``).
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    base = config.make(num_envs=num_envs, seed=seed, device=device, models=models)
    transforms = [] if "episode_reward" in base.observation_spec.keys() else [RewardSum()]
    if "action_mask" in base.observation_spec.keys() and type(base).rand_action is EnvBase.rand_action:
        transforms.append(ActionMask())
    return TransformedEnv(base, Compose(*transforms)) if transforms else base


def unwrap(env: EnvBase) -> EnvBase:
    """The base env under ``env``'s transforms (``env`` itself when it has none)."""
    return getattr(env, "base_env", env)


def has(env: object, name: str) -> bool:
    """Whether ``env`` has the attribute ``name`` of its own (its class's or its instance's), without asking
    ``__getattr__``: TorchRL's ``ParallelEnv`` forwards an unknown name to its workers, whose envs raise and end
    (a ``hasattr(env, "resume_state")`` of a checkpoint save broke the rollout workers' pipes)."""
    own = getattr(env, "__dict__", {})
    return hasattr(type(env), name) or name in own or any(  # (an nn.Module's submodules, buffers, parameters)
        name in own.get(store, ()) for store in ("_modules", "_buffers", "_parameters"))


@dataclass
class EnvSpecs:
    """What a learner builds its networks and losses on, read off an env.

    Attributes:
        action_spec: the action spec of one env (``action_spec_unbatched``; ``[R, ...]`` for R agents).
        agent_action_spec: the action spec of one agent in one env (``action_spec`` for a single agent).
        example_observation: a zero observation ``[B]`` with every action allowed (to shape lazy layers).
        num_agents: R of a multi-agent env, else None.
        name: what error messages call the env (e.g. ``Acrobot-v1``), or None; not recorded in checkpoints.
    """

    action_spec: TensorSpec
    agent_action_spec: TensorSpec
    example_observation: TensorDict
    num_agents: int | None
    name: str | None = None

    @classmethod
    def of(cls, env: EnvBase, num_agents: int | None = None, name: str | None = None) -> EnvSpecs:
        """The specs of ``env`` (built by :func:`make_env`; ``num_agents`` from its config; ``name`` for messages), on
        the CPU whatever the env's device: networks are shaped there (as from a checkpoint's record) and move with
        their module."""
        spec = env.action_spec_unbatched.cpu()
        observation = env.observation_spec.cpu().zero()
        for key in observation.keys(True, True):
            if (key[-1] if isinstance(key, tuple) else key) == "action_mask":
                observation[key] = torch.ones_like(observation[key])
        return cls(spec, spec[0] if num_agents is not None else spec, observation, num_agents, name)

    @property
    def action_kind(self) -> str:
        """The kind of one agent's action: ``discrete`` (one integer of n choices: ``Categorical`` of shape ``[]`` or
        ``OneHot`` ``[n]``), ``multi-discrete`` (several: ``MultiCategorical``, ``MultiOneHot``, ``Binary``, a
        ``Categorical`` with a shape), ``continuous`` (a float vector: ``Bounded`` or ``Unbounded``) or ``other``."""
        spec = self.agent_action_spec
        if isinstance(spec, (MultiCategorical, MultiOneHot, Binary)):
            return "multi-discrete"
        if isinstance(spec, Categorical):
            return "discrete" if spec.shape == () else "multi-discrete"
        if isinstance(spec, OneHot):
            return "discrete" if len(spec.shape) == 1 else "multi-discrete"
        return "continuous" if spec.dtype is not None and spec.dtype.is_floating_point else "other"

    @property
    def num_actions(self) -> int | None:
        """n, the choices of one agent's discrete action (:attr:`action_kind` ``discrete``), else None."""
        return int(self.agent_action_spec.space.n) if self.action_kind == "discrete" else None

    def describe_env(self) -> str:
        """``the env (<name>)``, or ``the env`` without a name: the subject of error messages."""
        return f"the env ({self.name})" if self.name else "the env"

    def describe_actions(self) -> str:
        """One agent's actions in words: ``3 discrete actions``, ``continuous actions [1] (bounded)``, ..."""
        spec, kind = self.agent_action_spec, self.action_kind
        if kind == "discrete":
            return f"{self.num_actions} discrete actions"
        shape = list(spec.shape)
        if kind == "continuous":
            return f"continuous actions {shape} ({'bounded' if isinstance(spec, Bounded) else 'unbounded'})"
        if kind == "multi-discrete":
            return f"multi-discrete actions {shape} ({type(spec).__name__})"
        return f"actions of spec {type(spec).__name__} {shape} {str(spec.dtype).removeprefix('torch.')}"

    def record(self) -> dict:
        """These specs as plain data (:mod:`envs.spec_record`; the example observation as a nested dict of tensors),
        for a checkpoint that is read with ``weights_only=True``."""
        return {"action_spec": spec_record(self.action_spec), "agent_action_spec": spec_record(self.agent_action_spec),
                "example_observation": self.example_observation.cpu().to_dict(),
                "batch_size": list(self.example_observation.batch_size), "num_agents": self.num_agents}

    @classmethod
    def from_record(cls, record: dict) -> EnvSpecs:
        """The specs :meth:`record` recorded (on CPU).

        Raises:
            ValueError: a damaged record (unknown spec family or dtype; an example observation that is not a zero
                observation's finite values; a number of agents that is not a positive integer).
        """
        observation = TensorDict(record["example_observation"], batch_size=record["batch_size"])
        for key, value in observation.items(True, True):
            restored_tensor(value, f"env_specs.example_observation.{key}", low=-1, high=1)  # (zeros; masks' ones)
        if record["num_agents"] is not None:
            restored_number(record["num_agents"], "env_specs.num_agents", low=1, high=2**20)
        return cls(spec_from_record(record["action_spec"]), spec_from_record(record["agent_action_spec"]), observation,
                   record["num_agents"])

