"""The callback protocol of the RL loop: Lightning's hooks, plus the one hook the data stream calls."""

from __future__ import annotations

import lightning as L
from tensordict import TensorDict


class RLCallback(L.Callback):
    """A Lightning callback that also sees every collected batch.

    The data stream (:mod:`pipelines.data.stream`) calls :meth:`on_batch_collected` of every ``RLCallback`` of the
    trainer, on every rank, once per collected batch, after the module has counted and processed it
    (``pl_module.collected_frames`` includes the batch) and before any training step on it. Everything else is
    Lightning's :class:`lightning.pytorch.Callback`: state in ``state_dict`` / ``load_state_dict``, decisions taken
    identically on every rank.
    """

    def on_batch_collected(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: TensorDict) -> None:
        """Called with each collected batch, after ``pl_module.on_collected`` (frames counted; e.g. PPO's GAE added
        and the batch flattened to ``[B * T]``, otherwise ``[B, T]``). Default: nothing.

        Args:
            trainer: the trainer.
            pl_module: the algorithm module (an ``RLModule``).
            batch: the collected batch: ``("next", "done")``, ``("next", "reward")`` and the env's entries.
        """
