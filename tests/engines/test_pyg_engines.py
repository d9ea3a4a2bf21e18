"""PyG models (``fleetgnn.nn.from_pyg``) on the distributed engines against the reference.

float64, gloo worlds of 2: ``fullgraph`` (halo rows in the hop's ``x_src``), ``split`` (remote
rows of a sampled block) and ``minibatch`` (each rank's own blocks) take the reference's losses,
gradients and parameters, with keyed dropout between the layers.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pyg_nn = pytest.importorskip("torch_geometric.nn")

import fleetgnn  # noqa: E402
from fleetgnn.distributed.testing import context_of, run_world  # noqa: E402
from fleetgnn.graph.synthetic import generate_graph, spec_for  # noqa: E402
from fleetgnn.nn import LocalAggregator, from_pyg  # noqa: E402
from fleetgnn.sampling import GraphTopology, NeighborSampler, SeedLoader  # noqa: E402

EPOCHS, STEPS, SEED, LR = 2, 3, 7, 0.5
FULL, SPLIT = ("graphsage", "gat", "gcn"), ("graphsage", "gcn")
SAMPLED = {"fanouts": (4, 3), "batch_size": 16, "dtype": "float64", "device": "cpu", "seed": SEED}


def _graph():
    return generate_graph(spec_for("tiny", 0.3), seed=4)


def _model(name, graph):
    torch.manual_seed(0)  # the same initial model on every rank and in the reference
    d, c = graph.num_features, graph.num_classes
    if name == "gcn":  # halo rows arrive scaled by their owners' degrees
        return pyg_nn.GCN(d, 8, 2, c, dropout=0.3).double()
    if name == "gat":  # PyG's GAT passes its dropout to the attention too, torch's masks there
        return pyg_nn.GAT(d, 8, 2, c, heads=2).double()
    return pyg_nn.GraphSAGE(d, 8, 2, c, dropout=0.3).double()


def _engine(name, graph, cfg, ctx=None):
    model = _model(name, graph)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    return fleetgnn.build_engine(from_pyg(model, seed=SEED), graph, cfg, ctx, optimizer=opt)


def _grads(engine):
    return {n: p.grad.detach().cpu().clone() for n, p in engine.module.named_parameters()}


def _params(engine):
    return {n: p.detach().cpu().clone() for n, p in engine.module.named_parameters()}


def _rank(comm):
    torch.set_num_threads(1)
    graph, ctx, out = _graph(), context_of(comm), {}
    for name in FULL:
        cfg = fleetgnn.FullGraphEngineConfig(
            dtype="float64", device="cpu", seed=SEED, num_chunks=2, depth=1, tune=False
        )
        with _engine(name, graph, cfg, ctx) as eng:
            res = {"loss_sum": [], "count": []}
            for epoch in range(EPOCHS):
                (st,) = eng.run_epoch(epoch)
                res["loss_sum"].append(st.loss_sum)
                res["count"].append(st.count)
                if epoch == 0:
                    res["grads"] = _grads(eng)
            res["params"], res["eval"] = _params(eng), eng.evaluate()
            res["halo"] = eng.layout.num_halo
        out[("fullgraph", name)] = res
    for name in SPLIT:
        with _engine(name, graph, fleetgnn.SplitEngineConfig(**SAMPLED), ctx) as eng:
            res = {"loss_sum": [], "count": []}
            for step in range(STEPS):
                st, _ = eng.train_step(0, step, eng.prepare(0, step))
                res["loss_sum"].append(st.loss_sum)
                res["count"].append(st.count)
                if step == 0:
                    res["grads"] = _grads(eng)
            res["params"] = _params(eng)
        out[("split", name)] = res
    cfg = fleetgnn.MinibatchEngineConfig(**SAMPLED)
    with _engine("graphsage", graph, cfg, ctx) as eng:
        for step in range(STEPS):
            eng.train_step(0, step, eng.prepare(0, step), 0.0)
        out[("minibatch", "graphsage")] = {"params": _params(eng), "eval": eng.evaluate()}
    return out


def _reference_full(name):
    cfg = fleetgnn.ReferenceEngineConfig(mode="full", dtype="float64", device="cpu", seed=SEED)
    with _engine(name, _graph(), cfg) as ref:
        res = {"loss": []}
        for epoch in range(EPOCHS):
            (st,) = ref.run_epoch(epoch)
            res["loss"].append(st.loss_sum / st.count)
            if epoch == 0:
                res["grads"] = _grads(ref)
        res["params"], res["eval"] = _params(ref), ref.evaluate()
    return res


def _reference_sampled(name):
    cfg = fleetgnn.ReferenceEngineConfig(mode="minibatch", **SAMPLED)
    with _engine(name, _graph(), cfg) as ref:
        res = {"loss_sum": [], "count": []}
        for step in range(STEPS):
            st = ref.train_step(0, step)
            res["loss_sum"].append(st.loss_sum)
            res["count"].append(st.count)
            if step == 0:
                res["grads"] = _grads(ref)
        res["params"] = _params(ref)
    return res


def _reference_minibatch(world_size):
    """One process: every rank's blocks of a step, summed into one loss (the minibatch engine's
    data-parallel step with the all-reduced gradient)."""
    g = _graph()
    x, y = torch.from_numpy(np.array(g.x)).double(), torch.from_numpy(np.array(g.y))
    model = from_pyg(_model("graphsage", g), seed=SEED)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    sampler = NeighborSampler(GraphTopology(g), list(SAMPLED["fanouts"]), seed=SEED)
    train = torch.from_numpy(np.flatnonzero(g.train_mask))
    loaders = [
        SeedLoader(train, SAMPLED["batch_size"], rank=r, world_size=world_size, seed=SEED)
        for r in range(world_size)
    ]
    for step in range(STEPS):
        total = sum(int(ld.batch(0, step).numel()) for ld in loaders)
        loss = 0.0
        for r, ld in enumerate(loaders):
            seeds = ld.batch(0, step)
            blocks = sampler.sample_from_nodes(seeds, epoch=0, step=step, stream=r).blocks
            aggs = [LocalAggregator(b, dtype=torch.float64) for b in blocks]
            out = model(aggs, x[blocks[0].src_ids], step=step)
            loss = loss + F.cross_entropy(out, y[seeds], reduction="sum")
        opt.zero_grad()
        (loss / total).backward()
        opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _close(got, want):
    for n, v in want.items():
        torch.testing.assert_close(got[n], v, rtol=1e-9, atol=1e-11, msg=n)


@pytest.mark.slow
def test_pyg_models_on_two_ranks_equal_the_reference():
    torch.set_num_threads(1)
    results = run_world(_rank, 2, timeout_s=300)
    for name in FULL:
        ref = _reference_full(name)
        ranks = [r[("fullgraph", name)] for r in results]
        assert sum(r["halo"] for r in ranks) > 0  # remote rows entered the PyG layers
        for e in range(EPOCHS):
            loss = sum(r["loss_sum"][e] for r in ranks) / sum(r["count"][e] for r in ranks)
            assert loss == pytest.approx(ref["loss"][e], rel=1e-10), (name, e)
        for r in ranks:
            _close(r["grads"], ref["grads"])
            _close(r["params"], ref["params"])
            assert r["eval"] == pytest.approx(ref["eval"], rel=1e-9)
    for name in SPLIT:
        ref = _reference_sampled(name)
        ranks = [r[("split", name)] for r in results]
        assert [sum(c) for c in zip(*(r["count"] for r in ranks))] == ref["count"]
        loss = [sum(v) for v in zip(*(r["loss_sum"] for r in ranks))]
        np.testing.assert_allclose(loss, ref["loss_sum"], rtol=1e-10, err_msg=name)
        for r in ranks:
            _close(r["grads"], ref["grads"])
            _close(r["params"], ref["params"])
    want = _reference_minibatch(2)
    for r in results:
        _close(r[("minibatch", "graphsage")]["params"], want)
    assert (
        results[0][("minibatch", "graphsage")]["eval"]
        == results[1][("minibatch", "graphsage")]["eval"]
    )
