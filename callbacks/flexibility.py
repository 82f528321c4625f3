"""Periodic retraining of the env's learned customer model (``modules.flexibility``) on the offer
outcomes the collector has seen."""

from __future__ import annotations

import copy
import logging

import lightning as L
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

from callbacks.base import RLCallback
from envs.restored import RestoredStateError, restored_mapping, restored_number, restored_tensor
from modules.checks import LEARNING_RATE, check_hparams
from modules.flexibility import fit_outcomes
from modules.schedule import FrameSchedule

log = logging.getLogger(__name__)

_STORED = ("attributes", "shift", "accepted", "kind")


class FlexibilityUpdate(RLCallback):
    """Keep the last ``buffer_size`` offer outcomes in a bounded TorchRL replay buffer (filled from
    every collected batch's ``("next", "outcome")`` where ``offered``) and, every ``every_n_frames``
    collected frames, train the env's learned customer flexibility model (the run's, ``datamodule.env_models
    ["flexibility"]``: the env puts its p(k | x) and embedding in the observation) for ``epochs`` passes on them
    (censored likelihood, :func:`modules.flexibility.fit_outcomes`), then push the new weights into
    the envs with ``datamodule.load_env_model``. Episodes that start afterwards use the new model.

    Under DDP every rank's outcomes are gathered, rank 0 trains and broadcasts the weights, so every
    rank holds the same model after each update. The checkpoint keeps the schedule and rank 0's store
    (the model's weights are in the data module's state); a resumed run continues both.

    Logged at x = collected frames (rank 0): ``flexibility/loss`` (nats per informative outcome, the last
    pass), ``flexibility/accuracy`` (argmax p(k | x) against the true types of the stored customers; the
    env knows them, for diagnostics only), ``flexibility/bayes_accuracy`` (the generator's exact posterior
    on the same customers, where the env config provides ``type_posterior``), ``flexibility/outcomes``,
    ``flexibility/updates``, ``flexibility/share_<k>`` (mean predicted p(k)) and the histogram
    ``flexibility/predicted_type`` (argmax type over the stored customers).

    Args:
        every_n_frames: interval between updates, in collected frames (all ranks).
        epochs: passes over the store per update.
        batch_size: outcomes per optimiser step.
        lr: Adam learning rate (a fresh optimiser per update, warm-started weights).
        buffer_size: capacity of the outcome store (oldest outcomes are overwritten).
        seed: seed of the shuffles (update u uses ``seed + u``; the global RNG is not touched); null: the run's seed
            (``pipelines.fit`` sets it from ``seed_everything``; 0 when built in Python).

    Raises:
        ValueError: a setting below 1, an lr outside (0, 1] (``FlexibilityUpdate.<key>=... is not allowed``), or an
            env without a flexibility model (at fit start).
    """

    def __init__(self, every_n_frames: int = 50_000, epochs: int = 4, batch_size: int = 1024, lr: float = 3e-3,
                 buffer_size: int = 64_000, seed: int | None = None) -> None:
        check_hparams(*((key, value, value >= 1, "an integer >= 1") for key, value in (
            ("every_n_frames", every_n_frames), ("epochs", epochs), ("batch_size", batch_size),
            ("buffer_size", buffer_size))), ("lr", lr, 0 < lr <= 1, LEARNING_RATE), section="FlexibilityUpdate")
        self.schedule = FrameSchedule(every_n_frames)
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.seed = 0 if seed is None else int(seed)
        self.store = TensorDictReplayBuffer(storage=LazyTensorStorage(buffer_size))
        self.updates = 0

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {**self.schedule.state_dict(), "updates": self.updates, "store": self.store.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore :meth:`state_dict`, checked.

        Raises:
            RestoredStateError: a negative update count, or a store whose fill count, write cursor or entries do not
                fit its capacity, or are not finite, or a negative kind (names the entry)."""
        state = restored_mapping(state_dict, "FlexibilityUpdate", ("updates", "store"))
        self.schedule.load_state_dict(state)
        self.updates = restored_number(state["updates"], "FlexibilityUpdate.updates", low=0)
        store = restored_mapping(state["store"], "FlexibilityUpdate.store", ("_storage",))
        storage = restored_mapping(store["_storage"], "FlexibilityUpdate.store._storage", ("_len",))
        capacity = self.store.storage.max_size
        restored_number(storage["_len"], "FlexibilityUpdate.store._storage._len", low=0, high=capacity)
        for key, value in restored_mapping(storage.get("_storage") or {}, "FlexibilityUpdate.store._storage").items():
            if not isinstance(value, torch.Tensor) or value.dim() < 1 or value.shape[0] != capacity:
                raise RestoredStateError(f"FlexibilityUpdate.store._storage.{key} is not [{capacity}, ...]")
            restored_tensor(value[:storage["_len"]], f"FlexibilityUpdate.store._storage.{key}",
                            low=0 if key == "kind" else None)  # (a customer's kind: an index)
        writer = store.get("_writer")
        if isinstance(writer, dict) and "_cursor" in writer:
            restored_number(writer["_cursor"], "FlexibilityUpdate.store._writer._cursor", low=0, high=capacity)
        self.store.load_state_dict(store)

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        """A checkpoint written while this callback was named ``EmbeddingUpdate`` keeps its state under that name:
        loaded from there (Lightning looks for this class's own name only)."""
        states = checkpoint.get("callbacks") or {}
        if self.state_key not in states and "EmbeddingUpdate" in states:
            self.load_state_dict(copy.deepcopy(states["EmbeddingUpdate"]))

    def outcomes(self) -> TensorDict:
        """The stored outcomes ``[n]`` (oldest first is not guaranteed)."""
        n = len(self.store)
        return self.store.storage[:n] if n else TensorDict({}, batch_size=[0])

    # ------------------------------------------------------------------ hooks
    def chart_groups(self) -> dict[str, list[str]]:
        """The Bayes classifier's accuracy (the best any model can reach) beside the model's
        (:mod:`pipelines.tensorboard_layout`)."""
        return {"flexibility accuracy": ["flexibility/accuracy", "flexibility/bayes_accuracy"]}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if "flexibility" not in getattr(trainer.datamodule, "env_models", {}):
            raise ValueError("callbacks.FlexibilityUpdate needs an env with a flexibility model: set "
                             "data.init_args.env.init_args.flexibility "
                             "(e.g. class_path: modules.flexibility.FlexibilityModel)")

    def on_batch_collected(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: TensorDict) -> None:
        outcome = batch["next", "outcome"].reshape(-1)
        outcome = outcome[outcome["offered"]]
        if outcome.numel():
            self.store.extend(outcome.select(*_STORED).cpu())

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        if self.schedule.due(pl_module.collected_frames):
            self.update(trainer, pl_module)

    # ------------------------------------------------------------------ update
    def _gathered(self) -> TensorDict:
        """Every rank's stored outcomes, concatenated in rank order (a collective under DDP)."""
        local = self.outcomes()
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return local
        parts = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(parts, local.to_dict() if local.numel() else None)
        parts = [TensorDict(p, batch_size=[p["shift"].shape[0]]) for p in parts if p is not None]
        return torch.cat(parts) if parts else local

    def update(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float]:
        """Gather, train on rank 0, broadcast and push; every rank must call it at the same point.
        Returns the logged metrics (rank 0; empty elsewhere)."""
        data = self._gathered()
        model = trainer.datamodule.env_models["flexibility"]
        state, metrics, predicted = None, {}, None
        if trainer.is_global_zero and data.numel():
            trained = copy.deepcopy(model).cpu()
            generator = torch.Generator().manual_seed(self.seed + self.updates)
            loss = fit_outcomes(trained, data, self.epochs, self.batch_size, self.lr, generator)
            state = trained.state_dict()
            metrics, predicted = self._diagnostics(trainer, trained, data, loss)
        state = trainer.strategy.broadcast(state, src=0)
        if state is not None:
            trainer.datamodule.load_env_model("flexibility", state)
            self.updates += 1
        if metrics:
            metrics["flexibility/updates"] = float(self.updates)
            self._log(pl_module, predicted, metrics)
            log.info("flexibility model update %d at %d frames: %s", self.updates, pl_module.collected_frames, metrics)
        return metrics

    def _diagnostics(self, trainer: L.Trainer, model, data: TensorDict,
                     loss: float) -> tuple[dict[str, float], torch.Tensor]:
        """The logged metrics and the predicted (argmax) type of every stored customer."""
        with torch.no_grad():
            probs = model(data["attributes"])[0].exp()
        metrics = {"flexibility/loss": loss, "flexibility/outcomes": float(data.numel()),
                   "flexibility/accuracy": (probs.argmax(-1) == data["kind"]).float().mean().item()}
        posterior = getattr(trainer.datamodule.env_config, "type_posterior", None)
        if posterior is not None:
            bayes = posterior(data["attributes"]).argmax(-1)
            metrics["flexibility/bayes_accuracy"] = (bayes == data["kind"]).float().mean().item()
        for k, share in enumerate(probs.mean(0).tolist()):
            metrics[f"flexibility/share_{k}"] = share
        return metrics, probs.argmax(-1)

    def _log(self, pl_module: L.LightningModule, predicted: torch.Tensor, metrics: dict[str, float]) -> None:
        frames = pl_module.collected_frames
        for logger in pl_module.loggers:
            logger.log_metrics(metrics, step=frames)
            if hasattr(logger.experiment, "add_histogram"):
                logger.experiment.add_histogram("flexibility/predicted_type", predicted, frames)
