"""Distributed runtime: process groups, launch, metered collectives with autograd, shared memory.

Sits above ``graph`` and ``partition`` and below everything that communicates. Every
communication function takes its group (or :class:`Communicator`) explicitly.
"""

from fleetgnn.distributed.comm import AllToAllHandle, Communicator, check_views
from fleetgnn.distributed.context import DistContext, destroy, init
from fleetgnn.distributed.errors import (
    CollectiveMismatch,
    DistError,
    WorkerFailed,
    WorkerUserError,
)
from fleetgnn.distributed.launch import launch, restart_info
from fleetgnn.distributed.shm import (
    SHM_PREFIX,
    ShardedTensor,
    SharedTensor,
    shm_dir,
    sweep_stale_segments,
)
from fleetgnn.distributed.traffic import LINK_KINDS, TrafficMeter, TrafficSnapshot

__all__ = [
    "LINK_KINDS",
    "SHM_PREFIX",
    "AllToAllHandle",
    "CollectiveMismatch",
    "Communicator",
    "DistContext",
    "DistError",
    "ShardedTensor",
    "SharedTensor",
    "TrafficMeter",
    "TrafficSnapshot",
    "WorkerFailed",
    "WorkerUserError",
    "check_views",
    "destroy",
    "init",
    "launch",
    "restart_info",
    "shm_dir",
    "sweep_stale_segments",
]
