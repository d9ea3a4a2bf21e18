"""run_world: results by rank, and a raising rank aborts the world with its traceback."""

import os

import pytest

from fleetgnn.distributed import DistError, WorkerFailed
from fleetgnn.distributed.testing import run_world


def _raise_on_last(comm, marker: str):
    if comm.rank == comm.world_size - 1:
        raise KeyError(marker)
    comm.barrier()  # blocks until the world is torn down
    return os.getpid()


@pytest.mark.slow
def test_failing_rank_is_reported_with_its_traceback():
    with pytest.raises(WorkerFailed) as info:
        run_world(_raise_on_last, 2, "marker-31415", timeout_s=60)
    failures = info.value.failures
    assert 1 in failures and "KeyError: 'marker-31415'" in failures[1]
    assert "Traceback" in failures[1] and "_raise_on_last" in failures[1]
    assert str(info.value).startswith("run_world rank failed on rank 1: ")


def test_bad_world_size():
    with pytest.raises(DistError, match="at least 1"):
        run_world(_raise_on_last, 0, "x")
