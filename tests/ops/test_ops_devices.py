"""The ops on every device against CPU references that do not use them (scipy, naive loops, the
Python definition of the keyed hash): float64 within 1e-12, hashes and dropout masks bit-exact.

On ``cuda`` these show the device's kernels agree with the CPU's; on ``cpu`` they are the same
checks of the CPU path.
"""

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from fleetgnn.ops import (
    Adjacency,
    edge_softmax,
    gsddmm,
    gspmm,
    hash_uniform,
    hash_uniform_edges,
    keyed_dropout,
    keyed_edge_dropout,
)
from fleetgnn.ops.random import _SALT_EDGE, _SALT_NODE, _base_key, hash32, mix64

M64 = (1 << 64) - 1
TOL = {"rtol": 1e-12, "atol": 1e-12}


def _adj(num_dst, num_src, num_edges, device, seed=0, empty=(0,)):
    """A random multigraph on ``device`` and its edge list (CPU, CSC order)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_src, (num_edges,), generator=g)
    allowed = torch.tensor([v for v in range(num_dst) if v not in empty])
    dst = allowed[torch.randint(0, allowed.numel(), (num_edges,), generator=g)]
    order = torch.argsort(dst, stable=True)
    src, dst = src[order], dst[order]
    adj = Adjacency.from_edges(src.to(device), dst.to(device), num_src, num_dst)
    assert adj.indptr.device.type == torch.device(device).type
    return adj, src, dst


def _dense(src, dst, num_dst, num_src, w=None):
    """``A[dst, src]`` summed over repeated edges, float64 (scipy)."""
    vals = np.ones(src.numel()) if w is None else w.detach().cpu().numpy()
    m = sp.coo_matrix((vals, (dst.numpy(), src.numpy())), shape=(num_dst, num_src))
    return torch.from_numpy(m.toarray())


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_gspmm_sum_mean_weighted(device, reduce):
    adj, src, dst = _adj(9, 11, 40, device, empty=(0, 4))
    x = torch.randn(11, 5, dtype=torch.float64)
    w = torch.rand(40, dtype=torch.float64)
    xd = x.to(device).requires_grad_()
    wd = w.to(device).requires_grad_()
    out = gspmm(adj, xd, reduce, wd)
    assert out.device.type == torch.device(device).type
    a = _dense(src, dst, 9, 11, w)
    ref = a @ x
    deg = torch.bincount(dst, minlength=9).clamp(min=1)[:, None].double()
    if reduce == "mean":
        ref = ref / deg
    torch.testing.assert_close(out.cpu(), ref, **TOL)
    g = torch.randn(9, 5, dtype=torch.float64)
    out.backward(g.to(device))
    gx = a.T @ (g / deg if reduce == "mean" else g)
    torch.testing.assert_close(xd.grad.cpu(), gx, **TOL)
    gw = ((g / deg if reduce == "mean" else g)[dst] * x[src]).sum(1)  # d out[dst] / d w[e]
    torch.testing.assert_close(wd.grad.cpu(), gw, **TOL)


@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("transient", [False, True])
def test_products_with_more_edges_than_matrix_entries(device, heads, transient):
    """A small block of a multigraph: 9 edges in a 2 x 3 matrix (and 3 x 2 transposed).

    cuSPARSE refuses a CSR with more entries than the matrix has; the products sum the repeats
    there through a dense matrix (found on an H100: offload's chunks of a multigraph failed with
    an invalid-value CUDA error).
    """
    from fleetgnn.ops import gspmm_heads, structure

    adj, src, dst = _adj(2, 3, 9, device, seed=3, empty=())
    structure(adj).transient = transient
    x = torch.randn(3, heads, 4, dtype=torch.float64)
    w = torch.rand(9, heads, dtype=torch.float64)
    xd, wd = x.to(device).requires_grad_(), w.to(device).requires_grad_()
    out = gspmm(adj, xd, "sum", wd)
    g = torch.randn(2, heads, 4, dtype=torch.float64)
    out.backward(g.to(device))
    for k in range(heads):
        a = _dense(src, dst, 2, 3, w[:, k])
        torch.testing.assert_close(out[:, k].detach().cpu(), a @ x[:, k], **TOL)
        torch.testing.assert_close(xd.grad[:, k].cpu(), a.T @ g[:, k], **TOL)
        torch.testing.assert_close(wd.grad[:, k].cpu(), (g[dst, k] * x[src, k]).sum(1), **TOL)
    x2 = torch.randn(3, 4, dtype=torch.float64)
    out = gspmm_heads(adj, x2.to(device), w.to(device)).cpu()  # one set of rows per head
    for k in range(heads):
        torch.testing.assert_close(out[:, k], _dense(src, dst, 2, 3, w[:, k]) @ x2, **TOL)


def test_an_overfull_csr_becomes_its_dense_sum():
    from fleetgnn.kernels import dense as dense_of
    from fleetgnn.kernels import overfull as _overfull

    crow, col = torch.tensor([0, 4, 5]), torch.tensor([0, 0, 1, 0, 1])
    mat = torch.sparse_csr_tensor(crow, col, torch.arange(1.0, 6.0), (2, 2))
    assert _overfull(mat) and not _overfull(torch.eye(3).to_sparse_csr())
    assert dense_of(mat).tolist() == [[1.0 + 2.0 + 4.0, 3.0], [0.0, 5.0]]


def test_gspmm_per_head_weights(device):
    adj, src, dst = _adj(6, 8, 25, device)
    x = torch.randn(8, 3, 4, dtype=torch.float64)
    w = torch.rand(25, 3, dtype=torch.float64)
    out = gspmm(adj, x.to(device), "sum", w.to(device)).cpu()
    for h in range(3):
        torch.testing.assert_close(out[:, h], _dense(src, dst, 6, 8, w[:, h]) @ x[:, h], **TOL)


@pytest.mark.parametrize("transient", [False, True])
def test_gspmm_heads_shared_rows_and_gradients(device, transient):
    """One set of rows weighted per head, forward and both gradients; the gradient arriving in
    the [K, M, R] layout a per-head product leaves (read without a copy) included."""
    from fleetgnn.ops import gspmm_heads, structure

    adj, src, dst = _adj(7, 9, 30, device, empty=(3,))
    structure(adj).transient = transient
    x = torch.randn(9, 5, dtype=torch.float64)
    w = torch.rand(30, 3, dtype=torch.float64)
    g = torch.randn(3, 7, 5, dtype=torch.float64)
    for layout in ("destination-major", "head-major"):
        xd = x.to(device).clone().requires_grad_()  # a fresh leaf per layout
        wd = w.to(device).clone().requires_grad_()
        out = gspmm_heads(adj, xd, wd)
        grad = g.to(device).transpose(0, 1)  # [M, K, R] whose transpose is contiguous
        out.backward(grad if layout == "head-major" else grad.contiguous())
        for k in range(3):
            a = _dense(src, dst, 7, 9, w[:, k])
            torch.testing.assert_close(out[:, k].detach().cpu(), a @ x, **TOL)
        gx = sum(_dense(src, dst, 7, 9, w[:, k]).T @ g[k] for k in range(3))
        torch.testing.assert_close(xd.grad.cpu(), gx, **TOL)
        gw = torch.stack([(g[k][dst] * x[src]).sum(1) for k in range(3)], 1)
        torch.testing.assert_close(wd.grad.cpu(), gw, **TOL)


def test_gspmm_max(device):
    adj, src, dst = _adj(7, 8, 30, device, empty=(2,))
    x = -torch.rand(8, 6, dtype=torch.float64) - 1.0  # all negative: an empty row must be 0
    out = gspmm(adj, x.to(device), "max").cpu()
    ref = torch.zeros(7, 6, dtype=torch.float64)
    for v in range(7):
        rows = src[dst == v]
        if rows.numel():
            ref[v] = x[rows].max(0).values
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


def test_gsddmm_and_edge_softmax(device):
    adj, src, dst = _adj(6, 7, 30, device)
    a = torch.randn(7, 2, 3, dtype=torch.float64)
    b = torch.randn(6, 2, 3, dtype=torch.float64)
    dot = gsddmm(adj, a.to(device), b.to(device), "dot").cpu()
    torch.testing.assert_close(dot, (a[src] * b[dst]).sum(-1), **TOL)
    s = torch.randn(30, 2, dtype=torch.float64)
    sd = s.to(device).requires_grad_()
    out = edge_softmax(adj, sd)
    ref = torch.empty_like(s)
    for v in range(6):
        sel = dst == v
        if sel.any():
            ref[sel] = torch.softmax(s[sel], dim=0)
    torch.testing.assert_close(out.detach().cpu(), ref, **TOL)
    g = torch.randn(30, 2, dtype=torch.float64)
    out.backward(g.to(device))
    # softmax's Jacobian per destination: p * (g - sum(p * g))
    gref = torch.empty_like(s)
    for v in range(6):
        sel = dst == v
        if sel.any():
            p = ref[sel]
            gref[sel] = p * (g[sel] - (p * g[sel]).sum(0))
    torch.testing.assert_close(sd.grad.cpu(), gref, **TOL)


def test_keyed_hash_and_dropout_are_bit_exact(device):
    ids = torch.tensor([5, 0, 2**40 + 3, -7, 2**62 + 11, 17])
    u = hash_uniform(7, 3, 1, ids.to(device), 9, dtype=torch.float64)
    assert u.device.type == torch.device(device).type
    base = _base_key(_SALT_NODE, 7, 3, 1)
    for i, node in enumerate(ids.tolist()):
        r = mix64(base ^ (node & M64))
        want = [((hash32(r, c) >> 8) ^ (1 << 23)) * 2.0**-24 for c in range(9)]
        assert u[i].tolist() == want
    src, dst = torch.tensor([1, 2**35, 0]), torch.tensor([4, 4, 2**50])
    ue = hash_uniform_edges(3, 9, 2, src.to(device), dst.to(device), 3)
    base = _base_key(_SALT_EDGE, 3, 9, 2)
    for e, (s_, d_) in enumerate(zip(src.tolist(), dst.tolist(), strict=True)):
        r = mix64(mix64(base ^ s_) ^ d_)
        assert ue[e].tolist() == [((hash32(r, h) >> 8) ^ (1 << 23)) * 2.0**-24 for h in range(3)]
    # masks: identical to the CPU's hash, scaled by 1 / (1 - p)
    many = torch.randperm(5000, generator=torch.Generator().manual_seed(1))[:2000]
    x = torch.ones(2000, 7, dtype=torch.float64)
    out = keyed_dropout(x.to(device), 0.4, 4, 5, 6, many.to(device)).cpu()
    keep = hash_uniform(4, 5, 6, many, 7, dtype=torch.float64) >= 0.4
    assert torch.equal(out != 0, keep) and torch.all(out[keep] == 1 / 0.6)
    oute = keyed_edge_dropout(x[:, :3].to(device), 0.4, 4, 5, 6, many.to(device), many.to(device))
    keep_e = hash_uniform_edges(4, 5, 6, many, many, 3) >= 0.4
    assert torch.equal(oute.cpu() != 0, keep_e)
