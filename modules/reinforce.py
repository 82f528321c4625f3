"""REINFORCE with a greedy-rollout baseline for construction policies (Kool, van Hoof & Welling 2019,
"Attention, Learn to Solve Routing Problems!", ICLR, Algorithm 1).

Each training step samples one plan per instance with the policy and one greedy plan with a frozen
baseline copy; the loss is ``mean((cost - baseline_cost) * log p(plan))``. Every
``every_n_frames`` frames both greedy policies are compared on a fixed validation set, and the
baseline is replaced when the policy is better with significance ``baseline_alpha`` (one-sided paired
t-test; with hundreds of instances the t distribution is replaced by the normal one).
"""

from __future__ import annotations

import copy
import math

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import Tensor
from torchrl.envs.utils import ExplorationType, exploration_type

from envs.restored import restored_mapping, restored_number
from envs.vrptw.env import observed_construction
from modules.base import RLModule
from modules.checks import LEARNING_RATE, check_hparams
from modules.routing import Rollout, RoutingPolicy
from modules.schedule import FrameSchedule


def plan_objective(rollout: Rollout, unserved_penalty: float) -> Tensor:
    """Training cost ``[R]`` (km): plan length plus ``unserved_penalty`` per customer left at a dead end."""
    return rollout.length.float() + unserved_penalty * rollout.unserved.float()


def paired_improvement_p_value(candidate: Tensor, baseline: Tensor) -> float:
    """One-sided p-value of "candidate costs less than baseline" from paired costs ``[R]``
    (normal approximation of the paired t-test; R is in the hundreds here)."""
    diff = (candidate - baseline).double()
    se = diff.std().clamp_min(1e-12) / diff.numel() ** 0.5
    return float(torch.special.ndtr(diff.mean() / se))


class StepwiseRouting(TensorDictModuleBase):
    """A :class:`~modules.routing.RoutingPolicy` acting one node per step on :class:`envs.vrptw.VRPTWEnv`
    observations ``[B]`` (``pipelines.evaluate``, ``module.torchrl_policy()``): the argmax of its masked pointer
    logits (a sample of them under ``ExplorationType.RANDOM``), the node it would choose at that point of
    :meth:`RoutingPolicy.rollout`.
    It encodes the instance again at every step (the training rollout encodes it once): the same decisions, for
    evaluation only. Reads the env's observation entries (``in_keys``), writes ``action`` int64 ``[B]``; it cannot
    be exported (``pipelines.export``: no plain module of fixed inputs under it)."""

    in_keys = ["nodes", "present", "instance", "position", "vehicle", "visited", "action_mask"]
    out_keys = ["action"]

    def __init__(self, policy: RoutingPolicy) -> None:
        super().__init__()
        self.policy = policy

    @torch.no_grad()
    def forward(self, observation: TensorDictBase) -> TensorDictBase:
        problem, state = observed_construction(observation)
        logits = self.policy.logits(self.policy.encode(problem), problem, state)
        if exploration_type() == ExplorationType.RANDOM:
            action = torch.multinomial(torch.softmax(logits, -1), 1).squeeze(-1)
        else:
            action = logits.argmax(-1)
        return observation.set("action", action)


class REINFORCEModule(RLModule):
    """Trains a :class:`~modules.routing.RoutingPolicy` on batches of problems (``pipelines.episodes``).

    Frames are construction steps (one node chosen for one instance) of the sampled plans, summed over
    the batch and ranks. Metrics (x = frames): ``train/loss``, ``train/grad_norm``, ``train/advantage``,
    ``rollout/cost_km`` (sampled objective), ``rollout/route_km`` (length of the feasible sampled
    plans), ``rollout/feasible`` (share), ``rollout/baseline_cost_km``; at each evaluation
    ``eval/cost_km`` (greedy objective on the validation set), ``eval/route_km`` (mean length of its
    feasible plans), ``eval/feasible``, ``eval/baseline_cost_km``, ``eval/p_value`` and
    ``schedule/baseline_updates``.

    Args:
        policy: the routing network.
        lr: Adam learning rate.
        max_grad_norm: global gradient-norm clip.
        every_n_frames: frames between validation / baseline tests.
        baseline_alpha: significance level of the baseline replacement test.
        eval_batch_size: instances per greedy call during evaluation.
    """

    RENAMED_HPARAMS = {"eval_interval_frames": "every_n_frames"}  # older checkpoints load (modules.loading)

    def __init__(self, policy: RoutingPolicy, lr: float = 1e-3, max_grad_norm: float = 1.0,
                 every_n_frames: int = 200_000, baseline_alpha: float = 0.05,
                 eval_batch_size: int = 1024) -> None:
        super().__init__()
        check_hparams(("lr", lr, 0 < lr <= 1, LEARNING_RATE),
                      ("max_grad_norm", max_grad_norm, 0 < max_grad_norm < math.inf, "> 0 and finite"),
                      ("every_n_frames", every_n_frames, every_n_frames >= 1, ">= 1"),
                      ("baseline_alpha", baseline_alpha, 0 < baseline_alpha < 1, "in (0, 1)"),
                      ("eval_batch_size", eval_batch_size, eval_batch_size >= 1, ">= 1"))
        self.save_config("policy")
        self.policy = policy
        self.baseline = copy.deepcopy(policy).requires_grad_(False)
        self.evaluation_schedule = FrameSchedule(every_n_frames)
        self.baseline_updates = 0

    @property
    def collector_policy(self) -> StepwiseRouting:
        """The routing policy acting step by step on the VRPTW env (:class:`StepwiseRouting`; training builds
        whole plans in ``training_step`` instead, from ``pipelines.episodes``)."""
        return StepwiseRouting(self.policy)

    def _penalty(self) -> float:
        return float(self.trainer.datamodule.env_config.unserved_penalty)

    # ------------------------------------------------------------------ update
    def chart_groups(self) -> dict[str, list[str]]:
        """The greedy baseline's cost beside the sampled plans' (:mod:`pipelines.tensorboard_layout`)."""
        return {"plan cost (km)": ["rollout/cost_km", "rollout/baseline_cost_km"]}

    def training_step(self, batch: TensorDict, batch_idx: int) -> Tensor:
        optimizer = self.optimizers()
        penalty = self._penalty()
        sampled = self.policy.rollout(batch, "sample")
        with torch.no_grad():
            greedy = self.baseline.rollout(batch, "greedy")
        cost, base = plan_objective(sampled, penalty), plan_objective(greedy, penalty)
        advantage = cost - base
        loss = (advantage * sampled.log_prob).mean()
        optimizer.zero_grad()
        self.manual_backward(loss)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.hparams.max_grad_norm)
        optimizer.step()
        self.collected_frames += int(sampled.steps.sum()) * self._world_size()
        feasible = sampled.feasible
        self.record("train/loss", loss.detach())
        self.record("train/grad_norm", grad_norm)
        self.record("train/advantage", advantage.mean())
        self.record("rollout/cost_km", cost.mean())
        self.record("rollout/baseline_cost_km", base.mean())
        self.record("rollout/feasible", feasible.float().mean())
        if bool(feasible.any()):
            self.record("rollout/route_km", sampled.length[feasible].float().mean())
        if self.evaluation_schedule.due(self.collected_frames):
            self.evaluate()
        self.flush_metrics()
        return loss.detach()

    # ------------------------------------------------------------------ evaluation / baseline
    @torch.no_grad()
    def greedy_costs(self, policy: RoutingPolicy, problems: TensorDict) -> tuple[Tensor, Tensor, Tensor]:
        """Greedy objective, length (km) and feasibility ``[R]`` of ``policy`` on ``problems``, in chunks."""
        outs = [policy.rollout(chunk, "greedy") for chunk in problems.split(self.hparams.eval_batch_size)]
        penalty = self._penalty()
        return (torch.cat([plan_objective(o, penalty) for o in outs]), torch.cat([o.length for o in outs]).float(),
                torch.cat([o.feasible for o in outs]))

    def evaluate(self) -> None:
        """Greedy validation of policy and baseline; replace the baseline when significantly worse."""
        problems = self.trainer.datamodule.validation_problems()
        cost, length, feasible = self.greedy_costs(self.policy, problems)
        base, _, _ = self.greedy_costs(self.baseline, problems)
        p_value = paired_improvement_p_value(cost, base)
        if cost.mean() < base.mean() and p_value < self.hparams.baseline_alpha:
            self.baseline.load_state_dict(self.policy.state_dict())
            self.baseline_updates += 1
        self.record("eval/cost_km", cost.mean())
        self.record("eval/feasible", feasible.float().mean())
        if bool(feasible.any()):
            self.record("eval/route_km", length[feasible].mean())
        self.record("eval/baseline_cost_km", base.mean())
        self.record("eval/p_value", p_value)
        self.record("schedule/baseline_updates", float(self.baseline_updates))

    def configure_optimizers(self):
        return torch.optim.Adam(self.policy.parameters(), lr=self.hparams.lr)

    # ------------------------------------------------------------------ checkpoint
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Also store the evaluation schedule and what :func:`pipelines.env_models.load_exported_model`
        needs: the network's constructor arguments and the instance size (N, M) it was trained for."""
        super().on_save_checkpoint(checkpoint)
        checkpoint["reinforce_state"] = {"next_eval_frames": self.evaluation_schedule.next_frames,
                                         "baseline_updates": self.baseline_updates}
        env = self.trainer.datamodule.env_config if self._trainer is not None else None
        checkpoint["routing_policy"] = {
            "class_path": f"{type(self.policy).__module__}.{type(self.policy).__qualname__}",
            "config": dict(self.policy.config),
            "num_customers": None if env is None else env.num_customers,
            "num_vehicles": None if env is None else env.num_vehicles,
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        state = restored_mapping(checkpoint.get("reinforce_state", {}), "reinforce_state")
        self.evaluation_schedule.next_frames = restored_number(
            state.get("next_eval_frames", self.evaluation_schedule.next_frames), "reinforce_state.next_eval_frames",
            low=0)
        self.baseline_updates = restored_number(state.get("baseline_updates", self.baseline_updates),
                                                "reinforce_state.baseline_updates", low=0)
