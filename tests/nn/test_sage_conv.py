import pytest
import torch
from nn_graphs import dense_adjacency, full_block
from torch.autograd import gradcheck

from fleetgnn.errors import ConfigError
from fleetgnn.nn import LocalAggregator, SAGEConv


def dense_aggr(a, h, aggr):
    if aggr == "sum":
        return a @ h
    if aggr == "mean":
        return (a @ h) / a.sum(1, keepdim=True).clamp(min=1)
    masked = torch.where(a[:, :, None] > 0, h[None, :, :], torch.tensor(-torch.inf, dtype=h.dtype))
    out = masked.max(1).values
    return torch.where(torch.isinf(out), torch.zeros_like(out), out)


@pytest.mark.parametrize("aggr", ["mean", "sum", "max"])
@pytest.mark.parametrize("project", [False, True])
@pytest.mark.parametrize(("fin", "fout"), [(5, 3), (3, 6)])
def test_equals_dense_formula(graph, aggr, project, fin, fout, device):
    torch.manual_seed(1)
    conv = SAGEConv(fin, fout, aggr=aggr, project=project).double()
    x = torch.randn(graph.num_nodes, fin, dtype=torch.float64)
    h = x if not project else torch.relu(x @ conv.proj.weight.T + conv.proj.bias)
    ref = dense_aggr(dense_adjacency(graph), h, aggr) @ conv.lin_l.weight.T + conv.lin_l.bias
    ref = ref + x @ conv.lin_r.weight.T
    agg = LocalAggregator.from_graph(graph, dtype=torch.float64, device=device)
    out = conv.to(device)(agg, x.to(device))
    assert out.device.type == device
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-12, atol=1e-12)


def test_no_root_weight_and_isolated_node(graph, full_agg):
    conv = SAGEConv(4, 2, root_weight=False, bias=False).double()
    out = conv(full_agg, torch.randn(graph.num_nodes, 4, dtype=torch.float64))
    assert torch.all(out[0] == 0)  # node 0 has no in-edges


def test_block_equals_full_graph_and_gradcheck(graph, full_agg):
    conv = SAGEConv(4, 3).double()
    x = torch.randn(graph.num_nodes, 4, dtype=torch.float64, requires_grad=True)
    block = full_block(graph, [1, 6, 0])
    out = conv(LocalAggregator(block, dtype=torch.float64), x[block.src_ids])
    torch.testing.assert_close(out, conv(full_agg, x)[[1, 6, 0]])
    assert gradcheck(lambda t: conv(full_agg, t), (x,))


def test_unknown_aggr():
    with pytest.raises(ConfigError, match="aggr"):
        SAGEConv(3, 3, aggr="lstm")
