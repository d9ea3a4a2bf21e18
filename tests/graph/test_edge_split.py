"""Edge splits: fractions, both directions together, no leakage, stored with the dataset."""

import numpy as np
import pytest

from fleetgnn.errors import ConfigError, DatasetError
from fleetgnn.graph import from_edges
from fleetgnn.graph.edge_split import edge_split_for, load_edge_split, save_edge_split, split_edges
from fleetgnn.graph.synthetic import generate_graph, spec_for


def _keys(pairs: np.ndarray, n: int) -> set[int]:
    return set((pairs[0] * n + pairs[1]).tolist())


@pytest.fixture(scope="module")
def graph():
    return generate_graph(spec_for("tiny", 0.5), seed=2).to_undirected()


def test_undirected_split_keeps_pairs_together_and_out_of_message_passing(graph):
    sp = split_edges(graph, 0.05, 0.1, seed=0)
    n = graph.num_nodes
    assert sp.undirected
    m = sum(sp.pos[s].shape[1] for s in ("train", "val", "test"))
    src, dst = graph.edges()
    assert m == int((src != dst).sum()) // 2  # every undirected pair once
    assert sp.pos["val"].shape[1] == int(0.05 * m) and sp.pos["test"].shape[1] == int(0.1 * m)
    mp_src, mp_dst = sp.train_graph.edges()
    mp = set((mp_src.astype(np.int64) * n + mp_dst).tolist())
    for s in ("val", "test"):
        u, v = sp.pos[s]
        assert not (_keys(np.stack([u, v]), n) | _keys(np.stack([v, u]), n)) & mp, s
        assert (u < v).all()
    t = sp.pos["train"]
    assert _keys(t, n) | _keys(t[::-1], n) == mp  # both directions of every training pair
    assert sp.train_graph.x is graph.x or np.array_equal(sp.train_graph.x, graph.x)


def test_negatives_are_non_edges_and_the_split_is_seeded(graph):
    sp = split_edges(graph, 0.05, 0.1, seed=0)
    n = graph.num_nodes
    src, dst = graph.edges()
    edges = set((src.astype(np.int64) * n + dst).tolist())
    for s in ("val", "test"):
        neg = sp.neg[s]
        assert neg.shape == sp.pos[s].shape
        assert not _keys(neg, n) & edges and (neg[0] != neg[1]).all()
        assert len(_keys(neg, n)) == neg.shape[1]  # distinct
        assert sp.neg_dst[s].shape[0] == sp.pos[s].shape[1]
    again = split_edges(graph, 0.05, 0.1, seed=0)
    other = split_edges(graph, 0.05, 0.1, seed=1)
    assert np.array_equal(again.pos["val"], sp.pos["val"])
    assert not np.array_equal(other.pos["val"], sp.pos["val"])


def test_directed_graph_splits_edges_one_by_one():
    g = from_edges(np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9] * 3), np.arange(30) % 7 + 10)
    sp = split_edges(g, 0.2, 0.2, seed=0)
    assert not sp.undirected
    assert sum(sp.pos[s].shape[1] for s in ("train", "val", "test")) == len(
        set(zip(g.edges()[0].tolist(), g.edges()[1].tolist(), strict=True))
    )


def test_split_is_stored_with_the_dataset_and_read_back(graph, tmp_path):
    sp = edge_split_for(graph, tmp_path, 0.05, 0.1, seed=3)
    where = tmp_path / "edge_splits" / sp.name
    assert (where / "meta.json").exists()
    back = load_edge_split(graph, where)
    for s in ("train", "val", "test"):
        assert np.array_equal(back.pos[s], sp.pos[s])
    assert np.array_equal(back.neg["test"], sp.neg["test"])
    assert np.array_equal(back.train_graph.indices, sp.train_graph.indices)
    assert edge_split_for(graph, tmp_path, 0.05, 0.1, seed=3).name == sp.name
    save_edge_split(sp, tmp_path / "copy")


def test_bad_fractions_are_one_line_errors(graph):
    with pytest.raises(ConfigError, match="sum to less than 1"):
        split_edges(graph, 0.5, 0.5)
    with pytest.raises(DatasetError, match="leave a split empty"):
        split_edges(from_edges(np.array([0, 1]), np.array([1, 2])), 0.1, 0.1)


# ------------------------------------------------------------------------------- streaming
def _all_arrays(sp):
    out = {f"{s}_pos": sp.pos[s] for s in ("train", "val", "test")}
    out |= {f"{s}_neg": sp.neg[s] for s in ("val", "test")}
    out |= {f"{s}_neg_dst": sp.neg_dst[s] for s in ("val", "test")}
    return out | {"indptr": sp.train_graph.indptr, "indices": sp.train_graph.indices}


def _unsorted_directed(n=300, e=3000, seed=0):
    """A directed multigraph with loops, duplicates and unsorted segments (some reverses too)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    src = np.concatenate([src, src[:50], dst[:200]])
    dst = np.concatenate([dst, dst[:50], src[:200]])
    return from_edges(src, dst, n)


@pytest.mark.parametrize("kind", ["undirected", "directed"])
def test_split_does_not_depend_on_the_chunk_size(graph, kind):
    g = graph if kind == "undirected" else _unsorted_directed()
    a = split_edges(g, 0.05, 0.1, seed=4, chunk=37)
    b = split_edges(g, 0.05, 0.1, seed=4, chunk=1 << 20)
    assert a.undirected == (kind == "undirected")
    for name, arr in _all_arrays(a).items():
        assert np.array_equal(arr, _all_arrays(b)[name]), name


def test_directed_split_drops_loops_and_duplicates_and_holds_out_edges():
    g = _unsorted_directed()
    n = g.num_nodes
    sp = split_edges(g, 0.1, 0.1, seed=1, chunk=64)
    src, dst = g.edges()
    distinct = {(int(s), int(d)) for s, d in zip(src, dst, strict=True) if s != d}
    parts = {s: set(zip(*sp.pos[s].tolist(), strict=True)) for s in ("train", "val", "test")}
    assert parts["train"] | parts["val"] | parts["test"] == distinct
    assert sum(len(p) for p in parts.values()) == len(distinct)
    m = len(distinct)
    assert len(parts["val"]) == int(0.1 * m) and len(parts["test"]) == int(0.1 * m)
    t_src, t_dst = sp.train_graph.edges()
    assert set(zip(t_src.tolist(), t_dst.tolist(), strict=True)) == parts["train"]
    both = distinct | {(d, s_) for s_, d in distinct}
    for s in ("val", "test"):  # GAE negatives: no edge in either direction, distinct
        neg = sp.neg[s]
        assert not {(int(a), int(b)) for a, b in neg.T} & both
        assert len(_keys(neg, n)) == neg.shape[1]
    assert not _keys(sp.neg["val"], n) & _keys(sp.neg["test"], n)  # disjoint


def test_pairs_land_together_in_every_chunking(graph):
    n = graph.num_nodes
    for chunk in (5, 101):
        sp = split_edges(graph, 0.2, 0.2, seed=7, chunk=chunk)
        mp_src, mp_dst = sp.train_graph.edges()
        mp = set((mp_src.astype(np.int64) * n + mp_dst).tolist())
        rev = set((mp_dst.astype(np.int64) * n + mp_src).tolist())
        assert mp == rev  # the message-passing graph keeps both directions or neither
        for s in ("val", "test"):
            u, v = sp.pos[s]
            assert not (_keys(np.stack([u, v]), n) | _keys(np.stack([v, u]), n)) & mp
        seg = np.diff(sp.train_graph.indptr)  # sorted, distinct in-neighbours per node
        ind = sp.train_graph.indices
        inner = np.ones(ind.size, bool)
        inner[sp.train_graph.indptr[:-1][seg > 0]] = False
        assert (np.diff(ind.astype(np.int64))[inner[1:]] > 0).all()


def test_split_streams_in_bounded_memory(tmp_path):
    """On a memory-mapped dataset several times the chunk, no allocation grows with N or E."""
    import tracemalloc

    from fleetgnn.graph import write_dataset
    from fleetgnn.graph.dataset import open_dataset
    from fleetgnn.graph.edge_split import write_edge_split

    rng = np.random.default_rng(0)
    n, e = 200_000, 1_000_000
    g = from_edges(rng.integers(0, n, e), rng.integers(0, n, e), n).to_undirected()
    ds = open_dataset(write_dataset(g, tmp_path / "ds"))
    del g
    chunk = 1 << 13  # the graph holds ~240 chunks of edges
    tracemalloc.start()
    try:
        out = write_edge_split(ds, tmp_path / "ds" / "edge_splits" / "s", 0.05, 0.1, chunk=chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ds.num_edges > 200 * chunk
    # ~15 int64 work arrays per chunk edge plus the two 512 KiB histograms
    assert peak < 160 * chunk + (1 << 20), peak
    assert peak < 2 * ds.num_edges, peak  # the int64 edge list alone is 16 bytes per edge
    sp = load_edge_split(ds, out)
    assert sum(sp.pos[s].shape[1] for s in ("train", "val", "test")) * 2 == ds.num_edges - int(
        (ds.edges()[0] == ds.edges()[1]).sum()
    )
    assert isinstance(sp.train_graph.indices, np.memmap)


def _digest(root) -> str:
    import hashlib
    import json

    h = hashlib.sha256()
    for p in sorted(root.glob("*.npy")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    h.update(json.dumps(json.loads((root / "meta.json").read_text()), sort_keys=True).encode())
    return h.hexdigest()[:16]


def test_split_files_are_the_ones_always_written(graph, tmp_path):
    """The bytes of a graph's split and of a relation's (with and without a reverse) are pinned:
    splits saved with existing datasets stay the ones a new draw gives."""
    from fleetgnn.graph.edge_split import write_edge_split
    from fleetgnn.graph.hetero_toy import toy_mag

    out = write_edge_split(graph, tmp_path / "u", 0.05, 0.1, 3, chunk=700)
    assert _digest(out) == "3cb13d35868eceee"
    d = from_edges(np.arange(60) % 13, np.arange(60) * 7 % 29, 30)
    assert _digest(write_edge_split(d, tmp_path / "d", 0.2, 0.2, 1)) == "ac17351d7ed16f8d"
    mag = toy_mag(num_papers=60, num_authors=30, num_fields=5, featureless_fields=True, seed=4)
    pinned = {"writes": "ebd14a073de7a210", "cites": "d179b111fa3b22b1"}
    pinned["rev_writes"] = "5fc382b8e176f383"
    for rel, digest in pinned.items():
        out = write_edge_split(mag, tmp_path / rel, 0.15, 0.15, 3, relation=rel)
        assert _digest(out) == digest, rel


def test_relation_is_required_on_a_typed_graph_and_refused_on_a_homogeneous_one(graph):
    from fleetgnn.graph.hetero_toy import toy_mag

    with pytest.raises(ConfigError, match="needs the relation.*author,writes,paper"):
        split_edges(toy_mag(num_papers=20, num_authors=10, num_fields=3), 0.1, 0.1)
    with pytest.raises(ConfigError, match="relation='writes' is for typed graphs"):
        split_edges(graph, 0.1, 0.1, relation="writes")


def test_typed_split_in_memory_equals_the_saved_one(tmp_path):
    from fleetgnn.graph.hetero_toy import toy_mag

    mag = toy_mag(num_papers=60, num_authors=30, num_fields=5, featureless_fields=True, seed=4)
    mem = split_edges(mag, 0.15, 0.15, seed=3, relation="writes")
    saved = edge_split_for(mag, tmp_path, 0.15, 0.15, seed=3, relation="author,writes,paper")
    assert mem.relation == saved.relation == ("author", "writes", "paper") and not mem.undirected
    assert mem.name == saved.name == "author.writes.paper-val0.15-test0.15-seed3"
    assert not isinstance(mem.pos["val"], np.memmap) and isinstance(saved.pos["val"], np.memmap)
    for s in ("train", "val", "test"):
        np.testing.assert_array_equal(mem.pos[s], saved.pos[s])
    for rel in mem.train_graph.schema.relations:
        for a, b in zip(mem.train_graph.csc[rel], saved.train_graph.csc[rel], strict=True):
            np.testing.assert_array_equal(a, b)
    copy = load_edge_split(mag, save_edge_split(mem, tmp_path / "copy"))
    assert copy.reverse == ("paper", "rev_writes", "author")
    np.testing.assert_array_equal(copy.neg_dst["test"], mem.neg_dst["test"])
