"""DQN (Mnih et al. 2015, "Human-level control through deep reinforcement learning", Nature 518) with
the usual options: double DQN (van Hasselt et al. 2016, AAAI), a dueling head (Wang et al. 2016,
ICML), n-step returns (TorchRL's ``MultiStepTransform`` on the replay buffer), hard or soft target
updates, gradient clipping, prioritised-replay weights. The update is :func:`modules.q_values.dqn_loss`,
tested equal to TorchRL's ``DQNLoss``. Its Q-networks are in :mod:`modules.q_networks` (configs name them
there, ``modules.q_networks.QNetwork``: a config names a class by the path ``--help`` lists, the shortest one of its
defining module)."""

from __future__ import annotations

import math
from typing import Literal

import torch
from tensordict import NestedKey, TensorDict
from torch import Tensor, nn
from torchrl.envs import MultiStepTransform

from envs import EnvSpecs
from envs.restored import restored_number
from modules.base import RLModule
from modules.checks import DISCOUNT, LEARNING_RATE, check_hparams
from modules.compatibility import (
    class_path,
    require_action_kind,
    require_keys,
    require_num_actions,
    require_num_agents,
)
from modules.graph_update import graph_adam
from modules.policy import TensorPolicy
from modules.q_values import EpsilonGreedyQPolicy, dqn_loss
from modules.target import TargetNetwork

__all__ = ["DQNModule"]


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
    (e.g. :class:`~modules.q_networks.MultiAgentQNetwork` without parameter sharing).

    Args:
        network: Q-network (``observation`` -> action values ``[*B, A]``), e.g. :class:`~modules.q_networks.QNetwork`.
        lr: Adam learning rate.
        gamma: discount per env step.
        n_steps: n of the n-step return (1 = one-step TD).
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
        cuda_graph: on a GPU each sampled batch's whole update as one CUDA graph (:mod:`modules.graph_update`; the
            target network's update stays outside it).

    Raises:
        ValueError: an out-of-range hyper-parameter (the message names it).
    """

    RENAMED_HPARAMS = {"n_step": "n_steps"}  # checkpoints saved before the rename load (modules.loading)

    def __init__(self, network: nn.Module, lr: float = 1e-3, gamma: float = 0.99, n_steps: int = 1,
                 double_dqn: bool = True, target_update: Literal["hard", "soft"] = "soft", tau: float = 0.005,
                 target_update_interval: int = 500, max_grad_norm: float = 10.0, epsilon: float = 1.0,
                 in_keys: tuple[str, ...] = ("observation",), action_mask_key: str | None = None,
                 loss_function: Literal["l2", "smooth_l1"] = "smooth_l1", compile: bool = False,
                 compile_mode: str | None = None, cuda_graph: bool = False) -> None:
        super().__init__(compile, compile_mode, cuda_graph)
        check_hparams(("lr", lr, 0 < lr <= 1, LEARNING_RATE), ("gamma", gamma, 0 <= gamma <= 1, DISCOUNT),
                      ("n_steps", n_steps, n_steps >= 1, ">= 1"), ("tau", tau, 0 < tau <= 1, "in (0, 1]"),
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
        """The buffer transform of n-step returns (``n_steps > 1``), with this module's gamma."""
        n = self.hparams.n_steps
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
        """One optimiser step (:meth:`sample_update`, with ``cuda_graph`` a replay of its CUDA graph) and target update
        per sampled batch of ``batch`` ``[K, N]``, in order; writes the items' |TD error| into ``batch`` under
        ``td_error`` ``[K, N, 1]`` (for prioritised replay)."""
        optimizer = self.optimizers()
        graph = self.graphed_update(optimizer, self.sample_update) if self.cuda_graph else None
        rows, errors = [], []
        for sample in batch.unbind(0):
            out = self.sample_update(sample, optimizer, self.direct_update()) if graph is None else graph(sample)
            self.count_nonfinite(out["skipped"])
            self.target.step()
            rows.append(out["row"])
            errors.append(out["td_error"])
        batch.set("td_error", torch.stack(errors))
        self.record_updates(["train/loss", "train/grad_norm", "train/td_error"], rows)
        self.record("schedule/epsilon", self.policy.eps)  # a device tensor: read with the other metrics
        return rows[-1][0]  # the last update's loss

    def sample_update(self, sample: TensorDict, optimizer, direct: bool = True) -> TensorDict:
        """The update of one sampled batch ``[N]`` (:meth:`~modules.updates.OptimiserUpdates.apply_update`): ``row``
        (the loss, the gradient norm before clipping, the mean |TD error|), ``td_error`` ``[N, 1]`` and ``skipped``
        (a non-finite update, not applied), with no host read: what a CUDA graph captures."""
        loss, td_error = self.update_loss(sample)
        grad_norm, skipped = self.apply_update(optimizer, loss, self.hparams.max_grad_norm, direct)
        return TensorDict(row=torch.stack([loss.detach(), grad_norm, td_error.mean()]), td_error=td_error,
                          skipped=skipped)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """The base state plus the hard target update's step counter (the target copy schedule)."""
        super().on_save_checkpoint(checkpoint)
        checkpoint["rl_state"]["target_counter"] = self.target.counter

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        counter = checkpoint.get("rl_state", {}).get("target_counter")
        if counter is not None:  # Lightning builds the model (configure_model) before restoring it
            self.target.counter = restored_number(counter, "rl_state.target_counter", low=0)

    def configure_optimizers(self):
        # fused: one kernel for all parameters (on CPU about 1 ms less per step for a 2 x 256 MLP); its rate a device
        # tensor under cuda_graph (modules.graph_update)
        if self.cuda_graph:
            return graph_adam(self.network.parameters(), self.hparams.lr, self.device)
        return torch.optim.Adam(self.network.parameters(), lr=self.hparams.lr, fused=True)
