"""launch(): torch's elastic launcher on loopback, return values by rank, short WorkerFailed
reports, and group restarts after a SIGKILLed worker."""

import os
import signal

import pytest
import torch

from fleetgnn.distributed import DistError, WorkerFailed, destroy, init, launch


def _job(mode: str) -> tuple:
    ctx = init(timeout_s=60)
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    comm = ctx.communicator()
    if mode == "kill" and attempt == 0 and ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # first attempt only
    total = comm.all_reduce_sum(torch.tensor([ctx.rank + 1.0], dtype=torch.float64)).item()
    out = (ctx.rank, ctx.world_size, total, attempt, ctx.local_rank, ctx.local_world_size)
    destroy(ctx)
    return out


def _raises_on_rank_1() -> int:
    if int(os.environ["RANK"]) == 1:
        raise RuntimeError("boom from the second worker")
    return 0


def test_restart_after_sigkill_then_results_by_rank():
    out = launch(_job, ("kill",), nproc=2, max_restarts=1)
    # (rank, world_size, all_reduce sum 1 + 2, attempt, local_rank, local_world_size)
    assert out == {0: (0, 2, 3.0, 1, 0, 2), 1: (1, 2, 3.0, 1, 1, 2)}


def test_worker_failure_names_the_rank_and_error():
    with pytest.raises(WorkerFailed) as info:
        launch(_raises_on_rank_1, nproc=2, max_restarts=0)
    err = info.value
    assert list(err.failures) == [1]
    assert "RuntimeError: boom from the second worker" in err.failures[1]
    msg = str(err)
    assert "rank(s) 1" in msg and "boom from the second worker" in msg
    assert len(msg.splitlines()) <= 4  # a summary, not the launcher's dump


def test_invalid_arguments_fail_before_spawning():
    with pytest.raises(DistError, match="pickled"):
        launch(lambda: 0, nproc=2)
    with pytest.raises(DistError, match="nproc"):
        launch(_raises_on_rank_1, nproc=0)
    with pytest.raises(DistError, match="max_restarts"):
        launch(_raises_on_rank_1, max_restarts=-1)
