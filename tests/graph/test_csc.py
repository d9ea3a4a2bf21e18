import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetgnn.errors import FleetgnnError, GraphError
from fleetgnn.graph import Graph, coo_to_csc, from_edges


def _random_graph(rng: np.random.Generator, n: int = 30, e: int = 120, weighted: bool = False):
    src = rng.integers(0, n, e)
    dst = rng.integers(0, n, e)
    data = {
        "x": rng.standard_normal((n, 5)).astype(np.float32),
        "y": rng.integers(0, 3, n),
        "train_mask": np.arange(n) % 3 == 0,
        "val_mask": np.arange(n) % 3 == 1,
    }
    w = rng.random(e) if weighted else None
    return from_edges(src, dst, n, edge_weight=w, node_data=data, num_classes=3), src, dst, w


def _dense(g: Graph) -> np.ndarray:
    """Dense A[dst, src] with summed weights (counts for unweighted graphs)."""
    src, dst = g.edges()
    w = np.ones(g.num_edges) if g.edge_weight is None else g.edge_weight
    return sp.coo_matrix((w, (dst, src)), shape=(g.num_nodes, g.num_nodes)).toarray()


def test_coo_to_csc_matches_scipy():
    rng = np.random.default_rng(0)
    g, src, dst, _ = _random_graph(rng)
    ref = sp.csc_matrix((np.ones(src.size), (src, dst)), shape=(30, 30))  # column = destination
    ref.sum_duplicates()
    assert np.array_equal(g.in_degrees(), np.bincount(dst, minlength=30))
    assert np.array_equal(g.out_degrees(), np.bincount(src, minlength=30))
    assert np.allclose(_dense(g), ref.toarray().T)
    assert g.indptr.dtype == np.int64 and g.indices.dtype == np.int32
    # stable: each destination keeps the input order of its edges
    for v in range(30):
        assert list(g.indices[g.indptr[v] : g.indptr[v + 1]]) == list(src[dst == v])


def test_repr_is_informative():
    g, *_ = _random_graph(np.random.default_rng(1))
    r = repr(g)
    assert "num_nodes=30" in r and "num_edges=120" in r and "train=10" in r


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (
            dict(indptr=np.array([0, 2, 1, 3], np.int64), indices=np.array([0, 1, 2], np.int32)),
            "non-decreasing",
        ),
        (dict(indptr=np.array([0, 1, 2], np.int64), indices=np.array([0, 5], np.int32)), "[0, 2)"),
        (dict(indptr=np.array([0, 1, 2], np.int64), indices=np.array([0, -1], np.int32)), "-1"),
        (
            dict(indptr=np.array([1, 1, 2], np.int64), indices=np.array([0, 1], np.int32)),
            "indptr[0]",
        ),
        (
            dict(indptr=np.array([0, 1, 3], np.int64), indices=np.array([0, 1], np.int32)),
            "truncated",
        ),
        (dict(indptr=np.array([0, 1, 2], np.int32), indices=np.array([0, 1], np.int32)), "int64"),
    ],
)
def test_topology_errors(kwargs, fragment):
    with pytest.raises(GraphError) as info:
        Graph(**kwargs)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, FleetgnnError)


def _base(n=4):
    return dict(indptr=np.array([0, 1, 2, 3, 3], np.int64), indices=np.array([1, 2, 0], np.int32))


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (dict(x=np.zeros((3, 2), np.float32)), "one row per node"),
        (dict(y=np.array([0, 1, 2, 9]), num_classes=3), "label 9"),
        (dict(y=np.array([0, 1, -2, 0])), "label -2"),
        (
            dict(train_mask=np.array([1, 0, 0, 0], bool), test_mask=np.array([1, 1, 0, 0], bool)),
            "overlap",
        ),
        (dict(x=np.array([[0.0], [np.nan], [1.0], [2.0]])), "non-finite"),
        (dict(x=np.array([[0.0], [np.inf], [1.0], [2.0]])), "allow_nonfinite"),
        (dict(train_mask=np.array([1, 0, 0, 0], np.int8)), "bool"),
        (dict(y=np.array([-1, 0, 1, 0]), train_mask=np.array([1, 0, 0, 0], bool)), "unlabelled"),
        (dict(edge_weight=np.ones(2)), "one value per edge"),
    ],
)
def test_node_data_errors(extra, fragment):
    with pytest.raises(GraphError) as info:
        Graph(**_base(), **extra)
    assert fragment in str(info.value)


def test_nonfinite_allowed_on_request():
    g = Graph(**_base(), x=np.array([[0.0], [np.nan], [1.0], [2.0]]), allow_nonfinite=True)
    assert np.isnan(g.x[1, 0])


def test_permute_is_isomorphism_with_consistent_data():
    rng = np.random.default_rng(2)
    g, *_ = _random_graph(rng, weighted=True)
    perm = rng.permutation(g.num_nodes)
    h = g.permute(perm)
    inv = np.argsort(perm)
    # edge (u -> v, w) in g  <=>  edge (inv[u] -> inv[v], w) in h, as multisets
    src, dst = g.edges()
    hs, hd = h.edges()
    a = sorted(zip(inv[src].tolist(), inv[dst].tolist(), g.edge_weight.tolist()))
    b = sorted(zip(hs.tolist(), hd.tolist(), h.edge_weight.tolist()))
    assert a == b
    for name in ("x", "y", "train_mask", "val_mask"):
        assert np.array_equal(getattr(h, name)[inv], getattr(g, name))
    assert np.array_equal(h.permute(inv).indptr, g.indptr)
    assert np.array_equal(h.permute(inv).indices, g.indices)


def test_permute_rejects_non_permutation():
    g, *_ = _random_graph(np.random.default_rng(3))
    bad = np.arange(g.num_nodes)
    bad[0] = 1
    with pytest.raises(GraphError, match="not a permutation"):
        g.permute(bad)
    with pytest.raises(GraphError, match="shape"):
        g.permute(np.arange(5))


def test_to_undirected_symmetric_dedup_and_keeps_weights():
    rng = np.random.default_rng(4)
    g, *_ = _random_graph(rng, weighted=True)
    u = g.to_undirected()
    a = _dense(u)
    pattern = a != 0
    assert np.array_equal(pattern, pattern.T)
    # no duplicates: every (dst, src) pair once
    src, dst = u.edges()
    pairs = dst.astype(np.int64) * u.num_nodes + src
    assert np.unique(pairs).size == pairs.size
    # the pattern is exactly the union of edges and reversed edges
    ga = _dense(g) != 0
    assert np.array_equal(pattern, ga | ga.T)
    # an edge present in the input keeps (one of) its own weights
    gs, gd = g.edges()
    own = {}
    for s, d, w in zip(gs.tolist(), gd.tolist(), g.edge_weight.tolist()):
        own.setdefault((s, d), w)
    for s, d, w in zip(src.tolist(), dst.tolist(), u.edge_weight.tolist()):
        if (s, d) in own:
            assert w == own[(s, d)]
        else:
            assert w == own[(d, s)]
    # neighbours sorted within each node
    for v in range(u.num_nodes):
        seg = u.indices[u.indptr[v] : u.indptr[v + 1]]
        assert np.all(np.diff(seg) > 0)


def test_add_self_loops_only_where_missing():
    g = from_edges(np.array([0, 1, 2]), np.array([0, 2, 1]), 4)
    h = g.add_self_loops()
    src, dst = h.edges()
    loops = src[src == dst]
    assert sorted(loops.tolist()) == [0, 1, 2, 3]
    assert h.num_edges == g.num_edges + 3


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 12).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=40),
        )
    )
)
def test_from_edges_roundtrip_property(case):
    n, edges = case
    src = np.array([e[0] for e in edges], dtype=np.int64)
    dst = np.array([e[1] for e in edges], dtype=np.int64)
    g = from_edges(src, dst, n)
    gs, gd = g.edges()
    assert sorted(zip(gs.tolist(), gd.tolist())) == sorted(zip(src.tolist(), dst.tolist()))
    u = g.to_undirected().to_undirected()
    assert np.array_equal(u.indices, g.to_undirected().indices)


def test_coo_to_csc_errors():
    with pytest.raises(GraphError, match="equal length"):
        coo_to_csc(np.array([0, 1]), np.array([0]), 2)
    with pytest.raises(GraphError, match=r"\[0, 2\)"):
        coo_to_csc(np.array([0, 3]), np.array([0, 1]), 2)
    with pytest.raises(GraphError, match="integer"):
        coo_to_csc(np.array([0.5]), np.array([0]), 2)


def test_empty_graph():
    g = from_edges(np.zeros(0, np.int64), np.zeros(0, np.int64), 3)
    assert g.num_edges == 0 and g.num_nodes == 3
    assert g.to_undirected().num_edges == 0
    assert g.add_self_loops().num_edges == 3


def test_out_degrees_counted_in_blocks(monkeypatch):
    """``out_degrees`` counts ``indices`` block by block (no int64 copy of the whole array)."""
    import fleetgnn.graph.csc as csc

    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 50, 999), rng.integers(0, 50, 999)
    g = from_edges(src, dst, 50)
    monkeypatch.setattr(csc, "_DEGREE_BLOCK", 13)
    assert np.array_equal(g.out_degrees(), np.bincount(src, minlength=50))
    assert g.out_degrees().dtype == np.int64


def test_edge_ids_are_checked_once_per_graph(monkeypatch):
    """The store, the sampler and the partitioner each check the edges they build from; a graph
    reads each range once (none at all when it was built with every value checked)."""
    from fleetgnn.graph import csc

    g, *_ = _random_graph(np.random.default_rng(0))
    scans: list[int] = []
    check_ids = csc.check_ids

    def counted(name, ids, *args, **kwargs):
        scans.append(ids.size)
        return check_ids(name, ids, *args, **kwargs)

    monkeypatch.setattr(csc, "check_ids", counted)
    csc.check_edge_ids(g)
    assert scans == []  # validated in full when it was built
    mapped = Graph(g.indptr, g.indices, validate="structure")  # as a memory-mapped dataset opens
    csc.check_edge_ids(mapped, 10, 50)
    csc.check_edge_ids(mapped, 10, 50)
    csc.check_edge_ids(mapped, 20, 30)
    assert scans == [40]
    csc.check_edge_ids(mapped)
    csc.check_edge_ids(mapped)
    csc.check_edge_ids(mapped, 0, 7)
    assert scans == [40, g.num_edges]
    edited = g.indices.copy()
    edited[33] = g.num_nodes  # a value that changed on disk after the dataset was verified
    bad = Graph(g.indptr, edited, validate="structure")
    for _ in range(2):  # a bad range is never remembered as good
        with pytest.raises(GraphError, match="at edge 33"):
            csc.check_edge_ids(bad)
    csc.check_edge_ids(bad, 0, 33)
    assert scans[-1] == 33


def _coded_graph(rng: np.random.Generator, n: int = 25, e: int = 90):
    """A graph whose edge features name their edge: ``edge_attr[e] = (src, dst, k)``."""
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    attr = np.stack([src, dst, np.arange(e)], axis=1).astype(np.float64)
    w = rng.random(e)
    return from_edges(src, dst, n, edge_weight=w, edge_attr=attr), w


def _assert_coded(g: Graph, w: np.ndarray, perm: np.ndarray | None = None) -> None:
    """Every edge's features name its own (src, dst), in the IDs before ``perm``, and its
    weight is the weight of the input edge its features name."""
    src, dst = g.edges()
    if perm is not None:
        src, dst = perm[src], perm[dst]
    np.testing.assert_array_equal(g.edge_attr[:, 0], src)
    np.testing.assert_array_equal(g.edge_attr[:, 1], dst)
    np.testing.assert_array_equal(g.edge_weight, w[g.edge_attr[:, 2].astype(np.int64)])


def test_edge_attr_follows_edges_through_csc_and_permute(tmp_path):
    g, w = _coded_graph(np.random.default_rng(0))
    assert g.num_edge_features == 3 and "edge_attr=(90, 3)" in repr(g)
    _assert_coded(g, w)
    np.testing.assert_array_equal(np.sort(g.edge_attr[:, 2]), np.arange(90))
    perm = np.random.default_rng(1).permutation(g.num_nodes)
    p = g.permute(perm)
    _assert_coded(p, w, perm)
    part = g.permute(perm, node_data=False, dst_range=(5, 17))
    _assert_coded(part, w, perm)
    assert part.num_edges == int(p.indptr[17] - p.indptr[5]) > 0
    disk = g.permute(perm, node_data=False, out_dir=tmp_path)
    assert isinstance(disk.edge_attr, np.memmap) and (tmp_path / "edge_attr.npy").is_file()
    np.testing.assert_array_equal(disk.edge_attr, p.edge_attr)


def test_edge_attr_through_undirected_and_self_loops():
    g, w = _coded_graph(np.random.default_rng(2))
    u = g.to_undirected()
    s, d = u.edges()
    # kept edges keep their own features, added reverse edges mirror the edge they copy
    fwd = {(int(a), int(b)) for a, b in zip(*g.edges(), strict=True)}
    for e in range(u.num_edges):
        a, b = int(s[e]), int(d[e])
        assert tuple(u.edge_attr[e, :2]) == ((a, b) if (a, b) in fwd else (b, a))
    loops = g.add_self_loops(fill_attr=-1.0)
    ls, ld = loops.edges()
    new = loops.edge_attr[:, 2] == -1.0
    assert new.sum() == loops.num_edges - g.num_edges > 0
    assert (ls[new] == ld[new]).all() and (loops.edge_attr[new] == -1.0).all()
    np.testing.assert_array_equal(loops.edge_attr[~new, 0], ls[~new])
    np.testing.assert_array_equal(loops.edge_attr[~new, 1], ld[~new])


@pytest.mark.parametrize(
    ("attr", "match"),
    [
        (np.zeros(90), r"shape \(90, D\)"),
        (np.zeros((89, 2)), r"one row per edge, shape \(90, D\)"),
        (np.zeros((90, 2), np.int64), "must be a float array"),
        (np.full((90, 2), np.nan), "'edge_attr' holds a non-finite value nan at edge 0"),
    ],
)
def test_edge_attr_is_validated(attr, match):
    g, _ = _coded_graph(np.random.default_rng(3))
    with pytest.raises(GraphError, match=match):
        g.replace(edge_attr=attr)
