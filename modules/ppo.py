"""PPO (Schulman et al. 2017, "Proximal Policy Optimization Algorithms", arXiv:1707.06347) with
GAE (Schulman et al. 2016, arXiv:1506.02438), on TorchRL's ``GAE``; the update is
:func:`modules.ppo_loss.ppo_loss`, tested equal to TorchRL's ``ClipPPOLoss``."""

from __future__ import annotations

import math
from typing import Literal

import torch
from tensordict import NestedKey, TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import Tensor
from torchrl.modules import ValueOperator
from torchrl.objectives.value import GAE

from envs import EnvSpecs
from modules.actor_critic import ActorCriticNetwork, CategoricalPolicy
from modules.base import RLModule
from modules.checks import DISCOUNT, LEARNING_RATE, check_hparams
from modules.compatibility import class_path
from modules.gae import bootstrapped_gae
from modules.gaussian import GaussianPolicy, Squash, gaussian_entropy, gaussian_log_prob
from modules.graph_update import graph_adam
from modules.normalization import NORMALIZED, ReturnsInCheckpoint, VecNormalization
from modules.policy import TensorPolicy
from modules.ppo_loss import clipped_loss, ppo_loss
from modules.ppo_policy import check_policy_fits, policy_head, policy_out_keys
from modules.recurrent import RecurrentStep, recurrent_parts, sequence_keys, sequence_outputs, step_example, step_keys

_RECORDED = ("loss_objective", "loss_critic", "loss_entropy", "entropy", "kl_approx", "clip_fraction",
             "explained_variance", "loss", "grad_norm")


SCHEDULES = ("constant", "linear")  # of the learning rate and the clip range

# far above any useful scale; catches a mistyped exponent (1e30 overflowed the critic's squared error to inf)
MAX_REWARD_SCALE = 1e6


class PPOModule(ReturnsInCheckpoint, RLModule):
    """Clipped-objective PPO with a categorical or Gaussian actor and a critic on a shared encoder.

    The encoder runs once per minibatch (``hidden``); the actor head and the value head both read it. On discrete
    actions the actor is categorical (``MaskedCategorical`` over ``action_mask``, or a plain categorical when
    ``action_mask_key`` is null); on continuous ones it is :class:`modules.gaussian.GaussianPolicy` (the network's
    policy output is the mean, with a learned state-independent log standard deviation, the action clipped or
    squashed into the bounds, its probabilities those of the unclipped draw ``raw_action``). Advantages come
    from GAE on each collected batch ``[B, T]`` before it is split into minibatches (by the data pipeline);
    ``training_step`` gets all the minibatches of a collected batch and takes one optimiser step per minibatch.

    Args:
        network: the actor-critic network (encoder, policy head, value head).
        lr: Adam learning rate.
        lr_schedule: ``constant`` or ``linear`` decay to 0 over the data module's ``total_frames``.
        gamma: discount per env step.
        gae_lambda: GAE's lambda (Schulman et al. 2016).
        clip_epsilon: PPO ratio clip.
        clip_schedule: ``constant`` or ``linear`` decay of ``clip_epsilon`` to 0 over ``total_frames`` (RL Zoo's
            ``lin_0.2``).
        entropy_coeff: entropy bonus weight.
        critic_coeff: value loss weight.
        max_grad_norm: global gradient-norm clip.
        normalize_advantage: standardise advantages per minibatch.
        reward_scale: rewards are multiplied by this for GAE and the critic (logged returns stay unscaled).
        action_mask_key: observation key of the boolean action mask, or null for none.
        loss_critic_type: ``l2`` or ``smooth_l1``.
        ppo_epochs: passes over each collected batch (SB3's ``n_epochs``).
        mini_batch_size: frames per minibatch (SB3's ``batch_size``), a divisor of ``collector.frames_per_batch``.
        squash: continuous actions only: ``clip`` the Gaussian draw to the bounds (SB3's PPO) or ``tanh`` squash it.
        log_std_init: continuous actions only: the initial log standard deviation (SB3's ``log_std_init``).
        normalize_observation: standardise the (one, flat) observation by its running mean and variance.
        normalize_reward: divide rewards by the running std of the ``gamma``-discounted return (``reward_scale``: 1).
        normalize_clip: both normalisations (:mod:`modules.normalization`) clip at this many standard deviations.
        compile: run the update's loss through ``torch.compile`` (see :class:`modules.base.RLModule`).
        compile_mode: ``torch.compile``'s mode (null, ``default``, ``reduce-overhead``: CUDA graphs, ...).
        cuda_graph: on a GPU each minibatch's whole update as one CUDA graph (:mod:`modules.graph_update`).
    """

    def __init__(
        self,
        network: ActorCriticNetwork,
        lr: float = 3e-4,
        lr_schedule: Literal["constant", "linear"] = "linear",
        gamma: float = 1.0,
        gae_lambda: float = 0.95,
        clip_epsilon: float = 0.2,
        clip_schedule: Literal["constant", "linear"] = "constant",
        entropy_coeff: float = 0.01,
        critic_coeff: float = 0.5,
        max_grad_norm: float = 0.5,
        normalize_advantage: bool = True,
        reward_scale: float = 1.0,
        action_mask_key: str | None = "action_mask",
        loss_critic_type: Literal["l2", "smooth_l1"] = "l2",
        ppo_epochs: int = 10,
        mini_batch_size: int = 64,
        squash: Squash = "clip",
        log_std_init: float = 0.0,
        normalize_observation: bool = False,
        normalize_reward: bool = False,
        normalize_clip: float = 10.0,
        compile: bool = False,
        compile_mode: str | None = None,
        cuda_graph: bool = False,
    ) -> None:
        super().__init__(compile, compile_mode, cuda_graph)
        check_hparams(("lr", lr, 0 < lr <= 1, LEARNING_RATE), ("gamma", gamma, 0 <= gamma <= 1, DISCOUNT),
                      ("gae_lambda", gae_lambda, 0 <= gae_lambda <= 1, DISCOUNT),
                      ("clip_epsilon", clip_epsilon, 0 < clip_epsilon <= 1, "in (0, 1]"),
                      ("entropy_coeff", entropy_coeff, 0 <= entropy_coeff < math.inf, ">= 0 and finite"),
                      ("critic_coeff", critic_coeff, 0 <= critic_coeff < math.inf, ">= 0 and finite"),
                      ("max_grad_norm", max_grad_norm, 0 < max_grad_norm < math.inf, "> 0 and finite"),
                      ("reward_scale", reward_scale, 0 < reward_scale <= MAX_REWARD_SCALE,
                       f"in (0, {MAX_REWARD_SCALE:g}] (a multiplier of the env's reward)"),
                      ("ppo_epochs", ppo_epochs, ppo_epochs >= 1, ">= 1"),
                      ("mini_batch_size", mini_batch_size, mini_batch_size >= 1, ">= 1 (frames)"),
                      ("log_std_init", log_std_init, -20 <= log_std_init <= 2, "in [-20, 2]"),
                      ("normalize_clip", normalize_clip, 0 < normalize_clip < math.inf, "> 0 and finite"),
                      ("reward_scale", reward_scale, not normalize_reward or reward_scale == 1.0,
                       "1 with model.normalize_reward=true (the normalisation scales the rewards)"))
        for key, value, allowed in (("lr_schedule", lr_schedule, SCHEDULES), ("squash", squash, ("clip", "tanh")),
                                    ("clip_schedule", clip_schedule, SCHEDULES)):
            if value not in allowed:
                raise ValueError(f"model.{key}={value!r} is not allowed: one of {', '.join(allowed)}")
        self.recurrent = bool(getattr(network, "recurrent", False))  # modules.recurrent.LSTMActorCritic
        self.save_config("network")
        self.network = network
        self.register_buffer("clip_epsilon", torch.tensor(float(clip_epsilon)))  # scheduled (clip_schedule)
        self.gae = GAE(gamma=gamma, lmbda=gae_lambda, value_network=None)
        self.gae.set_keys(reward="scaled_reward", done="value_done", terminated="value_terminated")
        self._policy: TensorPolicy | TensorDictSequential | None = None  # (a recurrent network's: prepare)
        if not self.recurrent:
            self.encoder = TensorDictModule(network.encode, in_keys=list(network.in_keys), out_keys=["hidden"])
            self.critic = ValueOperator(network.value, in_keys=["hidden"])
            mask = [action_mask_key] if action_mask_key is not None else []
            self._policy = TensorPolicy(CategoricalPolicy(network, bool(mask)), [*network.in_keys,
                                        *network.policy_keys, *mask], ["action", "action_log_prob", "hidden"])
        self.continuous, self.normalization = False, None  # a Gaussian policy; a VecNormalization (prepare)

    @property
    def collector_policy(self) -> TensorPolicy | TensorDictSequential:
        """:class:`~modules.actor_critic.CategoricalPolicy` or :class:`~modules.gaussian.GaussianPolicy` (TorchRL's
        ``ProbabilisticActor``'s draws), after a recurrent network's LSTMs."""
        return self._policy

    def export_policy(self):
        """The base's; a recurrent network's one step, its states in and out (``modules.recurrent.RecurrentStep``)."""
        if not self.recurrent:
            return super().export_policy()
        mask = [self.hparams.action_mask_key] if self.hparams.action_mask_key is not None else []
        return RecurrentStep(self._policy, self.network), step_keys(self.network, mask)

    def export_example(self) -> TensorDict:
        """The base's, with a recurrent network's ``is_init`` and zero states."""
        if not self.recurrent:
            return super().export_example()
        return step_example(self.network, self.env_specs)

    @property
    def ppo_epochs(self) -> int:
        """Passes over each collected batch (read by ``pipelines.data.OnPolicyDataModule``)."""
        return int(self.hparams.ppo_epochs)

    @property
    def mini_batch_size(self) -> int:
        """Frames per minibatch (read by ``pipelines.data.OnPolicyDataModule``)."""
        return int(self.hparams.mini_batch_size)

    def prepare(self, specs: EnvSpecs) -> None:
        """Fit the policy head to the env's actions (:func:`modules.ppo_policy.policy_head`), add the normalisation,
        then materialise lazy layers on an example observation of the env.

        Raises:
            ValueError: the network was built for another number of actions.
        """
        h, net = self.hparams, self.network
        if self.recurrent:
            return self._prepare_recurrent(specs)
        head = policy_head(specs, net, self._policy.module, h.squash, h.log_std_init)
        self.continuous = isinstance(head, GaussianPolicy)
        self.normalization = VecNormalization.of(specs.example_observation, net.in_keys[0], h.normalize_observation,
                                                 h.gamma if h.normalize_reward else None, h.normalize_clip)
        if self.normalization is not None:
            head = self.normalization.wrap(head)
        if head is not self._policy.module:
            self._policy = TensorPolicy(head, self._policy.in_keys, policy_out_keys(self.continuous))
        self.materialize(specs.example_observation)

    def _prepare_recurrent(self, specs: EnvSpecs) -> None:
        """:meth:`prepare` of an `LSTMActorCritic`: :func:`modules.recurrent.recurrent_parts`."""
        h = self.hparams
        self.normalization = VecNormalization.of(specs.example_observation, self.network.observation_key,
                                                 h.normalize_observation, h.gamma if h.normalize_reward else None,
                                                 h.normalize_clip, NORMALIZED)
        self._policy, self.encoder, self.critic, self.continuous = recurrent_parts(
            self.network, specs, h.action_mask_key, h.squash, h.log_std_init, self.normalization)

    def check_env(self, specs: EnvSpecs) -> None:
        """:func:`modules.ppo_policy.check_policy_fits` (raises its ``ValueError``)."""
        h = self.hparams
        check_policy_fits(specs, class_path(self), self.network, h.action_mask_key, h.squash, h.normalize_observation)

    def materialize(self, observation: TensorDict) -> None:
        """Run the policy once on ``observation`` (no grad) so that lazy layers get their shapes."""
        with torch.no_grad():
            self._policy(observation.clone())

    # ------------------------------------------------------------------ data
    def on_collected(self, batch: TensorDict) -> TensorDict:
        """Statistics (see ``RLModule``), then GAE on ``[B, T]`` (:func:`modules.gae.bootstrapped_gae`); returns the
        batch flattened ``[B * T]`` (a recurrent network's as it is, ``[B, T]``: its minibatches are whole rows).

        With normalisation (:class:`~modules.normalization.VecNormalization`), the batch's observations are
        standardised as its policy saw them, and ``scaled_reward`` is the normalised reward; the logged returns stay
        the env's.
        """
        batch = super().on_collected(batch)
        reduce = self._sum_over_ranks()
        if self.hparams.clip_schedule == "linear":
            self.clip_epsilon.fill_(self.hparams.clip_epsilon * self._remaining())
            self.record("train/clip_epsilon", float(self.clip_epsilon))
        with torch.no_grad():
            batch["next", "scaled_reward"] = batch["next", "reward"] * self.hparams.reward_scale
            if self.normalization is not None:
                self.normalization.observations(batch, reduce)
                batch["next", "scaled_reward"] = self.normalization.rewards(batch["next", "reward"],
                                                                            batch["next", "done"], reduce)
            bootstrapped_gae(batch, self.encoder, self.critic, self.gae, self.recurrent)
        return batch if self.recurrent else batch.reshape(-1)

    def replay_keys(self) -> list[NestedKey]:
        """What :meth:`loss` reads from a collected batch (the network's inputs, the action mask, the action and its
        log-probability, GAE's advantage and value target): the minibatches are cut from these alone (without the
        next observations and the env's reports a minibatch of the headline config took 2.9 ms to cut, not 7.7)."""
        h, net = self.hparams, self.network
        mask = [h.action_mask_key] if h.action_mask_key is not None else []
        action = "raw_action" if self.continuous else "action"
        inputs = sequence_keys(net) if self.recurrent else [*net.in_keys, *net.policy_keys]
        return [*inputs, *mask, action, "action_log_prob", "advantage", "value_target"]

    # ------------------------------------------------------------------ update
    def loss(self, batch: TensorDict) -> dict[str, Tensor]:
        """:func:`modules.ppo_loss.ppo_loss` of a minibatch ``[N]`` (a recurrent network's: rows ``[b, T]``): the
        encoder once, then both heads. The heads run in float32 whatever the precision (autocast off for them): under
        ``bf16-mixed`` only the encoder runs in bfloat16 (8 significant bits: logits of magnitude 5 rounded to it
        would move a ratio by 2%, a tenth of ``clip_epsilon`` 0.2)."""
        h, net = self.hparams, self.network
        if self.recurrent:  # whole rows [b, T]: the LSTMs over them, then the loss on their frames
            logits, value = sequence_outputs(net, batch)
            batch, logits, value = batch.reshape(-1), logits.flatten(0, 1), value.flatten(0, 1)
        else:
            hidden = net.encode(*(batch.get(k) for k in net.in_keys))
            with torch.autocast(hidden.device.type, enabled=False):
                hidden = hidden.float()
                logits = net.policy(hidden, *(batch.get(k) for k in net.policy_keys))
                value = net.value(hidden)
        if self.continuous:  # logits: the Gaussian's mean
            log_std = self._gaussian().log_std
            log_prob = gaussian_log_prob(logits, log_std, batch.get("raw_action"))
            return clipped_loss(log_prob, gaussian_entropy(log_std).expand(log_prob.shape), value, batch,
                                self.clip_epsilon, h.entropy_coeff, h.critic_coeff, h.normalize_advantage,
                                h.loss_critic_type)
        mask = batch.get(h.action_mask_key) if h.action_mask_key is not None else None
        return ppo_loss(logits, value, batch, self.clip_epsilon, h.entropy_coeff, h.critic_coeff,
                        h.normalize_advantage, h.loss_critic_type, mask)

    def training_step(self, batch, batch_idx: int) -> Tensor:
        """One optimiser step (and learning-rate step) per minibatch of ``batch``, in order: the minibatches of
        one collected batch (``pipelines.data.on_policy.Minibatches``, or any iterable of TensorDicts ``[N]``,
        e.g. a TensorDict ``[K, N]``); :meth:`~modules.updates.OptimiserUpdates.minibatch_steps`."""
        optimizer, scheduler = self.optimizers(), self.lr_schedulers()
        rows = self.minibatch_steps(batch, optimizer, scheduler, _RECORDED[:3], _RECORDED[:-2],
                                    self.hparams.max_grad_norm)
        self.record_updates([f"train/{k}" for k in _RECORDED], rows)
        self.record("train/lr", scheduler.get_last_lr()[0])
        if self.continuous:
            self.record("train/action_std", self._gaussian().log_std.detach().exp().mean())
        return rows[-1][-2]  # the last update's loss

    def _gaussian(self) -> GaussianPolicy:
        """The Gaussian policy head (under the normalisation's wrapper, where there is one)."""
        head = (self._policy[-1] if self.recurrent else self._policy).module
        return getattr(head, "policy", head)

    def configure_optimizers(self):
        # fused: one kernel for all parameters, and a non-finite update is skipped inside it (no host read per
        # update, RLModule.optimizer_update); on a CPU its step took 65 us against 262 us for torch's default
        # (for-loop) Adam with CartPole's two 64 x 64 MLPs, the same update up to float rounding (about 1e-7)
        optimizer = (graph_adam(self.parameters(), self.hparams.lr, self.device) if self.cuda_graph  # (a device rate)
                     else torch.optim.Adam(self.parameters(), lr=self.hparams.lr, fused=True))
        linear = self.hparams.lr_schedule == "linear"
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: self._remaining() if linear else 1.0)
        return [optimizer], [schedule]

    def _remaining(self) -> float:
        """The budget left, 1 - collected frames / ``total_frames`` (in [0, 1]), the factor of the linear schedules."""
        budget = self.trainer.datamodule.total_frames
        return max(1.0 - self.collected_frames / budget, 0.0)
