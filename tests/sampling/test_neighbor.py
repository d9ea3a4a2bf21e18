import ast
import itertools
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy import stats

from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph import Graph, from_edges, open_dataset, write_dataset
from fleetgnn.sampling import (
    GraphTopology,
    NeighborSampler,
    TopologySource,
    append_unique,
    full_neighbor_block,
    sample_neighbors,
    sample_neighbors_from,
)
from fleetgnn.sampling.neighbor import _append_unique_torch, _offsets_from_draws, _offsets_torch

SAMPLING_DIR = Path(__file__).resolve().parents[2] / "fleetgnn" / "sampling"


def fisher_yates(r: list[int], n: int) -> list[int]:
    """Sequential partial Fisher-Yates: the reference for the vectorised algorithm."""
    a = list(range(n))
    out = []
    for i, ri in enumerate(r):
        out.append(a[ri])
        a[ri] = a[n - 1 - i]
    return out


def random_graph(n: int = 60, e: int = 700, seed: int = 0, weighted: bool = False) -> Graph:
    """Multigraph (parallel edges and loops) with skewed degrees, some nodes of degree 0 and 1."""
    rng = np.random.default_rng(seed)
    dst = (rng.pareto(1.2, e) * 3).astype(np.int64) % (n - 5)  # nodes n-5..n-1: in-degree 0
    src = rng.integers(0, n, e)
    # make node n-6 have exactly one in-edge
    dst[dst == n - 6] = 0
    dst[0] = n - 6
    w = (src * n + dst).astype(np.float64) if weighted else None  # encodes each edge
    return from_edges(src, dst, n, edge_weight=w)


def neighbor_lists(g: Graph) -> list[list[int]]:
    return [g.indices[g.indptr[v] : g.indptr[v + 1]].tolist() for v in range(g.num_nodes)]


# ------------------------------------------------------------------ Alg. 1 vs Fisher-Yates
def test_offsets_equal_fisher_yates_random_draws() -> None:
    rng = np.random.default_rng(0)
    for m in range(1, 9):
        deg = rng.integers(m, m + 7, 300)
        r = np.stack([rng.integers(0, deg - i) for i in range(m)], axis=1)
        got = _offsets_from_draws(torch.from_numpy(r), torch.from_numpy(deg)).numpy()
        for row in range(deg.size):
            assert got[row].tolist() == fisher_yates(r[row].tolist(), int(deg[row]))
        # the torch implementation (used off the CPU) agrees
        assert torch.equal(
            _offsets_torch(torch.from_numpy(r), torch.from_numpy(deg)), torch.from_numpy(got)
        )


@pytest.mark.parametrize(
    ("n", "r"),
    [
        (5, [0, 0, 0, 0]),  # all ties at 0
        (6, [3, 3, 3, 2]),  # ties in the middle
        (6, [5, 4, 3]),  # every draw hits the last live slot (self-swaps)
        (7, [6, 0, 4, 0, 2]),  # writes to slots later read again
        (4, [3, 2, 1, 0]),  # fanout == deg
        (4, [0, 0, 0, 0]),
        (1, [0]),  # degree 1
        (9, [8, 7, 6, 1, 1, 1, 2, 0]),  # long chains
        (9, [0, 7, 6, 5, 4, 3, 2, 1]),
    ],
)
def test_offsets_equal_fisher_yates_ties(n: int, r: list[int]) -> None:
    assert all(0 <= x <= n - 1 - i for i, x in enumerate(r))  # valid draws
    got = _offsets_from_draws(torch.tensor([r]), torch.tensor([n]))[0].tolist()
    assert got == fisher_yates(r, n)
    assert _offsets_torch(torch.tensor([r]), torch.tensor([n]))[0].tolist() == got
    assert sorted(set(got)) == sorted(got) and all(0 <= x < n for x in got)


def test_offsets_exhaustive_small() -> None:
    """Every draw sequence for n <= 6, m <= n: the vectorised result is a bijection like FY."""
    for n in range(1, 7):
        for m in range(1, n + 1):
            rs = list(itertools.product(*[range(n - i) for i in range(m)]))
            r = torch.tensor(rs)
            got = _offsets_from_draws(r, torch.full((len(rs),), n)).tolist()
            assert got == [fisher_yates(list(x), n) for x in rs]
            assert _offsets_torch(r, torch.full((len(rs),), n)).tolist() == got


def test_offsets_empty() -> None:
    r = torch.zeros(0, 3, dtype=torch.int64)
    assert _offsets_from_draws(r, torch.zeros(0, dtype=torch.int64)).shape == (0, 3)
    assert _offsets_torch(r, torch.zeros(0, dtype=torch.int64)).shape == (0, 3)


# ------------------------------------------------------------------ sample_neighbors
@pytest.mark.parametrize("fanout", [0, 1, 3, 10, -1])
def test_sampled_are_distinct_true_neighbors(fanout: int) -> None:
    g = random_graph()
    nbrs = neighbor_lists(g)
    seeds = torch.arange(g.num_nodes)
    indptr_s, got = sample_neighbors(g.indptr, g.indices, seeds, fanout, rng=1)
    assert indptr_s.dtype == torch.int64 and got.dtype == torch.int64
    assert indptr_s[0] == 0 and indptr_s[-1] == got.numel()
    for v in range(g.num_nodes):
        sampled = got[indptr_s[v] : indptr_s[v + 1]].tolist()
        deg = len(nbrs[v])
        want = deg if fanout < 0 else min(deg, fanout)
        assert len(sampled) == want
        # distinct edges: as a multiset, sampled IDs fit inside the neighbour multiset
        assert not Counter(sampled) - Counter(nbrs[v])
        if fanout < 0 or deg <= fanout:
            assert sampled == nbrs[v]  # take all, CSC order


def test_sample_matches_fisher_yates_with_same_generator() -> None:
    """End to end: the sampler's neighbours are the FY picks for the generator's draws."""
    g = random_graph(seed=3)
    seeds = torch.tensor([0, 1, 2, 54, 3, 0])  # includes a degree-1 node, repeats allowed here
    fanout = 4
    indptr_s, got = sample_neighbors(g.indptr, g.indices, seeds, fanout, np.random.default_rng(7))
    deg = np.diff(g.indptr)[seeds.numpy()]
    big = deg > fanout
    rng = np.random.default_rng(7)
    r = rng.integers(0, deg[big][:, None] - np.arange(fanout))
    nbrs = neighbor_lists(g)
    k = 0
    for i, v in enumerate(seeds.tolist()):
        sampled = got[indptr_s[i] : indptr_s[i + 1]].tolist()
        if big[i]:
            want = [nbrs[v][o] for o in fisher_yates(r[k].tolist(), int(deg[i]))]
            k += 1
        else:
            want = nbrs[v]
        assert sampled == want


def test_inclusion_is_uniform_chi_square() -> None:
    # one node with 10 distinct in-neighbours, sampled 20000 times with fanout 3
    g = from_edges(np.arange(1, 11), np.zeros(10, dtype=np.int64), 11)
    trials, fanout = 20000, 3
    _, got = sample_neighbors(
        g.indptr, g.indices, torch.zeros(trials, dtype=torch.int64), fanout, 5
    )
    counts = np.bincount(got.numpy(), minlength=11)[1:]
    assert counts.sum() == trials * fanout
    p = stats.chisquare(counts, np.full(10, trials * fanout / 10)).pvalue
    assert p > 1e-3, counts


def test_subsets_are_uniform_chi_square() -> None:
    # deg 5, fanout 2: all 10 unordered pairs equally likely
    g = from_edges(np.arange(1, 6), np.zeros(5, dtype=np.int64), 6)
    trials = 20000
    _, got = sample_neighbors(g.indptr, g.indices, torch.zeros(trials, dtype=torch.int64), 2, 11)
    pairs = got.view(trials, 2).sort(dim=1).values.numpy()
    assert (pairs[:, 0] != pairs[:, 1]).all()
    code = (pairs[:, 0] - 1) * 5 + (pairs[:, 1] - 1)
    counts = np.bincount(code, minlength=25)
    counts = counts[[a * 5 + b for a, b in itertools.combinations(range(5), 2)]]
    assert counts.sum() == trials
    assert stats.chisquare(counts).pvalue > 1e-3, counts


def test_deterministic_for_seed() -> None:
    g = random_graph()
    seeds = torch.arange(30)
    a = sample_neighbors(g.indptr, g.indices, seeds, 3, 9)
    b = sample_neighbors(torch.from_numpy(g.indptr), torch.from_numpy(g.indices), seeds, 3, 9)
    c = sample_neighbors(g.indptr, g.indices, seeds, 3, 10)
    assert torch.equal(a[1], b[1]) and torch.equal(a[0], b[0])
    assert not torch.equal(a[1], c[1])


def test_sample_errors() -> None:
    g = random_graph()
    with pytest.raises(GraphError, match=r"node ID 60, outside the valid interval \[0, 60\)"):
        sample_neighbors(g.indptr, g.indices, torch.tensor([0, 60]), 2)
    with pytest.raises(GraphError, match="1-D integer"):
        sample_neighbors(g.indptr, g.indices, torch.tensor([0.5]), 2)
    with pytest.raises(ConfigError, match="fanout"):
        sample_neighbors(g.indptr, g.indices, torch.tensor([0]), -2)
    with pytest.raises(ConfigError, match="rng"):
        sample_neighbors(g.indptr, g.indices, torch.tensor([0]), 2, rng=-1)
    with pytest.raises(GraphError, match="indptr"):
        sample_neighbors(g.indptr.astype(np.int32), g.indices, torch.tensor([0]), 2)
    with pytest.raises(GraphError, match="no 'edge_weight'"):
        sample_neighbors_from(g, torch.tensor([0]), 2, with_edge_weight=True)


def test_graph_topology_reads() -> None:
    g = random_graph(weighted=True)
    topo = GraphTopology(g)
    assert isinstance(topo, TopologySource) and topo.has_edge_weight
    ids = torch.tensor([0, 3, 59, 0])
    assert topo.in_degree(ids).tolist() == np.diff(g.indptr)[[0, 3, 59, 0]].tolist()
    counts, nbrs = topo.all_neighbors(ids)
    lists = neighbor_lists(g)
    assert nbrs.tolist() == sum((lists[v] for v in ids.tolist()), [])
    assert counts.tolist() == [len(lists[v]) for v in ids.tolist()]
    off = torch.tensor([1, 0, 0, 2])
    sub = torch.tensor([0, 3, 1, 0])
    assert topo.neighbors_at(sub, off).tolist() == [
        lists[v][o] for v, o in zip([0, 3, 1, 0], off, strict=True)
    ]
    w = topo.edge_weight_at(sub, off)
    assert w.tolist() == [
        lists[v][o] * 60 + v for v, o in zip([0, 3, 1, 0], off.tolist(), strict=True)
    ]


def test_memmapped_graph_samples_like_in_memory(tmp_path: Path) -> None:
    g = random_graph(weighted=True)
    write_dataset(g, tmp_path / "ds")
    gm = open_dataset(tmp_path / "ds", mmap=True)
    assert isinstance(gm.indices, np.memmap)
    seeds = torch.tensor([5, 0, 17, 2])
    a = NeighborSampler(g, [4, 3], seed=2).sample(seeds, 1, 2)
    b = NeighborSampler(GraphTopology(gm), [4, 3], seed=2).sample(seeds, 1, 2)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.src_ids, y.src_ids) and torch.equal(x.indices, y.indices)
        assert torch.equal(x.edge_weight, y.edge_weight)


# ------------------------------------------------------------------ append_unique
def check_append_unique(targets: torch.Tensor, nbrs: torch.Tensor) -> None:
    uniq, local, dup = append_unique(targets, nbrs)
    t = targets.numel()
    assert torch.equal(uniq[:t], targets)
    assert uniq.unique().numel() == uniq.numel()
    assert set(uniq.tolist()) == set(targets.tolist()) | set(nbrs.tolist())
    assert torch.equal(uniq[local], nbrs)
    assert int(dup.sum()) == nbrs.numel()
    c = Counter(nbrs.tolist())
    assert dup.tolist() == [c.get(u, 0) for u in uniq.tolist()]
    # documented order of new nodes: first appearance in nbrs
    new = [v for v in dict.fromkeys(nbrs.tolist()) if v not in set(targets.tolist())]
    assert uniq[t:].tolist() == new
    # the torch path (used off the CPU) gives identical results
    for a, b in zip((uniq, local, dup), _append_unique_torch(targets, nbrs), strict=True):
        assert torch.equal(a, b)


def test_append_unique_invariants() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        t = int(rng.integers(0, 20))
        targets = torch.from_numpy(rng.permutation(100)[:t])
        nbrs = torch.from_numpy(rng.integers(0, 100, int(rng.integers(0, 60))))
        check_append_unique(targets, nbrs)


def test_append_unique_example_and_edge_cases() -> None:
    uniq, local, dup = append_unique(torch.tensor([5, 2, 9]), torch.tensor([2, 7, 7, 1, 5]))
    assert uniq.tolist() == [5, 2, 9, 7, 1]
    assert local.tolist() == [1, 3, 3, 4, 0]
    assert dup.tolist() == [1, 1, 0, 2, 1]
    check_append_unique(torch.tensor([], dtype=torch.int64), torch.tensor([3, 3, 1]))
    check_append_unique(torch.tensor([4, 1]), torch.tensor([], dtype=torch.int64))
    with pytest.raises(GraphError, match="ID 1 repeats at position 2"):
        append_unique(torch.tensor([1, 2, 1]), torch.tensor([3]))
    with pytest.raises(GraphError, match="ID 1 repeats at position 2"):
        _append_unique_torch(torch.tensor([1, 2, 1]), torch.tensor([3]))
    with pytest.raises(GraphError, match="1-D integer"):
        append_unique(torch.tensor([1.0]), torch.tensor([3]))


# ------------------------------------------------------------------ NeighborSampler / blocks
def check_blocks(g: Graph, blocks: list, seeds: torch.Tensor, fanouts: list[int]) -> None:
    lists = neighbor_lists(g)
    deg = np.diff(g.indptr)
    assert torch.equal(blocks[-1].dst_ids, seeds)
    for i, b in enumerate(blocks):
        b.validate()
        if i + 1 < len(blocks):
            assert torch.equal(b.dst_ids, blocks[i + 1].src_ids)
        assert b.src_ids.unique().numel() == b.num_src
        assert b.src_degree.dtype == torch.float32
        assert b.src_degree.tolist() == deg[b.src_ids.numpy()].astype(np.float32).tolist()
        fanout = fanouts[len(blocks) - 1 - i]
        for d in range(b.num_dst):
            v = int(b.src_ids[d])
            edges = b.indices[b.indptr[d] : b.indptr[d + 1]]
            src = b.src_ids[edges].tolist()
            assert len(src) == (deg[v] if fanout < 0 else min(deg[v], fanout))
            assert not Counter(src) - Counter(lists[v])
            if b.edge_weight is not None:
                assert b.edge_weight[b.indptr[d] : b.indptr[d + 1]].tolist() == [
                    s * g.num_nodes + v for s in src
                ]


def test_sampler_blocks_are_valid(device: str) -> None:
    g = random_graph(weighted=True)
    seeds = torch.tensor([3, 0, 41, 55, 7])
    fanouts = [3, 2, 5]
    # seeds on the device: the same keyed draws, the same blocks as from host seeds
    blocks = NeighborSampler(g, fanouts, seed=4).sample(seeds.to(device), epoch=2, step=5)
    assert len(blocks) == 3
    check_blocks(g, blocks, seeds, fanouts)
    for a, b in zip(blocks, NeighborSampler(g, fanouts, seed=4).sample(seeds, 2, 5), strict=True):
        assert torch.equal(a.src_ids.cpu(), b.src_ids) and torch.equal(a.indices.cpu(), b.indices)


def test_sampler_reproducible_and_independent_of_other_batches() -> None:
    g = random_graph()
    s = NeighborSampler(g, [4, 4], seed=1)
    seeds = torch.arange(20)
    a = s.sample(seeds, 0, 3)
    s.sample(torch.arange(20, 40), 0, 2)  # another batch in between
    b = NeighborSampler(g, [4, 4], seed=1).sample(seeds, 0, 3)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.src_ids, y.src_ids) and torch.equal(x.indices, y.indices)
    others = [
        s.sample(seeds, 1, 3),
        s.sample(seeds, 0, 4),
        NeighborSampler(g, [4, 4], 2).sample(seeds, 0, 3),
        s.sample(seeds, 0, 3, stream=1),
    ]
    for o in others:
        assert not torch.equal(o[0].src_ids, a[0].src_ids)


def test_sampler_does_not_touch_global_rng() -> None:
    g = random_graph()
    torch_state = torch.get_rng_state()
    np_state = np.random.get_state()[1].copy()  # noqa: NPY002 (the legacy global RNG itself)
    NeighborSampler(g, [3, 3]).sample(torch.arange(10))
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert (np.random.get_state()[1] == np_state).all()  # noqa: NPY002


def test_two_layer_full_sample_is_exact_two_hop_neighborhood(device: str) -> None:
    g = random_graph(seed=5)
    seeds = torch.tensor([2, 9, 0])
    blocks = [b.to("cpu") for b in NeighborSampler(g, [-1, -1]).sample(seeds.to(device))]
    check_blocks(g, blocks, seeds, [-1, -1])
    n = g.num_nodes
    src, dst = g.edges()
    a = sp.csr_matrix((np.ones(src.size), (dst, src)), shape=(n, n))  # a[v, u]: edges u -> v
    x0 = np.zeros(n)
    x0[seeds.numpy()] = 1
    x1 = x0 + a.T @ x0
    x2 = x1 + a.T @ x1
    assert set(blocks[1].src_ids.tolist()) == set(np.flatnonzero(x1).tolist())
    assert set(blocks[0].src_ids.tolist()) == set(np.flatnonzero(x2).tolist())
    # every edge into the frontier is present, exactly once
    lists = neighbor_lists(g)
    for b in blocks:
        got = b.src_ids[b.indices].tolist()
        assert got == sum((lists[v] for v in b.dst_ids.tolist()), [])
        assert b.num_edges == int(np.diff(g.indptr)[b.dst_ids.numpy()].sum())


def test_full_neighbor_block_equals_fanout_minus_one() -> None:
    g = random_graph(weighted=True)
    dst = torch.tensor([4, 1, 59, 30])
    b = full_neighbor_block(g, dst)
    c = NeighborSampler(g, [-1], seed=3).sample(dst, 5, 5)[0]
    for f in ("indptr", "indices", "src_ids", "src_degree", "edge_weight"):
        assert torch.equal(getattr(b, f), getattr(c, f))
    check_blocks(g, [b], dst, [-1])


def test_sampler_errors() -> None:
    g = random_graph()
    with pytest.raises(ConfigError, match="fanouts"):
        NeighborSampler(g, [])
    with pytest.raises(ConfigError, match=r"fanouts\[1\]"):
        NeighborSampler(g, [2, -3])
    with pytest.raises(ConfigError, match="'epoch'"):
        NeighborSampler(g, [2]).sample(torch.tensor([0]), epoch=-1)
    with pytest.raises(GraphError, match="distinct"):
        NeighborSampler(g, [2]).sample(torch.tensor([0, 0]))
    with pytest.raises(GraphError, match="TopologySource"):
        NeighborSampler(object(), [2])  # type: ignore[arg-type]
    assert "fanouts=[2]" in repr(NeighborSampler(g, [2]))


def test_sampling_layer_imports() -> None:
    """Sampling sits below ops/nn and never communicates."""
    banned = ("fleetgnn.ops", "fleetgnn.nn", "torch.distributed", "fleetgnn.engines")
    for path in SAMPLING_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert not name.startswith(banned), f"{path.name} imports {name}"
