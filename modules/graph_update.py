"""The whole optimiser update of a minibatch as one CUDA graph (``model.cuda_graph``): forward, loss, backward,
gradient clip and the fused Adam step captured once and replayed, as LeanRL runs CleanRL's updates (tensordict's
``CudaGraphModule`` around a function that ends in ``optimizer.step()``, with a capturable Adam whose learning
rate is a device tensor)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from tensordict import TensorDict
from tensordict.nn import CudaGraphModule

from modules.compat import exclude_tensordict_from_pytree, optimizer_progress

# a capture needs the optimiser's lazy state (made by its first step) and the kernels' first runs behind it:
# the first call runs eagerly on a side stream, the second runs eagerly once more and is captured, the rest replay
WARMUP_CALLS = 2


def graph_adam(params, lr: float, device: torch.device) -> torch.optim.Adam:
    """The fused Adam of the updates, its learning rate a tensor on ``device`` and, on CUDA, ``capturable`` (its step
    count on the device): a captured step reads the rate from device memory, so the schedulers' in-place updates
    (``fill_``) reach the replays. ``initial_lr`` is kept a float, so that a scheduler's step computes the new rate
    on the host, not from the tensor (which would read the device each step). The CUDA kernels read a float32 rate
    (a relative rounding of about 3e-8 against the plain optimiser's float); elsewhere the fused Adam reads the
    tensor as a host number, kept float64 so the update is the plain optimiser's to the bit."""
    cuda = torch.device(device).type == "cuda"
    rate = torch.tensor(float(lr), dtype=torch.float32 if cuda else torch.float64, device=device)
    optimizer = torch.optim.Adam(params, lr=rate, fused=True, capturable=cuda)
    for group in optimizer.param_groups:
        group["initial_lr"] = float(lr)
    return optimizer


class GraphedUpdate:
    """``update(minibatch, optimizer)`` replayed as one CUDA graph per optimiser (a new optimiser, e.g. a new fit's,
    gets a new graph).

    ``update`` takes a minibatch ``TensorDict`` ``[N]`` (N fixed: every minibatch of a run has the same frames) and
    the torch optimiser, runs the loss, the backward, the clip and ``optimizer.step()`` with no host read and no
    data-dependent Python branch, and returns a ``TensorDict`` of detached results (the metrics); each call returns
    a copy of them (``CudaGraphModule``'s clone), which later replays do not overwrite. Lightning's count of optimiser
    steps (``trainer.global_step``) advances by one per call, outside the graph. On a device other than CUDA the same
    function runs as it is, without a graph (``tests/modules/test_graph_update.py`` checks it gives the plain update's
    weights there).

    Building one removes TensorDict from torch's pytree registry for the whole process (``CudaGraphModule`` needs
    it: its inputs are copied into the captured leaves as a TensorDict, not flattened).
    """

    def __init__(self, update: Callable[[TensorDict, torch.optim.Optimizer], TensorDict], optimizer) -> None:
        self.optimizer = optimizer  # the LightningOptimizer (its progress calls), or a torch optimiser
        self.raw = getattr(optimizer, "optimizer", optimizer)
        self.update = update
        self._graph: CudaGraphModule | None = None

    def _step(self, minibatch: TensorDict) -> TensorDict:
        return self.update(minibatch, self.raw)

    def __call__(self, minibatch: TensorDict) -> TensorDict:
        """One update on ``minibatch``: the graph's replay on CUDA, the function itself elsewhere."""
        if minibatch.device is None or minibatch.device.type != "cuda":
            return optimizer_progress(self.optimizer, lambda: self._step(minibatch))
        if self._graph is None:
            for group in self.raw.param_groups:  # (a resumed run's optimiser state may hold a float or a CPU rate)
                group["lr"] = torch.as_tensor(group["lr"], dtype=torch.float32, device=minibatch.device)
                group["capturable"] = True
            exclude_tensordict_from_pytree()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (its prototype notice)
                self._graph = CudaGraphModule(self._step, warmup=WARMUP_CALLS, in_keys=[], device=minibatch.device)
        return optimizer_progress(self.optimizer, lambda: self._graph(minibatch))
