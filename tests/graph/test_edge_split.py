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
