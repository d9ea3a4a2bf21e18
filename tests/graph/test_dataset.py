import json

import numpy as np
import pytest

from fleetgnn.errors import DatasetError
from fleetgnn.graph import DatasetWriter, from_edges, open_dataset, read_meta, write_dataset


@pytest.fixture
def graph():
    rng = np.random.default_rng(0)
    n, e = 50, 300
    data = {
        "x": rng.standard_normal((n, 8)).astype(np.float32),
        "y": rng.integers(0, 4, n),
        "train_mask": np.arange(n) < 10,
        "val_mask": (np.arange(n) >= 10) & (np.arange(n) < 20),
        "test_mask": np.arange(n) >= 20,
    }
    return from_edges(
        rng.integers(0, n, e),
        rng.integers(0, n, e),
        n,
        edge_weight=rng.random(e),
        node_data=data,
        num_classes=4,
        name="toy",
    )


def test_roundtrip_is_exact_and_memory_mapped(graph, tmp_path):
    out = write_dataset(graph, tmp_path / "ds", source="test")
    meta = read_meta(out)
    assert meta["format_version"] == 1
    assert (meta["num_nodes"], meta["num_edges"], meta["num_features"], meta["num_classes"]) == (
        50,
        300,
        8,
        4,
    )
    assert meta["source"] == "test"
    assert set(meta["arrays"]) == {
        "indptr",
        "indices",
        "x",
        "y",
        "train_mask",
        "val_mask",
        "test_mask",
        "edge_weight",
    }
    g = open_dataset(out)
    assert isinstance(g.x, np.memmap) and isinstance(g.indices, np.memmap)
    assert not g.x.flags.writeable
    for name in meta["arrays"]:  # all eight, as asserted above
        assert np.array_equal(getattr(g, name), getattr(graph, name)), name
        assert getattr(g, name).dtype == getattr(graph, name).dtype
    assert g.num_classes == 4 and g.name == "toy"
    assert not list(tmp_path.glob(".ds.tmp-*")), "temporary directory left behind"


def test_existing_output_needs_overwrite(graph, tmp_path):
    write_dataset(graph, tmp_path / "ds")
    with pytest.raises(DatasetError, match="already exists"):
        write_dataset(graph, tmp_path / "ds")
    small = from_edges(np.array([0]), np.array([1]), 2)
    write_dataset(small, tmp_path / "ds", overwrite=True)
    assert open_dataset(tmp_path / "ds").num_nodes == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_interrupted_write_leaves_nothing(graph, tmp_path):
    with pytest.raises(RuntimeError):
        with DatasetWriter(tmp_path / "ds", name="x") as w:
            w.put("indptr", graph.indptr)
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def test_chunked_create(tmp_path):
    with DatasetWriter(tmp_path / "ds", name="chunks") as w:
        w.put("indptr", np.array([0, 1, 2, 2], np.int64))
        w.put("indices", np.array([1, 0], np.int32))
        x = w.create("x", np.float32, (3, 2))
        for lo in range(3):
            x[lo] = lo
        w.commit()
    g = open_dataset(tmp_path / "ds")
    assert np.array_equal(g.x[:, 0], [0, 1, 2])


def test_missing_meta_and_bad_version(graph, tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        open_dataset(tmp_path / "nope")
    out = write_dataset(graph, tmp_path / "ds")
    meta = json.loads((out / "meta.json").read_text())
    meta["format_version"] = 99
    (out / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="format_version 99"):
        open_dataset(out)
    (out / "meta.json").unlink()
    with pytest.raises(DatasetError, match="no meta.json"):
        open_dataset(out)


def test_truncated_array_detected_at_open(graph, tmp_path):
    out = write_dataset(graph, tmp_path / "ds")
    path = out / "x.npy"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match="truncated or corrupt"):
        open_dataset(out)


def test_inconsistent_shapes_detected(graph, tmp_path):
    out = write_dataset(graph, tmp_path / "ds")
    np.save(out / "y.npy", np.zeros(49, np.int64))
    with pytest.raises(DatasetError, match="inconsistent"):
        open_dataset(out)


def test_invalid_contents_detected(graph, tmp_path):
    out = write_dataset(graph, tmp_path / "ds")
    idx = np.load(out / "indices.npy")
    idx[3] = 1000
    np.save(out / "indices.npy", idx)
    with pytest.raises(DatasetError, match="outside the valid interval"):
        open_dataset(out)
    # the structural check alone (for huge datasets) does not scan values
    assert open_dataset(out, validate="structure").indices[3] == 1000


def test_missing_array_file(graph, tmp_path):
    out = write_dataset(graph, tmp_path / "ds")
    (out / "val_mask.npy").unlink()
    with pytest.raises(DatasetError, match="missing"):
        open_dataset(out)


def test_edge_attr_roundtrip_and_value_check(tmp_path):
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 12, 40), rng.integers(0, 12, 40)
    attr = rng.standard_normal((40, 3)).astype(np.float32)
    g = from_edges(src, dst, 12, edge_attr=attr)
    out = write_dataset(g, tmp_path / "ds")
    back = open_dataset(out)
    assert isinstance(back.edge_attr, np.memmap) and read_meta(out)["arrays"]["edge_attr"] == {
        "dtype": "<f4",
        "shape": [40, 3],
    }
    np.testing.assert_array_equal(back.edge_attr, g.edge_attr)
    bad = np.array(g.edge_attr)
    bad[7, 2] = np.inf
    with pytest.raises(DatasetError, match="'edge_attr' holds a non-finite value inf at edge 7"):
        write_dataset(g.replace(edge_attr=bad, validate="none"), tmp_path / "bad")
