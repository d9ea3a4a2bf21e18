"""The keyed store: per-type feature tables of a typed graph over device / host / disk tiers."""

import dataclasses

import numpy as np
import pytest
import torch

from fleetgnn.distributed.testing import run_world
from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph.hetero_toy import toy_mag
from fleetgnn.store import TierBudgets
from fleetgnn.store.keyed import KeyedStore, keyed_hotness, plan_keyed


def _graph(featureless=False):
    # three widths: papers 8, authors 5 (float32), fields 8 or none
    g = toy_mag(
        num_papers=70, num_authors=40, num_fields=9, author_dim=5, featureless_fields=featureless
    )
    x = dict(g.x)
    x["author"] = x["author"].astype(np.float32)
    return dataclasses.replace(g, x=x)


def _feature_bytes(g):
    return sum(int(a.nbytes) for a in g.x.values())


def _direct(g, ids):
    code = g.schema.type_of(ids)
    out = {}
    for t, arr in g.x.items():
        lo = g.schema.type_range(t)[0]
        out[t] = torch.from_numpy(np.asarray(arr[ids[code == g.schema.type_index(t)] - lo]))
    return out


# (device fraction per rank, host fraction) of all the features
TIERS = [(0, 0), (1.0, 0), (0, 1.0), (0.2, 0.3), (0.05, 0), (0, 0.4), (0.5, 1.0)]


@pytest.mark.parametrize("dev,host", TIERS)
def test_gather_equals_direct_indexing_for_every_tier_mix(dev, host):
    g = _graph()
    fb = _feature_bytes(g)
    b = TierBudgets(int(dev * fb), int(host * fb))
    rng = np.random.default_rng(3)
    ids = rng.integers(0, g.num_nodes, 300)
    with KeyedStore.build(g, None, b) as s:
        out = s.gather(torch.from_numpy(ids))
        want = _direct(g, ids)
        assert set(out) == set(g.x)
        for t in g.x:
            assert out[t].dtype == want[t].dtype
            assert torch.equal(out[t], want[t])
        # one type at a time, and no rows
        p = ids[g.schema.type_of(ids) == g.schema.type_index("author")]
        assert torch.equal(s.gather_type("author", torch.from_numpy(p)), want["author"])
        assert s.gather(torch.empty(0, dtype=torch.int64))["paper"].shape == (0, 8)
        m = s.memory()
        assert m["device"] <= b.device and m["host"] <= b.host
        assert m["device"] + m["host"] + m["disk"] == fb
        # every feature row requested is metered at its own width
        req = s.requests()
        assert sum(req.values()) == ids.size + p.size  # gather, then gather_type
        served = s.bytes_served()
        width = sum(want[t].numel() * want[t].element_size() for t in g.x)
        assert sum(served.values()) == width + p.size * 5 * 4
        assert s.meter.snapshot()["disk"]["bytes"] == served["disk"]
        if dev == host == 0:
            assert req["disk"] == sum(req.values())
        if dev >= 1.0 or host >= 1.0:
            assert req["disk"] == 0


def test_budget_goes_to_the_hottest_rows_of_all_types_by_bytes():
    g = _graph()
    deg = keyed_hotness(g)
    fb = _feature_bytes(g)
    for w in (1, 2, 3):
        for frac in (0.1, 0.25, 0.6):
            b = TierBudgets(int(frac * fb / w), int(frac * fb))
            plan = plan_keyed(g, b, w)
            assert (plan.device_bytes() <= b.device).all()
            assert plan.host_bytes() <= b.host
            assert set(plan.tables) == set(g.x)
            # a type's device rows are its hottest ones; no row left off a tier is hotter than
            # a row on it (ties aside), whatever the type
            on, off = [], []
            for t, p in plan.tables.items():
                cached = p.order[: p.num_device + p.num_host]
                assert (np.diff(deg[t][p.order]) <= 0).all()
                on.append(deg[t][cached])
                off.append(deg[t][p.order[p.num_device + p.num_host :]])
            cold = np.concatenate(off)
            hot = np.concatenate(on)
            if cold.size and hot.size:
                assert hot.min() >= cold.max()


def test_device_share_is_byte_weighted():
    """Two tables of different widths: the budget buys the hottest rows of all at their width."""
    g = _graph()
    hot = {t: np.zeros(g.schema.count(t), np.int64) for t in g.x}
    hot["author"][:10] = 5  # the ten hottest rows of all: authors (20 bytes each)
    hot["paper"][:10] = 3  # then ten papers
    rb = g.x["paper"].shape[1] * g.x["paper"].dtype.itemsize
    assert rb != 20
    b = TierBudgets(10 * 20 + 5 * rb + rb - 1, 0)  # a byte short of a sixth paper
    plan = plan_keyed(g, b, 1, scores=hot)
    assert plan.tables["author"].num_device == 10
    assert plan.tables["paper"].num_device == 5
    assert plan.tables["field"].num_device == 0
    assert plan.shares["paper"].device == 5 * rb


def test_featureless_types_have_no_table():
    g = _graph(featureless=True)
    with KeyedStore.build(g, None, TierBudgets(200, 300)) as s:
        assert list(s.tables) == ["paper", "author"]
        field = g.schema.type_range("field")[0]
        out = s.gather(torch.tensor([field, 0, field + 1]))
        assert set(out) == {"paper", "author"} and out["paper"].shape == (1, 8)
        with pytest.raises(GraphError, match="'field' has no feature table"):
            s.gather_type("field", torch.tensor([field]))


def test_bad_input_one_line():
    g = _graph()
    with KeyedStore.build(g) as s:
        for call, match in [
            (lambda: s.gather(torch.tensor([g.num_nodes])), "outside the valid interval"),
            (lambda: s.gather(torch.tensor([[0]])), "1-D integer tensor"),
            (lambda: s.gather_type("author", torch.tensor([0])), "not of type 'author'"),
        ]:
            with pytest.raises(GraphError, match=match) as e:
                call()
            assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="'budgets' must be a TierBudgets"):
        KeyedStore.build(g, None, 5)
    with pytest.raises(ConfigError, match="one score per node of type 'paper'"):
        plan_keyed(g, TierBudgets(), 1, scores={"paper": np.zeros(3)})
    with pytest.raises(GraphError, match="closed"):
        s.gather(torch.tensor([0]))


def _world(comm, configs):
    g = _graph()
    fb = _feature_bytes(g)
    rng = np.random.default_rng(50 + comm.rank)
    out = []
    for ci, (dev, host) in enumerate(configs):
        b = TierBudgets(int(dev * fb / comm.world_size), int(host * fb))
        ids = rng.integers(0, g.num_nodes, 250)
        res = {}
        for one_sided in (True, False):
            with KeyedStore.build(
                g, comm, b, one_sided=one_sided, name=f"k{ci}{int(one_sided)}"
            ) as s:
                got = s.gather(torch.from_numpy(ids))
                want = _direct(g, ids)
                res[one_sided] = {
                    "exact": all(torch.equal(got[t], want[t]) for t in g.x),
                    "memory": s.memory(),
                    "requests": s.requests(),
                }
        out.append((b, res))
    return out


@pytest.mark.slow
def test_two_rank_shared_keyed_store_reads_exactly():
    configs = [(0, 0), (1.0, 0), (0, 1.0), (0.3, 0.3), (0.1, 0.0)]
    ranks = run_world(_world, 2, configs)
    for r, per_rank in enumerate(ranks):
        for (dev, host), (b, res) in zip(configs, per_rank, strict=True):
            for one_sided, v in res.items():
                assert v["exact"], (r, dev, host, one_sided)
                assert v["memory"]["device"] <= b.device
                assert v["memory"]["host"] <= b.host
                if dev > 0:  # rows on both ranks' shards: this rank reads the other's
                    assert v["requests"]["peer"] > 0 and v["requests"]["local"] > 0
                if dev == host == 0:
                    assert v["requests"]["disk"] == 250
