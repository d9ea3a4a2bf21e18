import mmap
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import fleetgnn.store.segments as segments
import fleetgnn.store.store as store_mod
from fleetgnn.distributed.traffic import TrafficMeter
from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph.compact import feature_codec
from fleetgnn.graph.csc import from_edges
from fleetgnn.graph.dataset import open_dataset, write_dataset
from fleetgnn.graph.loaders._io import memory_total
from fleetgnn.sampling.neighbor import GraphTopology, NeighborSampler, TopologySource
from fleetgnn.store import (
    TierBudgets,
    TierPlan,
    UnifiedStore,
    disk_tier,
    feature_row_bytes,
    hotness_order,
    topology_row_bytes,
)
from fleetgnn.store.tiers import DEVICE, DISK, HOST, plan_store


def _graph(n=80, e=600, f=5, seed=0, weights=True, dtype=np.float64):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    dst[:40] = 3  # a hub, so segments differ in size
    x = rng.standard_normal((n, f)).astype(dtype)
    w = rng.random(e) if weights else None
    return from_edges(src, dst, num_nodes=n, edge_weight=w, node_data={"x": x})


def _budgets(g, dev_ratio, host_ratio, world=1):
    """Budgets holding about the given fractions of topology + feature bytes."""
    total = int(topology_row_bytes(g).sum()) + g.num_nodes * feature_row_bytes(g)
    return TierBudgets(
        device=int(dev_ratio * total / world) + 8, host=int(host_ratio * total / world) + 8
    )


RATIOS = [(0.0, 0.0), (0.0, 1.0), (0.2, 0.3), (0.5, 0.0), (1.0, 0.0), (0.05, 0.95)]


@pytest.mark.parametrize("dev,host", RATIOS)
@pytest.mark.parametrize("order", ["graph_first", "features_first"])
def test_features_bit_exact_and_accounted(dev, host, order, device):
    g = _graph()
    meter = TrafficMeter()
    b = _budgets(g, dev, host)
    store = UnifiedStore.build(g, None, b, order=order, meter=meter)
    rng = np.random.default_rng(1)
    ids = torch.from_numpy(rng.integers(0, g.num_nodes, 300))
    ids[:10] = ids[0]  # duplicates
    out = store.gather(ids.to(device))  # ids on the device: the same rows, the same counts
    assert out.dtype == torch.float64
    assert torch.equal(out.cpu(), torch.from_numpy(g.x[ids.numpy()]))
    # hit rates == fraction of requests whose node lives in each tier (hot rank vs plan counts)
    fp = store.plan.features
    k = hotness_order(g).rank_of[ids.numpy()]
    frac_dev = np.mean(k < fp.num_device)
    frac_host = np.mean((k >= fp.num_device) & (k < fp.num_device + fp.num_host))
    hr = store.hit_rates()
    assert hr["local"] == pytest.approx(frac_dev) and hr["peer"] == 0
    assert hr["host"] == pytest.approx(frac_host)
    assert hr["disk"] == pytest.approx(1 - frac_dev - frac_host)
    # bytes per link kind: local + peer + h2d + disk == requested bytes, closed forms
    snap = store.traffic
    rb = feature_row_bytes(g)
    assert sum(snap[k]["bytes"] for k in ("local", "peer", "h2d", "disk")) == 300 * rb
    assert snap["h2d"]["bytes"] == round(frac_host * 300) * rb
    if dev == 1.0:
        assert snap["h2d"]["bytes"] == snap["disk"]["bytes"] == 0
    # budgets respected
    mem = store.memory()
    assert mem["device"] <= b.device and mem["host"] <= b.host
    assert mem["device"] == store.plan.device_bytes()[0]
    empty = store.gather(torch.empty(0, dtype=torch.int64))
    assert empty.shape == (0, 5)
    store.close()


@pytest.mark.parametrize("dev,host", [(0.0, 0.0), (0.2, 0.3), (1.0, 0.0), (0.05, 0.95)])
@pytest.mark.parametrize("name", ["bfloat16", "float16", "float8_e4m3", "float32"])
def test_compact_features_read_back_the_stored_values(dev, host, name, device):
    """``feature_dtype``: every tier returns ``round_trip(x)``, bytes are the stored ones."""
    g = _graph(f=8)
    codec = feature_codec(name)
    b = _budgets(g, dev, host)
    store = UnifiedStore.build(g, None, b, order="features_first", feature_dtype=name)
    ids = torch.from_numpy(np.random.default_rng(1).integers(0, g.num_nodes, 300))
    out = store.gather(ids.to(device))
    assert out.dtype == torch.float64 and out.device.type == device
    assert torch.equal(out.cpu(), codec.round_trip(torch.from_numpy(g.x))[ids])
    fp = store.plan.features
    k = hotness_order(g).rank_of[ids.numpy()]
    in_tiers = int((k < fp.num_device + fp.num_host).sum())
    snap = store.traffic
    served = sum(snap[k]["bytes"] for k in ("local", "peer", "h2d"))
    stored = {"bfloat16": 2 * 8, "float16": 2 * 8, "float8_e4m3": 8 + 4, "float32": 4 * 8}
    assert served == in_tiers * stored[name]  # stored rows (float8: its bytes and a scale)
    assert snap["disk"]["bytes"] == (300 - in_tiers) * 8 * 8  # the dataset's float64 rows
    mem = store.memory()
    assert mem["device"] <= b.device and mem["host"] <= b.host
    assert mem["device"] == store.plan.device_bytes()[0]
    into = torch.full_like(out, float("nan"))  # a caller's buffer: the same rows written into it
    assert store.gather(ids.to(device), out=into) is into and torch.equal(into, out)
    store.close()


def test_gather_into_a_wrong_buffer_is_refused_in_one_line():
    g = _graph(f=8)
    store = UnifiedStore.build(g, None, _budgets(g, 1.0, 0.0), feature_dtype="bfloat16")
    ids = torch.tensor([0, 1, 2])
    for bad in (torch.empty(3, 7, dtype=torch.float64), torch.empty(3, 8, dtype=torch.float32)):
        with pytest.raises(GraphError, match=r"gather's out must be a \[3, 8\] torch.float64"):
            store.gather(ids, out=bad)
    store.close()


@pytest.mark.parametrize("name,factor", [("bfloat16", 2), ("float8_e4m3", 4)])
def test_compact_rows_fit_more_rows_in_a_budget(name, factor):
    """The plan counts stored bytes: a device budget holds 2x (16-bit) the float32 rows, and
    float8 rows of 96 features (100 bytes with the scale) about 4x minus the scale's share."""
    rng = np.random.default_rng(0)
    g = from_edges(
        rng.integers(0, 500, 3000),
        rng.integers(0, 500, 3000),
        num_nodes=500,
        node_data={"x": rng.standard_normal((500, 96)).astype(np.float32)},
    )
    b = TierBudgets(device=100 * 96 * 4, host=0)  # 100 float32 rows
    plain = UnifiedStore.build(g, None, b, order="features_first", feature_dtype="float32")
    compact = UnifiedStore.build(g, None, b, order="features_first", feature_dtype=name)
    n32, n = plain.plan.features.num_device, compact.plan.features.num_device
    assert n32 == 100
    row = {"bfloat16": 96 * 2, "float8_e4m3": 96 + 4}[name]
    assert n == 100 * 96 * 4 // row
    assert n >= factor * n32 * 0.96
    assert compact.memory()["device"] == n * row
    plain.close()
    compact.close()


def test_compact_features_check_a_given_plans_row_bytes():
    g = _graph()
    plan = UnifiedStore.build(g, None, _budgets(g, 0.5, 0.2)).plan  # float64 rows
    with pytest.raises(ConfigError, match="other size than bfloat16 rows"):
        UnifiedStore.build(g, None, plan=plan, feature_dtype="bfloat16")
    b = _budgets(g, 0.5, 0.2)
    compact = plan_store(g, b, 1, feature_dtype="bfloat16")
    s = UnifiedStore.build(g, None, plan=compact, feature_dtype="bfloat16")
    assert torch.equal(s.gather(torch.arange(80)), feature_codec("bfloat16").round_trip(g.x))
    s.close()


@pytest.mark.parametrize("dev,host", RATIOS)
def test_topology_exact_for_every_ratio(dev, host):
    g = _graph(seed=2)
    store = UnifiedStore.build(g, None, _budgets(g, dev, host), meter=TrafficMeter())
    ref = GraphTopology(g)
    assert isinstance(store, TopologySource)
    assert store.num_nodes == g.num_nodes and store.has_edge_weight
    ids = torch.arange(g.num_nodes).flip(0)
    assert torch.equal(store.in_degree(ids), ref.in_degree(ids))
    c1, n1 = store.all_neighbors(ids)
    c2, n2 = ref.all_neighbors(ids)
    assert torch.equal(c1, c2) and torch.equal(n1, n2) and n1.dtype == torch.int64
    # neighbors_at / edge_weight_at at every edge position, shuffled
    rep = torch.repeat_interleave(ids, c2)
    off = torch.cat([torch.arange(int(c)) for c in c2])
    perm = torch.from_numpy(np.random.default_rng(0).permutation(rep.numel()))
    rep, off = rep[perm], off[perm]
    assert torch.equal(store.neighbors_at(rep, off), ref.neighbors_at(rep, off))
    assert torch.equal(store.edge_weight_at(rep, off), ref.edge_weight_at(rep, off))
    # topology requests are counted per looked-up node
    tp = store.plan.topology
    tier, _, _ = tp.locate(np.arange(g.num_nodes))
    reqs = store.requests("topology")
    assert sum(reqs.values()) == 2 * g.num_nodes + 2 * rep.numel()
    assert reqs["host"] == 2 * int((tier == HOST).sum()) + 2 * int(
        (tp.locate(rep.numpy())[0] == HOST).sum()
    )
    assert (tier == DEVICE).sum() == tp.num_device and (tier == DISK).sum() == tp.num_disk


def test_topology_bytes_closed_form():
    g = _graph(seed=3, weights=False)
    meter = TrafficMeter()
    store = UnifiedStore.build(g, None, _budgets(g, 0.3, 0.3), meter=meter)
    ids = torch.arange(g.num_nodes)
    store.in_degree(ids)
    assert sum(v["bytes"] for v in meter.snapshot().values()) == 16 * g.num_nodes
    store.reset_stats()
    counts, _ = store.all_neighbors(ids)
    total = sum(v["bytes"] for v in meter.snapshot().values())
    assert total == 16 * g.num_nodes + 4 * int(counts.sum())


def test_sampling_through_the_store_equals_the_graph(device):
    g = _graph(n=120, e=1500, seed=4)
    store = UnifiedStore.build(g, None, _budgets(g, 0.2, 0.3))
    seeds = torch.tensor([3, 7, 50, 99, 0])
    # seeds on the device, topology read through the store: the graph's own sample
    a = [
        x.to("cpu")
        for x in NeighborSampler(store, [4, 3], seed=5)
        .sample_from_nodes(seeds.to(device), epoch=1, step=2)
        .blocks
    ]
    b = NeighborSampler(g, [4, 3], seed=5).sample_from_nodes(seeds, epoch=1, step=2).blocks
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.src_ids, y.src_ids)
        assert torch.equal(x.indptr, y.indptr) and torch.equal(x.indices, y.indices)
        assert torch.equal(x.edge_weight, y.edge_weight)
    feats = store.gather(a[0].src_ids.to(device)).cpu()
    assert torch.equal(feats, torch.from_numpy(g.x[a[0].src_ids.numpy()]))


def test_memmap_dataset_disk_tier(tmp_path):
    g = _graph(seed=5, dtype=np.float32)
    write_dataset(g, tmp_path / "ds")
    mg = open_dataset(tmp_path / "ds")
    assert isinstance(mg.x, np.memmap)
    meter = TrafficMeter()
    store = UnifiedStore.build(mg, None, _budgets(mg, 0.1, 0.1), meter=meter)
    ids = torch.arange(mg.num_nodes)
    assert torch.equal(store.gather(ids), torch.from_numpy(g.x))
    fp = store.plan.features
    assert meter.snapshot()["disk"]["bytes"] == fp.num_disk * 20
    c1, n1 = store.all_neighbors(ids)
    c2, n2 = GraphTopology(g).all_neighbors(ids)
    assert torch.equal(c1, c2) and torch.equal(n1, n2)
    store.close()


def test_presample_placement():
    g = _graph(seed=6)
    hot = hotness_order(g, "presample", sampler_fn=lambda i: torch.arange(10 * i, 10 * i + 5), k=3)
    store = UnifiedStore.build(g, None, _budgets(g, 0.1, 0.0), placement=hot)
    assert store.plan.topology.order[:3].tolist() == [0, 1, 2]
    ids = torch.tensor([0, 1, 79])
    assert torch.equal(store.gather(ids), torch.from_numpy(g.x[[0, 1, 79]]))


def test_errors():
    g = _graph(seed=7)
    store = UnifiedStore.build(g, None, TierBudgets())
    with pytest.raises(GraphError, match=r"\[0, 80\)"):
        store.gather(torch.tensor([80]))
    with pytest.raises(GraphError, match="1-D integer"):
        store.gather(torch.tensor([1.0]))
    with pytest.raises(GraphError, match="offsets"):
        store.neighbors_at(torch.tensor([3]), torch.tensor([10_000]))
    with pytest.raises(GraphError, match="aligned"):
        store.neighbors_at(torch.tensor([3, 4]), torch.tensor([0]))
    with pytest.raises(ConfigError, match="kind"):
        store.hit_rates("edges")
    with pytest.raises(ConfigError, match="placement"):
        UnifiedStore.build(g, None, TierBudgets(), placement="presample")
    with pytest.raises(ConfigError, match="budgets"):
        UnifiedStore.build(g, None, "64MB")  # type: ignore[arg-type]
    with pytest.raises(GraphError, match="Graph"):
        UnifiedStore.build(object(), None)  # type: ignore[arg-type]
    nofeat = from_edges(np.array([0]), np.array([1]), num_nodes=2)
    s2 = UnifiedStore.build(nofeat, None, TierBudgets(device=100))
    with pytest.raises(GraphError, match="no node features"):
        s2.gather(torch.tensor([0]))
    assert s2.memory()["device"] == s2.plan.topology.device_bytes[0] > 0
    store.close()
    with pytest.raises(GraphError, match="closed"):
        store.in_degree(torch.tensor([0]))


@pytest.mark.parametrize("topology", [None, "uniform", "dgx1-v100", [[700.0]]])
def test_topology_on_one_rank_reads_by_source(topology):
    g = _graph(seed=8, weights=False)
    meter = TrafficMeter()
    store = UnifiedStore.build(g, None, _budgets(g, 0.7, 0.2), meter=meter, topology=topology)
    assert (store.placement is None) == (topology is None)
    ids = torch.from_numpy(np.random.default_rng(2).integers(0, g.num_nodes, 200))
    assert torch.equal(store.gather(ids), torch.from_numpy(g.x[ids.numpy()]))
    k = store.plan.features.rank_of[ids.numpy()]
    rows = int((k < store.plan.features.num_device).sum())
    assert 0 < rows < 200  # device, and host or disk rows requested
    rb = feature_row_bytes(g)
    assert store.reads_by_source("features") == {0: {"rows": rows, "bytes": rows * rb}}
    assert store.reads_by_source("topology") == {0: {"rows": 0, "bytes": 0}}
    assert store.reads_by_source() == store.reads_by_source("features")
    assert meter.snapshot()["local"]["bytes"] == rows * rb
    counts, _ = store.all_neighbors(ids)
    tk = store.plan.topology.rank_of[ids.numpy()]
    dev = tk < store.plan.topology.num_device
    assert dev.any()
    topo_bytes = 16 * int(dev.sum()) + 4 * int(counts.numpy()[dev].sum())
    assert store.reads_by_source("topology") == {0: {"rows": int(dev.sum()), "bytes": topo_bytes}}
    assert store.reads_by_source()[0] == {
        "rows": rows + int(dev.sum()),
        "bytes": rows * rb + topo_bytes,
    }
    store.reset_stats()
    assert store.reads_by_source() == {0: {"rows": 0, "bytes": 0}}
    with pytest.raises(ConfigError, match=r"'kind' must be 'features', 'topology' or 'all'"):
        store.reads_by_source("edges")


def test_topology_errors_name_the_key():
    g = _graph(seed=9)
    with pytest.raises(ConfigError, match=r"'store.topology' = 'torus' is not a known topology"):
        UnifiedStore.build(g, None, TierBudgets(), topology="torus")
    with pytest.raises(ConfigError, match=r"2 x 2 bandwidth matrix but the world has 1 ranks"):
        UnifiedStore.build(g, None, TierBudgets(), topology=[[700, 50], [50, 700]])


def _smaps(path, field: str) -> list[list[str]]:
    """``field`` (e.g. ``"VmFlags"``) of this process's mappings of ``path``, split in words."""
    out, current = [], None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                current = line.rstrip("\n").endswith(str(path))
            elif line.startswith(field + ":") and current:
                out.append(line.split()[1:])
    return out


def _vm_flags(path) -> list[list[str]]:
    """``VmFlags`` of this process's mappings of ``path`` (from ``/proc/self/smaps``)."""
    return _smaps(path, "VmFlags")


def _rss_kib(path) -> list[int]:
    """``Rss`` (KiB) of this process's mappings of ``path`` (from ``/proc/self/smaps``)."""
    return [int(words[0]) for words in _smaps(path, "Rss")]


@pytest.mark.parametrize("cached", ["pread", "map"])
def test_disk_tier_reads_features_with_a_row_reader(tmp_path, monkeypatch, cached):
    """A whole-file feature map larger than DISK_MAP_FRACTION of memory: disk rows come from the
    file through a RowReader (pread, or its own mapping for cached rows, unmapped after each
    read: no rows stay resident in a mapping of the store's own), bit-exact in input order with
    repeats; close() closes the file."""
    import fleetgnn.graph.rows as rows_mod

    probe = 1.0 if cached == "map" else 0.0
    monkeypatch.setattr(rows_mod.RowReader, "cached_fraction", lambda self, sid: probe)
    g = _graph(seed=7, n=300, f=8, dtype=np.float32)
    write_dataset(g, tmp_path / "ds")
    mg = open_dataset(tmp_path / "ds")
    path = (tmp_path / "ds" / "x.npy").resolve()
    advised = []
    monkeypatch.setattr(store_mod, "_advise_random", lambda arr: advised.append(arr) or arr)
    monkeypatch.setattr(disk_tier, "DISK_MAP_FRACTION", mg.x.nbytes / 2 / memory_total())
    store = UnifiedStore.build(mg, None, _budgets(mg, 0.1, 0.1))
    assert store.plan.features.num_disk > 0
    assert store._x_reader is not None and store._x_reader.reads_file and not advised
    ids = torch.from_numpy(np.random.default_rng(2).integers(0, mg.num_nodes, 500))
    disk = ids[torch.from_numpy(store.plan.features.locate(ids.numpy(), 0)[0] == DISK)]
    reads = []
    real = store._x_reader.take
    monkeypatch.setattr(store._x_reader, "take", lambda i: reads.append(i.size) or real(i))
    assert torch.equal(store.gather(ids), torch.from_numpy(g.x[ids.numpy()]))
    assert torch.equal(store.gather(disk), torch.from_numpy(g.x[disk.numpy()]))
    assert reads == [disk.numel(), disk.numel()]  # every disk row, and only those, by the reader
    calls = (store._x_reader.mapped_calls, store._x_reader.pread_calls)
    assert calls == ((3, 0) if cached == "map" else (0, 3))  # with the opening check
    if Path("/proc/self/smaps").exists():  # the kernel's view: the dataset's mapping, and the
        rss = _rss_kib(path)  # reader's (holding nothing) after a read through it
        assert len(rss) == (2 if cached == "map" else 1), rss
        assert cached == "pread" or 0 in rss, rss
    fd = store._x_reader._fd
    store.close()
    with pytest.raises(OSError):
        os.fstat(fd)


@pytest.mark.skipif(not hasattr(mmap, "MADV_RANDOM"), reason="no madvise(MADV_RANDOM) here")
def test_disk_tier_falls_back_to_a_mapping_advised_random(tmp_path, monkeypatch):
    """A feature file that stays cached (here: small), or one pread cannot serve (a reader
    that cannot open it), is read through a mapping of the store's own advised MADV_RANDOM; if
    the kernel refuses the advice, through x itself; a file replaced since it was mapped is
    never read."""
    g = _graph(seed=7, n=300, f=8, dtype=np.float32)
    write_dataset(g, tmp_path / "ds")
    mg = open_dataset(tmp_path / "ds")
    path = (tmp_path / "ds" / "x.npy").resolve()
    ids = torch.from_numpy(np.random.default_rng(2).integers(0, g.num_nodes, 500))
    want = torch.from_numpy(g.x[ids.numpy()])
    for small in (True, False):
        if not small:  # too large to map, but pread cannot open it
            monkeypatch.setattr(disk_tier, "DISK_MAP_FRACTION", 0.0)
            monkeypatch.setattr(store_mod, "_file_reader", lambda x: None)
        with UnifiedStore.build(mg, None, _budgets(mg, 0.1, 0.1)) as store:
            assert store.plan.features.num_disk > 0 and store._x_reader is None
            assert store._x_disk is not mg.x  # a mapping of its own
            assert torch.equal(store.gather(ids), want)
            if Path("/proc/self/smaps").exists():  # "rr" = random-read advice, on the store's
                assert sorted("rr" in f for f in _vm_flags(path)) == [False, True]
    monkeypatch.setattr(disk_tier, "_MADV_RANDOM", -1)  # an advice the kernel refuses
    with UnifiedStore.build(mg, None, _budgets(mg, 0.1, 0.1)) as again:
        assert again._x_disk is mg.x and torch.equal(again.gather(ids), want)
    monkeypatch.undo()
    monkeypatch.setattr(disk_tier, "DISK_MAP_FRACTION", 0.0)  # pread, were the file unchanged
    # the dataset's file replaced after it was mapped: keep reading what x maps
    np.save(tmp_path / "other.npy", g.x + 1)
    os.replace(tmp_path / "other.npy", tmp_path / "ds" / "x.npy")
    with UnifiedStore.build(mg, None, _budgets(mg, 0.1, 0.1)) as stale:
        assert stale._x_reader is None and stale._x_disk is mg.x
        assert torch.equal(stale.gather(ids), want)
    # features in memory (not a memory map): nothing to read from a file
    with UnifiedStore.build(g, None, _budgets(g, 0.1, 0.1)) as mem:
        assert mem._x_reader is None and mem._x_disk is g.x


def test_segments_copied_in_blocks_equal_one_copy(monkeypatch):
    """``segments_of`` copies a tier's edges in row blocks (bounded int64 positions); with blocks
    of a few edges it gives exactly the segments of the nodes asked for, weights included."""
    g = _graph(n=80, e=600)
    rows = np.random.default_rng(1).permutation(80)[:50]
    monkeypatch.setattr(segments, "SEGMENT_BLOCK", 7)
    indptr, indices, weight = segments.segments_of(g, rows)
    assert indptr.tolist()[-1] == int(sum(g.indptr[r + 1] - g.indptr[r] for r in rows))
    for i, r in enumerate(rows.tolist()):
        a, b = int(indptr[i]), int(indptr[i + 1])
        np.testing.assert_array_equal(
            indices[a:b].numpy(), g.indices[g.indptr[r] : g.indptr[r + 1]]
        )
        np.testing.assert_array_equal(
            weight[a:b].numpy(), g.edge_weight[g.indptr[r] : g.indptr[r + 1]]
        )


def test_own_shard_fast_path_equals_the_bucketed_gather(monkeypatch):
    """One process, every requested row in its shard: one lookup and one ``index_select``, with
    the same rows and every counter equal to the bucketed path's."""
    g = _graph()
    ids = torch.from_numpy(np.random.default_rng(3).integers(0, g.num_nodes, 200))
    ids[:5] = ids[0]  # duplicates

    def run(fast):
        store = UnifiedStore.build(g, None, _budgets(g, 1.0, 0.0), meter=TrafficMeter())
        if not fast:
            monkeypatch.setattr(store, "_own_shard_rows", lambda idn: None)
        rows = [store.gather(ids), store.gather(ids[:7]), store.gather(ids.int())]
        stats = (
            store.hit_rates(),
            store.requests("features"),
            store.bytes_served("features"),
            store.reads_by_source(),
            store.traffic,
        )
        store.close()
        return rows, stats

    located = []
    monkeypatch.setattr(TierPlan, "locate", _spy(TierPlan.locate, located))
    fast_rows, fast_stats = run(fast=True)
    assert located == []  # the fast path never bucketed
    slow_rows, slow_stats = run(fast=False)
    assert len(located) == 3
    for a, b in zip(fast_rows, slow_rows, strict=True):
        assert torch.equal(a, b)
    assert torch.equal(fast_rows[0], torch.from_numpy(g.x[ids.numpy()]))
    assert fast_stats == slow_stats
    # a row off the device tier leaves the fast path
    store = UnifiedStore.build(g, None, _budgets(g, 0.3, 0.2))
    cold = int(store.plan.features.order[-1])
    assert store._own_shard_rows(np.array([cold])) is None
    assert torch.equal(store.gather(torch.tensor([cold, 0])), torch.from_numpy(g.x[[cold, 0]]))
    store.close()


def _spy(fn, calls):
    def wrapped(*args, **kwargs):
        calls.append(1)
        return fn(*args, **kwargs)

    return wrapped
