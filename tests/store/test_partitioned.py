"""The partition-aware placement (``split``'s store): each rank's shard holds its own part's
hottest rows; the store reads it bit-exact, counting own-shard, peer, host and disk rows."""

import numpy as np
import pytest
import torch

import fleetgnn.store.partitioned as partitioned
from fleetgnn.distributed.testing import run_world
from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph.csc import from_edges
from fleetgnn.store import SOURCES, TierBudgets, UnifiedStore, plan_partitioned
from fleetgnn.store.device_read import DeviceIndex
from fleetgnn.store.tiers import DEVICE, DISK, HOST


def _graph(n=60, e=400):
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    x = rng.standard_normal((n, 4)).astype(np.float32)  # 16 bytes a row
    return from_edges(src, dst, num_nodes=n, node_data={"x": x})


def _hot_order(g):
    """In- plus out-degree, descending, ties by ID (the store's degree ranking), in Python."""
    n = g.num_nodes
    score = np.diff(np.asarray(g.indptr)) + np.bincount(np.asarray(g.indices), minlength=n)
    return sorted(range(n), key=lambda v: (-int(score[v]), v))


def _owner(n):
    """Three parts of different sizes, part 2 empty: shards of any size, one of none."""
    return (np.arange(n) * 7 % 3 == 1).astype(np.int32)


@pytest.mark.parametrize("cap", [0, 1, 7, 25, 10_000])
def test_each_shard_holds_its_parts_hottest_rows(cap, monkeypatch):
    monkeypatch.setattr(partitioned, "_BLOCK", 13)  # the walk crosses blocks
    g = _graph()
    n, w, host_rows = g.num_nodes, 3, 5
    owner = _owner(n)
    plan = plan_partitioned(g, owner, TierBudgets(cap * 16, host_rows * 16), w)
    fp = plan.features
    order = _hot_order(g)
    dev = [[v for v in order if owner[v] == r][:cap] for r in range(w)]
    on_dev = {v for d in dev for v in d}
    host = [v for v in order if v not in on_dev][:host_rows]
    for r in range(w):
        assert fp.shard_rows(r).tolist() == dev[r]
    assert fp.partition_sizes().tolist() == [len(d) for d in dev]
    assert fp.device_bytes.tolist() == [16 * len(d) for d in dev]
    assert fp.host_rows().tolist() == host and fp.host_bytes == 16 * len(host)
    assert fp.disk_bytes == 16 * (n - len(on_dev) - len(host))
    assert sorted(fp.order.tolist()) == list(range(n))
    assert np.array_equal(fp.rank_of[fp.order], np.arange(n))
    # every node located where the plan put it, by any reader (no placement routes)
    ids = np.arange(n)
    tier, own, local = fp.locate(ids, reader=1)
    for r in range(w):
        sel = np.flatnonzero(np.isin(ids, dev[r]))
        assert np.all(tier[sel] == DEVICE) and np.all(own[sel] == r)
        assert [dev[r][i] for i in local[sel]] == ids[sel].tolist()
    assert set(ids[tier == HOST].tolist()) == set(host)
    assert np.all(own[tier != DEVICE] == -1) and np.all(tier[tier != DEVICE] >= HOST)
    assert np.count_nonzero(tier == DISK) == n - len(on_dev) - len(host)
    # the device read path locates the same way
    index = DeviceIndex(fp, 1, torch.device("cpu"))
    dt, do, dl, _ = index.locate(torch.from_numpy(ids))
    assert dt.tolist() == tier.tolist() and do.tolist() == own.tolist()
    assert dl.tolist() == local.tolist()
    # the topology is not placed
    assert plan.topology.num_device == plan.topology.num_host == 0


def test_one_rank_store_reads_bit_exact_with_exact_counts():
    g = _graph()
    n = g.num_nodes
    plan = plan_partitioned(g, np.zeros(n, np.int64), TierBudgets(10 * 16, 20 * 16), 1)
    ids = np.random.default_rng(3).integers(0, n, 200)
    with UnifiedStore.build(g, None, plan=plan) as store:
        assert torch.equal(store.gather(torch.from_numpy(ids)), torch.from_numpy(g.x[ids]))
        k = plan.features.rank_of[ids]
        want = {"local": int((k < 10).sum()), "host": int(((k >= 10) & (k < 30)).sum())}
        want = {**dict.fromkeys(SOURCES, 0), **want, "disk": ids.size - sum(want.values())}
        assert store.requests("features") == want
        assert store.memory()["device"] == 160 and store.memory()["host"] == 320


def test_bad_owner_or_graph_is_refused_in_one_line():
    g = _graph()
    with pytest.raises(ConfigError, match=r"'owner' must be an integer array .* shape \(60,\)"):
        plan_partitioned(g, np.zeros(5, np.int64), TierBudgets(), 2)
    with pytest.raises(ConfigError, match=r"'owner' holds part 2, outside \[0, 2\)"):
        plan_partitioned(g, np.full(g.num_nodes, 2), TierBudgets(), 2)
    bare = from_edges(np.array([0]), np.array([1]), num_nodes=2)
    with pytest.raises(GraphError, match="no node features"):
        plan_partitioned(bare, np.zeros(2, np.int64), TierBudgets(), 1)


def _rank(comm):
    g = _graph()
    owner = _owner(g.num_nodes) % comm.world_size  # two parts of different sizes
    plan = plan_partitioned(g, owner, TierBudgets(12 * 16, 6 * 16), comm.world_size)
    ids = np.random.default_rng(comm.rank).integers(0, g.num_nodes, 300)
    out = []
    for one_sided in (True, False):  # shared memory, and the two-sided exchange
        name = f"pt{int(one_sided)}"
        with UnifiedStore.build(g, comm, plan=plan, one_sided=one_sided, name=name) as store:
            rows = store.gather(torch.from_numpy(ids))
            exact = torch.equal(rows, torch.from_numpy(g.x[ids]))
            out.append((ids, exact, store.requests("features")))
    return out


@pytest.mark.slow
def test_ranks_read_own_rows_locally_and_peers_rows_from_their_shard():
    out = run_world(_rank, 2, timeout_s=120)
    g = _graph()
    owner = _owner(g.num_nodes) % 2
    fp = plan_partitioned(g, owner, TierBudgets(12 * 16, 6 * 16), 2).features
    for r, modes in enumerate(out):
        for ids, exact, req in modes:
            assert exact
            tier, own, _ = fp.locate(ids)
            dev = tier == DEVICE
            assert np.all(owner[ids[dev]] == own[dev])  # a device row is on its owner's shard
            want = {
                "local": int((dev & (own == r)).sum()),
                "peer": int((dev & (own != r)).sum()),
                "net": 0,
                "host": int((tier == HOST).sum()),
                "disk": int((tier == DISK).sum()),
            }
            assert req == want and want["local"] > 0 and want["peer"] > 0
