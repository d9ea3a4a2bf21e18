import importlib.util
import sys
import types

import numpy as np
import pytest
import torch

from fleetgnn.errors import FleetgnnError, GraphError
from fleetgnn.graph import from_edges, open_dataset, write_dataset
from fleetgnn.graph.loaders import from_pyg, to_pyg

HAS_PYG = importlib.util.find_spec("torch_geometric") is not None


class Duck:
    """A Data-like object: attributes only, no PyG."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def _example(n=9, e=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    x = torch.randn(n, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (n,), generator=g)
    train = torch.zeros(n, dtype=torch.bool)
    train[:3] = True
    val = torch.zeros(n, dtype=torch.bool)
    val[3:5] = True
    w = torch.rand(e, generator=g)
    return ei, x, y, train, val, w


def test_from_duck_typed_data_matches_from_edges(same_graph):
    ei, x, y, train, val, w = _example()
    g = from_pyg(
        Duck(edge_index=ei, x=x, y=y[:, None], train_mask=train, val_mask=val, edge_weight=w)
    )
    ref = from_edges(
        ei[0].numpy(),
        ei[1].numpy(),
        9,
        edge_weight=w.numpy(),
        node_data={
            "x": x.numpy(),
            "y": y.numpy(),
            "train_mask": train.numpy(),
            "val_mask": val.numpy(),
        },
    )
    same_graph(g, ref)
    assert g.x.dtype == np.float64 and g.test_mask is None


def test_edge_attr_follows_its_edges_into_csc_order(same_graph):
    ei, x, y, train, val, w = _example(seed=3)
    attr = torch.randn(30, 3, generator=torch.Generator().manual_seed(5))
    g = from_pyg(Duck(edge_index=ei, x=x, edge_weight=w, edge_attr=attr))
    ref = from_edges(
        ei[0].numpy(), ei[1].numpy(), 9, edge_weight=w.numpy(), edge_attr=attr.numpy(),
        node_data={"x": x.numpy()},
    )  # fmt: skip
    same_graph(g, ref)
    # row e of edge_attr is CSC edge e's: the edge weight (drawn per edge) tells them apart
    pos = {float(v): i for i, v in enumerate(w.numpy())}
    for e in range(g.num_edges):
        np.testing.assert_array_equal(g.edge_attr[e], attr.numpy()[pos[float(g.edge_weight[e])]])
    # [E] integer attributes: D = 1, float32
    one = from_pyg(Duck(edge_index=ei, edge_attr=torch.arange(30)))
    assert one.edge_attr.dtype == np.float32 and one.edge_attr.shape == (30, 1)
    assert sorted(one.edge_attr[:, 0].tolist()) == list(range(30))


def test_num_nodes_attribute_adds_isolated_nodes_and_numpy_inputs_work():
    ei = np.array([[0, 1], [1, 2]])
    g = from_pyg(Duck(edge_index=ei, num_nodes=6))
    assert g.num_nodes == 6 and g.num_edges == 2
    assert from_pyg(Duck(edge_index=np.zeros((2, 0), np.int64))).num_nodes == 0


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({}, "edge_index' is missing"),
        ({"edge_index": torch.zeros(3, 4, dtype=torch.long)}, r"shape \[2, E\]"),
        ({"edge_index": torch.zeros(2, 4)}, "integer array"),
        ({"edge_index": [[0], [1]]}, "torch.Tensor or numpy array"),
        ({"edge_index": torch.tensor([[0, -1], [1, 0]])}, "node ID -1"),
        ({"edge_index": torch.tensor([[0], [1]]), "y": torch.rand(2)}, "one integer class"),
        ({"edge_index": torch.tensor([[0], [1]]), "x": torch.rand(2)}, "2-D"),
        (
            {"edge_index": torch.tensor([[0], [1]]), "train_mask": torch.tensor([0, 1])},
            "bool",
        ),
        ({"edge_index": torch.tensor([[0], [5]]), "num_nodes": 3}, "node ID 5"),
        (
            {"edge_index": torch.tensor([[0, 1], [1, 0]]), "edge_attr": torch.rand(3, 2)},
            r"one row per edge of 'edge_index', shape \[2, D\] \(got \(3, 2\)\)",
        ),
        (
            {"edge_index": torch.tensor([[0], [1]]), "x": torch.rand(3, 2), "num_nodes": 2},
            "one row per node",
        ),
    ],
)
def test_from_pyg_errors(kw, match):
    with pytest.raises(GraphError, match=match):
        from_pyg(Duck(**kw))


def test_to_pyg_without_pyg_names_the_extra(monkeypatch):
    """Run with or without PyG installed: a None entry in sys.modules makes its import fail."""
    for name in [m for m in sys.modules if m == "torch_geometric" or m.startswith("torch_geo")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torch_geometric", None)
    monkeypatch.setitem(sys.modules, "torch_geometric.data", None)
    g = from_edges(np.array([0]), np.array([1]))
    with pytest.raises(FleetgnnError, match=r"pip install fleetgnn\[pyg\]"):
        to_pyg(g)


class _FakeData:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_to_pyg_roundtrip_with_stand_in_module(monkeypatch, tmp_path, same_graph):
    pkg = types.ModuleType("torch_geometric")
    data_mod = types.ModuleType("torch_geometric.data")
    data_mod.Data = _FakeData
    pkg.data = data_mod
    monkeypatch.setitem(sys.modules, "torch_geometric", pkg)
    monkeypatch.setitem(sys.modules, "torch_geometric.data", data_mod)
    ei, x, y, train, val, w = _example(seed=1)
    attr = torch.rand(30, 2, generator=torch.Generator().manual_seed(4))
    g = from_pyg(
        Duck(edge_index=ei, x=x, y=y, train_mask=train, val_mask=val, edge_weight=w, edge_attr=attr)
    )
    assert g.edge_attr is not None
    mm = open_dataset(write_dataset(g, tmp_path / "ds"))  # read-only memory maps convert too
    d = to_pyg(mm)
    assert isinstance(d, _FakeData) and d.num_nodes == 9
    assert d.edge_index.dtype == torch.int64 and d.edge_index.shape == (2, 30)
    same_graph(from_pyg(d), g)


@pytest.mark.skipif(not HAS_PYG, reason="torch_geometric not installed")
def test_real_pyg_roundtrip(same_graph):
    from torch_geometric.data import Data

    ei, x, y, train, val, w = _example(seed=2)
    data = Data(edge_index=ei, x=x, y=y, train_mask=train, val_mask=val, edge_weight=w)
    g = from_pyg(data)
    back = to_pyg(g)
    assert isinstance(back, Data) and back.num_nodes == data.num_nodes
    same_graph(from_pyg(back), g)
