"""The typed temporal preset (``mag-temporal-like``) and the untimed presets' unchanged arrays."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from fleetgnn.graph.dataset import open_dataset
from fleetgnn.graph.synthetic import PRESETS, prepare_synthetic


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    meta = json.loads((root / "meta.json").read_text())
    for name in sorted(meta["arrays"]):
        h.update(name.encode())
        h.update(np.ascontiguousarray(np.load(root / f"{name}.npy")).tobytes())
    return h.hexdigest()[:16]


@pytest.mark.parametrize(
    ("preset", "scale", "seed", "digest"),
    # the arrays these presets wrote before times existed (generator of commit 0a3fa79)
    [("mag-like", 0.001, 0, "5138abe1fcd5be82"), ("igbh-like", 0.005, 7, "fce971bab3156791")],
)
def test_untimed_presets_write_what_they_always_wrote(tmp_path, preset, scale, seed, digest):
    out = prepare_synthetic(tmp_path / preset, preset, scale=scale, seed=seed)
    meta = json.loads((out / "meta.json").read_text())
    assert _digest(out) == digest and not any("time" in k for k in meta)


def test_mag_temporal_like_is_mag_like_with_sorted_times(tmp_path):
    assert PRESETS["mag-temporal-like"].time_horizon == 100
    plain = open_dataset(prepare_synthetic(tmp_path / "p", "mag-like", 0.002, seed=4))
    out = prepare_synthetic(tmp_path / "t", "mag-temporal-like", 0.002, seed=4)
    timed = open_dataset(out, validate="full")  # every time >= 0, sorted per segment
    small = prepare_synthetic(
        tmp_path / "c", "mag-temporal-like", 0.002, seed=4, chunk_edges=1 << 14
    )
    chunked = open_dataset(small)
    s = timed.schema
    assert sorted(timed.node_time) == sorted(s.node_types)
    for t in s.node_types:
        nt = np.asarray(timed.node_time[t])
        assert nt.shape == (s.count(t),) and 0 <= nt.min() and nt.max() < 100
        assert np.array_equal(nt, chunked.node_time[t])
    for rel in s.relations:
        (pp, pi), (tp, ti) = plain.csc[rel], timed.csc[rel]
        assert np.array_equal(pp, tp)  # the same draws, each segment reordered by time
        key = np.repeat(np.arange(pp.size - 1), np.diff(pp)) * (s.count(rel[0]) + 1)
        assert np.array_equal(np.sort(key + pi), np.sort(key + ti))
        et = np.asarray(timed.edge_time[rel])
        assert et.min() >= 0 and et.max() < 100 and np.unique(et).size > 50
        assert np.array_equal(et, chunked.edge_time[rel])  # chunk size changes nothing
        assert np.array_equal(ti, chunked.csc[rel][1])
    assert np.array_equal(plain.y, timed.y) and np.array_equal(plain.x["paper"], timed.x["paper"])
    meta = json.loads((out / "meta.json").read_text())
    assert meta["time_horizon"] == 100 and meta["has_edge_time"] and meta["has_node_time"]
