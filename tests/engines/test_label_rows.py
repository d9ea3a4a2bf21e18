import numpy as np
import torch

from fleetgnn.engines.common import LabelRows, labels_and_masks
from fleetgnn.graph import from_edges, open_dataset, write_dataset


def test_label_rows_equal_the_whole_graph_labels(tmp_path):
    """The sampled engines' per-batch labels equal rows of labels_and_masks(graph)'s int64 [N]
    labels, for labels in memory and in a memory-mapped dataset (read with pread, no map)."""
    rng = np.random.default_rng(0)
    y = rng.integers(-1, 7, 400).astype(np.int32)
    g = from_edges(np.array([0, 1]), np.array([1, 2]), num_nodes=400, node_data={"y": y})
    mg = open_dataset(write_dataset(g, tmp_path / "ds"))
    ids = torch.from_numpy(rng.integers(0, 400, 300))  # any order, repeats
    for graph in (g, mg):
        labels = LabelRows(graph.y)
        want = labels_and_masks(graph)[0][ids]
        got = labels[ids]
        assert got.dtype == torch.int64 and torch.equal(got, want) and len(labels) == 400
        assert torch.equal(labels[ids.numpy()[:0]], want[:0])
    assert LabelRows(mg.y)._rows.reads_file and not LabelRows(g.y)._rows.reads_file
