"""Rollout actors on a Ray cluster (``data.collector.mode: ray``): TorchRL's ``RayCollector`` runs
``data.collector.workers`` remote collectors (Ray actors, each a TorchRL ``Collector`` over its own ``num_envs /
workers`` env rows, seeded like the local workers' rows), anywhere on the cluster. Collection goes in synchronous
rounds: before each round the learner's weights reach every actor (one copy in Ray's object store, loaded by each
actor's ``update_policy_weights_``), and the round's batch stacks one batch per actor, so on-policy PPO stays on-policy
and off-policy DQN / SAC fill their replay buffer from every actor.

An actor that dies (its process or its node) is restarted by Ray, up to ``data.collector.ray.max_restarts`` times (each
restart logged): the round it failed is collected again by all actors, the restarted one with its envs started
again from their seeds and the env calls made since the start (curriculum phases, opponents...) made again. Past
the limit the run stops with an error that names the actor and its node.

TorchRL's own ``RayWeightSyncScheme`` is not used: it sends over a torch.distributed (gloo) group that an actor's
restart breaks; and the actors get their policy's structure without its data (:func:`_shell_factory`), since Ray
could not restart an actor whose large constructor argument it had already released.

Needs the ``ray`` extra (``pip install -e .[ray]``).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from functools import partial

from tensordict import TensorDict, TensorDictBase
from torch import nn
from torchrl.collectors import Collector

from envs import EnvConfig
from envs.policy_state import recurrent_transforms
from envs.processes import reap_with_this_process
from pipelines.compat import ray_actor_state
from pipelines.data.collectors import VersionedPolicy, make_worker_env, watchdog
from pipelines.data.env_control import Call
from pipelines.data.options import RayOptions

log = logging.getLogger(__name__)

def _materialise(shell: nn.Module) -> nn.Module:
    return shell.to_empty(device="cpu")


def _shell_factory(policy: nn.Module):
    """A policy factory for the actors that carries the policy's structure without its data (``meta`` tensors):
    Ray keeps an actor's small constructor arguments inline, which a restart needs (a large one, put in the object
    store, was gone when Ray restarted the actor); the weights reach each actor before every round."""
    return partial(_materialise, copy.deepcopy(policy).to("meta"))


class ConsolidatedCollector(Collector):
    """TorchRL's ``Collector`` whose batches leave the actor consolidated (tensordict's ``consolidate`` with its
    metadata): Ray then pickles one buffer instead of one ``torch.save`` per entry, which took a hockey batch of 512
    frames from 5.0-5.2 to 2.6 ms through ``consolidate``, ``ray.put`` and ``ray.get``. (The learner's weights, a
    few large tensors, gained nothing measurable this way: 1.5-2.0 against 1.5-1.7 ms to put.)"""

    def next(self) -> TensorDictBase | None:
        batch = super().next()
        return None if batch is None else batch.consolidate(metadata=True)


@contextlib.contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """SIGTERM's and SIGINT's handlers as they were before the block (``ray.init`` sets its own, ``sys.exit``),
    where handlers can be set (the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in before.items():
            if handler is not None:
                signal.signal(signum, handler)


class RayWorkerCollector:
    """``workers`` Ray actors of ``num_envs / workers`` envs each, collecting ``frames_per_batch`` frames per round
    with the latest weights (TorchRL ``RayCollector`` in synchronous mode).

    Row ``b`` of actor ``w`` is seeded ``first_seed + w * num_envs / workers + b`` and the actor's torch RNG with its
    row 0's seed, as for local workers (:class:`pipelines.data.collectors.WorkerCollector`), so the actors play
    different episodes and a rerun the same ones. Every frame carries ``policy_version``, the learner's training
    steps when its weights were sent (:class:`~pipelines.data.collectors.VersionedPolicy`).

    Args:
        env_config: the env of every actor.
        env_models: the run's learned env models (``EnvConfig.new_models``), copied to every actor (new weights
            reach them through the env calls).
        num_envs: envs over all actors (a multiple of ``workers``).
        workers: Ray actors (>= 1).
        first_seed: seed of row 0 of actor 0.
        policy: the collecting policy (its weights are sent to the actors before every round).
        frames_per_batch: frames per round over all actors.
        options: the cluster address, CPUs per actor and restarts (:class:`RayOptions`).
        timeout_s: the longest a round (or a call on the actors) may take: past it the actors are killed for good
            and the run stops with an error naming the stuck ones (``data.collector.worker_timeout_s``).
        startup_calls: per actor, the calls its env makes right after it is built.
        later_calls: actor w -> the env calls made since the start, in order, made again on the actor after Ray
            restarted it (its constructor replays only the startup calls); None: none.
        **collector_options: further collector arguments (``init_random_frames``: over all actors).

    Yields:
        ``[num_envs, frames_per_batch / num_envs]`` batches (actor 0's rows first).

    Raises:
        RuntimeError: an actor died more than ``max_restarts`` times, or a round took longer than ``timeout_s``
            (the message names the actor and its node).
    """

    def __init__(self, env_config: EnvConfig, env_models: dict[str, nn.Module], num_envs: int, workers: int,
                 first_seed: int, policy: nn.Module, frames_per_batch: int, options: RayOptions,
                 timeout_s: float = 300.0, startup_calls: list[list[Call]] | None = None,
                 later_calls: Callable[[int], list[Call]] | None = None, **collector_options) -> None:
        import ray
        from torchrl.collectors.distributed import RayCollector

        per = num_envs // workers
        calls = startup_calls or [[] for _ in range(workers)]
        make = [partial(make_worker_env, env_config, env_models, per, first_seed + w * per, calls[w],
                        recurrent_transforms(policy)) for w in range(workers)]
        self.options = options
        self.policy = VersionedPolicy(policy)
        self._started = not ray.is_initialized()  # a Ray instance this run starts is stopped with it
        if self._started and options.address is None:  # its processes killed, too, if this one dies by SIGKILL
            reap_with_this_process()
        init = {"address": options.address, "include_dashboard": False, "configure_logging": False,
                "log_to_driver": False, "ignore_reinit_error": True}
        # no task retries: a round an actor fails is collected again from the start by all actors (__iter__)
        remote = {"num_cpus": options.num_cpus, "num_gpus": 0, "max_restarts": options.max_restarts,
                  "max_task_retries": 0}
        # total_frames: the learner stops the stream (RayCollector's default of -1, "no limit", ends it at once)
        # ray.init sets its own SIGTERM handler (sys.exit), which ended a stopped run without its checkpoint: the
        # run's handlers are put back once Ray is up
        with warnings.catch_warnings(), _signal_handlers_kept():
            # that TorchRL's own weight sync has no policy to send: this class sends them
            warnings.filterwarnings("ignore", message="The policy is not an nn.Module")
            self._collector = RayCollector(make, policy_factory=_shell_factory(self.policy),
                                           frames_per_batch=frames_per_batch, total_frames=sys.maxsize,
                                           num_collectors=workers,
                                           collector_class=ConsolidatedCollector, sync=True, weight_sync_schemes={},
                                           collector_kwargs={"device": "cpu", "trust_policy": True,
                                                             "track_traj_ids": False},
                                           remote_configs=remote, ray_init_config=init, **collector_options)
        self._ray = ray
        self._random_frames = int(collector_options.get("init_random_frames") or 0)
        self._restarts = [0] * workers
        self.timeout_s = timeout_s
        self._stall: str | None = None
        self.later_calls = later_calls or (lambda worker: [])

    # ------------------------------------------------------------------ actors
    def actor_states(self) -> list[dict]:
        """Per actor (in order): its Ray node id, process id, state (``ALIVE``, ``RESTARTING``, ``DEAD``...) and
        restarts so far, from the cluster's actor table (Ray's GCS; the public ``ray.util.state`` API needs the
        dashboard of ``ray[default]``)."""
        states = []
        for handle in self._collector.remote_collectors:
            entry = ray_actor_state(handle)
            states.append({"node_id": (entry.get("Address") or {}).get("NodeID"), "pid": entry.get("Pid"),
                           "state": entry.get("State"), "restarts": int(entry.get("NumRestarts") or 0)})
        return states

    def _after_restarts(self, states: list[dict]) -> None:
        """Log each actor's new restarts. A restarted actor (a new collector, its envs started again from their
        seeds) gets the env calls made since the start again (``later_calls``), and plays with the policy at once
        unless the run's random warm-up (``init_random_frames``) is not over."""
        remaining = max(self._random_frames - self._collector.collected_frames, 0) // len(states)
        for w, state in enumerate(states):
            if state["restarts"] > self._restarts[w]:
                self._restarts[w] = state["restarts"]
                log.warning("Ray actor %d (node %s) died and was restarted (%d of data.collector.ray.max_restarts=%d)",
                            w, state["node_id"], state["restarts"], self.options.max_restarts)
                actor = self._collector.remote_collectors[w]
                self._ray.get(actor.cascade_execute.remote("__setattr__", "init_random_frames", remaining))
                for method, args, kwargs in self.later_calls(w):  # e.g. a curriculum phase, an opponent, a model
                    self._ray.get(actor.cascade_execute.remote(f"env.base_env.{method}", *args, **kwargs))

    def _dead(self, error: Exception) -> RuntimeError:
        states = self.actor_states()
        dead = [f"{w} (node {s['node_id']}, {s['restarts']} restarts)" for w, s in enumerate(states)
                if s["state"] == "DEAD"] or ["?"]
        return RuntimeError(f"Ray actor {', '.join(dead)} died and data.collector.ray.max_restarts="
                            f"{self.options.max_restarts} restarts are used up: the run stops (its checkpoints are "
                            f"kept). {type(error).__name__}: {error}")

    def _stalled(self, what: str) -> None:
        """The watchdog fired: name the actors and kill them for good, so that the wait on them raises."""
        states = self.actor_states()
        named = ", ".join(f"{w} (node {s['node_id']}, pid {s['pid']})" for w, s in enumerate(states))
        self._stall = (f"Ray actors {named} gave no {what} within data.collector.worker_timeout_s={self.timeout_s:g} "
                       f"s: the run stops (its checkpoints are kept)")
        for actor in self._collector.remote_collectors:
            self._ray.kill(actor, no_restart=True)

    @contextlib.contextmanager
    def _watch(self, what: str) -> Iterator[None]:
        """A wait on the actors under the watchdog; a stall becomes one ``RuntimeError`` naming the actors."""
        try:
            with watchdog(self.timeout_s, self._stalled, what):
                yield
        except self._ray.exceptions.RayActorError as error:
            if self._stall is not None:
                raise RuntimeError(self._stall) from error
            raise

    # ------------------------------------------------------------------ use
    def map_fn(self, method: str, args: list[tuple], kwargs: list[dict]) -> list:
        """``method`` (a dotted path from each actor's collector, e.g. ``env.base_env.configure``) called in every
        actor with its own arguments, between rounds; returns the results."""
        try:
            with self._watch(f"answer to {method}"):
                return self._collector.map_fn(method, args, kwargs)
        except self._ray.exceptions.RayActorError as error:
            raise self._dead(error) from error

    def _send_weights(self) -> None:
        """The learner's weights (and policy version) to every actor, through Ray's object store, before its next
        batch: an actor runs its tasks in the order they were sent. (TorchRL's ``RayWeightSyncScheme`` sends over
        a torch.distributed group that an actor's restart breaks.)"""
        weights = self._ray.put(TensorDict.from_module(self.policy).data.cpu())  # one copy for all actors
        for actor in self._collector.remote_collectors:
            actor.update_policy_weights_.remote(policy_weights=weights)

    def _recover(self, error: Exception) -> None:
        """After an actor failed a round: wait while Ray restarts it; raise when an actor is dead for good (its
        ``max_restarts`` used up) or still not back after ``timeout_s``."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            states = self.actor_states()
            if any(s["state"] == "DEAD" for s in states):
                raise self._dead(error) from error
            if all(s["state"] == "ALIVE" for s in states):
                self._after_restarts(states)
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Ray actors {[s['state'] for s in states]} did not come back within "
                                   f"data.collector.worker_timeout_s={self.timeout_s:g} s after "
                                   f"{type(error).__name__}: {error}") from error
            time.sleep(0.2)

    def __iter__(self) -> Iterator[TensorDictBase]:
        iterator = None
        while True:
            if iterator is None:  # again after a failed round (its generator ended with the error); iterator(), not
                iterator = self._collector.iterator()  # iter(): that one shuts every actor down on an error
            try:
                with self._watch("batch"), warnings.catch_warnings():  # (that TorchRL's own weight sync was not
                    warnings.filterwarnings("ignore", message="RayCollector iteration started before weight")  # set up)
                    self._send_weights()
                    batch = next(iterator)
            except self._ray.exceptions.RayActorError as error:
                self._recover(error)  # the round is collected again by every actor, with the same weights
                iterator = None
                continue
            if self.options.max_restarts:  # (an actor may also have been restarted between rounds)
                self._after_restarts(self.actor_states())
            yield batch.reshape(-1, batch.shape[-1])  # [actors, envs per actor, T] -> [B, T]

    def trained(self) -> None:
        """The learner finished a training step on the last batch: the next round's weights carry the next version."""
        self.policy.bump()

    def shutdown(self) -> None:
        """Stop the actors, and the local Ray instance the run started (a cluster it joined stays up)."""
        self._collector.shutdown(shutdown_ray=False)
        if self._started and self.options.address is None:
            self._ray.shutdown()
