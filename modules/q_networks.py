"""The Q-networks of :class:`modules.dqn.DQNModule`: an MLP with an optional dueling head, and its multi-agent
form (one network shared by all agents, or one per agent). Configs name them by this module's path,
``modules.q_networks.QNetwork`` and ``modules.q_networks.MultiAgentQNetwork``."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import Tensor, nn
from torch.nn.modules.lazy import LazyModuleMixin

from modules.compatibility import check_count, check_sizes, require_multi_agent


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
        require_multi_agent(num_agents, "modules.q_networks.MultiAgentQNetwork")
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
