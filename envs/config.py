"""Base class of env configurations: one typed object per problem, from which ``make_env`` builds envs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping

import torch
from torch import Tensor, nn
from torchrl.envs import EnvBase

from envs.episodes import UniformRandomPolicy


def require(ok: bool, key: str, value: object, allowed: str) -> None:
    """A config check: unless ``ok``, raise ``ValueError("env.<key>=<value> is not allowed: <allowed>")``.

    Raises:
        ValueError: ``ok`` is false (the message names the key, the value and what is allowed).
    """
    if not ok:
        raise ValueError(f"env.{key}={value!r} is not allowed: {allowed}")


class EnvConfig(ABC):
    """A problem's parameters. Subclasses are dataclasses (``envs.vrptw.VRPTWConfig`` a plain class) whose fields are
    the config keys (checked when the config is made, so a bad value stops before any work), and build the env in
    :meth:`make`.

    A config holds parameters only. The learned models an env needs (DVRP's flexibility model, trained beside the
    policy; its neural oracle's routing policy, read from a checkpoint) are built or read by the pipeline that builds
    the run (:meth:`new_models`, :meth:`model_checkpoints`) and handed to :meth:`make`, so every env of a run, in
    this process or a worker's, uses the run's one set of weights.

    Attributes:
        num_agents: R for a multi-agent env, whose per-agent entries (observation, action, reward,
            action mask, ...) carry an agent dim of size R right after the batch dims, while the done
            flags (``[*B, 1]``) are shared by the agents; None for a single-agent env.
        evaluation_settings: ``{name: runtime settings}`` that ``pipelines.evaluate`` plays one table row
            per policy each (through the env's ``configure``, e.g. one opponent each); empty: one row as built.
        outcome_keys: ``info`` entries that are 0/1 episode outcomes; ``pipelines.evaluate`` reports
            their means as ``<key>_rate`` (e.g. ``won_rate``).
        stochastic_evaluation: evaluations (``callbacks.PolicyEvaluation``, ``pipelines.evaluate``, videos) sample
            the policy's actions instead of playing its mode (the convention for Atari games: RL Zoo evaluates them
            so, as a greedy policy can repeat one move for ever).
    """

    num_agents: int | None = None
    evaluation_settings: dict[str, dict] = {}
    outcome_keys: tuple[str, ...] = ()
    stochastic_evaluation: bool = False

    def new_models(self) -> dict[str, nn.Module]:
        """The learned models the env's observations depend on that a run trains beside its policy, freshly built
        from the config's parameters: ``{name: model}`` (DVRP: ``flexibility``, retrained by
        ``callbacks.FlexibilityUpdate``). The pipeline builds them once per run and hands them to :meth:`make`; the
        env holds each as its attribute ``name``, and the data module keeps their weights in its checkpoint state.
        Default: none.

        Raises:
            ValueError: a model that does not fit the env (the message names the key).
        """
        return {}

    def model_checkpoints(self) -> dict[str, str]:
        """Learned models this env needs from checkpoint files, ``{name: path}``. The pipeline that builds
        the run reads each file (envs never load checkpoints), checks it with :meth:`check_model` and hands it
        to :meth:`make` with the others. Default: none."""
        return {}

    def check_model(self, name: str, model: nn.Module, trained_for: dict) -> None:
        """Check the model ``name`` of :meth:`model_checkpoints` against its checkpoint's record of what it was
        trained for (e.g. ``num_customers``).

        Raises:
            ValueError: this env needs no model of that name (or, in a subclass, one trained for another problem).
        """
        raise ValueError(f"{type(self).__name__} takes no learned model {name!r}")

    def baseline_policies(self) -> dict[str, Callable[[EnvBase, int], Callable]]:
        """Reference policies ``pipelines.evaluate`` plays beside a trained one, on the same episodes:
        ``{name: make(env, seed)}`` (``env`` as built by ``make_env``; the policy reads an observation
        TensorDict ``[B]`` and writes ``action``). Default: ``random``, uniform over the allowed actions."""
        return {"random": lambda env, seed: UniformRandomPolicy(env.action_spec_unbatched)}

    def reference_cost(self, episode: dict, seconds: float) -> float | None:
        """The cost of an exported episode's final plan re-solved by a reference solver in ``seconds`` (the
        env's ``export_episodes`` format), or None when it finds none. Only envs with plans have one.

        Raises:
            ValueError: this env has no reference solver.
        """
        raise ValueError(f"{type(self).__name__} has no reference solver (re-solved plans are a routing env's)")

    def hindsight(self, days: list[dict], seconds: float, workers: int = 1) -> dict[str, Tensor] | None:
        """The hindsight oracle's results on whole episodes known in advance (the env's ``export_days`` format):
        ``{"episode_return": [E], <info key>: [E]}`` like a played policy's, solved in ``seconds`` per episode on
        ``workers`` processes; None for an env without one (default). ``pipelines.evaluate`` adds it as the
        ``hindsight`` row and every policy's gap to it."""
        return None

    @abstractmethod
    def make(self, num_envs: int, seed: int, device: torch.device | str = "cpu",
             models: Mapping[str, nn.Module] | None = None) -> EnvBase:
        """Build the env with ``batch_size=[num_envs]``; row ``b`` is seeded ``seed + b``. ``models``: the run's
        learned models, ``{name: model}`` of :meth:`new_models` and :meth:`model_checkpoints` (shared, not copied).

        Raises:
            ValueError: a model the env needs is missing from ``models``, or one it does not take is there.
        """

    def check_models(self, models: Mapping[str, nn.Module] | None) -> dict[str, nn.Module]:
        """``models`` as a dict, checked against the names this config needs (:meth:`model_names`); every
        :meth:`make` calls it.

        Raises:
            ValueError: a missing or an unexpected name (the message names both sets).
        """
        models = dict(models or {})
        needed = set(self.model_names())
        if set(models) != needed:
            raise ValueError(f"{type(self).__name__}.make needs the run's learned models {sorted(needed)} "
                             f"(built by new_models() and read by model_checkpoints(): "
                             f"pipelines.env_models.env_models), got {sorted(models)}")
        return models

    def model_names(self) -> tuple[str, ...]:
        """The names of the learned models :meth:`make` takes (those of :meth:`new_models` and
        :meth:`model_checkpoints`), without building or reading any. Default: none."""
        return ()
