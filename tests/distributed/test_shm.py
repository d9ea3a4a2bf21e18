"""Distributed shared memory: ShardedTensor gathers (one-sided and two-sided) are bit-exact against
plain indexing of the concatenated data, traffic equals its closed form, SharedTensor maps one
copy, and no /dev/shm segment survives normal runs, failed creates or a SIGKILLed rank."""

import os
import signal
import uuid

import pytest
import torch

from fleetgnn.distributed import (
    SHM_PREFIX,
    DistError,
    ShardedTensor,
    SharedTensor,
    WorkerFailed,
    shm_dir,
)
from fleetgnn.distributed.testing import run_world

from . import worlds

TRAILING = (2, 3)
ROW = 2 * 3 * 8  # float64 row bytes
ROWS = {1: [4], 2: [5, 2], 3: [3, 0, 4], 4: [2, 3, 0, 1]}  # rows per rank, with empty shards


def segments(tag: str) -> list[str]:
    """Segment files whose shared-tensor name starts with ``tag``."""
    return sorted(f for f in os.listdir(shm_dir()) if f.startswith(SHM_PREFIX + tag))


def full(ws: int) -> torch.Tensor:
    n = sum(ROWS[ws])
    return torch.arange(n * 6, dtype=torch.float64).reshape(n, *TRAILING) / 7


def local_part(ws: int, rank: int) -> torch.Tensor:
    start = sum(ROWS[ws][:rank])
    return full(ws)[start : start + ROWS[ws][rank]].clone()


def owner_of(ws: int, ids: torch.Tensor) -> torch.Tensor:
    offs = torch.tensor([0] + ROWS[ws]).cumsum(0)
    return torch.searchsorted(offs[1:], ids, right=True)


def id_cases(ws: int, rank: int) -> dict[str, torch.Tensor]:
    """Rank-dependent requests: duplicates, empty, all-local, all-remote, random."""
    n = sum(ROWS[ws])
    offs = [0] + list(torch.tensor(ROWS[ws]).cumsum(0).tolist())
    mine = torch.arange(offs[rank], offs[rank + 1])
    others = torch.tensor([i for i in range(n) if not offs[rank] <= i < offs[rank + 1]])
    g = torch.Generator().manual_seed(rank)
    return {
        "duplicates": torch.tensor([n - 1, 0, n - 1, 0, 0, n // 2]),
        "empty": torch.zeros(0, dtype=torch.int64),
        "all_local": mine.repeat(2).flip(0),
        "all_remote": others[torch.randint(0, max(len(others), 1), (7,), generator=g)]
        if len(others)
        else torch.zeros(0, dtype=torch.int64),
        "random": torch.randint(0, n, (13 + rank,), generator=g),
    }


def shm_checks(comm, tag: str) -> dict:
    ws, rank, meter = comm.world_size, comm.rank, comm.meter
    res: dict = {"cases": {}}
    probe = os.path.join(shm_dir(), f"{SHM_PREFIX}{tag}probe{rank}")  # the listing can see files
    open(probe, "w").close()
    res["probe_seen"] = os.path.basename(probe) in segments(tag)
    os.unlink(probe)
    comm.barrier()
    local = local_part(ws, rank)
    one = ShardedTensor.create(local, comm, name=tag + "a", directory=None)
    two = ShardedTensor.create(local, comm, name=tag + "b", one_sided=False)
    res["segments_after_create"] = segments(tag)
    res["repr"] = repr(one)
    res["shards_equal"] = [torch.equal(s, local_part(ws, p)) for p, s in enumerate(one.shards)]
    ref = full(ws)
    for case, ids in id_cases(ws, rank).items():
        owner = owner_of(ws, ids)
        offs = torch.tensor([0] + ROWS[ws]).cumsum(0)
        out3 = one.gather(owner, ids - offs[owner])
        meter.reset()
        s0 = meter.snapshot()
        out1 = one.gather_global(ids)
        s1 = meter.snapshot()
        out2 = two.gather_global(ids)
        res["cases"][case] = {
            "one_exact": out1.shape == (len(ids), *TRAILING) and torch.equal(out1, ref[ids]),
            "two_exact": torch.equal(out2, ref[ids]),
            "owner_form": torch.equal(out3, out1),
            "one_traffic": {k: {m: s1[k][m] - s0[k][m] for m in s1[k]} for k in s1},
            "two_traffic": meter.delta(s1),
        }
    # invalid ids fail clearly (one-sided: locally)
    try:
        one.gather_global(torch.tensor([sum(ROWS[ws])]))
        res["bad_id"] = None
    except DistError as e:
        res["bad_id"] = str(e)
    # a rank-local shared copy
    owner = ws - 1
    data = torch.arange(10, dtype=torch.int32).reshape(5, 2) if rank == owner else None
    shared = SharedTensor.create(data, comm, name=tag + "c", owner=owner)
    res["shared"] = shared.tensor.clone()
    res["shared_writable"] = bool(shared.tensor.untyped_storage().data_ptr()) and rank == owner
    res["segments_after_shared"] = segments(tag)
    # failed creates raise on every rank and leave nothing behind
    bad_trailing = local if rank else local.reshape(local.shape[0], 6)
    try:
        ShardedTensor.create(bad_trailing, comm, name=tag + "d")
        res["mismatch"] = None
    except DistError as e:
        res["mismatch"] = str(e)
    if ws >= 2:  # the last rank cannot write its segment; rank 0 wrote its own
        directory = "/nonexistent-fleetgnn-dir" if rank == ws - 1 else None
        try:
            ShardedTensor.create(
                local_part(ws, rank) + 1, comm, name=tag + "e", directory=directory
            )
            res["write_fail"] = None
        except DistError as e:
            res["write_fail"] = str(e)
    comm.barrier()
    res["segments_after_failures"] = segments(tag)
    one.close()
    two.close()
    shared.close()
    try:
        one.gather_global(torch.tensor([0]))
        res["closed"] = None
    except DistError as e:
        res["closed"] = str(e)
    return res


def world(ws: int) -> list[dict]:
    return [res["shm"] for res in worlds.world(ws)]


WS = [1, 2, 3, 4]


@pytest.mark.slow
@pytest.mark.parametrize("ws", WS)
def test_gather_is_bit_exact_one_and_two_sided(ws):
    for res in world(ws):
        assert all(res["shards_equal"])
        for case, r in res["cases"].items():
            assert r["one_exact"], case
            assert r["two_exact"], case
            assert r["owner_form"], case


@pytest.mark.slow
@pytest.mark.parametrize("ws", WS)
def test_gather_traffic_closed_forms(ws):
    results = world(ws)
    cases = {r: id_cases(ws, r) for r in range(ws)}
    for rank, res in enumerate(results):
        for case, r in res["cases"].items():
            own = owner_of(ws, cases[rank][case])
            n_local = int((own == rank).sum())
            remote_owners = {int(o) for o in own.tolist() if o != rank}
            one = r["one_traffic"]
            assert (one["local"]["bytes"], one["local"]["messages"]) == (
                n_local * ROW,
                int(n_local > 0),
            )
            assert (one["peer"]["bytes"], one["peer"]["messages"]) == (
                (len(own) - n_local) * ROW,
                len(remote_owners),
            )
            # two-sided: counts (8 B per rank), ids (8 B each) to owners, rows back
            req = [
                [int((owner_of(ws, cases[i][case]) == j).sum()) for j in range(ws)]
                for i in range(ws)
            ]
            ids_remote = sum(req[rank][j] for j in range(ws) if j != rank)
            ids_msgs = sum(1 for j in range(ws) if j != rank and req[rank][j])
            rows_remote = sum(req[i][rank] for i in range(ws) if i != rank)
            rows_msgs = sum(1 for i in range(ws) if i != rank and req[i][rank])
            two = r["two_traffic"]
            assert two["peer"] == {
                "bytes": 8 * (ws - 1) + 8 * ids_remote + ROW * rows_remote,
                "messages": (ws - 1) + ids_msgs + rows_msgs,
            }
            self_rows = req[rank][rank]
            assert two["local"] == {
                "bytes": 8 + 8 * self_rows + ROW * self_rows,
                "messages": 1 + 2 * int(self_rows > 0),
            }
            assert all(two[k] == {"bytes": 0, "messages": 0} for k in ("net", "h2d", "d2h", "disk"))


@pytest.mark.slow
@pytest.mark.parametrize("ws", WS)
def test_shared_tensor_and_errors(ws):
    for _rank, res in enumerate(world(ws)):
        assert torch.equal(res["shared"], torch.arange(10, dtype=torch.int32).reshape(5, 2))
        assert "out of range" in res["bad_id"] and f"[0, {sum(ROWS[ws])})" in res["bad_id"]
        if ws >= 2:
            assert "disagree on trailing" in res["mismatch"]
            assert f"rank {ws - 1}: writing the shard" in res["write_fail"]
        assert "closed" in res["closed"]
        assert "rows_per_rank=" in res["repr"]


@pytest.mark.slow
@pytest.mark.parametrize("ws", WS)
def test_no_segment_outlives_create(ws):
    for res in world(ws):
        assert res["probe_seen"]
        assert res["segments_after_create"] == []
        assert res["segments_after_shared"] == []
        assert res["segments_after_failures"] == []


@pytest.mark.slow
def test_world_left_no_segments():
    for ws in WS:
        worlds.world(ws)
        assert segments(worlds.session_tag(ws)) == []


def _killed(comm, tag: str) -> int:
    st = ShardedTensor.create(local_part(2, comm.rank), comm, name=tag)
    SharedTensor.create(torch.ones(3) if comm.rank == 0 else None, comm, name=tag + "s")
    comm.barrier()  # every rank is past create
    if comm.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return int(st.num_rows)


@pytest.mark.slow
def test_no_segment_leaks_when_a_rank_is_sigkilled():
    tag = f"k{uuid.uuid4().hex[:8]}"
    assert segments(tag) == []
    with pytest.raises(WorkerFailed) as info:
        run_world(_killed, 2, tag)
    assert 1 in info.value.failures and "signal 9" in info.value.failures[1]
    assert segments(tag) == []


def test_invalid_names_are_rejected_on_every_rank():
    # world size 1 in-process is not needed: name validation happens before any file is made
    with pytest.raises(DistError, match="name"):
        from fleetgnn.distributed.shm import _check_name

        _check_name("../etc")


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_ipc_gather_matches_indexing():
    results = run_world(_cuda_world, 2, f"cuda{uuid.uuid4().hex[:6]}", device="cuda")
    assert all(results)


def _cuda_world(comm, tag: str) -> bool:
    local = local_part(2, comm.rank).cuda()
    st = ShardedTensor.create(local, comm, name=tag)  # one name on every rank
    ids = torch.tensor([0, 6, 3, 3, 1])
    out = st.gather_global(ids)
    # ids on the shard's device are checked and split there (no round trip through the host)
    dev_ids = ids.cuda()
    assert st._ids_device(dev_ids) == dev_ids.device and st._ids_device(ids).type == "cpu"
    out_dev = st.gather_global(dev_ids)
    bad = False
    try:
        st.gather_global(torch.tensor([7], device="cuda"))
    except DistError as e:
        bad = "out of range [0, 7)" in str(e)
    return (
        out.is_cuda
        and torch.equal(out.cpu(), full(2)[ids])
        and torch.equal(out_dev.cpu(), full(2)[ids])
        and bad
    )
