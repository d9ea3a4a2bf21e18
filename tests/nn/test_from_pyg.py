"""``fleetgnn.nn.from_pyg``: PyG models, unchanged, on fleetgnn's aggregators (float64).

On the same batch the adapted model's loss and gradients equal PyG's own forward of the same
model object: the whole graph on the reference engine, and a sampled batch whose fanouts take
every neighbour (its blocks are then the seeds' exact computation graph). Refusals are one line.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pyg_nn = pytest.importorskip("torch_geometric.nn")

import fleetgnn  # noqa: E402
from fleetgnn.errors import ConfigError  # noqa: E402
from fleetgnn.graph import from_edges  # noqa: E402
from fleetgnn.nn import LocalAggregator, from_pyg  # noqa: E402


def _graph(loops: bool = False):
    n, iso = 40, 3  # the last `iso` nodes are isolated
    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, n - iso, 160), rng.integers(0, n - iso, 160)
    src[:8] = 4  # a hub
    if loops:
        src[10:14] = dst[10:14]
    else:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    split = rng.integers(0, 3, n)
    data = {
        "x": rng.standard_normal((n, 6)),
        "y": rng.integers(0, 3, n),
        "train_mask": split == 0,
        "val_mask": split == 1,
        "test_mask": split == 2,
    }
    return from_edges(src, dst, n, node_data=data, num_classes=3, name="pyg")


def _edge_index(graph):
    """PyG's ``edge_index`` of ``graph`` (row 0 sources, row 1 destinations)."""
    indptr = torch.from_numpy(np.asarray(graph.indptr, dtype=np.int64))
    dst = torch.repeat_interleave(torch.arange(graph.num_nodes), indptr.diff())
    return torch.stack([torch.from_numpy(np.asarray(graph.indices, dtype=np.int64)), dst])


MODELS = {
    "graphsage": lambda: pyg_nn.GraphSAGE(6, 8, 2, 3),
    "graphsage_max_3": lambda: pyg_nn.GraphSAGE(6, 8, 3, 3, aggr="max"),
    "gat": lambda: pyg_nn.GAT(6, 8, 2, 3, heads=2),
    "gatv2": lambda: pyg_nn.GAT(6, 8, 2, 3, v2=True, heads=2),
    "gin": lambda: pyg_nn.GIN(6, 8, 2, 3),
    "gcn": lambda: pyg_nn.GCN(6, 8, 2, 3),
    "gcn_improved_no_bias": lambda: pyg_nn.GCN(6, 8, 2, 3, improved=True, bias=False),
    "gcn_without_loops": lambda: pyg_nn.GCN(6, 8, 2, 3, add_self_loops=False),
    "gcn_unnormalised": lambda: [pyg_nn.GCNConv(6, 8, normalize=False), pyg_nn.GCNConv(8, 3)],
    "jk_last_layer_norm": lambda: pyg_nn.GraphSAGE(
        6, 8, 2, 3, jk="last", norm="layer_norm", norm_kwargs={"mode": "node"}, act_first=True
    ),
    "stack": lambda: [pyg_nn.SAGEConv(6, 8), pyg_nn.GraphConv(8, 3)],
}


def _pyg_forward(model, x, edge_index):
    """PyG's own forward of ``model`` (for a stack: its layers with ReLU between them)."""
    if not isinstance(model, list):
        return model(x, edge_index)
    for i, conv in enumerate(model):
        x = conv(x, edge_index)
        x = x.relu() if i < len(model) - 1 else x
    return x


def _build(name):
    torch.manual_seed(0)
    model = MODELS[name]()
    if isinstance(model, list):
        return [m.double() for m in model]
    return model.double()


def _params(model):
    mods = model if isinstance(model, list) else [model]
    return [p for m in mods for p in m.parameters()]


GCN_WITH_LOOPS = ("gcn", "gcn_improved_no_bias", "gcn_unnormalised")  # GCNConvs that add loops
CASES = [(name, loops) for name in MODELS for loops in (False, True)]
# on a graph with self loops fleetgnn's degrees count them, PyG's gcn_norm (adding its own) not
CASES = [(n, loops) for n, loops in CASES if not (loops and n in GCN_WITH_LOOPS)]


@pytest.mark.parametrize(("name", "loops"), CASES)
def test_reference_full_graph_equals_pyg_forward(name, loops):
    graph = _graph(loops)
    model = _build(name)
    x = torch.from_numpy(np.asarray(graph.x))
    y = torch.from_numpy(np.asarray(graph.y))
    train = torch.from_numpy(np.flatnonzero(graph.train_mask))
    out = _pyg_forward(model, x, _edge_index(graph))
    want = F.cross_entropy(out[train], y[train], reduction="sum")
    (want / train.numel()).backward()  # engines step on the batch's mean loss
    want_grads = [p.grad.clone() for p in _params(model)]
    for p in _params(model):
        p.grad = None
    cfg = fleetgnn.ReferenceEngineConfig(mode="full", dtype="float64", device="cpu", seed=7)
    opt = torch.optim.SGD(_params(model), lr=0.0)  # the step leaves the gradients to compare
    with fleetgnn.build_engine(from_pyg(model), graph, cfg, optimizer=opt) as engine:
        (st,) = engine.run_epoch(0)
    assert st.count == int(train.numel())
    assert st.loss_sum == pytest.approx(want.item(), rel=1e-12)
    for p, g in zip(_params(model), want_grads):
        torch.testing.assert_close(p.grad, g, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["graphsage", "gat", "gin", "gcn"])
def test_sampled_batch_with_every_neighbour_equals_pyg_forward(name):
    """The minibatch path (blocks, ``num_src > num_dst``): fanouts -1 make the batch's blocks
    the seeds' whole 2-hop graph, so its loss is PyG's full forward at the seeds."""
    graph = _graph()
    model = _build(name)
    cfg = fleetgnn.ReferenceEngineConfig(
        mode="minibatch", fanouts=(-1, -1), batch_size=5, dtype="float64", device="cpu", seed=7
    )
    engine = fleetgnn.build_engine(from_pyg(model), graph, cfg)
    aggs, x_batch, seeds, _ = engine.batch(0, 1)
    assert aggs[0].num_src > aggs[-1].num_dst  # a real sampled hop
    x = torch.from_numpy(np.asarray(graph.x))
    y = torch.from_numpy(np.asarray(graph.y))
    want = F.cross_entropy(
        _pyg_forward(model, x, _edge_index(graph))[seeds], y[seeds], reduction="sum"
    )
    st = engine.train_step(0, 1)
    assert st.loss_sum == pytest.approx(want.item(), rel=1e-12)
    engine.close()


def test_bipartite_hop_of_a_block():
    graph = _graph()
    cfg = fleetgnn.ReferenceEngineConfig(mode="minibatch", fanouts=(3, 2), batch_size=4)
    engine = fleetgnn.build_engine(from_pyg(_build("graphsage")), graph, cfg)
    aggs, x, _, _ = engine.batch(0, 0)
    agg = aggs[0]
    hop = agg.bipartite(x)
    assert hop.x_src is x and hop.size == (agg.num_src, agg.num_dst)
    assert torch.equal(hop.x_dst, x[: agg.num_dst])
    src, dst = hop.edge_index
    gsrc, gdst = agg.edge_ids()  # the same edges, in global IDs
    assert torch.equal(agg.src_ids[src], gsrc) and torch.equal(agg.src_ids[dst], gdst)
    with pytest.raises(ConfigError, match="rows"):
        agg.bipartite(x[:-1])
    engine.close()


def test_parameters_are_the_users_and_dropout_is_keyed():
    torch.manual_seed(0)
    model = pyg_nn.GraphSAGE(6, 8, 2, 3, dropout=0.5)
    adapted = from_pyg(model)
    assert {id(p) for p in adapted.parameters()} == {id(p) for p in model.parameters()}
    assert list(adapted.state_dict()) == [f"pyg.{k}" for k in model.state_dict()]
    assert adapted.drop.p == 0.5
    graph = _graph()
    agg = LocalAggregator.from_graph(graph, dtype=torch.float64)
    x = torch.from_numpy(np.asarray(graph.x))
    adapted.double().train()
    a, b = adapted([agg, agg], x, step=3), adapted([agg, agg], x, step=3)
    assert torch.equal(a, b)  # keyed masks: the same step draws the same ones
    assert not torch.equal(a, adapted([agg, agg], x, step=4))
    adapted.eval()
    torch.testing.assert_close(adapted([agg, agg], x), model(x, _edge_index(graph)))


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: [pyg_nn.ChebConv(6, 3, K=2)], "ChebConv.*takes one node set"),
        (lambda: pyg_nn.GCN(6, 8, 2, 3, cached=True), "GCNConv.*cached=True"),
        (lambda: pyg_nn.GraphSAGE(6, 8, 2, 3, norm="batch_norm"), "BatchNorm.*over rows"),
        (lambda: pyg_nn.GraphSAGE(6, 8, 2, 3, norm="layer_norm"), "LayerNorm.*over rows"),
        (lambda: pyg_nn.GraphSAGE(6, 8, 2, 3, jk="cat"), "jk='cat'"),
        (lambda: [pyg_nn.SAGEConv(6, 8), torch.nn.Linear(8, 3)], "layer 1 .Linear. is not"),
        (lambda: [], "non-empty"),
        (lambda: torch.nn.Linear(6, 3), "BasicGNN"),
    ],
)
def test_refusals_are_one_line(make, match):
    with pytest.raises(ConfigError, match=match) as err:
        from_pyg(make())
    assert "\n" not in str(err.value)


def test_engines_refuse_in_one_line():
    graph = _graph()
    model = pyg_nn.GraphSAGE(6, 8, 2, 3)
    with pytest.raises(ConfigError, match="from_pyg") as err:  # the raw PyG model
        fleetgnn.build_engine(model, graph, fleetgnn.ReferenceEngineConfig())
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="offload.*reference | minibatch") as err:
        fleetgnn.build_engine(from_pyg(model), graph, fleetgnn.OffloadEngineConfig())
    assert "\n" not in str(err.value)


def test_without_torch_geometric(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "torch_geometric.nn", None)
    with pytest.raises(ConfigError, match=r"pip install 'fleetgnn\[pyg\]'"):
        from_pyg(object())
