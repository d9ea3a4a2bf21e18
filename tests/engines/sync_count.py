"""Counting on the CPU the aten ops a code path issues, and those that would make a GPU host wait.

:class:`SyncCounter` is a ``TorchDispatchMode``: every aten op the thread that entered it
dispatches goes through it (modes are per thread: a prefetch thread is counted by entering a
counter of its own there). An op *syncs* when, on an accelerator, its result cannot be known by
the host without waiting for the device:

- ``_local_scalar_dense`` (``item()``, ``float()``, ``int()``, ``bool()`` of a tensor);
- ops whose output size depends on the data: ``nonzero``, ``masked_select``, ``unique`` and
  its variants, indexing with a boolean mask, ``repeat_interleave`` without ``output_size``,
  ``bincount`` (CUDA's reads the input's maximum even with ``minlength``).

Host reads that bypass the dispatcher (``tolist()``, ``numpy()`` of a CPU tensor) are not
seen. The counted paths must read device values only through staged host buffers
(:class:`~fleetgnn.engines.marks.PendingStepStats`), after the step, outside the counted region.
"""

from __future__ import annotations

import collections
import traceback
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SYNC_OPS = frozenset(
    {
        "aten._local_scalar_dense.default",
        "aten.nonzero.default",
        "aten.masked_select.default",
        "aten._unique.default",
        "aten._unique2.default",
        "aten.unique_dim.default",
        "aten.unique_consecutive.default",
        "aten.bincount.default",
    }
)


def _syncs(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if name in SYNC_OPS:
        return True
    if name.startswith("aten.repeat_interleave.Tensor"):
        return kwargs.get("output_size") is None and (len(args) < 4 or args[3] is None)
    if name == "aten.index.Tensor":
        return any(i is not None and i.dtype == torch.bool for i in args[1])
    return False


class SyncCounter(TorchDispatchMode):
    """Counts aten ops and syncing ops (with where in fleetgnn each sync came from)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.syncs = 0
        self.where: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: D105
        kwargs = kwargs or {}
        self.ops += 1
        if _syncs(str(func), args, kwargs):
            self.syncs += 1
            frames = [f for f in traceback.extract_stack()[:-1] if "/fleetgnn/" in f.filename]
            at = (
                f"{frames[-1].filename.split('/fleetgnn/')[-1]}:{frames[-1].lineno}"
                if frames
                else "?"
            )
            self.where[f"{func} at {at}"] += 1
        return func(*args, **kwargs)

    @staticmethod
    def check_sees_syncs() -> None:
        """The counter counts what it must: a scalar read, a mask, a data-sized output."""
        t = torch.arange(6.0)
        with SyncCounter() as c:
            float(t.sum())
            t[t > 2]
            torch.nonzero(t)
            torch.repeat_interleave(torch.tensor([1, 2]))
            torch.repeat_interleave(torch.tensor([1, 2]), output_size=3)  # not a sync
            torch.bincount(torch.tensor([0, 2]), minlength=4)
            t.mul(2).add(1)
        assert c.syncs == 5, c.where
        assert c.ops >= 7
