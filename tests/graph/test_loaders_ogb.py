import gzip
from pathlib import Path

import numpy as np
import pytest

from fleetgnn.errors import DatasetError
from fleetgnn.graph import from_edges, open_dataset, read_meta
from fleetgnn.graph.loaders import prepare_ogb


def _gz(path: Path, lines) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("".join(f"{line}\n" for line in lines))


def _write_ogb(root: Path, n=23, e=61, f=3, seed=0, split="sales"):
    """An ogbn-style raw folder: directed edges with duplicates and self loops, nan labels."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    src[:3], dst[:3] = [1, 1, 4], [2, 2, 4]  # a duplicate and a self loop
    x = rng.standard_normal((n, f)).astype(np.float32)
    y = rng.integers(0, 4, n)
    y[y == 3] = 2  # classes 0..2
    unlabelled = np.array([5, 11])
    perm = np.setdiff1d(rng.permutation(n), unlabelled)
    parts = {"train": perm[:6], "valid": perm[6:10], "test": perm[10:15]}
    raw = root / "raw"
    _gz(raw / "edge.csv.gz", [f"{a},{b}" for a, b in zip(src, dst, strict=True)])
    _gz(raw / "num-node-list.csv.gz", [n])
    _gz(raw / "num-edge-list.csv.gz", [e])
    _gz(raw / "node-feat.csv.gz", [",".join(repr(float(v)) for v in row) for row in x])
    _gz(raw / "node-label.csv.gz", ["nan" if i in unlabelled else y[i] for i in range(n)])
    attr = rng.standard_normal((e, 2)).astype(np.float32)
    _gz(raw / "edge-feat.csv.gz", [",".join(repr(float(v)) for v in row) for row in attr])
    for name, ids in parts.items():
        _gz(root / "split" / split / f"{name}.csv.gz", ids)
    yy = y.copy()
    yy[unlabelled] = -1
    masks = {}
    for key, name in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
        masks[key] = np.zeros(n, bool)
        masks[key][parts[name]] = True
    return src, dst, {"x": x, "y": yy, **masks, "edge_attr": attr}, n


@pytest.mark.parametrize("chunk_rows", [7, 1, 10**6])
def test_directed_matches_in_memory_reference(tmp_path, chunk_rows, same_graph):
    src, dst, data, n = _write_ogb(tmp_path / "ogbn_toy")
    out = prepare_ogb(tmp_path / "ogbn_toy", tmp_path / "ds", chunk_rows=chunk_rows)
    g = open_dataset(out)
    attr = data.pop("edge_attr")  # line i of edge-feat.csv.gz belongs to line i of edge.csv.gz
    same_graph(g, from_edges(src, dst, n, edge_attr=attr, node_data=data))
    assert g.edge_attr.shape == (61, 2) and g.edge_attr.dtype == np.float32
    meta = read_meta(out)
    assert (meta["name"], meta["source"], meta["split"], meta["undirected"]) == (
        "ogbn_toy",
        "ogb",
        "sales",
        False,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "ogbn_toy"]  # no temp leftovers


@pytest.mark.parametrize("chunk_rows", [7, 10**6])
def test_undirected_matches_to_undirected(tmp_path, chunk_rows, same_graph):
    src, dst, data, n = _write_ogb(tmp_path / "r", e=200)
    with pytest.warns(UserWarning, match="edge-feat.csv.gz' is ignored"):
        out = prepare_ogb(tmp_path / "r", tmp_path / "ds", chunk_rows=chunk_rows, undirected=True)
    del data["edge_attr"]  # merging edges drops their features
    ref = from_edges(src, dst, n, node_data=data).to_undirected()
    same_graph(open_dataset(out), ref)


def test_optional_files_and_split_selection(tmp_path):
    root = tmp_path / "r"
    _write_ogb(root)
    for name in ("node-feat.csv.gz", "node-label.csv.gz"):
        (root / "raw" / name).unlink()
    _write_ogb(tmp_path / "other", split="time")
    (root / "split" / "time").symlink_to(tmp_path / "other" / "split" / "time")
    with pytest.raises(DatasetError, match=r"several splits \(sales, time\)"):
        prepare_ogb(root, tmp_path / "ds")
    with pytest.raises(DatasetError, match="split 'nope' not found"):
        prepare_ogb(root, tmp_path / "ds", name="nope")
    g = open_dataset(prepare_ogb(root, tmp_path / "ds", name="time"))
    assert g.x is None and g.y is None and int(g.train_mask.sum()) == 6
    with pytest.raises(DatasetError, match="already exists"):
        prepare_ogb(root, tmp_path / "ds", name="time")
    with pytest.warns(UserWarning, match="is ignored"):
        prepare_ogb(root, tmp_path / "ds", name="sales", overwrite=True, undirected=True)
    assert read_meta(tmp_path / "ds")["split"] == "sales"


def _corrupt(root: Path, rel: str, lineno: int, text: str | None) -> None:
    p = root / rel
    with gzip.open(p, "rt") as f:
        lines = f.read().splitlines()
    if text is None:
        del lines[lineno - 1]
    else:
        lines[lineno - 1] = text
    _gz(p, lines)


@pytest.mark.parametrize(
    ("rel", "line", "text", "match"),
    [
        ("raw/edge.csv.gz", 9, "3;4", r"edge\.csv\.gz', line 9: expected 2 column"),
        ("raw/edge.csv.gz", 12, "3,x", r"edge\.csv\.gz', line 12, column 2: cannot parse 'x'"),
        ("raw/edge.csv.gz", 15, "", r"edge\.csv\.gz', line 15: empty line"),
        ("raw/edge.csv.gz", 20, "3,23", r"line 20: dst node ID 23 is outside \[0, 23\)"),
        ("raw/edge.csv.gz", 8, "-1,2", r"line 8: src node ID -1 is outside"),
        ("raw/edge.csv.gz", 61, None, "has 60 lines but num-edge-list.csv.gz says 61"),
        ("raw/num-edge-list.csv.gz", 1, "60", "more than 60 lines.*line 61"),
        ("raw/num-node-list.csv.gz", 1, "23,1", "expected 1 column"),
        ("raw/node-feat.csv.gz", 4, "1.0,2.0", r"node-feat\.csv\.gz', line 4: expected 3 column"),
        ("raw/node-feat.csv.gz", 6, "1.0,inf,0", r"line 6, column 2: feature value inf"),
        ("raw/node-feat.csv.gz", 23, None, "has 22 lines but num-node-list"),
        ("raw/node-label.csv.gz", 3, "1.5", r"node-label\.csv\.gz', line 3: label '1.5'"),
        ("raw/node-label.csv.gz", 4, "", r"node-label\.csv\.gz', line 4: empty line"),
        ("split/sales/test.csv.gz", 2, "99", r"test\.csv\.gz', line 2: node ID 99 is outside"),
    ],
)
def test_malformed_input_names_file_and_line(tmp_path, rel, line, text, match):
    root = tmp_path / "r"
    _write_ogb(root)
    _corrupt(root, rel, line, text)
    with pytest.raises(DatasetError, match=match):
        prepare_ogb(root, tmp_path / "ds", chunk_rows=7)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # nothing half-written


def test_splits_must_be_disjoint_and_labelled(tmp_path):
    root = tmp_path / "r"
    _write_ogb(root)
    with gzip.open(root / "split/sales/train.csv.gz", "rt") as f:
        first_train = f.readline().strip()
    _corrupt(root, "split/sales/valid.csv.gz", 2, first_train)
    with pytest.raises(DatasetError, match=r"valid\.csv\.gz', line 2: .* also in the 'train'"):
        prepare_ogb(root, tmp_path / "ds")
    _write_ogb(root)
    _corrupt(root, "split/sales/test.csv.gz", 3, "5")  # node 5 is unlabelled
    with pytest.raises(DatasetError, match="node 5 has no label"):
        prepare_ogb(root, tmp_path / "ds")


def test_truncated_gzip_and_missing_files(tmp_path):
    root = tmp_path / "r"
    _write_ogb(root, e=3000)
    p = root / "raw" / "edge.csv.gz"
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match=r"edge\.csv\.gz' cannot be read .* truncated"):
        prepare_ogb(root, tmp_path / "ds", chunk_rows=100)
    p.unlink()
    with pytest.raises(DatasetError, match="OGB edge file .* does not exist"):
        prepare_ogb(root, tmp_path / "ds")
    with pytest.raises(DatasetError, match="does not exist"):
        prepare_ogb(tmp_path / "nope", tmp_path / "ds")
    with pytest.raises(DatasetError, match="chunk_rows"):
        prepare_ogb(root, tmp_path / "ds", chunk_rows=0)


def test_empty_graph(tmp_path):
    root = tmp_path / "r"
    _gz(root / "raw" / "edge.csv.gz", [])
    _gz(root / "raw" / "num-node-list.csv.gz", [4])
    _gz(root / "raw" / "num-edge-list.csv.gz", [0])
    g = open_dataset(prepare_ogb(root, tmp_path / "ds", undirected=True))
    assert (g.num_nodes, g.num_edges) == (4, 0)
