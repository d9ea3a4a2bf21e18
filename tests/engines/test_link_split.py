"""Link prediction on the split engine: one global edge batch a step, its seeds split by owner.

Each rank computes the output rows of the seeds it owns and scores the pairs whose source it
owns, fetching the other endpoints' rows from their owners; against the reference engine in
minibatch mode on the same edge batches (negatives included) in float64 at W = 1..3.
"""

import json

import numpy as np
import pytest
import torch

from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines.batch import MiniBatch
from fleetgnn.engines.link import split_edge_batch_loss
from fleetgnn.engines.split import SplitEngine
from fleetgnn.nn.decoders import DotDecoder
from fleetgnn.partition import PartitionBook
from fleetgnn.train import engine_from_config, model_from_config, optimizer_from_config
from fleetgnn.train.setup import task_from_config

from .link_setup import link_config, link_graph

BATCH = 40
#: (epoch, step) of the steps compared: two epochs, so the negatives' epoch key changes
STEPS = ((0, 0), (0, 1), (1, 0))


_graph = link_graph


def _config(extra=()):
    sets = ["train.device=cpu", f"train.batch_size={BATCH}", "train.fanouts=[4,3]"]
    return link_config("train.engine=split", *sets, "train.negatives=2", "model.name=sage", *extra)


def _rank(comm, extra, one_empty):
    torch.set_num_threads(1)
    cfg, graph = _config(extra), _graph()
    book = None
    if one_empty:  # every other node on rank 0 and 1, none on the last rank
        part = np.arange(graph.num_nodes) % (comm.world_size - 1)
        book = PartitionBook.from_part_of(part, comm.world_size, "degenerate")
    model = model_from_config(cfg, graph)
    with SplitEngine(
        model,
        graph,
        context_of(comm),
        cfg.engine_config(),
        optimizer=optimizer_from_config(model, cfg.optim),
        book=book,
        task=task_from_config(cfg, graph),
    ) as engine:
        ev = engine.evaluate()  # at the shared initial parameters
        out = []
        for epoch, step in STEPS:
            stats, _ = engine.train_step(epoch, step, engine.prepare(epoch, step))
            grads = {n: p.grad.detach().clone() for n, p in engine.module.named_parameters()}
            out.append((stats.loss_sum, stats.count, grads))
        return {"eval": ev, "steps": out, "n": engine.steps_per_epoch()}


def _reference(extra):
    torch.set_num_threads(1)
    ref = engine_from_config(_config(extra), _graph(), engine="reference")
    assert ref.mode == "minibatch"
    ev = ref.evaluate()
    out = []
    for epoch, step in STEPS:
        stats = ref.train_step(epoch, step)
        out.append(
            (
                stats.loss_sum,
                stats.count,
                {n: p.grad.clone() for n, p in ref.model.named_parameters()},
            )
        )
    return {"eval": ev, "steps": out, "n": ref.steps_per_epoch()}


@pytest.mark.slow
@pytest.mark.parametrize(
    "world_size, partition",
    [(1, "metis"), (2, "metis"), (3, "one_empty")],
    ids=["1", "2", "3-one-empty"],
)
def test_split_engine_link_loss_gradients_and_metrics_equal_reference(world_size, partition):
    """W = 3: ranks 0 and 1 own alternate nodes (most pairs cross), rank 2 owns none."""
    extra = [] if partition == "one_empty" else [f"split.partition={partition}"]
    results = run_world(_rank, world_size, extra, partition == "one_empty", timeout_s=300)
    want = _reference(extra)
    assert {r["n"] for r in results} == {want["n"]}
    for i, (loss, count, grads) in enumerate(want["steps"]):
        counts = [r["steps"][i][1] for r in results]
        assert sum(counts) == count
        if world_size > 1:  # the pairs are shared out, not all scored on one rank
            assert max(counts) < count and (partition != "one_empty" or counts[-1] == 0)
        assert sum(r["steps"][i][0] for r in results) == pytest.approx(loss, rel=1e-10)
        for res in results:  # the synchronised gradient of the step, on every rank
            for n, g in grads.items():
                torch.testing.assert_close(res["steps"][i][2][n], g, rtol=1e-9, atol=1e-12)
    for res in results:  # evaluation: the metric sums over ranks are one process's
        assert res["eval"].keys() == want["eval"].keys()
        for k, v in want["eval"].items():
            assert res["eval"][k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


def test_split_edge_batch_loss_on_one_rank_is_the_edge_batch_loss():
    """No communicator: the owned seeds are every seed, the loss is the edge batch's."""
    g = torch.Generator().manual_seed(0)
    h = torch.randn(9, 4, dtype=torch.float64, generator=g, requires_grad=True)
    src, dst = torch.tensor([0, 3, 5, 8]), torch.tensor([1, 2, 7, 0])
    neg = torch.tensor([[4, 6], [8, 1], [2, 2], [3, 5]])
    batch = MiniBatch([], torch.arange(9), 6, src, dst, neg)

    class Model:
        decoder = DotDecoder()

    class Task:
        @staticmethod
        def loss_terms(loss, scores, target):
            from fleetgnn.tasks.base import LossTerms

            return LossTerms(loss(scores).sum(), 0, int(scores.shape[0]))

    def loss(scores):  # per positive: weighted so the pairs' order and columns matter
        return (scores * torch.arange(1, 4, dtype=scores.dtype)).sum(1)

    got = split_edge_batch_loss(
        Model, Task, None, h, batch, torch.zeros(9, dtype=torch.int64), loss
    )
    pos = (h[src] * h[dst]).sum(1)
    negs = (h[src].unsqueeze(1) * h[neg]).sum(2)
    want = loss(torch.cat([pos.unsqueeze(1), negs], 1)).sum() / 6
    torch.testing.assert_close(got.loss, want)
    assert got.count == 4


@pytest.mark.slow
def test_split_engine_trains_links_through_the_cli(tmp_path):
    """`fleetgnn train --task link --engine split --nproc 2`: it trains and reports link metrics."""
    from fleetgnn.cli.main import main

    run = tmp_path / "run"
    argv = ["train", "--task", "link", "--engine", "split", "--nproc", "2", "--epochs", "2"]
    argv += ["--run-dir", str(run), "--no-progress", "--model", "sage"]
    argv += ["--set", "data.preset=tiny", "--set", "data.scale=0.3"]
    argv += ["--set", f"data.cache_dir={tmp_path / 'cache'}", "--set", "train.batch_size=64"]
    argv += ["--set", "train.fanouts=[4,3]", "--set", "split.report_dp=true"]
    assert main(argv) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["engine"] == "split" and summary["world_size"] == 2
    first, rec = (json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines())
    assert 0.0 <= rec["val_auc"] <= 1.0 and np.isfinite(rec["loss"]) and rec["loss"] < first["loss"]
    dp = rec["extra"]["dp_counterfactual"]
    assert dp["edges"] > 0 and dp["input_rows"] > 0
