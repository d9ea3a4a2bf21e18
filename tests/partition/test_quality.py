import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fleetgnn.partition.quality as quality_mod
from fleetgnn.errors import PartitionError
from fleetgnn.graph import from_edges
from fleetgnn.partition import PartitionBook, evaluate, partition


def _naive(g, part_of, p):
    """Edge-by-edge reference with Python sets."""
    src, dst = g.edges()
    cut = 0
    copies = set()
    for u, v in zip(src.tolist(), dst.tolist(), strict=True):
        if part_of[u] != part_of[v]:
            cut += 1
            copies.add((u, int(part_of[v])))
    nodes = [0] * p
    edges = [0] * p
    train = [0] * p
    for v in range(g.num_nodes):
        q = int(part_of[v])
        nodes[q] += 1
        edges[q] += int(g.indptr[v + 1] - g.indptr[v])
        train[q] += int(g.train_mask[v])
    return cut, copies, nodes, edges, train


def _max_mean(xs):
    mean = sum(xs) / len(xs)
    return max(xs) / mean if mean else 1.0


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 30),
    e=st.integers(0, 120),
    p=st.integers(1, 6),
    seed=st.integers(0, 2**16),
    small_chunks=st.booleans(),
)
def test_matches_naive_computation(graphs, n, e, p, seed, small_chunks):
    g = graphs.random(seed, n, e, hub=seed % 2 == 0)
    part_of = np.random.default_rng(seed + 1).integers(0, p, n)
    book = PartitionBook.from_part_of(part_of, p, "test")
    if small_chunks:  # exercise the chunked edge scan and the multi-pass replica bitmap
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(quality_mod, "_EDGE_CHUNK", 7)
            mp.setattr(quality_mod, "_BITMAP_BYTES", 2 * n)
            q = evaluate(g, book)
    else:
        q = evaluate(g, book)
    cut, copies, nodes, edges, train = _naive(g, part_of, p)
    assert q.edge_cut == cut
    assert q.local_edge_ratio == pytest.approx(1 - cut / e if e else 1.0, abs=1e-12)
    assert q.replication_factor == pytest.approx((n + len(copies)) / n, abs=1e-12)
    assert list(q.part_nodes) == nodes
    assert list(q.part_edges) == edges
    assert list(q.part_train_nodes) == train
    assert q.node_balance == pytest.approx(_max_mean(nodes))
    assert q.edge_balance == pytest.approx(_max_mean(edges))
    assert q.train_balance == pytest.approx(_max_mean(train))
    mean_e = sum(edges) / p
    assert q.edge_skew == pytest.approx((max(edges) - min(edges)) / mean_e if mean_e else 0.0)
    assert (q.num_parts, q.num_nodes, q.num_edges, q.method) == (p, n, e, "test")


def test_single_part_and_hand_example():
    # 0 -> 1, 0 -> 2, 1 -> 2, 2 -> 0 ; parts {0, 1} and {2}
    g = from_edges(np.array([0, 0, 1, 2]), np.array([1, 2, 2, 0]), 3)
    book = PartitionBook.from_part_of(np.array([0, 0, 1]), 2, "test")
    q = evaluate(g, book)
    assert q.edge_cut == 3  # 0->2, 1->2, 2->0
    assert q.local_edge_ratio == pytest.approx(0.25)
    # copies: 0 in part 1, 1 in part 1, 2 in part 0
    assert q.replication_factor == pytest.approx((3 + 3) / 3)
    assert q.part_edges == (2, 2) and q.part_nodes == (2, 1)  # in-edges of owned nodes
    assert q.part_train_nodes is None and q.train_balance is None
    one = evaluate(g, PartitionBook.from_part_of(np.zeros(3, np.int32), 1, "test"))
    assert one.edge_cut == 0 and one.replication_factor == 1.0 and one.local_edge_ratio == 1.0


def test_no_edges_and_empty_parts():
    g = from_edges(np.array([], int), np.array([], int), 4)
    q = evaluate(g, partition(g, "range", 6))
    assert q.local_edge_ratio == 1.0 and q.replication_factor == 1.0 and q.edge_cut == 0
    assert sum(q.part_nodes) == 4 and q.part_nodes.count(0) == 2
    assert q.edge_balance == 1.0 and q.edge_skew == 0.0
    assert q.node_balance == pytest.approx(1 / (4 / 6))


def test_random_partition_local_ratio_is_one_over_p(graphs):
    g, _ = graphs.community(4, 50, p_in=0.2)
    for p in (2, 4, 8):
        q = evaluate(g, partition(g, "random", p, seed=0))
        assert abs(q.local_edge_ratio - 1 / p) < 0.05
        assert q.node_balance < 1.05


def test_to_dict_and_repr(graphs):
    g = graphs.random(0, 20, 60)
    q = evaluate(g, partition(g, "metis", 2))
    d = json.loads(json.dumps(q.to_dict()))
    assert d["edge_cut"] == q.edge_cut and d["part_nodes"] == list(q.part_nodes)
    assert d["method"] == "metis" and d["num_parts"] == 2
    assert repr(q).startswith("PartitionQuality(method='metis', P=2, local_edge_ratio=")


def test_size_mismatch(graphs):
    book = PartitionBook.from_part_of(np.zeros(5, np.int32), 1, "test")
    with pytest.raises(PartitionError, match="covers 5 nodes"):
        evaluate(graphs.random(0, 6, 6), book)
