"""Edge features on every engine that accepts them, against the reference (float64)."""

import dataclasses
import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.errors import ConfigError
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.nn import LocalAggregator, build_model
from fleetgnn.sampling import GraphTopology, NeighborSampler, SeedLoader
from fleetgnn.train import engine_from_config, load_config

STEPS = 3
EPOCHS = 2


@functools.cache
def _graph():
    return generate_graph(dataclasses.replace(spec_for("tiny", 0.3), edge_features=3), seed=4)


def _config(engine, extra=()):
    base = [
        f"train.engine={engine}",
        "train.dtype=float64",
        "train.batch_size=16",
        "train.fanouts=[4,3]",
        "model.name=gine",
        "model.hidden=8",
        "model.dropout=0.3",
        "optim.optimizer=sgd",
        "optim.lr=0.5",
        "optim.weight_decay=0",
        "train.seed=7",
    ]
    return load_config(None, base + list(extra))


def test_reference_streams_edge_features_like_its_full_graph_pass():
    """Mini-batch mode evaluates by streaming blocks (edge features by edge ID); full mode in
    one pass over the graph's CSC edge features: equal for the same parameters."""
    g = _graph()
    full = engine_from_config(_config("reference", ["train.mode=full"]), g)
    mini = engine_from_config(_config("reference", ["train.mode=minibatch"]), g)
    mini.run_epoch(0)
    full.model.load_state_dict(mini.model.state_dict())
    got, want = mini.evaluate(), full.evaluate()
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


@pytest.mark.parametrize("engine", ["split", "offload"])
def test_engines_without_edge_features_refuse_in_one_line(engine):
    with pytest.raises(
        ConfigError, match=r"read edge features.*use engine reference \| minibatch \| fullgraph$"
    ):
        engine_from_config(
            _config(engine, ["train.mode=full"] if engine == "offload" else []), _graph()
        )


def test_a_graph_without_edge_features_is_refused():
    g = _graph().replace(edge_attr=None)
    with pytest.raises(ConfigError, match="model.name=gine reads edge features but"):
        engine_from_config(_config("reference"), g)


# ---------------------------------------------------------------------------------- minibatch
def _minibatch_ranks(comm, extra):
    engine = engine_from_config(_config("minibatch", extra), _graph(), context_of(comm))
    try:
        table = engine.edge_table  # the edge rows are read through the store's edge table
        for step in range(STEPS):
            engine.train_step(0, step, engine.prepare(0, step), 0.0)
        params = {k: v.detach().cpu() for k, v in engine.module.state_dict().items()}
        trained = table.requests()
        out = {"params": params, "eval": engine.evaluate(), "trained": trained}
        out["evaluated"] = sum(table.requests().values()) - sum(trained.values())
        out["split"] = engine.budget_split
        out["memory"] = (engine.store.memory(), table.memory(), engine.peak_memory())
        return out
    finally:
        engine.close()


def _minibatch_reference(world_size):
    """One process: every rank's blocks, edge features read from the numpy edge_attr by ID."""
    cfg = _config("minibatch")
    g = _graph()
    x = torch.from_numpy(np.array(g.x)).double()
    y = torch.from_numpy(np.array(g.y))
    attr = torch.from_numpy(np.array(g.edge_attr)).double()
    torch.manual_seed(cfg.train.seed)
    model = build_model(
        "gine", x.shape[1], g.num_classes, seed=7, hidden_dim=8, dropout=0.3, edge_dim=3
    ).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    sampler = NeighborSampler(GraphTopology(g), [4, 3], seed=7, with_edge_ids=True)
    train = torch.from_numpy(np.flatnonzero(g.train_mask))
    loaders = [
        SeedLoader(train, 16, rank=r, world_size=world_size, seed=7) for r in range(world_size)
    ]
    for step in range(STEPS):
        total = sum(int(ld.batch(0, step).numel()) for ld in loaders)
        loss = 0.0
        for r, ld in enumerate(loaders):
            seeds = ld.batch(0, step)
            blocks = sampler.sample_from_nodes(seeds, epoch=0, step=step, stream=r).blocks
            aggs = [
                LocalAggregator(b, dtype=torch.float64, edge_attr=attr[b.edge_ids]) for b in blocks
            ]
            out = model(aggs, x[blocks[0].src_ids], step=step)
            loss = loss + F.cross_entropy(out, y[seeds], reduction="sum")
        opt.zero_grad()
        (loss / total).backward()
        opt.step()
    return model.state_dict()


@pytest.mark.slow
@pytest.mark.parametrize(
    "world_size, extra",
    [
        (1, []),
        (2, ["store.device_budget=2KB", "store.host_budget=4KB"]),
        (3, ["store.placement=presample"]),  # edge rows ranked by pre-sampled reads
    ],
    ids=str,
)
def test_minibatch_gine_equals_reference(world_size, extra):
    results = run_world(_minibatch_ranks, world_size, extra, timeout_s=300)
    want = _minibatch_reference(world_size)
    for res in results:
        nodes, edges, total = res["memory"]
        assert total == {k: nodes[k] + edges[k] for k in total}  # both tables in peak_memory
        assert res["evaluated"] > 0  # evaluation reads edge rows through the table too
    if "store.device_budget=2KB" in extra:  # node and edge rows share 2KB device, 4KB host
        split = results[0]["split"]
        assert split.nodes.device + split.edges.device == 2000
        assert split.nodes.host + split.edges.host == 4000
        assert 0 < split.edges.device < 2000
        for res in results:
            nodes, edges, _ = res["memory"]
            assert 0 < edges["device"] <= split.edges.device
            assert nodes["device"] + edges["device"] <= 2000
            assert nodes["host"] + edges["host"] <= 4000
        for src in ("local", "peer", "host", "disk"):
            assert sum(r["trained"][src] for r in results) > 0, src
    else:  # no budget: every edge row on the device tier
        assert all(r["trained"]["disk"] == r["trained"]["host"] == 0 for r in results)
    for res in results:
        for name, value in want.items():
            torch.testing.assert_close(res["params"][name], value, rtol=1e-9, atol=1e-12)
    ref = engine_from_config(_config("reference", ["train.mode=full"]), _graph())
    ref.model.load_state_dict(results[0]["params"])
    for key, value in ref.evaluate().items():
        assert results[0]["eval"][key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


# ---------------------------------------------------------------------------------- fullgraph
def _fullgraph_ranks(comm, partition):
    cfg = _config("fullgraph", ["train.mode=full"])
    engine = engine_from_config(cfg, _graph(), context_of(comm), partition=partition, num_chunks=2)
    try:
        out = {"loss_sum": [], "count": []}
        for epoch in range(EPOCHS):
            (st,) = engine.run_epoch(epoch)
            out["loss_sum"].append(st.loss_sum)
            out["count"].append(st.count)
        out["params"] = {n: p.detach().cpu() for n, p in engine.module.named_parameters()}
        out["eval"] = engine.evaluate()
        out["remote"] = engine.layout.num_remote_edges
        return out
    finally:
        engine.close()


@pytest.mark.slow
@pytest.mark.parametrize("world_size, partition", [(2, "range"), (3, "metis")])
def test_fullgraph_gine_equals_reference(world_size, partition):
    results = run_world(_fullgraph_ranks, world_size, partition, timeout_s=300)
    ref = engine_from_config(_config("reference", ["train.mode=full"]), _graph())
    losses = []
    for epoch in range(EPOCHS):
        st = ref.run_epoch(epoch)[-1]
        losses.append(st.loss_sum / st.count)
    assert sum(r["remote"] for r in results) > 0  # edges (and their features) cross ranks
    for e in range(EPOCHS):
        total = sum(r["loss_sum"][e] for r in results) / sum(r["count"][e] for r in results)
        assert total == pytest.approx(losses[e], rel=1e-9, abs=1e-12)
    for r in results:
        for n, p in ref.model.named_parameters():
            torch.testing.assert_close(r["params"][n], p.detach(), rtol=1e-7, atol=1e-9)
        for key, value in ref.evaluate().items():
            assert r["eval"][key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
