"""The chunk scheduler: call order per depth (a recording communicator), both directions, and in
real gloo worlds with non-contiguous owners: received rows == rows asked for, traffic == closed
forms, send lists derived without communication == exchanged ones."""

import numpy as np
import pytest
import torch

from fleetgnn.errors import ConfigError
from fleetgnn.exchange import ChunkPipeline, ExchangeTimes, HaloPlan, HaloVolume

from . import worlds


# ---------------------------------------------------------------------------------- recorder
class _Handle:
    def __init__(self, log, k, out):
        self.log, self.k, self.out = log, k, out

    def is_completed(self):
        return False  # completion is only observed at wait: comm_s >= wait_s

    def wait(self):
        self.log.append(("wait", self.k))
        return self.out


class RecordingComm:
    """Stands in for a Communicator of rank 0 in a world of 2: logs issues and waits.

    The chunk is read from the buffer (the tests' buffers hold their chunk index); the received
    rows are ``100 + k``.
    """

    world_size, rank = 2, 0

    def __init__(self):
        self.log = []
        self.counts = {}
        self.buffers = {}

    def all_to_all(self, buf, send, *, recv_counts, async_op):
        assert async_op
        k = int(buf.reshape(-1)[0]) if buf.numel() else -1
        self.log.append(("issue", k))
        self.counts[k] = (list(send), list(recv_counts))
        self.buffers[k] = buf.clone()
        out = torch.full((sum(recv_counts), *buf.shape[1:]), 100.0 + k, dtype=buf.dtype)
        return _Handle(self.log, k, out)


def _plan(k_all, inactive=(), send=1, recv=2):
    """A hand-made plan for rank 0 of 2: chunk k sends ``send`` rows, receives ``recv`` rows."""
    active = tuple(k not in inactive for k in range(k_all))
    s = [send if a else 0 for a in active]
    r = [recv if a else 0 for a in active]
    offsets = np.concatenate([[0], np.cumsum(r)]).astype(np.int64)
    return HaloPlan(
        num_chunks=k_all,
        send_rows=tuple(torch.arange(n, dtype=torch.int64) + k for k, n in enumerate(s)),
        send_counts=tuple([0, n] for n in s),
        recv_counts=tuple([0, n] for n in r),
        halo_order=np.arange(offsets[-1], dtype=np.int64),
        halo_offsets=offsets,
        active=active,
    )


def _expected(k_all, depth, active):
    """The documented order: issue ``depth`` chunks, local work, then wait k / issue k+depth /
    consume k (depth 0: issue and wait every chunk before the local work)."""
    pre = k_all if depth == 0 else min(depth, k_all)
    exp = []
    for k in range(pre):
        exp += [("produce", k)] + ([("issue", k)] if active[k] else [])
    if depth == 0:
        exp += [("wait", k) for k in range(k_all) if active[k]]
    exp.append(("local",))
    for k in range(k_all):
        if depth > 0 and active[k]:
            exp.append(("wait", k))
        nxt = k + pre
        if depth > 0 and nxt < k_all:
            exp += [("produce", nxt)] + ([("issue", nxt)] if active[nxt] else [])
        exp.append(("consume", k, (100.0 + k) if active[k] else None))
    return exp


def _run(k_all, depth, inactive=(), transpose=False):
    comm = RecordingComm()
    plan = _plan(k_all, inactive)
    pipe = ChunkPipeline(plan, comm, depth=depth)

    def produce(k):
        comm.log.append(("produce", k))
        rows = plan.recv_counts[k][1] if transpose else plan.send_counts[k][1]
        return torch.full((rows, 2), float(k))

    def consume(k, rows):
        comm.log.append(("consume", k, None if rows is None else float(rows[0, 0])))

    pipe.run(produce, consume, lambda: comm.log.append(("local",)), transpose=transpose)
    return comm, plan, pipe


@pytest.mark.parametrize("k_all", [1, 3, 5])
@pytest.mark.parametrize("depth", [0, 1, 2, 7])
@pytest.mark.parametrize("inactive", [(), (1,)])
def test_scheduler_order_and_depth(k_all, depth, inactive):
    comm, plan, pipe = _run(k_all, depth, inactive)
    assert comm.log == _expected(k_all, depth, plan.active)
    # at most `depth` exchanges in flight (every chunk when depth == 0)
    in_flight, peak = 0, 0
    for ev in comm.log:
        in_flight += {"issue": 1, "wait": -1}.get(ev[0], 0)
        peak = max(peak, in_flight)
    assert in_flight == 0
    assert peak <= (k_all if depth == 0 else depth)
    if not inactive:  # the window is full
        assert peak == (k_all if depth == 0 else min(depth, k_all))
    local_at = comm.log.index(("local",))
    waits = [i for i, ev in enumerate(comm.log) if ev[0] == "wait"]
    if depth == 0:  # unpipelined: every chunk arrived before any local work
        assert all(i < local_at for i in waits)
    else:  # pipelined: local work overlaps the first chunks
        assert all(i > local_at for i in waits)
    assert pipe.times.exchanges == sum(plan.active) and pipe.times.backward_exchanges == 0
    assert 0.0 <= pipe.times.wait_s <= pipe.times.comm_s
    assert 0.0 <= pipe.times.hidden_fraction <= 1.0
    for k in range(k_all):  # forward counts as planned
        if plan.active[k]:
            assert comm.counts[k] == (plan.send_counts[k], plan.recv_counts[k])


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_transposed_run_swaps_counts(depth):
    comm, plan, pipe = _run(3, depth, inactive=(2,), transpose=True)
    assert comm.log == _expected(3, depth, plan.active)
    for k in (0, 1):
        assert comm.counts[k] == (plan.recv_counts[k], plan.send_counts[k])
    assert 2 not in comm.counts
    assert pipe.times.backward_exchanges == 2 and pipe.times.exchanges == 0


def test_forward_sends_planned_rows_and_accounts_volume():
    comm = RecordingComm()
    plan = _plan(3, inactive=(1,), send=2, recv=3)
    vol = HaloVolume(remote_edges=7, halo_rows=6, send_rows=4)
    pipe = ChunkPipeline(plan, comm, depth=1, volume=vol)
    # rows whose first entry is their chunk: send_rows[k] = [k, k + 1] picks rows k, k+1
    x = torch.tensor([[0.0, 9], [0.0, 8], [2.0, 7], [2.0, 6]], dtype=torch.float64)
    got = {}
    pipe.forward(x, lambda k, rows: got.__setitem__(k, rows))
    assert torch.equal(comm.buffers[0], x[[0, 1]]) and torch.equal(comm.buffers[2], x[[2, 3]])
    assert torch.equal(got[0], torch.full((3, 2), 100.0, dtype=torch.float64))
    assert got[1].shape == (0, 2)  # inactive chunk: no rows, no exchange
    assert torch.equal(got[2], torch.full((3, 2), 102.0, dtype=torch.float64))
    assert pipe.times.mgg_bytes == 7 * 16 and pipe.times.dedup_bytes == 6 * 16
    halo = pipe.gather(x)
    assert halo.shape == (6, 2) and torch.equal(halo[3:], got[2])
    assert pipe.times.exchanges == 4 and pipe.times.dedup_bytes == 2 * 6 * 16


def test_backward_adds_returned_rows_into_local_gradient():
    comm = RecordingComm()
    plan = _plan(3, send=2, recv=1)
    pipe = ChunkPipeline(plan, comm, depth=2)
    local = torch.arange(8.0).reshape(4, 2)
    grad = pipe.backward(lambda k: torch.full((1, 2), float(k)), lambda: local.clone())
    expected = local.clone()
    for k in range(3):  # chunk k's returned rows (100 + k) land on send_rows[k] = [k, k + 1]
        expected[[k, k + 1]] += 100.0 + k
    assert torch.equal(grad, expected)
    assert pipe.times.backward_exchanges == 3
    # nothing to return (only edge weights need a gradient): no exchange, no gradient
    comm2 = RecordingComm()
    pipe2 = ChunkPipeline(_plan(3), comm2, depth=1)
    assert pipe2.backward(lambda k: None, lambda: None) is None
    assert not any(ev[0] == "issue" for ev in comm2.log)


def test_single_rank_and_bad_depth():
    plan = _plan(2)
    pipe = ChunkPipeline(plan, None, depth=1)
    seen = []
    pipe.run(lambda k: torch.ones(1, 1), lambda k, rows: seen.append(rows))
    assert seen == [None, None] and pipe.times.exchanges == 0
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="depth"):
            ChunkPipeline(plan, None, depth=bad)
    assert "ChunkPipeline(" in repr(pipe)


def test_times_and_volume_closed_forms():
    t = ExchangeTimes()
    assert t.hidden_fraction == 0.0
    t.comm_s, t.wait_s, t.exchanges, t.dedup_bytes = 4.0, 1.0, 3, 10
    assert t.hidden_fraction == pytest.approx(0.75)
    t.wait_s = 9.0
    assert t.hidden_fraction == 0.0
    t.reset()
    assert t == ExchangeTimes()
    assert HaloVolume(5, 3, 2).bytes(8) == {"mgg": 40, "dedup": 24, "sent": 16}


# ---------------------------------------------------------------------------------- distributed
def _positions(sc, gids):
    """Position in ``sc.ids`` of every global ID."""
    order = np.argsort(sc.ids)
    return order[np.searchsorted(sc.ids[order], gids)]


@pytest.mark.slow
@pytest.mark.parametrize("ws", [2, 3])
def test_received_rows_are_the_rows_asked_for(ws):
    results = worlds.world(ws)
    for name in worlds.SCENARIOS:
        sc = worlds.scenario(name, ws)
        src_all, _ = sc.edge_lists()
        for rank, res in enumerate(results):
            r = res[name]
            lay, view = r["layout"], r["view"]
            # the halo is the single-process set of remote sources of the rank's edges
            src = src_all[view["eids"]]
            truth_halo = np.unique(src[sc.owner_of(src) != rank])
            assert np.array_equal(np.sort(lay.halo), truth_halo), (name, rank)
            assert np.array_equal(lay.row_ids, sc.ids[view["rows"]])
            for (k, depth), case in r["cases"].items():
                plan = case["plan"]
                ids = lay.halo[plan.halo_order]  # chunk-major order of arrival
                expected = sc.x[_positions(sc, ids)]
                assert torch.equal(case["halo"], expected), (name, rank, k, depth)


@pytest.mark.slow
@pytest.mark.parametrize("ws", [2, 3])
def test_send_lists_symmetric_and_derivable_without_communication(ws):
    results = worlds.world(ws)
    for name in worlds.SCENARIOS:
        for r, res in enumerate(results):
            rows, counts = res[name]["send"]
            d_rows, d_counts = res[name]["derived"]
            assert np.array_equal(rows, d_rows) and np.array_equal(counts, d_counts), name
            offs = np.concatenate([[0], np.cumsum(counts)])
            for q, other in enumerate(results):
                lq = other[name]["layout"]
                asked = lq.halo[lq.halo_owner == r]  # what q asked r for, in order
                sent = res[name]["layout"].row_ids[rows[offs[q] : offs[q + 1]]]
                assert np.array_equal(sent, asked), (name, r, q)


@pytest.mark.slow
@pytest.mark.parametrize("ws", [2, 3])
def test_traffic_equals_closed_forms(ws):
    results = worlds.world(ws)
    row = worlds.ROW_BYTES
    for name in worlds.SCENARIOS:
        for res in results:
            r = res[name]
            lay = r["layout"]
            # need lists: one int64 count per peer (+ the self count, local), then H int64 IDs
            peer_b, peer_m, local_b = r["need_traffic"]
            assert peer_b == 8 * (ws - 1) + 8 * lay.num_halo, name
            assert peer_m == (ws - 1) + int(np.count_nonzero(lay.need_counts)), name
            assert local_b == 8
            for (k, depth), case in r["cases"].items():
                plan = case["plan"]
                sent = sum(sum(c) for c in plan.send_counts)
                msgs = sum(int(np.count_nonzero(c)) for c in plan.send_counts)
                assert case["gather_traffic"] == (sent * row, msgs, 0), (name, k, depth)
                assert case["gather_exchanges"] == sum(plan.active)
        # every row sent is a deduplicated halo row of its receiver: per exchange, the world
        # moves sum_r H_r rows
        for k, depth in worlds.CASES:
            total = sum(res[name]["cases"][(k, depth)]["gather_traffic"][0] for res in results)
            halos = sum(res[name]["layout"].num_halo for res in results)
            assert total == halos * row, (name, k, depth)
    # the scenarios do exchange something (the closed forms are not all zeros)
    assert sum(res["graph"]["layout"].num_halo for res in results) > 0
    assert sum(res["block"]["layout"].num_halo for res in results) > 0
