"""Edge rows in the store: edge_attr keyed by edge ID over device / host / disk, bit-exact."""

import numpy as np
import pytest
import torch

from fleetgnn.distributed.testing import run_world
from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph import open_dataset, write_dataset
from fleetgnn.graph.csc import from_edges
from fleetgnn.store import TierBudgets, UnifiedStore
from fleetgnn.store.edge_table import (
    EdgeTable,
    edge_hot_order,
    node_store_bytes,
    split_budgets,
)

D = 3


def _graph(dtype=np.float32):
    rng = np.random.default_rng(0)
    n, e = 40, 300
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    attr = rng.standard_normal((e, D)).astype(dtype)
    return from_edges(
        src, dst, num_nodes=n, edge_attr=attr, node_data={"x": rng.standard_normal((n, 4))}
    )


def _expected_requests(table, ids, rank=0):
    """Rows per source from the plan alone (closed form: tier and owner of each hot rank)."""
    k = table.plan.rank_of[ids].astype(np.int64)
    dev = k < table.plan.num_device
    host = ~dev & (k < table.plan.num_device + table.plan.num_host)
    own = dev & (k % table.plan.world_size == rank)
    return {
        "local": int(own.sum()),
        "peer": int((dev & ~own).sum()),
        "net": 0,
        "host": int(host.sum()),
        "disk": int((~dev & ~host).sum()),
    }


def test_edge_hot_order_is_the_segments_of_the_node_order():
    g = _graph()
    node_order = np.random.default_rng(1).permutation(g.num_nodes)
    got = edge_hot_order(g, node_order)
    want = np.concatenate([np.arange(g.indptr[v], g.indptr[v + 1]) for v in node_order])
    np.testing.assert_array_equal(got, want)
    # default: highest in-degree first, as the node store's degree ranking
    deg = np.diff(g.indptr)
    first = edge_hot_order(g)[: deg.max()]
    np.testing.assert_array_equal(np.diff(first), 1)
    assert int(deg[np.searchsorted(g.indptr, first[0], "right") - 1]) == int(deg.max())
    with pytest.raises(ConfigError, match="must rank all 40 nodes"):
        edge_hot_order(g, node_order[:5])


def test_edge_hot_order_by_the_chance_of_a_read_then_by_presampled_reads():
    g = _graph()
    deg = np.diff(g.indptr)
    node_order = np.random.default_rng(1).permutation(g.num_nodes)
    f = int(np.median(deg))
    got = edge_hot_order(g, node_order, fanout=f)
    # nodes by min(1, f / deg) descending (deg <= f all tie), then by the node order
    rank = np.empty(g.num_nodes, np.int64)
    rank[node_order] = np.arange(g.num_nodes)
    nodes = sorted(range(g.num_nodes), key=lambda v: (-min(1.0, f / max(deg[v], 1)), rank[v]))
    want = np.concatenate([np.arange(g.indptr[v], g.indptr[v + 1]) for v in nodes])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(edge_hot_order(g, node_order, fanout=-1),
                                  edge_hot_order(g, node_order))  # fmt: skip
    counts = np.random.default_rng(2).integers(0, 3, g.num_edges)
    got = edge_hot_order(g, node_order, fanout=f, counts=counts)
    pos = np.empty(g.num_edges, np.int64)
    pos[want] = np.arange(g.num_edges)
    by_counts = sorted(range(g.num_edges), key=lambda e: (-counts[e], pos[e]))
    np.testing.assert_array_equal(got, by_counts)
    with pytest.raises(ConfigError, match="reads of each of the 300 edges"):
        edge_hot_order(g, counts=counts[:3])
    with pytest.raises(ConfigError, match="'fanout' must be an int >= 0"):
        edge_hot_order(g, fanout=-2)


def test_budget_split_is_explicit_and_never_exceeds_the_budget():
    g = _graph()
    b = TierBudgets(10_001, 7_777)
    eb = g.num_edges * D * 4
    nb = node_store_bytes(g)
    assert nb == 8 * (g.num_nodes + 1) + 4 * g.num_edges + g.num_nodes * 4 * 8
    by_bytes = split_budgets(b, g)
    assert by_bytes.edges == TierBudgets(10_001 * eb // (eb + nb), 7_777 * eb // (eb + nb))
    assert by_bytes.nodes.device + by_bytes.edges.device == b.device
    assert by_bytes.nodes.host + by_bytes.edges.host == b.host
    fixed = split_budgets(b, g, 0.25)
    assert fixed.edges == TierBudgets(2500, 1944) and fixed.nodes == TierBudgets(7501, 5833)
    assert split_budgets(b, g, 1).nodes == TierBudgets(0, 0)
    assert fixed.as_dict()["edges"] == {"device": 2500, "host": 1944}
    for bad in (-0.1, 1.5, True, "half"):
        with pytest.raises(ConfigError, match=r"store.edge_share\) must be a fraction in \[0, 1\]"):
            split_budgets(b, g, bad)


# (device, host) budgets in edge rows: nothing, device only, host only, all three tiers
TIERS = [(0, 0), (1000, 0), (0, 1000), (40, 90)]


@pytest.mark.parametrize("dev,host", TIERS)
@pytest.mark.parametrize("mapped", [False, True], ids=["memory", "memmap"])
def test_gather_is_bit_exact_through_every_tier(dev, host, mapped, tmp_path):
    g = _graph()
    if mapped:  # a dataset on disk: the disk tier reads edge_attr.npy
        g = open_dataset(write_dataset(g, tmp_path / "ds"))
    rb = D * 4
    b = TierBudgets(dev * rb, host * rb)
    ids = np.random.default_rng(2).integers(0, g.num_edges, 500)
    ids[:20] = ids[0]  # duplicates
    with EdgeTable.build(g, None, b) as t:
        p = t.plan
        assert (p.num_device, p.num_host) == (min(dev, 300), min(host, 300 - min(dev, 300)))
        out = t.gather(torch.from_numpy(ids))
        want = torch.from_numpy(np.asarray(g.edge_attr)[ids])
        assert out.dtype == torch.float32 and torch.equal(out, want)
        assert t.gather(torch.empty(0, dtype=torch.int64)).shape == (0, D)
        # accounting: requests from the plan's closed form, bytes D * itemsize a row
        req = t.requests()
        assert req == _expected_requests(t, ids)
        served = t.bytes_served()
        for src, link in (("local", "local"), ("host", "h2d"), ("disk", "disk")):
            assert served[link] == req[src] * rb
        assert t.hit_rates()["local"] == pytest.approx(req["local"] / ids.size)
        mem = t.memory()
        assert mem == {"device": p.num_device * rb, "host": p.num_host * rb,
                       "disk": (300 - p.num_device - p.num_host) * rb}  # fmt: skip
        assert mem["device"] <= b.device and mem["host"] <= b.host
        t.reset_stats()
        assert sum(t.requests().values()) == 0


def test_float64_rows_and_errors():
    g = _graph(np.float64)
    with EdgeTable.build(g, None, TierBudgets(50 * D * 8, 50 * D * 8)) as t:
        ids = torch.arange(g.num_edges - 1, -1, -1)
        assert torch.equal(t.gather(ids), torch.from_numpy(np.asarray(g.edge_attr)[ids.numpy()]))
        with pytest.raises(GraphError, match=r"edge ID 300, outside the valid interval \[0, 300\)"):
            t.gather(torch.tensor([0, 300]))
        with pytest.raises(GraphError, match="1-D integer tensor of edge IDs"):
            t.gather(torch.tensor([0.5]))
    with pytest.raises(GraphError, match="has no edge_attr"):
        EdgeTable.build(g.replace(edge_attr=None))


def test_node_store_and_edge_table_together_respect_the_store_budget():
    """The split's two halves place within the whole: node rows and edge rows on one budget."""
    g = _graph()
    b = TierBudgets(2000, 3000)
    split = split_budgets(b, g)
    with UnifiedStore.build(g, None, split.nodes) as nodes:
        order = nodes.plan.topology.order
        with EdgeTable.build(g, None, split.edges, node_order=order) as edges:
            mn, me = nodes.memory(), edges.memory()
            assert me["device"] > 0 and me["host"] > 0 and mn["device"] > 0
            assert mn["device"] + me["device"] <= b.device
            assert mn["host"] + me["host"] <= b.host
            # the hottest node's in-edges are the first edge rows on the device
            v = int(order[0])
            first = torch.arange(int(g.indptr[v]), int(g.indptr[v + 1]))
            edges.gather(first)
            assert edges.requests()["local"] == first.numel()


def _ranks(comm, budget_rows):
    g = _graph()
    rb = D * 4
    b = TierBudgets(budget_rows * rb, 2 * budget_rows * rb)
    ids = np.random.default_rng(10 + comm.rank).integers(0, g.num_edges, 200)  # rank-dependent
    out = {}
    for two_sided in (False, True):
        name = f"t.edges{int(two_sided)}"
        with EdgeTable.build(g, comm, b, one_sided=not two_sided, name=name) as t:
            rows = t.gather(torch.from_numpy(ids))
            out[two_sided] = {
                "exact": torch.equal(rows, torch.from_numpy(np.asarray(g.edge_attr)[ids])),
                "requests": t.requests(),
                "expected": _expected_requests(t, ids, comm.rank),
                "memory": t.memory(),
                "budget": (b.device, b.host),
                "plan": (t.plan.num_device, t.plan.num_host),
            }
    return out


@pytest.mark.slow
def test_sharded_across_ranks_like_node_rows():
    """Two ranks, one-sided (shared memory) and two-sided (all-to-all) device reads."""
    for per_rank in run_world(_ranks, 2, 30):
        for r in per_rank.values():
            assert r["exact"] and r["requests"] == r["expected"]
            assert r["memory"]["device"] <= r["budget"][0]
            assert r["memory"]["host"] <= r["budget"][1]
            assert r["plan"] == (60, 60)  # 30 rows a rank on the device tier, 60 on the host's
            assert all(r["requests"][s] > 0 for s in ("local", "peer", "host", "disk"))


def test_rows_on_the_tables_device_equal_the_host_path(device):
    """Edge rows on the engine's device (CUDA: device shards in device memory), bit-exact,
    with the same counters as the host path; the CPU runs the device read path too."""
    from fleetgnn.store.device_read import gather_on_device

    g = _graph()
    b = TierBudgets(40 * D * 4, 90 * D * 4)
    ids = torch.from_numpy(np.random.default_rng(4).integers(0, g.num_edges, 400))
    with EdgeTable.build(g, None, b) as host:
        want = host.gather(ids)
        want_req = host.requests()
    with EdgeTable.build(g, None, b, device=device) as t:
        read = t.gather if device != "cpu" else lambda i: gather_on_device(t.store, i)
        got = read(ids.to(device))
        assert got.device.type == device and torch.equal(got.cpu(), want)
        assert t.requests() == want_req
