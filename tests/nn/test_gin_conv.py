import pytest
import torch
from nn_graphs import dense_adjacency, full_block
from torch.autograd import gradcheck

from fleetgnn.nn import GINConv, LocalAggregator


def test_equals_dense_formula_and_eps_is_trained(graph, device):
    conv = GINConv(4, 3, hidden=5, eps=0.3).double()
    x = torch.randn(graph.num_nodes, 4, dtype=torch.float64)
    assert float(conv.eps.detach()) == pytest.approx(0.3)
    z = (1 + conv.eps.detach()) * x + dense_adjacency(graph) @ x
    ref = conv.mlp(z).detach()
    full_agg = LocalAggregator.from_graph(graph, dtype=torch.float64, device=device)
    conv, x = conv.to(device), x.to(device)
    torch.testing.assert_close(conv(full_agg, x).cpu(), ref, rtol=1e-12, atol=1e-12)
    conv(full_agg, x).sum().backward()
    assert conv.eps.grad is not None and conv.eps.grad.abs() > 0
    fixed = GINConv(4, 3, train_eps=False)
    assert "eps" not in dict(fixed.named_parameters())


def test_block_and_gradcheck(graph, full_agg):
    conv = GINConv(3, 2).double()
    x = torch.randn(graph.num_nodes, 3, dtype=torch.float64, requires_grad=True)
    block = full_block(graph, [4, 8])
    out = conv(LocalAggregator(block, dtype=torch.float64), x[block.src_ids])
    torch.testing.assert_close(out, conv(full_agg, x)[[4, 8]])
    assert gradcheck(lambda t: conv(full_agg, t), (x,))


def test_hidden_layer_is_normalised_so_outputs_do_not_grow_with_the_degree(graph, full_agg):
    conv = GINConv(4, 3, hidden=6).double()
    assert isinstance(conv.mlp[1], torch.nn.LayerNorm)
    torch.nn.init.zeros_(conv.mlp[0].bias)  # then the layer is scale-invariant (up to LN's eps)
    x = torch.randn(graph.num_nodes, 4, dtype=torch.float64)
    torch.testing.assert_close(conv(full_agg, 100.0 * x), conv(full_agg, x), rtol=1e-4, atol=1e-4)
    plain = GINConv(4, 3, hidden=6, norm=False)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in plain.mlp)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in GINConv(4, 1).mlp)  # width 1
