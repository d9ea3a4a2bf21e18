"""The typed temporal sampler against its definition, brute force on small typed graphs."""

import numpy as np
import pytest
import torch

from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph.hetero import HeteroSchema, from_typed_edges
from fleetgnn.sampling import TypedTemporalSampler
from fleetgnn.sampling.hetero import HeteroNeighborSampler

CITES = ("paper", "cites", "paper")
WRITES = ("author", "writes", "paper")
REV = ("paper", "rev_writes", "author")
TOPIC = ("paper", "has_topic", "field")
REVIEWS = ("author", "reviews", "paper")
SCHEMA = HeteroSchema(
    ("paper", "author", "field"), (14, 9, 4), (CITES, WRITES, REV, TOPIC), target="paper"
)


def random_graph(seed=0, horizon=20):
    """Random typed edges (repeats kept) with times in ``[0, horizon)`` (many ties)."""
    rng = np.random.default_rng(seed)
    edges, times = {}, {}
    for rel, e in zip(SCHEMA.relations, (40, 30, 30, 20), strict=True):
        n_src, n_dst = SCHEMA.count(rel[0]), SCHEMA.count(rel[2])
        edges[rel] = (rng.integers(0, n_src, e), rng.integers(0, n_dst, e))
        times[rel] = rng.integers(0, horizon, e)
    node_time = {"paper": rng.integers(0, horizon + 2, 14), "author": rng.integers(0, 22, 9)}
    return from_typed_edges(SCHEMA, edges, edge_time=times, node_time=node_time, name="rand")


def candidates(g, rel, v_global, t, inclusive):
    """Brute force: the global source IDs of ``rel``'s in-edges of ``v`` before ``t``, CSC order."""
    s = g.schema
    indptr, indices = g.csc[rel]
    v = v_global - s.type_range(rel[2])[0]
    seg = range(int(indptr[v]), int(indptr[v + 1]))
    ok = [e for e in seg if (g.edge_time[rel][e] <= t if inclusive else g.edge_time[rel][e] < t)]
    return [int(indices[e]) + s.type_range(rel[0])[0] for e in ok]


def check_definition(g, sample, seeds, fanouts, strategy, inclusive):
    """Every block against the definition: candidates, counts, owners, structure."""
    s = g.schema
    blocks, index, tm = sample.blocks, sample.seed_index, sample.seed_time
    L = len(blocks)
    for t, ids in seeds.items():
        assert torch.equal(blocks[-1].dst_ids(t), ids)
    for i, blk in enumerate(blocks):
        hop = L - 1 - i
        for t in s.node_types:
            pairs = set(zip(index[i][t].tolist(), blk.src_ids[t].tolist(), strict=True))
            assert len(pairs) == blk.src_ids[t].numel()  # (seed, node) distinct: disjoint
            if i + 1 < L:
                assert torch.equal(blk.dst_ids(t), blocks[i + 1].src_ids[t])
                assert torch.equal(index[i][t][: blk.num_dst[t]], index[i + 1][t])
        for rel in s.relations:
            k = fanouts[rel][hop] if isinstance(fanouts, dict) else fanouts[hop]
            ptr, pos = blk.edges[rel]
            for j in range(blk.num_dst[rel[2]]):
                v, owner = int(blk.src_ids[rel[2]][j]), int(index[i][rel[2]][j])
                cand = candidates(g, rel, v, int(tm[owner]), inclusive)
                take = len(cand) if k < 0 else min(k, len(cand))
                p = pos[ptr[j] : ptr[j + 1]]
                got = blk.src_ids[rel[0]][p].tolist()
                assert index[i][rel[0]][p].eq(owner).all()  # a subtree's edges stay in it
                assert len(got) == take, (rel, v, owner)
                if strategy == "last":
                    assert got == cand[len(cand) - take :]
                else:  # a sub-multiset of the candidates, drawn without replacement
                    left = list(cand)
                    for u in got:
                        left.remove(u)


@pytest.mark.parametrize("strategy", ["uniform", "last"])
@pytest.mark.parametrize("inclusive", [False, True])
def test_blocks_match_the_brute_force_definition(strategy, inclusive):
    g = random_graph()
    fanouts = {CITES: [2, 3, -1], WRITES: [1, 2, 2], REV: [3, 0, 2], TOPIC: [-1, 1, 1]}
    sampler = TypedTemporalSampler(g, fanouts, seed=3, strategy=strategy, inclusive=inclusive)
    for step in range(4):
        seeds = {"paper": torch.tensor([0, 3, 3, 7, 13]), "author": torch.tensor([2, 5]) + 14}
        times = {"paper": torch.tensor([4, 10, 19, 0, 25]), "author": torch.tensor([8, 15])}
        sample = sampler.sample_from_nodes(seeds, seed_time=times, epoch=1, step=step)
        check_definition(g, sample, seeds, fanouts, strategy, inclusive)
        assert sample.src_time(2, "author")[:2].tolist() == [8, 15]  # seeds after the papers


def test_seed_time_defaults_to_the_node_times():
    g = random_graph(seed=1)
    sampler = TypedTemporalSampler(g, [3, 3], seed=0, strategy="last")
    seeds = torch.arange(14)
    sample = sampler.sample_from_nodes(seeds)
    assert sample.seed_time.tolist() == g.node_time["paper"].tolist()
    check_definition(g, sample, {"paper": seeds}, [3, 3], "last", False)
    with pytest.raises(GraphError, match="node type 'field' .* has no node times"):
        sampler.sample_from_nodes({"field": torch.tensor([23])})


def test_with_every_edge_in_the_past_each_subtree_is_the_plain_typed_sample():
    """The keyed draws are the plain typed sampler's: ``c`` = the whole degree reproduces them."""
    g = random_graph(seed=2)
    fan = [2, 2]
    temporal = TypedTemporalSampler(g, fan, seed=5)
    plain = HeteroNeighborSampler(g, fan, seed=5)
    seeds = torch.tensor([1, 4, 9, 12])
    sample = temporal.sample_from_nodes(
        seeds, seed_time=torch.full((4,), 100), epoch=2, step=7, stream=1
    )
    for b, seed in enumerate(seeds.tolist()):
        ref = plain.sample_from_nodes(torch.tensor([seed]), epoch=2, step=7, stream=1).blocks
        for blk, ref_blk, idx in zip(sample.blocks, ref, sample.seed_index, strict=True):
            for rel in g.schema.relations:
                got, want = _edges(blk, rel, idx, b), _edges(ref_blk, rel, None, 0)
                assert got == want, (rel, seed)


def _edges(blk, rel, index, b):
    """Sorted ``(dst, src)`` global pairs of ``rel`` in ``blk`` within subtree ``b``."""
    ptr, pos = blk.edges[rel]
    out = []
    for j in range(blk.num_dst[rel[2]]):
        if index is not None and int(index[rel[2]][j]) != b:
            continue
        v = int(blk.src_ids[rel[2]][j])
        out += [(v, int(blk.src_ids[rel[0]][p])) for p in pos[ptr[j] : ptr[j + 1]]]
    return sorted(out)


@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_a_planted_future_edge_of_one_relation_never_appears(strategy):
    """``writes`` (author 0 -> paper 0) at time 1000 is never sampled at any hop, while the same
    pair in ``reviews`` (time 5) is: the cut is per relation, by the edge's own time."""
    schema = HeteroSchema(("paper", "author"), (6, 4), (CITES, WRITES, REVIEWS, REV), "paper")
    ring = np.arange(6)
    edges = {
        CITES: (ring, (ring + 1) % 6),
        WRITES: (np.array([0, 1, 2, 3, 1]), np.array([0, 0, 1, 2, 3])),
        REVIEWS: (np.array([0, 2]), np.array([0, 4])),
        REV: (np.array([0, 1, 2, 3]), np.array([0, 1, 2, 3])),
    }
    times = {
        CITES: [1, 2, 3, 4, 5, 6],
        WRITES: [1000, 3, 4, 5, 6],  # the planted future edge: author 0 -> paper 0
        REVIEWS: [5, 7],
        REV: [2, 3, 4, 5],
    }
    g = from_typed_edges(schema, edges, edge_time=times)
    a0, p0 = schema.type_range("author")[0], 0
    sampler = TypedTemporalSampler(g, [-1, -1, -1], seed=0, strategy=strategy)
    seeds = {"paper": torch.arange(6).repeat(2), "author": torch.arange(4) + a0}
    times_ = {"paper": torch.tensor([50] * 6 + [999] * 6), "author": torch.tensor([200] * 4)}
    sample = sampler.sample_from_nodes(seeds, seed_time=times_)
    seen = {rel: set() for rel in schema.relations}
    for blk in sample.blocks:
        for rel in schema.relations:
            seen[rel] |= set(_edges(blk, rel, None, 0))
    assert (p0, a0) not in seen[WRITES] and (p0, a0) in seen[REVIEWS]
    assert (p0, a0 + 1) in seen[WRITES]  # paper 0's other author is reached
    later = sampler.sample_from_nodes(
        {"paper": torch.tensor([0])}, seed_time={"paper": torch.tensor([1001])}
    )
    assert (p0, a0) in set(_edges(later.blocks[-1], WRITES, None, 0))  # after it: there


def test_refusals_are_one_line():
    g = from_typed_edges(SCHEMA, {r: ([0], [0]) for r in SCHEMA.relations})
    with pytest.raises(GraphError, match="has no edge times") as e:
        TypedTemporalSampler(g, [2])
    assert "\n" not in str(e.value)
    g = random_graph()
    with pytest.raises(ConfigError, match="'strategy' must be one of"):
        TypedTemporalSampler(g, [2], strategy="first")
    s = TypedTemporalSampler(g, [2])
    with pytest.raises(GraphError, match="one time per seed, 2"):
        s.sample_from_nodes(torch.tensor([0, 1]), seed_time=torch.tensor([1, 2, 3]))
    with pytest.raises(GraphError, match=r"global IDs of the node type 'paper', in \[0, 14\)"):
        s.sample_from_nodes(torch.tensor([20]), seed_time=torch.tensor([1]))
