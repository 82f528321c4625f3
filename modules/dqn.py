"""DQN (Mnih et al. 2015, "Human-level control through deep reinforcement learning", Nature 518) with
the usual options: double DQN (van Hasselt et al. 2016, AAAI), a dueling head (Wang et al. 2016,
ICML), n-step returns (TorchRL's ``MultiStepTransform`` on the replay buffer), hard or soft target
updates, gradient clipping, prioritised-replay weights. The update is :func:`modules.q_values.dqn_loss`,
tested equal to TorchRL's ``DQNLoss``."""

from __future__ import annotations

import math
from typing import Literal

import torch
from tensordict import NestedKey, TensorDict
from torch import Tensor, nn
from torch.nn.modules.lazy import LazyModuleMixin
from torchrl.envs import MultiStepTransform

from envs import EnvSpecs
from modules.base import DISCOUNT, LEARNING_RATE, RLModule, check_hparams
from modules.compatibility import (check_count, check_sizes, class_path, require_action_kind, require_keys,
                                   require_multi_agent, require_num_actions, require_num_agents)
from modules.policy import TensorPolicy
from modules.q_values import EpsilonGreedyQPolicy, dqn_loss
from modules.target import TargetNetwork


class QNetwork(nn.Module):
    """MLP Q-network: ``observation`` ``[*B, F]`` -> action values ``[*B, A]``.

    With ``dueling``, Q = V + A - mean(A) from separate value and advantage heads (Wang et al. 2016,
    eq. 9). Input width is lazy (taken from the first observation); ``num_actions`` is A.

    Args:
        num_actions: A, the number of discrete actions; null (the default): the env's (the heads are built on the
            env's action spec, :meth:`shape_actions`, so that switching the env is one key).
        hidden_dims: widths of the shared hidden layers (each >= 1; ``[]``: none).
        dueling: the dueling head (Wang et al. 2016: value + advantage - mean advantage).

    Raises:
        ValueError: a width or ``num_actions`` below 1 (the message names the key).
    """

    def __init__(self, num_actions: int | None = None, hidden_dims: tuple[int, ...] = (128, 128),
                 dueling: bool = False) -> None:
        super().__init__()
        check_sizes(num_actions=num_actions, hidden_dims=hidden_dims)
        layers: list[nn.Module] = []
        for width in hidden_dims:
            layers += [nn.LazyLinear(width), nn.ReLU()]
        self.trunk = nn.Sequential(*layers)
        self.dueling = dueling
        self.num_actions = num_actions
        self.advantage: nn.Module | None = None
        self.value: nn.Module | None = None
        if num_actions is not None:
            self._build_heads(num_actions)

    def _build_heads(self, num_actions: int) -> None:
        self.advantage = nn.LazyLinear(num_actions)
        self.value = nn.LazyLinear(1) if self.dueling else None

    def shape_actions(self, num_actions: int) -> None:
        """Build the heads for the env's A = ``num_actions`` when ``num_actions`` was null; else check it.

        Raises:
            ValueError: ``num_actions`` was given and differs from the env's (the message names both).
        """
        if self.advantage is None:
            self.num_actions = num_actions
            self._build_heads(num_actions)
        check_count(self.num_actions, num_actions, "actions")

    def forward(self, observation: Tensor) -> Tensor:
        if self.advantage is None:
            raise RuntimeError("QNetwork: no heads yet (shape_actions builds them on the env's number of actions)")
        z = self.trunk(observation)
        a = self.advantage(z)
        return self.value(z) + a - a.mean(-1, keepdim=True) if self.dueling else a


class MultiAgentQNetwork(nn.Module):
    """Q-network of R agents: (``observation`` ``[*B, F]``, ``agent_id`` one-hot ``[*B, R]``) -> action
    values ``[*B, A]`` of the agent each row belongs to.

    * ``parameter_sharing``: one :class:`QNetwork` on ``[observation, agent_id]`` (the id lets it
      specialise by agent).
    * otherwise: one :class:`QNetwork` per agent on ``observation``; row k is evaluated by the network
      of its agent. :meth:`training_batch` repeats a sampled batch once per agent with that agent's id,
      so every agent's network trains on every sampled transition (the observations are written so
      that one agent's experience is valid for another, e.g. ``envs.vacuum``).

    Args:
        num_agents: R, the number of agents; null (the default): the env's ``num_agents`` (:meth:`shape_agents`).
        num_actions: A, each agent's number of discrete actions; null (the default): the env's.
        hidden_dims: widths of the hidden layers (as :class:`QNetwork`).
        dueling: the dueling head (as :class:`QNetwork`).
        parameter_sharing: one shared network (true) or one per agent (false).
        agent_id_key: the batch key of the one-hot agent id (used by :meth:`training_batch`).

    Raises:
        ValueError: ``num_agents``, ``num_actions`` or a width below 1 (the message names the key).
    """

    def __init__(self, num_agents: int | None = None, num_actions: int | None = None,
                 hidden_dims: tuple[int, ...] = (128, 128), dueling: bool = False, parameter_sharing: bool = True,
                 agent_id_key: str = "agent_id") -> None:
        super().__init__()
        check_sizes(num_agents=num_agents, num_actions=num_actions, hidden_dims=hidden_dims)
        self.num_agents = num_agents
        self.num_actions = num_actions
        self.parameter_sharing = parameter_sharing
        self.agent_id_key = agent_id_key
        self._head_args = (tuple(hidden_dims), dueling)
        self.heads = nn.ModuleList()
        if parameter_sharing or num_agents is not None:
            self._build_heads(1 if parameter_sharing else num_agents)

    def _build_heads(self, count: int) -> None:
        self.heads.extend(QNetwork(self.num_actions, *self._head_args) for _ in range(count))

    def shape_agents(self, num_agents: int | None) -> None:
        """Take the env's R = ``num_agents`` when ``num_agents`` was null (and build the per-agent networks); else
        check it.

        Raises:
            ValueError: a single-agent env (``num_agents`` None), or another number of agents than the one given.
        """
        require_multi_agent(num_agents, "modules.dqn.MultiAgentQNetwork")
        if self.num_agents is None:
            self.num_agents = num_agents
            if not self.heads:
                self._build_heads(num_agents)
        check_count(self.num_agents, num_agents, "agents", detail=f"{num_agents} agents (env.num_agents={num_agents})")

    def shape_actions(self, num_actions: int) -> None:
        """:meth:`QNetwork.shape_actions` of every head (after :meth:`shape_agents`).

        Raises:
            ValueError: ``num_actions`` was given and differs from the env's.
        """
        for head in self.heads:
            head.shape_actions(num_actions)
        self.num_actions = num_actions

    def forward(self, observation: Tensor, agent_id: Tensor) -> Tensor:
        if not self.heads:
            raise RuntimeError("MultiAgentQNetwork: no networks yet (shape_agents builds them on the env's agents)")
        if self.parameter_sharing:
            return self.heads[0](torch.cat([observation, agent_id.to(observation.dtype)], -1))
        if any(isinstance(m, LazyModuleMixin) and m.has_uninitialized_params() for m in self.modules()):
            for head in self.heads:  # shape every head's lazy layers, whatever agents this batch holds
                head(observation)
        agent = agent_id.argmax(-1)
        flat_obs, flat_agent = observation.reshape(-1, observation.shape[-1]), agent.reshape(-1)
        values = [head(flat_obs[flat_agent == i]) for i, head in enumerate(self.heads)]
        out = values[0].new_empty(flat_agent.shape[0], values[0].shape[-1])
        for i, v in enumerate(values):
            out[flat_agent == i] = v
        return out.reshape(*agent.shape, -1)

    def training_batch(self, batch: TensorDict) -> TensorDict:
        """What the loss trains on for a sampled batch ``[N]``: the batch itself with parameter sharing;
        otherwise ``[R * N]``, the batch once per agent with ``agent_id`` (and the next one) set to it."""
        if self.parameter_sharing:
            return batch
        n, r = batch.shape[0], self.num_agents
        out = batch.unsqueeze(0).expand(r, n).clone()
        ids = torch.eye(r, device=batch.device).unsqueeze(1).expand(r, n, r)
        out.set(self.agent_id_key, ids.clone())
        if ("next", self.agent_id_key) in out.keys(True):
            out.set(("next", self.agent_id_key), ids.clone())
        return out.reshape(r * n)


class DQNModule(RLModule):
    """DQN on sampled replay batches (``pipelines.data.OffPolicyDataModule``).

    The collector runs :class:`modules.q_values.EpsilonGreedyQPolicy` (one forward pass for all envs, each
    env drawing its own exploration); ``set_epsilon`` (``callbacks.EpsilonDecay``) sets its epsilon, which
    is a buffer, saved in the checkpoint. ``training_step`` gets ``[K, N]`` sampled batches (K updates, see
    ``OffPolicyDataModule``) and takes, for each, one optimiser step on :func:`modules.q_values.dqn_loss`
    and then the target update (:class:`modules.target.TargetNetwork`).

    Multi-agent envs (``env.num_agents``): the policy acts for every agent of every env in one forward
    pass (action ``[B, R]``); the loss sees single-agent transitions (the replay buffer holds one row
    per (env, agent)), first passed through ``network.training_batch(batch)`` when the network has it
    (e.g. :class:`MultiAgentQNetwork` without parameter sharing).

    Args:
        network: Q-network (``observation`` -> action values ``[*B, A]``), e.g. :class:`QNetwork`.
        lr: Adam learning rate.
        gamma: discount per env step.
        n_step: n of the n-step return (1 = one-step TD).
        double_dqn: double-DQN targets.
        target_update: ``hard`` (copy every ``target_update_interval`` optimiser steps) or ``soft``
            (Polyak averaging with ``tau`` every step).
        target_update_interval: optimiser steps between hard target copies.
        tau: soft target update rate per optimiser step.
        max_grad_norm: global gradient-norm clip.
        epsilon: initial exploration rate.
        in_keys: the entries the network reads, in the order of its ``forward`` arguments.
        action_mask_key: boolean mask key or null.
        loss_function: ``l2`` or ``smooth_l1`` (Huber).
        compile: run the update's loss through ``torch.compile`` (see :class:`modules.base.RLModule`).
        compile_mode: ``torch.compile``'s mode (null, ``default``, ``reduce-overhead``: CUDA graphs, ...).

    Raises:
        ValueError: an out-of-range hyper-parameter (the message names it).
    """

    def __init__(self, network: nn.Module, lr: float = 1e-3, gamma: float = 0.99, n_step: int = 1,
                 double_dqn: bool = True, target_update: Literal["hard", "soft"] = "soft", tau: float = 0.005,
                 target_update_interval: int = 500, max_grad_norm: float = 10.0, epsilon: float = 1.0,
                 in_keys: tuple[str, ...] = ("observation",), action_mask_key: str | None = None,
                 loss_function: Literal["l2", "smooth_l1"] = "smooth_l1", compile: bool = False,
                 compile_mode: str | None = None) -> None:
        super().__init__(compile, compile_mode)
        check_hparams(("lr", lr, 0 < lr <= 1, LEARNING_RATE), ("gamma", gamma, 0 <= gamma <= 1, DISCOUNT),
                      ("n_step", n_step, n_step >= 1, ">= 1"), ("tau", tau, 0 < tau <= 1, "in (0, 1]"),
                      ("target_update_interval", target_update_interval, target_update_interval >= 1, ">= 1"),
                      ("max_grad_norm", max_grad_norm, 0 < max_grad_norm < math.inf, "> 0 and finite"),
                      ("epsilon", epsilon, 0 <= epsilon <= 1, "in [0, 1]"))
        if target_update not in ("hard", "soft"):
            raise ValueError(f"model.target_update={target_update!r} is not allowed: one of hard, soft")
        if loss_function not in ("l2", "smooth_l1"):
            raise ValueError(f"model.loss_function={loss_function!r} is not allowed: one of l2, smooth_l1")
        if not in_keys:
            raise ValueError("model.in_keys must name at least one entry (e.g. [observation])")
        if not 0 <= epsilon <= 1:
            raise ValueError(f"model.epsilon={epsilon} is not allowed: must be in [0, 1]")
        self.save_config("network")
        self.network = network
        self.target: TargetNetwork | None = None

    def build(self, action_spec, observation: TensorDict, agent_action_spec=None) -> None:
        """Build the collector's policy and the target network, after shaping the network's lazy layers on
        an example ``observation``.

        Args:
            action_spec: the env's per-sample action spec (with the agent dim of a multi-agent env).
            observation: an example observation TensorDict.
            agent_action_spec: one agent's action spec (multi-agent envs); ``action_spec`` when None.

        Raises:
            ValueError: the action spec is not categorical (one integer per action entry), or the network was
                built for another number of actions.
        """
        h = self.hparams
        agent_action_spec = action_spec if agent_action_spec is None else agent_action_spec
        if agent_action_spec.dtype not in (torch.int64, torch.int32) or not hasattr(agent_action_spec, "n"):
            raise ValueError(f"DQNModule needs a categorical action spec (one integer action), got {agent_action_spec}")
        if hasattr(self.network, "shape_actions"):  # the heads of a network whose num_actions is the env's
            self.network.shape_actions(int(agent_action_spec.space.n))
        with torch.no_grad():
            self.network(*(observation[k] for k in h.in_keys))
        masked = h.action_mask_key is not None
        self.policy = EpsilonGreedyQPolicy(self.network, masked=masked, epsilon=h.epsilon)
        self._policy = TensorPolicy(self.policy, [*h.in_keys, *([h.action_mask_key] if masked else [])], ["action"])
        self.target = TargetNetwork(self.network, h.target_update, h.target_update_interval, h.tau)

    @property
    def collector_policy(self) -> TensorPolicy:
        return self._policy

    def prepare(self, specs: EnvSpecs) -> None:
        """Build on the env's specs: the network's agents (a multi-agent network's ``shape_agents``), its action spec
        and an example observation (lazy layers).

        Raises:
            ValueError: a multi-agent network built for another number of agents than the env's.
        """
        if self.target is None:
            expected = getattr(self.network, "num_agents", None)
            if expected is not None and expected != specs.num_agents:
                raise ValueError(f"model.network.num_agents={expected} does not match the env: "
                                 f"env.num_agents={specs.num_agents} (e.g. the vacuum env's num_robots)")
            if hasattr(self.network, "shape_agents"):
                self.network.shape_agents(specs.num_agents)
            self.build(specs.action_spec, specs.example_observation, specs.agent_action_spec)

    def check_env(self, specs: EnvSpecs) -> None:
        """DQN needs discrete actions (one integer of n choices per agent); the network's ``num_actions`` and (a
        multi-agent network's) ``num_agents``, where given, must be the env's; ``in_keys`` and ``action_mask_key``
        must be entries of the env's observation.

        Raises:
            ValueError: the first mismatch, naming the config key and both sides.
        """
        h = self.hparams
        require_action_kind(specs, ("discrete",), class_path(self))
        if hasattr(self.network, "shape_agents"):
            require_num_agents(specs, class_path(self.network), self.network.num_agents)
        require_num_actions(specs, getattr(self.network, "num_actions", None))
        require_keys(specs, "model.init_args.in_keys", h.in_keys)
        if h.action_mask_key is not None:
            require_keys(specs, "model.init_args.action_mask_key", [h.action_mask_key],
                         "set it to null for an env without an action mask")

    def replay_keys(self) -> list[NestedKey]:
        """The loss's inputs: the network's inputs (and action mask) now and next, the action, the reward and
        the done flags."""
        h = self.hparams
        return self.transition_keys([*h.in_keys, *([h.action_mask_key] if h.action_mask_key is not None else [])])

    def replay_transform(self) -> MultiStepTransform | None:
        """The buffer transform of n-step returns (``n_step > 1``), with this module's gamma."""
        n = self.hparams.n_step
        return MultiStepTransform(n_steps=n, gamma=self.hparams.gamma) if n > 1 else None

    def set_epsilon(self, epsilon: float) -> None:
        """Set the exploration rate of the collector's policy."""
        self.policy.eps.fill_(float(epsilon))

    def epsilon(self) -> float:
        return float(self.policy.eps)

    # ------------------------------------------------------------------ update
    def loss(self, batch: TensorDict) -> tuple[Tensor, Tensor]:
        """:func:`modules.q_values.dqn_loss` of a sampled batch ``[N]``: the loss and each item's |TD error|
        ``[N, 1]`` (the mean over the copies ``network.training_batch`` made of it)."""
        h = self.hparams
        train = self.network.training_batch(batch) if hasattr(self.network, "training_batch") else batch
        loss, td_error = dqn_loss(self.network, self.target, train, h.in_keys, h.gamma, h.double_dqn,
                                  h.loss_function, h.action_mask_key)
        return loss, td_error.reshape(-1, *batch.shape, 1).mean(0)

    def training_step(self, batch: TensorDict, batch_idx: int) -> Tensor:
        """One optimiser step and target update per sampled batch of ``batch`` ``[K, N]``, in order; writes the
        items' |TD error| into ``batch`` under ``td_error`` ``[K, N, 1]`` (for prioritised replay)."""
        optimizer = self.optimizers()
        rows, errors = [], []
        for sample in batch.unbind(0):
            loss, td_error = self.update_loss(sample)
            grad_norm = self.optimiser_step(optimizer, loss, self.hparams.max_grad_norm)
            self.target.step()
            rows.append(torch.stack([loss.detach(), grad_norm, td_error.mean()]))
            errors.append(td_error)
        batch.set("td_error", torch.stack(errors))
        self.record_updates(["train/loss", "train/grad_norm", "train/td_error"], rows)
        self.record("train/epsilon", self.policy.eps)  # a device tensor: read with the other metrics
        return loss.detach()

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """The base state plus the hard target update's step counter (the target copy schedule)."""
        super().on_save_checkpoint(checkpoint)
        checkpoint["rl_state"]["target_counter"] = self.target.counter

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        counter = checkpoint.get("rl_state", {}).get("target_counter")
        if counter is not None:  # Lightning builds the model (configure_model) before restoring it
            self.target.counter = int(counter)

    def configure_optimizers(self):
        # fused: one kernel for all parameters (on CPU about 1 ms less per step for a 2 x 256 MLP)
        return torch.optim.Adam(self.network.parameters(), lr=self.hparams.lr, fused=True)
