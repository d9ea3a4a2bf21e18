"""The block-wise store plan (counting-sort ranking, tier walks) against a whole-array reference.

The reference below is the plan computed the direct way (int64 degree arrays, a stable argsort,
``hot_bytes = row_bytes[order]`` and cumulative sums over every row); the block-wise build must
give the same ranking and the same plan, byte for byte, with its work arrays bounded by a block.
"""

import tracemalloc

import numpy as np
import pytest

from fleetgnn.graph.csc import from_edges
from fleetgnn.store import hotness as H
from fleetgnn.store import tiers as T
from fleetgnn.store.hotness import HotnessRanking, hotness_order
from fleetgnn.store.placement import solve_placement
from fleetgnn.store.tiers import TierBudgets, plan_store, plan_tiers

# ------------------------------------------------------------------------------- the reference


def _ref_order(score):
    return np.argsort(-np.asarray(score, dtype=np.int64), kind="stable")  # ties by node ID


def _ref_tier(hot, total_rows, world, budget, cap, fixed, stores):
    """``(num_device, device_bytes [N], num_host, host_bytes, disk_bytes)`` over ``hot``."""
    n = hot.size
    n_dev, per_rank = 0, np.zeros(world, np.int64)
    if not (fixed and (budget < fixed).any()):
        part = np.arange(n) % world
        n_dev = n
        for d, held in enumerate(stores):
            paid = np.where(np.isin(part, held), hot, 0)
            n_dev = min(n_dev, int(np.searchsorted(np.cumsum(paid), budget[d] - fixed, "right")))
        if n_dev:
            sums = [int(hot[p:n_dev:world].sum()) for p in range(world)]
            per_rank = np.array([sum(sums[p] for p in held) + fixed for held in stores], np.int64)
    n_host, host_bytes = 0, 0
    if cap >= fixed:
        n_host = int(np.searchsorted(np.cumsum(hot[n_dev:]), cap - fixed, "right"))
        host_bytes = int(hot[n_dev : n_dev + n_host].sum()) + fixed if n_host else 0
        n_host = n_host if host_bytes else 0
    assert total_rows == int(hot.sum())
    return n_dev, per_rank, n_host, host_bytes, int(hot[n_dev + n_host :].sum())


def _ref_plan(g, budgets, world, order="graph_first", placement=None, score=None):
    """The store plan of ``g``, whole arrays at a time: ``{kind: tier tuple}`` and the order."""
    if score is None:
        score = np.diff(g.indptr) + np.bincount(g.indices, minlength=g.num_nodes)
    ranked = _ref_order(score)
    per_edge = g.indices.dtype.itemsize + (0 if g.edge_weight is None else g.edge_weight.itemsize)
    kinds = [("topology", (8 + np.diff(g.indptr) * per_edge)[ranked], 8)]
    if g.x is not None:
        row = g.x.shape[1] * g.x.dtype.itemsize
        kinds.append(("features", np.full(g.num_nodes, row, np.int64), 0))
    if order == "features_first":
        kinds.reverse()
    stores = [(r,) for r in range(world)] if placement is None else placement.stores
    used, host_used, out = np.zeros(world, np.int64), 0, {}
    for kind, hot, fixed in kinds:
        budget = np.maximum(budgets.device - used, 0)
        cap = max(budgets.host - host_used, 0)
        out[kind] = t = _ref_tier(hot, int(hot.sum()), world, budget, cap, fixed, stores)
        used = used + t[1]
        host_used += t[3]
    return ranked, out


def _same(plan, ranked, ref):
    for kind, (n_dev, per_rank, n_host, host_bytes, disk) in ref.items():
        tp = getattr(plan, kind)
        assert (tp.order == ranked).all()
        assert (tp.rank_of[ranked] == np.arange(ranked.size)).all()
        got = (tp.num_device, tp.num_host, tp.host_bytes, tp.disk_bytes)
        assert got == (n_dev, n_host, host_bytes, disk), kind
        assert tp.device_bytes.tolist() == per_rank.tolist(), kind


def _graph(rng, n, e, *, hubs=False, weights=False, features=True):
    src = rng.integers(0, n, e)
    dst = rng.integers(0, max(1, n // 20) if hubs else n, e)
    w = rng.random(e) if weights else None
    x = {"x": rng.standard_normal((n, int(rng.integers(1, 6)))).astype(np.float32)}
    return from_edges(src, dst, num_nodes=n, edge_weight=w, node_data=x if features else None)


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few rows: every walk crosses blocks, the histogram takes its sparse path."""
    monkeypatch.setattr(H, "_PLAN_BLOCK", 7)
    monkeypatch.setattr(T, "_PLAN_BLOCK", 7)
    monkeypatch.setattr(H, "_EDGE_BLOCK", 13)
    monkeypatch.setattr(H, "_DENSE_SCORES", 4)


# ------------------------------------------------------------------------------- the ranking


@pytest.mark.parametrize("blocks", ["default", "small"])
@pytest.mark.parametrize("seed", range(4))
def test_degree_ranking_matches_stable_argsort(seed, blocks, request):
    if blocks == "small":
        request.getfixturevalue("small_blocks")
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    g = _graph(rng, n, int(rng.integers(0, 3 * n)), hubs=seed % 2 == 1)  # many ties, or hubs
    r = hotness_order(g)
    score = np.diff(g.indptr) + np.bincount(g.indices, minlength=n)
    assert r.score.dtype == np.uint32 and (r.score == score).all()
    assert (r.order == _ref_order(score)).all() and r.order.dtype == np.int32
    assert (r.rank_of[r.order] == np.arange(n)).all()


def test_presample_ranking_and_widened_counts(small_blocks, monkeypatch):
    rng = np.random.default_rng(3)
    n = 50
    g = _graph(rng, n, 100)
    batches = [rng.integers(0, n, 40) for _ in range(5)]
    ref = _ref_order(np.bincount(np.concatenate(batches), minlength=n))
    r = hotness_order(g, "presample", sampler_fn=lambda i: batches[i], k=5)
    assert r.score.dtype == np.uint32 and (r.order == ref).all()
    # counts that could pass uint32 move to int64 mid-way, keeping the counts so far
    monkeypatch.setattr(
        H, "_count_dtype", lambda bound: np.dtype(np.uint32 if bound < 90 else "i8")
    )
    r = hotness_order(g, "presample", sampler_fn=lambda i: batches[i], k=5)
    assert r.score.dtype == np.int64 and (r.order == ref).all()
    assert r.score.sum() == 200


# ------------------------------------------------------------------------------- the plan


@pytest.mark.parametrize("blocks", ["default", "small"])
@pytest.mark.parametrize("seed", range(6))
def test_plan_store_matches_reference(seed, blocks, request):
    if blocks == "small":
        request.getfixturevalue("small_blocks")
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(20, 300))
    g = _graph(rng, n, int(rng.integers(0, 4 * n)), hubs=seed % 3 == 0, weights=seed % 2 == 1)
    world = 1 + seed % 4
    total = 8 * n + 12 * g.num_edges + n * g.x.shape[1] * 4
    budgets = [
        (0, 0),  # everything on disk
        (7, 5),  # below one row
        (total // (3 * world), total // 4),  # cuts inside both kinds
        (10 * total, 0),  # the device holds it all
        (0, 10 * total),  # the host holds it all
        (int(rng.integers(0, total)), int(rng.integers(0, total))),
    ]
    topologies = [None]
    if world >= 3:
        ring = np.zeros((world, world))
        for i in range(world):
            ring[i, i] = 700.0
            ring[i, (i + 1) % world] = ring[(i + 1) % world, i] = 50.0
        topologies.append(solve_placement(ring))
    for dev, host in budgets:
        b = TierBudgets(device=dev, host=host)
        for order in ("graph_first", "features_first"):
            for placed in topologies:
                plan = plan_store(g, b, world, order=order, placement=placed)
                ranked, ref = _ref_plan(g, b, world, order, placed)
                _same(plan, ranked, ref)
                assert (plan.device_bytes() <= dev).all() and plan.host_bytes() <= host


def test_plan_store_without_features_and_with_a_given_ranking(small_blocks):
    rng = np.random.default_rng(7)
    g = _graph(rng, 90, 400, features=False)
    score = rng.integers(0, 3, 90)  # few values: long runs of ties
    order = _ref_order(score).astype(np.int32)
    hot = HotnessRanking(
        order=order, rank_of=np.argsort(order).astype(np.int32), score=score, policy="given"
    )
    b = TierBudgets(device=300, host=500)
    plan = plan_store(g, b, 2, hotness=hot)
    assert plan.features is None
    _same(plan, *_ref_plan(g, b, 2, score=score))


@pytest.mark.parametrize("seed", range(3))
def test_plan_tiers_row_arrays_match_reference(seed, small_blocks):
    rng = np.random.default_rng(seed)
    n, world = 150, 1 + seed
    rb = rng.integers(0, 60, n)
    rb[rng.random(n) < 0.2] = 0  # empty rows fit any budget
    order = rng.permutation(n)
    used = rng.integers(0, 200, world)
    b = TierBudgets(device=int(rng.integers(0, 1500)), host=int(rng.integers(0, 1500)))
    tp = plan_tiers(n, rb, b, world, order=order, device_used=used, host_used=100, fixed_bytes=8)
    budget = np.maximum(b.device - used, 0)
    ref = _ref_tier(
        rb[order],
        int(rb.sum()),
        world,
        budget,
        max(b.host - 100, 0),
        8,
        [(r,) for r in range(world)],
    )
    assert (tp.num_device, tp.num_host, tp.host_bytes, tp.disk_bytes) == (
        ref[0],
        ref[2],
        ref[3],
        ref[4],
    )
    assert tp.device_bytes.tolist() == ref[1].tolist()


# ------------------------------------------------------------------------------- memory


def test_plan_work_memory_is_a_block_not_the_graph(monkeypatch):
    """Besides ``order``, ``rank_of`` and the score (12 bytes per node), a few blocks."""
    monkeypatch.setattr(H, "_PLAN_BLOCK", 1 << 12)
    monkeypatch.setattr(T, "_PLAN_BLOCK", 1 << 12)
    monkeypatch.setattr(H, "_EDGE_BLOCK", 1 << 14)
    rng = np.random.default_rng(0)
    n = 200_000
    g = _graph(rng, n, 4 * n, weights=True)
    b = TierBudgets(device=32 * n, host=n)  # topology (~56n) on devices, features split
    tracemalloc.start()
    try:
        plan = plan_store(g, b, 2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert plan.topology.num_device == n
    assert 0 < plan.features.num_device and plan.features.num_host and plan.features.num_disk
    block_work = 40 * (1 << 12) * 8  # a few dozen int64 block arrays, generously
    assert peak < 12 * n + block_work, peak / n  # the whole-array plan needs > 28 bytes per node
