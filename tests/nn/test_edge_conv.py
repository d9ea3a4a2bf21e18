import numpy as np
import pytest
import torch
from nn_graphs import random_graph
from torch.autograd import gradcheck

from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.nn import EdgeConditionedConv, GINEConv, LocalAggregator, edge_reduce
from fleetgnn.sampling import NeighborSampler


@pytest.fixture
def egraph():
    g = random_graph(n=12, p=0.3)
    attr = np.random.default_rng(1).standard_normal((g.num_edges, 3))
    return g.replace(edge_attr=attr)


def _edges(g):
    src, dst = g.edges()
    return [(int(s), int(d), e) for e, (s, d) in enumerate(zip(src, dst, strict=True))]


def _gine_closed_form(conv, g, x):
    """Edge by edge: z_i = (1 + eps) x_i + sum_{e = j -> i} ReLU(x_j + W_e a_e + b_e)."""
    a = torch.from_numpy(g.edge_attr)
    w, b = conv.edge_lin.weight.detach(), conv.edge_lin.bias.detach()
    z = (1 + conv.eps.detach()) * x.clone()
    for s, d, e in _edges(g):
        z[d] += torch.relu(x[s] + w @ a[e] + b)
    return conv.mlp(z).detach()


def _nnconv_closed_form(conv, g, x):
    """out_i = root(x_i) + mean_{e = j -> i} x_j^T reshape(f(a_e)), 0 without in-edges."""
    a = torch.from_numpy(g.edge_attr)
    out = conv.root(x).detach().clone()
    msgs = {}
    for s, d, e in _edges(g):
        w = conv.edge_nn(a[e]).detach().view(conv.in_channels, conv.out_channels)
        msgs.setdefault(d, []).append(x[s] @ w)
    for d, ms in msgs.items():
        out[d] += torch.stack(ms).mean(0)
    return out


@pytest.mark.parametrize("layer", ["gine", "nnconv"])
def test_equals_closed_form_on_graph_and_sampled_block(egraph, layer):
    torch.manual_seed(0)
    if layer == "gine":
        conv, ref_fn = GINEConv(4, 3, edge_dim=3, hidden=5, eps=0.2).double(), _gine_closed_form
    else:
        conv, ref_fn = EdgeConditionedConv(4, 3, edge_dim=3, hidden=6).double(), _nnconv_closed_form
    x = torch.randn(egraph.num_nodes, 4, dtype=torch.float64)
    ref = ref_fn(conv, egraph, x)
    agg = LocalAggregator.from_graph(egraph, dtype=torch.float64, with_edge_attr=True)
    torch.testing.assert_close(conv(agg, x).detach(), ref, rtol=1e-12, atol=1e-12)
    # a sampled block with the edges' IDs: its edge features are gathered by edge ID
    dst = torch.tensor([5, 2, 9, 0])
    for backend in ("numpy", "torch"):
        (block,) = (
            NeighborSampler(egraph, [-1], backend=backend, with_edge_ids=True)
            .sample_from_nodes(dst)
            .blocks
        )
        attr = torch.from_numpy(egraph.edge_attr)[block.edge_ids]
        bagg = LocalAggregator(block, dtype=torch.float64, edge_attr=attr)
        out = conv(bagg, x[block.src_ids]).detach()
        torch.testing.assert_close(out, ref[dst], rtol=1e-12, atol=1e-12)
    # gradients reach the inputs and every parameter
    xg = x.clone().requires_grad_(True)
    assert gradcheck(lambda t: conv(agg, t), (xg,))
    conv(agg, x).square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in conv.parameters())


def test_edge_features_are_required_and_checked(egraph):
    agg = LocalAggregator.from_graph(egraph, dtype=torch.float64)  # without edge features
    x = torch.randn(egraph.num_nodes, 4, dtype=torch.float64)
    with pytest.raises(ConfigError, match="carries no edge features"):
        GINEConv(4, 3, edge_dim=3).double()(agg, x)

    class Bare:  # an aggregator without the optional edge methods
        num_dst = 2

    with pytest.raises(ConfigError, match="on the reference, minibatch, fullgraph engine"):
        edge_reduce(Bare(), x)
    with pytest.raises(GraphError, match="has no edge_attr"):
        LocalAggregator.from_graph(egraph.replace(edge_attr=None), with_edge_attr=True)
    (block,) = NeighborSampler(egraph, [-1]).sample_from_nodes(torch.tensor([3])).blocks
    with pytest.raises(GraphError, match=r"\[num_edges, D\]"):
        LocalAggregator(block, edge_attr=torch.zeros(block.num_edges + 1, 2))
    with pytest.raises(ConfigError, match="'edge_dim' must be a positive int"):
        GINEConv(4, 3, edge_dim=0)
    with pytest.raises(ConfigError, match="'aggr' must be one of"):
        EdgeConditionedConv(4, 3, edge_dim=2, aggr="min")
