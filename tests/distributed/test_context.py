"""init()/destroy() in a single process (real one-rank gloo group) and argument checks; init()
under the launcher's environment is exercised by test_launch.py."""

import os

import pytest
import torch
import torch.distributed as dist

from fleetgnn.distributed import DistError, destroy, init


def test_single_process_group_is_real_and_destroyed(no_launcher):
    ctx = init(backend="gloo")
    try:
        assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.local_world_size) == (0, 1, 0, 1)
        assert ctx.backend == "gloo" and ctx.device == torch.device("cpu") and ctx.same_host
        assert "backend='gloo'" in repr(ctx)
        comm = ctx.communicator()
        t = comm.all_reduce_sum(torch.tensor([2.5], dtype=torch.float64))
        assert t.item() == 2.5
        out, recv = comm.all_to_all(torch.arange(6.0).reshape(3, 2), [3])
        assert recv == [3] and torch.equal(out, torch.arange(6.0).reshape(3, 2))
        assert comm.all_gather_object("x") == ["x"]
        # a second init() finds the group and does not own it
        again = init()
        assert not again.owns_group and again.world_size == 1
        destroy(again)
        assert dist.is_initialized()
    finally:
        destroy(ctx)
    assert not dist.is_initialized()
    assert ctx.store_dir is not None and not os.path.exists(ctx.store_dir)


def test_default_backend_matches_hardware(no_launcher):
    ctx = init()
    try:
        assert ctx.backend == ("nccl" if torch.cuda.is_available() else "gloo")
    finally:
        destroy(ctx)


def test_invalid_arguments(no_launcher, monkeypatch):
    with pytest.raises(DistError, match="valid backends are gloo, nccl"):
        init(backend="mpi")
    with pytest.raises(DistError, match="timeout"):
        init(timeout_s=0)
    if not torch.cuda.is_available():
        with pytest.raises(DistError, match="needs CUDA"):
            init(backend="nccl")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(DistError, match="WORLD_SIZE"):
        init()
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(DistError, match="not an integer"):
        init()
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "5")
    with pytest.raises(DistError, match="inconsistent launcher variables"):
        init()
    assert not dist.is_initialized()


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_destroy_stops_the_groups_threads_while_a_cycle_holds_them(no_launcher):
    """A group object alive at interpreter exit let gloo's worker threads abort a rank
    ("terminate called without an active exception") in two-process runs; destroy() must stop
    them even while an engine-like reference cycle still holds the context and communicators."""
    before = _threads()
    ctx = init(backend="gloo")
    comm = ctx.communicator()
    sub = comm.host_group([0])  # a group of its own, as an engine's store group is
    holder: dict = {"ctx": ctx, "comm": comm, "sub": sub}
    holder["self"] = holder  # a cycle: collected only by the garbage collector
    sub.all_reduce_sum(torch.ones(3))
    comm.all_reduce_sum(torch.ones(3))
    assert _threads() > before  # each group runs worker threads of its own
    sub.destroy()
    destroy(ctx)
    assert _threads() == before
    with pytest.raises(DistError, match="destroyed"):
        sub.all_reduce_sum(torch.ones(3))
