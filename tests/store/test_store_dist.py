"""The store across real gloo ranks (spawned processes): device shards in shared memory."""

import numpy as np
import pytest
import torch

from fleetgnn.distributed.testing import run_world
from fleetgnn.distributed.traffic import TrafficMeter
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
            blocks = NeighborSampler(s, [3, 2], seed=1).sample(seeds, stream=comm.rank)
            rblocks = NeighborSampler(g, [3, 2], seed=1).sample(seeds, stream=comm.rank)
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


@pytest.mark.parametrize("world", [2, 3])
def test_store_across_ranks(world):
    results = run_world(_world, world, CONFIGS)
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
                assert r["memory"]["host"] <= host_budget * world
                sizes = r["shard_rows"]
                assert max(sizes) - min(sizes) <= 1
                t, req = r["traffic"], r["requests"]  # bytes served per source, closed form
                assert t["local"]["bytes"] == req["local"] * rb
                assert t["peer"]["bytes"] == req["peer"] * rb
                assert t["h2d"]["bytes"] == req["host"] * rb
                assert t["disk"]["bytes"] == req["disk"] * rb
                assert sum(v["bytes"] for v in t.values()) == 200 * rb
            assert torch.equal(one["feats"], two["feats"])  # one-sided == two-sided
    # the configurations exercise peers, host and disk
    first = results[0][0][True]
    assert first["requests"]["peer"] > 0 and first["requests"]["host"] > 0
    assert first["requests"]["disk"] > 0
    assert results[0][1][True]["requests"]["disk"] == 0  # everything on devices
