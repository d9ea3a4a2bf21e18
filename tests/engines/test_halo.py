"""MGG layout invariants, halo plans, and the distributed aggregator against scipy ``A @ X``."""

import functools
from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from fleetgnn.distributed.testing import run_world
from fleetgnn.engines.halo import (
    HaloAggregator,
    build_layout,
    build_plan,
    check_bounds,
    exchange_need_lists,
)
from fleetgnn.errors import ConfigError, PartitionError
from fleetgnn.graph import from_edges
from fleetgnn.partition import range_partition


def _graph(n=40, e=160, seed=0, loops=True, isolated=5):
    """Random multigraph with self loops, duplicate edges and ``isolated`` isolated nodes."""
    rng = np.random.default_rng(seed)
    hub = np.full(e // 4, 3)  # a high-degree node
    src = np.concatenate([rng.integers(0, n - isolated, e - hub.size), hub])
    dst = rng.integers(0, n - isolated, e)
    if loops:
        src[:5], dst[:5] = np.arange(5), np.arange(5)
    return from_edges(src, dst, n)


def _layouts(g, w):
    bounds = range_partition(g, w).offsets
    return [build_layout(g, bounds, r) for r in range(w)]


def _send_lists(lays):
    """The transpose of the need lists, computed in one process (what the exchange returns)."""
    w = len(lays)
    out = []
    for r in range(w):
        rows = [q.halo[q.halo_owner == r] - lays[r].lo for q in lays]
        out.append((np.concatenate(rows), np.array([x.size for x in rows], dtype=np.int64)))
    return out


@pytest.mark.parametrize("w", [1, 2, 3, 4, 7, 50])
def test_layout_invariants(w):
    g = _graph()
    n, e = g.num_nodes, g.num_edges
    lays = _layouts(g, w)
    b = lays[0].bounds
    # 1. monotone split points covering 0..N, one owner per node, edge balance
    assert b[0] == 0 and b[-1] == n and np.all(np.diff(b) >= 0)
    owner = np.searchsorted(b, np.arange(n), side="right") - 1
    assert np.array_equal(np.bincount(owner, minlength=w), np.diff(b))
    maxdeg = int(g.in_degrees().max())
    for lay in lays:
        assert abs(lay.num_edges - e / w) <= maxdeg
    assert sum(lay.num_edges for lay in lays) == e
    src_all, dst_all = g.edges()
    for lay in lays:
        lo, hi = lay.lo, lay.hi
        # 2. local + remote == original neighbour multiset of each owned node
        dst = np.repeat(np.arange(lo, hi), np.diff(lay.indptr))
        local = list(zip(lay.src[lay.is_local], dst[lay.is_local], strict=True))
        remote = list(zip(lay.halo[lay.halo_pos[~lay.is_local]], dst[~lay.is_local], strict=True))
        sel = (dst_all >= lo) & (dst_all < hi)
        assert Counter(local) + Counter(remote) == Counter(
            zip(src_all[sel].tolist(), dst_all[sel].tolist(), strict=True)
        )
        # 3. address translation and remote sources never owned here
        o, off = lay.translate(lay.halo)
        assert np.array_equal(b[o] + off, lay.halo)
        assert np.all((off >= 0) & (off < np.diff(b)[o]))
        assert np.all(o != lay.rank) and np.array_equal(o, lay.halo_owner)
        assert np.all((lay.src[lay.is_local] >= lo) & (lay.src[lay.is_local] < hi))
        assert len(np.unique(lay.halo)) == lay.num_halo  # deduplicated
        assert np.array_equal(lay.in_degree, g.in_degrees()[lo:hi])
        assert "RankLayout(" in repr(lay)


@pytest.mark.parametrize("w,k", [(1, 3), (3, 1), (3, 2), (4, 7), (5, 40)])
def test_plan_chunks_concatenate_and_match_across_ranks(w, k):
    g = _graph(seed=1)
    lays = _layouts(g, w)
    plans = [build_plan(lay, *sl, k) for lay, sl in zip(lays, _send_lists(lays), strict=True)]
    for lay, plan in zip(lays, plans, strict=True):
        # the chunk-major halo is a permutation of the halo, chunks concatenate back
        assert np.array_equal(np.sort(plan.halo_order), np.arange(lay.num_halo))
        assert plan.halo_offsets[-1] == lay.num_halo
        chunked = lay.halo[plan.halo_order]
        pieces = [chunked[plan.halo_offsets[c] : plan.halo_offsets[c + 1]] for c in range(k)]
        assert np.array_equal(np.sort(np.concatenate(pieces)), lay.halo)
        # chunk sizes per owner are balanced (differ by at most one)
        rc = np.array(plan.recv_counts)
        assert np.all(rc.max(0) - rc.min(0) <= 1)
        assert np.array_equal(rc.sum(0), lay.need_counts)
    for r in range(w):
        for q in range(w):
            for c in range(k):
                # what r sends q in chunk c == what q expects from r in chunk c, in order
                assert plans[r].send_counts[c][q] == plans[q].recv_counts[c][r]
                sc = plans[r].send_counts[c]
                o = sum(sc[:q])
                sent = plans[r].send_rows[c][o : o + sc[q]].numpy() + lays[r].lo
                lq, pq = lays[q], plans[q]
                got = lq.halo[pq.halo_order[pq.halo_offsets[c] : pq.halo_offsets[c + 1]]]
                got = got[
                    lq.halo_owner[pq.halo_order[pq.halo_offsets[c] : pq.halo_offsets[c + 1]]] == r
                ]
                assert np.array_equal(sent, got)
    assert "HaloPlan(" in repr(plans[0])


def test_bad_inputs():
    g = _graph()
    with pytest.raises(PartitionError, match="bounds"):
        check_bounds(np.array([0, 50, 40]), 40)
    with pytest.raises(PartitionError, match="rank"):
        build_layout(g, np.array([0, 40]), 1)
    lay = build_layout(g, np.array([0, 40]), 0)
    with pytest.raises(ConfigError, match="num_chunks"):
        build_plan(lay, np.zeros(0, np.int64), np.zeros(1, np.int64), 0)
    plan = build_plan(lay, np.zeros(0, np.int64), np.zeros(1, np.int64), 1)
    with pytest.raises(ConfigError, match="depth"):
        HaloAggregator(lay, plan, None, depth=-1)
    agg = HaloAggregator(lay, plan, None, dtype=torch.float64)
    with pytest.raises(ConfigError, match="owned rows"):
        agg.aggregate(torch.zeros(3, 2, dtype=torch.float64))


def test_empty_range_and_single_rank_aggregate():
    g = _graph()
    bounds = np.concatenate([[0, 0], range_partition(g, 3).offsets[1:]])  # rank 0 owns nothing
    lay = build_layout(g, bounds, 0)
    assert lay.num_owned == 0 and lay.num_edges == 0 and lay.num_halo == 0
    plan = build_plan(lay, np.zeros(0, np.int64), np.zeros(4, np.int64), 3)
    agg = HaloAggregator(lay, plan, None, depth=2, dtype=torch.float64)
    x = torch.zeros(0, 4, dtype=torch.float64)
    for reduce in ("sum", "mean", "max"):
        assert agg.aggregate(x, reduce).shape == (0, 4)
    assert agg.edge_softmax(agg.src_to_edge(x[:, 0])).shape == (0,)
    # one rank, every edge local: equals the local aggregator
    from fleetgnn.nn import LocalAggregator

    one = build_layout(g, np.array([0, g.num_nodes]), 0)
    agg = HaloAggregator(
        one, build_plan(one, np.zeros(0, np.int64), np.ones(1, np.int64) * 0, 2), None
    )
    xs = torch.randn(g.num_nodes, 3, dtype=torch.float64)
    ref = LocalAggregator.from_graph(g, dtype=torch.float64)
    torch.testing.assert_close(agg.aggregate(xs, "mean"), ref.aggregate(xs, "mean"))
    assert agg.times.exchanges == 0 and "HaloAggregator(" in repr(agg)


# ---------------------------------------------------------------------------------- distributed
CASES = [(1, 0), (1, 1), (2, 1), (7, 2), (7, 0), (3, 3)]


def _agg_rank(comm, n, seed):
    """Rank body: every (K, depth) case, several reductions; returns outputs, grads, traffic."""
    g = _graph(n=n, e=4 * n, seed=seed)
    w = comm.world_size
    lay = build_layout(g, range_partition(g, w).offsets, comm.rank)
    send_rows, send_counts = exchange_need_lists(lay, comm)
    rng = np.random.default_rng(seed)
    x_all = torch.from_numpy(rng.standard_normal((n, 3, 2)))
    w_all = torch.from_numpy(rng.standard_normal((g.num_edges, 3)))
    lo, hi = lay.lo, lay.hi
    e0, e1 = int(g.indptr[lo]), int(g.indptr[hi])
    out = {"lo": lo, "hi": hi, "cases": {}}
    for k, depth in CASES:
        plan = build_plan(lay, send_rows, send_counts, k, comm)
        agg = HaloAggregator(lay, plan, comm, depth=depth, dtype=torch.float64)
        res = {}
        for name in ("sum", "mean", "max", "wsum", "edge"):
            x = x_all[lo:hi].clone().requires_grad_(True)
            before = comm.meter.bytes_by_kind().get("peer", 0)
            if name == "wsum":
                y = agg.aggregate(x, "sum", edge_weight=w_all[e0:e1])
            elif name == "edge":
                y = agg.edge_softmax(agg.src_to_edge(x[:, :, 0]) + agg.dst_to_edge(x[:, :, 1]))
            else:
                y = agg.aggregate(x, name)
            y.backward(torch.ones_like(y))
            sent = comm.meter.bytes_by_kind().get("peer", 0) - before
            res[name] = (y.detach(), x.grad, sent)
        res["volume"] = agg.volume
        res["times"] = agg.times
        out["cases"][(k, depth)] = res
    w_own = w_all[e0:e1]
    out["pipelined"] = _backward_paths(comm, lay, send_rows, send_counts, x_all, w_own, seed)
    return out


BACKWARD_CASES = [(k, d) for k in (1, 3, 7) for d in (0, 1, 2)]
BACKWARD_NAMES = ("sum", "mean", "wsum", "wonly")  # wonly: only the edge weights need a gradient


def _upstream(n, seed):
    """A non-trivial gradient of the aggregation output, ``[N, 3, 2]`` float64."""
    return torch.from_numpy(np.random.default_rng(seed + 100).standard_normal((n, 3, 2)))


def _backward_paths(comm, lay, send_rows, send_counts, x_all, w_own, seed):
    """Pipelined backward (``overlap_backward=True``) and the autograd baseline, per case."""
    lo, hi = lay.lo, lay.hi
    upstream = _upstream(x_all.shape[0], seed)[lo:hi]
    out = {}
    for k, depth in BACKWARD_CASES:
        plan = build_plan(lay, send_rows, send_counts, k, comm)
        for name in BACKWARD_NAMES:
            runs = []
            for overlap in (True, False):
                agg = HaloAggregator(
                    lay, plan, comm, depth=depth, dtype=torch.float64, overlap_backward=overlap
                )
                x = x_all[lo:hi].clone().requires_grad_(name != "wonly")
                wt = w_own.clone().requires_grad_(name in ("wsum", "wonly"))
                before = comm.meter.bytes_by_kind().get("peer", 0)
                if name in ("sum", "mean"):
                    y = agg.aggregate(x, name)
                else:
                    y = agg.aggregate(x, "sum", edge_weight=wt)
                comm_fwd = agg.times.comm_s
                y.backward(upstream)
                runs.append(
                    {
                        "y": y.detach(),
                        "gx": x.grad,
                        "gw": wt.grad,
                        "sent": comm.meter.bytes_by_kind().get("peer", 0) - before,
                        "fwd": agg.times.exchanges,
                        "bwd": agg.times.backward_exchanges,
                        "comm_fwd": comm_fwd,
                        "comm_all": agg.times.comm_s,
                        "hidden": agg.times.hidden_fraction,
                    }
                )
            out[(k, depth, name)] = (runs, sum(plan.active), agg.volume)
    return out


def _dense_reference(n, seed):
    g = _graph(n=n, e=4 * n, seed=seed)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3, 2))
    wts = rng.standard_normal((g.num_edges, 3))
    src, dst = g.edges()
    a = sp.csr_matrix((np.ones(g.num_edges), (dst, src)), shape=(n, n))
    deg = np.maximum(g.in_degrees(), 1)[:, None, None]
    xs = x.reshape(n, -1)
    ref_sum = (a @ xs).reshape(x.shape)
    ws = np.stack(
        [sp.csr_matrix((wts[:, h], (dst, src)), shape=(n, n)) @ x[:, h] for h in range(3)], 1
    )
    gw = np.stack(
        [
            sp.csr_matrix((wts[:, h], (dst, src)), shape=(n, n)).T @ np.ones((n, 2))
            for h in range(3)
        ],
        1,
    )
    return g, {
        "sum": (ref_sum, (a.T @ np.ones((n, 6))).reshape(x.shape)),
        "mean": (ref_sum / deg, (a.T @ (np.ones((n, 6)) / deg[:, :, 0])).reshape(x.shape)),
        "wsum": (ws, gw),
        "x": x,
        "w": wts,
    }


@functools.cache
def _world(w, n, seed):
    """One gloo world per (w, n, seed), shared by the tests below."""
    return run_world(_agg_rank, w, n, seed)


@pytest.mark.slow
@pytest.mark.parametrize("w", [3])
def test_distributed_aggregate_equals_spmm(w):
    n, seed = 37, 5
    results = _world(w, n, seed)
    g, ref = _dense_reference(n, seed)
    x = torch.from_numpy(ref["x"])
    from fleetgnn.nn import LocalAggregator

    local = LocalAggregator.from_graph(g, dtype=torch.float64)
    xm = x.clone().requires_grad_(True)
    ym = local.aggregate(xm, "max")
    ym.backward(torch.ones_like(ym))
    xe = x.clone().requires_grad_(True)
    ye = local.edge_softmax(local.src_to_edge(xe[:, :, 0]) + local.dst_to_edge(xe[:, :, 1]))
    ye.backward(torch.ones_like(ye))
    for k, depth in CASES:
        for name in ("sum", "mean", "wsum", "max", "edge"):
            if name in ref:
                y_ref, g_ref = (torch.from_numpy(np.asarray(t)) for t in ref[name])
            elif name == "max":
                y_ref, g_ref = ym.detach(), xm.grad
            else:
                y_ref, g_ref = ye.detach(), xe.grad
            ys = [r["cases"][(k, depth)][name][0] for r in results]
            gs = [r["cases"][(k, depth)][name][1] for r in results]
            torch.testing.assert_close(torch.cat(ys), y_ref, rtol=1e-10, atol=1e-10)
            torch.testing.assert_close(torch.cat(gs), g_ref, rtol=1e-10, atol=1e-10)
        # traffic counters == closed forms: every exchanged row once (sum of sends == halos)
        for r in results:
            case = r["cases"][(k, depth)]
            vol = case["volume"]
            row = 6 * 8  # [3, 2] float64
            # forward sends the requested rows, backward returns the halo rows' gradients
            b, b_edge = vol.bytes(row), vol.bytes(3 * 8)
            assert case["sum"][2] == b["sent"] + b["dedup"]
            assert case["max"][2] == b["sent"] + b["dedup"]
            assert case["edge"][2] == b_edge["sent"] + b_edge["dedup"]
            assert vol.remote_edges >= vol.halo_rows  # MGG volume >= deduplicated volume
            b = vol.bytes(row)
            assert b["mgg"] >= b["dedup"]
            assert case["times"].exchanges > 0 or vol.halo_rows + vol.send_rows == 0
            assert 0.0 <= case["times"].hidden_fraction <= 1.0
        total_sent = sum(r["cases"][(k, depth)]["volume"].send_rows for r in results)
        total_halo = sum(r["cases"][(k, depth)]["volume"].halo_rows for r in results)
        assert total_sent == total_halo


@pytest.mark.slow
@pytest.mark.parametrize("w", [3])
def test_pipelined_backward_matches_reference_and_autograd_path(w):
    """sum/mean/weighted sum: the pipelined backward is used, exchanges one reverse all-to-all
    per active chunk, and gives the autograd path's gradients and the scipy ones."""
    n, seed = 37, 5
    results = _world(w, n, seed)
    g, ref = _dense_reference(n, seed)
    x = ref["x"]
    up = _upstream(n, seed).numpy()
    src, dst = g.edges()
    a = sp.csr_matrix((np.ones(g.num_edges), (dst, src)), shape=(n, n))
    deg = np.maximum(g.in_degrees(), 1)[:, None, None]
    wts = ref["w"]
    wt_mats = [sp.csr_matrix((wts[:, h], (dst, src)), shape=(n, n)) for h in range(3)]
    gx_ref = {
        "sum": (a.T @ up.reshape(n, -1)).reshape(x.shape),
        "mean": (a.T @ (up / deg).reshape(n, -1)).reshape(x.shape),
        "wsum": np.stack([wt_mats[h].T @ up[:, h] for h in range(3)], 1),
    }
    gw_ref = np.einsum("ehd,ehd->eh", up[dst], x[src])  # naive per-edge dot
    for k, depth in BACKWARD_CASES:
        for name in BACKWARD_NAMES:
            what = f"{name}/K={k}/depth={depth}"
            per_rank = [r["pipelined"][(k, depth, name)] for r in results]
            new = [runs[0] for runs, _, _ in per_rank]
            old = [runs[1] for runs, _, _ in per_rank]
            for a_run, b_run in zip(new, old, strict=True):
                assert torch.equal(a_run["y"], b_run["y"]), what
                for key in ("gx", "gw"):
                    if b_run[key] is None:
                        assert a_run[key] is None, what
                    else:
                        torch.testing.assert_close(
                            a_run[key], b_run[key], rtol=0, atol=1e-12, msg=what
                        )
                # same traffic both ways: forward rows out, halo gradients back (none for wonly)
                assert a_run["sent"] == b_run["sent"], what
            for (runs, active, vol), a_run in zip(per_rank, new, strict=True):
                assert a_run["fwd"] == active and runs[1]["fwd"] == active, what
                # the pipelined path issued the reverse exchanges itself, one per active chunk
                assert a_run["bwd"] == (active if name != "wonly" else 0), what
                assert runs[1]["bwd"] == 0, what
                row = 6 * 8
                back = vol.bytes(row)["dedup"] if name != "wonly" else 0
                assert a_run["sent"] == vol.bytes(row)["sent"] + back, what
                if a_run["bwd"]:  # backward exchange time is recorded too
                    assert a_run["comm_all"] > a_run["comm_fwd"], what
                assert 0.0 <= a_run["hidden"] <= 1.0
            if name != "wonly":
                gx = torch.cat([r["gx"] for r in new])
                torch.testing.assert_close(
                    gx, torch.from_numpy(gx_ref[name]), rtol=1e-10, atol=1e-10
                )
            if name in ("wsum", "wonly"):
                gw = torch.cat([r["gw"] for r in new])
                torch.testing.assert_close(gw, torch.from_numpy(gw_ref), rtol=1e-10, atol=1e-10)
