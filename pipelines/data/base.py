"""The bases of the data modules: :class:`RLDataModule` (env config, budget, seeds, device, the stream of training
batches) and :class:`EnvDataModule` (the env, its collector, calls on the training envs and their resume state; see
:mod:`pipelines.data`)."""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator

import lightning as L
import torch
from tensordict import TensorDict
from torchrl.envs import EnvBase

from envs import EnvConfig, EnvSpecs, has, make_env, unwrap
from envs.policy_state import carried_keys, checked_carry
from envs.restored import RestoredStateError
from pipelines.compat import collector_carry, set_collector_carry
from pipelines.data.collectors import WorkerCollector, local_collector
from pipelines.data.env_control import EnvControl, TrainingEnvCalls, resolve
from pipelines.data.options import CollectorOptions, require
from pipelines.data.ray_collector import RayWorkerCollector
from pipelines.data.stream import FrameStream, StopRequested
from pipelines.env_models import env_models


class RLDataModule(FrameStream, L.LightningDataModule):
    """The base of every data module: the env's config, the run's frame budget, seeds and device, and the stream
    of training batches (:class:`~pipelines.data.stream.FrameStream`). Env-stepping pipelines build on
    :class:`EnvDataModule`; :class:`pipelines.episodes.EpisodeDataModule` (whole plans, no collector) on this.

    Args:
        env: the environment's config (e.g. ``envs.dvrp.DVRPConfig``). The learned models its envs take are
            built (``new_models``) and read from the checkpoint files it names (``model_checkpoints``) here, before
            any work, as ``env_models``: ``{name: model}``, handed to every env of the run.
        total_frames: the run's budget in frames, summed over ranks.
        seed: seed of env row 0 on rank 0; null: the run's seed (``pipelines.fit`` sets it from ``seed_everything``;
            0 when built in Python).
        device: device the env (and collector) run on; null (the default) follows the trainer: its root device
            (``cuda:<k>`` on rank k of ``--trainer.accelerator=gpu``, else ``cpu``).

    Raises:
        ValueError: ``total_frames`` < 1.
    """

    def __init__(self, env: EnvConfig, total_frames: int, seed: int | None, device: str | None) -> None:
        super().__init__()
        require(total_frames >= 1, f"data.total_frames must be >= 1, got {total_frames}")
        self.env_models = env_models(env)
        # the ones trained during the run (their weights are in this module's checkpoint state), not read from files
        self.trained_env_models = tuple(n for n in self.env_models if n not in env.model_checkpoints())
        self.env_config = env
        self.total_frames = int(total_frames)  # plain ints: jsonargparse types would reach the checkpoint
        self.seed = 0 if seed is None else int(seed)
        self.device = device
        self.stop_request: str | None = None  # the signal that asked training to stop (request_stop)
        self.building = False  # True in `interruptible` stretches: a stop signal ends the run at once
        self.expected_world_size = 1  # ranks, before the trainer is attached (check_budget)

    @property
    def rank(self) -> int:
        return self.trainer.global_rank if self.trainer is not None else 0

    def resolve_device(self) -> None:
        """``device: null`` takes the trainer's root device (CPU outside a trainer)."""
        if self.device is None:
            self.device = str(self.trainer.strategy.root_device) if self.trainer is not None else "cpu"

    def check_device(self, device: str | torch.device) -> None:
        """Refuse options the data's device cannot take (``pipelines.fit`` calls this before any write); none here."""

    @property
    def num_agents(self) -> int | None:
        """R of a multi-agent env (``env.num_agents``), else None."""
        return self.env_config.num_agents

    def env_specs(self) -> EnvSpecs | None:
        """The training env's specs, for the module's networks (after :meth:`setup`); None without step-wise envs."""
        return None

    def shutdown_collector(self) -> None:
        """Stop the collector and its worker processes, if any (``pipelines.fit`` calls this however the run
        ended); none here."""


class EnvDataModule(TrainingEnvCalls, RLDataModule):
    """Training envs stepped by a TorchRL collector (the base of the on- and off-policy pipelines): the env, the
    collector, the calls callbacks make on the envs (:class:`~pipelines.data.env_control.TrainingEnvCalls`) and
    the envs' resume state.

    Args:
        env: the environment's config (see :class:`RLDataModule`).
        collector: how the envs are stepped: ``num_envs``, ``frames_per_batch``, rollout ``workers`` and their
            ``mode`` (:class:`~pipelines.data.options.CollectorOptions`).
        total_frames: the run's budget in frames, summed over ranks.
        seed: seed of env row 0 on rank 0 (see :class:`RLDataModule`).
        device: device the env and collector run on (see :class:`RLDataModule`).

    Raises:
        ValueError: ``total_frames`` < 1; the collector options' own checks
            (:class:`~pipelines.data.options.CollectorOptions`) when they are built; at set-up ``cudagraph_policy``
            on a device other than CUDA.
    """

    def __init__(self, env: EnvConfig, collector: CollectorOptions, total_frames: int, seed: int | None,
                 device: str | None) -> None:
        super().__init__(env=env, total_frames=total_frames, seed=seed, device=device)
        self.collector_options = collector
        self.env: EnvBase | None = None
        self.control: EnvControl | None = None
        self._collector: Iterator | None = None
        self._restored_carry: dict | None = None  # a checkpoint's recurrent policy states (state_dict), until used
        self.resumed_env = False  # a checkpoint's env state was applied: the training envs go on with its episodes

    @property
    def num_envs(self) -> int:
        """B, the envs stepped as one batch on each rank (``collector.num_envs``)."""
        return self.collector_options.num_envs

    @property
    def frames_per_batch(self) -> int:
        """Frames per collected batch on each rank (``collector.frames_per_batch``)."""
        return self.collector_options.frames_per_batch

    @property
    def workers(self) -> int:
        """Rollout worker processes or actors (``collector.workers``; 0: envs in this process)."""
        return self.collector_options.workers

    # ------------------------------------------------------------------ envs
    @property
    def first_seed(self) -> int:
        """Seed of this rank's env row 0."""
        return self.seed + self.rank * self.num_envs

    def check_device(self, device: str | torch.device) -> None:
        """Refuse options that the device the env will run on cannot take (``pipelines.fit`` calls this before
        anything is written; :meth:`setup` again).

        Raises:
            ValueError: ``cudagraph_policy`` on a device other than CUDA.
        """
        require(not self.collector_options.cudagraph_policy or torch.device(device).type == "cuda",
              f"data.collector.cudagraph_policy=true needs a CUDA device (--trainer.accelerator=gpu), got {device}")

    def setup(self, stage: str) -> None:
        self.resolve_device()
        self.check_device(self.device)
        if self.env is None:
            with self.interruptible():
                self.env = make_env(self.env_config, self.num_envs, self.first_seed, self.device, self.env_models)
            self.control = EnvControl(self.env, self.workers)

    def env_specs(self) -> EnvSpecs:
        """The training env's specs, for the module's networks (after :meth:`setup`)."""
        return EnvSpecs.of(self.env, self.num_agents)

    def make_eval_env(self, num_envs: int, seed: int, settings: dict | None = None) -> EnvBase:
        """A separate env for evaluation (same config, its own seeds), with runtime ``settings`` applied
        through the env's ``configure`` (e.g. an opponent).

        Raises:
            ValueError: ``settings`` for an env without ``configure``, or settings it rejects.
        """
        env = make_env(self.env_config, num_envs, seed, self.device, self.env_models)
        if settings:
            resolve(env, "configure")(**settings)
        return env

    # ------------------------------------------------------------------ collector
    def collector(self) -> Iterator[TensorDict]:
        """The collector (built on first use, so a restored checkpoint's env state is in place)."""
        if self._collector is None:
            with self.interruptible():
                self._build_collector()
        return self._collector

    def _build_collector(self) -> None:
        """Build the collector: in this process, on rollout workers or on Ray actors (see :meth:`collector`)."""
        policy, options = self.trainer.lightning_module.collector_policy, self.collector_options
        if options.ray_options is not None:
            self._collector = RayWorkerCollector(self.env_config, self.env_models, self.num_envs, self.workers,
                                                 self.first_seed, policy, self.frames_per_batch,
                                                 options.ray_options, options.worker_timeout_s,
                                                 self.control.startup_calls(),
                                                 self.control.later_calls, **self._collector_options())
            self.control.connect(self._collector, keep_calls=options.ray_options.max_restarts > 0)
        elif self.workers:
            self._collector = WorkerCollector(self.env_config, self.env_models, self.num_envs, self.workers,
                                              self.first_seed, policy, self.frames_per_batch,
                                              options.worker_timeout_s, self.control.startup_calls(),
                                              asynchronous=options.mode == "async",
                                              **self._collector_options())
            self.control.connect(self._collector)
        else:
            self._collector = local_collector(self.env, policy, self.frames_per_batch,
                                              **options.policy_options, **self._collector_options())
            if self._restored_carry:  # a recurrent policy's states where the checkpointed run left them
                live = collector_carry(self._collector, carried_keys(policy))
                set_collector_carry(self._collector, checked_carry(self._restored_carry, live))
                self._restored_carry = None

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """A stretch where a stop signal ends the run at once (``building``: the envs or the collector being built,
        or the process's first batch collected, which take minutes for a million gymnasium envs and hold nothing
        to save); elsewhere it waits for the next step boundary (:func:`pipelines.stop_signals.on_stop_signal`).

        Raises:
            StopRequested: a stop signal came before or during the stretch (also where the code it interrupted
                failed on its way out: TorchRL's worker start raised a ``RuntimeError`` of its own).
        """
        if self.stop_request is not None:
            raise StopRequested(self.stop_request)
        self.building = True
        try:
            yield
        except BaseException as err:
            if self.stop_request is None:
                raise
            traceback.clear_frames(err.__traceback__)  # (its half-built objects go now, not at the interpreter's exit)
        finally:
            self.building = False
        if self.stop_request is not None:
            raise StopRequested(self.stop_request)

    def _collector_options(self) -> dict:
        """Extra collector arguments of a pipeline."""
        return {}

    def shutdown_collector(self) -> None:
        """Stop the collector and its worker processes, if any."""
        if self._collector is not None:
            collector, self._collector = self._collector, None
            self.control.disconnect()
            collector.shutdown()

    def teardown(self, stage: str) -> None:
        self.shutdown_collector()

    def on_exception(self, exception: BaseException) -> None:
        """A fault or a signal in training: stop the workers at once (Lightning's teardown does not call
        :meth:`teardown` then, and a worker left waiting would keep the process alive)."""
        self.shutdown_collector()

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict:
        """The env's resume state (in-process envs only; the env decides what it holds: the hockey env and gymnasium's
        classic control continue their episodes in progress, the other native envs restart them) with a
        recurrent policy's carried states (``policy_carry``), and the weights of the env models trained during the
        run (``trained_env_models``)."""
        state = {}
        base = unwrap(self.env)
        if has(base, "resume_state") and not self.workers:  # with workers the stepped envs live there
            state["env_rng"] = base.resume_state()
            keys = carried_keys(self.trainer.lightning_module.collector_policy) if self.trainer is not None else []
            carry = collector_carry(self._collector, keys) if keys and self._collector is not None else None
            if carry:  # the recurrent states and is_init of the step the envs go on from
                state["policy_carry"] = carry
        if self.trained_env_models:
            state["env_models"] = {name: _cpu_copy(self.env_models[name].state_dict())
                                   for name in self.trained_env_models}
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore :meth:`state_dict`, each part checked against this run's (:mod:`envs.restored`).

        Raises:
            RestoredStateError: env model weights of other shapes or not finite (:meth:`restore_env_model`), an env
                state that is not this env's (the env's ``load_resume_state`` names the entry)."""
        for name, weights in trained_env_model_states(state_dict, self.trained_env_models).items():
            self.restore_env_model(name, weights)
        base = unwrap(self.env)
        if "env_rng" in state_dict and has(base, "load_resume_state"):
            # rank 0's state, this rank's rows; a recurrent policy's carried states (rank 0's) where its episodes go on
            applied = base.load_resume_state(state_dict["env_rng"], keep_row_seeds=True)
            self.resumed_env = bool(applied)
            if applied and (self.trainer is None or self.trainer.global_rank == 0):
                self._restored_carry = state_dict.get("policy_carry")


def _cpu_copy(weights: dict) -> dict:
    return {k: v.detach().cpu().clone() for k, v in weights.items()}


def trained_env_model_states(state: dict, names: tuple[str, ...]) -> dict[str, dict]:
    """The weights of the env models trained during a run, ``{name: state_dict}``, from a data module's checkpoint
    ``state``. A checkpoint written before the models were kept by name (one model, the DVRP flexibility model, under
    ``embedding_model``) gives its weights to the one trained model of ``names``.

    Raises:
        RestoredStateError: an old checkpoint's model where the config has not exactly one trained env model.
    """
    if "embedding_model" not in state:
        return dict(state.get("env_models") or {})
    if len(names) != 1:
        raise RestoredStateError(f"the checkpoint has a learned env model (embedding_model) but this config's env "
                                 f"trains {list(names) or 'none'} (was it trained with another env config?)")
    return {names[0]: state["embedding_model"]}
