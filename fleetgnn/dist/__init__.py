"""Distributed runtime: process groups, launch, metered collectives with autograd, shared memory.

Sits above ``graph`` and ``partition`` and below everything that communicates. Every
communication function takes its group (or :class:`Communicator`) explicitly.
"""

from fleetgnn.dist.comm import AllToAllHandle, Communicator, check_views
from fleetgnn.dist.context import DistContext, destroy, init
from fleetgnn.dist.errors import CollectiveMismatch, DistError, WorkerFailed
from fleetgnn.dist.launch import launch
from fleetgnn.dist.shm import (
    SHM_PREFIX,
    ShardedTensor,
    SharedTensor,
    shm_dir,
    sweep_stale_segments,
)
from fleetgnn.dist.traffic import LINK_KINDS, TrafficMeter, TrafficSnapshot

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
    "check_views",
    "destroy",
    "init",
    "launch",
    "shm_dir",
    "sweep_stale_segments",
]
