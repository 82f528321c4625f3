"""The data path: env + TorchRL collector -> the batches Lightning feeds to ``training_step``.

This is the only place that knows how data moves. A data module takes the env's config, the collector's options
(:class:`~pipelines.data.options.CollectorOptions`, ``data.collector``), for replay the buffer's
(:class:`~pipelines.data.options.ReplayOptions`, ``data.replay_buffer``), the frame budget, a seed and a device. It
builds the env on every rank in ``setup`` (row seeds ``seed + rank * num_envs + b``, so ranks never share an instance
stream) and the collector lazily when training starts (after a checkpoint has been restored), driven by the module's
``collector_policy``: in this process, or in rollout worker processes (:mod:`pipelines.data.collectors`). The stream is
an ``IterableDataset`` that collects, hands each batch to ``module.on_collected`` and yields what the algorithm trains
on:

* on-policy (:class:`OnPolicyDataModule`): each collected ``[B, T]`` batch, processed by the module
  (e.g. GAE), split into the module's ``ppo_epochs`` shuffled passes of ``mini_batch_size`` minibatches;
* off-policy (:class:`OffPolicyDataModule`): each collected ``[B, T]`` batch extends a replay buffer
  (:mod:`pipelines.data.replay`: the entries the module declares, through its ``replay_transform``), then
  ``utd_ratio`` sampled batches are yielded (none during the ``init_random_frames`` warm-up).

The stream ends when ``total_frames`` (summed over ranks) have been collected, and stops the trainer.

Callbacks that need the collected data subclass :class:`callbacks.base.RLCallback`: its
``on_batch_collected(trainer, pl_module, batch)`` receives every collected batch, on every rank, after the module
counted and processed it (``callbacks.FlexibilityUpdate`` fills its outcome store so).
Callbacks act on the training envs through the named methods :meth:`EnvDataModule.configure_env`,
:meth:`~EnvDataModule.set_opponents`, :meth:`~EnvDataModule.set_opponent_policy` and
:meth:`~EnvDataModule.load_env_model` (:mod:`pipelines.data.env_control`).

The names are imported on first use (PEP 562): a rollout worker process imports
:mod:`pipelines.data.collectors` (its env builder) without Lightning and the data modules (50 MB less per worker).
"""

from __future__ import annotations

from envs.lazy import lazy_exports

_EXPORTS = {"OffPolicyDataModule": "pipelines.data.off_policy", "OnPolicyDataModule": "pipelines.data.on_policy",
            "RLDataModule": "pipelines.data.base", "EnvDataModule": "pipelines.data.base",
            "StopRequested": "pipelines.data.stream", "CollectorOptions": "pipelines.data.options",
            "ReplayOptions": "pipelines.data.options", "RayOptions": "pipelines.data.options"}

__all__ = list(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
