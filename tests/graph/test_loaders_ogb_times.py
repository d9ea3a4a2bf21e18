"""OGB's time files (``raw/edge_year.csv.gz``, ``raw/node_year.csv.gz``) read by ``prepare_ogb``.

The streamed result is compared, array for array and bit for bit, with what ``from_edges(...,
edge_time=...)`` builds in memory from the same lines, for every chunking.
"""

from pathlib import Path

import numpy as np
import pytest

from fleetgnn.errors import DatasetError
from fleetgnn.graph import from_edges, open_dataset, read_meta
from fleetgnn.graph.loaders import prepare_ogb
from tests.graph.test_loaders_ogb import _corrupt, _gz, _write_ogb

ARRAYS = ("indptr", "indices", "edge_time", "edge_attr", "node_time", "x", "y")


def _write_timed(root: Path, n=23, e=61, seed=0, years=5):
    """``_write_ogb``'s folder plus a year per edge and per node (few years: many ties).

    The first edge feature is the edge's line number (0-based), so a test can tell which line
    of the file became each CSC edge.
    """
    src, dst, data, n = _write_ogb(root, n=n, e=e, seed=seed)
    rng = np.random.default_rng(seed + 1)
    edge_year = rng.integers(2000, 2000 + years, e)
    node_year = rng.integers(1990, 2000, n)
    data["edge_attr"][:, 0] = np.arange(e)
    attr = data["edge_attr"]
    raw = root / "raw"
    _gz(raw / "edge-feat.csv.gz", [",".join(repr(float(v)) for v in row) for row in attr])
    _gz(raw / "edge_year.csv.gz", edge_year)
    _gz(raw / "node_year.csv.gz", node_year)
    data["node_time"] = node_year
    return src, dst, edge_year, data, n


def _reference(src, dst, edge_year, data, n, undirected=False):
    data = dict(data)
    attr = data.pop("edge_attr")
    if undirected:
        return from_edges(src, dst, n, edge_time=edge_year, node_data=data).to_undirected()
    return from_edges(src, dst, n, edge_attr=attr, edge_time=edge_year, node_data=data)


@pytest.mark.parametrize("chunk_rows", [1, 2, 3, 7, 10**6])
def test_directed_times_match_from_edges(tmp_path, chunk_rows, same_graph):
    src, dst, edge_year, data, n = _write_timed(tmp_path / "ogbl_toy")
    out = prepare_ogb(tmp_path / "ogbl_toy", tmp_path / "ds", chunk_rows=chunk_rows)
    g = open_dataset(out)
    same_graph(g, _reference(src, dst, edge_year, data, n))
    assert g.edge_time.dtype == np.int64 and g.node_time.dtype == np.int64
    meta = read_meta(out)
    assert meta["has_edge_time"] is True and meta["has_node_time"] is True
    assert meta["edge_time_range"] == [int(edge_year.min()), int(edge_year.max())]
    assert meta["node_time_range"] == [int(data["node_time"].min()), int(data["node_time"].max())]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "ogbl_toy"]  # no temp leftovers


def test_each_segment_is_in_time_order_ties_in_file_order(tmp_path):
    src, dst, edge_year, _, n = _write_timed(tmp_path / "r", e=300, years=3)
    g = open_dataset(prepare_ogb(tmp_path / "r", tmp_path / "ds", chunk_rows=5))
    line = g.edge_attr[:, 0].astype(np.int64)  # the file line each CSC edge came from
    np.testing.assert_array_equal(g.edge_time, edge_year[line])
    np.testing.assert_array_equal(g.indices, src[line])
    np.testing.assert_array_equal(g.dst_of_edges(), dst[line])
    ties = 0
    for v in range(n):
        a, b = int(g.indptr[v]), int(g.indptr[v + 1])
        key = g.edge_time[a:b] * 10**6 + line[a:b]  # (time, line) strictly increasing
        assert (np.diff(key) > 0).all(), v
        ties += int((np.diff(g.edge_time[a:b]) == 0).sum())
    assert ties > 50  # three years over 300 edges: the tie order is exercised


def test_every_chunking_writes_the_same_files(tmp_path):
    _write_timed(tmp_path / "r", e=120)
    outs = [
        prepare_ogb(tmp_path / "r", tmp_path / f"ds{k}", chunk_rows=k) for k in (1, 2, 3, 10**6)
    ]
    for name in ARRAYS:
        want = (outs[-1] / f"{name}.npy").read_bytes()
        for out in outs[:-1]:
            assert (out / f"{name}.npy").read_bytes() == want, (name, out.name)


@pytest.mark.parametrize("chunk_rows", [1, 2, 3, 10**6])
def test_undirected_times_match_to_undirected(tmp_path, chunk_rows, same_graph):
    src, dst, edge_year, data, n = _write_timed(tmp_path / "r", e=200)
    with pytest.warns(UserWarning, match="edge-feat.csv.gz' is ignored"):
        out = prepare_ogb(tmp_path / "r", tmp_path / "ds", chunk_rows=chunk_rows, undirected=True)
    g = open_dataset(out)
    same_graph(g, _reference(src, dst, edge_year, data, n, undirected=True))
    assert read_meta(out)["edge_time_range"] == [int(edge_year.min()), int(edge_year.max())]


def test_undirected_merge_keeps_the_earliest_time(tmp_path):
    """A reverse edge takes its edge's time; duplicates merge to the earliest; an edge of the
    file keeps its own time over a mirror's."""
    root = tmp_path / "r"
    lines = [(0, 1, 2005), (0, 1, 2001), (1, 0, 2003), (2, 3, 2000), (3, 4, 2002), (4, 3, 2002)]
    _gz(root / "raw" / "edge.csv.gz", [f"{s},{d}" for s, d, _ in lines])
    _gz(root / "raw" / "edge_year.csv.gz", [t for _, _, t in lines])
    _gz(root / "raw" / "num-node-list.csv.gz", [5])
    _gz(root / "raw" / "num-edge-list.csv.gz", [len(lines)])
    g = open_dataset(prepare_ogb(root, tmp_path / "ds", chunk_rows=2, undirected=True))
    got = {
        (int(s), int(d)): int(t)
        for s, d, t in zip(g.indices, g.dst_of_edges(), g.edge_time, strict=True)
    }
    assert got == {
        (0, 1): 2001,  # the earliest of the duplicates 0 -> 1
        (1, 0): 2003,  # its own time, not the mirror of 0 -> 1's (2001)
        (2, 3): 2000,
        (3, 2): 2000,  # an added reverse edge: the time of the edge it mirrors
        (3, 4): 2002,
        (4, 3): 2002,
    }


@pytest.mark.parametrize(
    ("rel", "line", "text", "match"),
    [
        ("raw/edge_year.csv.gz", 9, "-3", r"edge_year\.csv\.gz', line 9: edge time -3 is negative"),
        (
            "raw/edge_year.csv.gz",
            4,
            "2001.5",
            r"edge_year\.csv\.gz', line 4, column 1: cannot parse '2001\.5' as an integer",
        ),
        ("raw/edge_year.csv.gz", 5, "nan", r"edge_year\.csv\.gz', line 5, column 1: cannot parse"),
        ("raw/edge_year.csv.gz", 6, "2001,2", r"edge_year\.csv\.gz', line 6: expected 1 column"),
        ("raw/edge_year.csv.gz", 61, None, "has 60 lines but num-edge-list.csv.gz says 61 edges"),
        ("raw/node_year.csv.gz", 3, "-1", r"node_year\.csv\.gz', line 3: node time -1 is negative"),
        ("raw/node_year.csv.gz", 7, "", r"node_year\.csv\.gz', line 7: empty line"),
        ("raw/node_year.csv.gz", 23, None, "has 22 lines but num-node-list.csv.gz says 23 nodes"),
    ],
)
def test_bad_times_are_refused_in_one_line(tmp_path, rel, line, text, match):
    root = tmp_path / "r"
    _write_timed(root)
    _corrupt(root, rel, line, text)
    with pytest.raises(DatasetError, match=match) as err:
        prepare_ogb(root, tmp_path / "ds", chunk_rows=4)
    assert "\n" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # nothing half-written


@pytest.mark.parametrize(("stem", "count"), [("edge_year", 61), ("node_year", 23)])
def test_a_time_file_longer_than_its_count_is_refused(tmp_path, stem, count):
    root = tmp_path / "r"
    _write_timed(root)
    _gz(root / "raw" / f"{stem}.csv.gz", [2001] * (count + 1))
    with pytest.raises(DatasetError, match=rf"{stem}\.csv\.gz' has more than {count} lines.*"):
        prepare_ogb(root, tmp_path / "ds", chunk_rows=5)


def test_without_time_files_there_are_no_times(tmp_path):
    root = tmp_path / "r"
    _write_timed(root)
    (root / "raw" / "edge_year.csv.gz").unlink()
    out = prepare_ogb(root, tmp_path / "ds")
    g = open_dataset(out)
    assert g.edge_time is None and g.node_time is not None
    assert "has_edge_time" not in read_meta(out)
    (root / "raw" / "node_year.csv.gz").unlink()
    g = open_dataset(prepare_ogb(root, tmp_path / "ds", overwrite=True))
    assert g.node_time is None


def test_an_ogbl_split_of_pt_files_is_skipped_with_a_warning(tmp_path):
    """ogbl-collab keeps its split in ``split/time/*.pt``: the graph and its times are read."""
    root = tmp_path / "ogbl_collab"
    src, dst, edge_year, data, n = _write_timed(root)
    for stem in ("train", "valid", "test"):
        (root / "split" / "sales" / f"{stem}.csv.gz").unlink()
        (root / "split" / "sales" / f"{stem}.pt").write_bytes(b"not read")
    with pytest.warns(UserWarning, match=r"sales' holds OGB link-prediction splits .* not read"):
        out = prepare_ogb(root, tmp_path / "ds")
    g = open_dataset(out)
    assert g.train_mask is None and read_meta(out)["split"] is None
    np.testing.assert_array_equal(g.edge_time, _reference(src, dst, edge_year, data, n).edge_time)
