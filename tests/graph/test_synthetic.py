import dataclasses
import math
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

from fleetgnn.errors import DatasetError
from fleetgnn.graph import Graph, open_dataset, read_meta
from fleetgnn.graph import synthetic as syn
from fleetgnn.graph.synthetic import (
    PRESETS,
    SyntheticSpec,
    TemporalSpec,
    TypedSyntheticSpec,
    generate_graph,
    generator_version,
    prepare_synthetic,
    spec_for,
)
from fleetgnn.graph.synthetic import homogeneous as hom
from fleetgnn.graph.synthetic.common import EDGE_BLOCK, FEATURE_BLOCK, NODE_BLOCK, philox

ARRAYS = ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask")


def _spec(**kw) -> SyntheticSpec:
    base = dict(
        num_nodes=3_000,
        num_edges=40_000,
        num_features=8,
        num_classes=5,
        train_frac=0.5,
        val_frac=0.2,
        test_frac=0.3,
        homophily=0.8,
        degree_exponent=2.5,
        feature_noise=1.0,
        name="t",
    )
    base.update(kw)
    return SyntheticSpec(**base)


def _assert_same(a: Graph, b: Graph) -> None:
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        assert np.array_equal(x, y), name
    assert a.num_classes == b.num_classes


@pytest.fixture(scope="module")
def tiny() -> Graph:
    return generate_graph(PRESETS["tiny"], seed=0)


# ------------------------------------------------------------------------- presets and specs
def test_presets_have_the_advertised_shapes():
    static = {name: s for name, s in PRESETS.items() if isinstance(s, SyntheticSpec)}
    assert set(static) == {"tiny", "small", "products-like", "papers-like"}
    t = PRESETS["tiny"]
    assert (t.num_nodes, t.num_edges, t.num_features, t.num_classes) == (1_000, 10_000, 16, 4)
    s = PRESETS["small"]
    assert (s.num_nodes, s.num_edges, s.num_features, s.num_classes) == (20_000, 400_000, 64, 8)
    p = PRESETS["products-like"]
    assert (p.num_nodes, p.num_features, p.num_classes) == (2_449_029, 100, 47)
    assert p.num_edges == 61_859_140 and abs(p.train_frac - 0.08) < 0.001
    q = PRESETS["papers-like"]
    assert (q.num_nodes, q.num_features, q.num_classes) == (111_059_956, 128, 172)
    assert 1.6e9 < q.num_edges < 1.7e9 and abs(q.train_frac - 0.01) < 0.001
    for spec in static.values():
        assert spec.train_frac + spec.val_frac + spec.test_frac <= 1.0
    for name, spec in PRESETS.items():  # every kind
        assert spec.name == name
    assert "num_nodes=1000" in repr(t)


def test_spec_for_scales_nodes_and_edges_only():
    assert spec_for("small") is PRESETS["small"]
    half = spec_for("products-like", 0.5)
    base = PRESETS["products-like"]
    assert half.num_nodes == round(base.num_nodes * 0.5)
    assert half.num_edges == round(base.num_edges * 0.5)
    assert (half.num_features, half.num_classes) == (base.num_features, base.num_classes)
    assert (half.train_frac, half.homophily) == (base.train_frac, base.homophily)
    assert half.name == "products-like@0.5"
    assert spec_for("tiny", 3).num_nodes == 3_000


@pytest.mark.parametrize(
    ("preset", "scale", "match"),
    [
        ("huge", 1.0, "unknown synthetic preset 'huge'; valid presets: tiny, small, products-like"),
        ("tiny", 0.0, r"'scale' must be a finite number > 0 \(got 0.0\).*valid presets: tiny"),
        ("tiny", -2, r"got -2"),
        ("tiny", math.nan, r"got nan"),
        ("tiny", 1e-4, r"leaves 0 nodes of preset 'tiny'.*use scale >= 0.002"),
    ],
)
def test_spec_for_errors(preset, scale, match):
    with pytest.raises(DatasetError, match=match):
        spec_for(preset, scale)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"num_nodes": 0}, r"'num_nodes' must be an integer >= 1 \(got 0\)"),
        ({"num_features": 2.5}, r"'num_features' must be an integer >= 1 \(got 2.5\)"),
        ({"num_edges": -1}, r"'num_edges' must be an integer >= 0"),
        ({"train_frac": 1.5}, r"'train_frac' must be a fraction in \[0, 1\] \(got 1.5\)"),
        ({"train_frac": 0.6, "val_frac": 0.3}, r"sum to <= 1 .* = 1.2\); lower one"),
        ({"homophily": -0.1}, r"'homophily' must be a probability in \[0, 1\] \(got -0.1\)"),
        ({"degree_exponent": 1.0}, r"'degree_exponent' must lie in \(1, 100\] \(got 1.0\)"),
        ({"feature_noise": math.inf}, r"'feature_noise' must be a finite number >= 0"),
        ({"label_noise": 1.5}, r"'label_noise' must be a probability in \[0, 1\] \(got 1.5\)"),
        ({"class_skew": -1}, r"'class_skew' must lie in \[0, 10\] \(got -1\)"),
        ({"class_skew": math.nan}, r"'class_skew' must lie in \[0, 10\] \(got nan\)"),
        ({"name": ""}, r"'name' must be a non-empty string"),
    ],
)
def test_spec_validation_errors(change, match):
    with pytest.raises(DatasetError, match=match):
        _spec(**change)


def test_bad_arguments_raise_dataset_errors(tmp_path):
    with pytest.raises(DatasetError, match=r"'seed' must be an integer >= 0 \(got -1\)"):
        generate_graph(PRESETS["tiny"], seed=-1)
    with pytest.raises(DatasetError, match=r"'chunk_edges' must be an integer >= 1 \(got 0\)"):
        generate_graph(PRESETS["tiny"], chunk_edges=0)
    with pytest.raises(DatasetError, match="'spec' must be a SyntheticSpec .* valid presets"):
        generate_graph("tiny")  # type: ignore[arg-type]
    with pytest.raises(DatasetError, match="unknown synthetic preset 'nope'"):
        prepare_synthetic(tmp_path / "a", "nope")
    with pytest.raises(DatasetError, match="'scale' applies to named presets only"):
        prepare_synthetic(tmp_path / "b", PRESETS["tiny"], scale=2.0)
    with pytest.raises(DatasetError, match="'feature_dtype' per node type applies to typed"):
        prepare_synthetic(tmp_path / "c", "tiny", feature_dtype={"node": "bf16"})
    assert not list(tmp_path.iterdir())


def test_spec_for_and_generator_version_cover_every_kind():
    kinds = {type(spec_for(name, 0.5)) for name in PRESETS}
    assert kinds == {SyntheticSpec, TemporalSpec, TypedSyntheticSpec}
    assert spec_for("temporal-like", 0.5).base.num_nodes == 500_000
    assert spec_for("mag-like", 0.5).name == "mag-like@0.5"
    versions = {name: generator_version(name) for name in PRESETS}
    assert versions["tiny"] == versions["papers-like"] == hom.GENERATOR_VERSION
    assert generator_version(spec_for("small", 0.1)) == versions["small"]
    with pytest.raises(DatasetError, match="unknown synthetic preset 'nope'"):
        generator_version("nope")


# ------------------------------------------------------------------------- determinism
def test_same_seed_is_bit_identical_and_seeds_differ(tiny):
    _assert_same(tiny, generate_graph(PRESETS["tiny"], seed=0))
    other = generate_graph(PRESETS["tiny"], seed=1)
    assert not np.array_equal(tiny.y, other.y)
    assert not np.array_equal(tiny.x, other.x)
    assert tiny.num_edges != other.num_edges or not np.array_equal(tiny.indices, other.indices)


def test_result_does_not_depend_on_chunk_size():
    # 8 edge blocks, 2 feature blocks; skewed classes and label noise
    spec = _spec(num_nodes=20_000, num_edges=260_000, class_skew=1.0, label_noise=0.2)
    assert spec.num_draws > 7 * EDGE_BLOCK and spec.num_nodes > FEATURE_BLOCK
    ref = generate_graph(spec, seed=3, chunk_edges=10**9)
    for chunk in (1, 3 * 2 * EDGE_BLOCK + 5, 100_000):
        _assert_same(ref, generate_graph(spec, seed=3, chunk_edges=chunk))


@pytest.mark.parametrize("skew", [0.0, 1.5])
def test_vectorised_draws_match_a_naive_scalar_sampler(skew):
    spec = _spec(num_nodes=500, num_classes=6, homophily=0.7, class_skew=skew)
    z, w = hom.node_draws(spec, seed=5)
    nodes = hom.node_tables(spec, z, w.copy())
    u = philox(5, hom._EDGE_STREAM, 0).random((3, EDGE_BLOCK))
    src, dst = hom._draw_edges(spec, 5, nodes, 0, 1)
    # naive reference: linear scans over the clipped weights, one draw at a time
    h = spec.homophily
    wc = np.minimum(w, max(w.sum() / math.sqrt(spec.num_edges), 1.0))
    members = [np.flatnonzero(z == c) for c in range(spec.num_classes)]

    def pick(cands: np.ndarray, r: float) -> int:
        t = r * sum(float(wc[v]) for v in cands)
        acc = 0.0
        for v in cands:
            acc += float(wc[v])
            if acc > t:
                return int(v)
        return int(cands[-1])

    everyone = np.concatenate(members)
    ref_src, ref_dst = [], []
    for i in range(300):
        s = pick(everyone, u[0, i])
        c = int(z[s])
        if u[1, i] < h:
            d = pick(members[c], u[2, i])
        else:  # any node of another community, proportional to its weight
            d = pick(np.concatenate([m for k, m in enumerate(members) if k != c]), u[2, i])
        if s != d:
            ref_src.append(s)
            ref_dst.append(d)
    k = len(ref_src)
    assert np.array_equal(src[:k], ref_src) and np.array_equal(dst[:k], ref_dst)


def test_class_order_is_a_stable_argsort():
    z = np.random.default_rng(0).integers(0, 7, 3 * NODE_BLOCK + 11).astype(np.int8)
    sizes = np.bincount(z, minlength=9)
    lo = np.cumsum(sizes) - sizes
    assert np.array_equal(hom._class_order(z, lo), np.argsort(z, kind="stable"))


@pytest.mark.parametrize("gamma", [1.3, 2.5, 50.0])
def test_guide_table_lookup_equals_searchsorted_including_ties(gamma):
    spec = _spec(num_nodes=7_000, degree_exponent=gamma)
    z, w = hom.node_draws(spec, seed=2)
    nodes = hom.node_tables(spec, z, w)
    cum = nodes.cum
    t = np.concatenate(
        [
            np.random.default_rng(0).random(50_000) * cum[-1],
            cum,  # exact ties: the answer is the next position
            np.nextafter(cum, 0.0),
            np.arange(nodes.guide.size) * nodes.width,  # bucket edges
            [0.0, cum[-1], np.nextafter(cum[-1], np.inf)],
        ]
    )
    assert np.array_equal(nodes.lookup(t), np.searchsorted(cum, t, side="right"))


# ------------------------------------------------------------------------- structure
def test_graph_is_valid_symmetric_simple_and_sorted(tiny):
    Graph(**{k: getattr(tiny, k) for k in ARRAYS}, num_classes=4, validate="full")
    n = tiny.num_nodes
    assert tiny.indices.dtype == np.int32 and tiny.indptr.dtype == np.int64
    assert tiny.x.dtype == np.float32 and tiny.y.dtype == np.int64 and tiny.num_classes == 4
    src, dst = tiny.edges()
    assert not np.any(src == dst), "self loop"
    a = sp.coo_matrix((np.ones(src.size), (src, dst)), shape=(n, n)).tocsr()
    assert a.max() == 1.0, "duplicate edge"  # coo -> csr sums duplicates
    assert (a != a.T).nnz == 0, "not symmetric"
    assert np.all((np.diff(src) > 0) | (np.diff(dst) != 0)), "neighbours not sorted by ID"
    assert 0.85 * 10_000 < tiny.num_edges <= 10_000
    masks = np.stack([tiny.train_mask, tiny.val_mask, tiny.test_mask])
    assert masks.sum(0).max() == 1 and masks.sum() == n  # disjoint, and fractions sum to 1
    assert abs(tiny.train_mask.mean() - 0.6) < 0.05 and abs(tiny.val_mask.mean() - 0.2) < 0.04


def test_degrees_are_heavy_tailed_and_follow_the_exponent():
    flat = generate_graph(_spec(num_nodes=5_000, num_edges=100_000, degree_exponent=50.0))
    skew = generate_graph(_spec(num_nodes=5_000, num_edges=100_000, degree_exponent=2.1))
    d_flat, d_skew = flat.in_degrees(), skew.in_degrees()
    assert d_skew.max() > 10 * d_skew.mean()
    assert d_flat.max() < 3 * d_flat.mean()
    # Chung-Lu cap: no expected degree above ~sqrt(num_edges)
    assert d_skew.max() < 2 * math.sqrt(100_000)
    # the top 1% of nodes hold a far larger share of edges in the skewed graph
    top = lambda d: np.sort(d)[-50:].sum() / d.sum()  # noqa: E731
    assert top(d_skew) > 3 * top(d_flat)


@pytest.mark.parametrize("h", [0.0, 0.5, 0.8, 1.0])
def test_measured_homophily_matches_the_spec(h):
    g = generate_graph(_spec(homophily=h))
    src, dst = g.edges()
    measured = float(np.mean(g.y[src] == g.y[dst]))
    if h in (0.0, 1.0):
        assert measured == h
    else:
        assert abs(measured - h) < 0.03, measured


def test_edge_cases_single_class_no_edges_and_empty_classes():
    one = generate_graph(_spec(num_classes=1, num_nodes=50, num_edges=400))
    assert one.num_edges > 0 and np.all(one.y == 0)
    none = generate_graph(_spec(num_edges=1))
    assert none.num_edges == 0 and none.indptr.shape == (3_001,)
    sparse = generate_graph(_spec(num_nodes=6, num_classes=40, num_edges=60, homophily=0.0))
    src, dst = sparse.edges()
    assert sparse.num_edges > 0 and np.all(sparse.y[src] != sparse.y[dst])


# ------------------------------------------------------------------------- features and labels
def test_features_are_centroid_plus_noise_of_the_configured_scale():
    g = generate_graph(_spec(num_nodes=4_000, num_features=32, feature_noise=2.5), seed=1)
    x = g.x.astype(np.float64)
    s = np.sqrt(1 + 2.5**2)  # features are scaled to unit variance, same signal-to-noise ratio
    resid = np.concatenate([x[g.y == c] - x[g.y == c].mean(0) for c in range(5)])
    assert abs(resid.std() - 2.5 / s) < 0.05 / s
    centroids = np.stack([x[g.y == c].mean(0) for c in range(5)])
    assert abs(centroids.std() - 1.0 / s) < 0.25 / s  # unit-variance class centroids
    assert abs(x.std() - 1.0) < 0.05


def _linear_accuracy(feat: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray) -> float:
    """Test accuracy of an L2-regularised softmax regression fitted with L-BFGS (float64)."""
    mu, sd = feat[train].mean(0), feat[train].std(0) + 1e-9
    x = np.hstack([(feat - mu) / sd, np.ones((feat.shape[0], 1))])
    c = int(y.max()) + 1
    onehot = np.eye(c)[y[train]]

    def loss(flat: np.ndarray) -> tuple[float, np.ndarray]:
        w = flat.reshape(x.shape[1], c)
        z = x[train] @ w
        z -= z.max(1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(1, keepdims=True)
        value = -np.mean(np.log(p[np.arange(train.size), y[train]] + 1e-300)) + 1e-3 * (w**2).sum()
        grad = x[train].T @ (p - onehot) / train.size + 2e-3 * w
        return value, grad.ravel()

    res = minimize(loss, np.zeros(x.shape[1] * c), jac=True, method="L-BFGS-B")
    w = res.x.reshape(x.shape[1], c)
    return float(np.mean((x[test] @ w).argmax(1) == y[test]))


def test_labels_need_the_graph(tiny):
    src, dst = tiny.edges()
    x = tiny.x.astype(np.float64)
    agg = np.zeros_like(x)
    np.add.at(agg, dst, x[src])
    mean_nbr = agg / np.maximum(tiny.in_degrees(), 1)[:, None]
    train, test = np.flatnonzero(tiny.train_mask), np.flatnonzero(tiny.test_mask)
    mlp = _linear_accuracy(x, tiny.y, train, test)
    gnn = _linear_accuracy(np.hstack([x, mean_nbr]), tiny.y, train, test)
    assert 0.35 < mlp < 0.8, mlp  # better than chance (0.25), far from perfect
    assert gnn >= mlp + 0.10, (mlp, gnn)


def test_class_skew_and_label_noise():
    base = _spec(num_nodes=40_000, num_edges=100_000, num_classes=6, class_skew=1.0)
    p = syn.class_probabilities(base)
    assert np.allclose(p, (1 / np.arange(1, 7)) / (1 / np.arange(1, 7)).sum())
    clean = generate_graph(base, seed=4)
    assert np.abs(np.bincount(clean.y, minlength=6) / 40_000 - p).max() < 0.01
    rho = 0.3
    noisy = generate_graph(dataclasses.replace(base, label_noise=rho), seed=4)
    # the labels alone change: communities, features and edges are the same draws
    for name in ARRAYS:
        if name != "y":
            assert np.array_equal(getattr(clean, name), getattr(noisy, name)), name
    changed = float(np.mean(noisy.y != clean.y))  # a redraw may land on the same class
    assert abs(changed - rho * (1 - (p**2).sum())) < 0.01, changed
    assert np.abs(np.bincount(noisy.y, minlength=6) / 40_000 - p).max() < 0.01
    # the graph follows the communities: measured homophily drops by about the redrawn share
    src, dst = noisy.edges()
    assert (
        float(np.mean(noisy.y[src] == noisy.y[dst]))
        < float(np.mean(clean.y[src] == clean.y[dst])) - 0.2
    )


# ------------------------------------------------------------------------- on disk
def test_prepare_writes_the_same_arrays_as_generate(tmp_path):
    calls = []
    spec = spec_for("tiny", 2.0)
    out = prepare_synthetic(
        tmp_path / "ds",
        "tiny",
        scale=2.0,
        seed=7,
        chunk_edges=1,
        progress=lambda done, total: calls.append((done, total)),
    )
    g = open_dataset(out, validate="full")
    assert isinstance(g.indices, np.memmap)
    _assert_same(g, generate_graph(spec, seed=7))
    meta = read_meta(out)
    assert (meta["source"], meta["preset"], meta["scale"], meta["seed"]) == (
        "synthetic",
        "tiny",
        2.0,
        7,
    )
    assert meta["name"] == "tiny@2" and meta["num_classes"] == 4
    assert meta["spec"]["homophily"] == spec.homophily
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{a}.npy" for a in ARRAYS] + ["meta.json", "verified.json"]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]
    done = [d for d, _ in calls]
    assert len(calls) > 3 and done == sorted(done) and calls[-1][0] == calls[-1][1]
    assert len({t for _, t in calls}) == 1
    with pytest.raises(DatasetError, match="already exists"):
        prepare_synthetic(out, "tiny", scale=2.0)
    prepare_synthetic(out, "tiny", overwrite=True)
    assert read_meta(out)["scale"] == 1.0


def test_prepare_memory_is_bounded_by_the_output_size(tmp_path):
    spec = _spec(num_nodes=20_000, num_edges=1_000_000, num_features=16)
    tracemalloc.start()
    try:
        out = prepare_synthetic(tmp_path / "ds", spec, chunk_edges=1 << 16)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    out_bytes = sum(p.stat().st_size for p in out.iterdir())
    assert out_bytes > 4e6
    # holding the edge list in memory (two int64 arrays of E) alone would exceed this bound
    assert peak < out_bytes + (4 << 20), (peak, out_bytes)
    assert peak < 3 * out_bytes + (64 << 20)


def test_node_tables_take_about_30_bytes_per_node(tmp_path):
    """Only the communities, weights, sampling tables and CSC offsets are ``[N]`` arrays in RAM
    (about 29 bytes per node below 128 classes; generator version 2 held ~77)."""
    n = 200_000
    spec = _spec(num_nodes=n, num_edges=2 * n, num_features=1, num_classes=47, label_noise=0.2)
    tracemalloc.start()
    try:
        prepare_synthetic(tmp_path / "ds", spec, chunk_edges=1 << 15)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 * n + (4 << 20), (peak, peak / n)


def test_edge_features_are_deterministic_informative_and_written(tmp_path):
    spec = dataclasses.replace(syn.spec_for("tiny", 0.3), edge_features=3)
    g = syn.generate_graph(spec, seed=2)
    plain = syn.generate_graph(dataclasses.replace(spec, edge_features=0), seed=2)
    assert plain.edge_attr is None and np.array_equal(plain.indices, g.indices)  # nothing else
    assert g.edge_attr.shape == (g.num_edges, 3) and g.edge_attr.dtype == np.float32
    again = syn.generate_graph(spec, seed=2, chunk_edges=2 * EDGE_BLOCK)
    np.testing.assert_array_equal(again.edge_attr, g.edge_attr)
    # column 0 carries the signal: higher on edges whose ends share a label
    src, dst = g.edges()
    same = g.y[src] == g.y[dst]
    assert g.edge_attr[same, 0].mean() > g.edge_attr[~same, 0].mean() + 0.5
    out = syn.prepare_synthetic(tmp_path / "ds", "tiny", 0.3, seed=2, edge_features=3)
    np.testing.assert_array_equal(open_dataset(out).edge_attr, g.edge_attr)
