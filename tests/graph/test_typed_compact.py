"""Typed datasets written compact (``prepare --feature-dtype`` on a typed source): the stored
form and ``meta.json`` per node type, reading, checks, and the keyed store holding the tables
as stored.
"""

import json

import numpy as np
import pytest
import torch

from fleetgnn.errors import DatasetError, GraphError
from fleetgnn.graph.compact import FeatureCodec, feature_codec
from fleetgnn.graph.compact_rows import CompactRows
from fleetgnn.graph.dataset import open_dataset, write_dataset
from fleetgnn.graph.hetero_toy import toy_mag
from fleetgnn.store import KeyedStore, TierBudgets

DTYPES = ("bfloat16", "float16", "float8_e4m3")
BITS = {"bfloat16": ("<u2", 0), "float16": ("<f2", 0), "float8_e4m3": ("|u1", 4)}


def _graph():
    return toy_mag(num_papers=80, num_authors=40, num_fields=6, featureless_fields=True, seed=4)


def _round_trip(x, dtype):
    return feature_codec(dtype).round_trip(torch.from_numpy(np.asarray(x))).numpy()


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_table_written_compact_and_read_as_its_round_trip(tmp_path, dtype):
    g = _graph()
    out = write_dataset(g, tmp_path / "d", feature_dtype=dtype)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["feature_dtype"] == dict.fromkeys(g.x, dtype)
    assert meta["feature_read_dtype"] == dict.fromkeys(g.x, "float32")
    bits, extra = BITS[dtype]
    for t, x in g.x.items():
        assert meta["arrays"][f"x/{t}"] == {
            "dtype": bits,
            "shape": [x.shape[0], x.shape[1] + extra],
        }
        raw = np.load(out / "x" / f"{t}.npy")
        assert raw.dtype.str == bits
    for validate in (None, "full"):
        h = open_dataset(out, validate=validate)
        for t, x in g.x.items():
            assert isinstance(h.x[t], CompactRows) and h.x[t].codec.name == dtype
            assert h.x[t].shape == x.shape and h.x[t].dtype == np.float32
            assert np.array_equal(np.asarray(h.x[t]), _round_trip(x, dtype))


def test_per_type_dtypes_and_types_not_named_as_given(tmp_path):
    g = _graph()
    out = write_dataset(g, tmp_path / "d", feature_dtype="paper=bf16,author=fp8")
    h = open_dataset(out)
    assert h.x["paper"].codec.name == "bfloat16" and h.x["author"].codec.name == "float8_e4m3"
    assert np.array_equal(np.asarray(h.x["author"]), _round_trip(g.x["author"], "float8_e4m3"))
    only = open_dataset(write_dataset(g, tmp_path / "p", feature_dtype={"paper": "fp16"}))
    assert isinstance(only.x["paper"], CompactRows) and isinstance(only.x["author"], np.ndarray)
    assert np.array_equal(only.x["author"], g.x["author"])
    meta = json.loads((tmp_path / "p" / "meta.json").read_text())
    assert meta["feature_dtype"] == {"paper": "float16"}


def test_rewriting_keeps_the_stored_rows_and_refuses_rounding_twice(tmp_path):
    g = _graph()
    h = open_dataset(write_dataset(g, tmp_path / "a", feature_dtype="bf16"))
    again = open_dataset(write_dataset(h, tmp_path / "b"))
    for t in g.x:
        assert np.array_equal(again.x[t].stored, h.x[t].stored)
    wide = open_dataset(write_dataset(h, tmp_path / "c", feature_dtype="float32"))
    assert np.array_equal(wide.x["paper"], np.asarray(h.x["paper"]))
    with pytest.raises(DatasetError, match=r"^features of node type 'paper'.*round them twice"):
        write_dataset(h, tmp_path / "e", feature_dtype="fp8")


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("venue=bf16", r"names node type 'venue'.*node types are paper, author, field"),
        ("paper=bf16,paper=fp8", r"names node type 'paper' twice"),
        ("paper=bf17", r"unknown feature dtype 'bf17'"),
        ("paper=,author=bf16", r"expected one dtype or TYPE=DTYPE"),
    ],
)
def test_bad_per_type_specs_are_refused_before_writing(tmp_path, spec, match):
    with pytest.raises(DatasetError, match=match) as e:
        write_dataset(_graph(), tmp_path / "d", feature_dtype=spec)
    assert "\n" not in str(e.value)
    assert not list(tmp_path.iterdir())  # nothing written


def _edit_meta(path, edit):
    meta = json.loads((path / "meta.json").read_text())
    edit(meta)
    (path / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda m: m["feature_dtype"].update(venue="bfloat16"), r"feature_dtype"),
        (lambda m: m["feature_read_dtype"].pop("author"), r"feature_read_dtype"),
        (lambda m: m["feature_dtype"].update(paper="float8_e4m3"), r"arrays\.x/paper"),
        (lambda m: m["feature_dtype"].update(paper="int4"), r"feature_dtype\.paper"),
        (lambda m: m.pop("feature_dtype"), r"arrays\.x/\w+\.dtype.*float dtype"),
    ],
)
def test_bad_compact_meta_is_refused_in_one_line(tmp_path, edit, match):
    out = write_dataset(_graph(), tmp_path / "d", feature_dtype="bf16")
    _edit_meta(out, edit)
    with pytest.raises(DatasetError, match=match) as e:
        open_dataset(out)
    assert "\n" not in str(e.value)


def test_values_checked_as_they_read_back(tmp_path):
    out = write_dataset(_graph(), tmp_path / "d", feature_dtype="bf16")
    raw = np.load(out / "x" / "author.npy")
    raw[3, 1] = 0x7FC0  # a bf16 NaN
    np.save(out / "x" / "author.npy", raw)
    with pytest.raises(DatasetError, match=r"features of node type 'author'.*'x'.*node 3"):
        open_dataset(out)


def _stores(tmp_path, dtype, monkeypatch):
    g = _graph()
    comp = open_dataset(write_dataset(g, tmp_path / dtype, feature_dtype=dtype))
    rb = sum(x.stored_row_bytes for x in comp.x.values())
    budgets = TierBudgets(device=15 * rb, host=30 * rb)  # rows from device, host and disk
    a = KeyedStore.build(g, budgets=budgets, feature_dtype=dtype)
    with monkeypatch.context() as m:  # the file's rows go into the tiers, never encoded again
        m.setattr(FeatureCodec, "encode", lambda *a: pytest.fail("compact rows re-encoded"))
        b = KeyedStore.build(comp, budgets=budgets)
    return g, comp, a, b


@pytest.mark.parametrize("dtype", DTYPES)
def test_keyed_store_holds_the_tables_as_stored(tmp_path, dtype, monkeypatch):
    g, comp, a, b = _stores(tmp_path, dtype, monkeypatch)
    ids = torch.from_numpy(np.random.default_rng(0).integers(0, g.schema.total_nodes, 500))
    ga, gb = a.gather(ids), b.gather(ids)
    for t in g.x:
        assert ga[t].numpy().tobytes() == gb[t].numpy().tobytes()
    assert a.memory() == b.memory() and a.plan.shares == b.plan.shares
    # the same rows from each tier; the disk tier reads the file's (stored) rows, not floats
    assert b.requests() == a.requests()
    assert {k: v for k, v in b.traffic.items() if k != "disk"} == {
        k: v for k, v in a.traffic.items() if k != "disk"
    }
    assert b.traffic["disk"]["bytes"] < a.traffic["disk"]["bytes"]
    assert all(b.requests()[k] > 0 for k in ("local", "host", "disk")), b.requests()
    disk = 0
    for t, st in b.tables.items():
        x = comp.x[t]
        rb = x.stored_row_bytes
        assert st.row_bytes() == rb == a.tables[t].row_bytes()
        host = b.plan.tables[t].host_rows()
        if host.size:  # the host tier holds the file's bytes
            held = st._feat_host.contiguous().view(torch.uint8).numpy().tobytes()
            assert held == np.asarray(x.stored[host]).tobytes()
        disk += rb * int(st.requests("features")["disk"])
    assert b.traffic["disk"]["bytes"] == disk
    assert b.memory()["disk"] == sum(p.disk_bytes for p in b.plan.tables.values())
    a.close()
    b.close()


def test_store_feature_dtype_per_table(tmp_path):
    g = _graph()
    comp = open_dataset(write_dataset(g, tmp_path / "d", feature_dtype="paper=bf16"))
    budgets = TierBudgets(device=0, host=0)
    with pytest.raises(GraphError, match=r"^features of node type 'paper': .*round them twice"):
        KeyedStore.build(comp, budgets=budgets, feature_dtype="fp8")
    # float32 widens the compact table (exact) and keeps the float one
    st = KeyedStore.build(comp, budgets=budgets, feature_dtype="float32")
    ids = torch.arange(g.schema.total_nodes)
    rows = st.gather(ids)
    assert np.array_equal(rows["paper"].numpy(), np.asarray(comp.x["paper"]))
    assert np.array_equal(rows["author"].numpy(), g.x["author"])
    assert st.tables["paper"].row_bytes() == 4 * g.x["paper"].shape[1]
    st.close()
