import pytest
import torch

from fleetgnn.errors import ConfigError
from fleetgnn.ops import hash_uniform, hash_uniform_edges, keyed_dropout, keyed_edge_dropout
from fleetgnn.ops.random import _GOLDEN, _SALT_NODE, _base_key, mix64, mix64_tensor

M64 = (1 << 64) - 1


def test_tensor_mixer_equals_python_reference():
    vals = [0, 1, -1, 2**63 - 1, -(2**63), 123456789012345, -987654321]
    vals += torch.randint(
        -(2**62), 2**62, (200,), generator=torch.Generator().manual_seed(0)
    ).tolist()
    got = mix64_tensor(torch.tensor(vals, dtype=torch.int64)).tolist()
    assert [g & M64 for g in got] == [mix64(v & M64) for v in vals]


def test_hash_uniform_equals_python_reference():
    ids = torch.tensor([5, 0, 2**40 + 3])
    u = hash_uniform(7, 3, 1, ids, 4, dtype=torch.float64)
    base = _base_key(_SALT_NODE, 7, 3, 1)
    for i, node in enumerate(ids.tolist()):
        r = mix64(base ^ node)
        for c in range(4):
            h = mix64((r + (c + 1) * _GOLDEN) & M64)
            assert u[i, c].item() == (h >> 11) * 2.0**-53


def test_float32_takes_two_24_bit_draws_per_hash():
    ids = torch.tensor([3, 2**33 + 1])
    u = hash_uniform(1, 2, 3, ids, 5)
    base = _base_key(_SALT_NODE, 1, 2, 3)
    for i, node in enumerate(ids.tolist()):
        r = mix64(base ^ node)
        for c in range(5):
            h = mix64((r + (c // 2 + 1) * _GOLDEN) & M64)
            bits = h >> 40 if c % 2 == 0 else (h >> 8) & 0xFFFFFF
            assert u[i, c].item() == bits * 2.0**-24


@pytest.mark.parametrize("p", [0.1, 0.5, 0.6, 0.9, 1e-7])
def test_dropout_mask_is_hash_uniform_at_least_p(p):
    ids = torch.randperm(5000)[:3000]
    x = torch.ones(3000, 7)
    keep = keyed_dropout(x, p, 4, 5, 6, ids) != 0
    assert torch.equal(keep, hash_uniform(4, 5, 6, ids, 7) >= p)
    src, dst = ids, torch.flip(ids, [0])
    keep_e = keyed_edge_dropout(x[:, :3], p, 4, 5, 6, src, dst) != 0
    assert torch.equal(keep_e, hash_uniform_edges(4, 5, 6, src, dst, 3) >= p)


def test_range_and_uniformity():
    u = hash_uniform(0, 0, 0, torch.arange(20000), 16)
    assert u.dtype == torch.float32 and u.min() >= 0 and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.005
    hist = torch.histc(u, bins=10, min=0, max=1) / u.numel()
    assert torch.all((hist - 0.1).abs() < 0.005)
    # neighbouring ids / columns are not correlated
    assert abs(torch.corrcoef(torch.stack([u[:-1, 0], u[1:, 0]]))[0, 1].item()) < 0.03


def test_keys_change_the_draw():
    ids = torch.arange(100)
    base = hash_uniform(1, 2, 3, ids, 8)
    for kw in ({"seed": 2}, {"step": 3}, {"layer": 4}):
        args = {"seed": 1, "step": 2, "layer": 3, **kw}
        other = hash_uniform(args["seed"], args["step"], args["layer"], ids, 8)
        assert (other == base).float().mean() < 0.01
    assert torch.equal(hash_uniform(1, 2, 3, ids, 8), base)


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


def test_dropout_identity_off_training_and_bad_p():
    x = torch.randn(4, 3)
    ids = torch.arange(4)
    assert keyed_dropout(x, 0.5, 0, 0, 0, ids, training=False) is x
    assert torch.all(keyed_dropout(x, 1.0, 0, 0, 0, ids) == 0)
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        keyed_dropout(x, 1.5, 0, 0, 0, ids)


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
