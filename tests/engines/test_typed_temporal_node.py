"""Typed temporal node classification on reference (mode=minibatch) and minibatch.

Ground truth: a hand-written step (the ranks' slots of the step's seeds, each sampled with the
:class:`~fleetgnn.sampling.TypedTemporalSampler` at its node time with ``stream`` = its rank,
the summed loss over the step's global count, one SGD update). The reference engine's steps are
the one-rank ones; the minibatch engine at W = 1, 2, 3 equals the hand-written steps (losses,
gradients, parameters after steps) and every rank's evaluation equals the reference engine's, in
float64. A planted future edge never enters a block either engine's steps or evaluation compute
from, where the same seeds sampled without times (the plain typed sample) hold it.
"""

import numpy as np
import pytest
import torch

from fleetgnn.config import MinibatchEngineConfig, ReferenceEngineConfig, SplitEngineConfig
from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines import build_engine
from fleetgnn.engines.step import StepLoss
from fleetgnn.engines.temporal_link import EVAL_STREAM
from fleetgnn.engines.temporal_node import TYPED_TEMPORAL_NODE_ENGINES
from fleetgnn.errors import ConfigError
from fleetgnn.nn.hetero import TypedAggregator, build_hetero_model
from fleetgnn.sampling import SeedLoader, TypedTemporalSampler
from fleetgnn.tasks import cross_entropy

from .node_time_setup import Recording
from .typed_time_setup import planted_in_subtree, task_of, timed_mag

BATCH = 12
SEED = 7
FANOUTS = {
    "cites": [-1, 2],  # every earlier citation of a seed: where a planted one would show
    "writes": [2, 2],
    "has_topic": [-1, 1],
    "rev_cites": [2, 1],
    "rev_writes": [1, 1],
    "rev_has_topic": [1, 1],
}
#: (epoch, step) of the steps trained: two epochs, so the seeds' order changes
STEPS = ((0, 0), (0, 1), (1, 0))


def _model(graph, conv="rgcn"):
    torch.manual_seed(SEED)
    return build_hetero_model(
        conv, graph, graph.num_classes, hidden_dim=6, num_layers=2, dropout=0.3, seed=SEED
    ).double()


def _cfg(cls, **kw):
    return cls(
        fanouts=(2, 2), batch_size=BATCH, dtype="float64", device="cpu", seed=SEED,
        feature_norm="none", **kw,
    )  # fmt: skip


def _engine(kind, graph, model, ctx=None, strategy="uniform", lr=0.5):
    cfg = _cfg(ReferenceEngineConfig, mode="minibatch") if kind == "reference" else None
    cfg = cfg or _cfg(MinibatchEngineConfig)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    task = task_of(graph, strategy)
    return build_engine(model, graph, cfg, ctx, optimizer=opt, task=task, fanouts=FANOUTS)


def _hand(world_size, strategy="uniform"):
    """Every rank's slot of each step in one process; the model trained on their summed loss."""
    graph, _ = timed_mag()
    task = task_of(graph, strategy)
    model = _model(graph)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    off = graph.schema.type_range("paper")[0]
    sampler = TypedTemporalSampler(graph, FANOUTS, SEED, strategy=strategy)
    train = torch.from_numpy(np.flatnonzero(np.asarray(graph.train_mask)) + off)
    y = torch.from_numpy(np.asarray(graph.y))
    loaders = [
        SeedLoader(train, BATCH, rank=r, world_size=world_size, seed=SEED)
        for r in range(world_size)
    ]
    out = []
    for epoch, step in STEPS:
        every = sum(int(ld.batch(epoch, step).numel()) for ld in loaders)
        total, count = 0.0, 0
        opt.zero_grad()
        for r, ld in enumerate(loaders):
            seeds = ld.batch(epoch, step)
            blocks = sampler.sample_from_nodes(
                seeds, seed_time=task.seed_times(seeds), epoch=epoch, step=step, stream=r
            ).blocks
            aggs = [TypedAggregator(b, dtype=torch.float64) for b in blocks]
            x = {
                t: torch.from_numpy(np.asarray(a)[(blocks[0].src_ids[t] - off_t).numpy()]).double()
                for t, a in graph.x.items()
                for off_t in [graph.schema.type_range(t)[0]]
            }
            h = model(aggs, x, step=epoch * ld.num_batches + step)
            part = StepLoss.of(cross_entropy, h, y[seeds - off], every)
            part.loss.backward()
            total += float(part.total.detach())
            count += part.count
        out.append((total, count, {n: p.grad.clone() for n, p in model.named_parameters()}))
        opt.step()
    return out, model, graph


def test_engines_that_train_it():
    assert TYPED_TEMPORAL_NODE_ENGINES == (("reference", "minibatch"), ("minibatch", "minibatch"))


def test_reference_engine_steps_are_the_one_rank_steps():
    want, _, graph = _hand(1)
    with _engine("reference", graph, _model(graph)) as eng:
        assert isinstance(eng.sampler, TypedTemporalSampler)
        for (epoch, step), (loss, count, grads) in zip(STEPS, want, strict=True):
            stats = eng.train_step(epoch, step)
            assert stats.count == count
            assert stats.loss_sum == pytest.approx(loss, rel=1e-12)
            for n, p in eng.module.named_parameters():
                torch.testing.assert_close(p.grad, grads[n], rtol=1e-10, atol=1e-13)


def _rank(comm, eval_chunk, strategy):
    graph, _ = timed_mag()
    engine = _engine("minibatch", graph, _model(graph), context_of(comm), strategy)
    try:
        assert isinstance(engine.sampler, TypedTemporalSampler)
        if eval_chunk is not None:
            engine.eval_chunk = eval_chunk
        out = []
        for epoch, step in STEPS:
            stats = engine.train_step(epoch, step)
            grads = {n: p.grad.detach().clone() for n, p in engine.module.named_parameters()}
            out.append((stats.loss_sum, stats.count, grads))
        params = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
        return {"steps": out, "params": params, "eval": engine.evaluate()}
    finally:
        engine.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "world_size, eval_chunk, strategy",
    [(1, None, "uniform"), (2, None, "uniform"), (3, 5, "uniform"), (2, 7, "last")],
    ids=["1", "2", "3-chunked", "2-last-chunked"],
)
def test_minibatch_engine_equals_reference(world_size, eval_chunk, strategy):
    results = run_world(_rank, world_size, eval_chunk, strategy, timeout_s=300)
    want, model, graph = _hand(world_size, strategy)
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
    with _engine("reference", graph, model, strategy=strategy) as ref:
        want_ev = ref.evaluate()
    assert {"train_acc", "val_acc", "test_acc", "val_loss"} == want_ev.keys()
    for res in results:
        for k, v in want_ev.items():
            assert res["eval"][k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


def test_evaluation_is_each_node_at_its_time_whatever_the_chunks():
    """The reference's evaluation equals a hand count over one sample of every split node."""
    graph, _ = timed_mag()
    model = _model(graph)
    with _engine("reference", graph, model) as eng:
        eng.eval_chunk = 9
        got = eng.evaluate()
        assert model.training  # evaluation restores training mode
    task, off = task_of(graph), graph.schema.type_range("paper")[0]
    masks = {s: np.asarray(getattr(graph, f"{s}_mask")) for s in ("train", "val", "test")}
    nodes = np.flatnonzero(masks["train"] | masks["val"] | masks["test"])
    seeds = torch.from_numpy(nodes + off)
    sample = TypedTemporalSampler(graph, FANOUTS, SEED).sample_from_nodes(
        seeds, seed_time=task.seed_times(seeds), epoch=0, step=0, stream=EVAL_STREAM
    )
    model.eval()
    with torch.no_grad():
        x = {t: torch.from_numpy(np.asarray(a)[(sample.blocks[0].src_ids[t] - off_t).numpy()])
             for t, a in graph.x.items() for off_t in [graph.schema.type_range(t)[0]]}  # fmt: skip
        aggs = [TypedAggregator(b, dtype=torch.float64) for b in sample.blocks]
        pred = model(aggs, {t: v.double() for t, v in x.items()}).argmax(1).numpy()
    y = np.asarray(graph.y)[nodes]
    for s, m in masks.items():
        assert got[f"{s}_acc"] == pytest.approx(float((pred == y)[m[nodes]].mean()), rel=1e-12)


def _planted_run(comm, kind):
    graph, planted = timed_mag(plant=True)
    ctx = context_of(comm) if comm is not None else None
    engine = _engine(kind, graph, _model(graph), ctx)
    try:
        rec = engine.sampler = Recording(engine.sampler)
        engine.run_epoch(0)
        n_train = len(rec.samples)
        engine.evaluate()
        b_global = graph.schema.type_range("paper")[0] + planted[0]
        task = task_of(graph)
        plain = TypedTemporalSampler(graph, FANOUTS, SEED)  # every edge past: the plain sample
        found = seeded = in_plain = 0
        at_time = True
        for sample in rec.samples:
            seeds = sample.blocks[-1].dst_ids("paper")
            at_time &= torch.equal(sample.seed_time, task.seed_times(seeds))
            found += planted_in_subtree(sample, graph, planted)
            if bool((seeds == b_global).any()):
                seeded += 1
                untimed = plain.sample_from_nodes(
                    seeds, seed_time=torch.full_like(seeds, 1 << 40), epoch=0, step=0
                )
                in_plain += planted_in_subtree(untimed, graph, planted)
        counts = {"train": n_train, "all": len(rec.samples), "found": found, "seeded": seeded}
        steps = engine.steps_per_epoch()
        return {**counts, "in_plain": in_plain, "at_time": at_time, "steps": steps}
    finally:
        engine.close()


@pytest.mark.slow
@pytest.mark.parametrize("kind, world_size", [("reference", 1), ("minibatch", 2)])
def test_no_block_holds_a_planted_future_edge(kind, world_size):
    """Steps and evaluation; the planted paper is a seed once in each, and the same seeds sampled
    without times hold both planted citations (so the plain typed sampler fails this test)."""
    if kind == "reference":
        results = [_planted_run(None, kind)]
    else:
        results = run_world(_planted_run, world_size, kind, timeout_s=300)
    assert sum(r["found"] for r in results) == 0
    for res in results:
        assert res["train"] == res["steps"] and res["all"] > res["train"] and res["at_time"]
    assert sum(r["seeded"] for r in results) == 2  # trained once, evaluated once
    # both planted edges at the first hop (cites fanout -1) each time; more where it recurs deeper
    assert sum(r["in_plain"] for r in results) >= 2 * 2


@pytest.mark.parametrize(
    "cfg",
    [
        _cfg(ReferenceEngineConfig, mode="full"),
        _cfg(SplitEngineConfig, partition="random"),
    ],
    ids=["reference-full", "split"],
)
def test_other_engines_refuse_it_in_one_line(cfg):
    graph, _ = timed_mag()
    with pytest.raises(ConfigError) as e:
        build_engine(_model(graph), graph, cfg, task=task_of(graph))
    msg = str(e.value)
    assert "\n" not in msg and "temporal node classification on typed graphs" in msg
    assert "reference (mode=minibatch), minibatch (mode=minibatch)" in msg
    assert "train.temporal=off" in msg
