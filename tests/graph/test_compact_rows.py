"""Datasets written compact (``prepare --feature-dtype``): the stored form, meta.json, reading."""

import json
import os

import numpy as np
import pytest
import torch

from fleetgnn.errors import DatasetError, GraphError
from fleetgnn.graph.compact import feature_codec
from fleetgnn.graph.compact_rows import CompactRows, applied_feature_dtype, stored_row_bytes
from fleetgnn.graph.csc import Graph
from fleetgnn.graph.dataset import DatasetWriter, open_dataset, write_dataset

DTYPES = ("bfloat16", "float16", "float8_e4m3")
N, F = 257, 11


def _graph(src=np.float32, n=N, f=F, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, f)) * np.logspace(-3, 3, n)[:, None]  # every row's magnitude
    indptr = np.arange(n + 1, dtype=np.int64)
    indices = ((np.arange(n) + 1) % n).astype(np.int32)
    return Graph(indptr=indptr, indices=indices, x=x.astype(src), name="g")


@pytest.mark.parametrize("src", [np.float32, np.float64])
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_bit_for_bit(tmp_path, dtype, src):
    g = _graph(src)
    out = write_dataset(g, tmp_path / "d", feature_dtype=dtype)
    x = open_dataset(out).x
    assert isinstance(x, CompactRows) and x.dtype == np.dtype(src) and x.shape == (N, F)
    want = feature_codec(dtype).round_trip(torch.from_numpy(g.x)).numpy()
    ids = np.random.default_rng(1).integers(0, N, 100)
    assert x[ids].tobytes() == want[ids].tobytes()
    assert x[3:40].tobytes() == want[3:40].tobytes()
    assert x[5].tobytes() == want[5].tobytes() and x[ids, 2:5].tobytes() == want[ids, 2:5].tobytes()
    assert np.asarray(x).tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_meta_and_disk_bytes(tmp_path, dtype):
    g = _graph()
    plain = write_dataset(g, tmp_path / "plain")
    out = write_dataset(g, tmp_path / "d", feature_dtype=dtype)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["feature_dtype"] == dtype and meta["feature_read_dtype"] == "float32"
    assert meta["num_features"] == F and meta["format_version"] == 1
    stored = np.load(out / "x.npy", mmap_mode="r")
    float_bytes = np.load(plain / "x.npy", mmap_mode="r").nbytes
    num, den = (1, 2) if dtype != "float8_e4m3" else (F + 4, 4 * F)  # 1/2, (F + 4) / 4F
    assert stored.nbytes * den == float_bytes * num
    assert stored.dtype == {"bfloat16": np.uint16, "float16": np.float16}.get(dtype, np.uint8)
    assert "feature_dtype" not in json.loads((plain / "meta.json").read_text())
    # an old dataset (no key) opens unchanged; float32 writes a plain float32 dataset
    assert isinstance(open_dataset(plain).x, np.memmap)
    f32 = write_dataset(_graph(np.float64), tmp_path / "f32", feature_dtype="fp32")
    assert isinstance(open_dataset(f32).x, np.memmap) and open_dataset(f32).x.dtype == np.float32


def test_chunked_writing_and_created_x(tmp_path, monkeypatch):
    """x put whole is encoded in blocks; x made with create() is converted by commit."""
    import fleetgnn.graph.dataset.writer as ds

    monkeypatch.setattr(ds, "_COPY_CHUNK_BYTES", 3 * F * 8)  # a few rows per block
    g = _graph()
    want = feature_codec("fp8").round_trip(torch.from_numpy(g.x)).numpy()
    a = write_dataset(g, tmp_path / "a", feature_dtype="fp8")
    with DatasetWriter(tmp_path / "b", name="g", feature_dtype="fp8") as w:
        w.put("indptr", g.indptr)
        w.put("indices", g.indices)
        x = w.create("x", np.float32, (N, F))
        for lo in range(0, N, 50):
            x[lo : lo + 50] = g.x[lo : lo + 50]
        b = w.commit()
    assert sorted(os.listdir(b)) == sorted(os.listdir(a))  # the float file is gone
    for out in (a, b):
        assert open_dataset(out).x[:].tobytes() == want.tobytes()


def test_refusals_in_one_line(tmp_path):
    with pytest.raises(DatasetError, match="unknown feature dtype 'fp4'") as e:
        write_dataset(_graph(), tmp_path / "d", feature_dtype="fp4")
    assert "\n" not in str(e.value) and not (tmp_path / "d").exists()
    out = write_dataset(_graph(), tmp_path / "bf", feature_dtype="bf16")
    x = open_dataset(out).x
    assert applied_feature_dtype(x, None) is None and applied_feature_dtype(x, "bf16") is None
    assert applied_feature_dtype(x, "fp32") == "float32"
    with pytest.raises(GraphError, match="round them twice"):
        applied_feature_dtype(x, "fp8")
    with pytest.raises(DatasetError, match="round them twice"):  # re-written as another codec
        write_dataset(open_dataset(out), tmp_path / "e", feature_dtype="fp8")
    assert stored_row_bytes(x, None) == 2 * F and stored_row_bytes(x, "float32") == 4 * F


def test_checks_see_decoded_values(tmp_path):
    """fp16 overflows to inf: the write is refused (values are checked as read back)."""
    g = _graph()
    x = g.x.copy()
    x[7, 3] = 1e6
    with pytest.raises(DatasetError, match="non-finite value inf at node 7, feature 3"):
        write_dataset(g.replace(x=x), tmp_path / "d", feature_dtype="fp16")
    out = write_dataset(g, tmp_path / "ok", feature_dtype="fp8")
    open_dataset(out, validate="full")  # the full check of a compact dataset passes


def test_permute_and_rewrite_keep_rows_compact(tmp_path):
    g = open_dataset(write_dataset(_graph(), tmp_path / "d", feature_dtype="fp8"))
    perm = np.random.default_rng(2).permutation(N)
    p = g.permute(perm)
    assert isinstance(p.x, CompactRows)
    assert p.x.stored.tobytes() == np.asarray(g.x.stored)[perm].tobytes()
    again = write_dataset(g, tmp_path / "again")  # as stored: the same bytes
    assert open_dataset(again).x.stored.tobytes() == g.x.stored.tobytes()
    same = write_dataset(g, tmp_path / "same", feature_dtype="fp8")  # its own dtype: as stored
    assert open_dataset(same).x.stored.tobytes() == g.x.stored.tobytes()
