"""What every RL LightningModule needs, and nothing more: frame counting, finished-episode
statistics, metrics written against collected frames (reduced over DDP ranks), and the extra training
state (frame counter, RNG streams) in the checkpoint. Its acting (:mod:`modules.acting`), optimiser updates
(:mod:`modules.updates`), metrics (:mod:`modules.metrics`) and loading (:mod:`modules.loading`) are mixins of
their own files; the checks that stop a run early are in :mod:`modules.checks`."""

from __future__ import annotations

import logging
from collections import defaultdict

import lightning as L
import torch
from tensordict import NestedKey, TensorDict
from torch import Tensor
from torchrl.envs import Transform

from envs import EnvSpecs
from envs.episodes import episode_results
from envs.restored import RestoredStateError, restored_mapping, restored_number, restored_torch_rng
from modules.acting import Acting
from modules.checks import check_finite, check_loaded_weights, keep_config_values
from modules.loading import CheckpointLoading
from modules.metrics import MetricLogging
from modules.restored_training import check_training_state
from modules.updates import COMPILE_MODES, CUDA_GRAPH_MODES, OptimiserUpdates

_DONE_KEYS = ("done", "terminated", "truncated")

log = logging.getLogger(__name__)


class RLModule(CheckpointLoading, Acting, OptimiserUpdates, MetricLogging, L.LightningModule):
    """Base of the algorithm modules.

    The data pipeline calls :meth:`on_collected` with every collected batch ``[B, T]`` (from the
    collector, in the training process, on every rank at the same time) and feeds ``training_step``
    with whatever the pipeline derives from it. Subclasses provide :attr:`collector_policy` (the
    policy the collector runs) and their update.

    Metrics go through :meth:`record` (accumulated, then averaged) and :meth:`flush_metrics`, which
    reduces them over ranks (mean) and writes them to every logger with the x-axis = collected frames
    (``frames`` = env steps summed over envs and ranks). Namespaces: ``rollout/`` (finished
    episodes: ``episode_return`` and every key the env reports under ``info``), ``train/``
    (losses and diagnostics), ``time/`` (``frames_per_s``, ``episodes_per_min``, ``episodes_per_hour`` (long
    games), ``frames``,
    ``optim_steps``).

    Args:
        compile: run the update's loss (forward and backward) through ``torch.compile`` (TorchRL's
            sota-implementations' ``compile`` option); built on the first update.
        compile_mode: ``torch.compile``'s mode: null or ``default``, ``reduce-overhead`` (CUDA graphs on a GPU; on a
            CPU the same as ``default``), ``max-autotune``, ``max-autotune-no-cudagraphs``.
        cuda_graph: the whole update of a minibatch (loss, backward, clip, optimiser step) as one CUDA graph on a GPU
            (:mod:`modules.graph_update`; modules that support it say so); on a CPU the same update without a graph.

    Attributes:
        updates_all_parameters: every update gives every trained parameter a gradient (False for TD3, whose
            critic-only updates leave the actor out): DDP must then look for unused parameters, which
            ``pipelines.compatibility.check_strategy_fit`` asks of the strategy before any work.

    Raises:
        ValueError: ``compile_mode`` not one of those, or set without ``compile``; ``cuda_graph`` with a
            ``compile_mode`` that replays CUDA graphs itself.
    """

    updates_all_parameters: bool = True

    def __init__(self, compile: bool = False, compile_mode: str | None = None, cuda_graph: bool = False) -> None:
        super().__init__()
        if compile_mode not in COMPILE_MODES:
            raise ValueError(f"model.compile_mode={compile_mode!r} is not allowed: null or one of "
                             f"{', '.join(m for m in COMPILE_MODES if m)}")
        if compile_mode is not None and not compile:
            raise ValueError(f"model.compile_mode={compile_mode!r} needs model.compile=true")
        if cuda_graph and compile_mode in CUDA_GRAPH_MODES:
            raise ValueError(f"model.cuda_graph=true captures the whole update already: model.compile_mode must be "
                             f"null, default or max-autotune-no-cudagraphs, not {compile_mode!r}")
        self.compile_options = (bool(compile), compile_mode)
        self.cuda_graph = bool(cuda_graph)
        self._graphed_update = None  # modules.graph_update.GraphedUpdate of the current optimiser (cuda_graph)
        self._compiled_loss = None  # torch.compile of self.loss, built on the first update (update_loss)
        self.automatic_optimization = False
        self.collected_frames = 0  # frames of all ranks (ranks collect in lockstep, equal batches)
        self.frames_at_start = 0  # collected_frames when this fit began: a resumed checkpoint's, else 0
        self.finished_episodes = 0  # episodes this rank's envs finished in this process (a statistic, not checkpointed)
        self.latest_metrics: dict[str, float] = {}
        self.nonfinite_updates: int | Tensor = 0  # updates skipped for a non-finite loss or gradient (optimizer_update)
        self.consecutive_nonfinite: int | Tensor = 0  # ... since the last finite one
        self._resume_rng: Tensor | None = None  # a loaded checkpoint's torch RNG state, until restore_rng
        self._sums: dict[str, float | Tensor] = defaultdict(float)
        self._counts: dict[str, int] = defaultdict(int)
        self._clock: tuple[float, int] | None = None
        self._episodes = 0  # this rank's finished episodes since the last flush
        self.env_specs: EnvSpecs | None = None  # what the networks were shaped on (build_on); in the checkpoint
        self._direct_update: tuple[object, bool] | None = None  # (trainer, decision) of direct_update

    # ------------------------------------------------------------------ env specs
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
        return, a multi-agent env's per agent too, and every ``info`` entry) are averaged under
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
        """TensorBoard charts that show a metric with its references (:mod:`pipelines.tensorboard_layout`): the training
        episodes' return beside the evaluation's."""
        return {"episode return": ["rollout/episode_return", "eval/episode_return"]}

    # ------------------------------------------------------------------ checkpoint
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Store the frame counter, the counts of skipped non-finite updates, every rank's torch
        RNG state (policy sampling, shuffles) and the env specs the networks were shaped on (``env_specs``)."""
        if self.env_specs is not None:
            checkpoint["env_specs"] = self.env_specs.record()
        rng = torch.get_rng_state()
        states = [rng]
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            states = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(states, rng)
        checkpoint["rl_state"] = {"collected_frames": self.collected_frames, "torch_rng": states,
                                  "nonfinite_updates": int(self.nonfinite_updates),
                                  "consecutive_nonfinite": int(self.consecutive_nonfinite)}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Restore :meth:`on_save_checkpoint`; each rank takes its own RNG state (rank 0's if fewer), set again by
        :meth:`restore_rng` when the training stream starts (only with a trainer: loading a module alone leaves
        the global RNG as it is). A module not shaped yet is shaped on the recorded env specs first. Everything
        restored is checked first: the weights finite (:func:`modules.checks.check_loaded_weights`), the counters
        non-negative integers, the RNG state a torch generator's.

        Raises:
            RestoredStateError: names the first entry that is not what this module saves."""
        if self.env_specs is None and checkpoint.get("env_specs") is not None:
            self.build_on(EnvSpecs.from_record(checkpoint["env_specs"]))
        check_loaded_weights(checkpoint.get("state_dict"), self)
        keep_config_values(checkpoint.get("state_dict") or {}, self)
        self._restored_training = checkpoint if self._trainer is not None else None  # checked at on_fit_start
        state = checkpoint.get("rl_state")
        if state is None:
            return
        restored_mapping(state, "rl_state", ("collected_frames", "torch_rng"))
        self.collected_frames = restored_number(state["collected_frames"], "rl_state.collected_frames", low=0)
        self.frames_at_start = self.collected_frames
        for name in ("nonfinite_updates", "consecutive_nonfinite"):
            setattr(self, name, restored_number(state.get(name, 0), f"rl_state.{name}", low=0))
        rank = self.trainer.global_rank if self._trainer is not None else 0
        rngs = state["torch_rng"]
        if not isinstance(rngs, list) or not rngs:
            raise RestoredStateError(f"rl_state.torch_rng is {type(rngs).__name__}, not a list of generator states")
        if self._trainer is not None:
            index = rank if rank < len(rngs) else 0
            self._resume_rng = restored_torch_rng(rngs[index], f"rl_state.torch_rng[{index}]")
            torch.set_rng_state(self._resume_rng)

    def on_fit_start(self) -> None:
        """A resumed fit's optimiser, scheduler and loop states checked against this run's, before Lightning restores
        them (:func:`modules.restored_training.check_training_state`).

        Raises:
            RestoredStateError: names the first entry that is not what this run saves."""
        restored, self._restored_training = getattr(self, "_restored_training", None), None
        if restored is not None:
            check_training_state(restored, self.trainer.optimizers,
                                 [config.scheduler for config in self.trainer.lr_scheduler_configs])

    def restore_rng(self) -> None:
        """Set the torch RNG state a loaded checkpoint holds once more, right before the training stream's first
        draw: building the collector (and whatever else runs between the load and that draw) consumes random
        numbers, which the uninterrupted run consumed before the checkpoint. Then forgotten; nothing without a
        loaded checkpoint."""
        if self._resume_rng is not None:
            torch.set_rng_state(self._resume_rng)
            self._resume_rng = None

