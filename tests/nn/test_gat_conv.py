import pytest
import torch
from nn_graphs import dense_adjacency, full_block
from torch.autograd import gradcheck

from fleetgnn.nn import GATConv, LocalAggregator


def dense_gat(conv, a, x):
    """Dense GAT over N(i) + {i}: returns (out before bias [N, H, D], alpha [N, N, H])."""
    n = a.shape[0]
    h = (x @ conv.lin.weight.T).view(n, conv.heads, conv.out_channels)
    el = (h * conv.att_src).sum(-1)  # [N, H]
    er = (h * conv.att_dst).sum(-1)
    s = torch.nn.functional.leaky_relu(er[:, None, :] + el[None, :, :], conv.negative_slope)
    mask = (a + torch.eye(n, dtype=a.dtype)) > 0  # [dst, src]
    s = torch.where(mask[:, :, None], s, torch.tensor(-torch.inf, dtype=s.dtype))
    alpha = torch.softmax(s, dim=1)  # [dst, src, H]
    return torch.einsum("ijh,jhd->ihd", alpha, h), alpha


@pytest.mark.parametrize("concat", [True, False])
def test_equals_dense_formula(graph, concat, device):
    torch.manual_seed(2)
    conv = GATConv(5, 4, heads=3, concat=concat).double()
    torch.nn.init.normal_(conv.bias)
    x = torch.randn(graph.num_nodes, 5, dtype=torch.float64)
    with torch.no_grad():
        ref, _ = dense_gat(conv, dense_adjacency(graph), x)
        ref = (ref.reshape(graph.num_nodes, -1) if concat else ref.mean(1)) + conv.bias
    agg = LocalAggregator.from_graph(graph, dtype=torch.float64, device=device)
    out = conv.to(device)(agg, x.to(device))
    assert out.device.type == device
    torch.testing.assert_close(out.detach().cpu(), ref, rtol=1e-12, atol=1e-12)


def test_attention_sums_to_one_with_self_term(graph, full_agg):
    conv = GATConv(5, 4, heads=2).double()
    x = torch.randn(graph.num_nodes, 5, dtype=torch.float64) * 3
    alpha_e, alpha_s = conv.attention(full_agg, x)
    src, dst = full_agg.edge_ids()
    sums = torch.zeros(graph.num_nodes, 2, dtype=torch.float64).index_add_(0, dst, alpha_e)
    torch.testing.assert_close(sums + alpha_s, torch.ones_like(alpha_s))
    torch.testing.assert_close(alpha_s[0], torch.ones(2, dtype=torch.float64))  # isolated node
    _, dense_alpha = dense_gat(conv, dense_adjacency(graph), x)
    torch.testing.assert_close(alpha_e, dense_alpha[dst, src])
    idx = torch.arange(graph.num_nodes)
    torch.testing.assert_close(alpha_s, dense_alpha[idx, idx])


def test_extreme_scores_stay_finite(graph, full_agg):
    conv = GATConv(5, 2, heads=2)
    with torch.no_grad():
        conv.att_src.mul_(1e3)
    x = torch.randn(graph.num_nodes, 5) * 100
    alpha_e, alpha_s = conv.attention(full_agg, x)
    assert torch.isfinite(alpha_e).all() and torch.isfinite(alpha_s).all()
    src, dst = full_agg.edge_ids()
    sums = torch.zeros(graph.num_nodes, 2).index_add_(0, dst, alpha_e) + alpha_s
    torch.testing.assert_close(sums, torch.ones_like(sums))


def test_block_with_full_neighbourhood_equals_full_graph(graph, full_agg):
    conv = GATConv(5, 3, heads=2, attn_dropout=0.5, seed=4).double()
    x = torch.randn(graph.num_nodes, 5, dtype=torch.float64)
    dsts = [9, 0, 4, 2]
    for training in (False, True):  # attention dropout keyed by global IDs: equal masks
        conv.train(training)
        ref = conv(full_agg, x, step=3, layer=1)[dsts]
        for seed in (0, 1):
            block = full_block(graph, dsts, seed=seed)
            agg = LocalAggregator(block, dtype=torch.float64)
            out = conv(agg, x[block.src_ids], step=3, layer=1)
            torch.testing.assert_close(out, ref)
    assert not torch.allclose(conv(full_agg, x, step=4, layer=1)[dsts], ref)


def test_gradcheck_with_attention_dropout(graph, full_agg):
    conv = GATConv(3, 2, heads=2, attn_dropout=0.3).double().train()
    x = torch.randn(graph.num_nodes, 3, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda t: conv(full_agg, t, step=1), (x,))
