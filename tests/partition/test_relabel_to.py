"""``PartitionBook.relabel_to``: the relabelled topology streamed into files, against permute."""

import numpy as np
import pytest

import fleetgnn.graph.csc as csc_module
from fleetgnn.errors import GraphError
from fleetgnn.graph import from_edges
from fleetgnn.graph.csc import open_topology, topology_nbytes
from fleetgnn.graph.dataset import open_dataset, write_dataset
from fleetgnn.partition.book import PartitionBook


@pytest.mark.parametrize("block", [1, 5, 1 << 22])
def test_relabel_to_files_equals_permute(graphs, tmp_path, monkeypatch, block):
    """Files equal ``graph.permute`` bit for bit (tiny blocks too), memory-mapped, read-only."""
    monkeypatch.setattr(csc_module, "_PERMUTE_BLOCK_EDGES", block)
    monkeypatch.setattr(csc_module, "_PERMUTE_BLOCK_NODES", max(1, block // 2))
    g = graphs.random(4, 50, 400, hub=True)
    mapped = open_dataset(write_dataset(g, tmp_path / "ds"))
    book = PartitionBook.from_part_of(np.random.default_rng(1).integers(0, 3, 50), 3, "test")
    want = g.permute(book.perm)
    for i, source in enumerate((g, mapped)):
        out = tmp_path / f"topo{i}"
        out.mkdir()
        got = book.relabel_to(source, out)
        assert got.x is None and got.y is None and got.num_classes == g.num_classes
        for name in ("indptr", "indices", "edge_weight"):
            arr = getattr(got, name)
            assert isinstance(arr, np.memmap) and not arr.flags.writeable, name
            assert arr.dtype == getattr(want, name).dtype, name
            assert np.array_equal(arr, getattr(want, name)), name
        again = open_topology(out, num_classes=g.num_classes)
        assert np.array_equal(again.indices, want.indices)
        size = sum(f.stat().st_size for f in out.iterdir())
        assert size <= topology_nbytes(g)  # the free-space check asks for enough


def test_relabel_to_keeps_int32_and_unweighted_and_edgeless(tmp_path):
    g = from_edges(np.array([0, 2, 1]), np.array([1, 1, 3]), 5)
    assert g.indices.dtype == np.int32 and g.edge_weight is None
    book = PartitionBook.from_part_of(np.array([1, 0, 1, 0, 1]), 2, "test")
    got = book.relabel_to(g, tmp_path)
    assert got.indices.dtype == np.int32 and got.edge_weight is None
    assert not (tmp_path / "edge_weight.npy").exists()
    assert np.array_equal(got.indptr, g.permute(book.perm).indptr)
    empty = from_edges(np.array([], dtype=np.int64), np.array([], dtype=np.int64), 3)
    (tmp_path / "e").mkdir()
    got = PartitionBook.from_part_of(np.array([1, 0, 1]), 2, "test").relabel_to(
        empty, tmp_path / "e"
    )
    assert got.num_edges == 0 and np.array_equal(got.indptr, np.zeros(4))


def test_permute_out_dir_refuses_node_data(graphs, tmp_path):
    g = graphs.random(0, 10, 30)
    with pytest.raises(GraphError, match="node_data=False"):
        g.permute(np.arange(10), out_dir=tmp_path)
