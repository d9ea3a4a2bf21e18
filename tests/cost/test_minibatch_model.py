"""Validation 1 for the mini-batch engines: the cost models' bytes per link kind and memory of an
epoch against what ``minibatch`` and ``split`` meter when they train it."""

import pytest

from fleetgnn.config import load_config
from fleetgnn.cost import PROFILES, predict_engine, workload_from_config
from fleetgnn.cost.replay import minibatch_counts, split_counts
from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.train import engine_from_config

from ..engines.test_offload import _community_graph

# 179 training nodes: 5 steps of 40 seeds (minibatch: per rank; split: the global batch)
SETS = ["model.hidden=16", "train.batch_size=40", "train.fanouts=[5,5]"]
LINKS = ("local", "peer", "net", "h2d", "disk")
# 480 nodes, 8 float64 features (64 B a row), 3793 edges: a small device budget holds part of
# the topology (graph first), the host budget the next rows, the rest stays on disk
SMALL = {"device_budget": 2000, "host_budget": 6000}


def _train(comm, cases):
    """Train epoch 0 of every case; this rank's traffic (summed over steps) and memory."""
    out = []
    for engine, model, changes in cases:
        cfg = load_config(None, [f"train.engine={engine}", f"model.name={model}", *SETS])
        e = engine_from_config(cfg, _community_graph(), context_of(comm), **changes)
        traffic = {}
        for st in e.run_epoch(0):
            for k, v in st.traffic.items():
                traffic[k] = traffic.get(k, 0) + v
        out.append((traffic, e.peak_memory()))
        e.close()
    return out


# (engine, model, engine config changes, the same as planner knobs); prefetch=False at one
# rank: there the store's group shares the engine's meter (Communicator.new_group ignores the
# meter it is given with one rank), so a prefetched device read lands in the concurrent step's
# traffic as well
CASES = {
    1: [
        ("minibatch", "sage", {"prefetch": False}, {}),
        ("minibatch", "gcn", {"prefetch": False, **SMALL}, SMALL),
        ("split", "gcn", {"device_budget": 600}, {"device_budget": 600}),
    ],
    2: [
        ("minibatch", "sage", {}, {}),
        ("minibatch", "gcn", SMALL, SMALL),
        (
            "minibatch",
            "sage",
            {"placement": "presample", "device_budget": 3000, "host_budget": 3000},
            {"placement": "presample", "device_budget": 3000, "host_budget": 3000},
        ),
        ("split", "sage", {"partition": "metis"}, {"partition": "metis"}),
        (
            "split",
            "gcn",
            {"partition": "range", "device_budget": 600},
            {"partition": "range", "device_budget": 600},
        ),
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("world", sorted(CASES))
def test_predicted_traffic_and_memory_equal_measured(world):
    """Every link kind within 5% and the memory the engine reports within 10% (here: exact)."""
    cases = CASES[world]
    res = run_world(_train, world, [c[:3] for c in cases], timeout_s=300)
    hw = PROFILES["dgx-a100"]
    for i, (engine, model, _, knobs) in enumerate(cases):
        measured = dict.fromkeys(LINKS, 0)
        for r in res:
            for k, v in r[i][0].items():
                measured[k] = measured.get(k, 0) + v
        cfg = load_config(None, [f"model.name={model}", "train.mode=minibatch", *SETS])
        wl = workload_from_config(cfg, graph=_community_graph())
        if engine == "minibatch":  # CPU processes: store.sampling=auto sampled on the host
            knobs = {"sampling": "host", **knobs}
        pred = predict_engine(engine, wl, hw, world, knobs)
        case = (engine, model, knobs)
        assert pred.knobs["counts"] == "exact", case
        assert measured["peer"] > 0 or world == 1, case  # the shuffle / all-reduce ran
        for kind in LINKS:
            want, got = measured[kind], pred.traffic.get(kind, 0)
            assert got == pytest.approx(want, rel=0.05, abs=64), (case, kind, measured, pred)
        tiers = ("device", "host") if engine == "minibatch" else ("device",)  # split: its cache
        for tier in tiers:
            peak = max(r[i][1].get(tier, 0) for r in res)
            assert pred.memory[tier] == pytest.approx(peak, rel=0.10), (case, tier, pred.memory)
        if engine == "minibatch" and set(knobs) - {"sampling"}:
            assert measured["h2d"] > 0 and measured["disk"] > 0, case  # every tier served


def test_presampled_replay_extrapolates_the_epoch():
    """Above ``max_edges`` only a prefix of steps is replayed and scaled to the epoch."""
    g = _community_graph()
    args = {"batch_size": 40, "fanouts": (5, 5), "device_budget": 2000, "host_budget": 6000}
    exact = minibatch_counts(g, 2, **args)
    pre = minibatch_counts(g, 2, **args, max_edges=1, presample_steps=2)
    assert exact.exact and exact.replayed == exact.steps == 3
    assert not pre.exact and pre.replayed == 2 and pre.steps == 3
    for kind in LINKS:
        assert pre.loads[kind] == pytest.approx(exact.loads[kind], rel=0.25), kind
    sp = split_counts(g, 2, batch_size=40, fanouts=(5, 5), max_edges=1, presample_steps=2)
    assert not sp.exact and sp.replayed == 2 and sp.steps == 5
    wl = workload_from_config(load_config(None, ["model.name=sage", *SETS]), graph=g)
    hw = PROFILES["dgx-a100"]
    assert predict_engine("minibatch", wl, hw, 2).knobs["counts"] == "exact"


def test_shape_models_state_their_assumptions():
    """Without the dataset the counts are modelled, the knobs say so, memory stays in budget."""
    cfg = load_config(None, ["model.name=sage", "train.mode=minibatch", "train.batch_size=1024"])
    shape = {"nodes": 2_449_029, "edges": 61_859_140, "features": 100, "classes": 47}
    wl = workload_from_config(cfg, shape=shape)
    hw = PROFILES["4x3090ti-pcie"]
    budget = 64 << 20
    mb = predict_engine("minibatch", wl, hw, 4, {"device_budget": budget})
    sp = predict_engine("split", wl, hw, 4, {"device_budget": budget})
    assert mb.knobs["counts"].startswith("model") and sp.knobs["counts"].startswith("model")
    assert mb.memory["device"] <= budget and sp.memory["device"] <= budget
    assert mb.steps == -(-wl.num_train // (1024 * 4)) and sp.steps == -(-wl.num_train // 1024)
    # graph first: the topology (about 267 MB) takes the 4 x 64 MiB of device budget
    assert mb.traffic["h2d"] > 0 and mb.traffic["local"] > 0 and mb.traffic["peer"] > 0
    assert mb.workspace["device"] > 0 and mb.fits and sp.fits


def test_gradient_all_reduce_is_charged_to_its_link_not_to_the_gather():
    """The breakdown's ``gather`` is the store's loads alone; the all-reduce is the link's."""
    g = _community_graph()
    hw = PROFILES["dgx-a100"]

    def pred(hidden, world):
        cfg = load_config(None, ["model.name=sage", *SETS, f"model.hidden={hidden}"])
        return predict_engine("minibatch", workload_from_config(cfg, graph=g), hw, world)

    small, big = pred(16, 2), pred(256, 2)
    # wider layers: more gradient bytes to all-reduce, the same feature rows to gather
    assert big.breakdown["gather"] == pytest.approx(small.breakdown["gather"])
    assert big.breakdown["peer"] > small.breakdown["peer"] > 0
    sync = big.traffic["peer"] - small.traffic["peer"]  # the all-reduces' extra bytes
    extra = big.breakdown["peer"] - small.breakdown["peer"]
    assert extra == pytest.approx(sync / 2 / hw.min_peer_bandwidth())
    assert small.breakdown["latency"] > 0
    one = pred(16, 1)  # nothing to all-reduce on one rank
    assert one.breakdown.get("peer", 0.0) == 0.0 and one.breakdown["latency"] == 0.0
    total = sum(v for k, v in small.breakdown.items() if k != "hidden")
    assert small.epoch_s == pytest.approx(total)
