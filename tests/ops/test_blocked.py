"""Cache-sized column blocks of a reused adjacency, and the fixed scaled product GCN runs on."""

from types import SimpleNamespace

import pytest
import torch
from test_spmm import dense, random_adj
from torch.autograd import gradcheck

import fleetgnn.ops.adjacency as adjacency
from fleetgnn.errors import GraphError
from fleetgnn.nn import GCNConv, LocalAggregator
from fleetgnn.ops import ScaledSpMM, gspmm
from fleetgnn.ops.adjacency import structure


def reused_adj(num_dst, num_src, num_edges, seed=0):
    adj, _, _ = random_adj(num_dst, num_src, num_edges, seed=seed, empty=(0, 3))
    structure(adj).reused = True
    return adj


@pytest.fixture
def tiny_blocks(monkeypatch):
    """Blocks of two float64 rows: 40 source rows make 20 blocks, 30 destinations 15."""
    monkeypatch.setattr(adjacency, "BLOCK_BYTES", 2 * adjacency.BLOCK_WIDTH * 8)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_blocked_products_equal_dense_forward_and_backward(tiny_blocks, reduce, weighted):
    adj = reused_adj(30, 40, 200)
    st = structure(adj)
    x = torch.randn(40, 4, dtype=torch.float64, requires_grad=True)
    w = torch.rand(200, dtype=torch.float64, requires_grad=True) if weighted else None
    a = dense(adj, w)
    deg = torch.diff(adj.indptr).clamp(min=1)[:, None].double()
    out = gspmm(adj, x, reduce, w)
    blocks = st.column_blocks(False, 8)
    assert blocks is not None and len(blocks) == 20  # the product really ran in blocks
    ref = a @ x.detach() / (deg if reduce == "mean" else 1)
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(out)
    out.backward(g)
    assert len(st.column_blocks(True, 8)) == 15  # the transpose too (30 columns)
    gref = a.t() @ (g / (deg if reduce == "mean" else 1))
    torch.testing.assert_close(x.grad, gref)
    assert gradcheck(lambda x_, w_: gspmm(adj, x_, reduce, w_), (x, w))


def test_blocks_partition_every_edge_once(tiny_blocks):
    adj = reused_adj(30, 40, 200, seed=3)
    for transpose in (False, True):
        blocks = structure(adj).column_blocks(transpose, 8)
        assert sorted(blocks.sel.tolist()) == list(range(200))
        cols = 30 if transpose else 40
        assert blocks.bounds[0][0] == 0 and blocks.bounds[-1][1] == cols
        for (lo, hi), col in zip(blocks.bounds, blocks.cols, strict=True):
            assert col.dtype == torch.int32 and bool(((col >= 0) & (col < hi - lo)).all())


def test_not_reused_or_small_runs_one_product():
    adj, _, _ = random_adj(30, 40, 200)
    st = structure(adj)
    assert st.column_blocks(False, 8) is None  # a sampled block: never cut
    st.reused = True
    assert st.column_blocks(False, 8) is None  # 40 rows: one block
    per = adjacency.block_rows(8)
    big, _, _ = random_adj(10, 2 * per, 50)
    structure(big).reused = True
    blocks = structure(big).column_blocks(False, 8)
    assert blocks is not None and len(blocks) == 2


@pytest.mark.parametrize("blocked", [False, True])
def test_scaled_product_equals_dense_and_gradchecks(monkeypatch, blocked):
    if blocked:
        monkeypatch.setattr(adjacency, "BLOCK_BYTES", 2 * adjacency.BLOCK_WIDTH * 8)
    adj = reused_adj(30, 40, 200, seed=1)
    a_ = torch.rand(30, dtype=torch.float64) + 0.5
    b_ = torch.rand(40, dtype=torch.float64) + 0.5
    c_ = torch.rand(30, dtype=torch.float64)
    op = ScaledSpMM(adj, a_, b_, c_)
    x = torch.randn(40, 4, dtype=torch.float64, requires_grad=True)
    ref = a_[:, None] * (dense(adj) @ (b_[:, None] * x.detach())) + c_[:, None] * x.detach()[:30]
    torch.testing.assert_close(op(x), ref)
    assert gradcheck(op, (x,))
    assert (structure(adj)._blocks != {}) == blocked
    no_loop = ScaledSpMM(adj, a_, b_)
    torch.testing.assert_close(no_loop(x), ref - c_[:, None] * x.detach()[:30])


def test_scaled_product_rejects_bad_scales_and_inputs():
    adj = reused_adj(30, 40, 200)
    ones30, ones40 = torch.ones(30, dtype=torch.float64), torch.ones(40, dtype=torch.float64)
    with pytest.raises(GraphError, match="'src_scale' must be a constant tensor of shape"):
        ScaledSpMM(adj, ones30, ones30)
    with pytest.raises(GraphError, match="'dst_scale'"):
        ScaledSpMM(adj, ones30.clone().requires_grad_(), ones40)
    op = ScaledSpMM(adj, ones30, ones40)
    with pytest.raises(GraphError, match="40 rows"):
        op(torch.ones(30, 2, dtype=torch.float64))
    with pytest.raises(GraphError, match="torch.float64"):
        op(torch.ones(40, 2))


class _Plain:
    """The aggregator protocol without ``gcn_aggregate``: GCNConv's row-scaling path."""

    def __init__(self, agg):
        self._agg = agg
        self.num_src, self.num_dst, self.src_ids = agg.num_src, agg.num_dst, agg.src_ids

    def __getattr__(self, name):
        if name == "gcn_aggregate":
            raise AttributeError(name)
        return getattr(self._agg, name)


@pytest.mark.parametrize("widths", [(6, 3), (3, 6)])  # transform first / aggregate first
def test_gcn_fused_path_equals_row_scaling(tiny_blocks, widths):
    torch.manual_seed(0)
    adj, _, _ = random_adj(40, 40, 300, seed=2, empty=(5,))
    block = SimpleNamespace(
        indptr=adj.indptr,
        indices=adj.indices,
        num_dst=40,
        src_ids=torch.arange(40),
        src_degree=torch.rand(40, dtype=torch.float64) * 5,  # global degrees: not the block's
        reused=True,
    )
    agg = LocalAggregator(block, dtype=torch.float64)
    conv = GCNConv(*widths).double()
    x = torch.randn(40, widths[0], dtype=torch.float64, requires_grad=True)
    fused = conv(agg, x)
    fused.square().sum().backward()
    gx, gw = x.grad.clone(), conv.lin.weight.grad.clone()
    x.grad = conv.lin.weight.grad = None
    plain = conv(_Plain(agg), x)
    plain.square().sum().backward()
    torch.testing.assert_close(fused, plain)
    torch.testing.assert_close(gx, x.grad)
    torch.testing.assert_close(gw, conv.lin.weight.grad)
    assert agg._gcn  # the fused path ran
    block.reused = False  # a sampled block: rows scaled around aggregate(), nothing cached
    once = LocalAggregator(block, dtype=torch.float64)
    torch.testing.assert_close(conv(once, x), plain)
    assert not once._gcn
