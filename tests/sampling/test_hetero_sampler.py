"""Typed neighbour sampling: per-relation fanouts, keyed draws, no replacement, typed blocks."""

import numpy as np
import pytest
import torch

from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph.hetero_toy import toy_mag
from fleetgnn.sampling.hetero import HeteroNeighborSampler, full_hetero_block, relation_fanouts


@pytest.fixture(scope="module")
def graph():
    return toy_mag(num_papers=60, num_authors=40, num_fields=6, cites_per_paper=6, seed=3)


def _edges(block, rel):
    """``(src gid, dst gid)`` of a block's sampled edges of ``rel``."""
    indptr, indices = block.edges[rel]
    dst = torch.repeat_interleave(block.dst_ids(rel[2]), indptr[1:] - indptr[:-1])
    return block.src_ids[rel[0]][indices], dst


def _graph_edges(graph, rel):
    s = graph.schema
    src, dst = graph.relation_edges(rel)
    return src + s.type_range(rel[0])[0], dst + s.type_range(rel[2])[0]


def test_blocks_chain_and_edges_exist_without_replacement(graph):
    sampler = HeteroNeighborSampler(graph, [3, 2], seed=5)
    seeds = torch.tensor([0, 7, 11, 42])
    blocks = sampler.sample_from_nodes(seeds, epoch=1, step=2).blocks
    assert len(blocks) == 2
    assert torch.equal(blocks[-1].dst_ids("paper"), seeds)
    assert all(blocks[-1].num_dst[t] == 0 for t in ("author", "field"))
    for t in graph.schema.node_types:
        assert torch.equal(blocks[0].dst_ids(t), blocks[1].src_ids[t])
        assert len(set(blocks[0].src_ids[t].tolist())) == blocks[0].src_ids[t].numel()
        lo, hi = graph.schema.type_range(t)
        assert bool(((blocks[0].src_ids[t] >= lo) & (blocks[0].src_ids[t] < hi)).all())
    for block, fanout in ((blocks[1], 3), (blocks[0], 2)):
        for rel in graph.schema.relations:
            src, dst = _edges(block, rel)
            gs, gd = _graph_edges(graph, rel)
            # every sampled edge exists, and a destination gets min(deg, fanout) edges
            pairs = {}
            for a, b in zip(gs.tolist(), gd.tolist(), strict=True):
                pairs[(a, b)] = pairs.get((a, b), 0) + 1
            seen = {}
            for a, b in zip(src.tolist(), dst.tolist(), strict=True):
                seen[(a, b)] = seen.get((a, b), 0) + 1
                assert seen[(a, b)] <= pairs.get((a, b), 0)  # no edge drawn twice
            deg = np.bincount(gd, minlength=graph.num_nodes)
            got = (block.edges[rel][0][1:] - block.edges[rel][0][:-1]).numpy()
            want = np.minimum(deg[block.dst_ids(rel[2]).numpy()], fanout)
            np.testing.assert_array_equal(got, want)


def test_keyed_by_seed_epoch_step_and_stream(graph):
    sampler = HeteroNeighborSampler(graph, [2, 2], seed=1)
    seeds = torch.arange(0, 30, 3)

    def sig(blocks):
        return [torch.cat([b.src_ids[t] for t in graph.schema.node_types]) for b in blocks]

    a = sig(sampler.sample_from_nodes(seeds, epoch=0, step=4).blocks)
    b = sig(
        HeteroNeighborSampler(graph, [2, 2], seed=1)
        .sample_from_nodes(seeds, epoch=0, step=4)
        .blocks
    )
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    for other in (
        sampler.sample_from_nodes(seeds, epoch=0, step=5).blocks,
        sampler.sample_from_nodes(seeds, epoch=1, step=4).blocks,
        sampler.sample_from_nodes(seeds, epoch=0, step=4, stream=1).blocks,
        HeteroNeighborSampler(graph, [2, 2], seed=2)
        .sample_from_nodes(seeds, epoch=0, step=4)
        .blocks,
    ):
        assert not all(torch.equal(x, y) for x, y in zip(a, sig(other), strict=True))


def test_per_relation_fanouts_and_take_all(graph):
    fan = {r[1]: [0, -1] for r in graph.schema.relations}
    fan["rev_has_topic"] = [1, 1]
    fan["cites"] = [-1, 0]
    blocks = HeteroNeighborSampler(graph, fan, seed=0).sample_from_nodes(torch.arange(10)).blocks
    top = blocks[-1]
    for rel in graph.schema.relations:
        n = top.edges[rel][1].numel()
        if rel[1] == "cites":
            gs, gd = _graph_edges(graph, rel)
            assert n == int(np.isin(gd, np.arange(10)).sum())  # -1: every in-edge
        elif rel[1] == "rev_has_topic":
            assert n == 10
        else:
            assert n == 0
    # the outer hop: only rev_has_topic samples (1 per destination paper), cites none
    assert blocks[0].edges[("paper", "cites", "paper")][1].numel() == 0


def test_fanout_errors(graph):
    s = graph.schema
    with pytest.raises(ConfigError, match="no fanouts for relations"):
        relation_fanouts(s, {"cites": [2]})
    with pytest.raises(ConfigError, match="one length"):
        relation_fanouts(s, {r: ([2] if i else [2, 2]) for i, r in enumerate(s.relations)})
    with pytest.raises(ConfigError, match="matches 0 relations"):
        relation_fanouts(s, {**{r: [2] for r in s.relations}, "nope": [1]})
    with pytest.raises(ConfigError, match=r"fanouts\[0\]"):
        relation_fanouts(s, [-2])
    sampler = HeteroNeighborSampler(graph, [2], seed=0)
    author = s.type_range("author")[0]
    with pytest.raises(GraphError, match="target type 'paper'"):
        sampler.sample_from_nodes(torch.tensor([author]))


def test_full_block_holds_every_edge(graph):
    block = full_hetero_block(graph)
    assert block.num_edges == graph.num_edges
    for rel in graph.schema.relations:
        src, dst = _edges(block, rel)
        gs, gd = _graph_edges(graph, rel)
        assert sorted(zip(src.tolist(), dst.tolist())) == sorted(zip(gs.tolist(), gd.tolist()))
