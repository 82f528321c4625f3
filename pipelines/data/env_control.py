"""Named calls on the training envs, wherever they step: curriculum settings, self-play opponents and their
weights, the weights of the env's learned models (the DVRP flexibility model).

Every call is made first on this process's copy of the env (so a bad setting raises here, with the env's
message). With rollout workers it is then made on every worker's env through the collector's ``map_fn``
(TorchRL runs it in each worker between batches, while the worker waits for its next one), with each
worker's share of a per-row argument; calls made before the workers start are handed to the workers' env
builders, so they apply before the first reset. A run with workers thus makes the same calls at the same
points as one with in-process envs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
from torch import nn
from torchrl.envs import EnvBase

from envs import has, unwrap
from envs.restored import RestoredStateError, restored_mapping
from modules.checks import check_loaded_weights
from modules.loading import weights_difference

Call = tuple[str, tuple, dict]  # (method path on the base env, args, kwargs)


def resolve(env: EnvBase, method: str):
    """The callable at ``method`` (a dotted path, e.g. ``flexibility.load_state_dict``) of the base env.

    Raises:
        ValueError: the env has no such method.
    """
    target = unwrap(env)
    for name in method.split("."):
        if not has(target, name):
            raise ValueError(f"env {type(unwrap(env)).__name__} has no method {method}: "
                             f"the call needs an env that has it")
        target = getattr(target, name)
    return target


def apply_calls(env: EnvBase, calls: list[Call]) -> None:
    """Make ``calls`` on ``env``'s base env, in order."""
    for method, args, kwargs in calls:
        resolve(env, method)(*args, **kwargs)


class Workers(Protocol):
    """What the control needs of a worker collector: TorchRL's ``map_fn`` over its workers."""

    def map_fn(self, method: str, args: list[tuple], kwargs: list[dict]) -> list: ...


class EnvControl:
    """Applies named calls to the training envs: this process's env and, with ``workers``, every worker's.

    Args:
        env: this process's training env (all ``num_envs`` rows).
        workers: worker processes stepping the rows (0: none), ``rows / workers`` rows each, in order.
    """

    def __init__(self, env: EnvBase, workers: int = 0) -> None:
        self.env = env
        self.workers = workers
        self.rows_per_worker = env.batch_size[0] // workers if workers else 0
        self._startup: list[list[Call]] = [[] for _ in range(workers)]
        self._later: list[list[Call]] | None = None  # calls sent to running workers, in order (where kept)
        self._collector: Workers | None = None

    def startup_calls(self) -> list[list[Call]]:
        """Per worker, the calls made before the workers started (for their env builders)."""
        return [list(calls) for calls in self._startup]

    def later_calls(self, worker: int) -> list[Call]:
        """The calls sent to worker ``worker`` while it ran, in order (kept only when connected with ``keep_calls``):
        what a restarted worker (built with the startup calls) needs again to reach the others' state."""
        return list(self._later[worker]) if self._later is not None else []

    def connect(self, collector: Workers, keep_calls: bool = False) -> None:
        """From now on, calls reach the workers through ``collector.map_fn``; with ``keep_calls`` they are also kept
        for :meth:`later_calls` (workers that may be restarted: Ray actors with ``max_restarts``), else not (the
        list would only grow)."""
        self._collector = collector
        self._later = [[] for _ in range(self.workers)] if keep_calls else None

    def disconnect(self) -> None:
        """The workers are gone (shut down): calls reach this process's env only until the next :meth:`connect`,
        and go to the next workers' builders."""
        self._collector = None

    def call(self, method: str, *args: Any, **kwargs: Any) -> None:
        """``base_env.<method>(*args, **kwargs)`` on every env.

        Raises:
            ValueError: the env has no such method, or rejects the call.
        """
        resolve(self.env, method)(*args, **kwargs)
        self._send(method, [(args, kwargs)] * self.workers)

    def call_rows(self, method: str, values: Sequence | torch.Tensor, **kwargs: Any) -> None:
        """``base_env.<method>(values, **kwargs)`` with one value per env row; each worker gets its rows' values.

        Raises:
            ValueError: ``values`` does not have one entry per row, or the env rejects the call.
        """
        rows = self.env.batch_size[0]
        if len(values) != rows:
            raise ValueError(f"{method}: got {len(values)} values for {rows} env rows")
        resolve(self.env, method)(values, **kwargs)
        per = self.rows_per_worker
        self._send(method, [((values[w * per:(w + 1) * per],), kwargs) for w in range(self.workers)])

    def _send(self, method: str, per_worker: list[tuple[tuple, dict]]) -> None:
        if not per_worker:
            return
        if self._collector is None:
            for calls, (args, kwargs) in zip(self._startup, per_worker, strict=True):
                calls.append((method, args, kwargs))
        else:
            self._collector.map_fn(f"env.base_env.{method}", [a for a, _ in per_worker], [k for _, k in per_worker])
            for calls, (args, kwargs) in zip(self._later or [], per_worker, strict=False):
                calls.append((method, args, kwargs))


class TrainingEnvCalls:
    """The calls on the training envs :class:`pipelines.data.base.EnvDataModule` has from here (a mixin before
    ``LightningDataModule``), named for the callbacks that make them: through its :class:`EnvControl` (``control``),
    so that rollout workers' envs get them too."""

    def env_has(self, *methods: str) -> bool:
        """Whether the training env's base env has all ``methods`` (e.g. ``set_opponent``)."""
        return all(has(unwrap(self.env), m) for m in methods)

    def configure_env(self, settings: dict) -> None:
        """Apply runtime ``settings`` (e.g. a curriculum phase's mode, opponent and reward weights) to the
        training envs through the base env's ``configure(**settings)``.

        Raises:
            ValueError: the env has no ``configure`` method, or rejects a setting.
        """
        self.control.call("configure", **settings)

    def set_opponents(self, kinds: list[str]) -> None:
        """Set who each training env row meets from its next episode on (the env's ``set_opponent``).

        Args:
            kinds: one opponent name per row (``num_envs``), e.g. ``weak`` or ``policy``.

        Raises:
            ValueError: the env has no opponents, or rejects a name.
        """
        self.control.call_rows("set_opponent", kinds)

    def set_opponent_policy(self, policy: nn.Module | None) -> None:
        """Set the module that plays the training envs' ``policy`` opponents (the env's
        ``set_opponent_policy``), with its current weights; with workers, call it again after changing them.

        Raises:
            ValueError: the env has no opponents.
        """
        self.control.call("set_opponent_policy", policy)

    def restore_env_model(self, name: str, state_dict: object) -> None:
        """:meth:`load_env_model` of weights read from a checkpoint, checked first: the model's keys and shapes,
        finite.

        Raises:
            RestoredStateError: the env has no learned model of that name; weights of other keys or shapes, or not
                finite (names the model and the weight).
        """
        model = self.env_models.get(name)
        if model is None:
            raise RestoredStateError(f"env_models.{name}: this config's env has no learned model {name!r} (its "
                                     f"models: {sorted(self.env_models) or 'none'}; was it trained with another env "
                                     f"config?)")
        if model is not None:
            weights = restored_mapping(state_dict, f"env_models.{name}")
            difference = weights_difference({k: v.shape for k, v in model.state_dict().items()}, weights)
            if difference is not None:
                raise RestoredStateError(f"env_models.{name}: {difference}")
            check_loaded_weights(weights, model)
        self.load_env_model(name, state_dict)

    def load_env_model(self, name: str, state_dict: dict) -> None:
        """Load new weights into the run's learned env model ``name`` (``env_models[name]``, e.g. ``flexibility``):
        every env of the run (training and evaluation, and the workers' envs) uses them from its next episode on.

        Raises:
            ValueError: the env has no learned model of that name (the message names the config key to set).
        """
        if name not in self.env_models:
            raise ValueError(f"the env has no learned model {name!r} (its models: {sorted(self.env_models) or 'none'}; "
                             f"e.g. set data.init_args.env.init_args.flexibility)")
        if self.control is None:  # before setup: the run's model, which every env of this process is handed
            self.env_models[name].load_state_dict(state_dict)
        else:  # the training env holds the same model; workers hold copies (the env's attribute of that name)
            self.control.call(f"{name}.load_state_dict", state_dict)
