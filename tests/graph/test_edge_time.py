"""Edge times: segment order, alignment, datasets, refusals, edgelist and PyG input."""

import json
import types

import numpy as np
import pytest

from fleetgnn.cli.main import main
from fleetgnn.errors import DatasetError, GraphError
from fleetgnn.graph import Graph, from_edges, open_dataset, write_dataset
from fleetgnn.graph.csc import open_topology
from fleetgnn.graph.dataset import DatasetWriter, read_meta
from fleetgnn.graph.edge_split import split_edges
from fleetgnn.graph.edge_time import check_time_order
from fleetgnn.graph.loaders import load_edgelist
from fleetgnn.graph.loaders.pyg import from_pyg
from fleetgnn.graph.verify import check_values


def _random_timed(seed: int, n: int = 40, e: int = 400, max_time: int = 12):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    t = rng.integers(0, max_time, e)  # few distinct times: many ties
    w = rng.random(e)
    attr = rng.standard_normal((e, 3))
    return src, dst, t, w, attr


def _segments_sorted(g: Graph) -> bool:
    t, ptr = np.asarray(g.edge_time), g.indptr
    return all((np.diff(t[ptr[v] : ptr[v + 1]]) >= 0).all() for v in range(g.num_nodes))


@pytest.mark.parametrize("seed", range(5))
def test_from_edges_sorts_each_segment_by_time_ties_in_input_order(seed):
    src, dst, t, w, attr = _random_timed(seed)
    g = from_edges(src, dst, 40, edge_time=t, edge_weight=w, edge_attr=attr)
    assert g.edge_time.dtype == np.int64 and _segments_sorted(g)
    # every CSC edge is exactly one input edge, with that edge's weight, features and time:
    # the weights are distinct, so they name the input edge
    inp = np.array([np.flatnonzero(w == x)[0] for x in g.edge_weight])
    np.testing.assert_array_equal(np.sort(inp), np.arange(src.size))
    np.testing.assert_array_equal(g.indices, src[inp])
    np.testing.assert_array_equal(g.dst_of_edges(), dst[inp])
    np.testing.assert_array_equal(g.edge_time, t[inp])
    np.testing.assert_array_equal(g.edge_attr, attr[inp])
    # ties: within a segment, equal times keep the edge list's order
    for v in range(g.num_nodes):
        seg = slice(g.indptr[v], g.indptr[v + 1])
        key = g.edge_time[seg] * src.size + inp[seg]
        assert (np.diff(key) > 0).all()


def test_permute_keeps_times_aligned_and_sorted():
    src, dst, t, w, attr = _random_timed(7)
    g = from_edges(src, dst, 40, edge_time=t, edge_weight=w, edge_attr=attr)
    perm = np.random.default_rng(1).permutation(40)
    p = g.permute(perm)
    assert _segments_sorted(p)
    inv = np.argsort(perm)
    # edge (s -> d, time, weight) in g is (inv[s] -> inv[d], same time, same weight) in p
    want = sorted(zip(inv[g.indices], inv[g.dst_of_edges()], g.edge_time, g.edge_weight))
    got = sorted(zip(p.indices, p.dst_of_edges(), p.edge_time, p.edge_weight))
    assert want == got
    part = g.permute(perm, node_data=False, dst_range=(10, 20))
    lo, hi = p.indptr[10], p.indptr[20]
    assert part.num_edges == hi - lo
    np.testing.assert_array_equal(part.edge_time, p.edge_time[lo:hi])


def test_permute_to_disk_writes_edge_time(tmp_path):
    src, dst, t, _, _ = _random_timed(3)
    g = from_edges(src, dst, 40, edge_time=t)
    perm = np.random.default_rng(2).permutation(40)
    d = g.permute(perm, node_data=False, out_dir=tmp_path)
    assert (tmp_path / "edge_time.npy").exists()
    np.testing.assert_array_equal(d.edge_time, g.permute(perm).edge_time)
    np.testing.assert_array_equal(open_topology(tmp_path).edge_time, d.edge_time)


def test_to_undirected_and_self_loops_keep_times_sorted():
    g = from_edges([0, 1, 2, 0], [1, 2, 0, 1], 3, edge_time=[5, 3, 1, 2])
    u = g.to_undirected()
    assert _segments_sorted(u)
    # the duplicate 0 -> 1 keeps its earliest time (2); the mirror 1 -> 0 takes 0 -> 1's (2)
    times = {(int(s), int(d)): int(x) for s, d, x in zip(u.indices, u.dst_of_edges(), u.edge_time)}
    assert times[(0, 1)] == 2 and times[(1, 0)] == 2 and times[(0, 2)] == 1
    s = g.add_self_loops(fill_time=4)
    assert _segments_sorted(s)
    loops = s.indices == s.dst_of_edges()
    assert (s.edge_time[loops] == 4).all() and loops.sum() == 3


@pytest.mark.parametrize(
    ("times", "fragment"),
    [
        ([1.0, np.nan, 2.0], "'edge_time' holds the non-finite time nan at edge 1"),
        ([1.0, np.inf, 2.0], "'edge_time' holds the non-finite time inf at edge 1"),
        ([1, -3, 2], "'edge_time' holds the negative time -3 at edge 1"),
        ([1.0, 2.5, 2.0], "'edge_time' holds the non-integral time 2.5 at edge 1"),
        ([1, 2], "'edge_time' must have one time per edge, shape (3,) (got (2,))"),
        (["a", "b", "c"], "'edge_time' must hold integer times"),
        ([1e30, 0.0, 0.0], "above int64's range"),
    ],
    ids=["nan", "inf", "negative", "non-integral", "length", "strings", "overflow"],
)
def test_from_edges_refuses_bad_times_in_one_line(times, fragment):
    with pytest.raises(GraphError) as err:
        from_edges([0, 1, 2], [1, 2, 0], 3, edge_time=np.array(times))
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_integral_float_times_are_accepted():
    g = from_edges([0, 1], [1, 1], 2, edge_time=np.array([3.0, 1.0]))
    assert g.edge_time.dtype == np.int64
    np.testing.assert_array_equal(g.edge_time, [1, 3])


def test_graph_validation_refuses_unsorted_segments_and_wrong_dtype():
    indptr, indices = np.array([0, 0, 3], np.int64), np.array([0, 1, 0], np.int32)
    Graph(indptr, indices, edge_time=np.array([1, 1, 2], np.int64))  # sorted: fine
    with pytest.raises(GraphError, match=r"node 1 has edge_time\[1\] = 5 > edge_time\[2\] = 2"):
        Graph(indptr, indices, edge_time=np.array([1, 5, 2], np.int64))
    with pytest.raises(GraphError, match="'edge_time' must be int64"):
        Graph(indptr, indices, edge_time=np.array([1, 1, 2], np.int32))
    with pytest.raises(GraphError, match="one time per edge"):
        Graph(indptr, indices, edge_time=np.array([1, 1], np.int64))
    # a decrease where a segment starts is allowed
    check_time_order(np.array([0, 2, 4], np.int64), np.array([5, 6, 1, 2], np.int64))


def test_dataset_round_trip_mmap_and_meta(tmp_path):
    src, dst, t, w, attr = _random_timed(11)
    g = from_edges(src, dst, 40, edge_time=t + 100, edge_weight=w, edge_attr=attr)
    write_dataset(g, tmp_path / "d")
    h = open_dataset(tmp_path / "d")
    assert isinstance(h.edge_time, np.memmap)
    for k in ("indptr", "indices", "edge_time", "edge_weight", "edge_attr"):
        np.testing.assert_array_equal(getattr(h, k), getattr(g, k))
    meta = read_meta(tmp_path / "d")
    assert meta["has_edge_time"] is True
    assert meta["edge_time_range"] == [int(t.min()) + 100, int(t.max()) + 100]
    assert meta["arrays"]["edge_time"] == {"dtype": "<i8", "shape": [src.size]}


def test_untimed_dataset_opens_unchanged(tmp_path):
    g = from_edges([0, 1], [1, 0], 2)
    write_dataset(g, tmp_path / "d")
    meta = read_meta(tmp_path / "d")
    assert "has_edge_time" not in meta and open_dataset(tmp_path / "d").edge_time is None


def test_writer_refuses_unsorted_times_streaming(tmp_path):
    with pytest.raises(DatasetError, match="'edge_time' must be non-decreasing"):
        with DatasetWriter(tmp_path / "bad", name="bad") as w:
            w.put("indptr", np.array([0, 3, 3], np.int64))
            w.put("indices", np.array([0, 1, 1], np.int32))
            w.put("edge_time", np.array([2, 1, 3], np.int64))
            w.commit()
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("block_bytes", [16, 64, 1 << 20])
def test_streaming_check_matches_in_memory_check(tmp_path, block_bytes):
    """Blocks of a few edges: decreases at block edges and many empty segments."""
    rng = np.random.default_rng(5)
    deg = rng.integers(0, 4, 60)
    indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    t = np.concatenate([np.sort(rng.integers(0, 9, d)) for d in deg]).astype(np.int64)
    e = int(indptr[-1])
    files = {"indptr": tmp_path / "p.npy", "indices": tmp_path / "i.npy"}
    np.save(files["indptr"], indptr)
    np.save(files["indices"], np.zeros(e, np.int32))
    files["edge_time"] = tmp_path / "t.npy"
    np.save(files["edge_time"], t)
    check_values(files, num_classes=None, block_bytes=block_bytes)  # sorted: passes
    inner = [i for i in range(1, e) if i not in set(indptr.tolist())]
    for i in inner[:: max(1, len(inner) // 8)]:
        bad = t.copy()
        bad[i] = bad[i - 1] - 1 if bad[i - 1] > 0 else -1
        np.save(files["edge_time"], bad)
        with pytest.raises(GraphError, match="edge_time"):
            check_values(files, num_classes=None, block_bytes=block_bytes)
        with pytest.raises(GraphError, match="edge_time"):
            check_time_order(indptr, bad)


def test_info_verify_reports_and_checks_times(tmp_path, capsys):
    g = from_edges([0, 1, 2, 0], [1, 1, 1, 2], 3, edge_time=[4, 2, 9, 1])
    write_dataset(g, tmp_path / "d")
    capsys.readouterr()
    assert main(["info", str(tmp_path / "d"), "--verify", "--json"]) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert info["edge_time"] == {"min": 1, "max": 9}
    # an edited edge_time.npy (unsorted inside node 1's in-edges) is caught by --verify
    path = tmp_path / "d" / "edge_time.npy"
    t = np.load(path)
    t[0], t[1] = t[1], t[0]
    np.save(path, t)
    assert main(["info", str(tmp_path / "d"), "--verify"]) == 2
    err = capsys.readouterr().err
    assert "'edge_time' must be non-decreasing" in err and "Traceback" not in err


def test_prepare_edgelist_time_column(tmp_path, capsys):
    edges = tmp_path / "g.txt"
    edges.write_text("# src dst weight time\n0 1 0.5 30\n2 1 1.5 10\n1 2 2.5 20\n0 1 3.5 10\n")
    out = tmp_path / "d"
    argv = ["prepare", "edgelist", "--edges", str(edges), "--time-column", "4", "--out", str(out)]
    assert main(argv) == 0
    g = open_dataset(out)
    np.testing.assert_array_equal(g.indptr, [0, 0, 3, 4])
    np.testing.assert_array_equal(g.indices, [2, 0, 0, 1])  # node 1: times 10, 10, 30
    np.testing.assert_array_equal(g.edge_time, [10, 10, 30, 20])
    np.testing.assert_array_equal(g.edge_weight, [1.5, 3.5, 0.5, 2.5])
    assert read_meta(out)["edge_time_range"] == [10, 30]
    same = load_edgelist(edges, time_column=4)
    np.testing.assert_array_equal(same.edge_time, g.edge_time)


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        ("0 1 5\n1 2 -3\n", "3", "line 2: edge time -3 is negative"),
        ("0 1 5\n1 2 1.5\n", "3", "line 2, column 3: cannot parse '1.5' as an integer"),
        ("0 1 5\n1 2 x\n", "3", "line 2, column 3: cannot parse 'x' as an integer"),
        ("0 1 5\n1 2\n", "3", "line 2: expected 3 column(s) 'src dst time', found 2"),
        ("0 1 5\n", "4", "time_column = 4 is not a column of this file's 3"),
        ("0 1 5\n", "2", "time_column = 2 is not a column"),
        ("0 1\n", "3", "has only 2 columns 'src dst'"),
    ],
    ids=["negative", "float", "text", "short-line", "past-end", "src-column", "no-column"],
)
def test_prepare_edgelist_time_column_errors_one_line(tmp_path, capsys, text, column, fragment):
    edges = tmp_path / "g.txt"
    edges.write_text(text)
    argv = ["prepare", "edgelist", "--edges", str(edges), "--out", str(tmp_path / "o")]
    capsys.readouterr()
    assert main([*argv, "--time-column", column]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_edgelist_time_column_with_edge_attr(tmp_path):
    edges = tmp_path / "g.txt"
    edges.write_text("0 1 7 0.5 1.0\n2 1 3 1.5 2.0\n")
    g = load_edgelist(edges, time_column=3, edge_attr=True)
    np.testing.assert_array_equal(g.edge_time, [3, 7])
    np.testing.assert_array_equal(g.edge_attr, [[1.5, 2.0], [0.5, 1.0]])


def test_from_pyg_reads_edge_time_or_time():
    ei = np.array([[0, 1, 2, 0], [1, 1, 1, 2]])
    t = np.array([4, 2, 9, 1])
    for key in ("edge_time", "time"):
        g = from_pyg(types.SimpleNamespace(edge_index=ei, num_nodes=3, **{key: t}))
        np.testing.assert_array_equal(g.edge_time, [2, 4, 9, 1])
    # a node time (N entries) is not an edge time
    g = from_pyg(types.SimpleNamespace(edge_index=ei, num_nodes=3, time=np.arange(3)))
    assert g.edge_time is None
    with pytest.raises(GraphError, match="name edge times 'edge_time'"):
        from_pyg(types.SimpleNamespace(edge_index=ei, num_nodes=4, time=t))
    with pytest.raises(GraphError, match="negative time -1 at edge 0"):
        from_pyg(types.SimpleNamespace(edge_index=ei, num_nodes=3, edge_time=t - 5))


def test_random_edge_split_refuses_a_timed_graph():
    g = from_edges([0, 1, 2], [1, 2, 0], 3, edge_time=[1, 2, 3])
    with pytest.raises(DatasetError, match="has edge times") as err:
        split_edges(g)
    assert "graph.replace(edge_time=None)" in str(err.value)
    assert g.replace(edge_time=None).edge_time is None
