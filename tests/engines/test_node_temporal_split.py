"""Temporal node classification on the split engine: equal to the reference in float64, W = 1..3.

Every rank draws the reference engine's step (one global batch of seeds, each sampled at its
node time), computes the rows of the ``(seed, node)`` pairs whose node it owns, and takes the
loss of the seeds it owns; the losses, gradients and parameters after the steps, and the
evaluation metrics, must be the reference engine's (mode minibatch). No block a rank computes
from may hold an edge of its seed's time or later.
"""

import numpy as np
import pytest
import torch

from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines.link import TEMPORAL_NODE_ENGINES
from fleetgnn.engines.split import SplitEngine
from fleetgnn.partition import PartitionBook
from fleetgnn.sampling import TemporalSampler
from fleetgnn.tasks import TemporalNodeClassification
from fleetgnn.train import engine_from_config, model_from_config, optimizer_from_config
from fleetgnn.train.setup import task_from_config

from .node_time_setup import PairTimes, Recording, future_edges, node_time_config, planted_graph

#: (epoch, step) of the steps trained: two epochs, so the seeds' order changes
STEPS = ((0, 0), (0, 1), (1, 0))


def _graph():
    return planted_graph()[0]


def _config(model, extra=()):
    sets = ["train.engine=split", f"model.name={model}"]
    return node_time_config(*sets, *(["model.heads=2"] if model == "gat" else []), *extra)


def _book(kind, graph, world_size):
    if kind == "one_empty":  # ranks 0..W-2 own alternate nodes, the last rank none
        part = np.arange(graph.num_nodes) % max(world_size - 1, 1)
        return PartitionBook.from_part_of(part, world_size, "degenerate")
    return None  # the configured partition (METIS)


def _rank(comm, model_name, kind, eval_chunk, extra):
    torch.set_num_threads(1)
    cfg, graph = _config(model_name, extra), _graph()
    task = task_from_config(cfg, graph)
    assert isinstance(task, TemporalNodeClassification)
    model = model_from_config(cfg, graph)
    with SplitEngine(
        model,
        graph,
        context_of(comm),
        cfg.engine_config(),
        optimizer=optimizer_from_config(model, cfg.optim),
        book=_book(kind, graph, comm.world_size),
        task=task,
    ) as engine:
        assert isinstance(engine.sampler, TemporalSampler)
        if eval_chunk is not None:
            engine.eval_chunk = eval_chunk
        out, dp = [], []
        for epoch, step in STEPS:
            batch = engine.prepare(epoch, step)
            dp.append(batch.counters.get("dp_edges"))  # split.report_dp: rank 0's count
            stats, _ = engine.train_step(epoch, step, batch)
            grads = {n: p.grad.detach().clone() for n, p in engine.module.named_parameters()}
            out.append((stats.loss_sum, stats.count, grads))
        params = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
        return {"steps": out, "params": params, "eval": engine.evaluate(), "dp": dp}


def _reference(model_name, extra):
    """The reference engine (mode minibatch) on the same steps, then its evaluation."""
    torch.set_num_threads(1)
    ref = engine_from_config(_config(model_name, extra), _graph(), engine="reference")
    assert ref.mode == "minibatch" and isinstance(ref.task, TemporalNodeClassification)
    out = []
    for epoch, step in STEPS:
        stats = ref.train_step(epoch, step)
        grads = {n: p.grad.clone() for n, p in ref.model.named_parameters()}
        out.append((stats.loss_sum, stats.count, grads))
    params = {n: p.detach().clone() for n, p in ref.model.named_parameters()}
    return {"steps": out, "params": params, "eval": ref.evaluate()}


def test_split_trains_temporal_node_classification():
    assert ("split", "minibatch") in TEMPORAL_NODE_ENGINES


@pytest.mark.slow
@pytest.mark.parametrize(
    "world_size, model_name, kind, eval_chunk, extra",
    [
        (1, "sage", "metis", None, ("train.temporal_strategy=last",)),  # most recent in-edges
        # evaluation in chunks of 300 nodes, input rows read with collective gathers; the
        # data-parallel counterfactual sampled at the seeds' times
        (2, "sage", "metis", 300, ("store.gather=two_sided", "split.report_dp=true")),
        # shares of 666, 667, 667 nodes: rank 0's third chunk is empty; the last rank owns none
        (3, "sage", "one_empty", 333, ()),
        (2, "gat", "metis", None, ()),  # remote source rows (the halo), attention dropout
    ],
    ids=["1-last", "2-chunked-two-sided", "3-one-empty-chunked", "2-gat"],
)
def test_split_engine_temporal_node_equals_reference(
    world_size, model_name, kind, eval_chunk, extra
):
    results = run_world(_rank, world_size, model_name, kind, eval_chunk, list(extra), timeout_s=300)
    want = _reference(model_name, extra)
    if "split.report_dp=true" in extra:
        assert all(e > 0 for e in results[0]["dp"]) and results[1]["dp"] == [None] * len(STEPS)
    for i, (loss, count, grads) in enumerate(want["steps"]):
        counts = [r["steps"][i][1] for r in results]
        assert sum(counts) == count
        if world_size > 1:  # the seeds are shared out, not all trained on one rank
            assert max(counts) < count and (kind != "one_empty" or counts[-1] == 0)
        assert sum(r["steps"][i][0] for r in results) == pytest.approx(loss, rel=1e-10)
        for res in results:  # the synchronised gradient of the step, on every rank
            for n, g in grads.items():
                torch.testing.assert_close(res["steps"][i][2][n], g, rtol=1e-9, atol=1e-12)
    for res in results:  # the same parameters after the steps
        for n, p in want["params"].items():
            torch.testing.assert_close(res["params"][n], p, rtol=1e-9, atol=1e-12)
    # evaluation: every rank reports the reference engine's metrics for the trained model
    assert {"train_acc", "val_acc", "test_acc", "val_loss"} == want["eval"].keys()
    for res in results:
        assert res["eval"].keys() == want["eval"].keys()
        for k, v in want["eval"].items():
            assert res["eval"][k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


# ---------------------------------------------------------------------------------- no future
class _Blind:
    """The engine's temporal sampler asked for every seed at a time after every edge: each
    subtree is the plain sampler's (every in-edge, past or future)."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def sample_from_nodes(self, seeds, *, seed_time, **kwargs):
        return self.inner.sample_from_nodes(
            seeds, seed_time=torch.full_like(seed_time, 10**9), **kwargs
        )


def _rank_edges(sample, owner, rank, pairs, node_time):
    """``(edges of a time >= their subtree's, edges whose destination this rank owns, edges)``
    over the edges ``rank`` computes from in every block of ``sample``: the in-edges of the
    ``(seed, node)`` rows it owns and the out-edges of its rows (the partial sums it sends)."""
    bad = owned = total = 0
    seeds = sample.blocks[-1].dst_ids.numpy()
    for layer, block in enumerate(sample.blocks):
        own = owner[block.src_ids.numpy()]
        dpos = np.repeat(np.arange(block.num_dst), np.diff(block.indptr.numpy()))
        spos = block.indices.numpy().astype(np.int64)
        mine = (own[dpos] == rank) | (own[spos] == rank)
        ids = block.src_ids.numpy().astype(np.int64)
        t = np.asarray(node_time)[seeds[sample.seed_index[layer].numpy()[dpos[mine]]]]
        bad += int((pairs.earliest(ids[spos[mine]], ids[dpos[mine]]) >= t).sum())
        owned += int(np.count_nonzero(own[dpos] == rank))
        total += int(block.num_edges)
    return bad, owned, total


def _planted_rank(comm, blind):
    torch.set_num_threads(1)
    graph, plant = planted_graph()
    cfg = _config("sage", ("train.fanouts=[-1,3]",))
    with engine_from_config(cfg, graph, context_of(comm)) as engine:
        assert isinstance(engine, SplitEngine) and engine.world_size == comm.world_size
        rec = engine.sampler = Recording(_Blind(engine.sampler) if blind else engine.sampler)
        pairs, b = PairTimes(graph), plant.dst[0]
        steps, seeded, found = [], 0, [0, 0]
        for step in range(engine.steps_per_epoch()):
            batch = engine.prepare(0, step)
            engine.train_step(0, step, batch)  # the blocks below are the ones it trained on
            (sample,) = rec.samples[step:]
            assert all(sp.block is blk for sp, blk in zip(batch.splits, sample.blocks, strict=True))
            steps.append(_rank_edges(sample, engine.owner, comm.rank, pairs, graph.node_time))
            found[1] += future_edges(sample, pairs, plant, graph.node_time)[1]
            seeded += int((sample.blocks[-1].dst_ids == b).sum())
        n_train = len(rec.samples)
        engine.evaluate()  # this rank's share of the split nodes: it computes their every edge
        for sample in rec.samples[n_train:]:
            found[0] += sum(future_edges(sample, pairs, plant, graph.node_time))
            seeded += int((sample.blocks[-1].dst_ids == b).sum())
        return {"steps": steps, "eval_found": found[0], "planted_hits": found[1],
                "seeded": seeded, "evals": len(rec.samples) - n_train}  # fmt: skip


@pytest.mark.slow
def test_no_block_a_split_rank_computes_from_holds_an_edge_of_its_seeds_time():
    """W = 2 on the planted graph, every earlier in-edge of a seed taken at the first hop: no
    rank's share of any training block, nor any of its evaluation blocks, holds an edge at or
    after its seed's node time; the same check finds such edges (the planted ones among them)
    when the sampler ignores the times, as the plain sampler does."""
    for blind in (False, True):
        ranks = run_world(_planted_rank, 2, blind, timeout_s=300)
        found = sum(bad for r in ranks for bad, _, _ in r["steps"])
        for i in range(len(ranks[0]["steps"])):  # every edge is computed by its dst's owner
            assert sum(r["steps"][i][1] for r in ranks) == ranks[0]["steps"][i][2] > 0
        # every rank trains on the whole step: b trained once (on each rank's record), then
        # evaluated once, by one rank
        assert [r["seeded"] for r in ranks] in ([2, 1], [1, 2])
        assert all(r["evals"] > 0 for r in ranks)
        if blind:
            assert found > 0 and all(r["planted_hits"] > 0 for r in ranks)
            assert sum(r["eval_found"] for r in ranks) > 0
        else:
            assert found == 0, "a split rank computed from an edge of its seed's time or later"
            assert all(r["planted_hits"] == 0 and r["eval_found"] == 0 for r in ranks)
