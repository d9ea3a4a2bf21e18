import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetgnn.errors import PartitionError
from fleetgnn.graph import from_edges
from fleetgnn.partition import ChunkBook, PartitionBook, chunk_partition, partition


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 40),
    e=st.integers(0, 160),
    p=st.integers(1, 5),
    m=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_chunks_cover_parts_and_balance_edges(graphs, n, e, p, m, seed):
    g = graphs.random(seed, n, e, hub=seed % 3 == 0, features=False)
    part_of = np.random.default_rng(seed).integers(0, p, n)
    book = PartitionBook.from_part_of(part_of, p, "test")
    h = book.relabel(g)
    chunks = chunk_partition(g, book, m)
    b = chunks.bounds
    assert b.shape == (p, m + 1) and chunks.chunk_edges.shape == (p, m)
    assert np.array_equal(b[:, 0], book.offsets[:-1])
    assert np.array_equal(b[:, -1], book.offsets[1:])
    assert (np.diff(b, axis=1) >= 0).all()
    # every node is a destination in exactly one chunk, inside its own part
    part, chunk = chunks.node_chunks()
    assert part.shape == (n,) and np.array_equal(part, book.owner(np.arange(n)))
    for i in range(n):
        lo, hi = chunks.chunk_range(int(part[i]), int(chunk[i]))
        assert lo <= i < hi
    lp, lc = chunks.locate(np.arange(n))
    assert np.array_equal(lp, part) and np.array_equal(lc, chunk)
    # chunk edges are the in-edges of its destinations; they add up to each part's edges
    deg = h.in_degrees()
    for q in range(p):
        part_total = deg[book.offsets[q] : book.offsets[q + 1]].sum()
        max_deg = deg[book.offsets[q] : book.offsets[q + 1]].max(initial=0)
        for j in range(m):
            lo, hi = chunks.chunk_range(q, j)
            assert chunks.chunk_edges[q, j] == deg[lo:hi].sum()
            if part_total:
                assert abs(chunks.chunk_edges[q, j] - part_total / m) < max_deg
        if not part_total:
            assert np.ptp(chunks.chunk_sizes()[q]) <= 1
    assert chunks.chunk_edges.sum() == g.num_edges
    same = chunk_partition(h, book, m, relabelled=True)
    assert np.array_equal(same.bounds, chunks.bounds)


def test_chunks_on_range_partition_and_repr(graphs):
    g = graphs.random(2, 100, 800)
    book = partition(g, "range", 2)
    chunks = chunk_partition(g, book, 4)
    assert chunks.num_chunks == 8 and chunks.num_nodes == 100
    assert "ChunkBook(num_parts=2, chunks_per_part=4, num_nodes=100" in repr(chunks)
    assert chunks.chunk_edges.max() - chunks.chunk_edges.min() < 2 * g.in_degrees().max()


def test_more_chunks_than_nodes_and_empty_parts():
    g = from_edges(np.array([0, 1, 2]), np.array([1, 2, 0]), 3)
    book = PartitionBook.from_part_of(np.array([2, 2, 0]), 4, "test")
    chunks = chunk_partition(g, book, 5)
    assert chunks.chunk_sizes().sum() == 3
    assert chunks.chunk_sizes()[1].sum() == 0 and chunks.chunk_sizes()[3].sum() == 0
    part, _ = chunks.node_chunks()
    assert part.tolist() == [0, 2, 2]


def test_errors(graphs):
    g = graphs.random(0, 10, 20)
    book = partition(g, "hash", 2)
    with pytest.raises(PartitionError, match="chunks_per_part"):
        chunk_partition(g, book, 0)
    with pytest.raises(PartitionError, match="covers 10 nodes"):
        chunk_partition(graphs.random(0, 11, 20), book, 2)
    chunks = chunk_partition(g, book, 2)
    with pytest.raises(PartitionError, match="does not exist"):
        chunks.chunk_range(2, 0)
    with pytest.raises(PartitionError, match=r"\[0, 10\)"):
        chunks.locate(np.array([10]))
    with pytest.raises(PartitionError, match="non-decreasing"):
        ChunkBook(1, 2, np.array([[0, 3, 2]]), np.zeros((1, 2), np.int64))


def _metis_graph():
    rng = np.random.default_rng(4)
    return from_edges(rng.integers(0, 300, 1500), rng.integers(0, 300, 1500), 300)


def _computed_once_world(comm):
    """Rank 0 partitions (METIS, two-level METIS); rank 1 gets the books without partitioning."""
    from fleetgnn.partition import chunks as chunks_module

    g = _metis_graph()
    calls = []

    def metis_once():
        calls.append(comm.rank)
        return partition(g, "metis", 2, seed=3)

    book = chunks_module.computed_once(metis_once, comm)
    two = chunks_module.two_level_book(g, "metis", 2, 3, comm=comm)

    def fails():
        raise RuntimeError("out of memory in METIS")

    try:
        chunks_module.computed_once(fails, comm)
    except Exception as err:  # noqa: BLE001 - returned to the test
        error = f"{type(err).__name__}: {err}"
    return {
        "calls": calls,
        "book": (book.method, book.params, book.part_of, book.perm, book.inv_perm, book.offsets),
        "two": (two.params, two.part_of, two.perm, two.offsets),
        "error": error,
    }


@pytest.mark.slow
def test_computed_once_partitions_on_rank_0_and_shares_the_book():
    from fleetgnn.distributed.testing import run_world
    from fleetgnn.partition.chunks import two_level_book

    r0, r1 = run_world(_computed_once_world, 2, timeout_s=120)
    assert r0["calls"] == [0] and r1["calls"] == []  # METIS ran on rank 0 only
    g = _metis_graph()
    want = partition(g, "metis", 2, seed=3)
    two = two_level_book(g, "metis", 2, 3)
    for res in (r0, r1):
        method, params, part_of, perm, inv, offsets = res["book"]
        assert method == "metis" and params == dict(want.params)
        for got, ref in ((part_of, want.part_of), (perm, want.perm), (inv, want.inv_perm)):
            assert got.dtype == ref.dtype and np.array_equal(got, ref)
        assert np.array_equal(offsets, want.offsets)
        t_params, t_part, t_perm, t_off = res["two"]
        assert t_params == two.params and t_params["subparts"] > 1
        assert np.array_equal(t_part, two.part_of) and np.array_equal(t_perm, two.perm)
        assert np.array_equal(t_off, two.offsets)
    # rank 0 raises its own error; rank 1 the same failure instead of waiting for ever
    assert r0["error"] == "RuntimeError: out of memory in METIS"
    assert r1["error"].startswith("PartitionError: rank 0 could not partition the graph")
    assert "out of memory in METIS" in r1["error"]
