"""HongTu's transition plan in one process (numpy only): chunk hops cover the graph, transition
set algebra, slot stability, deduplicated load and gradient flow through simulated device
buffers, volumes == closed forms and Eq. 4, greedy chunk reorganisation, order validation.

Cases: a random multigraph (repeated edges, self loops, isolated nodes) and a clustered graph
(4 dense communities, few cross edges, IDs interleaved so chunks mix communities), ``range`` and
``metis`` first levels, ``P`` in 1..4, ``M`` in {1, 2, 7, nodes per part}, identity and
reorganised orders; plus a range book with an empty part.
"""

import functools
import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from fleetgnn.errors import PartitionError
from fleetgnn.exchange.transition import (
    HONGTU_BANDWIDTHS,
    TransitionPlan,
    build_transition_plan,
    chunk_hop,
    chunk_rows,
    reorganize,
)
from fleetgnn.graph import Graph, from_edges
from fleetgnn.partition import ChunkBook, PartitionBook, chunk_partition, contiguous_partition

WIDTH = 3


# ---------------------------------------------------------------------------------- graphs
def random_graph() -> Graph:
    """60 nodes: random edges (self loops possible), 40 repeated edges, 8 isolated nodes."""
    rng = np.random.default_rng(7)
    n = 60
    isolated = rng.choice(n, 8, replace=False)
    src, dst = rng.integers(0, n, 260), rng.integers(0, n, 260)
    keep = ~np.isin(src, isolated) & ~np.isin(dst, isolated)
    src, dst = src[keep], dst[keep]
    again = rng.integers(0, src.size, 40)
    return from_edges(np.concatenate([src, src[again]]), np.concatenate([dst, dst[again]]), n)


def community_ids() -> np.ndarray:
    """``ids[c]``: the 16 node IDs of community ``c``; ID = quarter * 16 + c * 4 + offset."""
    q, c, o = np.meshgrid(np.arange(4), np.arange(4), np.arange(4), indexing="ij")
    ids = q * 16 + c * 4 + o  # [quarter, community, offset]
    return ids.transpose(1, 0, 2).reshape(4, 16)


def clustered_graph() -> Graph:
    """4 dense communities of 16 nodes (p = 0.5) with 6 cross edges, IDs interleaved."""
    rng = np.random.default_rng(3)
    src, dst = [], []
    for members in community_ids():
        a, b = np.meshgrid(members, members, indexing="ij")
        pick = (a != b) & (rng.random(a.shape) < 0.5)
        src.append(a[pick])
        dst.append(b[pick])
    src.append(rng.integers(0, 64, 6))
    dst.append(rng.integers(0, 64, 6))
    return from_edges(np.concatenate(src), np.concatenate(dst), 64)


GRAPHS = {"random": random_graph, "clustered": clustered_graph}


@functools.cache
def graph(name: str) -> Graph:
    return GRAPHS[name]()


@functools.cache
def first_level(name: str, method: str, p: int):
    g = graph(name)
    if method == "gap":  # a range book whose part 1 is empty
        assert p == 4
        return PartitionBook.from_offsets(np.array([0, 20, 20, 45, g.num_nodes]), "range"), g
    return contiguous_partition(g, method, p, 0)


@functools.cache
def layout(name: str, method: str, p: int, m):
    """``(graph in new IDs, book, chunks, hops[p][c])``; ``m == 'npp'``: nodes per part."""
    book, h = first_level(name, method, p)
    m = max(1, h.num_nodes // p) if m == "npp" else m
    chunks = chunk_partition(h, book, m, relabelled=True)
    hops = [[chunk_hop(h.indptr, h.indices, chunks, i, c) for c in range(m)] for i in range(p)]
    return h, book, chunks, hops


@functools.cache
def case(name: str, method: str, p: int, m, ordering: str) -> SimpleNamespace:
    """A plan and the sets it should have, computed independently from the hops."""
    h, book, chunks, hops = layout(name, method, p, m)
    m = chunks.chunks_per_part
    rows = [[hop.rows for hop in part] for part in hops]
    if ordering == "identity":
        order = np.tile(np.arange(m), (p, 1))
        plan = TransitionPlan(chunks, rows)
    else:
        order = reorganize(chunks, rows)
        plan = TransitionPlan(chunks, rows, order)
    need = [[rows[i][order[i, j]] for i in range(p)] for j in range(m)]  # N(S_ij)
    sets = [[set(r.tolist()) for r in batch] for batch in need]
    trans = [set().union(*batch) for batch in sets]  # T_j
    offsets = np.asarray(book.offsets, dtype=np.int64)
    own = [set(range(int(offsets[k]), int(offsets[k + 1]))) for k in range(p)]  # V_k
    return SimpleNamespace(
        n=h.num_nodes, p=p, m=m, chunks=chunks, rows=rows, order=order, plan=plan,
        need=need, sets=sets, trans=trans, offsets=offsets, own=own,
    )  # fmt: skip


LAYOUTS = [
    pytest.param(g, meth, p, m, id=f"{g}-{meth}-P{p}-M{m}")
    for g, meth, p, m in itertools.product(
        GRAPHS, ("range", "metis"), (1, 2, 3, 4), (1, 2, 7, "npp")
    )
] + [pytest.param("random", "gap", 4, m, id=f"random-gap-P4-M{m}") for m in (1, 2, 7, "npp")]

CASES = [
    pytest.param((*lay.values, o), id=f"{lay.id}-{o}")
    for lay in LAYOUTS
    for o in ("identity", "reorganised")
]


@pytest.fixture(params=CASES)
def tc(request) -> SimpleNamespace:
    return case(*request.param)


@pytest.fixture(params=[pytest.param(lay.values, id=lay.id) for lay in LAYOUTS])
def lay(request):
    return layout(*request.param)


@pytest.fixture(params=[pytest.param(lay.values, id=lay.id) for lay in LAYOUTS])
def lay_case(request):
    """A layout and its reorganised case (for reusing the greedy order)."""
    return layout(*request.param), case(*request.param, "reorganised")


def in_part(ids: np.ndarray, offsets: np.ndarray, k: int) -> np.ndarray:
    return (ids >= offsets[k]) & (ids < offsets[k + 1])


def test_graphs_have_the_advertised_shape():
    g = graph("random")
    dst = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    pairs = np.stack([g.indices.astype(np.int64), dst])
    assert np.unique(pairs, axis=1).shape[1] < g.num_edges  # repeated edges
    touched = np.zeros(g.num_nodes, dtype=bool)
    touched[pairs.ravel()] = True
    assert (~touched).sum() == 8  # isolated nodes
    c = graph("clustered")
    block = np.empty(64, dtype=np.int64)
    for b, members in enumerate(community_ids()):
        block[members] = b
    cdst = np.repeat(np.arange(64), np.diff(c.indptr))
    assert (block[c.indices] != block[cdst]).sum() <= 12  # few cross edges
    # a range chunk of a part holds several communities
    _, _, chunks, _ = layout("clustered", "range", 2, 2)
    lo, hi = chunks.chunk_range(0, 0)
    assert np.unique(block[lo:hi]).size == 4


# ---------------------------------------------------------------------------------- 1. hops
def test_chunk_hops_partition_the_edges(lay):
    h, book, chunks, hops = lay
    n = h.num_nodes
    cover = np.zeros(n, dtype=np.int64)
    srcs, dsts = [], []
    for i, part in enumerate(hops):
        for c, hop in enumerate(part):
            lo, hi = chunks.chunk_range(i, c)
            assert (hop.part, hop.chunk, hop.lo, hop.hi, hop.num_dst) == (i, c, lo, hi, hi - lo)
            assert book.offsets[i] <= lo <= hi <= book.offsets[i + 1]
            cover[lo:hi] += 1
            # rows: the destinations in ID order, then the other sources ascending
            k = hi - lo
            assert hop.rows.dtype == np.int64
            assert np.array_equal(hop.rows[:k], np.arange(lo, hi))
            rest = hop.rows[k:]
            assert (np.diff(rest) > 0).all() and not ((rest >= lo) & (rest < hi)).any()
            assert np.array_equal(hop.rows, chunk_rows(h.indptr, h.indices, lo, hi))
            # topology: CSC over the destinations, indices are positions in rows
            assert hop.indptr.shape == (k + 1,) and hop.indptr[0] == 0
            assert (np.diff(hop.indptr) >= 0).all() and hop.indptr[-1] == hop.num_edges
            assert hop.num_edges == chunks.chunk_edges[i, c]
            assert hop.indices.dtype == np.int64
            assert ((hop.indices >= 0) & (hop.indices < hop.rows.size)).all()
            src = hop.rows[hop.indices]
            dst = np.repeat(np.arange(lo, hi), np.diff(hop.indptr))
            for v in range(lo, hi):  # the full in-neighbourhood, with multiplicity
                want = np.sort(h.indices[h.indptr[v] : h.indptr[v + 1]])
                assert np.array_equal(np.sort(src[dst == v]), want), (i, c, v)
            assert set(rest.tolist()) == set(src.tolist()) - set(range(lo, hi))
            assert hop.nbytes == hop.rows.nbytes + hop.indptr.nbytes + hop.indices.nbytes
            srcs.append(src)
            dsts.append(dst)
    assert (cover == 1).all()  # every vertex is a destination in exactly one chunk
    # chunk edge sets are disjoint and their union is E (as multisets of (src, dst))
    got = np.stack([np.concatenate(srcs), np.concatenate(dsts)])
    want = np.stack([h.indices.astype(np.int64), np.repeat(np.arange(n), np.diff(h.indptr))])
    assert np.array_equal(got[:, np.lexsort(got[::-1])], want[:, np.lexsort(want[::-1])]), (
        "chunk in-edges are not a partition of the graph's edges"
    )


# ---------------------------------------------------------------------------------- 2. sets
def check_transition_sets(tc):
    plan, p, m, off = tc.plan, tc.p, tc.m, tc.offsets
    assert np.array_equal(plan.order, tc.order)
    assert (plan.num_parts, plan.num_batches) == (p, m)
    assert np.array_equal(plan.offsets, off)
    assert len(plan.trans) == m and len(plan.load) == m
    for j in range(m):
        for i in range(p):
            assert np.array_equal(plan.batch_rows[j][i], tc.need[j][i])
        full = np.array(sorted(tc.trans[j]), dtype=np.int64)
        assert len(plan.trans[j]) == p
        for k in range(p):
            t = plan.trans[j][k]
            assert t.dtype == np.int64 and (np.diff(t) > 0).all()
            assert in_part(t, off, k).all()
            assert np.array_equal(t, full[in_part(full, off, k)])
        # T_j is the disjoint union of the T_j^k
        assert np.array_equal(np.concatenate(plan.trans[j]), full)
        for k in range(p):
            t, load = plan.trans[j][k], plan.load[j][k]
            prev = set(plan.trans[j - 1][k].tolist()) if j else set()
            assert load.dtype == bool and load.shape == t.shape
            assert np.array_equal(~load, np.array([r in prev for r in t.tolist()], dtype=bool))
            d, r = set(t[~load].tolist()), set(t[load].tolist())
            assert d == set(t.tolist()) & prev  # D_j^k
            assert r == set(t.tolist()) - prev  # R_j^k
            assert d | r == set(t.tolist()) and not d & r


# ---------------------------------------------------------------------------------- 3. slots
def check_slots(tc):
    plan, p, m = tc.plan, tc.p, tc.m
    assert len(plan.slots) == m and len(plan.leave) == m + 1
    assert plan.capacity.shape == (p,)
    for k in range(p):
        assert plan.capacity[k] == max(plan.trans[j][k].size for j in range(m))
        rows0, slots0 = plan.leave[0][k]
        assert rows0.size == 0 and slots0.size == 0
        prev = {}
        for j in range(m):
            t, s = plan.trans[j][k], plan.slots[j][k]
            assert s.shape == t.shape and s.dtype == np.int64
            assert np.unique(s).size == s.size, f"two rows share a slot (batch {j}, rank {k})"
            assert ((s >= 0) & (s < plan.capacity[k])).all()
            cur = dict(zip(t.tolist(), s.tolist()))
            for r in cur.keys() & prev.keys():
                assert cur[r] == prev[r], f"row {r} moved slot between batches {j - 1}, {j}"
            rows, slots = plan.leave[j][k]
            gone = sorted(prev.keys() - cur.keys())
            assert sorted(rows.tolist()) == gone
            assert [prev[r] for r in rows.tolist()] == slots.tolist()
            prev = cur
        rows, slots = plan.leave[m][k]
        assert np.array_equal(rows, plan.trans[m - 1][k])
        assert np.array_equal(slots, plan.slots[m - 1][k])


# ---------------------------------------------------------------------------------- 4. load
def check_dedup_load(tc):
    plan, p, m, off = tc.plan, tc.p, tc.m, tc.offsets
    host = np.random.default_rng(11).standard_normal((tc.n, WIDTH))
    buf = [np.full((int(plan.capacity[k]), WIDTH), np.nan) for k in range(p)]
    loaded = reused = 0
    for j in range(m):
        for k in range(p):  # fill the transition buffers
            _, gone = plan.leave[j][k]
            buf[k][gone] = np.nan  # a left row must never be read again
            t, s, load = plan.trans[j][k], plan.slots[j][k], plan.load[j][k]
            assert np.array_equal(buf[k][s[~load]], host[t[~load]]), "stale reused row"
            buf[k][s[load]] = host[t[load]]
            live = np.zeros(buf[k].shape[0], dtype=bool)
            live[s] = True
            assert np.isnan(buf[k][~live]).all()
            loaded += int(load.sum())
            reused += int((~load).sum())
        for i in range(p):  # every rank assembles its chunk's rows from the owners
            need = tc.need[j][i]
            got = np.full((need.size, WIDTH), np.nan)
            hits = np.zeros(need.size, dtype=np.int64)
            pulls = plan.pulls(i, j)
            owners = [(i + s) % p for s in range(p) if in_part(need, off, (i + s) % p).any()]
            assert [k for k, _, _ in pulls] == owners
            for k, pos, slots in pulls:
                assert in_part(need[pos], off, k).all()
                got[pos] = buf[k][slots]
                hits[pos] += 1
            assert (hits == 1).all()
            assert np.array_equal(got, host[need]), f"rank {i} batch {j} read wrong rows"
    v = plan.volumes()
    assert (loaded, reused) == (v.intra, v.reuse)


# ---------------------------------------------------------------------------------- 5. grads
def check_dedup_gradients(tc):
    plan, p, m = tc.plan, tc.p, tc.m
    rng = np.random.default_rng(13)
    host = np.zeros((tc.n, WIDTH))
    want = np.zeros((tc.n, WIDTH))
    buf = [np.zeros((int(plan.capacity[k]), WIDTH)) for k in range(p)]
    for j in range(m + 1):
        for k in range(p):  # flush the rows leaving the transition set
            rows, slots = plan.leave[j][k]
            np.add.at(host, rows, buf[k][slots])
            buf[k][slots] = 0.0
        if j == m:
            break
        for k in range(p):  # entering rows start from an empty slot
            assert not buf[k][plan.slots[j][k][plan.load[j][k]]].any()
        for i in range(p):
            need = tc.need[j][i]
            grad = rng.standard_normal((need.size, WIDTH))
            np.add.at(want, need, grad)
            for k, pos, slots in plan.pulls(i, j):
                np.add.at(buf[k], slots, grad[pos])
    assert not any(b.any() for b in buf), "gradients left on a device after the last flush"
    np.testing.assert_allclose(host, want, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------- 6. volumes
def check_volumes(tc):
    plan, p, m = tc.plan, tc.p, tc.m
    baseline = sum(len(s) for batch in tc.sets for s in batch)
    inter = sum(len(t) for t in tc.trans)
    prev = [set(), *tc.trans[:-1]]
    intra = sum(len(t - q) for t, q in zip(tc.trans, prev))
    reuse = sum(len(t & q) for t, q in zip(tc.trans, prev))
    local = sum(len(tc.sets[j][i] & tc.own[i]) for j in range(m) for i in range(p))
    peer = sum(len(tc.sets[j][i] - (tc.trans[j] & tc.own[i])) for j in range(m) for i in range(p))
    v = plan.volumes()
    assert v.to_dict() == dict(
        baseline=baseline, inter=inter, intra=intra, reuse=reuse, peer=peer, local=local
    )
    assert baseline >= inter >= intra > 0
    assert v.reuse == v.inter - v.intra and v.local + v.peer == v.baseline

    counts = plan.pull_counts()
    assert counts.shape == (m, p, p) and counts.dtype == np.int64
    want = [[[len(s & own) for own in tc.own] for s in batch] for batch in tc.sets]
    assert counts.tolist() == want
    assert np.array_equal(counts.sum(axis=2), [[s.size for s in b] for b in tc.need])

    red = v.reductions()
    assert red == pytest.approx(
        {
            "inter_rank": (baseline - inter) / baseline,
            "intra_rank": (inter - intra) / baseline,
            "total": (baseline - intra) / baseline,
        }
    )
    assert red["inter_rank"] + red["intra_rank"] == pytest.approx(red["total"])

    slow = {"h2d": 1e9, "peer": 5e9, "reuse": 7e10}
    for width, elem, bw in [(3, 4, HONGTU_BANDWIDTHS), (128, 2, slow)]:
        eq4 = width * elem * (intra / bw["h2d"] + peer / bw["peer"] + reuse / bw["reuse"])
        assert plan.modelled_seconds(width, elem, bw) == pytest.approx(eq4, rel=1e-12)
    assert plan.modelled_seconds(3, 4) == plan.modelled_seconds(3, 4, HONGTU_BANDWIDTHS)


def test_plan_invariants(tc):
    """Invariants 2-6 of one case (one test item per case keeps the file fast)."""
    check_transition_sets(tc)
    check_slots(tc)
    check_volumes(tc)
    check_dedup_load(tc)
    check_dedup_gradients(tc)


# ---------------------------------------------------------------------------------- 7. reorganise
def test_reorganize_is_a_deterministic_permutation(lay_case):
    (_, _, chunks, hops), reorganised = lay_case
    p, m = chunks.num_parts, chunks.chunks_per_part
    rows = [[hop.rows.copy() for hop in part] for part in hops]
    order = reorganised.order  # reorganize(chunks, rows) of the same input, computed once
    assert order.shape == (p, m) and order.dtype == np.int64
    for o in order:
        assert np.array_equal(np.sort(o), np.arange(m))
    assert order[0, 0] == 0  # phase 2 starts from batch 0, seeded by chunk 0 of part 0
    again = reorganize(chunks, [[r.copy() for r in part] for part in rows])
    assert np.array_equal(order, again)
    for part, hop_part in zip(rows, hops):  # the input is left alone
        for r, hop in zip(part, hop_part):
            assert np.array_equal(r, hop.rows)


@pytest.mark.parametrize("m", [1, 2, 7, "npp"])
@pytest.mark.parametrize("p", [1, 2, 3, 4])
@pytest.mark.parametrize("method", ["range", "metis"])
def test_build_plan_never_models_slower_on_clustered_graph(method, p, m):
    h, _, chunks, hops = layout("clustered", method, p, m)
    plain, rows = build_transition_plan(h.indptr, h.indices, chunks, reorganise=False)
    best, rows2 = build_transition_plan(h.indptr, h.indices, chunks, reorganise=True)
    chunks_per_part = chunks.chunks_per_part
    for part, part2, hop_part in zip(rows, rows2, hops):
        for r, r2, hop in zip(part, part2, hop_part):
            assert np.array_equal(r, hop.rows) and np.array_equal(r2, hop.rows)
    assert np.array_equal(plain.order, np.tile(np.arange(chunks_per_part), (p, 1)))
    greedy = case("clustered", method, p, m, "reorganised").order
    assert np.array_equal(best.order, plain.order) or np.array_equal(best.order, greedy)
    for width, elem in [(1, 1), (64, 4)]:
        assert best.modelled_seconds(width, elem) <= plain.modelled_seconds(width, elem)


def reversed_communities() -> tuple[Graph, ChunkBook]:
    """4 complete communities of 8 nodes, each split over 2 parts of 4 chunks: chunk ``c`` of
    part 0 is community ``c``'s first half, chunk ``c`` of part 1 community ``3 - c``'s second
    half, so the identity order pairs unrelated chunks in every batch."""
    src, dst = [], []
    for c in range(4):
        members = np.concatenate([np.arange(4 * c, 4 * c + 4), 16 + 4 * (3 - c) + np.arange(4)])
        a, b = np.meshgrid(members, members, indexing="ij")
        src.append(a[a != b])
        dst.append(b[a != b])
    g = from_edges(np.concatenate(src), np.concatenate(dst), 32)
    bounds = np.array([[0, 4, 8, 12, 16], [16, 20, 24, 28, 32]], dtype=np.int64)
    chunks = ChunkBook(2, 4, bounds, np.diff(g.indptr[bounds], axis=1))
    return g, chunks


def test_reorganisation_finds_inter_rank_duplicates():
    g, chunks = reversed_communities()
    plain, rows = build_transition_plan(g.indptr, g.indices, chunks, reorganise=False)
    order = reorganize(chunks, rows)
    assert order.tolist() == [[0, 1, 2, 3], [3, 2, 1, 0]]
    greedy = TransitionPlan(chunks, rows, order)
    best, _ = build_transition_plan(g.indptr, g.indices, chunks, reorganise=True)
    assert np.array_equal(best.order, order)
    # identity: T_j = two communities (16 rows); batches 1 and 2 run the same pair
    assert plain.volumes().to_dict() == dict(
        baseline=64, inter=64, intra=48, reuse=16, peer=32, local=32
    )
    # reorganised: both halves of one community per batch, every row shared by both ranks
    assert greedy.volumes().to_dict() == dict(
        baseline=64, inter=32, intra=32, reuse=0, peer=32, local=32
    )
    assert best.volumes().inter < plain.volumes().inter
    assert best.modelled_seconds(1, 1) < plain.modelled_seconds(1, 1)
    assert best.capacity.tolist() == [4, 4] and plain.capacity.tolist() == [8, 8]


# ---------------------------------------------------------------------------------- 8. errors
def test_plan_rejects_bad_orders_and_rows():
    _, _, chunks, hops = layout("random", "range", 2, 7)
    rows = [[hop.rows for hop in part] for part in hops]
    good = np.tile(np.arange(7), (2, 1))
    bad = [
        good[:, :6],  # too few batches
        np.tile(np.arange(8), (2, 1)),  # too many
        good[:1],  # one part missing
        np.arange(7),  # 1-D
        np.stack([np.arange(7), np.zeros(7, dtype=np.int64)]),  # repeated chunk
        np.stack([np.arange(7), np.arange(1, 8)]),  # chunk 7 does not exist
        np.stack([np.arange(7), np.arange(-1, 6)]),  # negative chunk
    ]
    for order in bad:
        with pytest.raises(PartitionError, match="permutation"):
            TransitionPlan(chunks, rows, order)
    with pytest.raises(PartitionError, match="'rows'"):
        TransitionPlan(chunks, rows[:1])
    with pytest.raises(PartitionError, match="'rows'"):
        TransitionPlan(chunks, [rows[0], rows[1][:6]])
    TransitionPlan(chunks, rows, good[:, ::-1])  # any permutation is fine
