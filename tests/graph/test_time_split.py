"""The time split of link prediction: past trains, future judges, the training graph stays timed."""

import numpy as np
import pytest

from fleetgnn.errors import ConfigError, DatasetError
from fleetgnn.graph.csc import from_edges
from fleetgnn.graph.edge_split import split_edges
from fleetgnn.graph.edge_time import check_time_order
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.graph.time_split import split_by_time


@pytest.fixture(scope="module")
def graph():
    return generate_graph(spec_for("temporal-like", 0.001), seed=3)


def _triples(g):
    """Sorted ``(src, dst, time)`` rows of every edge of ``g``."""
    dst = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    rows = np.stack([np.asarray(g.indices, np.int64), dst, np.asarray(g.edge_time)], 1)
    return rows[np.lexsort(rows.T[::-1])]


def test_train_before_val_before_test_and_the_training_graph_holds_only_the_past(graph):
    s = split_by_time(graph, 0.1, 0.2, seed=1)
    val_from, test_from = s.cuts
    t = s.pos_time
    assert s.undirected
    assert t["train"].max() < val_from <= t["val"].min() <= t["val"].max() < test_from
    assert test_from <= t["test"].min()
    for name in ("train", "val", "test"):  # time order, endpoints ordered once per pair
        assert np.all(np.diff(t[name]) >= 0) and np.all(s.pos[name][0] < s.pos[name][1])
    # the fractions hold up to ties at the cuts
    m = sum(s.pos[n].shape[1] for n in ("train", "val", "test"))
    assert abs(s.pos["test"].shape[1] - 0.2 * m) < 0.05 * m
    # the training graph: exactly the original edges before val_from (both directions), timed
    tg = s.train_graph
    check_time_order(tg.indptr, tg.edge_time)
    rows = _triples(graph)
    want = rows[(rows[:, 2] < val_from) & (rows[:, 0] != rows[:, 1])]
    assert np.array_equal(_triples(tg), want)
    assert tg.edge_time.max() < val_from
    # no held-out event is a training edge at its time
    held = np.concatenate([np.stack([s.pos[n][0], s.pos[n][1], t[n]], 1) for n in ("val", "test")])
    train_keys = {tuple(r) for r in _triples(tg)}
    assert not any(tuple(r) in train_keys for r in held)
    # every training positive (and its reverse) is in the training graph
    for a, b, tt in zip(*s.pos["train"], t["train"], strict=True):
        assert (a, b, tt) in train_keys and (b, a, tt) in train_keys
    assert np.array_equal(tg.x, graph.x) and np.array_equal(tg.y, graph.y)


def test_negatives_belong_to_their_positive_and_are_keyed(graph):
    s = split_by_time(graph, 0.1, 0.2, seed=1, ranking_negatives=7)
    again = split_by_time(graph, 0.1, 0.2, seed=1, ranking_negatives=7)
    other = split_by_time(graph, 0.1, 0.2, seed=2, ranking_negatives=7)
    for name in ("val", "test"):
        p = s.pos[name].shape[1]
        assert s.neg[name].shape == (2, p) and s.neg_dst[name].shape == (p, 7)
        assert np.array_equal(s.neg[name][0], s.pos[name][0])  # the positive's source
        assert s.neg_dst[name].max() < graph.num_nodes and s.neg[name].min() >= 0
        assert np.array_equal(s.neg_dst[name], again.neg_dst[name])
        assert not np.array_equal(s.neg_dst[name], other.neg_dst[name])


def test_cut_times_and_a_directed_graph():
    src = np.array([0, 1, 2, 3, 0, 2, 1, 3])
    dst = np.array([1, 2, 3, 0, 2, 1, 3, 2])
    time = np.array([1, 2, 3, 4, 5, 6, 7, 8])
    g = from_edges(src, dst, 4, edge_time=time, node_data={"x": np.eye(4, dtype=np.float32)})
    s = split_by_time(g, cuts=(4, 7))
    assert not s.undirected and s.cuts == (4, 7) and s.name == "time-from4-7"
    assert s.pos_time["train"].tolist() == [1, 2, 3]
    assert s.pos_time["val"].tolist() == [4, 5, 6]
    assert s.pos_time["test"].tolist() == [7, 8]
    assert s.pos["val"][:, 0].tolist() == [3, 0]
    assert s.train_graph.num_edges == 3 and s.train_graph.edge_time.max() == 3


def test_refusals(graph):
    with pytest.raises(DatasetError, match="no edge times .* train.temporal=off"):
        split_by_time(graph.replace(edge_time=None))
    with pytest.raises(ConfigError, match=r"val_from < test_from \(got \(9, 9\)\)"):
        split_by_time(graph, cuts=(9, 9))
    with pytest.raises(ConfigError, match="must each lie in"):
        split_by_time(graph, 0.6, 0.5)
    with pytest.raises(
        DatasetError, match=r"leaves a split empty .* 0 test events; times 0..999\); pick cut"
    ):
        split_by_time(graph, cuts=(500, 501 + 10**6))
    with pytest.raises(ConfigError, match="'ranking_negatives' must be an int >= 1"):
        split_by_time(graph, ranking_negatives=0)
    # the random split points to this one
    with pytest.raises(DatasetError, match=r"split_by_time \(train.temporal=auto or on\)") as e:
        split_edges(graph)
    assert "\n" not in str(e.value)
