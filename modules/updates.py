"""One optimiser update of an algorithm module: its loss (through ``torch.compile`` where asked), the backward,
gradient clipping and the step, with non-finite updates skipped and counted."""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L
import torch
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import SingleDeviceStrategy
from lightning.pytorch.utilities.model_helpers import is_overridden
from tensordict import TensorDict
from torch import Tensor

from modules.compat import optimizer_step_between_hooks, tree_map
from modules.graph_update import GraphedUpdate

COMPILE_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # torch.compile modes that replay CUDA graphs on a GPU


def lightning_adds_only_hooks(module: L.LightningModule, trainer: L.Trainer) -> bool:
    """Whether Lightning's backward and optimiser step would add nothing to torch's in ``trainer``'s fit but calls of
    hooks nobody overrides: a ``SingleDeviceStrategy``, the default full precision (``Precision``: no scaler, no
    autocast), and no callback or ``module`` overriding ``on_before_backward``, ``on_after_backward``,
    ``on_before_optimizer_step`` or (the module) ``backward``."""
    hooks = ("on_before_backward", "on_after_backward", "on_before_optimizer_step")
    return (type(trainer.strategy) is SingleDeviceStrategy and type(trainer.precision_plugin) is Precision
            and not any(is_overridden(h, c, L.Callback) for c in trainer.callbacks for h in hooks)
            and not any(is_overridden(h, module, L.LightningModule) for h in (*hooks, "backward")))


class OptimiserUpdates:
    """The update methods :class:`modules.base.RLModule` has from here (a mixin before ``LightningModule``): they
    use its ``loss``, ``compile_options`` and the counters of non-finite updates it sets up."""

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

    def optimizer_update(self, optimizer, loss: Tensor, max_grad_norm: float) -> Tensor:
        """One update: zero the gradients, the backward of ``loss``, clip the global gradient norm of the
        optimiser's parameters at ``max_grad_norm``, step. Returns the norm before clipping (a 0-dim tensor).

        An update whose loss or gradient norm is not finite is skipped (the weights and the optimiser's state stay
        as they were) and counted: :attr:`nonfinite_updates` in all, :attr:`consecutive_nonfinite` since the last
        finite one (device tensors; ``callbacks.NonFiniteGuard`` reads them once per training step and stops a run
        that keeps producing them). A fused Adam skips on the device (its ``found_inf``, as under a gradient
        scaler: no host sync); any other optimiser reads the flag back once per update.

        The backward and the step go through Lightning (``manual_backward``, ``LightningOptimizer.step``), or straight
        to torch where Lightning would add nothing but its hook calls (:meth:`direct_update`)."""
        norm, found = self.apply_update(optimizer, loss, max_grad_norm, self.direct_update())
        self.count_nonfinite(found)
        return norm

    def apply_update(self, optimizer, loss: Tensor, max_grad_norm: float, direct: bool) -> tuple[Tensor, Tensor]:
        """:meth:`optimizer_update` without the counting: returns the norm before clipping and whether the update was
        skipped (both 0-dim tensors). ``optimizer``: a ``LightningOptimizer``, or a torch optimiser (then ``direct``:
        the step is torch's alone, as inside a captured graph, :class:`modules.graph_update.GraphedUpdate`)."""
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
        return norm, found

    def count_nonfinite(self, found: Tensor) -> None:
        """Add an update's skip flag ``found`` (a 0-dim bool tensor) to the counters of non-finite updates."""
        self.nonfinite_updates = self.nonfinite_updates + found
        self.consecutive_nonfinite = (self.consecutive_nonfinite + 1) * found

    def minibatch_steps(self, minibatches, optimizer, scheduler, losses: Sequence[str], recorded: Sequence[str],
                        max_grad_norm: float) -> list[Tensor]:
        """One update (:meth:`minibatch_update`) and one learning-rate step per minibatch of ``minibatches``, in
        order; with ``cuda_graph`` each update a replay of its CUDA graph (:meth:`graphed_update`). Returns each
        update's row ``[len(recorded) + 2]``: the ``recorded`` values of the loss's results, the loss (the sum of its
        ``losses``) and the gradient norm before clipping."""
        def update(minibatch, optimizer_, direct=True):
            return self.minibatch_update(minibatch, optimizer_, losses, recorded, max_grad_norm, direct)

        graph = self.graphed_update(optimizer, update) if self.cuda_graph else None
        rows = []
        for minibatch in minibatches:
            out = update(minibatch, optimizer, self.direct_update()) if graph is None else graph(minibatch)
            self.count_nonfinite(out["skipped"])
            scheduler.step()
            rows.append(out["row"])
        return rows

    def minibatch_update(self, minibatch: TensorDict, optimizer, losses: Sequence[str], recorded: Sequence[str],
                         max_grad_norm: float, direct: bool = True) -> TensorDict:
        """The update of one minibatch: :meth:`update_loss`, the sum of its ``losses``, then :meth:`apply_update`.
        Returns ``row`` (as :meth:`minibatch_steps`) and ``skipped`` (a non-finite update, not applied), with no host
        read: what a CUDA graph captures."""
        out = self.update_loss(minibatch)
        loss = out[losses[0]]
        for key in losses[1:]:
            loss = loss + out[key]
        grad_norm, skipped = self.apply_update(optimizer, loss, max_grad_norm, direct)
        # (each one value: reshape, not mean, saves a kernel per metric and update)
        row = torch.stack([*(out[k].detach().reshape(()) for k in recorded), loss.detach(), grad_norm])
        return TensorDict(row=row, skipped=skipped)

    def graphed_update(self, optimizer, update) -> GraphedUpdate:
        """``update(minibatch, torch_optimizer) -> TensorDict`` as one CUDA graph for ``optimizer``
        (:class:`modules.graph_update.GraphedUpdate`, ``model.cuda_graph``), built once per optimiser."""
        raw = getattr(optimizer, "optimizer", optimizer)
        if self._graphed_update is None or self._graphed_update.raw is not raw:
            self._graphed_update = GraphedUpdate(update, optimizer)
        return self._graphed_update

    def direct_update(self) -> bool:
        """Whether Lightning's ``manual_backward`` and optimiser step would add nothing to torch's ``loss.backward()``
        and ``optimizer.step()`` in this fit but calls of hooks nobody overrides (:func:`lightning_adds_only_hooks`).
        Then :meth:`optimizer_update` calls torch itself, keeping Lightning's count of optimiser steps
        (``trainer.global_step``): on a CPU Lightning's hook calls took about 0.1 ms of a 1.7 ms DQN update
        (``benchmarks/update_overhead.py``; tested to give the same weights as Lightning's path). Decided once per
        trainer; False without one."""
        trainer = self._trainer
        if trainer is None:
            return False
        if self._direct_update is None or self._direct_update[0] is not trainer:
            self._direct_update = (trainer, lightning_adds_only_hooks(self, trainer))
        return self._direct_update[1]

    @staticmethod
    def _step(optimizer, direct: bool) -> None:
        """``optimizer.step()`` of a ``LightningOptimizer``; with ``direct`` (:meth:`direct_update`) the wrapped torch
        optimiser's step between the manual loop's own progress calls (what ``LightningOptimizer.step`` makes of it,
        less the strategy's and precision plugin's hook calls); a torch optimiser's own step."""
        if not direct or not hasattr(optimizer, "optimizer"):
            optimizer.step()
            return
        optimizer_step_between_hooks(optimizer)
