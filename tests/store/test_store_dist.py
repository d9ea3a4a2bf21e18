"""The store across real gloo ranks (spawned processes): device shards in shared memory."""

import numpy as np
import pytest
import torch

from fleetgnn.distributed.testing import run_world
from fleetgnn.distributed.traffic import TrafficMeter
from fleetgnn.graph.compact import feature_codec
from fleetgnn.graph.csc import from_edges
from fleetgnn.sampling.neighbor import GraphTopology, NeighborSampler
from fleetgnn.store import TierBudgets, UnifiedStore, feature_row_bytes, topology_row_bytes


def _graph():
    rng = np.random.default_rng(0)
    n, e = 90, 700
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    x = rng.standard_normal((n, 6))
    return from_edges(src, dst, num_nodes=n, edge_weight=rng.random(e), node_data={"x": x})


def _world(comm, configs):
    """Per config: build one-sided and two-sided stores, read through both, report checks."""
    g = _graph()
    ref = GraphTopology(g)
    rng = np.random.default_rng(100 + comm.rank)  # rank-dependent requests
    out = []
    total = int(topology_row_bytes(g).sum()) + g.num_nodes * feature_row_bytes(g)
    for ci, (dev, host, order) in enumerate(configs):
        b = TierBudgets(
            device=int(dev * total / comm.world_size) + 8, host=int(host * total / comm.world_size)
        )
        ids = torch.from_numpy(rng.integers(0, g.num_nodes, 200))
        seeds = torch.from_numpy(rng.choice(g.num_nodes, 6, replace=False))
        res = {}
        for mode in (True, False):
            meter = TrafficMeter()
            s = UnifiedStore.build(
                g, comm, b, order=order, one_sided=mode, meter=meter, name=f"st{ci}{int(mode)}"
            )
            feats = s.gather(ids)
            traffic = meter.snapshot()
            empty = s.gather(torch.empty(0, dtype=torch.int64))
            all_ids = torch.arange(g.num_nodes)
            c1, n1 = s.all_neighbors(all_ids)
            c2, n2 = ref.all_neighbors(all_ids)
            blocks = (
                NeighborSampler(s, [3, 2], seed=1).sample_from_nodes(seeds, stream=comm.rank).blocks
            )
            rblocks = (
                NeighborSampler(g, [3, 2], seed=1).sample_from_nodes(seeds, stream=comm.rank).blocks
            )
            fp = s.plan.features
            tier, owner, _ = fp.locate(ids.numpy())
            res[mode] = {
                "feats": feats,
                "exact": torch.equal(feats, torch.from_numpy(g.x[ids.numpy()])),
                "empty": tuple(empty.shape),
                "topo": torch.equal(c1, c2) and torch.equal(n1, n2),
                "sample": all(
                    torch.equal(x.src_ids, y.src_ids) and torch.equal(x.indices, y.indices)
                    for x, y in zip(blocks, rblocks)
                ),
                "requests": s.requests("features"),
                "expected_requests": {
                    "local": int(((tier == 0) & (owner == comm.rank)).sum()),
                    "peer": int(((tier == 0) & (owner != comm.rank)).sum()),
                    "net": 0,  # one host
                    "host": int((tier == 1).sum()),
                    "disk": int((tier == 2).sum()),
                },
                "traffic": traffic,
                "memory": s.memory(),
                "plan_device": s.plan.device_bytes().tolist(),
                "shard_rows": [fp.shard_rows(r).size for r in range(comm.world_size)],
                "num_device": (s.plan.topology.num_device, fp.num_device),
                "num_host": (s.plan.topology.num_host, fp.num_host),
            }
            s.close()
        res["budgets"] = (b.device, b.host)
        out.append(res)
    return out


CONFIGS = [(0.2, 0.05, "features_first"), (1.2, 0.0, "graph_first"), (0.3, 0.4, "graph_first")]


def _world_compact(comm):
    """bfloat16 and float8 stores, one- and two-sided: rows read back from every tier."""
    g = _graph()
    ids = torch.from_numpy(np.random.default_rng(7 + comm.rank).integers(0, g.num_nodes, 150))
    total = int(topology_row_bytes(g).sum()) + g.num_nodes * feature_row_bytes(g)
    b = TierBudgets(device=int(0.01 * total), host=int(0.02 * total))  # each tier some rows
    out = {}
    for name in ("bfloat16", "float8_e4m3"):
        for mode in (True, False):
            s = UnifiedStore.build(
                g, comm, b, order="features_first", one_sided=mode, feature_dtype=name,
                name=f"cp{name[:4]}{int(mode)}",
            )  # fmt: skip
            want = feature_codec(name).round_trip(torch.from_numpy(g.x))[ids]
            out[name, mode] = (torch.equal(s.gather(ids), want), s.requests("features"))
            s.close()
    return out


def _world_both(comm, configs, cases):
    """One world, three suites (processes are expensive): tiers, topologies, compact rows."""
    return _world(comm, configs), _world_placed(comm, cases), _world_compact(comm)


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3])
def test_store_across_ranks(world):
    """Tiers across 2 and 3 ranks; the same worlds also check a topology with replicas."""
    matrix = {2: UNLINKED2, 3: LINE3}[world]
    cases = _placed_cases([matrix])
    both = run_world(_world_both, world, CONFIGS, cases)
    results = [b[0] for b in both]
    _check_placed([b[1] for b in both], cases)
    rb = 6 * 8
    for rank, per_rank in enumerate(results):
        for res in per_rank:
            one, two = res[True], res[False]
            dev_budget, host_budget = res["budgets"]
            for r in (one, two):
                assert r["exact"] and r["topo"] and r["sample"]
                assert r["empty"] == (0, 6)
                assert r["requests"] == r["expected_requests"]
                assert r["memory"]["device"] <= dev_budget
                assert r["memory"]["device"] == r["plan_device"][rank]
                assert r["memory"]["host"] <= host_budget  # per host: one copy for all ranks
                sizes = r["shard_rows"]
                assert max(sizes) - min(sizes) <= 1
                t, req = r["traffic"], r["requests"]  # bytes served per source, closed form
                assert t["local"]["bytes"] == req["local"] * rb
                assert t["peer"]["bytes"] == req["peer"] * rb
                assert t["h2d"]["bytes"] == req["host"] * rb
                assert t["disk"]["bytes"] == req["disk"] * rb
                assert sum(v["bytes"] for v in t.values()) == 200 * rb
            assert torch.equal(one["feats"], two["feats"])  # one-sided == two-sided
    for b in both:  # compact rows: every tier (own shard, peers, host, disk) reads them back
        for exact, req in b[2].values():
            assert exact and req["peer"] > 0 and req["host"] > 0 and req["disk"] > 0
    # the configurations exercise peers, host and disk
    first = results[0][0][True]
    assert first["requests"]["peer"] > 0 and first["requests"]["host"] > 0
    assert first["requests"]["disk"] > 0
    assert results[0][1][True]["requests"]["disk"] == 0  # everything on devices


# ---------------------------------------------------------------------------------- topology
LINE3 = [[700, 50, 0], [50, 700, 25], [0, 25, 700]]  # 0-1-2: 0 and 2 are not linked
RING4 = [[700, 50, 0, 25], [50, 700, 25, 0], [0, 25, 700, 50], [25, 0, 50, 700]]
UNLINKED2 = [[700, 0], [0, 700]]  # no links: every rank stores both partitions


def _expected_reads(tp, ids, rank, world, nbytes):
    """Closed form: rows (and bytes) of the requested device rows sourced at each rank."""
    k = tp.rank_of[ids]
    dev = k < tp.num_device
    placement = tp.placement
    home = k % world
    src = home if placement is None else np.asarray(placement.sources[rank])[home]
    rows = np.bincount(src[dev], minlength=world)
    size = np.bincount(src[dev], weights=nbytes[dev], minlength=world).astype(np.int64)
    return {s: {"rows": int(rows[s]), "bytes": int(size[s])} for s in range(world)}


FF, GF = "features_first", "graph_first"


def _placed_cases(matrices, tight=0.4, unlimited=10.0):
    """Cases ``(topology, device fraction, order, modes)``: today's split and ``"uniform"``
    (tight, one-sided), then every matrix tight (both orders) and unlimited, one- and two-sided
    where the order is features first."""
    base = [(None, tight, FF, (True,)), ("uniform", tight, FF, (True,))]
    placed = [(m, tight, FF, (True, False)) for m in matrices]
    placed += [(m, tight, GF, (True,)) for m in matrices]
    placed += [(m, unlimited, FF, (True, False)) for m in matrices]
    return base + placed


def _world_placed(comm, cases):
    """Per case: gather and walk the topology through the stores of each mode; report
    exactness, reads per source and their closed forms."""
    g = _graph()
    rank, world = comm.rank, comm.world_size
    total = int(topology_row_bytes(g).sum()) + g.num_nodes * feature_row_bytes(g)
    deg = g.in_degrees().astype(np.int64)
    all_ids = torch.arange(g.num_nodes)
    out = []
    for ci, (topology, frac, order, modes) in enumerate(cases):
        b = TierBudgets(device=int(frac * total / world) + 8, host=int(0.1 * total / world))
        rng = np.random.default_rng(200 + rank)  # rank-dependent, the same in every case
        ids = torch.from_numpy(rng.integers(0, g.num_nodes, 300))
        res = {"budget": b.device}
        for mode in modes:
            s = UnifiedStore.build(
                g,
                comm,
                b,
                order=order,
                one_sided=mode,
                topology=topology,
                name=f"pl{ci}{int(mode)}",
            )
            feats = s.gather(ids)
            feat_reads = s.reads_by_source("features")
            requests, traffic = s.requests("features"), s.traffic
            s.reset_stats()
            c1, n1 = s.all_neighbors(all_ids)
            topo_reads = s.reads_by_source("topology")
            fp, tp = s.plan.features, s.plan.topology
            idn = ids.numpy()
            res[mode] = {
                "exact": torch.equal(feats, torch.from_numpy(g.x[idn])),
                "topo": torch.equal(c1, torch.from_numpy(deg))
                and torch.equal(n1, torch.from_numpy(g.indices.astype(np.int64))),
                "feats": feats,
                "feat_reads": feat_reads,
                "expected_feat_reads": _expected_reads(
                    fp, idn, rank, world, np.full(idn.size, feature_row_bytes(g))
                ),
                "topo_reads": topo_reads,
                "expected_topo_reads": _expected_reads(
                    tp, all_ids.numpy(), rank, world, 16 + deg * g.indices.dtype.itemsize
                ),
                "all_reads": s.reads_by_source(),
                "requests": requests,
                "traffic": traffic,
                "memory": s.memory()["device"],
                "plan_device": s.plan.device_bytes().tolist(),
                "num_device": (tp.num_device, fp.num_device),
                "shard_rows": [fp.shard_rows(r).tolist() for r in range(world)],
                "placement": s.placement,
            }
            s.close()
        out.append(res)
    return out


def _check_placed(results, cases):
    """Exactness, budgets and reads per source (closed forms) of every case on every rank;
    today's split == ``"uniform"``; replicas shrink the device tier; unlimited fits all."""
    world = len(results)
    for rank, per_rank in enumerate(results):
        for (topology, frac, _, modes), res in zip(cases, per_rank):
            for r in (res[m] for m in modes):
                assert r["exact"] and r["topo"], (topology, frac, rank)
                assert r["feat_reads"] == r["expected_feat_reads"]
                assert r["topo_reads"] == r["expected_topo_reads"]
                assert r["all_reads"] == r["topo_reads"]  # features were reset before the walk
                assert r["memory"] <= res["budget"]
                assert r["memory"] == r["plan_device"][rank]
                plan = r["placement"]
                named = set(range(world) if plan is None else plan.sources[rank])
                assert {s for s, v in r["feat_reads"].items() if v["rows"]} <= named
                assert {s for s, v in r["topo_reads"].items() if v["rows"]} <= named
                assert r["traffic"]["local"]["bytes"] == r["feat_reads"][rank]["bytes"]
                peer = sum(v["bytes"] for s, v in r["feat_reads"].items() if s != rank)
                assert r["traffic"]["peer"]["bytes"] == peer
                assert r["requests"]["local"] + r["requests"]["peer"] == sum(
                    v["rows"] for v in r["feat_reads"].values()
                )
            if len(modes) == 2:
                one, two = res[True], res[False]
                assert torch.equal(one["feats"], two["feats"])  # one-sided == two-sided
                assert one["feat_reads"] == two["feat_reads"]
        none, uniform = per_rank[0][True], per_rank[1][True]
        assert uniform["placement"].max_parts == 1 and none["placement"] is None
        # the uniform topology is today's modulo split exactly: same tiers, counts, bytes, reads
        assert _summary(none) == _summary(uniform)
        for (_, frac, order, _), res in zip(cases[2:], per_rank[2:]):
            placed = res[True]
            if frac > 1:  # unlimited budgets: everything on the devices under every plan
                assert placed["num_device"] == (90, 90)
            elif order == FF and placed["placement"].max_parts > 1:  # replicas cost budget
                assert placed["num_device"][1] < none["num_device"][1]  # fewer rows fit


def _summary(res):
    keys = ("num_device", "plan_device", "shard_rows", "requests", "traffic", "feat_reads")
    return {k: res[k] for k in keys} | {"topo": res["topo_reads"]}


@pytest.mark.slow
def test_store_follows_the_placement():
    """4 ranks: a ring (replicas, reads from the plan's sources) and the DGX-1's first quad."""
    cases = _placed_cases([RING4, "dgx1-v100"])
    results = run_world(_world_placed, 4, cases)
    _check_placed(results, cases)
    plan = results[0][2][True]["placement"]
    assert plan.stores == ((0, 2), (1, 3), (0, 2), (1, 3))
    assert plan.sources == ((0, 1, 0, 1), (0, 1, 0, 1), (2, 1, 2, 3), (0, 3, 2, 3))
    assert results[0][3][True]["placement"].stores == ((0,), (1,), (2,), (3,))
    for rank, per_rank in enumerate(results):  # the reads follow the plan, not the modulo owner
        reads = per_rank[6][True]["feat_reads"]  # ring, unlimited: every partition requested
        assert all(reads[s]["rows"] > 0 for s in set(plan.sources[rank]))
        assert all(reads[s]["rows"] == 0 for s in set(range(4)) - set(plan.sources[rank]))


@pytest.mark.slow  # 8 spawned processes: ~15 s on 2 cores
def test_store_follows_the_dgx1_placement_on_8_ranks():
    """The full DGX-1 (XGNN's golden plan, 2 partitions per GPU) across 8 real ranks."""
    cases = _placed_cases(["dgx1-v100"])
    results = run_world(_world_placed, 8, cases)
    _check_placed(results, cases)
    plan = results[0][2][True]["placement"]
    assert plan.stores == ((0, 4), (1, 5), (2, 6), (3, 7), (3, 4), (2, 5), (1, 6), (0, 7))
    for rank, per_rank in enumerate(results):
        reads = per_rank[4][True]["feat_reads"]  # unlimited: every partition requested
        assert {s for s, v in reads.items() if v["rows"]} == set(plan.sources[rank])


# ---------------------------------------------------------------------------------- hosts
def _world_hosts(comm, hosts):
    """Ranks on several hosts (a communicator that says so; ``hosts`` may be None): two-sided
    reads, bytes per link against the hosts, one host tier per host within the host budget."""
    from fleetgnn.distributed.comm import Communicator
    from fleetgnn.distributed.errors import DistError
    from fleetgnn.store.store import SOURCE_LINKS

    multi = Communicator(comm.group, rank=comm.rank, world_size=comm.world_size, same_host=False)
    g = _graph()
    total = int(topology_row_bytes(g).sum()) + g.num_nodes * feature_row_bytes(g)
    b = TierBudgets(device=int(0.3 * total / comm.world_size) + 8, host=int(0.3 * total))
    rng = np.random.default_rng(300 + comm.rank)
    ids = torch.from_numpy(rng.integers(0, g.num_nodes, 250))
    s = UnifiedStore.build(g, multi, b, one_sided=False, hosts=hosts, name="hosts")
    try:
        feats = s.gather(ids)
        fp = s.plan.features
        tier, owner, _ = fp.locate(ids.numpy())
        layout = np.asarray(s.hosts)
        dev = tier == 0
        near = np.zeros(dev.shape, bool)
        near[dev] = layout[owner[dev]] == layout[comm.rank]
        mine = dev & (owner == comm.rank)
        expected = {
            "local": int(mine.sum()),
            "peer": int((near & ~mine).sum()),
            "net": int((dev & ~near).sum()),
            "host": int((tier == 1).sum()),
            "disk": int((tier == 2).sum()),
        }
        out = {
            "exact": torch.equal(feats, torch.from_numpy(g.x[ids.numpy()])),
            "hosts": s.hosts,
            "requests": s.requests("features"),
            "expected": expected,
            "bytes": s.bytes_served("features"),
            "traffic": {k: v["bytes"] for k, v in s.traffic.items()},
            "links": dict(SOURCE_LINKS),
            "memory": s.memory(),
            "host_bytes": s.plan.host_bytes(),
            "budget": b.host,
            "rph": s.plan.ranks_per_host,
        }
        s.reset_stats()
        s.all_neighbors(torch.arange(g.num_nodes))
        out["topo_bytes"] = s.bytes_served("topology")
        out["topo_traffic"] = {k: v["bytes"] for k, v in s.traffic.items()}
        out["topo_requests"] = s.requests("topology")
    finally:
        s.close()
    try:  # one-sided reads need every rank on one host
        UnifiedStore.build(g, multi, b, one_sided=True, hosts=hosts, name="hosts1").close()
        out["one_sided"] = "built"
    except DistError as e:
        out["one_sided"] = str(e)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("hosts", [(0, 0, 1), None])
def test_store_across_hosts(hosts):
    """3 ranks on 2 hosts (0, 1 | 2), and with no layout given (every rank its own host)."""
    results = run_world(_world_hosts, 3, hosts)
    rb = 6 * 8
    layout = hosts or (0, 1, 2)
    for rank, r in enumerate(results):
        assert r["exact"] and r["hosts"] == layout
        assert r["requests"] == r["expected"]
        # bytes per link == rows requested from the link's source x row bytes, per kind too
        for source, link in r["links"].items():
            assert r["bytes"][link] == r["requests"][source] * rb, source
            assert r["traffic"].get(link, 0) == r["bytes"][link], link
        assert r["topo_traffic"] == {k: r["topo_bytes"].get(k, 0) for k in r["topo_traffic"]}
        assert sum(r["topo_requests"].values()) == 90
        # the host budget is per host: one copy of at most host_budget bytes on every host
        assert r["memory"]["host"] == r["host_bytes"] <= r["budget"]
        assert r["rph"] == layout.count(layout[rank])
        assert "one host" in r["one_sided"]
    assert results[0]["requests"]["net"] > 0 and results[0]["host_bytes"] > 0
    if hosts is not None:
        assert results[0]["requests"]["peer"] > 0  # rank 1 shares host 0
        assert results[2]["requests"]["peer"] == 0  # rank 2 is alone on host 1
    else:
        assert all(r["requests"]["peer"] == 0 for r in results)
