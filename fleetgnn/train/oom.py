"""A CUDA out-of-memory error as one line: which rank, which device, in which phase, what fits.

``torch.cuda.OutOfMemoryError`` is a paragraph about the caching allocator, raised from deep in a
step, on one rank of many. :func:`device_memory_guard` turns it into a
:class:`~fleetgnn.errors.DeviceMemoryError` (a user error: one line, exit status 2) that names
the rank, the device, the phase the run was in (set up, which epoch and step, evaluation), the
bytes torch tried to allocate, the setting of this engine that lowers its device memory, and
``fleetgnn plan``, which predicts the memory of every engine for the run.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import torch

from fleetgnn.errors import DeviceMemoryError

__all__ = ["DEVICE_MEMORY_FIXES", "Phase", "describe_oom", "device_memory_guard"]

#: Per engine, the settings that lower its device memory.
DEVICE_MEMORY_FIXES: dict[str, str] = {
    "reference": "train it in mini-batch mode (--mode minibatch), or on a distributed engine",
    "minibatch": "lower train.batch_size, train.fanouts or store.device_budget",
    "split": "lower train.batch_size, train.fanouts or store.device_budget",
    "fullgraph": "use more ranks (--nproc), or the offload engine (vertex data in host memory)",
    "offload": "lower offload.device_budget (more, smaller chunks)",
}


class Phase:
    """Where a run is, for the message: ``"setup"`` until a Trainer reports its own ``phase``.

    Attributes:
        trainer: The run's Trainer once built (its ``phase`` says epoch and step), else None.
    """

    def __init__(self) -> None:
        self.trainer: Any = None

    def __str__(self) -> str:
        phase = getattr(self.trainer, "phase", None)
        return str(phase) if phase else "setup (building the engine)"


def describe_oom(error: BaseException, engine: str, rank: int, device: Any, phase: Any) -> str:
    """The one-line message of a CUDA out-of-memory ``error`` (see the module doc)."""
    tried = re.search(r"[Tt]ried to allocate ([0-9.]+ ?[KMGT]?i?B)", str(error))
    what = f" (tried to allocate {tried.group(1)})" if tried else ""
    fix = DEVICE_MEMORY_FIXES.get(engine, "lower the batch size or the model's width")
    return (
        f"rank {rank} ran out of device memory on {device} during {phase}{what} with the {engine} "
        f"engine; {fix}; 'fleetgnn plan --dataset DIR --nproc N' predicts what each engine needs"
    )


@contextlib.contextmanager
def device_memory_guard(engine: str, rank: int, device: Any) -> Iterator[Phase]:
    """Re-raise a ``torch.cuda.OutOfMemoryError`` inside the block as a one-line user error.

    Yields the run's :class:`Phase`: set its ``trainer`` once the Trainer exists.

    Raises:
        DeviceMemoryError: The block ran out of CUDA memory.
    """
    phase = Phase()
    try:
        yield phase
    except torch.cuda.OutOfMemoryError as e:
        raise DeviceMemoryError(describe_oom(e, engine, rank, device, phase)) from None
