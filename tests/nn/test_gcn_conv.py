import pytest
import torch
from nn_graphs import dense_adjacency, full_block
from torch.autograd import gradcheck

from fleetgnn.nn import GCNConv, LocalAggregator


@pytest.mark.parametrize(("fin", "fout"), [(5, 3), (3, 6)])  # both transform orders
def test_equals_dense_formula(graph, fin, fout, device):
    torch.manual_seed(0)
    conv = GCNConv(fin, fout).double()
    torch.nn.init.normal_(conv.bias)
    x = torch.randn(graph.num_nodes, fin, dtype=torch.float64)
    a = dense_adjacency(graph)
    d = a.sum(1)  # in-degree
    a_hat = a + torch.eye(graph.num_nodes, dtype=torch.float64)
    norm = (d + 1).rsqrt()
    ref = (norm[:, None] * a_hat * norm[None, :]) @ x @ conv.lin.weight.T + conv.bias
    agg = LocalAggregator.from_graph(graph, dtype=torch.float64, device=device)
    out = conv.to(device)(agg, x.to(device))
    assert out.device.type == device
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-12, atol=1e-12)


def test_full_neighbourhood_block_equals_full_graph(graph, full_agg):
    conv = GCNConv(4, 3).double()
    x = torch.randn(graph.num_nodes, 4, dtype=torch.float64)
    block = full_block(graph, [3, 0, 7, 10])
    out = conv(LocalAggregator(block, dtype=torch.float64), x[block.src_ids])
    torch.testing.assert_close(out, conv(full_agg, x)[[3, 0, 7, 10]])


def test_gradcheck(full_agg, graph):
    conv = GCNConv(3, 2).double()
    x = torch.randn(graph.num_nodes, 3, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda t: conv(full_agg, t), (x,))
