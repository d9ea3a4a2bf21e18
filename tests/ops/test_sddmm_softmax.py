import pytest
import torch
from torch.autograd import gradcheck

from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.ops import Adjacency, dst_to_edge, edge_reduce, edge_softmax, gsddmm, src_to_edge


def random_adj(num_dst, num_src, num_edges, seed=0, empty=(0,)):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_src, (num_edges,), generator=g)
    allowed = torch.tensor([v for v in range(num_dst) if v not in empty])
    dst = allowed[torch.randint(0, allowed.numel(), (num_edges,), generator=g)]
    adj = Adjacency.from_edges(src, dst, num_src, num_dst)
    order = torch.argsort(dst, stable=True)
    return adj, src[order], dst[order]  # edge list in CSC order


def test_from_edges_orders_by_destination():
    adj, src, dst = random_adj(5, 6, 20)
    for v in range(5):
        lo, hi = int(adj.indptr[v]), int(adj.indptr[v + 1])
        assert torch.all(dst[lo:hi] == v)
    torch.testing.assert_close(adj.indices, src)


@pytest.mark.parametrize("shape", [(4,), (3, 4)])
def test_dot_add_mul_match_naive(shape):
    adj, src, dst = random_adj(6, 7, 25)
    a = torch.randn(7, *shape, dtype=torch.float64)
    b = torch.randn(6, *shape, dtype=torch.float64)
    torch.testing.assert_close(gsddmm(adj, a, b, "dot"), (a[src] * b[dst]).sum(-1))
    torch.testing.assert_close(gsddmm(adj, a, b, "add"), a[src] + b[dst])
    torch.testing.assert_close(gsddmm(adj, a, b, "mul"), a[src] * b[dst])
    torch.testing.assert_close(src_to_edge(adj, a), a[src])
    torch.testing.assert_close(dst_to_edge(adj, b), b[dst])


@pytest.mark.parametrize("op", ["dot", "add", "mul"])
def test_gsddmm_gradcheck(op):
    adj, _, _ = random_adj(5, 6, 15, seed=1)
    a = torch.randn(6, 2, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda x, y: gsddmm(adj, x, y, op), (a, b))


def dense_softmax(scores, dst, num_dst):
    out = torch.empty_like(scores)
    for v in range(num_dst):
        sel = dst == v
        if sel.any():
            out[sel] = torch.softmax(scores[sel], dim=0)
    return out


@pytest.mark.parametrize("shape", [(), (3,)])
def test_edge_softmax_matches_naive_and_sums_to_one(shape):
    adj, _, dst = random_adj(6, 7, 30, empty=(0, 4))
    s = torch.randn(30, *shape, dtype=torch.float64) * 5
    out = edge_softmax(adj, s)
    torch.testing.assert_close(out, dense_softmax(s, dst, 6))
    sums = torch.zeros(6, *shape, dtype=torch.float64).index_add_(0, dst, out)
    has = torch.bincount(dst, minlength=6) > 0
    torch.testing.assert_close(sums[has], torch.ones_like(sums[has]))


def test_edge_softmax_is_stable_for_large_scores():
    adj, _, dst = random_adj(4, 5, 12)
    s = (torch.randn(12, dtype=torch.float64) * 3 + 1e4).float()  # exp(s) overflows float32
    out = edge_softmax(adj, s)
    assert torch.isfinite(out).all()
    ref = dense_softmax(s.double() - 1e4, dst, 4)
    torch.testing.assert_close(out.double(), ref, atol=1e-6, rtol=1e-5)


def test_edge_softmax_gradcheck():
    adj, _, _ = random_adj(5, 6, 16, seed=4, empty=(2,))
    s = torch.randn(16, 2, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda t: edge_softmax(adj, t), (s,))


def test_no_edges():
    adj = Adjacency(torch.zeros(3, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), 4)
    s = torch.zeros(0, 2, dtype=torch.float64, requires_grad=True)
    assert edge_softmax(adj, s).shape == (0, 2)
    a = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, 3, dtype=torch.float64)
    out = gsddmm(adj, a, b, "dot")
    assert out.shape == (0,)
    out.sum().backward()
    assert torch.all(a.grad == 0)


def test_bad_inputs():
    adj, _, _ = random_adj(4, 5, 10)
    with pytest.raises(GraphError, match="one row per edge"):
        edge_softmax(adj, torch.randn(9))
    with pytest.raises(GraphError, match="destination"):
        gsddmm(adj, torch.randn(5, 2), torch.randn(5, 2))
    with pytest.raises(GraphError, match="op"):
        gsddmm(adj, torch.randn(5, 2), torch.randn(4, 2), "sub")  # type: ignore[arg-type]


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_edge_reduce_equals_a_loop_and_gradchecks(reduce):
    indptr = torch.tensor([0, 3, 3, 5, 6])  # destination 1 has no in-edges
    adj = Adjacency(indptr, torch.tensor([0, 2, 4, 1, 1, 3]), 5)
    m = torch.randn(6, 2, 3, dtype=torch.float64, requires_grad=True)
    out = edge_reduce(adj, m, reduce)
    for v in range(4):
        seg = m[indptr[v] : indptr[v + 1]].detach()
        want = torch.zeros(2, 3, dtype=torch.float64)
        if seg.numel():
            want = {"sum": seg.sum(0), "mean": seg.mean(0), "max": seg.amax(0)}[reduce]
        torch.testing.assert_close(out[v].detach(), want)
    assert gradcheck(lambda t: edge_reduce(adj, t, reduce), (m,))
    with pytest.raises(GraphError, match="messages"):
        edge_reduce(adj, m[:5], reduce)
    with pytest.raises(ConfigError, match="'reduce' must be one of"):
        edge_reduce(adj, m, "min")
