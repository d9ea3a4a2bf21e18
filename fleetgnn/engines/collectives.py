"""Small collective helpers of the engines' file work: one error on every rank, agreed values.

Used by streaming inference (:mod:`fleetgnn.engines.inference`), the offload engine's host
files and ``predict``/``embed``. Every helper takes the communicator explicitly (``None``: one
process) and is collective when it spans several ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fleetgnn.errors import FleetgnnError


def world_of(comm: Any) -> tuple[int, int]:
    """``(world_size, rank)`` of ``comm`` (``(1, 0)`` without one)."""
    if comm is None:
        return 1, 0
    return int(comm.world_size), int(comm.rank)


def agreed(comm: Any, fn: Callable[[], Any], *, everywhere: bool) -> Any:
    """``fn()`` on rank 0 (its value broadcast) or on every rank; every rank raises one error.

    Collective with a multi-rank ``comm`` (one ``broadcast_object`` or ``all_gather_object``).

    A :class:`~fleetgnn.errors.FleetgnnError` (a full disk) raised on any rank is raised on
    every rank, so no rank waits forever in the next collective.
    """
    world, rank = world_of(comm)
    err: FleetgnnError | None = None
    value = None
    if everywhere or rank == 0:
        try:
            value = fn()
        except FleetgnnError as e:
            err = e
    if world > 1:
        if everywhere:
            errors = comm.all_gather_object(err)
            err = err or next((e for e in errors if e is not None), None)
        else:
            err, value = comm.broadcast_object((err, value))
    if err is not None:
        raise err
    return value


def barrier(comm: Any) -> None:
    """A barrier over a multi-rank ``comm`` (nothing for one process)."""
    if comm is not None and comm.world_size > 1:
        comm.barrier()


def max_over_ranks(comm: Any, n: int, device: torch.device | str) -> int:
    """The largest ``n`` over the ranks (one ``all_reduce(max)``; ``n`` for one process)."""
    if comm is None or comm.world_size == 1:
        return n
    t = torch.tensor([n], dtype=torch.int64, device=device)
    comm.all_reduce(t, op="max")
    return int(t.item())
