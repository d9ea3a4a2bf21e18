"""The planner counts the edge rows a model reads (``gine``): their bytes per row, the memory each
engine holds them in and the bytes a step reads, as the engines hold and read them.

``minibatch``: the store's edge table (its share of each tier, :func:`split_budgets`), checked
against the engine's own store and meters; ``reference`` and ``fullgraph``: the ``[E, D]`` rows
(a rank's in-edges) at the compute width; ``split`` and ``offload`` carry no edge features and
are not planned.
"""

import dataclasses

import pytest

from fleetgnn.config import load_config
from fleetgnn.cost import PROFILES, make_plan, predict_engine, workload_from_config
from fleetgnn.cost.fullgraph_memory import rank_counts
from fleetgnn.cost.planner import knobs_from_config
from fleetgnn.cost.replay import minibatch_counts
from fleetgnn.distributed.testing import context_or_own, run_world
from fleetgnn.errors import ConfigError
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.store import UnifiedStore
from fleetgnn.store.edge_table import EdgeTable, edge_row_bytes, split_budgets
from fleetgnn.store.tiers import TierBudgets
from fleetgnn.train import engine_from_config

HW = PROFILES["dgx-a100"]
#: The engines run on CPU processes here: every byte they hold is ``device``.
CPU = dataclasses.replace(HW, kind="cpu")
D = 4  # edge features
SETS = ["model.hidden=8", "train.batch_size=24", "train.fanouts=[4,3]", "train.device=cpu"]
#: Every row fits the device; a budget that holds part of the rows (device, host and disk).
AMPLE, TIGHT = ("1GB", "1GB"), ("4KB", "8KB")


def _graph():
    spec = dataclasses.replace(spec_for("tiny", 0.3), edge_features=D)
    return generate_graph(spec, seed=4)


@pytest.fixture(scope="module")
def graph():
    return _graph()


def _cfg(model, budgets=AMPLE, *extra):
    dev, host = budgets
    return load_config(
        None,
        [
            f"model.name={model}",
            *SETS,
            f"store.device_budget={dev}",
            f"store.host_budget={host}",
            "store.sampling=host",
            "store.prefetch=false",  # one rank: a prefetched read would land in two steps
            *extra,
        ],
    )


def _predict(cfg, graph, engine="minibatch", world=1):
    wl = workload_from_config(cfg, graph=graph)
    return wl, predict_engine(engine, wl, HW, world, knobs_from_config(cfg).get(engine))


def test_the_workload_knows_the_edge_rows_bytes(graph):
    gcn = workload_from_config(_cfg("gcn"), graph=graph)
    assert (gcn.edge_dim, gcn.edge_row_bytes(), gcn.edge_rows_text()) == (0, 0, "")
    gine = workload_from_config(_cfg("gine"), graph=graph)
    assert gine.edge_dim == D and gine.model.edge_dim == D
    assert gine.edge_row_bytes() == edge_row_bytes(graph) == 4 * D  # float32 rows
    for name, row in (("bf16", 2 * D), ("fp16", 2 * D), ("fp8", D + 4)):
        wl = workload_from_config(_cfg("gine", AMPLE, f"store.edge_feature_dtype={name}"), graph)
        assert wl.edge_row_bytes() == edge_row_bytes(graph, wl.edge_feature_dtype) == row
    # from the counts: --shape's edge_features, float32 rows unless a stored dtype is given
    shape = {"nodes": 1000, "edges": 20000, "features": 16, "classes": 4, "edge_features": D}
    wl = workload_from_config(_cfg("gine"), shape=shape)
    assert (wl.edge_dim, wl.edge_row_bytes()) == (D, 4 * D)
    wl = workload_from_config(_cfg("gine", AMPLE, "store.edge_feature_dtype=bf16"), shape=shape)
    assert wl.edge_row_bytes() == 2 * D
    with pytest.raises(ConfigError, match="edge_features=D"):
        workload_from_config(
            _cfg("gine"), shape={k: v for k, v in shape.items() if k != "edge_features"}
        )
    with pytest.raises(ConfigError, match="has no edge_attr"):
        workload_from_config(_cfg("gine"), graph=graph.replace(edge_attr=None))


def test_minibatch_plan_adds_the_edge_tables_bytes(graph):
    """Every row on the device: gine's plan holds and reads exactly the edge table's bytes more
    than gcn's (the same samples), half of them with bfloat16 rows."""
    _, gcn = _predict(_cfg("gcn"), graph)
    _, gine = _predict(_cfg("gine"), graph)
    _, bf16 = _predict(_cfg("gine", AMPLE, "store.edge_feature_dtype=bf16"), graph)
    split = split_budgets(TierBudgets(2**30, 2**30), graph)  # what the engine does
    table = EdgeTable.build(graph, budgets=split.edges)
    try:
        held = table.memory()
    finally:
        table.close()
    assert held["device"] == graph.num_edges * 4 * D and held["host"] == 0
    assert gine.memory["device"] - gcn.memory["device"] == held["device"]
    assert gine.memory["host"] == gcn.memory["host"] == 0
    assert gine.knobs["edge_rows"]["device_bytes"] == held["device"]
    # one row per sampled edge of every block, all from the rank's own shard: the edges the
    # replay of gcn's epoch samples (the same draws)
    c = minibatch_counts(
        graph, 1, batch_size=24, fanouts=(4, 3), device_budget=2**30, host_budget=2**30
    )
    sampled = round(c.edges * c.steps)
    assert sampled > 0 and gine.steps == gcn.steps == c.steps
    assert gine.traffic["local"] - gcn.traffic["local"] == sampled * 4 * D
    assert gine.knobs["edge_rows"]["loads"]["local"] == sampled * 4 * D
    # bfloat16 rows: half the bytes held and read
    assert bf16.memory["device"] - gcn.memory["device"] == held["device"] // 2
    assert bf16.traffic["local"] - gcn.traffic["local"] == sampled * 2 * D
    assert "edge_rows" not in gcn.knobs


def test_minibatch_plan_is_the_engines_store_under_a_tight_budget(graph):
    """Node and edge rows share a budget too small for both: the plan's memory is the engine's
    node store plus its edge table, built as the engine builds them, and its traffic per link
    kind what the engine meters over an epoch (edge rows on disk read as the dataset's)."""
    compact = ("store.feature_dtype=bf16",)  # node rows: compact in the tiers, as stored on disk
    both = ("store.feature_dtype=fp8", "store.edge_feature_dtype=bf16")
    for extra in ((), ("store.edge_feature_dtype=bf16",), ("store.edge_share=0.5",), compact, both):
        cfg = _cfg("gine", TIGHT, *extra)
        wl, pred = _predict(cfg, graph)
        budgets = TierBudgets(4000, 8000)
        split = split_budgets(
            budgets,
            graph,
            wl.edge_share,
            feature_dtype=wl.feature_dtype,
            edge_feature_dtype=wl.edge_feature_dtype,
        )
        store = UnifiedStore.build(graph, None, split.nodes, feature_dtype=wl.feature_dtype)
        table = EdgeTable.build(
            graph,
            budgets=split.edges,
            node_order=store.plan.topology.order,
            fanout=4,
            feature_dtype=wl.edge_feature_dtype,
        )
        try:
            for tier in ("device", "host"):
                held = store.memory()[tier] + table.memory()[tier]
                assert pred.memory[tier] == held, (extra, tier)
            assert 0 < table.memory()["device"] and 0 < table.memory()["host"]
            assert pred.knobs["edge_rows"]["device_bytes"] == table.memory()["device"]
        finally:
            table.close()
            store.close()
        minibatch = cfg.with_key("train.engine", "minibatch")
        with context_or_own(None) as ctx, engine_from_config(minibatch, graph, ctx) as e:
            measured: dict[str, int] = {}
            for st in e.run_epoch(0):
                for k, v in st.traffic.items():
                    measured[k] = measured.get(k, 0) + v
            peak = e.peak_memory()
        for kind in ("local", "h2d", "disk"):
            assert pred.traffic.get(kind, 0) == measured.get(kind, 0), (extra, kind)
        assert pred.memory["device"] == peak["device"] and pred.memory["host"] == peak["host"]


def test_a_budget_for_the_node_rows_alone_moves_the_edge_rows_off_the_device(graph):
    """minibatch: a device budget that holds every node row but not the edge rows too sends
    edge (and node) reads to the host tier; gcn's plan read nothing there."""
    _, gcn = _predict(_cfg("gcn"), graph)
    nodes = gcn.memory["device"]  # every node row
    budget = (f"{nodes}B", "1GB")
    _, small_gcn = _predict(_cfg("gcn", budget), graph)
    _, small_gine = _predict(_cfg("gine", budget), graph)
    assert small_gcn.traffic.get("h2d", 0) == 0
    assert small_gine.traffic["h2d"] > 0 and small_gine.memory["device"] <= nodes
    assert small_gine.knobs["edge_rows"]["host_bytes"] > 0


def _held(comm, engine, model):
    """The engine's held bytes after two full-mode epochs, and the edge rows' bytes it holds."""
    sets = [f"train.engine={engine}", f"model.name={model}", *SETS, "train.mode=full"]
    knobs = {"num_chunks": 1, "tune": False} if engine == "fullgraph" else {}
    graph = _graph()
    with (
        context_or_own(comm) as ctx,
        engine_from_config(load_config(None, sets), graph, ctx, **knobs) as e,
    ):
        e.run_epoch(0)
        e.run_epoch(1)
        if engine == "reference":
            attr = e.full_aggregator.edge_attr()
            return sum(e.held_bytes().by_device.values()), attr.numel() * attr.element_size()
        return e.peak_memory()["device"], e.edge_attr.numel() * e.edge_attr.element_size()


FULL = {"reference": {}, "fullgraph": {"num_chunks": 1, "tune": False}}


def test_full_graph_engines_hold_the_edge_rows_at_the_compute_width(graph):
    """reference: every edge's row at the compute width, bf16 storage or not (it holds the
    read-back values), beside the structure's destination index (no sparse product); fullgraph
    at one rank the same rows. The prediction is the engine's held bytes, exactly."""
    wl = workload_from_config(_cfg("gine", AMPLE, "train.mode=full"), graph=graph)
    row = D * 4  # float32, the compute width
    for engine, knobs in FULL.items():
        pred = predict_engine(engine, wl, CPU, 1, knobs)
        bf16 = dataclasses.replace(wl, edge_feature_dtype="bfloat16")
        assert predict_engine(engine, bf16, CPU, 1, knobs).memory == pred.memory
        held, attr = _held(None, engine, "gine")
        assert attr == graph.num_edges * row
        assert pred.memory["device"] == held, (engine, pred.memory, held)


@pytest.mark.slow
def test_fullgraph_ranks_hold_their_in_edges_rows(graph):
    """W = 2: each rank holds its in-edges' rows; the fullest rank's held bytes, exactly."""
    wl = workload_from_config(_cfg("gine", AMPLE, "train.mode=full"), graph=graph)
    pred = predict_engine("fullgraph", wl, CPU, 2, FULL["fullgraph"])
    ranks = run_world(_held, 2, "fullgraph", "gine", timeout_s=300)
    edges = [c.edges for c in rank_counts(graph, 2)]
    assert [attr for _, attr in ranks] == [e * D * 4 for e in edges]
    assert pred.memory["device"] == max(held for held, _ in ranks)


def test_a_device_that_fits_all_but_the_edge_rows_changes_the_verdict(graph):
    """reference: a device with room for everything but half the edge rows does not fit."""
    wl = workload_from_config(_cfg("gine", AMPLE, "train.mode=full"), graph=graph)
    pred = predict_engine("reference", wl, HW, 1)
    need = pred.memory["device"] + pred.workspace["device"]
    edge = graph.num_edges * D * 4
    for device, fits in ((need, True), (need - edge // 2, False)):
        hw = dataclasses.replace(HW, device_memory=device)
        plan = make_plan(wl, hw, 1, mode="full", engines=["reference"])
        assert (plan.choice == "reference") is fits, device
        if not fits:
            assert "device memory" in plan.reason


def test_the_plan_shows_the_edge_rows_and_skips_the_engines_without_them(graph):
    plan = make_plan(workload_from_config(_cfg("gine"), graph=graph), HW, 2)
    assert set(plan.predictions) == {"reference", "minibatch", "fullgraph"}
    w = plan.to_dict()["workload"]
    assert (w["edge_features"], w["edge_row_bytes"], w["edge_feature_dtype"]) == (D, 4 * D, None)
    assert "Edge rows (" in plan.reason and "16 B per row" in plan.reason
    assert "Not planned: split and offload" in plan.reason
    json = plan.to_dict()["engines"]["minibatch"]["knobs"]["edge_rows"]
    assert json["row_bytes"] == 4 * D
    assert "edge_rows=" not in plan.table()  # a long knob: --json only
    gcn = make_plan(workload_from_config(_cfg("gcn"), graph=graph), HW, 2)
    assert "edge_row_bytes" not in gcn.to_dict()["workload"]
    assert "Edge rows" not in gcn.reason and "split" in gcn.predictions
    wl = workload_from_config(_cfg("gine"), graph=graph)
    with pytest.raises(ConfigError, match="does not carry"):
        make_plan(wl, HW, 2, engines=["split"])


def test_a_shape_plan_counts_the_edge_rows():
    """From the counts: the edge rows take their share of the store's budget and are read once
    per sampled edge; the full-graph engines hold them."""
    from fleetgnn.cost.minibatch_store import presample

    shape = {"nodes": 2_449_029, "edges": 61_859_140, "features": 100, "classes": 47}
    gin = workload_from_config(_cfg("gin"), shape=shape)
    gine = workload_from_config(_cfg("gine"), shape={**shape, "edge_features": 16})
    hw = PROFILES["4x3090ti-pcie"]
    budget = {"device_budget": 64 << 20}
    a = predict_engine("minibatch", gin, hw, 4, budget)
    b = predict_engine("minibatch", gine, hw, 4, budget)
    assert b.memory["device"] <= 64 << 20 and b.knobs["edge_rows"]["row_bytes"] == 64
    edge = b.knobs["edge_rows"]
    assert edge["device_bytes"] > 0 and edge["host_bytes"] > 0
    sampled = presample(gine)["edges"] * b.steps * 4  # every rank, every step
    assert sum(edge["loads"].values()) == pytest.approx(sampled * 64, rel=1e-6)
    assert sum(b.traffic.get(k, 0) for k in ("local", "peer", "h2d", "disk")) > sum(
        a.traffic.get(k, 0) for k in ("local", "peer", "h2d", "disk")
    )
    ref = predict_engine("reference", gine, hw, 1)
    assert ref.memory["device"] > 61_859_140 * 16 * 4  # every edge's row, float32


def test_fleetgnn_plan_prints_the_edge_rows(graph, tmp_path, capsys):
    """``fleetgnn plan`` of a gine model, from a dataset with edge_attr or from --shape."""
    import json

    from fleetgnn.cli.main import main
    from fleetgnn.graph import write_dataset

    write_dataset(graph, tmp_path / "g")
    args = ["plan", "--dataset", str(tmp_path / "g"), "--model", "gine", "--hardware", "h100"]
    assert main([*args, "--json", "--set", "store.edge_feature_dtype=bf16"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["workload"]["edge_row_bytes"] == 2 * D
    assert out["workload"]["edge_feature_dtype"] == "bfloat16"
    assert set(out["engines"]) == {"reference", "minibatch", "fullgraph"}
    assert main(args) == 0
    assert "Edge rows (2,534 of 4 features, read by gine)" in capsys.readouterr().out
    shape = "nodes=1e5,edges=2e6,features=64,classes=10,edge_features=8"
    assert main(["plan", "--shape", shape, "--model", "gine", "--hardware", "h100", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["workload"]["edge_row_bytes"] == 32
