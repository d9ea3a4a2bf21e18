"""One sampler protocol: every sampler is a ``Sampler``; ``sample_from_edges`` is the
pairs -> seeds -> blocks path spelled out (what the edge-batch builders each computed)."""

import numpy as np
import pytest
import torch

from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph import from_edges
from fleetgnn.graph.hetero import HeteroSchema, from_typed_edges
from fleetgnn.graph.hetero_toy import toy_mag
from fleetgnn.sampling import (
    EdgeSample,
    HeteroNeighborSampler,
    NeighborSampler,
    NodeSample,
    Sampler,
    TemporalSampler,
    TypedTemporalSampler,
    edge_keys,
    timed_seeds,
)
from fleetgnn.sampling.hetero import typed_edge_keys

WRITES = ("author", "writes", "paper")
REV_WRITES = ("paper", "rev_writes", "author")
CITES = ("paper", "cites", "paper")
KEYS = {"epoch": 2, "step": 5, "stream": 1}


def _graph(seed=0, n=50, e=600, times=False):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), (rng.pareto(1.2, e) * 3).astype(np.int64) % n
    edge_time = rng.integers(0, 30, e) if times else None
    return from_edges(src, dst, n, edge_time=edge_time)


def _typed_timed(seed=0):
    schema = HeteroSchema(("paper", "author"), (20, 12), (CITES, WRITES, REV_WRITES), "paper")
    rng = np.random.default_rng(seed)
    edges, times = {}, {}
    for rel in schema.relations:
        e = 80
        edges[rel] = (
            rng.integers(0, schema.count(rel[0]), e),
            rng.integers(0, schema.count(rel[2]), e),
        )
        times[rel] = rng.integers(0, 30, e)
    return from_typed_edges(schema, edges, edge_time=times, name="timed")


def _pairs(n_src, n_dst, p=9, k=3, seed=1):
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n_src, (p,), generator=gen)
    dst = torch.randint(0, n_dst, (p,), generator=gen)
    return src, dst, torch.randint(0, n_dst, (p, k), generator=gen)


def _same_blocks(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        if hasattr(x, "edges"):  # HeteroBlock
            assert x.num_dst == y.num_dst
            for t in x.src_ids:
                assert torch.equal(x.src_ids[t], y.src_ids[t])
            for r, (p, ix) in x.edges.items():
                assert torch.equal(p, y.edges[r][0]) and torch.equal(ix, y.edges[r][1])
        else:
            assert x.num_dst == y.num_dst
            for f in ("indptr", "indices", "src_ids"):
                assert torch.equal(getattr(x, f), getattr(y, f)), f


def _samplers():
    g, gt = _graph(), _graph(times=True)
    typed, timed = toy_mag(60, 40, 6, 6, seed=3), _typed_timed()
    return [
        NeighborSampler(g, [4, 3], seed=7),
        TemporalSampler(gt, [4, 3], seed=7),
        HeteroNeighborSampler(typed, [3, 2], seed=7),
        TypedTemporalSampler(timed, [3, 2], seed=7),
    ]


@pytest.mark.parametrize("i", range(4))
def test_every_sampler_satisfies_the_protocol(i):
    sampler = _samplers()[i]
    assert isinstance(sampler, Sampler)
    assert sampler.num_layers == 2


def test_a_duck_without_sample_from_edges_is_not_a_sampler():
    class NodesOnly:
        num_layers = 1

        def sample_from_nodes(self, seeds, **kw):
            return NodeSample(())

    assert not isinstance(NodesOnly(), Sampler)


@pytest.mark.parametrize("exclude_targets", [False, True])
def test_plain_edges_equal_the_pairs_to_seeds_path(exclude_targets):
    g = _graph(seed=3)
    sampler = NeighborSampler(g, [5, -1, 2], seed=4)
    src, dst, neg = _pairs(g.num_nodes, g.num_nodes)
    got = sampler.sample_from_edges(src, dst, neg, exclude_targets=exclude_targets, **KEYS)
    assert isinstance(got, EdgeSample)
    # the path EdgeBatches spelled out: sorted distinct endpoints, positions by searchsorted
    seeds = torch.unique(torch.cat([src, dst, neg.reshape(-1)]))
    exclude = edge_keys(src, dst, g.num_nodes) if exclude_targets else None
    want = sampler.sample_from_nodes(seeds, exclude=exclude, **KEYS)
    assert torch.equal(got.seeds, seeds)
    for pos, ids in ((got.src, src), (got.dst, dst), (got.neg, neg)):
        assert torch.equal(pos, torch.searchsorted(seeds, ids))
        assert torch.equal(got.seeds[pos], ids)
    _same_blocks(got.blocks, want.blocks)


@pytest.mark.parametrize("relation", [WRITES, CITES])
@pytest.mark.parametrize("exclude_targets", [False, True])
def test_typed_edges_equal_the_pairs_to_seeds_path(relation, exclude_targets):
    graph = toy_mag(60, 40, 6, 6, seed=3)
    s = graph.schema
    sampler = HeteroNeighborSampler(graph, [3, 2], seed=2)
    s_t, _, d_t = relation
    src, dst, neg = _pairs(s.count(s_t), s.count(d_t), seed=4)
    got = sampler.sample_from_edges(
        src, dst, neg, relation=relation, exclude_targets=exclude_targets, **KEYS
    )
    # the path TypedEdgeBatches spelled out: global IDs, seeds per end type
    gs, gd, gn = src + s.type_range(s_t)[0], dst + s.type_range(d_t)[0], neg + s.type_range(d_t)[0]
    if s_t == d_t:
        seeds = {s_t: torch.unique(torch.cat([gs, gd, gn.reshape(-1)]))}
    else:
        seeds = {s_t: torch.unique(gs), d_t: torch.unique(torch.cat([gd, gn.reshape(-1)]))}
    exclude = None
    if exclude_targets:
        rev = ("paper", "rev_cites", "paper") if relation == CITES else REV_WRITES
        exclude = typed_edge_keys(s.total_nodes, {relation: (gs, gd), rev: (gd, gs)})
    want = sampler.sample_from_nodes(seeds, exclude=exclude, **KEYS)
    assert list(got.seeds) == list(seeds)
    for t in seeds:
        assert torch.equal(got.seeds[t], seeds[t])
    assert torch.equal(got.src, torch.searchsorted(seeds[s_t], gs))
    assert torch.equal(got.dst, torch.searchsorted(seeds[d_t], gd))
    assert torch.equal(got.neg, torch.searchsorted(seeds[d_t], gn))
    _same_blocks(got.blocks, want.blocks)
    if exclude_targets:  # no target edge (nor its reverse) in any block
        for blk in got.blocks:
            indptr, indices = blk.edges[relation]
            d = torch.repeat_interleave(blk.dst_ids(d_t), indptr[1:] - indptr[:-1])
            hit = set(zip(blk.src_ids[s_t][indices].tolist(), d.tolist(), strict=True))
            assert not hit & set(zip(gs.tolist(), gd.tolist(), strict=True))


def test_temporal_edges_equal_the_timed_seeds_path():
    g = _graph(seed=5, times=True)
    sampler = TemporalSampler(g, [4, 3], seed=3, strategy="uniform")
    src, dst, neg = _pairs(g.num_nodes, g.num_nodes, seed=6)
    time = torch.randint(0, 30, (src.numel(),), generator=torch.Generator().manual_seed(2))
    got = sampler.sample_from_edges(src, dst, neg, time=time, **KEYS)
    # the path TemporalEdgeBatches spelled out: distinct (node, time) seeds, inverse positions
    p, k = src.numel(), neg.shape[1]
    seeds, seed_time, inv = timed_seeds(
        torch.cat([src, dst, neg.reshape(-1)]), torch.cat([time, time, time.repeat_interleave(k)])
    )
    want = sampler.sample_from_nodes(seeds, seed_time=seed_time, **KEYS)
    assert torch.equal(got.seeds, seeds) and torch.equal(got.sample.seed_time, seed_time)
    assert torch.equal(got.src, inv[:p]) and torch.equal(got.dst, inv[p : 2 * p])
    assert torch.equal(got.neg, inv[2 * p :].view(p, k))
    _same_blocks(got.blocks, want.blocks)
    assert all(
        torch.equal(a, b) for a, b in zip(got.sample.seed_index, want.seed_index, strict=True)
    )


def test_typed_temporal_edges_sample_each_end_at_its_pairs_time():
    graph = _typed_timed(seed=4)
    sampler = TypedTemporalSampler(graph, [3, 2], seed=1)
    src, dst, neg = _pairs(12, 20, seed=8)  # author -> paper
    time = torch.randint(0, 30, (src.numel(),), generator=torch.Generator().manual_seed(3))
    got = sampler.sample_from_edges(src, dst, neg, time=time, relation=WRITES, **KEYS)
    a, ta, _ = timed_seeds(src + 20, time)
    k = neg.shape[1]
    d, td, inv = timed_seeds(
        torch.cat([dst, neg.reshape(-1)]), torch.cat([time, time.repeat_interleave(k)])
    )
    want = sampler.sample_from_nodes(
        {"author": a, "paper": d}, seed_time={"author": ta, "paper": td}, **KEYS
    )
    assert torch.equal(got.seeds["author"], a) and torch.equal(got.seeds["paper"], d)
    assert torch.equal(got.dst, inv[: src.numel()])
    _same_blocks(got.blocks, want.blocks)
    assert torch.equal(got.sample.seed_time, want.seed_time)


def test_edges_and_times_are_checked():
    g, gt = _graph(), _graph(times=True)
    src, dst, neg = _pairs(g.num_nodes, g.num_nodes)
    with pytest.raises(GraphError, match="without time"):
        NeighborSampler(g, [2]).sample_from_edges(src, dst, neg, time=src)
    with pytest.raises(GraphError, match="without time"):
        NeighborSampler(g, [2]).sample_from_nodes(src.unique(), seed_time=src.unique())
    with pytest.raises(GraphError, match="time= "):
        TemporalSampler(gt, [2]).sample_from_edges(src, dst, neg)
    with pytest.raises(GraphError, match=r"neg \[P, K\]"):
        NeighborSampler(g, [2]).sample_from_edges(src, dst, neg.reshape(-1))
    with pytest.raises(GraphError, match="relation=None"):
        NeighborSampler(g, [2]).sample_from_edges(src, dst, neg, relation=CITES)
    typed = HeteroNeighborSampler(toy_mag(60, 40, 6, 6, seed=3), [2])
    with pytest.raises(GraphError, match="'relation'"):
        typed.sample_from_edges(src % 6, dst % 6, neg % 6)
    with pytest.raises(ConfigError, match="excludes no edges"):
        TypedTemporalSampler(_typed_timed(), [2]).sample_from_edges(
            src % 12, dst % 12, neg % 12, time=src, relation=WRITES, exclude_targets=True
        )
