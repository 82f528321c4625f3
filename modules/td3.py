"""TD3 on the off-policy pipeline (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic
Methods", ICML, arXiv:1802.09477): a deterministic tanh actor explored with Gaussian noise, twin critics with
clipped double-Q targets, target policy smoothing, and the actor and the target networks updated every
``policy_delay``-th critic update. The update is :mod:`modules.td3_loss`, tested equal to TorchRL's ``TD3Loss``.

Noise scales are fractions of the action range's half width (SB3's convention, which adds them in [-1, 1]
before rescaling), so one config works for any bounds: on Pendulum's [-2, 2] torque, ``exploration_noise: 0.1``
is a standard deviation of 0.2 N m."""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict
from torch import Tensor, nn
from torchrl.data import Bounded
from torchrl.envs.utils import ExplorationType, exploration_type

from envs import EnvSpecs
from envs.restored import restored_number
from modules.base import RLModule
from modules.checks import DISCOUNT, LEARNING_RATE, check_hparams
from modules.compatibility import check_sizes, class_path, require_action_kind, require_bounded, require_keys
from modules.policy import TensorPolicy
from modules.sac import StateActionCritic, lazy_mlp
from modules.sac_loss import Critics
from modules.target import TargetNetwork
from modules.td3_loss import td3_actor_loss, td3_critic_loss

LOSS_FUNCTIONS = ("l2", "l1", "smooth_l1")


class TD3Networks(nn.Module):
    """The actor and the critic of TD3, as ReLU MLPs (input widths lazy, taken from the first observation):
    actor ``observation`` ``[*B, F]`` -> ``tanh`` ``[*B, A]`` in [-1, 1] (the policy rescales it to the action
    bounds); critic ``(observation, action)`` -> Q ``[*B, 1]``. The loss makes the twin critics and the target
    copies. The defaults are the paper's and RL Zoo's 400 x 300.

    Args:
        actor_hidden_dims: hidden layer widths of the actor (each >= 1).
        critic_hidden_dims: hidden layer widths of each critic (each >= 1).

    Raises:
        ValueError: a width below 1 (the message names the key).
    """

    def __init__(self, actor_hidden_dims: tuple[int, ...] = (400, 300),
                 critic_hidden_dims: tuple[int, ...] = (400, 300)) -> None:
        super().__init__()
        check_sizes(actor_hidden_dims=actor_hidden_dims, critic_hidden_dims=critic_hidden_dims)
        self.actor_hidden_dims = tuple(actor_hidden_dims)
        self.critic_hidden_dims = tuple(critic_hidden_dims)
        self.actor: nn.Module | None = None
        self.critic: nn.Module | None = None

    def build(self, action_dim: int) -> None:
        """Create the MLPs for ``action_dim`` (A)."""
        self.actor = nn.Sequential(lazy_mlp(action_dim, self.actor_hidden_dims), nn.Tanh())
        self.critic = StateActionCritic(lazy_mlp(1, self.critic_hidden_dims))


class ScaledActor(nn.Module):
    """The actor's ``[-1, 1]`` output rescaled to the action bounds: ``observation`` -> ``(high + low) / 2 +
    (high - low) / 2 * actor(observation)`` ``[*B, A]`` (what the critics and the env see).

    Args:
        actor: ``observation`` -> ``[*B, A]`` in [-1, 1]. low, high: the action bounds ``[A]``.
    """

    def __init__(self, actor: nn.Module, low: Tensor, high: Tensor) -> None:
        super().__init__()
        self.actor = actor
        self.register_buffer("action_center", (high + low) / 2)
        self.register_buffer("action_scale", (high - low) / 2)

    def forward(self, observation: Tensor) -> Tensor:
        return self.action_center + self.action_scale * self.actor(observation)


class TD3ActorPolicy(nn.Module):
    """The collector's TD3 policy: the scaled actor's action, with Gaussian exploration noise under
    ``ExplorationType.RANDOM`` (the collector's): ``a = c + h * clip(mu(s) + eps, -1, 1)`` (c, h: the bounds' center
    and half width),
    ``eps ~ N(0, exploration_noise^2)`` (drawn from torch's global generator, so a run is reproducible);
    otherwise (evaluation, export) the deterministic action.

    Called as ``policy(observation)`` ``[*B, F]``; returns the action ``[*B, A]``.

    Args:
        actor: a :class:`ScaledActor`. exploration_noise: the noise's standard deviation, a fraction of the
            half range.
    """

    def __init__(self, actor: ScaledActor, exploration_noise: float) -> None:
        super().__init__()
        self.scaled = actor
        self.exploration_noise = float(exploration_noise)

    def forward(self, observation: Tensor) -> Tensor:
        unit = self.scaled.actor(observation)
        if exploration_type() == ExplorationType.RANDOM and self.exploration_noise > 0:
            unit = (unit + torch.randn_like(unit) * self.exploration_noise).clamp(-1.0, 1.0)
        return self.scaled.action_center + self.scaled.action_scale * unit


class TD3Module(RLModule):
    """TD3 on sampled replay batches (``pipelines.data.OffPolicyDataModule``), for bounded continuous actions.

    ``training_step`` gets ``[K, N]`` sampled batches (K updates). Each update takes one Adam step on the critics'
    loss (:func:`modules.td3_loss.td3_critic_loss`); every ``policy_delay``-th update (counted over the run, as
    SB3's ``_n_updates``) the same step also takes the actor's loss (:func:`~modules.td3_loss.td3_actor_loss`, on
    the critics before that step, as TorchRL's TD3 script) and is followed by the soft update (Polyak ``tau``) of
    the target actor and target critics. Random warm-up actions are the data module's ``init_random_frames``.

    Args:
        network: the actor and critic MLPs (:class:`TD3Networks`).
        actor_lr: Adam learning rate of the actor.
        critic_lr: Adam learning rate of the critics.
        gamma: discount per env step.
        tau: soft target update rate per actor update.
        num_qvalue_nets: critics (twin: 2).
        policy_delay: critic updates per actor and target update (the paper's d = 2).
        exploration_noise: standard deviation of the collector's Gaussian action noise, as a fraction of the half
            action range.
        policy_noise: standard deviation of the target policy smoothing noise, a fraction of the half range.
        noise_clip: the smoothing noise is clipped to +-``noise_clip`` (a fraction of the half range).
        loss_function: the critics' regression loss: ``l2`` (the paper's and SB3's), ``l1`` or ``smooth_l1``
            (TorchRL's default).
        max_grad_norm: global gradient-norm clip; null: none (as the paper and SB3).
        observation_key: the observation the networks read.
        compile: run the critics' loss through ``torch.compile`` (see :class:`modules.base.RLModule`).
        compile_mode: ``torch.compile``'s mode (null, ``default``, ``reduce-overhead``: CUDA graphs, ...).

    Raises:
        ValueError: an out-of-range hyper-parameter (the message names it), or an action spec that is not
            bounded continuous.
    """

    updates_all_parameters = False  # (the critic-only updates: under DDP, ddp_find_unused_parameters_true)

    def __init__(self, network: TD3Networks, actor_lr: float = 1e-3, critic_lr: float = 1e-3, gamma: float = 0.99,
                 tau: float = 0.005, num_qvalue_nets: int = 2, policy_delay: int = 2, exploration_noise: float = 0.1,
                 policy_noise: float = 0.2, noise_clip: float = 0.5, loss_function: str = "l2",
                 max_grad_norm: float | None = None, observation_key: str = "observation", compile: bool = False,
                 compile_mode: str | None = None) -> None:
        super().__init__(compile, compile_mode)
        check_hparams(*((key, value, 0 < value <= 1, LEARNING_RATE)
                        for key, value in (("actor_lr", actor_lr), ("critic_lr", critic_lr))),
                      ("gamma", gamma, 0 <= gamma <= 1, DISCOUNT), ("tau", tau, 0 < tau <= 1, "in (0, 1]"),
                      ("num_qvalue_nets", num_qvalue_nets, num_qvalue_nets >= 1, ">= 1"),
                      ("policy_delay", policy_delay, policy_delay >= 1, "an integer >= 1"),
                      *((key, value, 0 <= value < math.inf, ">= 0 and finite")
                        for key, value in (("exploration_noise", exploration_noise), ("policy_noise", policy_noise),
                                           ("noise_clip", noise_clip))),
                      ("loss_function", loss_function, loss_function in LOSS_FUNCTIONS,
                       f"one of {', '.join(LOSS_FUNCTIONS)}"),
                      ("max_grad_norm", max_grad_norm, max_grad_norm is None or 0 < max_grad_norm < math.inf,
                       "> 0 and finite, or null"))
        self.save_config("network")
        self.network = network
        self.policy: TD3ActorPolicy | None = None
        self._policy: TensorPolicy | None = None
        self.critic_updates = 0  # critic updates so far (the policy delay's clock; in the checkpoint)

    def build(self, action_spec, observation: TensorDict) -> None:
        """Build the actor (the collector's policy), the critics (``num_qvalue_nets`` copies of the network's
        critic) and the soft-updated targets of both for the env's per-sample ``action_spec``, after shaping the
        lazy layers on an example ``observation``.

        Raises:
            ValueError: an action spec that is not bounded continuous.
        """
        h = self.hparams
        if not (isinstance(action_spec, Bounded) and action_spec.domain == "continuous"):
            raise ValueError(f"TD3Module needs a bounded continuous (Bounded) action spec, got "
                             f"{type(action_spec).__name__}")
        low, high = action_spec.space.low.clone(), action_spec.space.high.clone()
        self.network.build(int(action_spec.shape[-1]))
        self.actor = ScaledActor(self.network.actor, low, high)
        self.policy = TD3ActorPolicy(self.actor, h.exploration_noise)
        with torch.no_grad():
            obs = observation.get(h.observation_key)
            self.network.critic(obs, self.actor(obs))
        self._policy = TensorPolicy(self.policy, [h.observation_key], ["action"])
        self.critics = Critics(self.network.critic, h.num_qvalue_nets)
        self.target_critics = TargetNetwork(self.critics, "soft", tau=h.tau)
        self.target_actor = TargetNetwork(self.actor, "soft", tau=h.tau)
        self.register_buffer("low", low)
        self.register_buffer("high", high)
        self.register_buffer("policy_noise", h.policy_noise * self.actor.action_scale)
        self.register_buffer("noise_clip", h.noise_clip * self.actor.action_scale)

    def replay_keys(self) -> list:
        """The loss's inputs: the observation now and next, the action, the reward and the done flags."""
        return self.transition_keys([self.hparams.observation_key])

    def loss(self, batch: TensorDict) -> dict[str, Tensor]:
        """:func:`modules.td3_loss.td3_critic_loss` of a sampled batch ``[N]``."""
        h = self.hparams
        return td3_critic_loss(self.target_actor, self.critics, self.target_critics, batch, h.gamma, self.low,
                               self.high, self.policy_noise, self.noise_clip, h.observation_key, h.loss_function)

    @property
    def collector_policy(self) -> TensorPolicy:
        """:class:`TD3ActorPolicy` on the observation, writing ``action``."""
        return self._policy

    def prepare(self, specs: EnvSpecs) -> None:
        """Build on the env's specs: its action spec and an example observation (lazy layers)."""
        if self.policy is None:
            self.build(specs.agent_action_spec, specs.example_observation)

    def check_env(self, specs: EnvSpecs) -> None:
        """TD3 takes bounded continuous actions (the tanh actor maps to the spec's low and high), one agent's in a
        multi-agent env; ``observation_key`` must be an entry of the env's observation.

        Raises:
            ValueError: the first mismatch, naming the config key and both sides.
        """
        module = class_path(self)
        require_action_kind(specs, ("continuous",), module)
        require_bounded(specs, module, "its tanh actor maps to the spec's low and high")
        require_keys(specs, "model.init_args.observation_key", [self.hparams.observation_key])

    # ------------------------------------------------------------------ update
    def training_step(self, batch: TensorDict, batch_idx: int) -> Tensor:
        """One optimiser step per sampled batch of ``batch`` ``[K, N]``, in order (the actor's loss and the target
        updates every ``policy_delay``-th); writes the items' |TD error| (max over the critics) into ``batch``
        under ``td_error`` ``[K, N, 1]`` (for prioritised replay)."""
        h, optimizer = self.hparams, self.optimizers()
        max_norm = math.inf if h.max_grad_norm is None else h.max_grad_norm
        critic_rows, actor_rows, errors = [], [], []
        for sample in batch.unbind(0):
            self.critic_updates += 1
            out = self.update_loss(sample)
            loss = out["loss_qvalue"]
            delayed = self.critic_updates % h.policy_delay == 0
            if delayed:
                loss_actor = td3_actor_loss(self.actor, self.critics, sample, h.observation_key)
                loss = loss + loss_actor
            grad_norm = self.optimizer_update(optimizer, loss, max_norm)
            if delayed:
                self.target_critics.step()
                self.target_actor.step()
                actor_rows.append(loss_actor.detach().reshape(1))
            critic_rows.append(torch.stack([out["loss_qvalue"].detach(), grad_norm]))
            errors.append(out["td_error"].unsqueeze(-1))
        batch.set("td_error", torch.stack(errors))
        self.record_updates(["train/loss_qvalue", "train/grad_norm"], critic_rows)
        if actor_rows:
            self.record_updates(["train/loss_actor"], actor_rows)
        return loss.detach()

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """The base state plus the count of critic updates (the policy delay's clock)."""
        super().on_save_checkpoint(checkpoint)
        checkpoint["rl_state"]["critic_updates"] = self.critic_updates

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        self.critic_updates = restored_number(checkpoint.get("rl_state", {}).get("critic_updates", 0),
                                              "rl_state.critic_updates", low=0)

    def configure_optimizers(self):
        h = self.hparams
        groups = [{"params": list(self.network.actor.parameters()), "lr": h.actor_lr},
                  {"params": list(self.critics.parameters()), "lr": h.critic_lr}]
        return torch.optim.Adam(groups, fused=True)
