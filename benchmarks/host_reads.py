"""Counting, on any device, the reads that would make a CUDA stream wait for the host (host synchronisations).

On a GPU, ``torch.cuda.set_sync_debug_mode("warn")`` reports each synchronisation (``benchmarks/gpu_path.py`` counts
those). On a CPU nothing synchronises, but the code paths are the same, so the same reads can be counted there: a
test can then hold an update to no host read and an env step to at most one without a GPU. :class:`HostReads` counts,
with the source line of the repository that made it:

* a scalar read back: ``bool(t)``, ``int(t)``, ``float(t)``, ``t.item()``, ``if t:`` (``aten._local_scalar_dense``);
* a whole tensor read back: ``t.tolist()``, ``t.numpy()``, ``np.asarray(t)``;
* an op whose output shape depends on the data: ``nonzero``, ``masked_select``, boolean-mask indexing ``t[mask]``,
  ``unique``, ``repeat_interleave`` (counted with or without ``output_size``);
* a tensor built from Python data, ``torch.tensor([...])`` (``aten.lift_fresh``: on a GPU, a copy from the host).

A read made inside a library is named by the library's innermost frame outside torch (e.g. a TorchRL line).

Copies to the CPU (``t.cpu()``) are not seen on a CPU (they are no-ops there). The count is of calls, as the GPU's is.

    with HostReads() as reads:
        module.training_step(batch, 0)
    reads.total, reads.sites.most_common(5)
"""

from __future__ import annotations

import collections
import os
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(HERE))
_READS = {"aten.lift_fresh.default", "aten.lift_fresh_copy.default", "aten._local_scalar_dense.default",
          "aten.nonzero.default", "aten.masked_select.default",
          "aten._unique2.default", "aten.unique_dim.default", "aten.unique_consecutive.default",
          "aten.repeat_interleave.Tensor"}


def _site() -> str:
    """The innermost frame of the repository (outside this file) on the stack, as ``path:line``."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if frame.filename.startswith(ROOT) and frame.filename != HERE and "site-packages" not in frame.filename:
            return f"{os.path.relpath(frame.filename, ROOT)}:{frame.lineno}"
    for frame in reversed(traceback.extract_stack()[:-2]):  # a library's own read: its innermost frame outside torch
        if "/torch/" not in frame.filename and frame.filename != HERE:
            return f"{frame.filename.rpartition('site-packages/')[2]}:{frame.lineno}"
    return "outside the repo"


class HostReads(TorchDispatchMode):
    """A dispatch mode (and ``Tensor.tolist`` / ``numpy`` patch) that counts host reads while it is entered, in the
    thread that entered it. ``total``: the count; ``sites``: ``Counter`` of ``path:line``; ``ops``: of the op."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: collections.Counter = collections.Counter()
        self.ops: collections.Counter = collections.Counter()
        self._saved: dict[str, object] = {}

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    def _count(self, op: str) -> None:
        self.ops[op] += 1
        self.sites[_site()] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name in _READS or (name == "aten.index.Tensor" and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] if i is not None)):
            self._count(name)
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        for method in ("tolist", "numpy", "__array__"):
            original = self._saved[method] = getattr(torch.Tensor, method)

            def counted(tensor, *a, _original=original, _method=method, **k):
                self._count(f"Tensor.{_method}")
                return _original(tensor, *a, **k)

            setattr(torch.Tensor, method, counted)
        return super().__enter__()

    def __exit__(self, *exc):
        for method, original in self._saved.items():
            setattr(torch.Tensor, method, original)
        self._saved = {}
        return super().__exit__(*exc)
