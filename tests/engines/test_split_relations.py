"""Typed graphs on the split engine against the typed reference engine's steps (gloo worlds).

Same global batch, seed and per-relation fanouts: every rank draws the reference's typed sample,
computes the rows its part owns relation by relation, and after the gradient all-reduce takes
the reference's optimizer step. Checked in float64 with dropout on and sparse embedding
gradients, for W = 1, 2, 3, R-GCN and hetero-SAGE, and partitions METIS (through the
homogeneous view), random, one part empty and everything on one rank; plus the per-relation
splitting invariants on their own. Typed link prediction on split:
``tests/engines/test_typed_link_split.py``.
"""

import numpy as np
import pytest
import torch

from fleetgnn.config import ReferenceEngineConfig, SplitEngineConfig
from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines import build_engine
from fleetgnn.engines.split import split_block
from fleetgnn.engines.split_relations import (
    TypedSplitEngine,
    relation_block,
    split_hetero_block,
)
from fleetgnn.errors import ConfigError
from fleetgnn.graph.hetero_toy import toy_mag
from fleetgnn.nn.hetero import build_hetero_model
from fleetgnn.partition import PartitionBook, partition
from fleetgnn.sampling import SeedLoader
from fleetgnn.sampling.hetero import HeteroNeighborSampler

STEPS = 3
SEED = 7
FANOUTS = {
    "cites": [3, 2],
    "writes": [2, 2],
    "has_topic": [-1, 1],
    "rev_cites": [2, 0],
    "rev_writes": [1, 1],
    "rev_has_topic": [1, 1],
}


def _graph():
    return toy_mag(num_papers=80, num_authors=40, num_fields=6, featureless_fields=True, seed=4)


def _model(graph, conv):
    torch.manual_seed(SEED)
    kw = {"num_bases": 2} if conv == "rgcn" else {}
    return build_hetero_model(
        conv, graph, graph.num_classes, hidden_dim=6, dropout=0.3, sparse=True, seed=SEED, **kw
    ).double()


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


def _cases(w):
    out = [("rgcn", "metis"), ("hetero-sage", "random")]
    if w > 1:
        out += [("rgcn", "one_empty"), ("hetero-sage", "all_on_0")]
    return out


def _steps(engine):
    losses, counts, grads = [], [], None
    for step in range(STEPS):
        st = engine.train_step(0, step)
        losses.append(st.loss_sum)
        counts.append(st.count)
        if step == 0:
            grads = {  # None: no path to the loss in this step (on the reference too)
                n: None if p.grad is None else p.grad.to_dense().detach().clone()
                for n, p in engine.module.named_parameters()
            }
    params = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
    return {"loss": losses, "count": counts, "grads": grads, "params": params}


def _split_rank(comm, cases):
    torch.set_num_threads(1)  # as the reference (one summation order)
    g = _graph()
    out = []
    for conv, kind in cases:
        model = _model(g, conv)
        cfg = SplitEngineConfig(batch_size=16, dtype="float64", seed=SEED, fanouts=(3, 2))
        with TypedSplitEngine(
            model,
            g,
            context_of(comm),
            cfg,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
            fanouts=FANOUTS,
            book=_book(kind, g, comm.world_size),
        ) as engine:
            res = _steps(engine)
            res["eval"] = engine.evaluate()
            engine.run_epoch(1)
            res["extra"] = {**engine.epoch_extra(), **engine.rank_extra()}
        out.append(res)
    return out


def _reference(conv):
    g = _graph()
    model = _model(g, conv)
    cfg = ReferenceEngineConfig(mode="minibatch", batch_size=16, dtype="float64", seed=SEED)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with build_engine(model, g, cfg, optimizer=opt, fanouts=FANOUTS) as engine:
        res = _steps(engine)
        res["eval"] = engine.evaluate()
    return res


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_steps_equal_the_typed_reference(world_size):
    cases = _cases(world_size)
    results = run_world(_split_rank, world_size, cases, timeout_s=300)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        refs = {conv: _reference(conv) for conv in {c for c, _ in cases}}
    finally:
        torch.set_num_threads(threads)
    for i, (conv, kind) in enumerate(cases):
        ref, ranks = refs[conv], [r[i] for r in results]
        what = f"{conv}/{kind}/W={world_size}"
        # the owned seeds of every rank add up to the global batch, their losses to its loss
        assert [sum(c) for c in zip(*(r["count"] for r in ranks))] == ref["count"], what
        loss = [sum(v) for v in zip(*(r["loss"] for r in ranks))]
        np.testing.assert_allclose(loss, ref["loss"], rtol=1e-9, err_msg=what)
        for r in ranks:
            for name, g in ref["grads"].items():
                if g is None:  # a rank may hold zeros where the reference has no gradient
                    assert r["grads"][name] is None or not r["grads"][name].any(), (what, name)
                    continue
                torch.testing.assert_close(r["grads"][name], g, rtol=1e-9, atol=1e-12)
            for name, p in ref["params"].items():
                torch.testing.assert_close(r["params"][name], p, rtol=1e-9, atol=1e-12)
            for key, v in ref["eval"].items():
                assert r["eval"][key] == pytest.approx(v, rel=1e-9), (what, key)
        emb = ref["grads"]["embed.field.weight"]  # the featureless type's rows were trained
        assert int((emb.abs().sum(1) > 0).sum()) > 0
        extra = ranks[0]["extra"]
        assert extra["edges"] > 0 and 0.0 <= extra["local_edge_ratio"] <= 1.0, extra
        one_part = world_size == 1 or kind == "all_on_0" or (kind, world_size) == ("one_empty", 2)
        if one_part:  # nothing crosses splits: nothing shuffled
            assert extra["local_edge_ratio"] == 1.0
            assert all(sum(r["extra"]["shuffle_bytes_per_layer"]) == 0 for r in ranks)
        else:
            assert extra["local_edge_ratio"] < 1.0
            assert sum(sum(r["extra"]["shuffle_bytes_per_layer"]) for r in ranks) > 0


# ---------------------------------------------------------------------------------- invariants
def _blocks(graph, step=0):
    train = torch.from_numpy(np.flatnonzero(graph.train_mask))
    seeds = SeedLoader(train, 16, seed=SEED, shuffle=True).batch(0, step)
    return (
        HeteroNeighborSampler(graph, FANOUTS, seed=SEED)
        .sample_from_nodes(seeds, epoch=0, step=step)
        .blocks
    )


@pytest.mark.parametrize("w", [1, 2, 3])
def test_typed_split_invariants(w):
    g = _graph()
    owner = np.random.default_rng(w).integers(0, w, g.num_nodes)
    for block in _blocks(g):
        splits = [split_hetero_block(block, owner, r, w) for r in range(w)]
        for t, ids in block.src_ids.items():
            # every row on exactly its owner, in block order, owned destinations first
            got = torch.cat([sp.src_ids[t] for sp in splits]).sort().values
            assert torch.equal(got, ids.sort().values)
            for r, sp in enumerate(splits):
                assert (owner[sp.src_ids[t].numpy()] == r).all()
                dst = block.dst_ids(t).numpy()
                assert torch.equal(
                    sp.src_ids[t][: sp.num_dst[t]], torch.from_numpy(dst[owner[dst] == r])
                )
        for rel in block.schema.relations:
            rb = relation_block(block, rel)
            s, _, d = rel
            edges = int(block.edges[rel][1].numel())
            parts = [sp.relations[rel] for sp in splits]
            assert sum(p.num_edges for p in parts) == edges
            for r, (sp, p) in enumerate(zip(splits, parts, strict=True)):
                # the relation's owned rows are the typed rows its layer concatenates
                want = (
                    sp.src_ids[s]
                    if s == d
                    else torch.cat([sp.src_ids[d][: sp.num_dst[d]], sp.src_ids[s]])
                )
                assert torch.equal(rb.src_ids[torch.from_numpy(p.rows)], want), rel
                assert p.num_dst == sp.num_dst[d]
                ref = split_block(rb, owner[rb.src_ids.numpy()], r, w)
                assert np.array_equal(p.send_counts, ref.send_counts)
                for j in range(w):  # what r sends to j is what j expects from r
                    assert parts[j].recv_counts[r] == p.send_counts[j]


# ---------------------------------------------------------------------------------- refusals
def test_rgat_on_split_is_refused_in_one_line():
    g = _graph()
    with pytest.raises(ConfigError, match="split engine cannot run HeteroGNN.*R-GAT") as e:
        build_engine(_model(g, "rgat"), g, SplitEngineConfig(fanouts=(2, 2)))
    assert "\n" not in str(e.value)
