"""Temporal link prediction on the minibatch engine: equal to the reference in float64, W = 1..3.

The reference side is one process that deals every rank's timed edge batch (its positives'
share of the step, sampled at their times with the rank's stream) on the reference engine's
pieces and trains one model on their summed loss; the W-rank engine must give the same losses,
gradients and parameters, and every rank the reference engine's evaluation metrics.
"""

import numpy as np
import pytest
import torch

from fleetgnn.config import ReferenceEngineConfig
from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines import build_engine
from fleetgnn.engines.link import TEMPORAL_ENGINES, EdgeBatches, edge_batch_loss
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.nn import LocalAggregator
from fleetgnn.sampling import GraphTopology, TemporalSampler
from fleetgnn.tasks import TemporalLinkPrediction
from fleetgnn.train import engine_from_config
from fleetgnn.train.setup import model_from_config, task_from_config

from .link_setup import link_config

BATCH = 40
FANOUTS = (4, 3)
#: (epoch, step) of the steps trained: two epochs, so the negatives' epoch key changes
STEPS = ((0, 0), (0, 1), (1, 0))


def _graph():
    """A small temporal-like graph (edge times, in-edges sorted by time)."""
    return generate_graph(spec_for("temporal-like", 0.002), seed=5)


def _config(extra=()):
    sets = [
        f"train.batch_size={BATCH}",
        f"train.fanouts=[{FANOUTS[0]},{FANOUTS[1]}]",
        "train.negatives=2",
        "train.eval_edges=61",  # W = 2: shares of 30 and 31 queries, 3 and 4 chunks of 10
        "train.device=cpu",
    ]
    return link_config("train.engine=minibatch", *sets, "model.name=sage", *extra)


def _rank(comm, extra, eval_chunk):
    engine = engine_from_config(_config(extra), _graph(), context_of(comm))
    try:
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
    """Every rank's timed edge batch in one process; the model trained on their summed loss."""
    cfg = _config(extra)
    task = task_from_config(cfg, _graph())
    assert isinstance(task, TemporalLinkPrediction)
    graph = task.split.train_graph
    model = model_from_config(cfg, graph).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x = torch.from_numpy(np.asarray(graph.x)).double()
    sampler = TemporalSampler(GraphTopology(graph), list(FANOUTS), seed=7, strategy=task.strategy)
    ranks = [
        EdgeBatches(task, sampler, BATCH, rank=r, world_size=world_size, seed=7)
        for r in range(world_size)
    ]
    out = []
    for epoch, step in STEPS:
        total, count = 0.0, 0
        opt.zero_grad()
        for r, edges in enumerate(ranks):
            batch = edges.batch(epoch, step, stream=r)
            aggs = [LocalAggregator(b, dtype=torch.float64) for b in batch.blocks]
            h = model(aggs, x[batch.blocks[0].src_ids], step=epoch * edges.num_batches + step)
            part = edge_batch_loss(model, task, h, batch, task.loss_fn)
            part.loss.backward()
            total += float(part.total.detach())
            count += part.count
        out.append((total, count, {n: p.grad.clone() for n, p in model.named_parameters()}))
        opt.step()
    return out, model, task


def _reference_metrics(model, task):
    """The reference engine's evaluation of ``model`` (its temporal sampler, seed and fanouts)."""
    graph = task.split.train_graph
    cfg = ReferenceEngineConfig(
        mode="minibatch",
        dtype="float64",
        device="cpu",
        fanouts=FANOUTS,
        batch_size=BATCH,
        seed=7,
        feature_norm="none",
    )
    return build_engine(model, graph, cfg, task=task).evaluate()


def test_minibatch_trains_temporal_link_prediction():
    assert ("minibatch", "minibatch") in TEMPORAL_ENGINES


def test_reference_engine_steps_are_the_one_rank_batches():
    """The ground truth below is the reference engine's own training at W = 1."""
    want, _, task = _reference(1)
    graph = task.split.train_graph
    model = model_from_config(_config(), graph)
    cfg = ReferenceEngineConfig(
        mode="minibatch",
        dtype="float64",
        device="cpu",
        fanouts=FANOUTS,
        batch_size=BATCH,
        seed=7,
        feature_norm="none",
    )
    eng = build_engine(
        model, graph, cfg, optimizer=torch.optim.SGD(model.parameters(), lr=0.5), task=task
    )
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
        (3, (), None),
        (2, ("store.gather=two_sided", "store.sampling=device"), 10),
        (2, ("train.temporal_strategy=last",), None),  # the most recent in-edges
    ],
    ids=["1", "2", "3", "2-two-sided-device-sampled-chunked", "2-last"],
)
def test_minibatch_engine_temporal_link_equals_reference(world_size, extra, eval_chunk):
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
    want_ev = _reference_metrics(model, task)
    assert {"val_auc", "test_auc", "val_mrr", "test_mrr"} <= want_ev.keys()
    for res in results:
        assert res["eval"].keys() == want_ev.keys()
        for k, v in want_ev.items():
            assert res["eval"][k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
