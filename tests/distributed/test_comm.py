"""Communicator: uneven all-to-all (+ autograd, async), collectives, traffic closed forms, debug
mode. One spawned gloo world per world size (shared with test_shm, see worlds.py) runs every
check; tests assert on its results against single-process references computed here."""

import pytest
import torch

from fleetgnn.distributed import CollectiveMismatch, Communicator, DistError, check_views

from . import worlds

F = 3  # trailing feature size
ROW = F * 8  # float64 row bytes


def counts_matrix(ws: int) -> list[list[int]]:
    """C[i][j] = rows rank i sends to rank j; zeros included (the last rank sends nothing)."""
    g = torch.Generator().manual_seed(100 + ws)
    c = torch.randint(0, 4, (ws, ws), generator=g)
    if ws >= 2:
        c[ws - 1] = 0  # a rank with an empty input
        c[0, 1] = 0  # a zero block between two non-empty ranks
        c[0, 0] = 2  # rank 0 keeps some rows (self block)
    return c.tolist()


def inputs(ws: int, rank: int) -> torch.Tensor:
    n = sum(counts_matrix(ws)[rank])
    return (1000.0 * rank + torch.arange(n * F, dtype=torch.float64)).reshape(n, F)


def weights(ws: int, rank: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(7 * rank + ws)
    return torch.randn(n, F, generator=g, dtype=torch.float64)


def reference(ws: int):
    """Single-process all-to-all and the gradient of sum_r <out_r, w_r> w.r.t. every input."""
    c = counts_matrix(ws)
    xs = [inputs(ws, i).requires_grad_() for i in range(ws)]
    outs = []
    for r in range(ws):
        parts = []
        for i in range(ws):
            start = sum(c[i][:r])
            parts.append(xs[i][start : start + c[i][r]])
        outs.append(torch.cat(parts))
    loss = sum((o * weights(ws, r, o.shape[0])).sum() for r, o in enumerate(outs))
    loss.backward()
    return [o.detach() for o in outs], [x.grad for x in xs]


def comm_checks(comm: Communicator) -> dict:
    ws, rank, meter = comm.world_size, comm.rank, comm.meter
    c = counts_matrix(ws)
    res: dict = {}

    # sync all-to-all with autograd, traffic of forward and backward separately
    x = inputs(ws, rank).requires_grad_()
    s0 = meter.snapshot()
    out, recv = comm.all_to_all(x, c[rank])
    s1 = meter.snapshot()
    (out * weights(ws, rank, out.shape[0])).sum().backward()
    res.update(out=out.detach(), recv=recv, grad=x.grad.clone())
    res["fwd_traffic"] = {k: {m: s1[k][m] - s0[k][m] for m in s1[k]} for k in s1}
    res["bwd_traffic"] = meter.delta(s1)

    # known recv_counts: no counts exchange
    s0 = meter.snapshot()
    out2, _ = comm.all_to_all(inputs(ws, rank), c[rank], recv_counts=recv)
    res["known_recv_equal"] = torch.equal(out2, out.detach())
    res["known_recv_traffic"] = meter.delta(s0)

    # async: launch, overlap local work, wait; autograd through the async output
    xa = inputs(ws, rank).requires_grad_()
    handle = comm.all_to_all(xa, c[rank], async_op=True)
    local = torch.ones(64, 64, dtype=torch.float64) @ torch.ones(64, 64, dtype=torch.float64)
    res["overlap_local_ok"] = bool((local == 64).all())
    res["async_recv"] = handle.recv_counts
    outa = handle.wait()
    res["async_done"] = handle.is_completed()
    res["async_equal"] = torch.equal(outa.detach(), out.detach())
    (outa * weights(ws, rank, outa.shape[0])).sum().backward()
    res["async_grad_equal"] = torch.equal(xa.grad, res["grad"])
    # two exchanges in flight at once, waited in reverse order
    h1 = comm.all_to_all(inputs(ws, rank), c[rank], async_op=True)
    h2 = comm.all_to_all(2 * inputs(ws, rank), c[rank], async_op=True)
    res["two_in_flight"] = torch.equal(h2.wait(), 2 * out.detach()) and torch.equal(
        h1.wait(), out.detach()
    )

    # other collectives
    s0 = meter.snapshot()
    t = comm.all_reduce_sum(torch.full((5,), rank + 1.0, dtype=torch.float64))
    res["all_reduce"] = t.tolist()
    res["all_reduce_traffic"] = meter.delta(s0)
    res["gathered"] = comm.all_gather_object(("r", rank))
    res["bcast"] = comm.broadcast_object({"from": rank} if rank == ws - 1 else None, src=ws - 1)
    comm.barrier()

    # debug mode: mismatches raise on every rank, and the group stays usable
    dbg = Communicator(None, rank=rank, world_size=ws, debug=True)
    if ws >= 2:
        send = [0] * ws
        send[(rank + 1) % ws] = 3 if rank == 0 else 1
        recv_counts = [0] * ws
        recv_counts[(rank - 1) % ws] = 1
        if rank == 1:
            recv_counts[0] = 2  # rank 0 sends 3 rows, rank 1 expects 2
        xs = torch.zeros(sum(send), F, dtype=torch.float64)
        try:
            dbg.all_to_all(xs, send, recv_counts=recv_counts)
            res["dbg_counts"] = None
        except CollectiveMismatch as e:
            res["dbg_counts"] = str(e)
        try:
            if rank == 0:
                dbg.all_reduce_sum(torch.zeros(2))
            else:
                dbg.barrier()
            res["dbg_op"] = None
        except CollectiveMismatch as e:
            res["dbg_op"] = str(e)
        try:
            dtype = torch.float32 if rank == ws - 1 else torch.float64
            dbg.all_reduce_sum(torch.zeros(2, dtype=dtype))
            res["dbg_dtype"] = None
        except CollectiveMismatch as e:
            res["dbg_dtype"] = str(e)
        try:  # a local argument error on one rank is reported on all, not a hang
            bad = [1] * ws if rank == 0 else [0] * ws
            dbg.all_to_all(torch.zeros(0, F), bad)
            res["dbg_error"] = None
        except (CollectiveMismatch, DistError) as e:
            res["dbg_error"] = (type(e).__name__, str(e))
    # matching calls pass in debug mode, forward and backward
    xd = inputs(ws, rank).requires_grad_()
    od, _ = dbg.all_to_all(xd, c[rank])
    (od * weights(ws, rank, od.shape[0])).sum().backward()
    res["dbg_ok"] = torch.equal(od.detach(), out.detach()) and torch.equal(xd.grad, res["grad"])
    return res


def world(ws: int) -> list[dict]:
    return [res["comm"] for res in worlds.world(ws)]


WS = [1, 2, 3, 4]


def _a2a_traffic(ws: int, rank: int, send: list[int], row: int, counts_exchange: bool) -> dict:
    """Closed form of what one all-to-all records on `rank` (see comm.py's metering table)."""
    remote = sum(n for j, n in enumerate(send) if j != rank)
    msgs = sum(1 for j, n in enumerate(send) if j != rank and n > 0)
    peer_b, peer_m = remote * row, msgs
    local_b, local_m = send[rank] * row, int(send[rank] > 0)
    if counts_exchange:
        peer_b, peer_m = peer_b + 8 * (ws - 1), peer_m + (ws - 1)
        local_b, local_m = local_b + 8, local_m + 1
    return {"peer": (peer_b, peer_m), "local": (local_b, local_m)}


def _pm(snap: dict, kind: str) -> tuple[int, int]:
    return snap[kind]["bytes"], snap[kind]["messages"]


@pytest.mark.slow
@pytest.mark.parametrize("ws", WS)
def test_all_to_all_matches_single_process_reference(ws):
    ref_out, _ = reference(ws)
    c = counts_matrix(ws)
    for rank, res in enumerate(world(ws)):
        assert torch.equal(res["out"], ref_out[rank])
        assert res["recv"] == [c[i][rank] for i in range(ws)]
        assert res["known_recv_equal"]


@pytest.mark.slow
@pytest.mark.parametrize("ws", WS)
def test_all_to_all_gradient_is_transposed_exchange(ws):
    _, ref_grad = reference(ws)
    for rank, res in enumerate(world(ws)):
        assert res["grad"].dtype == torch.float64
        assert torch.equal(res["grad"], ref_grad[rank])


@pytest.mark.slow
@pytest.mark.parametrize("ws", WS)
def test_async_all_to_all_overlaps_and_matches(ws):
    c = counts_matrix(ws)
    for rank, res in enumerate(world(ws)):
        assert res["overlap_local_ok"] and res["async_done"]
        assert res["async_recv"] == [c[i][rank] for i in range(ws)]
        assert res["async_equal"] and res["async_grad_equal"] and res["two_in_flight"]


@pytest.mark.slow
@pytest.mark.parametrize("ws", WS)
def test_traffic_equals_closed_form(ws):
    c = counts_matrix(ws)
    for rank, res in enumerate(world(ws)):
        fwd = _a2a_traffic(ws, rank, c[rank], ROW, counts_exchange=True)
        bwd = _a2a_traffic(ws, rank, [c[j][rank] for j in range(ws)], ROW, counts_exchange=False)
        known = _a2a_traffic(ws, rank, c[rank], ROW, counts_exchange=False)
        for kind in ("peer", "local"):
            assert _pm(res["fwd_traffic"], kind) == fwd[kind]
            assert _pm(res["bwd_traffic"], kind) == bwd[kind]
            assert _pm(res["known_recv_traffic"], kind) == known[kind]
        for kind in ("net", "h2d", "d2h", "disk"):
            assert _pm(res["fwd_traffic"], kind) == (0, 0)
        ar = 2 * (ws - 1) * 5 * 8 // ws
        assert _pm(res["all_reduce_traffic"], "peer") == (ar, 2 * (ws - 1))


@pytest.mark.slow
@pytest.mark.parametrize("ws", WS)
def test_other_collectives(ws):
    for _rank, res in enumerate(world(ws)):
        assert res["all_reduce"] == [ws * (ws + 1) / 2] * 5
        assert res["gathered"] == [("r", r) for r in range(ws)]
        assert res["bcast"] == {"from": ws - 1}
        assert res["dbg_ok"]


@pytest.mark.slow
@pytest.mark.parametrize("ws", [2, 3, 4])
def test_debug_mode_reports_every_rank_view_on_every_rank(ws):
    results = world(ws)
    for res in results:
        msg = res["dbg_counts"]
        assert msg is not None
        assert "rank 0 sends 3 rows to rank 1 but rank 1 expects 2" in msg
        for r in range(ws):
            assert f"rank {r}: all_to_all" in msg
        assert "ranks call different collectives" in res["dbg_op"]
        assert "all_reduce_sum" in res["dbg_op"] and "barrier" in res["dbg_op"]
        assert "dtype differs" in res["dbg_dtype"] and "torch.float32" in res["dbg_dtype"]
        kind, text = res["dbg_error"]
        assert kind == "CollectiveMismatch" and f"sum(send_counts) = {ws}" in text
    # every rank raised the same report (built from the same gathered views)
    assert len({res["dbg_counts"].split(" on rank ")[1].split("\n", 1)[1] for res in results}) == 1


def test_check_views_unit():
    ok = [
        {"op": "all_to_all", "call": 1, "dtype": "f", "send_counts": [1, 2], "recv_counts": None},
        {"op": "all_to_all", "call": 1, "dtype": "f", "send_counts": [0, 0], "recv_counts": [2, 0]},
    ]
    assert check_views(ok) == []
    bad = [dict(ok[0]), dict(ok[1], recv_counts=[1, 0])]
    assert check_views(bad) == ["rank 0 sends 2 rows to rank 1 but rank 1 expects 1"]
    assert check_views([dict(ok[0]), dict(ok[1], call=2)])[0].startswith("ranks are at different")
    assert "invalid arguments" in check_views([dict(ok[0], error="boom"), ok[1]])[0]


def test_new_group_of_one_rank_records_on_the_meter_it_is_given(tmp_path):
    """With one rank, new_group() returns a communicator over the same group; it must still
    record on the meter passed (a prefetch thread's traffic kept apart from the step's)."""
    import torch.distributed as dist

    from fleetgnn.distributed.traffic import TrafficMeter

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        own, other = TrafficMeter(), TrafficMeter()
        comm = Communicator(None, rank=0, world_size=1, meter=own)
        assert comm.new_group(meter=other).meter is other
        assert comm.new_group().meter is own
    finally:
        dist.destroy_process_group()
