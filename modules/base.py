"""What every RL LightningModule needs, and nothing more: frame counting, finished-episode
statistics, metrics written against collected frames (reduced over DDP ranks), and the extra training
state (frame counter, RNG streams) in the checkpoint."""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from collections import defaultdict

import lightning as L
import torch
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import SingleDeviceStrategy
from lightning.pytorch.utilities.model_helpers import is_overridden
from tensordict import NestedKey, TensorDict
from tensordict.nn import TensorDictModuleBase
from torch import Tensor, nn
from torch.utils._pytree import tree_map
from torchrl.envs import Transform
from torchrl.envs.utils import ExplorationType

from envs import EnvSpecs
from envs.episodes import episode_results
from modules.loading import CheckpointLoading
from modules.policy import Action, FixedExplorationPolicy, Observation, exportable, policy_input

_DONE_KEYS = ("done", "terminated", "truncated")

log = logging.getLogger(__name__)

LEARNING_RATE = "a learning rate in (0, 1]"
DISCOUNT = "in [0, 1]"
COMPILE_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # torch.compile modes that replay CUDA graphs on a GPU


def check_hparams(*rules: tuple[str, object, bool, str], section: str = "model") -> None:
    """Hyper-parameter checks at construction, before any work: each rule is ``(key, value, ok, allowed)``. A
    value is out of range unless ``ok`` (write ranges as chained comparisons such as ``0 < lr <= 1``, which are
    false for nan and for an infinity outside them).

    Args:
        section: the config section the keys belong to (``model``, or a callback's class name).

    Raises:
        ValueError: ``<section>.<key>=<value> is not allowed: <allowed>`` for the first rule that fails.
    """
    for key, value, ok, allowed in rules:
        if not ok:
            raise ValueError(f"{section}.{key}={value!r} is not allowed: {allowed}")


def nonfinite_weights(module: torch.nn.Module) -> list[str]:
    """The names of ``module``'s floating-point parameters and buffers that hold a nan or an infinity (one
    reduction per tensor, one read-back)."""
    tensors = [(k, v) for k, v in module.state_dict().items() if isinstance(v, Tensor) and v.is_floating_point()]
    if not tensors:
        return []
    finite = torch.stack([torch.isfinite(v).all() for _, v in tensors]).tolist()
    return [k for (k, _), ok in zip(tensors, finite) if not ok]


def check_finite(batch: TensorDict) -> None:
    """Stop on a collected batch whose floating-point entries (observations, rewards) are not all finite: one
    reduction per entry and one read-back per batch.

    Raises:
        RuntimeError: names the first entry with a nan or an infinity (the run stops; its checkpoints are kept).
    """
    keys = [k for k, v in batch.items(True, True) if isinstance(v, Tensor) and v.is_floating_point()]
    if not keys:
        return
    finite = torch.stack([torch.isfinite(batch.get(k)).all() for k in keys])
    if bool(finite.all()):
        return
    bad = keys[int((~finite).nonzero()[0, 0])]
    raise RuntimeError(f"the env produced a non-finite value in {bad!r} (nan or inf): nothing is trained on it; "
                       f"the run stops (its checkpoints are kept)")


class RLModule(CheckpointLoading, L.LightningModule):
    """Base of the algorithm modules.

    The data pipeline calls :meth:`on_collected` with every collected batch ``[B, T]`` (from the
    collector, in the training process, on every rank at the same time) and feeds ``training_step``
    with whatever the pipeline derives from it. Subclasses provide :attr:`collector_policy` (the
    policy the collector runs) and their update.

    Metrics go through :meth:`record` (accumulated, then averaged) and :meth:`flush_metrics`, which
    reduces them over ranks (mean) and writes them to every logger with the x-axis = collected frames
    (``frames`` = env steps summed over envs and ranks). Namespaces: ``rollout/`` (finished
    episodes: ``episode_return`` and every key the env reports under ``report``), ``train/``
    (losses and diagnostics), ``time/`` (``frames_per_s``, ``episodes_per_min``, ``episodes_per_hour`` (long
    games), ``frames``,
    ``optim_steps``).

    Args:
        compile: run the update's loss (forward and backward) through ``torch.compile`` (TorchRL's
            sota-implementations' ``compile`` option); built on the first update.
        compile_mode: ``torch.compile``'s mode: null or ``default``, ``reduce-overhead`` (CUDA graphs on a GPU; on a
            CPU the same as ``default``), ``max-autotune``, ``max-autotune-no-cudagraphs``.

    Raises:
        ValueError: ``compile_mode`` not one of those, or set without ``compile``.
    """

    def __init__(self, compile: bool = False, compile_mode: str | None = None) -> None:
        super().__init__()
        if compile_mode not in COMPILE_MODES:
            raise ValueError(f"model.compile_mode={compile_mode!r} is not allowed: null or one of "
                             f"{', '.join(m for m in COMPILE_MODES if m)}")
        if compile_mode is not None and not compile:
            raise ValueError(f"model.compile_mode={compile_mode!r} needs model.compile=true")
        self.compile_options = (bool(compile), compile_mode)
        self._compiled_loss = None  # torch.compile of self.loss, built on the first update (update_loss)
        self.automatic_optimization = False
        self.collected_frames = 0  # frames of all ranks (ranks collect in lockstep, equal batches)
        self.finished_episodes = 0  # episodes this rank's envs finished in this process (a statistic, not checkpointed)
        self.latest_metrics: dict[str, float] = {}
        self.nonfinite_updates: int | Tensor = 0  # updates skipped for a non-finite loss or gradient (optimiser_step)
        self.consecutive_nonfinite: int | Tensor = 0  # ... since the last finite one
        self._resume_rng: Tensor | None = None  # a loaded checkpoint's torch RNG state, until restore_rng
        self._sums: dict[str, float | Tensor] = defaultdict(float)
        self._counts: dict[str, int] = defaultdict(int)
        # every evaluation's metrics and frame count, written by an evaluation callback (callbacks.PolicyEvaluation,
        # which also sets has_evaluator) and read by others (callbacks.CurriculumPhases); in the checkpoint
        self.evaluations: list[dict[str, float]] = []
        self.has_evaluator = False
        self._clock: tuple[float, int] | None = None
        self._episodes = 0  # this rank's finished episodes since the last flush
        self.env_specs: EnvSpecs | None = None  # what the networks were shaped on (build_on); in the checkpoint
        self._direct_update: tuple[object, bool] | None = None  # (trainer, decision) of direct_update

    # ------------------------------------------------------------------ policy
    @property
    @abstractmethod
    def collector_policy(self) -> TensorDictModuleBase:
        """The TensorDict module the collector runs (exploration on)."""

    def export_policy(self) -> tuple[nn.Module, list[NestedKey]]:
        """The evaluation policy as a plain module ``(*inputs) -> action`` and its input keys
        (:func:`modules.policy.exportable` of :attr:`collector_policy`), for ``pipelines.export``.

        Raises:
            NotImplementedError: a module without a step-wise policy (REINFORCE's whole plans).
        """
        return exportable(self.collector_policy)

    def torchrl_policy(self, deterministic: bool = True) -> FixedExplorationPolicy:
        """The trained policy as a TorchRL TensorDict policy, for ``env.rollout(n, module.torchrl_policy())`` or a
        collector: :attr:`collector_policy` pinned to ``ExplorationType.DETERMINISTIC`` (the evaluation policy:
        DQN's greedy action, PPO's most likely one, SAC's squashed mean) or, with ``deterministic=False``, to
        ``ExplorationType.RANDOM`` (the collector's exploration: DQN's epsilon-greedy at the module's epsilon, PPO's
        and SAC's samples of their distribution), whatever ``set_exploration_type`` the caller has set, and run
        without gradients. It shares this module's weights (no copy).

        It reads the env's observation entries (its ``in_keys``: ``observation``; DVRP's ``customers``, ``request``,
        ``vehicles``, ``depot``, ``offers``, ``action_mask``) from a TensorDict ``[*B]`` as the TorchRL env of the
        run (``envs.make_env``, ``data.make_eval_env``) hands it out, and writes ``action`` (``[*B]`` int64 for a
        discrete action, ``[*B, A]`` continuous, ``[*B, R]`` for R agents) and the policy's other outputs (PPO's
        ``action_log_prob`` and ``hidden``).

        Raises:
            NotImplementedError: a module without a step-wise policy (REINFORCE's whole plans).
        """
        mode = ExplorationType.DETERMINISTIC if deterministic else ExplorationType.RANDOM
        return FixedExplorationPolicy(self.collector_policy, mode)

    def predict(self, observation: Observation, deterministic: bool = True) -> Action:
        """The action of the trained policy for ``observation`` (Stable-Baselines3's ``model.predict``, without the
        recurrent state): ``action = module.predict(obs)``.

        ``observation`` is the env's observation as the run's TorchRL env hands it to the collector, per sample:

        * one entry (gymnasium envs: ``observation``): a numpy array or a tensor of the per-sample shape (CartPole
          ``[4]`` float32, Pendulum ``[3]``), or a batch ``[N, ...]`` of them. For gymnasium's classic-control and
          toy-text envs that is gymnasium's own observation, so ``module.predict(obs)`` plays ``gym.make(env_id)``.
        * several entries: a dict (or TensorDict) of them, e.g. DVRP's ``customers`` ``[N, F]``, ``request``
          ``[F]``, ``vehicles`` ``[M, 3]``, ``depot`` ``[2]``, ``offers`` ``[A, F_o]`` float32 and ``action_mask``
          ``[A]`` bool (``envs.dvrp.DVRPEnv``), or the robot vacuum's ``observation`` ``[R, F]``, ``agent_id``
          ``[R, R]`` and ``action_mask`` ``[R, 5]`` for its R robots; other entries (``episode_reward``, ``done``)
          are ignored, so a TensorDict from ``env.reset()`` / ``env.step`` can be passed as it is.

        The keys, per-sample shapes and dtypes are the recorded env specs' (:attr:`env_specs`, in the checkpoint);
        an entry of another numeric dtype is cast (an integer or bool array to float32; a float where integers or
        booleans are expected is refused). What the env computes is part of its observation and is not redone
        here: the emulated games' (``envs.games``) grayscale, resize and frame stack (``pixels`` ``[4, 84, 84]``
        uint8, not the raw screen), the DVRP env's flexibility features (from the env's learned model). None of this
        project's envs normalises observations outside the networks (pixels are scaled to [0, 1] inside the CNN).

        Args:
            observation: as above; one observation, or a batch with a leading batch dim ``N``.
            deterministic: the evaluation policy (greedy, the mode, SAC's squashed mean); False: the collector's
                exploration (:meth:`torchrl_policy`): DQN's epsilon-greedy at the module's current epsilon (the
                one the checkpoint was saved with, ``module.epsilon()``; ``module.set_epsilon(e)`` sets another),
                PPO's and SAC's samples of their distribution, drawn from the global torch RNG
                (``torch.manual_seed`` makes them repeatable).

        Returns:
            The action, per sample as the env takes it: a discrete action as its index (int64, ``[]``; ``[R]`` for R
            agents), a continuous one ``[A]`` (float32, within the action spec's bounds); with a leading ``[N]`` for a
            batch. A numpy array if any entry of ``observation`` was not a tensor (numpy in, numpy out), else a
            tensor on the observation's device.

        Raises:
            ValueError: a missing entry, a wrong shape, an uncastable dtype or an ``action_mask`` row that allows no
                action (one line naming the expected keys, shapes and dtypes).
            RuntimeError: a module that records no env specs (built in Python and never shaped: see
                :meth:`build_on`).
            NotImplementedError: a module without a step-wise policy (REINFORCE's whole plans).
        """
        if self.env_specs is None:
            raise RuntimeError(f"{type(self).__name__} records no env specs: shape it on an env first "
                               f"(module.build_on(envs.EnvSpecs.of(env))) or load it from a checkpoint")
        policy = self.torchrl_policy(deterministic)
        example = self.env_specs.example_observation
        dims = example.batch_dims
        entries = {}
        for key in policy.in_keys:
            value = example.get(key, None)
            if value is None:
                raise RuntimeError(f"the recorded env specs have no {key!r}, which the policy reads")
            entries[key] = (value.shape[dims:], value.dtype)
        td, batched, as_numpy, device_in = policy_input(observation, entries, self.device)
        action = policy(td).get("action")
        if not batched:
            action = action[0]
        if as_numpy:
            return action.detach().cpu().numpy()
        return action if device_in is None else action.to(device_in)

    def forward(self, observation: Observation, deterministic: bool = True) -> Action:
        """``module(observation)``: :meth:`predict` (the same arguments, returns and errors). The training never
        calls it (the updates call the networks and losses), so the module's call is free to mean what a user of a
        loaded checkpoint expects of it: the trained policy's action."""
        return self.predict(observation, deterministic)

    def prepare(self, specs: EnvSpecs) -> None:
        """Shape the networks on the env's specs (action spec, lazy layers on an example observation), before
        training or loading weights; modules whose networks need it override this."""

    def check_env(self, specs: EnvSpecs) -> None:
        """Check, before any work, that this module can train on an env of ``specs``: the kind and number of its
        actions, its number of agents, the observation entries the networks read (helpers in
        :mod:`modules.compatibility`). ``pipelines.fit`` calls it on a throwaway one-row env of the config before
        anything is built or written; it changes nothing. The base checks nothing (a module without a step-wise
        env, e.g. REINFORCE on whole problems, is never asked).

        Raises:
            ValueError: (subclasses) a mismatch, in one line naming the config key and both sides.
        """

    def build_on(self, specs: EnvSpecs) -> None:
        """:meth:`prepare` on ``specs``, once (later calls do nothing), and keep them for the checkpoint."""
        if self.env_specs is None:
            self.env_specs = specs
            self.prepare(specs)

    def configure_model(self) -> None:
        """Lightning's hook before the optimisers are built (after the data module's ``setup``):
        :meth:`build_on` the training env's specs, on the CPU (Lightning calls this hook with the root device as
        the default device of new tensors, before it moves the module there)."""
        specs = self.trainer.datamodule.env_specs() if self._trainer is not None and self.trainer.datamodule else None
        if specs is not None:  # None: a data path without a step-wise env (whole problems, pipelines.episodes)
            with torch.device("cpu"):
                self.build_on(specs)

    # ------------------------------------------------------------------ what the data path needs
    def replay_keys(self) -> list[NestedKey] | None:
        """The entries of a collected batch the updates read (the loss's inputs, e.g. :meth:`transition_keys`): what a
        replay buffer keeps, and what the on-policy minibatches are cut from. None keeps everything."""
        return None

    @staticmethod
    def transition_keys(inputs: list[NestedKey]) -> list[NestedKey]:
        """The entries of one transition: ``inputs`` (what the networks read) now and next, the action, the next
        reward and the done flags now and next."""
        return [*inputs, "action", *_DONE_KEYS, *(("next", k) for k in [*inputs, "reward", *_DONE_KEYS])]

    def replay_transform(self) -> Transform | None:
        """A transform the replay buffer applies to what it stores (e.g. n-step returns), or None."""
        return None

    # ------------------------------------------------------------------ data hooks
    def on_collected(self, batch: TensorDict) -> TensorDict:
        """Count frames and finished episodes of a collected batch ``[B, T]``; returns the batch.

        The results of the episodes that finished in the batch (:func:`envs.episodes.episode_results`: the
        return, a multi-agent env's per agent too, and every ``report`` entry) are averaged under
        ``rollout/<name>`` (``rollout/episode_return``, ``rollout/agent<i>/episode_return``, ``rollout/<key>``).
        """
        self.flush_metrics()
        check_finite(batch)
        self.collected_frames += batch.numel() * self._world_size()
        done = batch["next", "done"].squeeze(-1)
        episodes = int(done.sum())
        self._episodes += episodes
        self.finished_episodes += episodes
        if episodes:
            for name, values in episode_results(batch["next"], done).items():
                self.record(f"rollout/{name}", values.mean(), episodes)
        return batch

    def chart_groups(self) -> dict[str, list[str]]:
        """TensorBoard charts that show a metric with its references (:mod:`pipelines.board`): the training
        episodes' return beside the evaluation's."""
        return {"episode return": ["rollout/episode_return", "eval/episode_return"]}

    # ------------------------------------------------------------------ metrics
    def update_loss(self, batch: TensorDict):
        """The subclass's ``loss(batch)`` as the update calls it: through ``torch.compile`` (built on the first call)
        when ``compile`` is set, else as it is.

        Under a CUDA-graph mode (``reduce-overhead``, ``max-autotune``) on a GPU, the compiled function's outputs live
        in the graph's static memory, which its next replay overwrites: the hockey DQN run at 65,536 envs stopped
        with "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run" where it stacked
        the TD errors of a training step's updates. Each call therefore starts a new graph step
        (``torch.compiler.cudagraph_mark_step_begin``) and returns clones of the outputs (differentiable: the
        backward goes through them), which the caller may keep across updates."""
        compile, mode = self.compile_options
        if not compile:
            return self.loss(batch)
        if self._compiled_loss is None:
            self._compiled_loss = torch.compile(self.loss, mode=mode)
        if mode not in CUDA_GRAPH_MODES:
            return self._compiled_loss(batch)
        torch.compiler.cudagraph_mark_step_begin()
        return tree_map(lambda x: x.clone() if isinstance(x, Tensor) else x, self._compiled_loss(batch))

    def record(self, name: str, value: float | Tensor, weight: int = 1) -> None:
        """Accumulate ``value`` (weighted) under ``name`` until the next :meth:`flush_metrics`. A tensor is summed
        where it lives (in float64), so recording reads nothing back from the device: the values are read once
        per collected batch, in :meth:`flush_metrics`."""
        if isinstance(value, Tensor):
            self._sums[name] = self._sums[name] + value.detach().to(torch.float64) * weight
        else:
            self._sums[name] += float(value) * weight
        self._counts[name] += weight

    def record_updates(self, names: list[str], rows: list[Tensor]) -> None:
        """Record the values of K updates: ``rows[k]`` ``[M]`` holds update k's values in the order of ``names``;
        each name gets its mean over the K updates, weighted K (the same average as K :meth:`record` calls)."""
        means = torch.stack(rows).mean(0)
        for name, value in zip(names, means.unbind(0), strict=True):
            self.record(name, value, len(rows))

    def optimiser_step(self, optimizer, loss: Tensor, max_grad_norm: float) -> Tensor:
        """One update: zero the gradients, the backward of ``loss``, clip the global gradient norm of the
        optimiser's parameters at ``max_grad_norm``, step. Returns the norm before clipping (a 0-dim tensor).

        An update whose loss or gradient norm is not finite is skipped (the weights and the optimiser's state stay
        as they were) and counted: :attr:`nonfinite_updates` in all, :attr:`consecutive_nonfinite` since the last
        finite one (device tensors; ``callbacks.NonFiniteGuard`` reads them once per training step and stops a run
        that keeps producing them). A fused Adam skips on the device (its ``found_inf``, as under a gradient
        scaler: no host sync); any other optimiser reads the flag back once per update.

        The backward and the step go through Lightning (``manual_backward``, ``LightningOptimizer.step``), or straight
        to torch where Lightning would add nothing but its hook calls (:meth:`direct_update`)."""
        direct = self.direct_update()
        optimizer.zero_grad()
        if direct:
            loss.backward()
        else:
            self.manual_backward(loss)
        norm = torch.nn.utils.clip_grad_norm_([p for group in optimizer.param_groups for p in group["params"]],
                                              max_grad_norm)
        found = ~(torch.isfinite(norm) & torch.isfinite(loss.detach()))
        raw = getattr(optimizer, "optimizer", optimizer)
        if raw.defaults.get("fused"):
            raw.found_inf = found.float()
            self._step(optimizer, direct)
        elif not bool(found):
            self._step(optimizer, direct)
        self.nonfinite_updates = self.nonfinite_updates + found
        self.consecutive_nonfinite = (self.consecutive_nonfinite + 1) * found
        return norm

    def direct_update(self) -> bool:
        """Whether Lightning's ``manual_backward`` and optimiser step would add nothing to torch's ``loss.backward()``
        and ``optimizer.step()`` in this fit but calls of hooks nobody overrides: a ``SingleDeviceStrategy``, the
        default full precision (``Precision``: no scaler, no autocast), and no callback or this module overriding
        ``on_before_backward``, ``on_after_backward``, ``on_before_optimizer_step`` or (the module) ``backward``.
        Then :meth:`optimiser_step` calls torch itself, keeping Lightning's count of optimiser steps
        (``trainer.global_step``): on a CPU Lightning's hook calls took about 0.1 ms of a 1.7 ms DQN update
        (``benchmarks/update_overhead.py``; tested to give the same weights as Lightning's path). Decided once per
        trainer; False without one."""
        trainer = self._trainer
        if trainer is None:
            return False
        if self._direct_update is None or self._direct_update[0] is not trainer:
            hooks = ("on_before_backward", "on_after_backward", "on_before_optimizer_step")
            direct = (type(trainer.strategy) is SingleDeviceStrategy and type(trainer.precision_plugin) is Precision
                      and not any(is_overridden(h, c, L.Callback) for c in trainer.callbacks for h in hooks)
                      and not any(is_overridden(h, self, L.LightningModule) for h in (*hooks, "backward")))
            self._direct_update = (trainer, direct)
        return self._direct_update[1]

    @staticmethod
    def _step(optimizer, direct: bool) -> None:
        """``optimizer.step()`` of a ``LightningOptimizer``; with ``direct`` (:meth:`direct_update`) the wrapped torch
        optimiser's step between the manual loop's own progress calls (what ``LightningOptimizer.step`` makes of it,
        less the strategy's and precision plugin's hook calls)."""
        if not direct:
            optimizer.step()
            return
        optimizer._on_before_step()
        optimizer.optimizer.step()
        optimizer._on_after_step()

    def _world_size(self) -> int:
        return self.trainer.world_size if self._trainer is not None else 1

    def flush_metrics(self) -> None:
        """Average the recorded metrics, reduce them over ranks and write them at x = collected frames.

        Every rank must call this at the same point (it is a collective under DDP): the data pipeline
        calls it once per collected batch, on all ranks.
        """
        if self._trainer is None:
            return
        now, frames = time.perf_counter(), self.collected_frames
        if self._clock is not None and frames > self._clock[1]:
            elapsed = max(now - self._clock[0], 1e-9)
            self.record("time/frames_per_s", (frames - self._clock[1]) / elapsed)
            self.record("time/episodes_per_min", self._episodes * self._world_size() * 60.0 / elapsed)
            self.record("time/episodes_per_hour", self._episodes * self._world_size() * 3600.0 / elapsed)
        self._clock, self._episodes = (now, frames), 0
        if isinstance(self.nonfinite_updates, Tensor):
            self.record("train/nonfinite_updates", self.nonfinite_updates)
        names = sorted(self._sums)
        if names:
            values = torch.stack([torch.as_tensor(self._sums[n], dtype=torch.float64, device=self.device).reshape(())
                                  / max(self._counts[n], 1) for n in names])
            values = self.trainer.strategy.reduce(values, reduce_op="mean").cpu()
            metrics = dict(zip(names, values.tolist()))
            metrics.update({"time/frames": float(frames), "time/optim_steps": float(self.trainer.global_step)})
            if self.trainer.is_global_zero:
                for logger in self.loggers:
                    logger.log_metrics(metrics, step=frames)
            self.latest_metrics = metrics
        self._sums.clear()
        self._counts.clear()

    def on_train_end(self) -> None:
        self.flush_metrics()

    # ------------------------------------------------------------------ checkpoint
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Store the frame counter, the evaluations, the counts of skipped non-finite updates, every rank's torch
        RNG state (policy sampling, shuffles) and the env specs the networks were shaped on (``env_specs``)."""
        if self.env_specs is not None:
            checkpoint["env_specs"] = self.env_specs.record()
        rng = torch.get_rng_state()
        states = [rng]
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            states = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(states, rng)
        checkpoint["rl_state"] = {"collected_frames": self.collected_frames, "torch_rng": states,
                                  "evaluations": self.evaluations,
                                  "nonfinite_updates": int(self.nonfinite_updates),
                                  "consecutive_nonfinite": int(self.consecutive_nonfinite)}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Restore :meth:`on_save_checkpoint`; each rank takes its own RNG state (rank 0's if fewer), set again by
        :meth:`restore_rng` when the training stream starts (only with a trainer: loading a module alone leaves
        the global RNG as it is). A module not shaped yet is shaped on the recorded env specs first."""
        if self.env_specs is None and checkpoint.get("env_specs") is not None:
            self.build_on(EnvSpecs.from_record(checkpoint["env_specs"]))
        state = checkpoint.get("rl_state")
        if state is None:
            return
        self.collected_frames = int(state["collected_frames"])
        self.evaluations = list(state.get("evaluations", []))
        self.nonfinite_updates = int(state.get("nonfinite_updates", 0))
        self.consecutive_nonfinite = int(state.get("consecutive_nonfinite", 0))
        rank = self.trainer.global_rank if self._trainer is not None else 0
        rngs = state["torch_rng"]
        if self._trainer is not None:
            self._resume_rng = rngs[rank] if rank < len(rngs) else rngs[0]
            torch.set_rng_state(self._resume_rng)

    def restore_rng(self) -> None:
        """Set the torch RNG state a loaded checkpoint holds once more, right before the training stream's first
        draw: building the collector (and whatever else runs between the load and that draw) consumes random
        numbers, which the uninterrupted run consumed before the checkpoint. Then forgotten; nothing without a
        loaded checkpoint."""
        if self._resume_rng is not None:
            torch.set_rng_state(self._resume_rng)
            self._resume_rng = None

