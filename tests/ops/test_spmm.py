import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch.autograd import gradcheck

from fleetgnn.errors import GraphError
from fleetgnn.ops import Adjacency, gspmm, gspmm_heads, gspmm_vjp
from fleetgnn.ops.adjacency import Structure, structure
from fleetgnn.ops.spmm import _chunks


def random_adj(num_dst, num_src, num_edges, seed=0, empty=(0,)):
    """Random multigraph; destinations listed in `empty` get no in-edges."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_src, (num_edges,), generator=g)
    allowed = torch.tensor([v for v in range(num_dst) if v not in empty])
    dst = allowed[torch.randint(0, allowed.numel(), (num_edges,), generator=g)]
    return Adjacency.from_edges(src, dst, num_src, num_dst), src, dst


def dense(adj, w=None):
    """Dense [M, S] matrix from the CSC arrays (scipy, independent of the ops)."""
    st = structure(adj)
    vals = np.ones(st.num_edges) if w is None else w.detach().numpy()
    m = sp.csr_matrix(
        (vals, adj.indices.numpy(), adj.indptr.numpy()), shape=(adj.num_dst, adj.num_src)
    )
    return torch.from_numpy(m.toarray())


def naive_max(adj, x, w=None):
    out = torch.zeros((adj.num_dst, *x.shape[1:]), dtype=x.dtype)
    for v in range(adj.num_dst):
        lo, hi = int(adj.indptr[v]), int(adj.indptr[v + 1])
        if hi == lo:
            continue
        msgs = []
        for e in range(lo, hi):
            m = x[adj.indices[e]]
            if w is not None:
                we = w[e]
                m = m * (we.view(*we.shape, *([1] * (m.dim() - we.dim()))))
            msgs.append(m)
        out[v] = torch.stack(msgs).max(0).values
    return out


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_sum_mean_match_scipy(reduce):
    adj, _, _ = random_adj(7, 9, 30, empty=(0, 5))
    x = torch.randn(9, 4, dtype=torch.float64)
    w = torch.rand(30, dtype=torch.float64)
    a = dense(adj, w)
    ref = a @ x
    if reduce == "mean":
        ref = ref / torch.diff(adj.indptr).clamp(min=1)[:, None].double()
    out = gspmm(adj, x, reduce, w)
    torch.testing.assert_close(out, ref)
    assert torch.all(out[0] == 0) and torch.all(out[5] == 0)
    torch.testing.assert_close(gspmm(adj, x, "sum"), dense(adj) @ x)


def test_multihead_weights_match_dense():
    adj, _, _ = random_adj(6, 8, 25)
    x = torch.randn(8, 3, 5, dtype=torch.float64)
    w = torch.rand(25, 3, dtype=torch.float64)
    out = gspmm(adj, x, "sum", w)
    for h in range(3):
        torch.testing.assert_close(out[:, h], dense(adj, w[:, h]) @ x[:, h])


def test_max_matches_naive_and_empty_is_zero():
    adj, _, _ = random_adj(6, 8, 25, empty=(2,))
    x = -torch.rand(8, 3, 4, dtype=torch.float64) - 1.0  # all negative: empty rows must still be 0
    w = torch.rand(25, 3, dtype=torch.float64) + 0.5
    torch.testing.assert_close(gspmm(adj, x, "max", w), naive_max(adj, x, w))
    torch.testing.assert_close(gspmm(adj, x.view(8, 12), "max"), naive_max(adj, x.view(8, 12)))
    assert torch.all(gspmm(adj, x, "max")[2] == 0)


def test_max_chunked_matches_unchunked(monkeypatch):
    adj, _, _ = random_adj(40, 30, 400, seed=3)
    x = torch.randn(30, 8, dtype=torch.float64)
    ref = gspmm(adj, x, "max")
    import fleetgnn.ops.spmm as spmm

    monkeypatch.setattr(spmm, "_CHUNK_ELEMENTS", 64)
    adj2 = Adjacency(adj.indptr, adj.indices, adj.num_src)
    assert len(_chunks(structure(adj2), 8)) > 10
    torch.testing.assert_close(gspmm(adj2, x, "max"), ref)
    x.requires_grad_(True)
    gspmm(adj2, x, "max").sum().backward()
    g2 = x.grad.clone()
    x.grad = None
    gspmm(adj, x, "max").sum().backward()
    torch.testing.assert_close(g2, x.grad)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
@pytest.mark.parametrize("heads", [None, 2])
def test_gradcheck_x_and_weights(reduce, heads):
    adj, _, _ = random_adj(5, 6, 14, seed=1, empty=(3,))
    shape = (6, 3) if heads is None else (6, heads, 3)
    # distinct values (no ties) so max is differentiable
    x = (
        torch.randperm(int(np.prod(shape)), dtype=torch.float64).view(shape) / 7.0
    ).requires_grad_()
    w = torch.rand(14 if heads is None else (14, heads), dtype=torch.float64) + 0.5
    w.requires_grad_()
    assert gradcheck(lambda a, b: gspmm(adj, a, reduce, b), (x, w))
    assert gradcheck(lambda a: gspmm(adj, a, reduce), (x,))


@pytest.mark.parametrize("heads", [None, 2])
def test_weight_gradient_with_more_edges_than_matrix_entries(heads):
    # one destination, 3 sources, 5 edges (repeats): more edges than the 1 x 3 matrix has entries
    adj = Adjacency(torch.tensor([0, 5]), torch.tensor([0, 1, 1, 2, 0]), 3)
    shape = (3, 4) if heads is None else (3, heads, 4)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    w = torch.rand(5 if heads is None else (5, heads), dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda a, b: gspmm(adj, a, "sum", b), (x, w))


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("heads", [None, 1, 3])
def test_vjp_equals_autograd_input_gradient(reduce, heads):
    adj, _, _ = random_adj(6, 9, 25, seed=4, empty=(2,))
    shape = (9, 5) if heads is None else (9, heads, 5)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    w = None if heads is None else torch.rand(25, heads, dtype=torch.float64)
    g = torch.randn((6, *shape[1:]), dtype=torch.float64)
    (gspmm(adj, x, reduce, w) * g).sum().backward()
    torch.testing.assert_close(gspmm_vjp(adj, g, reduce, w), x.grad)
    with pytest.raises(GraphError, match="linear"):
        gspmm_vjp(adj, g, "max")


def test_max_gradient_goes_to_one_winner_on_ties():
    # destination 0 <- sources 0, 1, 2 (all equal); gradient must go to exactly one (the first)
    adj = Adjacency(torch.tensor([0, 3]), torch.tensor([0, 1, 2]), 3)
    x = torch.ones(3, 2, dtype=torch.float64, requires_grad=True)
    gspmm(adj, x, "max").sum().backward()
    torch.testing.assert_close(x.grad, torch.tensor([[1.0, 1.0], [0, 0], [0, 0]]).double())


def test_sum_gradients_equal_dense_autograd():
    adj, _, _ = random_adj(6, 7, 20, seed=2)
    x = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    w = torch.rand(20, dtype=torch.float64, requires_grad=True)
    g = torch.randn(6, 4, dtype=torch.float64)
    (gspmm(adj, x, "sum", w) * g).sum().backward()
    # dense reference: out = A(w) X, dL/dw_e = <g[dst_e], x[src_e]>
    st = structure(adj)
    ref_w = (g[st.dst_index()] * x.detach()[adj.indices]).sum(1)
    torch.testing.assert_close(w.grad, ref_w)
    torch.testing.assert_close(x.grad, dense(adj, w).T @ g)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_no_edges(reduce):
    adj = Adjacency(torch.zeros(4, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), 5)
    x = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
    w = torch.rand(0, dtype=torch.float64, requires_grad=True)
    out = gspmm(adj, x, reduce, w)
    assert out.shape == (3, 2) and torch.all(out == 0)
    out.sum().backward()
    assert torch.all(x.grad == 0) and w.grad.shape == (0,)


def test_caches_destination_index_on_the_adjacency():
    adj, _, dst = random_adj(5, 5, 12)
    st = structure(adj)
    assert structure(adj) is st
    torch.testing.assert_close(st.dst_index(), dst.sort().values)


def test_bad_inputs_raise_graph_error():
    adj, _, _ = random_adj(4, 5, 10)
    with pytest.raises(GraphError, match="one row per source"):
        gspmm(adj, torch.randn(4, 2))
    with pytest.raises(GraphError, match="one row per edge"):
        gspmm(adj, torch.randn(5, 2), edge_weight=torch.rand(9))
    with pytest.raises(GraphError, match="broadcast"):
        gspmm(adj, torch.randn(5, 2, 3), edge_weight=torch.rand(10, 3))
    with pytest.raises(GraphError, match="reduce"):
        gspmm(adj, torch.randn(5, 2), "min")  # type: ignore[arg-type]
    with pytest.raises(GraphError, match="outside"):
        Adjacency(torch.tensor([0, 2]), torch.tensor([0, 7]), 5)


@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("shape", [(7, 9, 30), (9, 4, 25)])  # more sources / more destinations
def test_shared_rows_per_head_match_dense_and_gradcheck(heads, shape):
    """gspmm_heads: every head aggregates the same rows with its own weights (out [K, M, R])."""
    num_dst, num_src, num_edges = shape
    adj, _, _ = random_adj(num_dst, num_src, num_edges, seed=3, empty=(0,))
    x = torch.randn(num_src, 5, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(num_edges, heads, dtype=torch.float64) + 0.5).requires_grad_()
    out = gspmm_heads(adj, x, w)
    assert out.shape == (num_dst, heads, 5)
    for k in range(heads):
        torch.testing.assert_close(out[:, k], dense(adj, w[:, k]) @ x)
        # equal to the per-head form with the rows copied per head
        x3 = x.detach()[:, None].expand(-1, heads, -1).contiguous()
        torch.testing.assert_close(out[:, k], gspmm(adj, x3, "sum", w.detach())[:, k])
    assert torch.all(out[0] == 0)
    assert gradcheck(lambda a, b: gspmm_heads(adj, a, b), (x, w))
    # a gradient laid out [K, M, R] (a batched product per head after it) is read in place
    proj = torch.randn(heads, 5, 2, dtype=torch.float64)
    seen = []
    layout = Structure.shared_layout

    def spy(self, k, transpose, head_major=False):
        seen.append(head_major)
        return layout(self, k, transpose, head_major)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Structure, "shared_layout", spy)
        assert gradcheck(
            lambda a, b: torch.bmm(gspmm_heads(adj, a, b).transpose(0, 1), proj), (x, w)
        )
    assert heads == 1 or True in seen


def test_shared_rows_with_repeated_edges_and_no_edges():
    adj = Adjacency(torch.tensor([0, 5]), torch.tensor([0, 1, 1, 2, 0]), 3)  # 5 edges, 1 x 3
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    w = torch.rand(5, 2, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda a, b: gspmm_heads(adj, a, b), (x, w))
    empty = Adjacency(torch.zeros(4, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), 2)
    x = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    w = torch.zeros(0, 2, dtype=torch.float64, requires_grad=True)
    out = gspmm_heads(empty, x, w)
    assert out.shape == (3, 2, 4) and torch.all(out == 0)
    out.sum().backward()
    assert torch.all(x.grad == 0) and w.grad.shape == (0, 2)
    with pytest.raises(GraphError, match=r"'edge_weight' must be \[num_edges, heads\]"):
        gspmm_heads(adj, torch.randn(3, 4), torch.rand(5))
    with pytest.raises(GraphError, match=r"'x' must be \[num_src, R\]"):
        gspmm_heads(adj, torch.randn(3, 2, 4), torch.rand(5, 2))
