"""Recurrent actor-critic networks for PPO on partially observed envs: sb3-contrib's ``MlpLstmPolicy`` (an LSTM for
the actor and one for the critic, each followed by an MLP head) on TorchRL's ``LSTMModule``, whose recurrent states
travel through the env as observation entries (TorchRL's ``TensorDictPrimer``, reset with ``InitTracker``'s
``is_init``: :func:`envs.policy_state.recurrent_env`)."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictSequential
from torch import Tensor, nn
from torchrl.modules import LSTMModule, ValueOperator, set_recurrent_mode

from envs import EnvSpecs
from modules.actor_critic import ActorCriticNetwork, CategoricalPolicy
from modules.compatibility import check_count, check_sizes
from modules.gaussian import GaussianPolicy, Squash
from modules.normalization import VecNormalization
from modules.policy import TensorPolicy
from modules.ppo_policy import policy_head, policy_out_keys

ACTOR_STATE = ("actor_hidden", "actor_cell")
CRITIC_STATE = ("critic_hidden", "critic_cell")


class LSTMActorCritic(ActorCriticNetwork):
    """An LSTM of ``lstm_hidden_size`` units for the actor and another for the critic, both reading the flat
    observation ``[*B, F]``; the actor's output ``actor_memory`` ``[*B, H]`` feeds an MLP to the policy output
    (logits ``[*B, A]`` or a Gaussian's mean), the critic's ``critic_memory`` an MLP to the value ``[*B, 1]``
    (sb3-contrib's ``MlpLstmPolicy`` with ``enable_critic_lstm``). The LSTMs are TorchRL ``LSTMModule`` s: one step
    per env step while collecting (their states ``actor_hidden``, ``actor_cell``, ``critic_hidden``,
    ``critic_cell`` ``[*B, 1, H]`` carried from step to step by the env, zero after a reset), whole rows ``[b, T]``
    in recurrent mode in the loss (from the state stored at each row's first step, reset where ``is_init``).

    Built on the env's shapes (:meth:`build`, from ``modules.ppo.PPOModule.prepare``).

    Args:
        lstm_hidden_size: H, the units of each LSTM (sb3-contrib's ``lstm_hidden_size``).
        hidden_dims: hidden widths of each MLP head (each >= 1; ``[]``: a linear head).
        activation: ``tanh`` or ``relu``.
        observation_key: the observation entry.
        num_actions: A (discrete actions, or a continuous action's width); null: the env's.

    Raises:
        ValueError: an unknown activation, or a size below 1 (the message names the key).
    """

    recurrent = True
    policy_keys: list[str] = []

    def __init__(self, lstm_hidden_size: int = 64, hidden_dims: tuple[int, ...] = (64,), activation: str = "relu",
                 observation_key: str = "observation", num_actions: int | None = None) -> None:
        nn.Module.__init__(self)
        if activation not in ("tanh", "relu"):
            raise ValueError(f"model.network.activation={activation!r} is not allowed: one of tanh, relu")
        check_sizes(lstm_hidden_size=lstm_hidden_size, hidden_dims=hidden_dims, num_actions=num_actions)
        self.lstm_hidden_size, self.hidden_dims = int(lstm_hidden_size), tuple(hidden_dims)
        self.activation, self.observation_key, self.num_actions = activation, observation_key, num_actions
        self.in_keys = [observation_key]
        self.input_key = observation_key  # what the LSTMs read (build)
        self.actor_lstm: LSTMModule | None = None
        self.critic_lstm: LSTMModule | None = None
        self.actor_head: nn.Module | None = None
        self.critic_head: nn.Module | None = None

    def build(self, observation_size: int, num_actions: int, input_key: str | None = None) -> None:
        """Create the LSTMs for observations of ``observation_size`` (F) features, read from ``input_key`` (default
        ``observation_key``; a standardised copy of it under normalisation), and the heads for ``num_actions`` (A)
        outputs; once (later calls check A).

        Raises:
            ValueError: the network was configured with another ``num_actions``.
        """
        check_count(self.num_actions, num_actions, "actions")
        self.num_actions = num_actions
        if self.actor_lstm is not None:
            return
        h, obs = self.lstm_hidden_size, input_key or self.observation_key
        self.input_key = obs
        self.actor_lstm = LSTMModule(observation_size, h, in_keys=[obs, *ACTOR_STATE],
                                     out_keys=["actor_memory", *(("next", k) for k in ACTOR_STATE)])
        self.critic_lstm = LSTMModule(observation_size, h, in_keys=[obs, *CRITIC_STATE],
                                      out_keys=["critic_memory", *(("next", k) for k in CRITIC_STATE)])
        act = nn.Tanh if self.activation == "tanh" else nn.ReLU

        def mlp(out: int) -> nn.Sequential:
            layers, width = [], h
            for size in self.hidden_dims:
                layers += [nn.Linear(width, size), act()]
                width = size
            return nn.Sequential(*layers, nn.Linear(width, out))

        self.actor_head, self.critic_head = mlp(num_actions), mlp(1)

    def encode(self, *observation: Tensor) -> Tensor:
        raise TypeError("LSTMActorCritic encodes whole TensorDicts with their recurrent states: its LSTMs are "
                        "TorchRL LSTMModules (sequence_outputs; one step: the collector's policy)")

    def policy(self, hidden: Tensor) -> Tensor:
        """The actor's memory ``[*B, H]`` -> the policy output ``[*B, A]``."""
        return self.actor_head(hidden)

    def value(self, hidden: Tensor) -> Tensor:
        """The critic's memory ``[*B, H]`` -> the value ``[*B, 1]``."""
        return self.critic_head(hidden)

    def heads(self) -> _MemoryHeads:
        """The heads as an :class:`~modules.actor_critic.ActorCriticNetwork` on the actor's memory, for the policy
        modules (``CategoricalPolicy``, ``GaussianPolicy``)."""
        return _MemoryHeads(self)


class _MemoryHeads(ActorCriticNetwork):
    """The MLP heads of an :class:`LSTMActorCritic` (the same modules, so the collector's policy holds and syncs
    them): ``in_keys`` ``actor_memory``; ``encode`` passes it through, ``policy`` maps it to the policy output
    ``[*B, A]``, ``value`` maps a memory (the critic's) to ``[*B, 1]``."""

    in_keys = ["actor_memory"]

    def __init__(self, network: LSTMActorCritic) -> None:
        super().__init__()
        self.actor_head, self.critic_head = network.actor_head, network.critic_head
        self.num_actions = network.num_actions

    def encode(self, memory: Tensor) -> Tensor:
        return memory

    def policy(self, hidden: Tensor) -> Tensor:
        return self.actor_head(hidden)

    def value(self, hidden: Tensor) -> Tensor:
        return self.critic_head(hidden)


def recurrent_parts(network: LSTMActorCritic, specs: EnvSpecs, action_mask_key: str | None, squash: Squash,
                    log_std_init: float, normalization: VecNormalization | None = None
                    ) -> tuple[TensorDictSequential, LSTMModule, ValueOperator, bool]:
    """Build ``network`` on the env's observation width and actions, then PPO's parts: the collector's policy (the
    observation standardised first where ``normalization`` has observation statistics; both LSTMs one step, the
    critic's too so that its state carries on for the next batch's values; then the categorical or Gaussian policy
    head, :func:`modules.ppo_policy.policy_head`, on the actor's memory), the critic LSTM (GAE's encoder), the value
    head on ``critic_memory`` (GAE's critic), and whether the actions are continuous.

    Raises:
        ValueError: the network was configured with another ``num_actions``.
    """
    spec, example = specs.agent_action_spec, specs.example_observation
    standardize = ([normalization.standardizer()] if normalization is not None and normalization.observation is not None
                   else [])
    network.build(example.get(network.observation_key).shape[-1],
                  specs.num_actions if specs.action_kind == "discrete" else int(spec.shape[-1]),
                  standardize[0].out_keys[0] if standardize else None)
    heads, mask = network.heads(), [action_mask_key] if action_mask_key is not None else []
    head = policy_head(specs, heads, CategoricalPolicy(heads, bool(mask)), squash, log_std_init)
    continuous = isinstance(head, GaussianPolicy)
    policy = TensorDictSequential(*standardize, network.actor_lstm, network.critic_lstm,
                                  TensorPolicy(head, ["actor_memory", *mask], policy_out_keys(continuous)))
    return policy, network.critic_lstm, ValueOperator(heads.value, in_keys=["critic_memory"]), continuous


def sequence_outputs(network: LSTMActorCritic, batch: TensorDictBase) -> tuple[Tensor, Tensor]:
    """Both LSTMs over whole rows ``batch`` ``[b, T]`` in TorchRL's recurrent mode (from the states stored at each
    row's first step, reset where ``is_init``), then the heads: the policy output ``[b, T, A]`` and the value
    ``[b, T, 1]`` (with gradients)."""
    td = batch.select(*sequence_keys(network)).copy()
    with set_recurrent_mode(True):
        network.actor_lstm(td)
        network.critic_lstm(td)
    return network.actor_head(td.get("actor_memory")), network.critic_head(td.get("critic_memory"))


def sequence_keys(network: LSTMActorCritic) -> list[str]:
    """The entries :func:`sequence_outputs` reads."""
    return [network.input_key, *ACTOR_STATE, *CRITIC_STATE, "is_init"]


class RecurrentStep(nn.Module):
    """One step of a recurrent PPO policy as a plain module, what ``pipelines.export`` writes: ``(observation
    [B, F], is_init [B, 1] bool, actor_hidden [B, 1, H], actor_cell [B, 1, H], *extra)`` -> ``(action, next
    actor_hidden, next actor_cell)``, the states zeroed where ``is_init`` (an episode's first step), as TorchRL's
    ``LSTMModule`` steps them; the observation standardised first where the policy does. Start an episode with
    zero states and ``is_init`` True, then feed each step's states back. Under ``ExplorationType.DETERMINISTIC``
    (as exported) the action is the most likely one, or the Gaussian's mean clipped or squashed into the bounds.

    Args:
        policy: the collector's policy of :func:`recurrent_parts` (its LSTMs' ``nn.LSTM`` and its head are used).
        network: the :class:`LSTMActorCritic` it was built on.
    """

    def __init__(self, policy: TensorDictSequential, network: LSTMActorCritic) -> None:
        super().__init__()
        first = policy[0]
        self.standardize = first.module if isinstance(first, TensorPolicy) else None
        self.lstm = network.actor_lstm.lstm
        self.head = policy[-1].module

    def forward(self, observation: Tensor, is_init: Tensor, hidden: Tensor, cell: Tensor, *extra: Tensor):
        x = observation if self.standardize is None else self.standardize(observation)
        keep = (~is_init).to(hidden.dtype).unsqueeze(-1)  # [B, 1, 1]
        out, (hidden, cell) = self.lstm(x.unsqueeze(1), ((hidden * keep).transpose(0, 1).contiguous(),
                                                         (cell * keep).transpose(0, 1).contiguous()))
        return self.head(out[:, 0], *extra)[0], hidden.transpose(0, 1), cell.transpose(0, 1)


def step_keys(network: LSTMActorCritic, mask: list[str]) -> list[str]:
    """The input keys of :class:`RecurrentStep`, in its arguments' order (``mask``: the action mask's key, if any)."""
    return [network.observation_key, "is_init", *ACTOR_STATE, *mask]


def step_example(network: LSTMActorCritic, specs: EnvSpecs) -> TensorDictBase:
    """An example input of :class:`RecurrentStep` for tracing: the env's example observation with ``is_init`` True
    and zero states."""
    example = specs.example_observation.clone()
    rows, size = example.batch_size[0], network.lstm_hidden_size
    example.set("is_init", torch.ones(rows, 1, dtype=torch.bool))
    for key in ACTOR_STATE:
        example.set(key, torch.zeros(rows, 1, size))
    return example
