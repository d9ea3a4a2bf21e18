import math

import pytest
import torch

from fleetgnn import kernels
from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.ops import hash_uniform, hash_uniform_edges, keyed_dropout, keyed_edge_dropout
from fleetgnn.ops.random import (
    _SALT_EDGE,
    _SALT_NODE,
    _base_key,
    hash32,
    mix64,
    mix64_tensor,
)

M64 = (1 << 64) - 1


def _draws(seed, step, layer, ids, width):
    """The 24-bit integer draws (exact: hash_uniform is draw / 2^24)."""
    return (hash_uniform(seed, step, layer, ids, width, dtype=torch.float64) * 2**24).long()


def _ref_draw(row_key: int, column: int) -> int:
    return (hash32(row_key, column) >> 8) ^ (1 << 23)


# ---------------------------------------------------------------------------- exact definition
def test_tensor_mixer_equals_python_reference():
    vals = [0, 1, -1, 2**63 - 1, -(2**63), 123456789012345, -987654321]
    vals += torch.randint(
        -(2**62), 2**62, (200,), generator=torch.Generator().manual_seed(0)
    ).tolist()
    got = mix64_tensor(torch.tensor(vals, dtype=torch.int64)).tolist()
    assert [g & M64 for g in got] == [mix64(v & M64) for v in vals]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_hash_uniform_equals_python_reference(dtype):
    ids = torch.tensor([5, 0, 2**40 + 3, -7, 2**62 + 11])
    u = hash_uniform(7, 3, 1, ids, 9, dtype=dtype)
    assert u.dtype == dtype
    base = _base_key(_SALT_NODE, 7, 3, 1)
    for i, node in enumerate(ids.tolist()):
        r = mix64(base ^ (node & M64))
        for c in range(9):
            assert u[i, c].item() == _ref_draw(r, c) * 2.0**-24


def test_edge_hash_equals_python_reference():
    src, dst = torch.tensor([1, 2**35, 0]), torch.tensor([4, 4, 2**50])
    u = hash_uniform_edges(3, 9, 2, src, dst, 3)
    base = _base_key(_SALT_EDGE, 3, 9, 2)
    for e, (s, d) in enumerate(zip(src.tolist(), dst.tolist())):
        r = mix64(mix64(base ^ s) ^ d)
        assert u[e].tolist() == [_ref_draw(r, h) * 2.0**-24 for h in range(3)]


def test_element_hash_matches_documented_formula():
    # h = ((a ^ c_f) * m) -> y ^ (y >> 15) -> y * 0x846CA68B, all mod 2^32
    r = 0x0123456789ABCDEF
    a, m = r & 0xFFFFFFFF, (r >> 32) | 1
    y = ((a ^ ((5 * 0x9E3779B9) & 0xFFFFFFFF)) * m) & 0xFFFFFFFF
    y ^= y >> 15
    assert hash32(r, 5) == (y * 0x846CA68B) & 0xFFFFFFFF


@pytest.mark.parametrize("p", [0.1, 0.5, 0.6, 0.9, 1e-7, 0.999999])
def test_dropout_mask_is_hash_uniform_at_least_p(p):
    ids = torch.randperm(5000)[:3000]
    x = torch.ones(3000, 7)
    keep = keyed_dropout(x, p, 4, 5, 6, ids) != 0
    assert torch.equal(keep, hash_uniform(4, 5, 6, ids, 7) >= p)
    src, dst = ids, torch.flip(ids, [0])
    keep_e = keyed_edge_dropout(x[:, :3], p, 4, 5, 6, src, dst) != 0
    assert torch.equal(keep_e, hash_uniform_edges(4, 5, 6, src, dst, 3) >= p)


def test_p_rounding_to_one_in_float32_drops_everything():
    x = torch.ones(50, 4)
    assert torch.all(keyed_dropout(x, 1.0 - 1e-9, 0, 0, 0, torch.arange(50)) == 0)


# ----------------------------------------------------------------- pure function of the keys
def test_dropout_mask_follows_rows_under_permutation_and_batching():
    x = torch.randn(50, 12, dtype=torch.float64)
    ids = torch.randperm(1000)[:50]
    full = keyed_dropout(x, 0.5, 9, 4, 2, ids)
    perm = torch.randperm(50)
    torch.testing.assert_close(keyed_dropout(x[perm], 0.5, 9, 4, 2, ids[perm]), full[perm])
    parts = [keyed_dropout(x[i : i + 7], 0.5, 9, 4, 2, ids[i : i + 7]) for i in range(0, 50, 7)]
    torch.testing.assert_close(torch.cat(parts), full)
    kept = full != 0
    assert 0.35 < kept.double().mean() < 0.65
    torch.testing.assert_close(full[kept], x[kept] * 2)


def test_mask_of_a_subset_is_the_slice_of_the_full_mask():
    ids = torch.randperm(100_000)[:600]
    full = hash_uniform(2, 7, 1, ids, 300)
    rows = torch.tensor([599, 3, 3, 250, 0, 17])  # any subset, order, duplicates
    torch.testing.assert_close(hash_uniform(2, 7, 1, ids[rows], 300), full[rows], rtol=0, atol=0)
    for width in (1, 17, 128, 299):  # a column depends on its index only, not on the width
        torch.testing.assert_close(
            hash_uniform(2, 7, 1, ids, width), full[:, :width], rtol=0, atol=0
        )
    x = torch.ones(600, 300)
    keep = keyed_dropout(x, 0.3, 2, 7, 1, ids) != 0
    assert torch.equal(keyed_dropout(x[rows, :40], 0.3, 2, 7, 1, ids[rows]) != 0, keep[rows, :40])


def test_mask_does_not_depend_on_chunking_dtype_or_feature_shape(monkeypatch):
    ids = torch.randperm(9000)[:700]
    x = torch.randn(700, 6, 5)
    ref = keyed_dropout(x, 0.4, 1, 2, 3, ids) != 0
    flat = keyed_dropout(x.reshape(700, 30), 0.4, 1, 2, 3, ids) != 0
    assert torch.equal(ref.reshape(700, 30), flat)
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        assert torch.equal(keyed_dropout(x.to(dtype), 0.4, 1, 2, 3, ids) != 0, ref)
    monkeypatch.setattr(kernels, "_CHUNK_CPU", 64)  # two rows per chunk, ragged last chunk
    assert torch.equal(keyed_dropout(x, 0.4, 1, 2, 3, ids) != 0, ref)
    xr = x.clone().requires_grad_()
    assert torch.equal(keyed_dropout(xr, 0.4, 1, 2, 3, ids) != 0, ref)
    strided = x[:, :, 0].t().contiguous().t()  # a non-contiguous [700, 6] view
    assert torch.equal(keyed_dropout(strided, 0.4, 1, 2, 3, ids), keyed_dropout(
        strided.contiguous(), 0.4, 1, 2, 3, ids))  # fmt: skip


def test_keys_change_the_draw():
    ids = torch.arange(100)
    base = hash_uniform(1, 2, 3, ids, 8)
    for kw in ({"seed": 2}, {"step": 3}, {"layer": 4}):
        args = {"seed": 1, "step": 2, "layer": 3, **kw}
        other = hash_uniform(args["seed"], args["step"], args["layer"], ids, 8)
        assert (other == base).float().mean() < 0.01
    assert torch.equal(hash_uniform(1, 2, 3, ids, 8), base)


# ------------------------------------------------------------------------ statistical quality
def test_range_and_uniformity():
    u = hash_uniform(0, 0, 0, torch.arange(20000), 16)
    assert u.dtype == torch.float32 and u.min() >= 0 and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.005
    hist = torch.histc(u, bins=10, min=0, max=1) / u.numel()
    assert torch.all((hist - 0.1).abs() < 0.005)


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_keep_rate_is_one_minus_p_overall_per_row_and_per_column(p):
    n, w = 4000, 500
    keep = (keyed_dropout(torch.ones(n, w), p, 11, 3, 1, torch.arange(n)) != 0).double()
    sigma = math.sqrt(p * (1 - p) / keep.numel())
    assert abs(keep.mean().item() - (1 - p)) < 4 * sigma
    # dispersion of the per-row and per-column rates is binomial: no row or column is biased
    for rates, count in ((keep.mean(1), w), (keep.mean(0), n)):
        ratio = rates.var().item() / (p * (1 - p) / count)
        assert 0.85 < ratio < 1.15, ratio


def test_each_of_the_24_bits_is_a_fair_coin():
    v = _draws(5, 0, 0, torch.arange(4096), 256).flatten()  # 1M draws
    ones = torch.stack([((v >> b) & 1).sum() for b in range(24)]).double()
    z = (ones - v.numel() / 2) / math.sqrt(v.numel() / 4)
    assert z.abs().max() < 5
    assert (z**2).sum() < 24 + 6 * math.sqrt(48)  # chi-square, 24 dof


def _pair_chi2(a: torch.Tensor, b: torch.Tensor, bits: int = 4) -> float:
    """Chi-square of the joint histogram of the top ``bits`` of two equal-size draw tensors."""
    k = 1 << bits
    cell = (a.flatten() >> (24 - bits)) * k + (b.flatten() >> (24 - bits))
    counts = torch.bincount(cell, minlength=k * k).double()
    expected = a.numel() / (k * k)
    return ((counts - expected) ** 2 / expected).sum().item()


def test_neighbouring_rows_columns_steps_layers_and_seeds_are_independent():
    dof = 255  # 16 x 16 cells
    bound = dof + 6 * math.sqrt(2 * dof)
    ids = torch.arange(2048)
    v = _draws(1, 10, 2, ids, 256)
    assert _pair_chi2(v[:, :-1], v[:, 1:]) < bound  # adjacent columns
    assert _pair_chi2(v[:-1], v[1:]) < bound  # adjacent ids
    for other in (
        _draws(1, 11, 2, ids, 256),  # next step
        _draws(1, 10, 3, ids, 256),  # next layer
        _draws(2, 10, 2, ids, 256),  # next seed
        _draws(1, 10, 2, ids + 2**32, 256),  # ids equal in their low 32 bits
    ):
        assert _pair_chi2(v, other) < bound


def test_node_and_edge_draws_are_independent():
    ids = torch.arange(4096)
    v = _draws(0, 0, 0, ids, 64)
    e = (hash_uniform_edges(0, 0, 0, ids, ids, 64, dtype=torch.float64) * 2**24).long()
    assert _pair_chi2(v, e) < 255 + 6 * math.sqrt(510)


@pytest.mark.parametrize("p", [0.5, 0.2])
def test_masks_of_all_pairs_of_rows_and_of_columns_are_uncorrelated(p):
    # 512 consecutive ids x 2048 columns: every pairwise correlation is ~ N(0, 1/n)
    keep = (hash_uniform(3, 1, 0, torch.arange(512), 2048, dtype=torch.float64) >= p).double()
    for m in (keep, keep.t()[:512]):
        c = m - m.mean(1, keepdim=True)
        c = c / c.norm(dim=1, keepdim=True)
        n = m.shape[1]
        z = (c @ c.t())[torch.triu(torch.ones(512, 512, dtype=torch.bool), 1)] * math.sqrt(n)
        assert 0.95 < z.var().item() < 1.05
        assert z.abs().max() < 6.0
    # the mask correlation of adjacent ids, columns and steps over a large block
    big = (hash_uniform(3, 1, 0, torch.arange(4000), 1000, dtype=torch.float64) >= p).double()
    nxt = (hash_uniform(3, 2, 0, torch.arange(4000), 1000, dtype=torch.float64) >= p).double()
    for a, b in ((big[:-1], big[1:]), (big[:, :-1], big[:, 1:]), (big, nxt)):
        r = torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1].item()
        assert abs(r) < 5 / math.sqrt(a.numel())


# --------------------------------------------------------------------------------- autograd
def test_backward_is_exact_and_saves_no_float_mask():
    ids = torch.randperm(100)[:20]
    x = torch.randn(20, 6, dtype=torch.float64, requires_grad=True)

    def fn(t):
        return keyed_dropout(t, 0.4, 1, 2, 3, ids)

    assert torch.autograd.gradcheck(fn, (x,))
    assert torch.autograd.gradgradcheck(fn, (x,))
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = fn(x)
    assert saved and all(t.dtype == torch.uint8 for t in saved)
    g = torch.randn_like(y)
    y.backward(g)
    keep = (y != 0).double()
    torch.testing.assert_close(x.grad, g * keep / 0.6)


def test_edge_dropout_backward_and_no_grad_path():
    src, dst = torch.randint(0, 50, (40,)), torch.randint(0, 50, (40,))
    w = torch.rand(40, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: keyed_edge_dropout(t, 0.3, 0, 1, 2, src, dst), (w,))
    with torch.no_grad():
        a = keyed_edge_dropout(w, 0.3, 0, 1, 2, src, dst)
    assert torch.equal(a, keyed_edge_dropout(w, 0.3, 0, 1, 2, src, dst).detach())
    w1 = torch.rand(40)  # 1-D edge weights: one column
    assert torch.equal(
        keyed_edge_dropout(w1, 0.3, 0, 1, 2, src, dst) != 0,
        hash_uniform_edges(0, 1, 2, src, dst, 1)[:, 0] >= 0.3,
    )


def test_empty_inputs():
    for x in (torch.ones(0, 5), torch.ones(4, 0), torch.ones(0)):
        ids = torch.arange(x.shape[0])
        xr = x.clone().requires_grad_()
        y = keyed_dropout(xr, 0.5, 0, 0, 0, ids)
        assert y.shape == x.shape
        y.sum().backward()
        assert xr.grad.shape == x.shape


def test_dropout_identity_off_training_and_bad_p():
    x = torch.randn(4, 3)
    ids = torch.arange(4)
    assert keyed_dropout(x, 0.5, 0, 0, 0, ids, training=False) is x
    assert torch.all(keyed_dropout(x, 1.0, 0, 0, 0, ids) == 0)
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        keyed_dropout(x, 1.5, 0, 0, 0, ids)
    with pytest.raises(GraphError, match="one global ID per row"):
        keyed_dropout(x, 0.5, 0, 0, 0, torch.arange(5))
    with pytest.raises(GraphError, match="'width' must be >= 0"):
        hash_uniform(0, 0, 0, ids, -1)


def test_edge_dropout_keyed_by_endpoints_and_head():
    src = torch.tensor([1, 2, 3, 1, 9])
    dst = torch.tensor([0, 0, 5, 7, 7])
    w = torch.rand(5, 4, dtype=torch.float64)
    out = keyed_edge_dropout(w, 0.3, 1, 2, 0, src, dst)
    perm = torch.tensor([4, 2, 0, 3, 1])
    torch.testing.assert_close(
        keyed_edge_dropout(w[perm], 0.3, 1, 2, 0, src[perm], dst[perm]), out[perm]
    )
    # direction matters: (1 -> 0) and (0 -> 1) draw independently
    a = hash_uniform_edges(0, 0, 0, torch.arange(500), torch.arange(500) + 1, 2)
    b = hash_uniform_edges(0, 0, 0, torch.arange(500) + 1, torch.arange(500), 2)
    assert (a == b).float().mean() < 0.01
