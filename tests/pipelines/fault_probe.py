"""A test callback for the fault tests: once the run has written a checkpoint, it records the learner's and
the rollout workers' process ids (and then raises, when asked to, as a learner fault)."""

from __future__ import annotations

import json
import os
import signal

import lightning as L


class FaultProbe(L.Callback):
    """After the training step that reaches optimiser step ``at_step`` (a training step may take several; the
    checkpoint of an earlier step exists by then), write ``{learner, workers}``
    pids to ``out_file``; with ``raise_error``, raise ``RuntimeError("injected learner fault")`` there instead
    of going on."""

    def __init__(self, out_file: str, at_step: int = 4, raise_error: bool = False) -> None:
        self.out_file = out_file
        self.at_step = at_step
        self.raise_error = raise_error

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step < self.at_step or os.path.exists(self.out_file):
            return
        pids = {"learner": os.getpid(), "workers": list(getattr(trainer.datamodule.collector(), "pids", []))}
        with open(self.out_file + ".tmp", "w") as f:
            json.dump(pids, f)
        os.replace(self.out_file + ".tmp", self.out_file)
        if self.raise_error:
            raise RuntimeError("injected learner fault")


class PoisonBatch(L.Callback):
    """From optimiser step ``from_step`` on, every training batch's rewards are nan (a diverging update)."""

    def __init__(self, from_step: int = 10) -> None:
        self.from_step = from_step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step >= self.from_step:
            batch["next", "reward"] = batch["next", "reward"] * float("nan")


class KillDuringSave(L.Callback):
    """The process kills itself (SIGKILL) halfway through writing its ``save_number``-th checkpoint: that
    ``torch.save`` writes the first half of the checkpoint's bytes to its target (a path or an open file),
    flushes them to disk, and dies (a crash, a power cut or an OOM kill in the middle of a save)."""

    def __init__(self, save_number: int = 2) -> None:
        self.save_number = save_number

    def setup(self, trainer, pl_module, stage: str) -> None:
        import io

        import torch

        save, saves = torch.save, [0]

        def half_write_then_die(obj, f, *args, **kwargs):
            saves[0] += 1
            if saves[0] < self.save_number:
                return save(obj, f, *args, **kwargs)
            buffer = io.BytesIO()
            save(obj, buffer, *args, **kwargs)
            data = buffer.getvalue()[: len(buffer.getvalue()) // 2]
            target = open(f, "wb") if isinstance(f, (str, os.PathLike)) else f
            target.write(data)
            target.flush()
            if hasattr(target, "fileno"):
                os.fsync(target.fileno())
            os.kill(os.getpid(), signal.SIGKILL)

        torch.save = half_write_then_die


class KillAt(L.Callback):
    """SIGKILL this process at the end of the training step that reaches optimiser step ``step`` (after the
    callbacks listed before it, e.g. a checkpoint of an earlier step; nothing after it is written)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class CountBackward(L.Callback):
    """Counts Lightning's ``on_after_backward`` calls in ``calls`` (a callback with a backward hook: the updates go
    through Lightning's ``manual_backward``)."""

    calls = 0

    def on_after_backward(self, trainer, pl_module) -> None:
        type(self).calls += 1
