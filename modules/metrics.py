"""The metrics of an algorithm module: values recorded during a collected batch's updates, averaged, reduced over
DDP ranks and written to every logger with the x-axis = collected frames."""

from __future__ import annotations

import time

import torch
from torch import Tensor


class MetricLogging:
    """The metric methods :class:`modules.base.RLModule` has from here (a mixin before ``LightningModule``): they
    use its ``collected_frames`` and the sums, counts and clock it sets up."""

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

    def _world_size(self) -> int:
        return self.trainer.world_size if self._trainer is not None else 1

    def _sum_over_ranks(self):
        """A function that sums a tensor over DDP ranks (a collective), or None in one process."""
        if self._world_size() == 1:
            return None
        return lambda tensor: self.trainer.strategy.reduce(tensor, reduce_op="sum")

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
            metrics = dict(zip(names, values.tolist(), strict=True))
            metrics.update({"time/frames": float(frames), "time/optim_steps": float(self.trainer.global_step)})
            if self.trainer.is_global_zero:
                for logger in self.loggers:
                    logger.log_metrics(metrics, step=frames)
            self.latest_metrics = metrics
        self._sums.clear()
        self._counts.clear()

    def on_train_end(self) -> None:
        self.flush_metrics()
