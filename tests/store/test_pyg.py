import numpy as np
import pytest
import torch

from fleetgnn.graph.csc import from_edges
from fleetgnn.store import TierBudgets, UnifiedStore

pyg_data = pytest.importorskip("torch_geometric.data")

from fleetgnn.store.pyg import to_pyg  # noqa: E402


def _store():
    rng = np.random.default_rng(0)
    n, e = 30, 120
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    g = from_edges(
        src,
        dst,
        num_nodes=n,
        node_data={
            "x": rng.standard_normal((n, 4)),
            "y": rng.integers(0, 3, n),
            "train_mask": rng.random(n) < 0.5,
        },
    )
    return g, UnifiedStore.build(g, None, TierBudgets(device=600, host=900))


def test_feature_store():
    g, store = _store()
    fs, _ = to_pyg(store)
    assert isinstance(fs, pyg_data.FeatureStore)
    idx = torch.tensor([5, 1, 5, 29])
    x = fs.get_tensor(group_name=None, attr_name="x", index=idx)
    assert torch.equal(x, torch.from_numpy(g.x[idx.numpy()]))
    assert torch.equal(
        fs.get_tensor(group_name=None, attr_name="x", index=None), torch.from_numpy(g.x)
    )
    y = fs.get_tensor(group_name=None, attr_name="y", index=idx)
    assert torch.equal(y, torch.from_numpy(g.y[idx.numpy()]))
    names = sorted(a.attr_name for a in fs.get_all_tensor_attrs())
    assert names == ["train_mask", "x", "y"]
    assert fs.get_tensor_size(group_name=None, attr_name="x") == (30, 4)
    assert store.requests()["disk"] + store.requests()["host"] > 0  # reads went through tiers


def test_graph_store_csc_and_coo():
    g, store = _store()
    _, gs = to_pyg(store)
    assert isinstance(gs, pyg_data.GraphStore)
    (attr,) = gs.get_all_edge_attrs()
    row, colptr = gs.get_edge_index(attr)
    assert torch.equal(colptr, torch.from_numpy(g.indptr))
    assert torch.equal(row, torch.from_numpy(g.indices.astype(np.int64)))
    row2, col = gs.get_edge_index(edge_type=None, layout="coo", is_sorted=True)
    src, dst = g.edges()
    assert torch.equal(row2, torch.from_numpy(src.astype(np.int64)))
    assert torch.equal(col, torch.from_numpy(dst.astype(np.int64)))
