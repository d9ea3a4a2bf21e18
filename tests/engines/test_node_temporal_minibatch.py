"""Temporal node classification on the minibatch engine: equal to the reference in float64.

The reference side is one process that deals every rank's seeds (its slots of the step,
sampled at their node times with the rank's stream) on the reference engine's pieces and trains
one model on their summed loss; the W-rank engine must give the same losses, gradients and
parameters, every rank the reference engine's evaluation metrics, and no block of its steps or
its evaluation may hold an edge of its seed's time or later.
"""

import numpy as np
import pytest
import torch

from fleetgnn.config import ReferenceEngineConfig
from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines import build_engine
from fleetgnn.engines.link import TEMPORAL_NODE_ENGINES
from fleetgnn.engines.step import StepLoss
from fleetgnn.engines.temporal_node import node_blocks
from fleetgnn.nn import LocalAggregator
from fleetgnn.sampling import GraphTopology, SeedLoader, TemporalSampler
from fleetgnn.tasks import TemporalNodeClassification, cross_entropy
from fleetgnn.train import engine_from_config
from fleetgnn.train.setup import model_from_config, task_from_config

from .node_time_setup import PairTimes, Recording, future_edges, node_time_config, planted_graph

BATCH = 64
FANOUTS = (4, 3)
#: (epoch, step) of the steps trained: two epochs, so the seeds' order changes
STEPS = ((0, 0), (0, 1), (1, 0))


def _graph():
    return planted_graph()[0]


def _config(extra=()):
    return node_time_config("train.engine=minibatch", *extra)


def _rank(comm, extra, eval_chunk):
    engine = engine_from_config(_config(extra), _graph(), context_of(comm))
    try:
        assert isinstance(engine.sampler, TemporalSampler)
        if eval_chunk is not None:
            engine.eval_chunk = eval_chunk
        out = []
        for epoch, step in STEPS:
            stats = engine.train_step(epoch, step, engine.prepare(epoch, step), 0.0)
            grads = {n: p.grad.detach().clone() for n, p in engine.module.named_parameters()}
            out.append((stats.loss_sum, stats.count, grads))
        params = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
        return {"steps": out, "params": params, "eval": engine.evaluate()}
    finally:
        engine.close()


def _reference(world_size, extra=()):
    """Every rank's seeds in one process; the model trained on their summed loss."""
    cfg = _config(extra)
    graph = _graph()
    task = task_from_config(cfg, graph)
    assert isinstance(task, TemporalNodeClassification)
    model = model_from_config(cfg, graph).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x = torch.from_numpy(np.asarray(graph.x)).double()
    y = torch.from_numpy(np.asarray(graph.y))
    topo = GraphTopology(graph)
    sampler = TemporalSampler(topo, list(FANOUTS), seed=7, strategy=task.strategy)
    train = torch.from_numpy(np.flatnonzero(np.asarray(graph.train_mask)))
    loaders = [
        SeedLoader(train, BATCH, rank=r, world_size=world_size, seed=7) for r in range(world_size)
    ]
    out = []
    for epoch, step in STEPS:
        total, count = 0.0, 0
        every = sum(int(ld.batch(epoch, step).numel()) for ld in loaders)
        opt.zero_grad()
        for r, ld in enumerate(loaders):
            seeds = ld.batch(epoch, step)
            blocks = node_blocks(sampler, task, seeds, epoch, step, stream=r)
            aggs = [LocalAggregator(b, dtype=torch.float64) for b in blocks]
            h = model(aggs, x[blocks[0].src_ids], step=epoch * ld.num_batches + step)
            part = StepLoss.of(cross_entropy, h, y[seeds], every)
            part.loss.backward()
            total += float(part.total.detach())
            count += part.count
        out.append((total, count, {n: p.grad.clone() for n, p in model.named_parameters()}))
        opt.step()
    return out, model, task


def _reference_engine(model, task, optimizer=None):
    cfg = ReferenceEngineConfig(
        mode="minibatch",
        dtype="float64",
        device="cpu",
        fanouts=FANOUTS,
        batch_size=BATCH,
        seed=7,
        feature_norm="none",
    )
    return build_engine(model, _graph(), cfg, optimizer=optimizer, task=task)


def test_minibatch_trains_temporal_node_classification():
    assert ("minibatch", "minibatch") in TEMPORAL_NODE_ENGINES
    assert ("reference", "minibatch") in TEMPORAL_NODE_ENGINES


def test_reference_engine_steps_are_the_one_rank_batches():
    """The ground truth below is the reference engine's own training at W = 1."""
    want, _, task = _reference(1)
    model = model_from_config(_config(), _graph())
    eng = _reference_engine(model, task, torch.optim.SGD(model.parameters(), lr=0.5))
    for (epoch, step), (loss, count, grads) in zip(STEPS, want, strict=True):
        stats = eng.train_step(epoch, step)
        assert stats.count == count
        assert stats.loss_sum == pytest.approx(loss, rel=1e-12)
        for n, p in eng.module.named_parameters():
            torch.testing.assert_close(p.grad, grads[n], rtol=1e-10, atol=1e-13)


@pytest.mark.slow
@pytest.mark.parametrize(
    "world_size, extra, eval_chunk",
    [
        (1, (), None),
        (2, (), None),
        (3, (), 333),  # shares of 666, 667, 667 nodes: rank 0's third chunk is empty
        (2, ("store.gather=two_sided", "store.sampling=device"), 300),
        (2, ("train.temporal_strategy=last",), None),  # the most recent in-edges
    ],
    ids=["1", "2", "3-chunked", "2-two-sided-device-sampled-chunked", "2-last"],
)
def test_minibatch_engine_temporal_node_equals_reference(world_size, extra, eval_chunk):
    results = run_world(_rank, world_size, list(extra), eval_chunk, timeout_s=300)
    want, model, task = _reference(world_size, extra)
    for i, (loss, count, grads) in enumerate(want):
        assert sum(r["steps"][i][1] for r in results) == count
        assert sum(r["steps"][i][0] for r in results) == pytest.approx(loss, rel=1e-10)
        for res in results:  # the synchronised gradient of the step, on every rank
            for n, g in grads.items():
                torch.testing.assert_close(res["steps"][i][2][n], g, rtol=1e-9, atol=1e-12)
    for res in results:  # the same parameters after the steps
        for n, p in model.named_parameters():
            torch.testing.assert_close(res["params"][n], p.detach(), rtol=1e-9, atol=1e-12)
    # evaluation: every rank reports the reference engine's metrics for the trained model
    want_ev = _reference_engine(model, task).evaluate()
    assert {"train_acc", "val_acc", "test_acc", "val_loss"} == want_ev.keys()
    for res in results:
        assert res["eval"].keys() == want_ev.keys()
        for k, v in want_ev.items():
            assert res["eval"][k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


def _planted_rank(comm):
    graph, plant = planted_graph()
    cfg = _config(("train.fanouts=[-1,3]",))
    engine = engine_from_config(cfg, graph, context_of(comm))
    try:
        rec = engine.sampler = Recording(engine.sampler)
        engine.run_epoch(0)
        n_train = len(rec.samples)
        engine.evaluate()
        pairs = PairTimes(graph)
        node_time = torch.from_numpy(np.asarray(graph.node_time))
        found, at_time, seeded = (0, 0), True, 0
        for sample in rec.samples:
            bad, hit = future_edges(sample, pairs, plant, graph.node_time)
            found = (found[0] + bad, found[1] + hit)
            seeds = sample.blocks[-1].dst_ids.cpu()
            at_time &= torch.equal(sample.seed_time.cpu(), node_time[seeds])
            seeded += int((seeds == plant.dst[0]).sum())
        return {"train": n_train, "all": len(rec.samples), "found": found, "at_time": at_time,
                "seeded": seeded, "steps": engine.steps_per_epoch()}  # fmt: skip
    finally:
        engine.close()


@pytest.mark.slow
def test_no_block_of_the_minibatch_engine_holds_an_edge_of_its_seeds_time():
    """Two ranks, every earlier in-edge of a seed taken at the first hop (where the plain
    sampler puts the planted edges in their seed's block: test_node_temporal shows it)."""
    results = run_world(_planted_rank, 2, timeout_s=300)
    for res in results:
        assert res["train"] == res["steps"] and res["all"] > res["train"]
        assert res["found"] == (0, 0) and res["at_time"]
    assert sum(r["seeded"] for r in results) == 2  # the planted node trained once, evaluated once
