"""One spawned gloo world per world size, shared by test_comm and test_shm (processes are the
expensive part of these tests): each rank runs both modules' checks and returns their results."""

import functools
import uuid

from fleetgnn.distributed.testing import run_world

_SESSION = uuid.uuid4().hex[:8]


def session_tag(ws: int) -> str:
    """Prefix of every shared-tensor name the world of size ``ws`` creates in this session."""
    return f"t{_SESSION}w{ws}"


def _both(comm, tag: str) -> dict:
    from . import test_comm, test_shm

    return {"comm": test_comm.comm_checks(comm), "shm": test_shm.shm_checks(comm, tag)}


@functools.cache
def world(ws: int) -> list[dict]:
    return run_world(_both, ws, session_tag(ws))
