import numpy as np
import pytest
import torch
from nn_graphs import dense_adjacency, full_block

from fleetgnn.errors import GraphError
from fleetgnn.nn import Aggregator, LocalAggregator


def test_full_graph_aggregator(graph, full_agg):
    assert isinstance(full_agg, Aggregator)
    n = graph.num_nodes
    assert full_agg.num_src == full_agg.num_dst == n
    torch.testing.assert_close(full_agg.src_ids, torch.arange(n))
    deg = torch.from_numpy(graph.in_degrees()).double()
    torch.testing.assert_close(full_agg.src_degree(), deg)
    torch.testing.assert_close(full_agg.dst_degree(), deg)
    a = dense_adjacency(graph)
    x = torch.randn(n, 3, dtype=torch.float64)
    torch.testing.assert_close(full_agg.aggregate(x), a @ x)
    src, dst = full_agg.edge_ids()
    gs, gd = graph.edges()
    assert np.array_equal(src.numpy(), gs) and np.array_equal(dst.numpy(), gd)
    torch.testing.assert_close(full_agg.src_to_edge(x), x[src])
    torch.testing.assert_close(full_agg.dst_to_edge(x), x[dst])


def test_block_aggregator_uses_global_ids_and_degrees(graph):
    block = full_block(graph, [5, 2, 9])
    agg = LocalAggregator(block, dtype=torch.float64)
    assert agg.num_dst == 3 and agg.num_src == block.src_ids.numel()
    src, dst = agg.edge_ids()
    a = dense_adjacency(graph)
    for s, d in zip(src.tolist(), dst.tolist(), strict=True):
        assert a[d, s] == 1
    assert len(src) == int(a[[5, 2, 9]].sum())
    deg = torch.from_numpy(graph.in_degrees()).double()
    torch.testing.assert_close(agg.src_degree(), deg[block.src_ids])
    torch.testing.assert_close(agg.dst_degree(), deg[[5, 2, 9]])
    x = torch.randn(graph.num_nodes, 4, dtype=torch.float64)
    torch.testing.assert_close(agg.aggregate(x[block.src_ids]), (a @ x)[[5, 2, 9]])


def test_missing_src_degree_and_bad_blocks_raise(graph):
    block = full_block(graph, [5, 2])
    no_deg = type(block)(block.indptr, block.indices, block.src_ids, block.num_dst)
    with pytest.raises(GraphError, match="src_degree"):
        LocalAggregator(no_deg).src_degree()
    bad = type(block)(block.indptr, block.indices + 100, block.src_ids, block.num_dst)
    with pytest.raises(GraphError, match="outside"):
        LocalAggregator(bad)
    with pytest.raises(GraphError, match="src_ids"):
        LocalAggregator(object())
