"""Temporal link prediction on the split engine: equal to the reference in float64, W = 1..3.

Every rank draws the reference engine's timed edge batch (one global batch a step, sampled at
the positives' times), computes the rows of the ``(seed, node)`` identities it owns (the owner
of the node), and scores the pairs whose source seed it owns; the losses, gradients and
parameters after the steps, and the evaluation metrics, must be the reference engine's.
"""

import json

import numpy as np
import pytest
import torch

from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines.link import TEMPORAL_ENGINES
from fleetgnn.engines.split import SplitEngine
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.partition import PartitionBook
from fleetgnn.tasks import TemporalLinkPrediction
from fleetgnn.train import engine_from_config, model_from_config, optimizer_from_config
from fleetgnn.train.setup import task_from_config

from .link_setup import link_config, planted_temporal_graph

BATCH = 40
FANOUTS = (4, 3)
#: (epoch, step) of the steps trained: two epochs, so the negatives' epoch key changes
STEPS = ((0, 0), (0, 1), (1, 0))


def _graph():
    """A small temporal-like graph (edge times, in-edges sorted by time)."""
    return generate_graph(spec_for("temporal-like", 0.002), seed=5)


def _config(model, extra=()):
    sets = [
        "train.engine=split",
        "train.device=cpu",
        f"train.batch_size={BATCH}",
        f"train.fanouts=[{FANOUTS[0]},{FANOUTS[1]}]",
        "train.negatives=2",
        "train.eval_edges=61",  # W = 2: shares of 30 and 31 queries
        f"model.name={model}",
    ]
    return link_config(*sets, *(["model.heads=2"] if model == "gat" else []), *extra)


def _book(kind, graph, world_size):
    if kind == "one_empty":  # ranks 0..W-2 own alternate nodes, the last rank none
        part = np.arange(graph.num_nodes) % max(world_size - 1, 1)
        return PartitionBook.from_part_of(part, world_size, "degenerate")
    return None  # the configured partition (METIS)


def _rank(comm, model_name, kind, eval_chunk, extra):
    torch.set_num_threads(1)
    cfg, graph = _config(model_name, extra), _graph()
    task = task_from_config(cfg, graph)
    assert isinstance(task, TemporalLinkPrediction)
    model = model_from_config(cfg, task.split.train_graph)
    with SplitEngine(
        model,
        graph,
        context_of(comm),
        cfg.engine_config(),
        optimizer=optimizer_from_config(model, cfg.optim),
        book=_book(kind, graph, comm.world_size),
        task=task,
    ) as engine:
        if eval_chunk is not None:
            engine.eval_chunk = eval_chunk
        out = []
        for epoch, step in STEPS:
            stats, _ = engine.train_step(epoch, step, engine.prepare(epoch, step))
            grads = {n: p.grad.detach().clone() for n, p in engine.module.named_parameters()}
            out.append((stats.loss_sum, stats.count, grads))
        params = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
        return {"steps": out, "params": params, "eval": engine.evaluate()}


def _reference(model_name, extra):
    """The reference engine (mode minibatch) on the same steps, then its evaluation."""
    torch.set_num_threads(1)
    ref = engine_from_config(_config(model_name, extra), _graph(), engine="reference")
    assert ref.mode == "minibatch" and isinstance(ref.task, TemporalLinkPrediction)
    out = []
    for epoch, step in STEPS:
        stats = ref.train_step(epoch, step)
        grads = {n: p.grad.clone() for n, p in ref.model.named_parameters()}
        out.append((stats.loss_sum, stats.count, grads))
    params = {n: p.detach().clone() for n, p in ref.model.named_parameters()}
    return {"steps": out, "params": params, "eval": ref.evaluate()}


def test_split_trains_temporal_link_prediction():
    assert ("split", "minibatch") in TEMPORAL_ENGINES


@pytest.mark.slow
@pytest.mark.parametrize(
    "world_size, model_name, kind, eval_chunk, extra",
    [
        (1, "sage", "metis", None, ("train.temporal_strategy=last",)),  # most recent in-edges
        # evaluation in chunks of 10 queries, input rows read with collective gathers
        (2, "sage", "metis", 10, ("store.gather=two_sided",)),
        (3, "sage", "one_empty", None, ()),
        (2, "gat", "metis", None, ()),  # remote source rows (the halo), attention dropout
    ],
    ids=["1-last", "2-chunked-two-sided", "3-one-empty", "2-gat"],
)
def test_split_engine_temporal_link_equals_reference(
    world_size, model_name, kind, eval_chunk, extra
):
    results = run_world(_rank, world_size, model_name, kind, eval_chunk, list(extra), timeout_s=300)
    want = _reference(model_name, extra)
    for i, (loss, count, grads) in enumerate(want["steps"]):
        counts = [r["steps"][i][1] for r in results]
        assert sum(counts) == count
        if world_size > 1:  # the pairs are shared out, not all scored on one rank
            assert max(counts) < count and (kind != "one_empty" or counts[-1] == 0)
        assert sum(r["steps"][i][0] for r in results) == pytest.approx(loss, rel=1e-10)
        for res in results:  # the synchronised gradient of the step, on every rank
            for n, g in grads.items():
                torch.testing.assert_close(res["steps"][i][2][n], g, rtol=1e-9, atol=1e-12)
    for res in results:  # the same parameters after the steps
        for n, p in want["params"].items():
            torch.testing.assert_close(res["params"][n], p, rtol=1e-9, atol=1e-12)
    # evaluation: every rank reports the reference engine's metrics for the trained model
    assert {"val_auc", "test_auc", "val_mrr", "test_mrr"} <= want["eval"].keys()
    for res in results:
        assert res["eval"].keys() == want["eval"].keys()
        for k, v in want["eval"].items():
            assert res["eval"][k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


# ---------------------------------------------------------------------------------- no future
def _computed_edges(comm, leaky):
    """Every edge each rank's split of each block computes from, with its subtree's time.

    Two training steps of the engine on the planted graph (every candidate taken); a rank
    computes from the in-edges of the ``(seed, node)`` rows it owns (their partial sums come
    from the sources' owners) and from the out-edges of its rows (the partial sums it sends).
    ``leaky``: the engine's sampler swapped for one whose edges all have time 0, so every seed
    samples its subtree as the plain sampler does (every edge, past or future).
    """
    from fleetgnn.sampling import TemporalSampler

    torch.set_num_threads(1)
    graph, _, _ = planted_temporal_graph()
    with engine_from_config(
        _config("sage", ["train.fanouts=[-1,-1]"]), graph, context_of(comm)
    ) as engine:
        assert isinstance(engine, SplitEngine) and engine.world_size == comm.world_size
        if leaky:
            zeros = np.zeros(engine.graph.num_edges, np.int64)
            plain = TemporalSampler(engine.topology, [-1, -1], engine.seed, edge_time=zeros)
            engine.sampler = engine.edges.sampler = plain
        out = []
        for epoch, step in ((0, 0), (0, 1)):
            batch = engine.prepare(epoch, step)
            engine.train_step(epoch, step, batch)  # the blocks below are the ones it trained on
            sample = batch.sample
            for layer, sp in enumerate(batch.splits):
                block, own = sp.block, sp.src_owner
                dpos = np.repeat(np.arange(block.num_dst), np.diff(block.indptr.numpy()))
                spos = block.indices.numpy().astype(np.int64)
                ids = block.src_ids.numpy().astype(np.int64)
                mine = (own[dpos] == comm.rank) | (own[spos] == comm.rank)
                seed_of = sample.seed_index[layer].numpy()
                out.append(
                    {
                        "dst_pos": dpos[mine],
                        "src": ids[spos[mine]],
                        "dst": ids[dpos[mine]],
                        "time": sample.src_time(layer).numpy()[dpos[mine]],
                        "same_subtree": bool((seed_of[spos] == seed_of[dpos]).all()),
                        "owned_dst_edges": int(np.count_nonzero(own[dpos] == comm.rank)),
                        "block_edges": int(block.num_edges),
                    }
                )
        return out


def _future_edges(rec, graph):
    """Brute force: sampled copies of ``u -> v`` beyond the graph's ``u -> v`` edges before t.

    For every destination row and source node, the block's copies of that edge must not
    outnumber the training graph's edges ``u -> v`` with time ``< t`` (the row's subtree time).
    """
    n = graph.num_nodes
    span = int(np.asarray(graph.edge_time).max()) + 2
    gdst = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.indptr))
    gkey = np.sort((gdst * n + np.asarray(graph.indices, np.int64)) * span + graph.edge_time)
    (row, src), copies = np.unique(
        np.stack([rec["dst_pos"], rec["src"]]), axis=1, return_counts=True
    )
    first = np.searchsorted(rec["dst_pos"], row)  # a row's edges are contiguous (CSC order)
    dst, t = rec["dst"][first], rec["time"][first]
    base = (dst * n + src) * span
    allowed = np.searchsorted(gkey, base + t) - np.searchsorted(gkey, base)
    return int(np.count_nonzero(copies > allowed))


@pytest.mark.slow
def test_no_block_a_split_rank_computes_from_holds_an_edge_of_its_time_or_later():
    """W = 2 on the planted graph, every candidate taken: no rank's share of any block holds
    an edge at or after its subtree's time; the same check finds such edges in the blocks of
    a sampler that ignores the times."""
    graph = planted_temporal_graph()[0]
    train_graph = task_from_config(_config("sage"), graph).split.train_graph
    for leaky in (False, True):
        ranks = run_world(_computed_edges, 2, leaky, timeout_s=300)
        found = 0
        for i in range(len(ranks[0])):  # per (step, layer)
            recs = [r[i] for r in ranks]
            # every edge of the block is computed by its destination's owner
            assert sum(r["owned_dst_edges"] for r in recs) == recs[0]["block_edges"] > 0
            for rec in recs:
                assert rec["same_subtree"] and rec["src"].size > 0
                found += _future_edges(rec, train_graph)
        if leaky:
            assert found > 0, "the check must find the future edges of a time-blind sampler"
        else:
            assert found == 0, "a split rank computed from an edge of its time or later"


@pytest.mark.slow
def test_split_engine_trains_temporal_links_through_the_cli(tmp_path):
    """`fleetgnn train --task link --engine split --nproc 2` on a timed graph: test AUC."""
    from fleetgnn.cli.main import main

    data, run = tmp_path / "tl", tmp_path / "run"
    argv = ["prepare", "synthetic", "--preset", "temporal-like", "--scale", "0.005"]
    assert main([*argv, "--out", str(data)]) == 0
    argv = ["train", "--dataset", str(data), "--task", "link", "--engine", "split"]
    argv += ["--nproc", "2", "--epochs", "1", "--run-dir", str(run), "--no-progress"]
    argv += ["--set", "train.eval_edges=500", "--set", "split.report_dp=true"]
    assert main(argv) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["engine"] == "split" and summary["world_size"] == 2
    assert 0.5 < summary["test_auc"] <= 1.0 and 0.0 < summary["test_mrr"] <= 1.0
    (rec,) = (json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines())
    dp = rec["extra"]["dp_counterfactual"]  # data-parallel shares sampled at their times
    assert dp["edges"] > 0 and dp["input_rows"] > 0
