import itertools
import json

import numpy as np
import pytest
import yaml

from fleetgnn.config.units import parse_bytes
from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph.csc import from_edges
from fleetgnn.store import device_topology as T
from fleetgnn.store import placement as P
from fleetgnn.store import tiers
from fleetgnn.store.hotness import hotness_order
from fleetgnn.store.placement import solve_placement
from fleetgnn.store.tiers import DEVICE as DEVICE_TIER
from fleetgnn.store.tiers import (
    TierBudgets,
    feature_row_bytes,
    plan_store,
    plan_tiers,
    topology_row_bytes,
)

# ---------------------------------------------------------------------------------- bytes


@pytest.mark.parametrize(
    "text,expected",
    [
        ("0", 0),
        (4096, 4096),
        ("64MB", 64_000_000),
        ("64MiB", 64 << 20),
        ("1.5GiB", 3 << 29),
        ("2 kb", 2000),
        ("3K", 3072),
        ("10B", 10),
    ],
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["-1MB", "abc", "12XB", "", float("nan"), True, None, -3])
def test_parse_bytes_errors_name_the_argument(bad):
    with pytest.raises(ConfigError, match="device"):
        parse_bytes(bad, "device")


def test_tier_budgets():
    b = TierBudgets.parse(device="1KiB", host="2KB")
    assert (b.device, b.host) == (1024, 2000)
    assert "1.0KiB" in repr(b)
    with pytest.raises(ConfigError, match="TierBudgets.device"):
        TierBudgets(device=-1)
    with pytest.raises(ConfigError):
        TierBudgets(host="1MB")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------- hotness


def _graph(n=40, e=200, seed=0, features=3, weights=False):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    node_data = {"x": rng.standard_normal((n, features))} if features else None
    w = rng.random(e) if weights else None
    return from_edges(src, dst, num_nodes=n, edge_weight=w, node_data=node_data)


def test_hotness_degree_matches_naive_sort():
    g = _graph()
    r = hotness_order(g)
    score = g.in_degrees() + g.out_degrees()
    naive = sorted(range(g.num_nodes), key=lambda v: (-score[v], v))
    assert r.order.tolist() == naive
    assert (r.rank_of[r.order] == np.arange(g.num_nodes)).all()


def test_hotness_presample_counts_and_ties():
    g = _graph(n=10, e=20)
    batches = [np.array([3, 3, 7]), np.array([7, 1]), np.array([[9, 3]])]
    r = hotness_order(g, "presample", sampler_fn=lambda i: batches[i], k=3)
    # counts: 3 -> 3, 7 -> 2, 1 -> 1, 9 -> 1, rest 0 (ties by node ID)
    assert r.order.tolist() == [3, 7, 1, 9, 0, 2, 4, 5, 6, 8]
    assert r.score[3] == 3


def test_hotness_errors():
    g = _graph(n=10, e=20)
    with pytest.raises(ConfigError, match="policy"):
        hotness_order(g, "random")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="sampler_fn"):
        hotness_order(g, "presample")
    with pytest.raises(ConfigError, match="'k'"):
        hotness_order(g, "presample", sampler_fn=lambda i: [0], k=0)
    with pytest.raises(GraphError, match=r"\[0, 10\)"):
        hotness_order(g, "presample", sampler_fn=lambda i: [10], k=1)


# ---------------------------------------------------------------------------------- tiers


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_modulo_split_bijection_and_balance(world):
    rng = np.random.default_rng(world)
    n, row = 101, 16
    order = rng.permutation(n)
    plan = plan_tiers(n, row, TierBudgets(device=row * 9, host=row * 7), world, order=order)
    hot = plan.num_device
    assert hot == min(n, 9 * world)
    tier, owner, local = plan.locate(order)  # node of hot rank k
    k = np.arange(n)
    dev = k < hot
    assert (owner[dev] == k[dev] % world).all() and (local[dev] == k[dev] // world).all()
    # (owner, local) is a bijection onto the shards
    pairs = set(zip(owner[dev].tolist(), local[dev].tolist()))
    assert len(pairs) == hot
    sizes = [plan.shard_rows(r).size for r in range(world)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == hot
    for r in range(world):
        assert (plan.shard_rows(r) == order[k[dev & (k % world == r)]]).all()
    # host and disk follow; every node lives in exactly one tier; the host budget is per host
    assert plan.num_host == min(7, n - hot)
    assert (tier[hot : hot + plan.num_host] == tiers.HOST).all()
    assert (tier[hot + plan.num_host :] == tiers.DISK).all()
    assert plan.num_device + plan.num_host + plan.num_disk == n
    host_local = local[hot : hot + plan.num_host]
    assert (host_local == np.arange(plan.num_host)).all()
    assert (plan.host_rows() == order[hot : hot + plan.num_host]).all()


@pytest.mark.parametrize("seed", range(6))
def test_variable_rows_respect_budgets_and_are_maximal(seed):
    rng = np.random.default_rng(seed)
    n, world = 200, int(rng.integers(1, 5))
    rb = rng.integers(8, 200, n)
    b = TierBudgets(device=int(rng.integers(0, 3000)), host=int(rng.integers(0, 3000)))
    order = rng.permutation(n)
    plan = plan_tiers(n, rb, b, world, order=order, ranks_per_host=world)
    hot_bytes = rb[order]
    for r in range(world):
        assert plan.device_bytes[r] == hot_bytes[r : plan.num_device : world].sum() <= b.device
    assert plan.host_bytes <= b.host  # per host, however many ranks share it
    assert plan.device_bytes.sum() + plan.host_bytes + plan.disk_bytes == rb.sum()
    h = plan.num_device
    if h < n:  # the next hot row would overflow its owner's budget
        r = h % world
        assert hot_bytes[r : h + 1 : world].sum() > b.device
        if plan.num_host < n - h:
            assert hot_bytes[h : h + plan.num_host + 1].sum() > b.host


@pytest.mark.parametrize("order", ["graph_first", "features_first"])
def test_plan_store_orders_and_budgets(order):
    g = _graph(n=60, e=400, features=8, weights=True)
    b = TierBudgets(device=900, host=1500)
    plan = plan_store(g, b, 2, order=order)
    assert (plan.device_bytes() <= b.device).all()
    assert plan.host_bytes() <= b.host
    other = plan_store(g, b, 2, order="features_first" if order == "graph_first" else "graph_first")
    first, second = (
        (plan.topology, plan.features)
        if order == "graph_first"
        else (
            plan.features,
            plan.topology,
        )
    )
    assert first.num_device > 0
    if order == "graph_first":
        assert plan.topology.num_device >= other.topology.num_device
    else:
        assert plan.features.num_device >= other.features.num_device
    # independent reference: plan_tiers per kind, each taking what the kinds before it left
    hot = hotness_order(g)
    kinds = [("topology", topology_row_bytes(g), 8), ("features", feature_row_bytes(g), 0)]
    if order == "features_first":
        kinds.reverse()
    used, host_used = np.zeros(2, np.int64), 0
    for kind, rb, fixed in kinds:
        ref = plan_tiers(
            g.num_nodes,
            rb,
            b,
            2,
            order=hot.order,
            device_used=used,
            host_used=host_used,
            fixed_bytes=fixed,
            kind=kind,
        )
        got = getattr(plan, kind)
        assert (got.num_device, got.num_host, got.host_bytes, got.disk_bytes) == (
            ref.num_device,
            ref.num_host,
            ref.host_bytes,
            ref.disk_bytes,
        )
        assert (got.device_bytes == ref.device_bytes).all()
        assert (got.rank_of == ref.rank_of).all()
        used, host_used = used + ref.device_bytes, host_used + ref.host_bytes
    # topology rows are 8 + deg * (4 + 8) bytes (int32 index + float64 weight)
    deg = g.in_degrees()
    assert (topology_row_bytes(g) == 8 + deg * 12).all()
    assert second is not None
    with pytest.raises(ConfigError, match="order"):
        plan_store(g, b, 2, order="random")  # type: ignore[arg-type]


def test_plan_world_size_errors():
    with pytest.raises(ConfigError, match="world_size"):
        plan_tiers(10, 4, TierBudgets(), 0)
    with pytest.raises(ConfigError, match="ranks_per_host"):
        plan_tiers(10, 4, TierBudgets(), 2, ranks_per_host=3)


# ---------------------------------------------------------------------------------- solver
DGX1 = (
    "0-1:25 0-2:25 0-3:50 0-6:50 1-2:50 1-3:25 1-7:50 2-3:50 2-4:25 3-5:25 4-5:50 4-6:25 "
    "4-7:50 5-6:50 5-7:25 6-7:25"
)


def _matrix(n, links, local=700.0):
    b = np.zeros((n, n))
    np.fill_diagonal(b, local)
    for link in links.split():
        ij, w = link.split(":")
        i, j = map(int, ij.split("-"))
        b[i, j] = b[j, i] = float(w)
    return b


def test_golden_dgx1_plan():
    plan = solve_placement(_matrix(8, DGX1))
    assert plan.stores == ((0, 4), (1, 5), (2, 6), (3, 7), (3, 4), (2, 5), (1, 6), (0, 7))
    expected = [
        "0 6 2 3 0 1 6 3",
        "7 1 2 3 0 1 2 7",
        "0 1 2 3 4 1 2 3",
        "0 1 2 3 0 5 2 3",
        "7 6 5 4 4 5 2 7",
        "7 6 5 4 4 5 6 3",
        "0 6 5 4 0 5 6 7",
        "7 1 5 4 4 1 6 7",
    ]
    assert [" ".join(map(str, s)) for s in plan.sources] == expected
    assert plan.max_parts == 2 and plan.min_bandwidth == 25.0
    assert solve_placement(_matrix(8, DGX1)) == plan  # deterministic


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_fully_connected_one_partition_each(n):
    b = np.full((n, n), 50.0)
    np.fill_diagonal(b, 700.0)
    plan = solve_placement(b)
    assert plan.stores == tuple((i,) for i in range(n))
    assert plan.sources == tuple(tuple(range(n)) for _ in range(n))


def _random_topology(rng, n):
    b = np.zeros((n, n))
    dens = rng.random()
    for i, j in itertools.combinations(range(n), 2):
        if rng.random() < dens:
            b[i, j] = b[j, i] = float(rng.choice([25, 50, 100]))
    np.fill_diagonal(b, 700.0)
    return b


def _plan_exists(b, k):
    """Brute force: is there a valid plan (p on device p) with at most k partitions per device?"""
    n = len(b)
    full = (1 << n) - 1
    nbrs = [[j for j in range(n) if b[i, j] > 0] for i in range(n)]
    if any(k * len(nb) < n for nb in nbrs):  # a device reaches at most k per neighbour
        return False
    options = [
        [m for m in range(1 << n) if m >> i & 1 and bin(m).count("1") <= k] for i in range(n)
    ]
    for masks in itertools.product(*options):
        if all(np.bitwise_or.reduce([masks[j] for j in nbrs[i]]) == full for i in range(n)):
            return True
    return False


def _assert_minimal(b, plan):
    assert plan.max_parts == 1 or not _plan_exists(b, plan.max_parts - 1)


def _best_a(b, reader, stores):
    """Brute force R3 for one reader: max over source choices of min_j B_ij / AccessCnt_ij."""
    n = len(b)
    holders = [[j for j in range(n) if b[reader, j] > 0 and p in stores[j]] for p in range(n)]
    best = 0.0
    for cfg in itertools.product(*holders):
        cnt = np.bincount(cfg, minlength=n)
        best = max(best, min(b[reader, j] / c for j, c in enumerate(cnt) if c))
    return best


def _check_invariants(b, plan):
    n = len(b)
    for i in range(n):
        assert list(plan.stores[i]) == sorted(set(plan.stores[i]))
        for p in range(n):
            j = plan.sources[i][p]
            assert p in plan.stores[j], (i, p, j)  # the source stores it ...
            assert b[i, j] > 0, (i, p, j)  # ... and is the reader itself or a direct neighbour
    a = [_best_a(b, i, [set(s) for s in plan.stores]) for i in range(n)]
    assert plan.min_bandwidth == pytest.approx(min(a))
    for i in range(n):  # the chosen sources achieve the reader's optimum
        cnt = np.bincount(plan.sources[i], minlength=n)
        got = min(b[i, j] / c for j, c in enumerate(cnt) if c)
        assert got == pytest.approx(a[i])


# a 5-device topology where branching only on R1/R2 ties stores 3 partitions on some device
RING5 = np.array(
    [
        [700, 50, 0, 50, 50],
        [50, 700, 100, 0, 100],
        [0, 100, 700, 25, 100],
        [50, 0, 25, 700, 0],
        [50, 100, 100, 0, 700],
    ],
    dtype=float,
)


def test_max_parts_minimal_where_tie_search_is_not():
    heuristic = P._Search(RING5.tolist())
    heuristic.run()
    assert heuristic.best_parts == 3
    plan = solve_placement(RING5)
    assert plan.max_parts == 2
    _assert_minimal(RING5, plan)
    _check_invariants(RING5, plan)


@pytest.mark.parametrize("seed", range(4))
def test_random_topologies_minimal_and_valid(seed):
    rng = np.random.default_rng(seed)
    for _ in range(6):
        n = int(rng.integers(2, 6))
        b = _random_topology(rng, n)
        plan = solve_placement(b)
        _assert_minimal(b, plan)
        _check_invariants(b, plan)
        assert solve_placement(b) == plan


class _Recording(P._Search):
    """The artifact-style search, remembering every complete plan it evaluates."""

    def __init__(self, bw):
        super().__init__(bw)
        self.seen = []

    def _complete(self):
        stores = [set(s) for s in self.store]
        self.seen.append((max(len(s) for s in stores), stores))
        super()._complete()


def test_chosen_plan_beats_every_enumerated_plan():
    rng = np.random.default_rng(11)
    for _ in range(8):
        b = _random_topology(rng, int(rng.integers(3, 7)))
        search = _Recording(b.tolist())
        search.run()
        plan = solve_placement(b)
        if plan.max_parts < search.best_parts:
            continue  # the exhaustive pass found fewer partitions per device
        n = len(b)
        assert search.seen
        for parts, stores in search.seen:
            assert plan.max_parts <= parts
            if parts == plan.max_parts:
                mb = min(_best_a(b, i, stores) for i in range(n))
                assert plan.min_bandwidth >= mb - 1e-12


@pytest.mark.parametrize(
    "bad,match",
    [
        ([[1, 2, 3]], "square"),
        ([[0, 1], [1, 5]], r"bandwidth\[0\]\[0\]"),
        ([[5, 1], [0, 5]], "symmetric"),
        ([[5, -1], [-1, 5]], ">= 0"),
        ([], "square"),
    ],
)
def test_solver_errors(bad, match):
    with pytest.raises(ConfigError, match=match):
        solve_placement(bad)


# ---------------------------------------------------------------------------------- topology
RING4 = np.array(  # 0-1-2-3-0: 0 and 2, 1 and 3 are not linked
    [[700, 50, 0, 25], [50, 700, 25, 0], [0, 25, 700, 50], [25, 0, 50, 700]], dtype=float
)


def test_named_topologies():
    assert T.TOPOLOGIES == ("uniform", "dgx1-v100")
    for n in (1, 2, 3, 5):
        u = T.topology_matrix("uniform", n)
        assert u.shape == (n, n) and (u > 0).all()
        assert np.array_equal(T.topology_matrix(None, n), u)
        plan = T.resolve_placement(None, n)
        assert plan.stores == tuple((i,) for i in range(n))
        assert plan.sources == tuple(tuple(range(n)) for _ in range(n))
    dgx = T.topology_matrix("DGX1-V100", 8)  # names are case-insensitive
    assert np.array_equal(dgx, _matrix(8, DGX1))
    assert T.resolve_placement("dgx1-v100", 8) == solve_placement(_matrix(8, DGX1))  # golden
    for n in range(1, 8):  # the first n GPUs of the DGX-1
        sub = T.topology_matrix("dgx1-v100", n)
        assert np.array_equal(sub, _matrix(8, DGX1)[:n, :n])
        plan = T.resolve_placement("dgx1-v100", n)
        _check_invariants(sub, plan)
        if n <= 5:  # brute force is cheap only for small N
            _assert_minimal(sub, plan)
    # GPUs 0-3 are a fully linked quad (25/50 GB/s): no replicas up to 4 ranks
    four = T.resolve_placement("dgx1-v100", 4)
    assert four.stores == ((0,), (1,), (2,), (3,)) and four.min_bandwidth == 25.0
    # GPU 4 links only to GPU 2 among the first five: 5 partitions over 2 devices -> 3 on one
    assert T.resolve_placement("dgx1-v100", 5).max_parts == 3


def test_explicit_topologies(tmp_path):
    as_list = RING4.tolist()
    assert np.array_equal(T.topology_matrix(as_list, 4), RING4)
    assert np.array_equal(T.topology_matrix(RING4, 4), RING4)
    inline = "[[700, 50, 0, 25], [50, 700, 25, 0], [0, 25, 700, 50], [25, 0, 50, 700]]"
    assert np.array_equal(T.topology_matrix(inline, 4), RING4)
    (tmp_path / "t.json").write_text(json.dumps(as_list))
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"bandwidth": as_list}))
    (tmp_path / "t.yml").write_text(yaml.safe_dump(as_list))
    for path in (tmp_path / "t.json", str(tmp_path / "t.yaml"), tmp_path / "t.yml"):
        assert np.array_equal(T.topology_matrix(path, 4), RING4)
    plan = T.resolve_placement(RING4, 4)
    assert plan.stores == ((0, 2), (1, 3), (0, 2), (1, 3))
    assert plan.sources == ((0, 1, 0, 1), (0, 1, 0, 1), (2, 1, 2, 3), (0, 3, 2, 3))
    assert T.resolve_placement(plan, 4) is plan


@pytest.mark.parametrize(
    "spec,world,match",
    [
        ("nvswitch", 4, r"'store.topology' = 'nvswitch' is not a known topology.*'uniform'"),
        ("dgx1-v100", 9, r"'dgx1-v100' has 8 GPUs but the world has 9 ranks"),
        (RING4, 3, r"'store.topology' is a 4 x 4 bandwidth matrix but the world has 3 ranks"),
        ([[700, 5], [0, 700]], 2, r"'store.topology': links must be symmetric"),
        ([[700, 5], [5, 0]], 2, r"'store.topology\[1\]\[1\]' must be the device's local"),
        ([[700, -5], [-5, 700]], 2, r"'store.topology' entries must be finite and >= 0"),
        ([[700, 5], [5]], 2, r"'store.topology' must be a square numeric matrix"),
        ([700, 5], 2, r"'store.topology' must be a square N x N matrix"),
        ("[[700, 5], [5", 2, r"'store.topology' = .* is not valid YAML"),
        (3.5, 2, r"'store.topology' must be a topology name, a matrix or a file path.*float"),
        ("uniform", 0, r"'world_size' must be an int >= 1"),
    ],
)
def test_topology_errors(spec, world, match):
    with pytest.raises(ConfigError, match=match):
        T.topology_matrix(spec, world)


def test_topology_file_errors(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(ConfigError, match=r"'store.topology' file .*nope.json.* cannot be read"):
        T.topology_matrix(missing, 2)
    bad = {
        "a.json": ("[[700, 5],", "not valid JSON"),
        "b.yaml": ("[[700, 5]\n  - x: [", "not valid YAML"),
        "c.yaml": ("matrix: [[700]]", r"single key 'bandwidth' \(got keys \['matrix'\]\)"),
        "d.json": ('"dgx1-v100"', "must hold a bandwidth matrix, a list of lists"),
        "e.txt": ("[[700]]", r"must end in \.json, \.yaml, \.yml"),
    }
    for name, (text, match) in bad.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(ConfigError, match=match):
            T.topology_matrix(tmp_path / name, 1)
    (tmp_path / "ok.json").write_text("[[700, 5], [5, 700]]")
    with pytest.raises(ConfigError, match=r"'engine.links' is a 2 x 2 bandwidth matrix"):
        T.topology_matrix(str(tmp_path / "ok.json"), 3, key="engine.links")


def test_resolve_placement_checks_plans():
    plan = T.resolve_placement(RING4, 4)
    with pytest.raises(ConfigError, match="placement plan is for 4 devices but the world has 2"):
        T.resolve_placement(plan, 2)
    broken = P.PlacementPlan(
        stores=((0,), (1,)), sources=((0, 0), (0, 1)), min_bandwidth=1.0
    )  # device 0 reads partition 1 from itself, which does not store it
    with pytest.raises(ConfigError, match=r"placement.sources\[0\]\[1\] = 0 does not store"):
        T.resolve_placement(broken, 2)
    with pytest.raises(ConfigError, match="must be a PlacementPlan"):
        plan_tiers(10, 4, TierBudgets(), 2, placement="dgx1-v100")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------- placed tiers
def _placement(label, world):
    if label == "uniform":
        return T.resolve_placement("uniform", world)
    if label == "dgx1":
        return T.resolve_placement("dgx1-v100", world)
    if label == "unlinked":  # no links at all: every device stores every partition
        return solve_placement(np.diag(np.full(world, 700.0)))
    return solve_placement({"ring4": RING4, "ring5": RING5}[label])


PLACED = [("uniform", 2), ("uniform", 3), ("dgx1", 4), ("dgx1", 5), ("dgx1", 7), ("dgx1", 8)]
PLACED += [("ring4", 4), ("ring5", 5), ("unlinked", 2)]


@pytest.mark.parametrize("label,world", PLACED)
def test_placed_tiers_fit_budgets_and_read_exactly(label, world):
    plan = _placement(label, world)
    g = _graph(n=60, e=400, seed=3, features=4, weights=True)
    total = int(topology_row_bytes(g).sum()) + g.num_nodes * feature_row_bytes(g)
    rng = np.random.default_rng(world)
    ids = rng.integers(0, g.num_nodes, 400)
    for frac in (0.02, 0.1, 0.3, 10.0):  # tight .. unlimited
        budgets = TierBudgets(device=int(frac * total / world) + 8, host=0)
        sp = plan_store(g, budgets, world, placement=plan)
        assert sp.placement is plan and "max_parts" in repr(sp)
        assert (sp.device_bytes() <= budgets.device).all()
        for tp, rb in ((sp.topology, topology_row_bytes(g)), (sp.features, None)):
            rows_bytes = np.full(g.num_nodes, feature_row_bytes(g), np.int64) if rb is None else rb
            fixed = 8 if tp.kind == "topology" else 0
            h = tp.num_device
            part_bytes = [int(rows_bytes[tp.partition_rows(p)].sum()) for p in range(world)]
            for d in range(world):  # closed form: a device pays for all the partitions it stores
                expect = sum(part_bytes[p] for p in plan.stores[d]) + (fixed if h else 0)
                assert tp.device_bytes[d] == expect
                assert np.array_equal(
                    tp.shard_rows(d), np.concatenate([tp.partition_rows(p) for p in plan.stores[d]])
                )
            assert np.array_equal(
                tp.partition_sizes(), [tp.partition_rows(p).size for p in range(world)]
            )
            # every reader's owner follows plan.sources and the (owner, local) row is the node
            k = tp.rank_of[ids]
            for reader in range(world):
                tier, owner, local = tp.locate(ids, reader)
                dev = tier == DEVICE_TIER
                assert np.array_equal(dev, k < h)
                src = np.asarray(plan.sources[reader])[k % world]
                assert np.array_equal(owner[dev], src[dev]) and (owner[~dev] == -1).all()
                for s in range(world):
                    m = dev & (owner == s)
                    assert np.array_equal(tp.shard_rows(s)[local[m]], ids[m])
        if frac == 10.0:
            assert sp.features.num_device == sp.topology.num_device == g.num_nodes


def test_placed_prefix_is_the_longest_that_fits():
    """Fixed-size rows: ``H`` is maximal, ``N * q <= H < N * (q + 1)``, ``q = B // (P * rb)``."""
    rb, v = 24, 1000
    for world, plan in ((8, T.resolve_placement("dgx1-v100", 8)), (5, solve_placement(RING5))):
        for budget in (0, 23, 24, 100, 1000, 5000, 30_000):
            tp = plan_tiers(v, rb, TierBudgets(device=budget), world, placement=plan)
            h = tp.num_device
            assert (tp.device_bytes <= budget).all()
            q = budget // (plan.max_parts * rb)
            assert min(world * q, v) <= h
            assert h == v or h < world * (q + 1)
            if h < v:  # one more hot row overflows a device storing its partition
                grown = [
                    sum(len(range(p, h + 1, world)) for p in plan.stores[d]) * rb
                    for d in range(world)
                ]
                assert max(grown) > budget


def test_uniform_placement_equals_modulo_split():
    g = _graph(n=70, e=500, seed=5, features=3, weights=True)
    total = int(topology_row_bytes(g).sum()) + g.num_nodes * feature_row_bytes(g)
    ids = np.arange(g.num_nodes)
    for world in (1, 2, 3, 4):
        for frac in (0.0, 0.05, 0.3, 2.0):
            for order in ("graph_first", "features_first"):
                b = TierBudgets(device=int(frac * total / world) + 8, host=int(0.2 * total))
                a = plan_store(g, b, world, order=order)
                u = plan_store(
                    g, b, world, order=order, placement=T.resolve_placement("uniform", world)
                )
                for x, y in ((a.topology, u.topology), (a.features, u.features)):
                    assert (x.num_device, x.num_host, x.disk_bytes, x.host_bytes) == (
                        y.num_device,
                        y.num_host,
                        y.disk_bytes,
                        y.host_bytes,
                    )
                    assert np.array_equal(x.device_bytes, y.device_bytes)
                    for r in range(world):
                        assert np.array_equal(x.shard_rows(r), y.shard_rows(r))
                        for got, want in zip(y.locate(ids, r), x.locate(ids)):
                            assert np.array_equal(got, want)


def test_locate_with_placement_needs_the_reader():
    tp = plan_tiers(10, 4, TierBudgets(device=100), 4, placement=T.resolve_placement(RING4, 4))
    with pytest.raises(ConfigError, match=r"'reader' must be the reading rank in \[0, 4\)"):
        tp.locate(np.arange(3))
