import numpy as np
import pytest
import torch

from fleetgnn.engines import common
from fleetgnn.engines.common import node_features, normalize_rows
from fleetgnn.errors import ConfigError
from fleetgnn.graph import from_edges, open_dataset, write_dataset


@pytest.mark.parametrize("block", [1, 7 * 5 * 8 + 3, 1 << 20])
def test_node_features_in_blocks_equal_one_whole_copy(tmp_path, monkeypatch, block):
    """Blocks of any size (bytes) give, bit for bit, normalize_rows(x.to(dtype)) of the whole
    matrix, from memory and from a memory-mapped dataset (read with pread), either dtype."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((50, 5)) * rng.integers(0, 2, (50, 1))).astype(np.float32)
    g = from_edges(np.array([0, 1]), np.array([1, 2]), num_nodes=50, node_data={"x": x})
    mg = open_dataset(write_dataset(g, tmp_path / "ds"))
    monkeypatch.setattr(common, "FEATURE_BLOCK_BYTES", block)
    for graph in (g, mg):
        for dtype in (torch.float32, torch.float64):
            for norm in ("none", "row"):
                want = normalize_rows(torch.from_numpy(np.array(x)).to(dtype), norm)
                got = node_features(graph, dtype, norm)
                assert got.dtype == dtype and torch.equal(got, want), (dtype, norm)
    with pytest.raises(ConfigError, match="feature_norm' must be 'none' or 'row'"):
        node_features(g, torch.float32, "l2")
