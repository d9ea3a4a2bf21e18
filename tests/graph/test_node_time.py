"""Node times: the field, its checks, transforms that keep it, datasets, edgelist, PyG and info."""

import json
import re
import types

import numpy as np
import pytest

from fleetgnn.cli.main import main
from fleetgnn.errors import DatasetError, GraphError
from fleetgnn.graph import Graph, from_edges, open_dataset, write_dataset
from fleetgnn.graph.dataset import DatasetWriter, read_meta
from fleetgnn.graph.edge_time import as_node_time
from fleetgnn.graph.loaders import load_edgelist
from fleetgnn.graph.loaders.pyg import from_pyg
from fleetgnn.graph.verify import check_values
from fleetgnn.partition import PartitionBook


def _graph(n: int = 30, seed: int = 0) -> Graph:
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, 120), rng.integers(0, n, 120)
    data = {"y": rng.integers(0, 3, n), "node_time": rng.integers(0, 50, n)}
    return from_edges(src, dst, n, edge_time=rng.integers(0, 50, 120), node_data=data)


def test_from_edges_checks_and_converts_node_times():
    g = from_edges([0, 1], [1, 2], 3, node_data={"node_time": [3.0, 0.0, 7.0]})
    assert g.node_time.dtype == np.int64
    np.testing.assert_array_equal(g.node_time, [3, 0, 7])
    assert "node_time" in repr(g) and "node_time" in g.node_data()
    assert from_edges([0], [1], 2).node_time is None


@pytest.mark.parametrize(
    ("times", "fragment"),
    [
        ([1, -3, 2], "'node_time' holds the negative time -3 at node 1"),
        ([1.0, np.nan, 2.0], "'node_time' holds the non-finite time nan at node 1"),
        ([1.0, 2.0, 2.5], "'node_time' holds the non-integral time 2.5 at node 2"),
        ([1, 2], "'node_time' must have one time per node, shape (3,) (got (2,))"),
        (["a", "b", "c"], "'node_time' must hold integer times"),
    ],
    ids=["negative", "nan", "non-integral", "length", "strings"],
)
def test_bad_node_times_are_refused_in_one_line(times, fragment):
    with pytest.raises(GraphError) as err:
        from_edges([0, 1], [1, 2], 3, node_data={"node_time": np.array(times)})
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_graph_validation_checks_dtype_shape_and_sign():
    ptr, idx = np.array([0, 0, 1, 2], np.int64), np.array([0, 1], np.int32)
    Graph(ptr, idx, node_time=np.array([0, 5, 9], np.int64))
    with pytest.raises(GraphError, match="'node_time' must be int64"):
        Graph(ptr, idx, node_time=np.array([0, 5, 9], np.int32))
    with pytest.raises(GraphError, match="one time per node"):
        Graph(ptr, idx, node_time=np.array([0, 5], np.int64))
    with pytest.raises(GraphError, match="negative time -4 at node 2"):
        Graph(ptr, idx, node_time=np.array([0, 5, -4], np.int64))
    # structure-only validation (memory-mapped datasets checked when written) skips the values
    Graph(ptr, idx, node_time=np.array([0, 5, -4], np.int64), validate="structure")
    np.testing.assert_array_equal(as_node_time([2.0, 3], 2), [2, 3])


def test_transforms_keep_node_times_with_their_nodes():
    g = _graph()
    perm = np.random.default_rng(3).permutation(g.num_nodes)
    np.testing.assert_array_equal(g.permute(perm).node_time, g.node_time[perm])
    assert g.permute(perm, node_data=False).node_time is None  # topology only
    np.testing.assert_array_equal(g.to_undirected().node_time, g.node_time)
    np.testing.assert_array_equal(g.add_self_loops().node_time, g.node_time)
    book = PartitionBook.from_part_of(np.arange(g.num_nodes) % 3, 3, "hash")
    rel = book.relabel(g)
    np.testing.assert_array_equal(rel.node_time, g.node_time[book.perm])
    np.testing.assert_array_equal(book.part_rows(g, 1).node_time, g.node_time[book.perm][10:20])
    assert g.replace(node_time=None).node_time is None


def test_dataset_round_trip_and_meta(tmp_path):
    g = _graph()
    write_dataset(g, tmp_path / "d")
    h = open_dataset(tmp_path / "d")
    assert isinstance(h.node_time, np.memmap)
    np.testing.assert_array_equal(h.node_time, g.node_time)
    meta = read_meta(tmp_path / "d")
    assert meta["has_node_time"] is True
    assert meta["node_time_range"] == [int(g.node_time.min()), int(g.node_time.max())]
    assert meta["arrays"]["node_time"] == {"dtype": "<i8", "shape": [g.num_nodes]}
    plain = tmp_path / "p"
    write_dataset(g.replace(node_time=None), plain)
    assert "has_node_time" not in read_meta(plain) and open_dataset(plain).node_time is None


def test_meta_must_agree_with_the_arrays(tmp_path):
    g = _graph()
    write_dataset(g, tmp_path / "d")
    path = tmp_path / "d" / "meta.json"
    meta = json.loads(path.read_text())
    for key, value, fragment in [
        ("has_node_time", False, "has_node_time = False is invalid: expected true"),
        ("node_time_range", [5, 2], "node_time_range = [5, 2] is invalid"),
    ]:
        path.write_text(json.dumps({**meta, key: value}))
        with pytest.raises(DatasetError, match=re.escape(fragment)):
            read_meta(tmp_path / "d")


def test_writer_and_streaming_check_refuse_a_negative_node_time(tmp_path):
    with pytest.raises(DatasetError, match="'node_time' holds the negative time -2 at node 1"):
        with DatasetWriter(tmp_path / "bad", name="bad") as w:
            w.put("indptr", np.array([0, 0, 0, 0], np.int64))
            w.put("indices", np.zeros(0, np.int32))
            w.put("node_time", np.array([4, -2, 3], np.int64))
            w.commit()
    assert not (tmp_path / "bad").exists()
    files = {"indptr": tmp_path / "p.npy", "indices": tmp_path / "i.npy"}
    np.save(files["indptr"], np.zeros(101, np.int64))
    np.save(files["indices"], np.zeros(0, np.int32))
    files["node_time"] = tmp_path / "t.npy"
    t = np.arange(100, dtype=np.int64)
    np.save(files["node_time"], t)
    check_values(files, num_classes=None, block_bytes=64)  # blocks of a few nodes
    t[77] = -1
    np.save(files["node_time"], t)
    with pytest.raises(GraphError, match="negative time -1 at node 77"):
        check_values(files, num_classes=None, block_bytes=64)
    np.save(files["node_time"], t.astype(np.int32))
    with pytest.raises(GraphError, match=r"'node_time' must be int64 .* \(got int32 \(100,\)\)"):
        check_values(files, num_classes=None)


def test_info_shows_node_times_and_verify_catches_an_edit(tmp_path, capsys):
    g = _graph()
    write_dataset(g, tmp_path / "d")
    capsys.readouterr()
    assert main(["info", str(tmp_path / "d"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert info["node_time"] == {"min": int(g.node_time.min()), "max": int(g.node_time.max())}
    assert main(["info", str(tmp_path / "d")]) == 0
    assert "node times" in capsys.readouterr().out
    path = tmp_path / "d" / "node_time.npy"
    t = np.load(path)
    t[5] = -7
    np.save(path, t)
    assert main(["info", str(tmp_path / "d"), "--verify"]) == 2
    err = capsys.readouterr().err
    assert "'node_time' holds the negative time -7 at node 5" in err and "Traceback" not in err


def test_prepare_edgelist_node_time(tmp_path, capsys):
    edges = tmp_path / "g.txt"
    edges.write_text("0 1 30\n2 1 10\n1 2 20\n")
    np.save(tmp_path / "t.npy", np.array([5, 40, 25]))
    out = tmp_path / "d"
    argv = ["prepare", "edgelist", "--edges", str(edges), "--time-column", "3"]
    assert main([*argv, "--node-time", str(tmp_path / "t.npy"), "--out", str(out)]) == 0
    g = open_dataset(out)
    np.testing.assert_array_equal(g.node_time, [5, 40, 25])
    assert read_meta(out)["node_time_range"] == [5, 40]
    same = load_edgelist(edges, time_column=3, node_time=tmp_path / "t.npy")
    np.testing.assert_array_equal(same.node_time, g.node_time)


@pytest.mark.parametrize(
    ("times", "fragment"),
    [
        (np.array([5, -1, 3]), "'node_time' holds the negative time -1 at node 1"),
        (np.array([5, 1]), "node times '"),
        (np.array([5.5, 1, 3]), "non-integral time 5.5 at node 0"),
        (np.zeros((3, 2), np.int64), "must be one integer per node"),
    ],
    ids=["negative", "rows", "float", "2d"],
)
def test_prepare_edgelist_node_time_errors_one_line(tmp_path, capsys, times, fragment):
    edges = tmp_path / "g.txt"
    edges.write_text("0 1\n2 1\n")
    np.save(tmp_path / "t.npy", times)
    argv = ["prepare", "edgelist", "--edges", str(edges), "--out", str(tmp_path / "o")]
    capsys.readouterr()
    assert main([*argv, "--node-time", str(tmp_path / "t.npy")]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_from_pyg_reads_node_time_or_a_time_per_node():
    ei = np.array([[0, 1, 2, 0], [1, 1, 1, 2]])
    nt = np.array([7, 0, 3])
    g = from_pyg(types.SimpleNamespace(edge_index=ei, num_nodes=3, node_time=nt))
    np.testing.assert_array_equal(g.node_time, nt)
    g = from_pyg(types.SimpleNamespace(edge_index=ei, num_nodes=3, time=nt))  # N entries
    np.testing.assert_array_equal(g.node_time, nt)
    assert g.edge_time is None
    # edge times and node times side by side: 'time' fills the slot its length fits
    et = np.array([4, 2, 9, 1])
    g = from_pyg(types.SimpleNamespace(edge_index=ei, num_nodes=3, edge_time=et, time=nt))
    np.testing.assert_array_equal(g.node_time, nt)
    g = from_pyg(types.SimpleNamespace(edge_index=ei, node_time=nt, time=et))  # N inferred
    np.testing.assert_array_equal(g.edge_time, [2, 4, 9, 1])
    np.testing.assert_array_equal(g.node_time, nt)
    with pytest.raises(GraphError, match="or node times 'node_time'"):
        from_pyg(types.SimpleNamespace(edge_index=ei, num_nodes=4, time=et))
    with pytest.raises(GraphError, match=r"one time per edge \(4\) or per node \(3\)"):
        from_pyg(types.SimpleNamespace(edge_index=ei, num_nodes=3, time=np.arange(5)))
    with pytest.raises(GraphError, match="negative time -1 at node 0"):
        from_pyg(types.SimpleNamespace(edge_index=ei, num_nodes=3, node_time=nt - 8))


def test_to_pyg_writes_node_time():
    pytest.importorskip("torch_geometric")
    from fleetgnn.graph.loaders.pyg import to_pyg

    g = _graph()
    data = to_pyg(g)
    np.testing.assert_array_equal(data.node_time.numpy(), g.node_time)
    np.testing.assert_array_equal(from_pyg(data).node_time, g.node_time)
