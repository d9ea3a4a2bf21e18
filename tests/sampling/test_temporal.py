import itertools

import numpy as np
import pytest
import torch

from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph import Graph, from_edges
from fleetgnn.sampling import (
    DeviceTopology,
    GraphTopology,
    NeighborSampler,
    TemporalSampler,
    edge_keys,
)
from fleetgnn.sampling.neighbor import _sample_hop
from fleetgnn.sampling.temporal import (
    EdgeTimeArray,
    EdgeTimeSource,
    TemporalSample,
    bisect_counts,
)

BLOCK_FIELDS = ("indptr", "indices", "src_ids", "src_degree", "edge_weight", "edge_ids")


def temporal_csc(
    src: np.ndarray,
    dst: np.ndarray,
    time: np.ndarray,
    num_nodes: int,
    seed: int = 0,
    weight: np.ndarray | None = None,
) -> tuple[Graph, np.ndarray]:
    """A CSC graph whose in-edges are sorted by time per destination, and its aligned times.

    Ties in time keep a random order (so "later in CSC order" is not "smaller source ID").
    """
    tie = np.random.default_rng(seed).permutation(src.size)
    order = np.lexsort((tie, time, dst))
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    indptr[1:] = np.cumsum(np.bincount(dst, minlength=num_nodes))
    w = None if weight is None else weight[order]
    g = Graph(indptr=indptr, indices=src[order].astype(np.int32), edge_weight=w)
    return g, time[order].astype(np.int64)


def random_temporal_graph(
    n: int = 60, e: int = 700, seed: int = 0, time_range: int = 40, weighted: bool = False
) -> tuple[Graph, np.ndarray]:
    """Multigraph with skewed in-degrees, nodes n-5..n-1 of in-degree 0, many tied times."""
    rng = np.random.default_rng(seed)
    dst = (rng.pareto(1.2, e) * 3).astype(np.int64) % (n - 5)
    src = rng.integers(0, n, e)
    time = rng.integers(0, time_range, e)
    w = np.arange(e, dtype=np.float64) if weighted else None  # names each edge
    return temporal_csc(src, dst, time, n, seed, w)


def brute_candidates(g: Graph, et: np.ndarray, v: int, t: int, inclusive: bool) -> list[int]:
    """Edge positions of v's in-edges before t (a mask over the whole segment)."""
    lo, hi = int(g.indptr[v]), int(g.indptr[v + 1])
    seg = et[lo:hi]
    ok = seg <= t if inclusive else seg < t
    return [lo + i for i in np.flatnonzero(ok).tolist()]


def check_sample(
    g: Graph,
    et: np.ndarray,
    out: TemporalSample,
    seeds: torch.Tensor,
    seed_time: torch.Tensor,
    fanouts: list[int],
    strategy: str,
    inclusive: bool,
) -> None:
    """Every block against the brute-force definition (the blocks carry edge IDs)."""
    blocks = [b.to("cpu") for b in out.blocks]
    index = [i.cpu() for i in out.seed_index]
    num_seeds = seeds.numel()
    assert torch.equal(blocks[-1].dst_ids, seeds.cpu())
    assert torch.equal(index[-1][:num_seeds], torch.arange(num_seeds))
    assert torch.equal(out.seed_time.cpu(), seed_time.cpu())
    for i, b in enumerate(blocks):
        b.validate()
        owner = index[i]
        assert owner.shape == b.src_ids.shape
        if i + 1 < len(blocks):
            assert torch.equal(b.dst_ids, blocks[i + 1].src_ids)
            assert torch.equal(owner[: b.num_dst], index[i + 1])
        assert torch.equal(out.src_time(i).cpu(), seed_time.cpu()[owner])
        pairs = owner * g.num_nodes + b.src_ids  # identity in the batch: (seed, node)
        assert pairs.unique().numel() == b.num_src
        # every new source was reached by an edge of this block
        assert set(range(b.num_dst, b.num_src)) <= set(b.indices.tolist())
        fanout = fanouts[len(blocks) - 1 - i]
        for s in range(b.num_src):  # src_degree: the in-degree as of the source's time
            v, t = int(b.src_ids[s]), int(seed_time[owner[s]])
            assert float(b.src_degree[s]) == len(brute_candidates(g, et, v, t, inclusive))
        for d in range(b.num_dst):
            v, t = int(b.src_ids[d]), int(seed_time[owner[d]])
            cand = brute_candidates(g, et, v, t, inclusive)
            lo, hi = int(b.indptr[d]), int(b.indptr[d + 1])
            eids = b.edge_ids[lo:hi].tolist()
            local = b.indices[lo:hi]
            assert b.src_ids[local].tolist() == g.indices[eids].tolist()
            assert (owner[local] == owner[d]).all()  # a subtree keeps its seed
            if b.edge_weight is not None:
                assert b.edge_weight[lo:hi].tolist() == g.edge_weight[eids].tolist()
            want = len(cand) if fanout < 0 else min(fanout, len(cand))
            if strategy == "last" or want == len(cand):
                assert eids == cand[len(cand) - want :]  # the latest, in CSC order
            else:
                assert len(set(eids)) == len(eids) == want
                assert set(eids) <= set(cand)


# ------------------------------------------------------------------ the brute-force definition
@pytest.mark.parametrize("graph_seed", [0, 1])
@pytest.mark.parametrize("strategy", ["uniform", "last"])
@pytest.mark.parametrize("inclusive", [False, True])
def test_blocks_equal_brute_force(graph_seed: int, strategy: str, inclusive: bool) -> None:
    g, et = random_temporal_graph(seed=graph_seed, weighted=graph_seed == 1)
    rng = np.random.default_rng(graph_seed + 10)
    seeds = torch.tensor([0, 0, 3, 59, 12, 1, 7, 3])  # repeats; a zero-degree node
    seed_time = torch.from_numpy(rng.integers(-2, 45, seeds.numel()))
    for fanouts, backend in itertools.product(
        [[3, 2], [-1, 2], [1, -1, 4], [0, 3]], ["numpy", "torch"]
    ):
        sampler = TemporalSampler(
            g,
            fanouts,
            seed=graph_seed,
            edge_time=et,
            strategy=strategy,
            inclusive=inclusive,
            backend=backend,
            with_edge_ids=True,
        )
        out = sampler.sample_from_nodes(seeds, seed_time=seed_time, epoch=1, step=2)
        check_sample(g, et, out, seeds, seed_time, fanouts, strategy, inclusive)


def test_count_before_is_the_brute_force_count() -> None:
    g, et = random_temporal_graph(seed=3, time_range=8)
    times = EdgeTimeArray(g, et)
    rng = np.random.default_rng(0)
    ids = torch.from_numpy(rng.integers(0, g.num_nodes, 500))
    t = torch.from_numpy(rng.integers(-1, 10, 500))
    for inclusive in (False, True):
        got = times.count_before(ids, t, inclusive)
        want = [
            len(brute_candidates(g, et, int(v), int(s), inclusive))
            for v, s in zip(ids, t, strict=True)
        ]
        assert got.tolist() == want
    assert times.count_before(ids[:0], t[:0]).numel() == 0


def test_uniform_draws_are_the_plain_samplers_when_nothing_is_in_the_future() -> None:
    """Same keyed hash: with every edge before every seed, each subtree's draws for a node
    are the plain sampler's draws for that node (the key of its hop, its node ID, its degree)."""
    g, et = random_temporal_graph(seed=2)
    seeds = torch.tensor([4, 0, 17, 0])
    fanouts = [3, 2, 4]
    sampler = TemporalSampler(g, fanouts, seed=6, edge_time=et, with_edge_ids=True)
    out = sampler.sample_from_nodes(
        seeds, seed_time=torch.full((4,), 10**9), epoch=3, step=1, stream=2
    )
    topo = GraphTopology(g)
    plain = NeighborSampler(g, fanouts, seed=6)
    for hop, fanout in enumerate(fanouts):
        b = out.blocks[len(fanouts) - 1 - hop]
        dst = b.dst_ids
        key = plain.key(3, 1, hop, 2)
        ptr, _, _, eids = _sample_hop(
            topo, dst, topo.in_degree(dst), fanout, key, False, None, True
        )
        assert torch.equal(ptr, b.indptr) and torch.equal(eids, b.edge_ids)


# ------------------------------------------------------------------ the future never leaks
def hub_graph_with_future() -> tuple[Graph, np.ndarray, set[int], int]:
    """A hub (node 0) with past in- and out-edges and planted future edges into and out of it,
    and future edges elsewhere; returns the graph, times, the future edges' IDs and the cut."""
    rng = np.random.default_rng(5)
    n, e = 80, 900
    src = rng.integers(0, n, e)
    dst = rng.integers(0, n, e)
    src[:150], dst[150:300] = 0, 0  # the hub: 150 out-edges, 150 in-edges
    time = rng.integers(0, 100, e)
    future = np.zeros(e, dtype=bool)
    future[rng.choice(e, 60, replace=False)] = True
    future[:10] = future[150:160] = True  # on the hub, both ways
    time[future] = 1000 + rng.integers(0, 5, future.sum())
    g, et = temporal_csc(src, dst, time, n, seed=5)
    return g, et, set(np.flatnonzero(et >= 1000).tolist()), 1000


@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_a_planted_future_edge_never_appears(strategy: str) -> None:
    g, et, planted, cut = hub_graph_with_future()
    assert len(planted) >= 60
    rng = np.random.default_rng(1)
    seen: set[int] = set()
    for backend, inclusive, fanouts in itertools.product(
        ["numpy", "torch"], [False, True], [[4, 4, 4], [-1, 2], [20, -1]]
    ):
        sampler = TemporalSampler(
            g,
            fanouts,
            edge_time=et,
            strategy=strategy,
            inclusive=inclusive,
            backend=backend,
            with_edge_ids=True,
        )
        for step, stream in itertools.product(range(6), range(2)):
            seeds = torch.from_numpy(np.r_[0, rng.integers(0, g.num_nodes, 15)])
            seed_time = torch.from_numpy(rng.integers(0, cut, seeds.numel()))
            seed_time[0] = cut - 1  # the hub at the latest time allowed
            out = sampler.sample_from_nodes(
                seeds, seed_time=seed_time, epoch=0, step=step, stream=stream
            )
            for b in out.blocks:
                eids = set(b.edge_ids.tolist())
                assert not eids & planted
                seen |= eids
    assert len(seen) > 400  # the hub's past was sampled, at every hop
    # the test can fail: seeds after the cut do see the planted edges
    late = TemporalSampler(g, [-1, -1], edge_time=et, with_edge_ids=True).sample_from_nodes(
        torch.tensor([0]), seed_time=torch.tensor([cut + 10])
    )
    assert set(late.blocks[-1].edge_ids.tolist()) & planted


def test_inclusive_switch_takes_an_edge_at_exactly_t() -> None:
    # node 0's in-edges: 1 at 5, 2 at 10, 3 at 10, 4 at 20
    g, et = temporal_csc(
        np.array([1, 2, 3, 4]), np.array([0, 0, 0, 0]), np.array([5, 10, 10, 20]), 5
    )
    ties = [int(g.indices[p]) for p in range(1, 3)]  # the tied edges, in CSC order
    for backend in ("numpy", "torch"):
        for inclusive, want in ((False, [1]), (True, [1, *ties])):
            for strategy in ("uniform", "last"):
                s = TemporalSampler(
                    g, [-1], edge_time=et, strategy=strategy, inclusive=inclusive, backend=backend
                )
                b = s.sample_from_nodes(torch.tensor([0]), seed_time=torch.tensor([10])).blocks[0]
                assert b.src_ids[b.indices].tolist() == want
            last = TemporalSampler(
                g, [1], edge_time=et, strategy="last", inclusive=inclusive, backend=backend
            )
            b = last.sample_from_nodes(torch.tensor([0]), seed_time=torch.tensor([10])).blocks[0]
            assert b.src_ids[b.indices].tolist() == want[-1:]  # ties: later in CSC order


# ------------------------------------------------------------------ backends and keys
def assert_same_samples(a: TemporalSample, b: TemporalSample) -> None:
    assert len(a.blocks) == len(b.blocks)
    for x, y, i, j in zip(a.blocks, b.blocks, a.seed_index, b.seed_index, strict=True):
        assert x.num_dst == y.num_dst and torch.equal(i.cpu(), j.cpu())
        for f in BLOCK_FIELDS:
            u, v = getattr(x, f), getattr(y, f)
            assert (u is None) == (v is None), f
            if u is not None:
                assert u.dtype == v.dtype and torch.equal(u.cpu(), v.cpu()), f


@pytest.fixture(params=["draw_where_needed", "draw_every_seed"])
def torch_ways(request, monkeypatch):
    """The torch sampler's CPU way and its accelerators' way (every seed draws, dense dedup)."""
    from fleetgnn.sampling import neighbor, unique

    if request.param == "draw_every_seed":
        monkeypatch.setitem(neighbor.DRAW_EVERY_SEED, "cpu", True)
        monkeypatch.setitem(
            unique.DENSE_RANGE_FACTOR_TORCH, "cpu", unique.DENSE_RANGE_FACTOR_DEVICE
        )
    return request.param


@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_numpy_and_torch_backends_give_identical_samples(strategy: str, torch_ways) -> None:
    g, et = random_temporal_graph(n=80, e=900, seed=4, weighted=True)
    rng = np.random.default_rng(2)
    seeds = torch.tensor([0, 75, 3, 79, 12, 3, 0])
    seed_time = torch.from_numpy(rng.integers(0, 40, seeds.numel()))
    for fanouts, (epoch, step, stream) in itertools.product(
        [[3, 2], [10, 4, 1], [-1, 3], [0, 5]], [(0, 0, 0), (1, 2, 0), (3, 7, 1)]
    ):
        kw = {"edge_time": et, "strategy": strategy, "with_edge_ids": True}
        a = TemporalSampler(g, fanouts, 3, backend="numpy", **kw)
        b = TemporalSampler(g, fanouts, 3, backend="torch", **kw)
        keys = {"seed_time": seed_time, "epoch": epoch, "step": step, "stream": stream}
        assert_same_samples(a.sample_from_nodes(seeds, **keys), b.sample_from_nodes(seeds, **keys))


def test_device_topology_and_device_times_sample_numpys_blocks(device: str) -> None:
    g, et = random_temporal_graph(n=80, e=900, seed=6, weighted=True)
    seeds = torch.tensor([5, 0, 77, 41, 3, 5])
    seed_time = torch.tensor([30, 12, 5, 39, 0, 2])
    for strategy in ("uniform", "last"):
        want = TemporalSampler(
            g, [6, 3, -1], 9, edge_time=et, strategy=strategy, backend="numpy"
        ).sample_from_nodes(seeds, seed_time=seed_time, epoch=2, step=3, stream=1)
        topo = DeviceTopology.from_graph(g, device)
        for times in (torch.from_numpy(et).to(device), et):
            got = TemporalSampler(
                topo, [6, 3, -1], 9, edge_time=times, strategy=strategy
            ).sample_from_nodes(
                seeds.to(device), seed_time=seed_time.to(device), epoch=2, step=3, stream=1
            )
            assert all(b.src_ids.device.type == device for b in got.blocks)
            assert_same_samples(want, got)


def test_reproducible_per_epoch_step_and_stream() -> None:
    g, et = random_temporal_graph(seed=7)
    seeds, seed_time = torch.arange(20), torch.full((20,), 30)
    s = TemporalSampler(g, [4, 4], seed=1, edge_time=et)
    a = s.sample_from_nodes(seeds, seed_time=seed_time, epoch=0, step=3)
    s.sample_from_nodes(
        torch.arange(20, 40), seed_time=seed_time, epoch=0, step=2
    )  # another batch in between
    assert_same_samples(
        a,
        TemporalSampler(g, [4, 4], seed=1, edge_time=et).sample_from_nodes(
            seeds, seed_time=seed_time, epoch=0, step=3
        ),
    )
    others = [
        s.sample_from_nodes(seeds, seed_time=seed_time, epoch=1, step=3),
        s.sample_from_nodes(seeds, seed_time=seed_time, epoch=0, step=4),
        s.sample_from_nodes(seeds, seed_time=seed_time, epoch=0, step=3, stream=1),
        TemporalSampler(g, [4, 4], seed=2, edge_time=et).sample_from_nodes(
            seeds, seed_time=seed_time, epoch=0, step=3
        ),
    ]
    for o in others:
        assert not torch.equal(o.blocks[0].src_ids, a.blocks[0].src_ids)
    # "last" has no randomness: every key gives the same blocks
    last = TemporalSampler(g, [4, 4], seed=1, edge_time=et, strategy="last")
    assert_same_samples(
        last.sample_from_nodes(seeds, seed_time=seed_time, epoch=0, step=3),
        last.sample_from_nodes(seeds, seed_time=seed_time, epoch=5, step=1),
    )


# ------------------------------------------------------------------ disjoint subtrees
def disjoint_graph() -> tuple[Graph, np.ndarray]:
    """0 <- 1 @1, 2 @5, 3 @9;  5 <- 0 @0;  6 <- 0 @0;  1 <- 7 @0, 8 @6."""
    src = np.array([1, 2, 3, 0, 0, 7, 8])
    dst = np.array([0, 0, 0, 5, 6, 1, 1])
    time = np.array([1, 5, 9, 0, 0, 0, 6])
    return temporal_csc(src, dst, time, 9)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_seeds_at_different_times_sharing_a_neighbour_get_their_own_candidates(
    backend: str,
) -> None:
    g, et = disjoint_graph()
    sampler = TemporalSampler(g, [-1, -1, -1], edge_time=et, backend=backend)
    out = sampler.sample_from_nodes(torch.tensor([5, 6]), seed_time=torch.tensor([3, 10]))
    hop1 = out.blocks[1]  # destinations: the seeds, then node 0 once per subtree
    assert hop1.dst_ids.tolist() == [5, 6, 0, 0]
    assert out.seed_index[1][:4].tolist() == [0, 1, 0, 1]
    assert hop1.src_degree[2:4].tolist() == [1.0, 3.0]  # node 0's in-degree at t = 3 and 10

    def nbrs(b, d):
        return sorted(b.src_ids[b.indices[b.indptr[d] : b.indptr[d + 1]]].tolist())

    assert nbrs(hop1, 2) == [1] and nbrs(hop1, 3) == [1, 2, 3]
    hop2 = out.blocks[0]  # node 1 in both subtrees: 7 only before t = 3, 7 and 8 before 10
    d1 = [d for d in range(hop2.num_dst) if int(hop2.src_ids[d]) == 1]
    assert [out.seed_index[0][d].item() for d in d1] == [0, 1]
    assert [nbrs(hop2, d) for d in d1] == [[7], [7, 8]]
    # one node as two seeds at two times: two subtrees
    twice = sampler.sample_from_nodes(torch.tensor([0, 0]), seed_time=torch.tensor([2, 10])).blocks[
        -1
    ]
    assert nbrs(twice, 0) == [1] and nbrs(twice, 1) == [1, 2, 3]
    assert twice.src_ids.tolist() == [0, 0, 1, 1, 2, 3]


def test_duplicated_sources_aggregate_per_subtree() -> None:
    """The layers index blocks by local position: repeated global IDs need nothing special."""
    from fleetgnn.nn import LocalAggregator

    g, et = disjoint_graph()
    b = TemporalSampler(g, [-1], edge_time=et).sample_from_nodes(
        torch.tensor([0, 0]), seed_time=torch.tensor([2, 10])
    )
    block = b.blocks[0]
    x = torch.arange(block.num_src, dtype=torch.float64)[:, None]  # a row per (seed, node)
    got = LocalAggregator(block, dtype=torch.float64).aggregate(x, "sum")
    want = [float(x[block.indices[block.indptr[d] : block.indptr[d + 1]]].sum()) for d in (0, 1)]
    assert got[:, 0].tolist() == want and want[0] != want[1]


def test_exclude_drops_edges_in_every_subtree() -> None:
    g, et = random_temporal_graph(seed=8)
    seeds, seed_time = torch.tensor([0, 1, 2, 0]), torch.tensor([40, 40, 40, 20])
    first = (
        TemporalSampler(g, [-1], edge_time=et)
        .sample_from_nodes(seeds, seed_time=seed_time)
        .blocks[0]
    )
    u = first.src_ids[first.indices[:3]]
    v = first.dst_ids[torch.repeat_interleave(torch.arange(4), first.dst_in_degree())[:3]]
    keys = edge_keys(u, v, g.num_nodes)
    for backend in ("numpy", "torch"):
        out = TemporalSampler(g, [-1, 3], edge_time=et, backend=backend).sample_from_nodes(
            seeds, seed_time=seed_time, exclude=keys
        )
        for b in out.blocks:
            row = torch.repeat_interleave(torch.arange(b.num_dst), b.dst_in_degree())
            got = b.dst_ids[row] * g.num_nodes + b.src_ids[b.indices]
            assert not torch.isin(got, keys).any()


# ------------------------------------------------------------------ errors
def test_errors_are_one_clear_line() -> None:
    g, et = random_temporal_graph(seed=9)
    s = TemporalSampler(g, [2], edge_time=et)
    with pytest.raises(GraphError, match=r"'seed_time' must hold one time per seed, 3 \(got 2\)"):
        s.sample_from_nodes(torch.tensor([0, 1, 2]), seed_time=torch.tensor([1, 2]))
    with pytest.raises(GraphError, match="'seed_time' must be a 1-D integer tensor"):
        s.sample_from_nodes(torch.tensor([0, 1]), seed_time=torch.tensor([1.0, 2.0]))
    with pytest.raises(GraphError, match="'seeds'"):
        s.sample_from_nodes(torch.tensor([0, 600]), seed_time=torch.tensor([1, 2]))
    with pytest.raises(GraphError, match=r"one time per edge of the graph, 700 \(got 699\)"):
        TemporalSampler(g, [2], edge_time=et[:-1])
    with pytest.raises(GraphError, match="'edge_time' must be a 1-D integer array"):
        TemporalSampler(g, [2], edge_time=et.astype(np.float64))
    with pytest.raises(GraphError, match="the sampler has no edge times: pass edge_time="):
        TemporalSampler(GraphTopology(g), [2])
    with pytest.raises(ConfigError, match="'strategy' must be one of 'uniform', 'last'"):
        TemporalSampler(g, [2], edge_time=et, strategy="recent")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'fanouts"):
        TemporalSampler(g, [], edge_time=et)


def test_unsorted_segments_are_refused_unless_trusted(monkeypatch) -> None:
    g, et = random_temporal_graph(seed=9)
    # every segment sorted, but times drop at segment starts: accepted
    starts = g.indptr[1:-1][np.diff(g.indptr)[1:] > 0]
    assert (et[starts] < et[starts - 1]).any()
    v = int(np.argmax(np.diff(g.indptr)))
    lo, hi = int(g.indptr[v]), int(g.indptr[v + 1])
    bad = et.copy()
    bad[lo] = et[hi - 1] + 1  # v's first edge now the latest
    for edge_time in (bad, torch.from_numpy(bad)):
        with pytest.raises(
            GraphError, match=f"non-decreasing within each node's in-edges; node {v}"
        ):
            TemporalSampler(g, [2], edge_time=edge_time)
    from fleetgnn.graph import edge_time as edge_time_module

    monkeypatch.setattr(edge_time_module, "_ORDER_BLOCK", 7)  # descents across block borders
    with pytest.raises(GraphError, match=f"node {v}"):
        EdgeTimeArray(g, bad)
    EdgeTimeArray(g, et)
    TemporalSampler(g, [2], edge_time=bad, validate=False)  # trusted: not checked
    negative = et.copy()
    negative[0] = -1
    with pytest.raises(GraphError, match="negative time -1 at edge 0"):
        TemporalSampler(g, [2], edge_time=negative)


def test_a_graphs_edge_time_is_the_default() -> None:
    rng = np.random.default_rng(11)
    n, e = 50, 500
    src, dst, time = rng.integers(0, n, e), rng.integers(0, n, e), rng.integers(0, 30, e)
    g = from_edges(src, dst, n, edge_time=time)
    assert g.edge_time is not None
    bare = Graph(indptr=g.indptr, indices=g.indices)
    seeds, seed_time = torch.tensor([0, 4, 9, 4]), torch.tensor([10, 30, 20, 5])
    for strategy in ("uniform", "last"):
        got = TemporalSampler(g, [3, -1], strategy=strategy, with_edge_ids=True).sample_from_nodes(
            seeds, seed_time=seed_time, epoch=2, step=1
        )
        want = TemporalSampler(
            bare, [3, -1], edge_time=g.edge_time, strategy=strategy, with_edge_ids=True
        ).sample_from_nodes(seeds, seed_time=seed_time, epoch=2, step=1)
        assert_same_samples(got, want)
        check_sample(g, g.edge_time, got, seeds, seed_time, [3, -1], strategy, False)


def test_edge_times_from_a_topology_that_serves_them() -> None:
    g, et = random_temporal_graph(seed=10)

    class TimedTopology(GraphTopology):
        def count_before(self, ids: torch.Tensor, t: torch.Tensor, inclusive: bool = False):
            start = self.edge_ids_at(ids, torch.zeros_like(ids))
            read = lambda pos: torch.from_numpy(et[pos.numpy()])  # noqa: E731
            return bisect_counts(read, start, self.in_degree(ids), t, inclusive)

    topo = TimedTopology(g)
    assert isinstance(topo, EdgeTimeSource)
    seeds, seed_time = torch.tensor([0, 4, 9]), torch.tensor([10, 30, 20])
    got = TemporalSampler(topo, [3, 3]).sample_from_nodes(
        seeds, seed_time=seed_time, epoch=1, step=1
    )
    want = TemporalSampler(g, [3, 3], edge_time=et).sample_from_nodes(
        seeds, seed_time=seed_time, epoch=1, step=1
    )
    assert_same_samples(got, want)
    assert "strategy='uniform'" in repr(TemporalSampler(topo, [3]))
    assert "num_seeds=3" in repr(got)
