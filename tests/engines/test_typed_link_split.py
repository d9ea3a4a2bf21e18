"""Typed link prediction on the split engine against the typed link reference (gloo worlds).

Every rank draws the reference's typed edge batch (same deal, negatives and blocks), computes
the rows its part owns relation by relation and scores the positives whose source it owns; after
the gradient all-reduce it takes the reference's optimizer step. Checked in float64 with dropout
on, at W = 1, 2, 3: summed losses, gradients and parameters step by step and after a whole epoch
(prefetched), validation/test metrics, for R-GCN and hetero-SAGE, a relation between two types
and one within a type, partitions METIS (over the training graph), random, one part empty and
everything on one rank, and features read from the dataset's arrays or through the keyed store.
"""

import numpy as np
import pytest
import torch

from fleetgnn.config import ReferenceEngineConfig, SplitEngineConfig
from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines import build_engine
from fleetgnn.engines.typed_link import TypedLinkSplitEngine, typed_link_engine
from fleetgnn.errors import ConfigError
from fleetgnn.graph.edge_split import edge_split_for
from fleetgnn.graph.hetero_toy import toy_mag
from fleetgnn.nn.decoders import LinkModel, build_decoder
from fleetgnn.nn.hetero import build_hetero_model
from fleetgnn.partition import PartitionBook, partition
from fleetgnn.tasks import TypedLinkPrediction

SEED = 7
BATCH = 16
LR = 0.1
WRITES = ("author", "writes", "paper")
CITES = ("paper", "cites", "paper")
#: (epoch, step) of the compared steps: two epochs, so the negatives' epoch key changes
STEPS = ((0, 0), (0, 1), (1, 0))


def _graph():
    return toy_mag(num_papers=60, num_authors=30, num_fields=5, featureless_fields=True, seed=4)


def _task(rel):
    split = edge_split_for(_graph(), None, 0.15, 0.15, seed=3, relation=",".join(rel))
    return TypedLinkPrediction(split, negatives=2, seed=SEED)


def _model(conv, decoder, sparse=False):
    torch.manual_seed(SEED)
    kw = {"num_bases": 2} if conv == "rgcn" else {}
    enc = build_hetero_model(
        conv, _graph(), 6, hidden_dim=6, num_layers=2, dropout=0.3, sparse=sparse, seed=SEED, **kw
    )
    return LinkModel(enc, build_decoder(decoder, 6)).double()


def _book(kind, graph, w):
    n = graph.num_nodes
    if kind == "metis":
        flat, _ = graph.to_homogeneous(x=np.zeros((n, 0), np.float32))
        return partition(flat, "metis", w, seed=0)
    if kind == "random":
        return PartitionBook.from_part_of(np.random.default_rng(3).integers(0, w, n), w, "random")
    if kind == "one_empty":  # the last rank owns nothing
        return PartitionBook.from_part_of(np.arange(n) % max(w - 1, 1), w, "degenerate")
    if kind == "all_on_0":
        return PartitionBook.from_part_of(np.zeros(n, dtype=np.int64), w, "degenerate")
    raise AssertionError(kind)


#: (conv, relation, decoder, partition, sparse embedding gradients, keyed store) per world size
CASES = {
    1: [("rgcn", WRITES, "distmult", "metis", False, False)],
    2: [
        ("rgcn", WRITES, "distmult", "metis", True, True),
        ("hetero-sage", CITES, "mlp", "one_empty", False, False),
    ],
    3: [
        ("hetero-sage", WRITES, "dot", "random", False, False),
        ("rgcn", CITES, "distmult", "all_on_0", True, False),
    ],
}
#: Keyed-store budgets smaller than the features: rows from the own shard and peers' shards
STORE = {"device_budget": "2KB", "host_budget": "4KB"}


def _dense(p):
    return None if p.grad is None else p.grad.to_dense().detach().clone()


def _run(engine):
    """Losses and gradients of :data:`STEPS`, metrics, then a whole epoch and the parameters."""
    steps = []
    for epoch, step in STEPS:
        st = engine.train_step(epoch, step)
        steps.append((st.loss_sum, {n: _dense(p) for n, p in engine.module.named_parameters()}))
    ev = engine.evaluate()
    epoch_loss = sum(s.loss_sum for s in engine.run_epoch(2))
    params = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
    return {"steps": steps, "eval": ev, "epoch_loss": epoch_loss, "params": params}


def _split_rank(comm, cases):
    torch.set_num_threads(1)  # as the reference (one summation order)
    out = []
    for conv, rel, decoder, kind, sparse, store in cases:
        task = _task(rel)
        model = _model(conv, decoder, sparse)
        cfg = SplitEngineConfig(
            batch_size=BATCH, dtype="float64", seed=SEED, fanouts=(3, 2), **(STORE if store else {})
        )
        with TypedLinkSplitEngine(
            model,
            _graph(),
            context_of(comm),
            cfg,
            optimizer=torch.optim.SGD(model.parameters(), lr=LR),
            task=task,
            book=_book(kind, task.split.train_graph, comm.world_size),
        ) as engine:
            res = _run(engine)
            res["extra"] = {**engine.epoch_extra(), **engine.rank_extra()}
        out.append(res)
    return out


def _reference(conv, rel, decoder, sparse):
    model = _model(conv, decoder, sparse)
    cfg = ReferenceEngineConfig(
        mode="minibatch", batch_size=BATCH, dtype="float64", seed=SEED, fanouts=(3, 2)
    )
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    with build_engine(model, _graph(), cfg, optimizer=opt, task=_task(rel)) as engine:
        return _run(engine)


def _close(got, want, what):
    if want is None:  # no path to the loss on the reference: a rank may hold zeros
        assert got is None or not got.any(), what
    else:
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12, msg=lambda m: f"{what}: {m}")


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_steps_and_metrics_equal_the_typed_link_reference(world_size):
    cases = CASES[world_size]
    results = run_world(_split_rank, world_size, cases, timeout_s=300)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        refs = [_reference(conv, rel, dec, sparse) for conv, rel, dec, _, sparse, _ in cases]
    finally:
        torch.set_num_threads(threads)
    for i, (case, ref) in enumerate(zip(cases, refs, strict=True)):
        ranks = [r[i] for r in results]
        what = f"{case[0]}/{case[1][1]}/{case[3]}/W={world_size}"
        for k, (loss, grads) in enumerate(ref["steps"]):
            # the positives of the step are scored once, by the owners of their sources
            total = sum(r["steps"][k][0] for r in ranks)
            assert total == pytest.approx(loss, rel=1e-9), (what, k)
            for r in ranks:
                for name, g in grads.items():
                    _close(r["steps"][k][1][name], g, f"{what} step {k} {name}")
        assert np.isfinite(ref["epoch_loss"]), what
        assert sum(r["epoch_loss"] for r in ranks) == pytest.approx(ref["epoch_loss"], rel=1e-9)
        for r in ranks:
            for name, p in ref["params"].items():
                _close(r["params"][name], p, f"{what} {name} after the epoch")
            assert set(r["eval"]) == set(ref["eval"]), what
            for key, v in ref["eval"].items():
                assert r["eval"][key] == pytest.approx(v, rel=1e-9, abs=1e-15), (what, key)
        assert ref["eval"]["val_auc"] > 0 and "test_mrr" in ref["eval"]
        emb = ref["steps"][0][1]["encoder.embed.field.weight"]  # featureless type trained
        assert emb is not None and emb.abs().sum() > 0
        extra = ranks[0]["extra"]
        if case[5]:  # the keyed store served the rows, some from a peer's shard
            assert extra["hit_rates"]["peer"] > 0, extra
        assert extra["edges"] > 0 and 0.0 <= extra["local_edge_ratio"] <= 1.0, what
        crossing = world_size > 1 and case[3] not in ("all_on_0",)
        shuffled = sum(sum(r["extra"]["shuffle_bytes_per_layer"]) for r in ranks)
        if crossing and (case[3], world_size) != ("one_empty", 2):
            assert extra["local_edge_ratio"] < 1.0 and shuffled > 0, what
        else:  # one part holds every node: nothing crosses splits
            assert extra["local_edge_ratio"] == 1.0 and shuffled == 0, what


# ---------------------------------------------------------------------------------- the engine
def test_build_engine_picks_the_typed_link_split_class():
    assert typed_link_engine("split") is TypedLinkSplitEngine
    cfg = SplitEngineConfig(fanouts=(2, 2), partition="random", batch_size=BATCH)
    with build_engine(_model("rgcn", "dot"), _graph(), cfg, task=_task(WRITES)) as e:
        assert type(e) is TypedLinkSplitEngine and e.name == "split"
        train = e.task.split.train_graph  # the book covers the message-passing graph
        assert e.graph is train and e.book.num_nodes == train.num_nodes
        assert e.steps_per_epoch() == -(-121 // BATCH)  # the reference's deal: one batch a step
        st = e.train_step(0, 0)
        assert st.loss_sum > 0 and np.isfinite(st.loss_sum)


def test_typed_link_on_an_engine_that_does_not_train_it_is_refused_in_one_line():
    with pytest.raises(
        ConfigError, match="node classification only.*reference or minibatch or split"
    ) as e:
        typed_link_engine("fullgraph")
    assert "\n" not in str(e.value)


def test_rgat_link_model_on_split_is_refused_in_one_line():
    """The link model carries its encoder's hosts: R-GAT is refused before any step."""
    with pytest.raises(ConfigError, match="split engine cannot run LinkModel.*R-GAT") as e:
        build_engine(
            _model("rgat", "dot"), _graph(), SplitEngineConfig(fanouts=(2, 2)), task=_task(WRITES)
        )
    assert "\n" not in str(e.value)
