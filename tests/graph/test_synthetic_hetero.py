"""Typed synthetic presets: shapes, determinism, learnable labels, bounded memory."""

import tracemalloc

import numpy as np
import pytest

from fleetgnn.errors import DatasetError
from fleetgnn.graph import open_dataset, read_meta
from fleetgnn.graph.synthetic import (
    PRESETS,
    TypedSyntheticSpec,
    generate_graph,
    prepare_synthetic,
    spec_for,
)
from tests.graph.test_synthetic import _linear_accuracy


def test_presets_have_their_schemas():
    mag = spec_for("mag-like").schema()
    assert mag.node_types == ("paper", "author", "institution", "field_of_study")
    assert {r[1] for r in mag.relations} == {"cites", "writes", "affiliated_with", "has_topic"}
    assert mag.target == "paper" and mag.count("paper") == 736_389
    widths = {t: f for t, _, f in PRESETS["mag-like"].node_types}
    assert widths == {"paper": 128, "author": 0, "institution": 0, "field_of_study": 0}
    igbh = PRESETS["igbh-like"]
    assert {r[:3] for r in igbh.relations} == {
        ("paper", "cites", "paper"),
        ("paper", "written_by", "author"),
        ("author", "affiliated_to", "institute"),
        ("paper", "topic", "fos"),
    }
    assert all(f > 0 for _, _, f in igbh.node_types)
    half = spec_for("igbh-like", 0.5)
    assert half.node_types[0][1] == 50_000 and half.relations[0][3] == 273_708
    assert half.name == "igbh-like@0.5"


@pytest.mark.parametrize(
    "preset, scale, match",
    [("dblp-like", 1.0, "unknown synthetic preset 'dblp-like'"), ("mag-like", 0.0, "'scale'")],
)
def test_bad_presets_are_one_line(preset, scale, match):
    with pytest.raises(DatasetError, match=match) as e:
        spec_for(preset, scale)
    assert "\n" not in str(e.value)


def test_typed_specs_go_to_disk_through_the_one_entry_point(tmp_path):
    with pytest.raises(DatasetError, match="'mag-like@0.001' is generated to disk only"):
        generate_graph(spec_for("mag-like", 0.001))  # type: ignore[arg-type]
    with pytest.raises(DatasetError, match="'edge_features' applies to the static homogeneous"):
        prepare_synthetic(tmp_path / "e", "mag-like", 0.001, edge_features=2)
    with pytest.raises(DatasetError, match="'scale' applies to named presets only"):
        prepare_synthetic(tmp_path / "s", PRESETS["igbh-like"], scale=0.5)
    assert not list(tmp_path.iterdir())


def _arrays(g):
    out = {f"csc/{r}/{i}": a for r in g.schema.relations for i, a in enumerate(g.csc[r])}
    out.update({f"x/{t}": a for t, a in g.x.items()})
    out.update({k: getattr(g, k) for k in ("y", "train_mask", "val_mask", "test_mask")})
    return out


def test_chunk_size_never_changes_the_result_and_seeds_do(tmp_path):
    a = open_dataset(prepare_synthetic(tmp_path / "a", "igbh-like", 0.01, seed=3))
    b = open_dataset(prepare_synthetic(tmp_path / "b", "igbh-like", 0.01, seed=3, chunk_edges=1))
    c = open_dataset(prepare_synthetic(tmp_path / "c", "igbh-like", 0.01, seed=4))
    for k, v in _arrays(a).items():
        assert np.array_equal(v, _arrays(b)[k]), k
    assert not np.array_equal(a.csc[a.schema.relations[0]][1], c.csc[c.schema.relations[0]][1])
    meta = read_meta(tmp_path / "a")
    assert (meta["preset"], meta["scale"], meta["seed"]) == ("igbh-like", 0.01, 3)


def _cites_signal(g):
    """Paper features alone, and with the mean of the cited papers' features."""
    x = np.asarray(g.x["paper"], np.float64)
    src, dst = g.relation_edges("cites")
    agg = np.zeros_like(x)
    np.add.at(agg, dst, x[src])
    nbr = agg / np.maximum(np.bincount(dst, minlength=x.shape[0]), 1)[:, None]
    y = np.asarray(g.y)
    train, test = np.flatnonzero(g.train_mask), np.flatnonzero(g.test_mask)
    return _linear_accuracy(x, y, train, test), _linear_accuracy(
        np.hstack([x, nbr]), y, train, test
    )


@pytest.mark.parametrize("preset, scale, chance", [("igbh-like", 0.05, 1 / 19)])
def test_labels_are_learnable_and_need_the_graph(tmp_path, preset, scale, chance):
    g = open_dataset(prepare_synthetic(tmp_path / "d", preset, scale, seed=1))
    mlp, gnn = _cites_signal(g)
    assert 3 * chance < mlp < 0.6, mlp  # features carry some signal, far from all
    assert gnn >= mlp + 0.15, (mlp, gnn)
    src, dst = g.relation_edges("cites")
    same = float(np.mean(src % g.num_classes == dst % g.num_classes))
    assert abs(same - 0.8) < 0.03, same  # the spec's homophily (plus chance collisions)


def test_mag_like_papers_need_their_neighbours(tmp_path):
    g = open_dataset(prepare_synthetic(tmp_path / "m", "mag-like", 0.005, seed=1))
    assert set(g.x) == {"paper"}  # authors, institutions and fields: learnable embeddings
    mlp, gnn = _cites_signal(g)
    assert gnn >= mlp + 0.2 and gnn > 50 / 349, (mlp, gnn)


def test_generation_streams_in_bounded_memory(tmp_path):
    spec = TypedSyntheticSpec(
        node_types=(("a", 20_000, 8), ("b", 5_000, 0)),
        relations=(("a", "to", "b", 600_000), ("b", "back", "a", 600_000)),
        target="a",
        num_classes=4,
        train_frac=0.5,
        val_frac=0.2,
        test_frac=0.3,
        homophily=0.8,
        feature_noise=2.0,
    )
    tracemalloc.start()
    try:
        out = prepare_synthetic(tmp_path / "ds", spec, chunk_edges=1 << 15)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    out_bytes = sum(p.stat().st_size for p in out.rglob("*.npy"))
    assert out_bytes > 4e6
    # one relation's edges (two int64 arrays of E) alone would exceed this bound
    assert peak < out_bytes / 2, (peak, out_bytes)
