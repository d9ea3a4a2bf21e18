"""Compact feature rows (``store.feature_dtype``): the codecs' invariants."""

import numpy as np
import pytest
import torch

from fleetgnn.config.knobs import FEATURE_DTYPES
from fleetgnn.errors import GraphError
from fleetgnn.graph import compact
from fleetgnn.graph.compact import FP8_MAX, feature_codec

NARROW = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def _rows(n=64, f=12, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, f, generator=g, dtype=torch.float64) * torch.logspace(-3, 3, n)[:, None]
    x[5] = 0.0  # an all-zero row
    x[6] = 0.25  # a row of equal values (a normalised bag of words)
    return x.to(dtype)


@pytest.mark.parametrize("name", FEATURE_DTYPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_decoding_commutes_with_gathering(name, dtype):
    """Decoding gathered stored rows equals gathering decoded rows, bit for bit."""
    codec = feature_codec(name)
    x = _rows(dtype=dtype)
    stored = codec.encode(x)
    width = 12 + 4 if name == "float8_e4m3" else 12  # float8: the scale's 4 bytes in the row
    assert stored.dtype == codec.bits and stored.shape == (64, width)
    assert stored.numel() * stored.element_size() == 64 * codec.row_bytes(12)
    ids = torch.tensor([3, 0, 63, 3, 5, 6, 6])
    whole = codec.decode(stored, dtype)
    assert torch.equal(codec.decode(stored.index_select(0, ids), dtype), whole[ids])
    assert torch.equal(codec.round_trip(x), whole) and whole.dtype == dtype


@pytest.mark.parametrize("name", FEATURE_DTYPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_fused_gather_equals_gathering_then_decoding(name, dtype, device, monkeypatch):
    """:meth:`FeatureCodec.gather` (chunks through a scratch on the CPU) is bit for bit the
    gather then the decode, across chunk edges, into a given buffer too."""
    monkeypatch.setattr(compact, "GATHER_CHUNK_BYTES", 40)  # a few rows a chunk: many edges
    codec = feature_codec(name)
    stored = codec.encode(_rows(dtype=dtype)).to(device)
    ids = torch.tensor([3, 0, 63, 3, 5, 6, 6, 17, 40, 41, 2], device=device)
    want = codec.decode(stored.index_select(0, ids), dtype)
    assert torch.equal(codec.gather(stored, ids, dtype), want)
    buf = torch.full_like(want, float("nan"))
    assert codec.gather(stored, ids, dtype, out=buf) is buf and torch.equal(buf, want)
    empty = codec.gather(stored, ids[:0], dtype)
    assert empty.shape == (0, 12) and empty.dtype == dtype
    with pytest.raises(GraphError, match=r"must be \[11, 12\]"):
        codec.gather(stored, ids, dtype, out=buf[:, :5])
    with pytest.raises(GraphError, match="rows of another feature dtype"):
        codec.gather(stored.view(torch.uint8) if codec.bits != torch.uint8 else stored.float(), ids)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float8_decoding_is_torchs_cast_for_every_byte(dtype):
    """Every e4m3 byte (NaN, signed zeros, subnormals, +-448) at several scales decodes to
    torch's own float8 cast times the scale, bit for bit."""
    codec = feature_codec("float8_e4m3")
    bits = torch.arange(256, dtype=torch.int64).to(torch.uint8).repeat(4, 1)  # [4, 256]
    scales = torch.tensor([1.0, 3.0e-4, 7.5e35, 1.0e-41])  # a subnormal scale too
    rows = torch.cat([bits, scales[:, None].contiguous().view(torch.uint8)], dim=1)
    want = bits.view(torch.float8_e4m3fn).to(dtype) * scales.to(dtype)[:, None]
    got = codec.decode(rows, dtype)
    assert torch.equal(got.isnan(), want.isnan()) and int(got.isnan().sum()) == 8
    assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(want))
    assert torch.equal(got.signbit(), want.signbit())
    assert torch.equal(
        got.view(torch.int64 if dtype == torch.float64 else torch.int32),
        want.view(torch.int64 if dtype == torch.float64 else torch.int32),
    )


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_sixteen_bit_rows_are_the_casts(name):
    x = _rows(n=16) / 1e3  # inside float16's range
    out = feature_codec(name).round_trip(x)
    assert torch.equal(out, x.to(NARROW[name]).to(torch.float32))


def test_float8_scales_each_row_to_its_own_range():
    codec = feature_codec("float8_e4m3")
    x = _rows()
    stored = codec.encode(x)
    scale = stored[:, 12:].contiguous().view(torch.float32).squeeze(1)
    amax = x.abs().amax(dim=1)
    assert torch.equal(scale[amax > 0], amax[amax > 0] / FP8_MAX) and scale[5] == 1
    out = codec.round_trip(x)
    # e4m3 keeps 3 mantissa bits: relative error <= 2^-4 of each row's largest value, for rows
    # whose magnitudes span 6 orders of magnitude
    err = (out - x).abs().amax(dim=1) / amax.clamp_min(1e-30)
    assert float(err.max()) <= 2**-4
    assert torch.equal(out[5], x[5]) and torch.equal(out[6], x[6])  # zeros, equal values exact
    # the largest value of each row is stored as 448 exactly, so it reads back exactly
    top = x.abs().argmax(dim=1)
    assert torch.allclose(out.gather(1, top[:, None]), x.gather(1, top[:, None]), rtol=1e-6)


def test_binary_features_are_exact_in_every_dtype():
    """Bag-of-words 0/1 features (Cora's) are stored exactly by every compact dtype."""
    x = torch.from_numpy((np.random.default_rng(0).random((50, 30)) < 0.2).astype(np.float32))
    for name in FEATURE_DTYPES:
        assert torch.equal(feature_codec(name).round_trip(x), x), name


def test_the_bundled_coras_features_are_exact_in_every_dtype():
    """So every model trained on Cora (GCN, GAE) reads bit-identical inputs whatever the stored
    dtype: Cora's runs per stored dtype are its float32 runs (docs/training.md)."""
    from fleetgnn.graph.loaders.bundled import DATA_DIR
    from fleetgnn.graph.loaders.planetoid import load_planetoid

    x = torch.from_numpy(np.asarray(load_planetoid(DATA_DIR / "planetoid", "cora").x))
    for name in FEATURE_DTYPES:
        assert torch.equal(feature_codec(name).round_trip(x), x), name


def test_errors():
    with pytest.raises(GraphError, match="unknown feature dtype 'int4'"):
        feature_codec("int4")
    assert feature_codec(None) is None
    codec = feature_codec("bfloat16")
    with pytest.raises(GraphError, match="2-D float"):
        codec.encode(torch.ones(3, dtype=torch.int64))
    with pytest.raises(GraphError, match="must be torch.bfloat16"):
        codec.decode(torch.ones(2, 3))


def test_config_accepts_the_short_names():
    from fleetgnn.config import ENGINES
    from fleetgnn.config.knobs import KnobError

    for short, name in {"bf16": "bfloat16", "fp16": "float16", "fp8": "float8_e4m3"}.items():
        assert ENGINES["fullgraph"].config_cls(feature_dtype=short).feature_dtype == name
    with pytest.raises(KnobError, match="feature_dtype='int8'"):
        ENGINES["minibatch"].config_cls(feature_dtype="int8")
