"""``fleetgnn bench``'s store gather per stored feature dtype (issue 40): the rows' structure,
their values, and the rates and ratios computed from the timings (no timing thresholds)."""

import types

import numpy as np
import pytest
import torch

from fleetgnn.bench import gather
from fleetgnn.bench.report import markdown
from fleetgnn.bench.suite import results_document
from fleetgnn.graph import Graph

F = 12


def _table(rows=3000):
    x = np.random.default_rng(0).standard_normal((rows, F), dtype=np.float32)
    return Graph(indptr=np.zeros(rows + 1, np.int64), indices=np.zeros(0, np.int64), x=x, name="t")


def test_dtype_rates_are_computed_from_the_medians():
    times = {None: [4.0, 2.0, 3.0], "bfloat16": [1.0, 1.5, 2.0], "float8_e4m3": [6.0]}
    row_bytes = {None: 4 * F, "bfloat16": 2 * F, "float8_e4m3": F + 4}
    r = gather.dtype_rates(times, 1000, row_bytes)
    assert r[None]["rows_per_s"] == pytest.approx(1000 / 3.0)
    assert r["bfloat16"]["rows_per_s"] == pytest.approx(1000 / 1.5)
    assert r["bfloat16"]["ratio_to_dataset"] == pytest.approx(2.0)
    assert r["float8_e4m3"]["ratio_to_dataset"] == pytest.approx(0.5)
    assert r[None]["ratio_to_dataset"] == 1.0
    assert r["bfloat16"]["stored_gbps"] == pytest.approx(1000 / 1.5 * 2 * F / 1e9)
    assert r["float8_e4m3"]["row_bytes"] == F + 4
    with pytest.raises(ValueError, match="feature_dtype None"):
        gather.dtype_rates({"bfloat16": [1.0]}, 10, row_bytes)
    with pytest.raises(ValueError, match="must be > 0"):
        gather.dtype_rates({None: [0.0]}, 10, row_bytes)


def test_dtype_rows_measure_every_stored_dtype_on_the_same_ids():
    g = _table()
    ids = torch.from_numpy(np.random.default_rng(1).integers(0, g.num_nodes, 500))
    lines = []
    rows = gather.dtype_rows(g, "t", ids, 2, 1, lines.append)
    n = len(gather.FEATURE_DTYPES)
    assert [r["extra"]["feature_dtype"] for r in rows] == 2 * list(gather.FEATURE_DTYPES)
    assert [r["extra"]["output"] for r in rows] == n * ["fresh"] + n * ["reused"]
    assert len(lines) == len(rows)
    want_bytes = {None: 4 * F, "bfloat16": 2 * F, "float16": 2 * F, "float8_e4m3": F + 4}
    bases = {"fresh": rows[0], "reused": rows[n]}
    assert rows[0]["impls"]["fleetgnn"]["all_s"] != rows[n]["impls"]["fleetgnn"]["all_s"]
    for r in rows:
        d, extra = r["extra"]["feature_dtype"], r["extra"]
        base = bases[extra["output"]]  # each output against the dataset rows' same output
        assert gather.OUTPUT_WORDS[extra["output"]] in r["case"]
        assert r["section"] == gather.SECTION and r["unit"] == "M rows/s" and r["threads"] == 1
        assert extra["row_bytes"] == want_bytes[d] and extra["rows"] == 500
        assert extra["table_rows"] == g.num_nodes and extra["dataset_dtype"] == "float32"
        f = r["impls"]["fleetgnn"]
        assert len(f["all_s"]) == 2 and all(t > 0 for t in f["all_s"])
        assert f["rate"] == pytest.approx(500 / 1e6 / f["median_s"])
        assert extra["rows_per_s"] == pytest.approx(f["rate"] * 1e6)
        assert extra["stored_gbps"] == pytest.approx(extra["rows_per_s"] * want_bytes[d] / 1e9)
        assert extra["stored_gbps"] > 0
        ratio = extra["rows_per_s"] / base["extra"]["rows_per_s"]
        assert extra["ratio_to_dataset"] == pytest.approx(ratio)
        assert f"({want_bytes[d]} B/row)" in r["case"]
        if extra["output"] == "reused":  # the read alone beside it, a limit timed alike
            lim = r["impls"].pop(gather.STORED_ROWS)
            assert lim["kind"] == "limit" and len(lim["all_s"]) == 2 and lim["median_s"] > 0
        if d is None:
            assert set(r["impls"]) == {"fleetgnn"} and extra["ratio_to_dataset"] == 1.0
        else:  # against the dataset rows' own timings, a baseline: the speed-up is the ratio
            b = r["impls"][gather.DATASET_ROWS]
            assert b["kind"] == "baseline" and b["all_s"] == base["impls"]["fleetgnn"]["all_s"]
            assert r["speedup"][gather.DATASET_ROWS] == pytest.approx(ratio)
            assert f"stored as {d} " in r["case"]
    doc = results_document(
        rows, command=["t"], machine={"date": "d"}, settings={}, sections=["gather"], started=0
    )
    assert "stored as bfloat16 (24 B/row)" in markdown(doc)


def test_the_gather_section_includes_the_stored_dtypes_on_the_cpu():
    g = _table(2000)
    opts = types.SimpleNamespace(quick=True, repeat=1)
    rows = gather.run(opts, 1, lambda _: None, g, "t")
    dtypes = [r["extra"].get("feature_dtype", "-") for r in rows]
    assert dtypes == ["-", "-", *gather.FEATURE_DTYPES, *gather.FEATURE_DTYPES]  # tiers first


def test_dtype_rows_refuse_a_graph_without_features_or_the_baseline():
    g = _table(10)
    ids = torch.arange(5)
    with pytest.raises(ValueError, match="must hold None"):
        gather.dtype_rows(g, "t", ids, 1, 1, print, dtypes=("bfloat16",))
    bare = Graph(indptr=np.zeros(11, np.int64), indices=np.zeros(0, np.int64))
    with pytest.raises(ValueError, match="no features"):
        gather.dtype_rows(bare, "bare", ids, 1, 1, print)
