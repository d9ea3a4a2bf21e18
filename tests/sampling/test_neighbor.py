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
from fleetgnn.keyhash import base_key, hash32, mix64
from fleetgnn.sampling import (
    DeviceTopology,
    GraphTopology,
    NeighborSampler,
    TopologySource,
    append_unique,
    edge_keys,
    full_neighbor_block,
    sample_neighbors,
    sample_neighbors_from,
)
from fleetgnn.sampling.neighbor import (
    _SALT_SAMPLE,
    BACKENDS,
    _offsets_from_draws,
    _offsets_torch,
)
from fleetgnn.sampling.unique import _append_unique_torch

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


def keyed_draws_reference(key: int, v: int, deg: int, fanout: int) -> list[int]:
    """The documented draws, in Python integers: ``(hash32(mix64(k ^ v), i) * (deg - i)) >> 32``."""
    row = mix64(key ^ v)
    return [(hash32(row, i) * (deg - i)) >> 32 for i in range(fanout)]


def test_sample_matches_fisher_yates_with_keyed_draws() -> None:
    """End to end: the sampler's neighbours are the FY picks for the documented keyed draws."""
    g = random_graph(seed=3)
    seeds = torch.tensor([0, 1, 2, 54, 3, 0])  # includes a degree-1 node, repeats allowed here
    fanout = 4
    nbrs = neighbor_lists(g)
    for backend in ("numpy", "torch"):
        indptr_s, got = sample_neighbors(g.indptr, g.indices, seeds, fanout, 7, backend=backend)
        for i, v in enumerate(seeds.tolist()):
            sampled = got[indptr_s[i] : indptr_s[i + 1]].tolist()
            deg = len(nbrs[v])
            if deg > fanout:
                r = keyed_draws_reference(base_key(_SALT_SAMPLE, 7), v, deg, fanout)
                assert all(0 <= x < deg - i for i, x in enumerate(r))
                assert sampled == [nbrs[v][o] for o in fisher_yates(r, deg)]
            else:
                assert sampled == nbrs[v]
    # a Generator is a source of one key, drawn from it
    gen_got = sample_neighbors(g.indptr, g.indices, seeds, fanout, np.random.default_rng(7))
    key = int(np.random.default_rng(7).integers(0, 1 << 63))
    assert torch.equal(gen_got[1], sample_neighbors(g.indptr, g.indices, seeds, fanout, key)[1])


def fan_in_graph(trials: int, deg: int) -> Graph:
    """``trials`` destinations (IDs ``deg + 1 ...``), each with in-neighbours ``1..deg``."""
    dst = np.repeat(np.arange(trials) + deg + 1, deg)
    src = np.tile(np.arange(1, deg + 1), trials)
    return from_edges(src, dst, trials + deg + 1)


def test_inclusion_is_uniform_chi_square() -> None:
    # 20000 nodes with the same 10 distinct in-neighbours, each sampled with fanout 3 (the
    # draws are keyed by node ID: distinct nodes are independent trials)
    trials, fanout = 20000, 3
    g = fan_in_graph(trials, 10)
    _, got = sample_neighbors(g.indptr, g.indices, torch.arange(11, 11 + trials), fanout, 5)
    counts = np.bincount(got.numpy(), minlength=11)[1:]
    assert counts.sum() == trials * fanout
    p = stats.chisquare(counts, np.full(10, trials * fanout / 10)).pvalue
    assert p > 1e-3, counts


def test_subsets_are_uniform_chi_square() -> None:
    # deg 5, fanout 2: all 10 unordered pairs equally likely
    trials = 20000
    g = fan_in_graph(trials, 5)
    _, got = sample_neighbors(g.indptr, g.indices, torch.arange(6, 6 + trials), 2, 11)
    pairs = got.view(trials, 2).sort(dim=1).values.numpy()
    assert (pairs[:, 0] != pairs[:, 1]).all()
    code = (pairs[:, 0] - 1) * 5 + (pairs[:, 1] - 1)
    counts = np.bincount(code, minlength=25)
    counts = counts[[a * 5 + b for a, b in itertools.combinations(range(5), 2)]]
    assert counts.sum() == trials
    assert stats.chisquare(counts).pvalue > 1e-3, counts


def test_draws_are_keyed_by_node_not_position() -> None:
    g = random_graph()
    a_ptr, a = sample_neighbors(g.indptr, g.indices, torch.tensor([0, 1, 0]), 3, 2)
    b_ptr, b = sample_neighbors(g.indptr, g.indices, torch.tensor([1, 0]), 3, 2)
    assert a[0:3].tolist() == a[6:9].tolist() == b[3:6].tolist()  # node 0 (degree > 3)
    assert a[3:6].tolist() == b[0:3].tolist()


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
    a = NeighborSampler(g, [4, 3], seed=2).sample_from_nodes(seeds, epoch=1, step=2).blocks
    b = (
        NeighborSampler(GraphTopology(gm), [4, 3], seed=2)
        .sample_from_nodes(seeds, epoch=1, step=2)
        .blocks
    )
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


@pytest.fixture(params=["sort", "dense"])
def unique_path(request, monkeypatch):
    """Both ways of deduplicating (numpy and torch, on every device): a sort, or arrays over the
    IDs' range."""
    from fleetgnn.sampling import unique

    factor = 0 if request.param == "sort" else 10**9
    monkeypatch.setattr(unique, "DENSE_RANGE_FACTOR", factor)
    monkeypatch.setattr(unique, "DENSE_RANGE_FACTOR_DEVICE", factor)
    monkeypatch.setitem(unique.DENSE_RANGE_FACTOR_TORCH, "cpu", factor)
    return request.param


def test_append_unique_invariants(unique_path) -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        t = int(rng.integers(0, 20))
        targets = torch.from_numpy(rng.permutation(100)[:t])
        nbrs = torch.from_numpy(rng.integers(0, 100, int(rng.integers(0, 60))))
        check_append_unique(targets, nbrs)


def test_append_unique_example_and_edge_cases(unique_path) -> None:
    uniq, local, dup = append_unique(torch.tensor([5, 2, 9]), torch.tensor([2, 7, 7, 1, 5]))
    assert uniq.tolist() == [5, 2, 9, 7, 1]
    assert local.tolist() == [1, 3, 3, 4, 0]
    assert dup.tolist() == [1, 1, 0, 2, 1]
    check_append_unique(torch.tensor([], dtype=torch.int64), torch.tensor([3, 3, 1]))
    check_append_unique(torch.tensor([4, 1]), torch.tensor([], dtype=torch.int64))
    with pytest.raises(GraphError, match="ID 1 repeats at position 2"):
        append_unique(torch.tensor([1, 2, 1]), torch.tensor([3]))
    uniq, local, _ = append_unique(torch.tensor([10**12]), torch.tensor([7, 10**12, 7]))
    assert uniq.tolist() == [10**12, 7] and local.tolist() == [1, 0, 1]  # a wide range
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
    blocks = (
        NeighborSampler(g, fanouts, seed=4)
        .sample_from_nodes(seeds.to(device), epoch=2, step=5)
        .blocks
    )
    assert len(blocks) == 3
    for b in blocks:  # the blocks stay on the seeds' device and are valid there
        assert b.src_ids.device.type == b.indices.device.type == device
        b.validate()
    blocks = [b.to("cpu") for b in blocks]
    check_blocks(g, blocks, seeds, fanouts)
    for a, b in zip(
        blocks,
        NeighborSampler(g, fanouts, seed=4).sample_from_nodes(seeds, epoch=2, step=5).blocks,
        strict=True,
    ):
        assert torch.equal(a.src_ids.cpu(), b.src_ids) and torch.equal(a.indices.cpu(), b.indices)


def test_sampler_reproducible_and_independent_of_other_batches() -> None:
    g = random_graph()
    s = NeighborSampler(g, [4, 4], seed=1)
    seeds = torch.arange(20)
    a = s.sample_from_nodes(seeds, epoch=0, step=3).blocks
    s.sample_from_nodes(torch.arange(20, 40), epoch=0, step=2)  # another batch in between
    b = NeighborSampler(g, [4, 4], seed=1).sample_from_nodes(seeds, epoch=0, step=3).blocks
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.src_ids, y.src_ids) and torch.equal(x.indices, y.indices)
    others = [
        s.sample_from_nodes(seeds, epoch=1, step=3).blocks,
        s.sample_from_nodes(seeds, epoch=0, step=4).blocks,
        NeighborSampler(g, [4, 4], 2).sample_from_nodes(seeds, epoch=0, step=3).blocks,
        s.sample_from_nodes(seeds, epoch=0, step=3, stream=1).blocks,
    ]
    for o in others:
        assert not torch.equal(o[0].src_ids, a[0].src_ids)


def test_sampler_does_not_touch_global_rng() -> None:
    g = random_graph()
    torch_state = torch.get_rng_state()
    np_state = np.random.get_state()[1].copy()  # noqa: NPY002 (the legacy global RNG itself)
    NeighborSampler(g, [3, 3]).sample_from_nodes(torch.arange(10))
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert (np.random.get_state()[1] == np_state).all()  # noqa: NPY002


def test_two_layer_full_sample_is_exact_two_hop_neighborhood(device: str) -> None:
    g = random_graph(seed=5)
    seeds = torch.tensor([2, 9, 0])
    blocks = [
        b.to("cpu") for b in NeighborSampler(g, [-1, -1]).sample_from_nodes(seeds.to(device)).blocks
    ]
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
    c = NeighborSampler(g, [-1], seed=3).sample_from_nodes(dst, epoch=5, step=5).blocks[0]
    for f in ("indptr", "indices", "src_ids", "src_degree", "edge_weight"):
        assert torch.equal(getattr(b, f), getattr(c, f))
    check_blocks(g, [b], dst, [-1])


# ------------------------------------------------------------------ numpy vs torch backends
BLOCK_FIELDS = ("indptr", "indices", "src_ids", "src_degree", "edge_weight")


def assert_same_blocks(a: list, b: list) -> None:
    """Every tensor of every block equal (values, dtypes and shapes), compared on the CPU."""
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.num_dst == y.num_dst
        for f in BLOCK_FIELDS:
            u, v = getattr(x, f), getattr(y, f)
            assert (u is None) == (v is None), f
            if u is not None:
                assert u.dtype == v.dtype and torch.equal(u.cpu(), v.cpu()), f


@pytest.fixture(params=["draw_where_needed", "draw_every_seed"])
def torch_ways(request, monkeypatch):
    """Both ways of the torch sampler on the CPU: the CPU's (the seeds that draw, and the sort),
    and the accelerators' (every seed draws, arrays over the range, fewer host syncs)."""
    from fleetgnn.sampling import neighbor, unique

    if request.param == "draw_every_seed":
        monkeypatch.setitem(neighbor.DRAW_EVERY_SEED, "cpu", True)
        monkeypatch.setitem(
            unique.DENSE_RANGE_FACTOR_TORCH, "cpu", unique.DENSE_RANGE_FACTOR_DEVICE
        )
    return request.param


@pytest.mark.parametrize("graph_seed", [0, 1, 2])
@pytest.mark.parametrize(
    "fanouts", [[3, 2], [10, 4, 1], [-1, 3], [0, 5], [1], [25, 25], [4, -1, 2]]
)
def test_numpy_and_torch_backends_give_identical_blocks(
    graph_seed: int, fanouts: list, torch_ways
) -> None:
    g = random_graph(n=80, e=900, seed=graph_seed, weighted=graph_seed == 1)
    # high-degree, low-degree and zero-degree (75..79) seeds
    seeds_list = [torch.tensor([0, 75, 3, 79, 12]), torch.arange(80), torch.tensor([77])]
    for seeds, (epoch, step, stream) in itertools.product(
        seeds_list, [(0, 0, 0), (1, 2, 0), (3, 7, 1)]
    ):
        kw = {"epoch": epoch, "step": step, "stream": stream}
        a = (
            NeighborSampler(g, fanouts, seed=graph_seed, backend="numpy")
            .sample_from_nodes(seeds, **kw)
            .blocks
        )
        b = (
            NeighborSampler(g, fanouts, seed=graph_seed, backend="torch")
            .sample_from_nodes(seeds, **kw)
            .blocks
        )
        c = (
            NeighborSampler(g, fanouts, seed=graph_seed).sample_from_nodes(seeds, **kw).blocks
        )  # auto: numpy
        assert_same_blocks(a, b)
        assert_same_blocks(a, c)
        check_blocks(g, b, seeds, fanouts)


def test_backends_agree_on_duplicate_seeds_and_edge_weights() -> None:
    g = random_graph(weighted=True)
    seeds = torch.tensor([0, 59, 0, 3, 3, 58, 1])  # repeats, and zero-degree nodes
    for fanout in (-1, 0, 1, 2, 6, 40):
        got = [
            sample_neighbors_from(g, seeds, fanout, 3, with_edge_weight=True, backend=be)
            for be in ("numpy", "torch")
        ]
        for u, v in zip(*got, strict=True):
            assert u.dtype == v.dtype and torch.equal(u, v)
    blocks = [full_neighbor_block(g, torch.tensor([4, 1, 59]), backend=be) for be in BACKENDS[1:]]
    assert_same_blocks([blocks[0]], [blocks[1]])


def test_device_topology_reads_equal_graph_topology(device: str) -> None:
    g = random_graph(weighted=True)
    topo = DeviceTopology.from_graph(g, device)
    host = GraphTopology(g)
    assert topo.num_nodes == host.num_nodes and topo.has_edge_weight
    assert topo.device.type == device and device in repr(topo)
    ids = torch.tensor([0, 3, 59, 0])
    off = torch.tensor([1, 0, 0, 2])
    sub = torch.tensor([0, 3, 1, 0])
    assert torch.equal(topo.in_degree(ids).cpu(), host.in_degree(ids))
    assert torch.equal(topo.neighbors_at(sub, off).cpu(), host.neighbors_at(sub, off))
    assert torch.equal(topo.edge_weight_at(sub, off).cpu(), host.edge_weight_at(sub, off))
    for u, v in zip(topo.all_neighbors(ids.to(device)), host.all_neighbors(ids), strict=True):
        assert u.device.type == device and torch.equal(u.cpu(), v)


def test_device_sampling_equals_numpy_sampling(device: str) -> None:
    """Seeds and topology on ``device``: the torch backend runs there, blocks equal numpy's."""
    g = random_graph(n=80, e=900, seed=4, weighted=True)
    seeds = torch.tensor([5, 0, 77, 41, 3, 79])
    want = (
        NeighborSampler(g, [6, 3, -1], seed=9, backend="numpy")
        .sample_from_nodes(seeds, epoch=2, step=3, stream=1)
        .blocks
    )
    topo = DeviceTopology.from_graph(g, device)
    for source in (topo, g):  # device-resident topology, and host topology with device seeds
        got = (
            NeighborSampler(source, [6, 3, -1], seed=9)
            .sample_from_nodes(seeds.to(device), epoch=2, step=3, stream=1)
            .blocks
        )
        assert all(b.src_ids.device.type == device for b in got)
        assert_same_blocks(want, got)
    # a device topology with host seeds samples on the topology's device too
    got = (
        NeighborSampler(topo, [6, 3, -1], seed=9)
        .sample_from_nodes(seeds, epoch=2, step=3, stream=1)
        .blocks
    )
    assert got[0].src_ids.device.type == device
    assert_same_blocks(want, got)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_every_fisher_yates_kernel_samples_numpys_blocks_on_cuda(impl: str) -> None:
    """Each registered Fisher-Yates kernel (fleetgnn.kernels) gives numpy's blocks on CUDA."""
    from fleetgnn.kernels import KERNELS, triton_available

    if impl == "triton" and not triton_available():
        pytest.skip("triton does not import here")
    g = random_graph(n=300, e=6000, seed=2, weighted=True)
    seeds = torch.tensor([5, 0, 77, 41, 3, 79, 299, 150])
    topo = DeviceTopology.from_graph(g, "cuda")
    with KERNELS.using("fisher_yates", "cuda", impl):
        for fanouts in ([6, 3, -1], [25, 1, 40], [200, 2]):
            want = (
                NeighborSampler(g, fanouts, seed=9, backend="numpy")
                .sample_from_nodes(seeds, epoch=2, step=3)
                .blocks
            )
            got = (
                NeighborSampler(topo, fanouts, seed=9)
                .sample_from_nodes(seeds.cuda(), epoch=2, step=3)
                .blocks
            )
            assert_same_blocks(want, got)


def test_device_topology_errors() -> None:
    g = random_graph()
    ip, ix = torch.from_numpy(g.indptr), torch.from_numpy(g.indices)
    with pytest.raises(GraphError, match="'indptr' must be int64"):
        DeviceTopology(ip.int(), ix)
    with pytest.raises(GraphError, match="'indices' must be a 1-D integer"):
        DeviceTopology(ip, ix.double())
    with pytest.raises(GraphError, match=r"'indptr\[-1\]'"):
        DeviceTopology(ip, ix[:-1])
    with pytest.raises(GraphError, match="no 'edge_weight'"):
        DeviceTopology(ip, ix).edge_weight_at(torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(ConfigError, match="'backend' must be one of 'auto', 'numpy', 'torch'"):
        NeighborSampler(g, [2], backend="cuda")  # type: ignore[arg-type]
    with pytest.raises(GraphError, match="outside the valid interval"):
        NeighborSampler(g, [2], backend="torch").sample_from_nodes(torch.tensor([0, 60]))


def test_sampler_errors() -> None:
    g = random_graph()
    with pytest.raises(ConfigError, match="fanouts"):
        NeighborSampler(g, [])
    with pytest.raises(ConfigError, match=r"fanouts\[1\]"):
        NeighborSampler(g, [2, -3])
    with pytest.raises(ConfigError, match="'epoch'"):
        NeighborSampler(g, [2]).sample_from_nodes(torch.tensor([0]), epoch=-1)
    with pytest.raises(GraphError, match="distinct"):
        NeighborSampler(g, [2]).sample_from_nodes(torch.tensor([0, 0]))
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


def test_blocks_carry_the_sampled_edges_ids_on_every_backend_and_topology() -> None:
    rng = np.random.default_rng(7)
    n, e = 60, 400
    g = from_edges(rng.integers(0, n, e), rng.integers(0, n, e), n)
    seeds = torch.tensor([3, 17, 42, 8, 55])
    exclude = edge_keys(torch.tensor([int(g.indices[g.indptr[17]])]), torch.tensor([17]), n)
    dst_of = g.dst_of_edges()
    runs = []
    for topo, backend in (
        (g, "numpy"),
        (g, "torch"),
        (DeviceTopology.from_graph(g), "torch"),
    ):
        sampler = NeighborSampler(topo, [4, 3], seed=5, backend=backend, with_edge_ids=True)
        blocks = sampler.sample_from_nodes(seeds, epoch=1, step=2, exclude=exclude).blocks
        plain = (
            NeighborSampler(topo, [4, 3], seed=5, backend=backend)
            .sample_from_nodes(seeds, epoch=1, step=2, exclude=exclude)
            .blocks
        )
        for b, p in zip(blocks, plain, strict=True):
            assert p.edge_ids is None and torch.equal(b.indices, p.indices)  # same sample
            eid = b.edge_ids.numpy()
            row = np.repeat(np.arange(b.num_dst), b.dst_in_degree().numpy())
            # edge e goes indices[e] -> dst_of[e] in the graph: the block's edge, by ID
            np.testing.assert_array_equal(g.indices[eid], b.src_ids[b.indices].numpy())
            np.testing.assert_array_equal(dst_of[eid], b.dst_ids[row].numpy())
            assert np.unique(eid).size == eid.size
        runs.append([b.edge_ids for b in blocks])
    for other in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], other, strict=True))
    full = full_neighbor_block(g, torch.tensor([9, 4]), with_edge_ids=True)
    np.testing.assert_array_equal(
        full.edge_ids.numpy(), np.r_[g.indptr[9] : g.indptr[10], g.indptr[4] : g.indptr[5]]
    )

    class Plain:  # a topology that cannot name its edges
        def __init__(self, inner: GraphTopology) -> None:
            self.num_nodes, self.has_edge_weight = inner.num_nodes, inner.has_edge_weight
            self.in_degree, self.neighbors_at = inner.in_degree, inner.neighbors_at
            self.all_neighbors, self.edge_weight_at = inner.all_neighbors, inner.edge_weight_at

    assert isinstance(Plain(GraphTopology(g)), TopologySource)
    with pytest.raises(GraphError, match="with_edge_ids=True needs a topology"):
        NeighborSampler(Plain(GraphTopology(g)), [2], with_edge_ids=True)
