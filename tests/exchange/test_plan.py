"""Exchange plans in one process: the documented example, local/remote split, dedup and grouping
by owner for non-contiguous owners, need/send symmetry, balanced chunk-major chunks, errors."""

import numpy as np
import pytest
import torch

from fleetgnn.errors import ConfigError, PartitionError
from fleetgnn.exchange import (
    block_layout,
    build_exchange_layout,
    build_plan,
    exchange_need_lists,
    owner_function,
    range_owner,
    requests_from_edges,
    send_lists,
)
from fleetgnn.sampling import Block

from . import worlds


def _all_send_lists(sc, lays):
    """Send lists of every rank, derived without communication."""
    src_all, dst_owner = sc.edge_lists()
    w = len(lays)
    return [
        send_lists(lay, *requests_from_edges(src_all, dst_owner, sc.owner, rank=r, world_size=w))
        for r, lay in enumerate(lays)
    ]


# ---------------------------------------------------------------------------------- example
def test_module_docstring_example():
    """8 nodes owned by ``u mod 3``; the halo and send rows of the rank table."""
    dst = [0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2]
    src = [1, 4, 2, 3, 0, 6, 5, 4, 0, 3, 1, 7, 7, 5]
    owner = np.arange(8) % 3
    lays, dst_owner = [], owner[dst]
    for r in range(3):
        mine = np.flatnonzero(dst_owner == r)
        nodes = np.flatnonzero(owner == r)
        ptr = np.searchsorted(np.asarray(dst)[mine], nodes, side="left").tolist() + [mine.size]
        lays.append(
            build_exchange_layout(
                nodes, ptr, np.asarray(src)[mine], owner, rank=r, world_size=3, row_ids=nodes
            )
        )
    assert [lay.halo.tolist() for lay in lays] == [[1, 4, 2], [0, 6, 5], [3, 1, 7]]
    assert [lay.need_counts.tolist() for lay in lays] == [[0, 2, 1], [2, 0, 1], [1, 2, 0]]
    sends = []
    for r, lay in enumerate(lays):
        ids, counts = requests_from_edges(np.asarray(src), dst_owner, owner, rank=r, world_size=3)
        sends.append(send_lists(lay, ids, counts))
    assert [s[0].tolist() for s in sends] == [[0, 2, 1], [0, 1, 0, 2], [0, 1]]
    assert [s[1].tolist() for s in sends] == [[0, 2, 1], [2, 0, 2], [1, 1, 0]]
    assert lays[2].num_local_edges == 1 and lays[1].num_remote_edges == 4
    assert "ExchangeLayout(" in repr(lays[0])


# ---------------------------------------------------------------------------------- layouts
@pytest.mark.parametrize("name", worlds.SCENARIOS)
@pytest.mark.parametrize("w", [1, 2, 3, 5])
def test_layout_invariants(name, w):
    sc = worlds.scenario(name, w)
    src_all, _ = sc.edge_lists()
    for r in range(w):
        lay, view = sc.layout(r), sc.rank_view(r)
        src = src_all[view["eids"]]
        owner = sc.owner_of(src)
        assert np.array_equal(lay.src, src) and lay.num_dst == view["dst"].size
        assert np.array_equal(lay.dst_ids, sc.ids[view["dst"]])
        assert np.array_equal(lay.row_ids, sc.ids[view["rows"]])
        assert np.array_equal(lay.row_ids[: lay.num_dst], lay.dst_ids)  # outputs come first
        # local/remote split by owner; local sources map to their rows, remote ones to the halo
        assert np.array_equal(lay.is_local, owner == r)
        loc = lay.is_local
        assert np.array_equal(lay.row_ids[lay.src_row[loc]], src[loc])
        assert np.all(lay.src_row[~loc] == -1) and np.all(lay.halo_pos[loc] == -1)
        assert np.array_equal(lay.halo[lay.halo_pos[~loc]], src[~loc])
        # dedup: each remote source once; grouped by owner, by ID within an owner
        assert np.array_equal(np.sort(lay.halo), np.unique(src[~loc]))
        assert np.array_equal(lay.halo_owner, sc.owner_of(lay.halo))
        assert np.all(np.diff(lay.halo_owner) >= 0)
        same = lay.halo_owner[1:] == lay.halo_owner[:-1]
        assert np.all(np.diff(lay.halo)[same] > 0)
        assert np.array_equal(lay.need_counts, np.bincount(lay.halo_owner, minlength=w))
        assert lay.need_counts[r] == 0
        assert lay.num_local_edges + lay.num_remote_edges == lay.num_edges
        # the edges of every destination are its original ones, in order
        ptr = lay.indptr
        assert np.array_equal(np.diff(ptr), np.diff(sc.indptr)[view["dst"]])


def test_owner_array_and_function_give_the_same_layout():
    sc = worlds.scenario("block", 3)
    table = sc.owner_of(np.arange(100))
    for r in range(3):
        a = sc.layout(r)
        block = Block(
            indptr=torch.from_numpy(sc.indptr),
            indices=torch.from_numpy(sc.indices),
            src_ids=torch.from_numpy(sc.ids),
            num_dst=sc.num_dst,
        )
        b = block_layout(block, table, rank=r, world_size=3)
        for f in ("dst_ids", "row_ids", "indptr", "src", "is_local", "src_row", "halo"):
            assert np.array_equal(getattr(a, f), getattr(b, f)), f


def test_range_owner_matches_bounds():
    b = np.array([0, 0, 3, 3, 8])  # ranks 0 and 2 own nothing
    assert range_owner(b)(np.arange(8)).tolist() == [1, 1, 1, 3, 3, 3, 3, 3]


# ---------------------------------------------------------------------------------- symmetry
@pytest.mark.parametrize("name", worlds.SCENARIOS)
@pytest.mark.parametrize("w", [2, 3, 5])
def test_need_and_send_lists_are_transposes(name, w):
    sc = worlds.scenario(name, w)
    lays = [sc.layout(r) for r in range(w)]
    sends = _all_send_lists(sc, lays)
    for r in range(w):
        rows, counts = sends[r]
        assert counts[r] == 0
        offs = np.concatenate([[0], np.cumsum(counts)])
        for q in range(w):
            asked = lays[q].halo[lays[q].halo_owner == r]
            assert counts[q] == lays[q].need_counts[r]
            assert np.array_equal(lays[r].row_ids[rows[offs[q] : offs[q + 1]]], asked)
    # all rows sent == all rows needed
    assert sum(int(s[1].sum()) for s in sends) == sum(lay.num_halo for lay in lays)


# ---------------------------------------------------------------------------------- chunks
@pytest.mark.parametrize("name", ["graph", "block"])
@pytest.mark.parametrize("w,k", [(1, 3), (2, 1), (3, 2), (3, 3), (4, 7), (3, 60)])
def test_chunks_balanced_chunk_major_and_matching(name, w, k):
    sc = worlds.scenario(name, w)
    lays = [sc.layout(r) for r in range(w)]
    sends = _all_send_lists(sc, lays)
    plans = [build_plan(lay, *s, k) for lay, s in zip(lays, sends)]
    for lay, plan in zip(lays, plans):
        h = lay.num_halo
        assert np.array_equal(np.sort(plan.halo_order), np.arange(h))
        assert plan.halo_offsets[0] == 0 and plan.halo_offsets[-1] == h
        # chunk-major: within a chunk grouped by owner, in need-list order within an owner
        chunk_of_pos = np.searchsorted(plan.halo_offsets, np.arange(h), side="right") - 1
        owners = lay.halo_owner[plan.halo_order]
        key = chunk_of_pos * w + owners
        assert np.all(np.diff(key) >= 0)
        assert np.all(np.diff(plan.halo_order)[np.diff(key) == 0] == 1)
        # balanced: each owner's rows split into chunks whose sizes differ by at most one, and
        # the i-th of an owner's n rows sits in chunk (i * K) // n
        rc = np.array(plan.recv_counts)
        assert np.all(rc.max(0) - rc.min(0) <= 1)
        assert np.array_equal(rc.sum(0), lay.need_counts)
        for o in range(w):
            n = int(lay.need_counts[o])
            got = chunk_of_pos[owners == o]
            assert np.array_equal(got, (np.arange(n) * k) // max(n, 1))
        # without a communicator a chunk is active when this rank moves rows in it
        moved = rc.sum(1) + np.array(plan.send_counts).sum(1)
        assert plan.active == tuple(bool(m > 0) for m in moved)
        assert plan.chunk_rows(0) == int(rc[0].sum())
    for r in range(w):
        for q in range(w):
            for c in range(k):
                assert plans[r].send_counts[c][q] == plans[q].recv_counts[c][r]
                sc_ = plans[r].send_counts[c]
                o = sum(sc_[:q])
                sent = lays[r].row_ids[plans[r].send_rows[c][o : o + sc_[q]].numpy()]
                pq = plans[q]
                sel = pq.halo_order[pq.halo_offsets[c] : pq.halo_offsets[c + 1]]
                got = lays[q].halo[sel][lays[q].halo_owner[sel] == r]
                assert np.array_equal(sent, got)
    assert "HaloPlan(" in repr(plans[0])


# ---------------------------------------------------------------------------------- errors
def test_bad_inputs_name_the_argument():
    ptr, src = np.array([0, 2, 3]), np.array([1, 5, 2])
    with pytest.raises(PartitionError, match="ranks in"):
        build_exchange_layout([0, 1], ptr, src, lambda u: u, rank=0, world_size=2)
    with pytest.raises(PartitionError, match="outside the owner"):
        build_exchange_layout([0, 1], ptr, src, np.zeros(3, np.int64), rank=0, world_size=2)
    with pytest.raises(PartitionError, match="row_ids"):  # owns 5 but does not hold it
        build_exchange_layout([0, 1], ptr, src, np.zeros(6, np.int64), rank=0, world_size=2)
    with pytest.raises(PartitionError, match="indptr"):
        build_exchange_layout([0, 1], [0, 2], src, np.zeros(6, np.int64), rank=0, world_size=2)
    with pytest.raises(PartitionError, match="rank"):
        build_exchange_layout([0, 1], ptr, src, np.zeros(6, np.int64), rank=2, world_size=2)
    with pytest.raises(PartitionError, match="unique"):
        build_exchange_layout(
            [0, 1], ptr, src, np.zeros(6, np.int64), rank=0, world_size=2, row_ids=[1, 1]
        )
    with pytest.raises(PartitionError, match="1-D integer"):
        owner_function(np.zeros(3), 2)
    with pytest.raises(ConfigError, match="world_size"):
        owner_function(np.zeros(3, np.int64), 0)
    owner = np.array([0, 0, 1, 1, 0, 1])
    lay = build_exchange_layout([0, 1, 4], [0, 2, 3, 3], [2, 5, 3], owner, rank=0, world_size=2)
    assert lay.halo.tolist() == [2, 3, 5] and lay.num_rows == 3
    with pytest.raises(PartitionError, match="strictly increasing"):
        send_lists(lay, [4, 0], [0, 2])
    with pytest.raises(PartitionError, match="own rows"):
        send_lists(lay, [0], [1, 0])
    with pytest.raises(PartitionError, match="counts"):
        send_lists(lay, [0, 4], [0, 1])
    with pytest.raises(PartitionError, match="row_ids"):
        send_lists(lay, [2], [0, 1])  # not held here
    assert send_lists(lay, [1, 4], [0, 2])[0].tolist() == [1, 2]
    with pytest.raises(PartitionError, match="dst_owner"):
        requests_from_edges([0, 1], [0, 2], owner, rank=0, world_size=2)
    with pytest.raises(ConfigError, match="num_chunks"):
        build_plan(lay, np.zeros(0, np.int64), np.zeros(2, np.int64), 0)

    class ThreeRanks:
        world_size = 3

    with pytest.raises(PartitionError, match="communicator has 3"):
        exchange_need_lists(lay, ThreeRanks())


def test_requests_deduplicate_per_requester():
    owner = np.array([0, 1, 0, 1])
    # rank 1 computes destinations of 4 edges from node 0 and 2 edges from node 2; rank 0 its own
    src = np.array([2, 0, 0, 2, 0, 0, 2])
    dst_owner = np.array([1, 1, 1, 1, 1, 0, 0])
    ids, counts = requests_from_edges(src, dst_owner, owner, rank=0, world_size=2)
    assert ids.tolist() == [0, 2] and counts.tolist() == [0, 2]
