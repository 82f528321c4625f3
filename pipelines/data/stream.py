"""The stream of collected batches a data module feeds Lightning: collect, hand each batch to the module and the
callbacks, yield what ``training_step`` trains on, until the frame budget is met or a signal asks training to stop;
the budget in batches and training steps."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from tensordict import TensorDict
from torch.utils.data import DataLoader, IterableDataset

from callbacks.base import RLCallback


class StopRequested(BaseException):
    """Training stops early at a step boundary because of a signal (SIGINT, SIGTERM); ``pipelines.fit`` turns
    it into a non-zero exit status. A ``BaseException``, as ``KeyboardInterrupt``: raised by a signal handler
    inside library code, it passes that code's ``except Exception`` fallbacks (torchrl's env and collector
    construction has some) instead of being swallowed."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(f"training stopped by {signal_name}")
        self.signal_name = signal_name


class FrameStream:
    """The stream and budget methods :class:`pipelines.data.base.RLDataModule` has from here (a mixin before
    ``LightningDataModule``): they use its collector, frame budget and ``stop_request``."""

    def request_stop(self, signal_name: str) -> None:
        """Stop training at the next step boundary (a signal handler's call: nothing is interrupted midway, so
        no library is left holding a lock or half a state)."""
        self.stop_request = signal_name

    def check_stop(self) -> None:
        """Called by the stream before every collection and every training step.

        Raises:
            StopRequested: :meth:`request_stop` was called, or the trainer received SIGTERM.
        """
        if self.stop_request is not None:
            raise StopRequested(self.stop_request)
        if self.trainer is not None and self.trainer.received_sigterm:
            raise StopRequested("SIGTERM")

    def batches(self) -> Iterator[TensorDict]:
        """Collected batches, processed by the module, until the budget is met; then the trainer is told to stop.

        Raises:
            StopRequested: a signal asked training to stop (see :meth:`check_stop`).
        """
        module = self.trainer.lightning_module
        iterator = iter(self.collector())
        module.restore_rng()  # (after the collector is built: a resumed run draws on from the checkpoint's state)
        collector = self.collector()
        first = True
        while module.collected_frames < self.total_frames:
            self.check_stop()
            # nothing trained by this process before its first batch: a stop signal ends that collection at once
            with self.interruptible() if first else contextlib.nullcontext():
                batch = next(iterator)
            first = False
            version = batch.get("policy_version", None)
            batch = module.on_collected(batch)
            if version is not None:  # (recorded after on_collected, which writes the previous batch's metrics)
                module.record("time/policy_lag", (collector.policy.version - version).float().mean())
            for callback in self.trainer.callbacks:  # (the frames are counted: collected_frames includes the batch)
                if isinstance(callback, RLCallback):
                    callback.on_batch_collected(self.trainer, module, batch)
            yield batch
            if hasattr(collector, "trained"):  # (the training steps on that batch are done)
                collector.trained()
        self.trainer.should_stop = True

    def training_batches(self) -> Iterator[TensorDict]:
        """What ``training_step`` receives, in order (defined by the on- / off-policy pipelines)."""
        raise NotImplementedError

    @property
    def steps_per_batch(self) -> int:
        """Training steps per collected batch (defined by the on- / off-policy pipelines)."""
        raise NotImplementedError

    @property
    def world_size(self) -> int:
        """The ranks that collect (the trainer's world size; before the fit, :attr:`expected_world_size`)."""
        return self.trainer.world_size if self.trainer is not None else self.expected_world_size

    def check_budget(self, world_size: int) -> None:
        """Check, before any work, that ``total_frames`` gives at least one training step on ``world_size`` ranks.

        Raises:
            ValueError: no training step would run (names ``total_frames``, the batch and any warm-up).
        """
        self.expected_world_size = int(world_size)
        if self.num_training_steps() > 0:
            return
        warmup = getattr(self, "init_random_frames", 0)
        raise ValueError(f"data.init_args.total_frames={self.total_frames} gives no update: the run collects whole "
                         f"batches of data.init_args.collector.frames_per_batch={self.frames_per_batch} frames per "
                         "rank" + (f" and updates after data.init_args.replay_buffer.init_random_frames={warmup} frames"
                                   if warmup else "")
                         + f"; raise total_frames above {max(warmup, self.frames_per_batch * self.world_size)}")

    @property
    def num_batches(self) -> int:
        """Collected batches per rank in the whole run (``total_frames`` rounded up to whole batches)."""
        world = self.world_size
        return -(-self.total_frames // (self.frames_per_batch * world))

    @property
    def planned_frames(self) -> int:
        """Frames the run collects over all ranks: ``total_frames`` rounded up to whole batches."""
        world = self.world_size
        return self.num_batches * self.frames_per_batch * world

    def num_training_steps(self) -> int:
        """Training steps of the whole run: :attr:`num_batches` times :attr:`steps_per_batch`."""
        return self.num_batches * self.steps_per_batch

    def train_dataloader(self) -> DataLoader:
        # identity collate keeps TensorDicts intact; no workers: the collector lives with the live policy.
        # Its own generator: a DataLoader iterator otherwise draws a seed from the global RNG, which
        # would shift the (checkpointed) policy-sampling stream of a resumed run.
        return DataLoader(_Stream(self), batch_size=None, collate_fn=lambda x: x, num_workers=0,
                          generator=torch.Generator())


class _Stream(IterableDataset):
    """The training stream. It has a length (the run's training steps), so Lightning does not fetch
    ahead: nothing is collected before the previous step (and its checkpoint) is done, which keeps
    a resumed run on the same data and RNG stream as an uninterrupted one."""

    def __init__(self, data: FrameStream) -> None:
        self.data = data

    def __iter__(self) -> Iterator:
        return self.data.training_batches()

    def __len__(self) -> int:
        return self.data.num_training_steps()
