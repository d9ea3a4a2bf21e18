"""Link prediction on one relation of a typed graph: split, batches, engines, refusals."""

import numpy as np
import pytest
import torch

from fleetgnn.config import (
    FullGraphEngineConfig,
    MinibatchEngineConfig,
    ReferenceEngineConfig,
)
from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines import build_engine
from fleetgnn.engines.link import EdgeBatches
from fleetgnn.engines.typed_link import typed_edge_batch_loss
from fleetgnn.errors import ConfigError
from fleetgnn.graph.edge_split import edge_split_for, load_edge_split, write_edge_split
from fleetgnn.graph.hetero_toy import toy_mag
from fleetgnn.nn.decoders import LinkModel, build_decoder
from fleetgnn.nn.hetero import TypedAggregator, build_hetero_model
from fleetgnn.sampling.hetero import HeteroNeighborSampler
from fleetgnn.tasks import TypedLinkPrediction

SEED = 7
BATCH = 8
WRITES = ("author", "writes", "paper")
REV_WRITES = ("paper", "rev_writes", "author")
CITES = ("paper", "cites", "paper")
#: (epoch, step) of the compared steps: two epochs, so the negatives' epoch key changes
STEPS = ((0, 0), (0, 1), (1, 0))


def _graph():
    return toy_mag(num_papers=60, num_authors=30, num_fields=5, featureless_fields=True, seed=4)


def _task(rel=WRITES, keep=False):
    split = edge_split_for(_graph(), None, 0.15, 0.15, seed=3, relation=",".join(rel))
    return TypedLinkPrediction(split, negatives=2, seed=SEED, keep_target_edges=keep)


def _model(graph, decoder="distmult"):
    torch.manual_seed(SEED)
    enc = build_hetero_model(
        "rgcn", graph, 6, hidden_dim=6, num_layers=2, dropout=0.3, num_bases=2, seed=SEED
    )
    return LinkModel(enc, build_decoder(decoder, 6)).double()


def _pairs(edges):
    """Keys ``u * N + v`` (type-local) of ``edges = (u, v)``."""
    return set((np.asarray(edges[0]) * 10**6 + np.asarray(edges[1])).tolist())


def test_split_holds_pairs_out_of_the_relation_and_its_reverse(tmp_path):
    g = _graph()
    split = edge_split_for(g, tmp_path, 0.15, 0.15, seed=3, relation="writes")
    assert split.relation == WRITES and split.reverse == REV_WRITES
    whole = _pairs(g.relation_edges(WRITES))
    parts = {s: _pairs(split.pos[s]) for s in ("train", "val", "test")}
    assert parts["train"] | parts["val"] | parts["test"] == whole  # duplicates counted once
    assert not parts["val"] & parts["train"] and not parts["test"] & parts["train"]
    assert len(parts["val"]) == int(0.15 * len(whole)) > 0
    tg = split.train_graph
    assert _pairs(tg.relation_edges(WRITES)) == parts["train"]
    rev = tg.relation_edges(REV_WRITES)  # paper -> author: the pair (author, paper) reversed
    assert _pairs((rev[1], rev[0])) == parts["train"]
    for rel in g.schema.relations:  # every other relation whole
        if rel not in (WRITES, REV_WRITES):
            assert tg.num_relation_edges(rel) == g.num_relation_edges(rel)
    for s in ("val", "test"):  # GAE negatives: no edge, in range; OGB ones within papers
        neg = _pairs(split.neg[s])
        assert len(neg) == split.neg[s].shape[1] and not neg & whole
        assert split.neg[s][0].max() < 30 and split.neg_dst[s].max() < 60
    assert not _pairs(split.neg["val"]) & _pairs(split.neg["test"])
    saved = tmp_path / "edge_splits" / "author.writes.paper-val0.15-test0.15-seed3"
    again = load_edge_split(g, saved)  # read back from the dataset directory
    for s in ("train", "val", "test"):
        assert np.array_equal(again.pos[s], split.pos[s])
    other = write_edge_split(g, tmp_path / "o", 0.15, 0.15, seed=4, relation=WRITES)
    assert not np.array_equal(load_edge_split(g, other).pos["val"], split.pos["val"])


def test_unknown_relation_is_refused_in_one_line_listing_the_relations():
    with pytest.raises(ConfigError, match=r"not a relation.*author,writes,paper") as e:
        edge_split_for(_graph(), None, 0.1, 0.1, relation="paper,writes,author")
    assert "\n" not in str(e.value)


def _block_keys(blocks, rel):
    """Every sampled edge of relation ``rel`` in ``blocks``, as keys ``src * 10**6 + dst``."""
    out = set()
    for b in blocks:
        indptr, idx = b.edges[rel]
        dst = torch.repeat_interleave(b.dst_ids(rel[2]), indptr[1:] - indptr[:-1])
        src = b.src_ids[rel[0]][idx]
        out |= set((src * 10**6 + dst).tolist())
    return out


@pytest.mark.parametrize("keep", [False, True])
def test_planted_validation_edge_never_in_a_training_block(keep):
    """Every block of an epoch, all neighbours sampled: no held-out pair, either direction."""
    task = _task(keep=keep)
    g = task.split.train_graph
    off_a, off_p = g.schema.type_range("author")[0], g.schema.type_range("paper")[0]
    val = task.split.pos["val"]
    planted = (int(val[0, 0]) + off_a, int(val[1, 0]) + off_p)
    assert planted[0] - off_a in _graph().relation_edges(WRITES)[0]  # an edge of the graph
    held = {(int(u) + off_a, int(v) + off_p) for u, v in val.T}
    held |= {(int(u) + off_a, int(v) + off_p) for u, v in task.split.pos["test"].T}
    sampler = HeteroNeighborSampler(g, [-1, -1], seed=SEED)
    edges = EdgeBatches(task, sampler, BATCH, seed=SEED)
    own = 0
    for step in range(edges.num_batches):
        batch = edges.batch(0, step)
        fwd, rev = _block_keys(batch.blocks, WRITES), _block_keys(batch.blocks, REV_WRITES)
        for u, v in held:
            assert u * 10**6 + v not in fwd and v * 10**6 + u not in rev
        s, d = batch.seeds["author"][batch.src], batch.seeds["paper"][batch.dst]
        mine = {int(a) * 10**6 + int(b) for a, b in zip(s, d, strict=True)}
        own += len(mine & fwd)
        assert (len(mine & fwd) == 0) != keep or not mine
    assert (own > 0) == keep  # a batch's own targets are dropped unless kept


def _hand_steps(task, world_size, decoder):
    """One process: every rank's typed edge batch, summed loss over the step's positives."""
    g = task.split.train_graph
    model = _model(_graph(), decoder)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    sampler = HeteroNeighborSampler(g, [3, 2], seed=SEED)
    ranks = [
        EdgeBatches(task, sampler, BATCH, rank=r, world_size=world_size, seed=SEED)
        for r in range(world_size)
    ]
    off = {t: g.schema.type_range(t)[0] for t in g.schema.node_types}
    out = []
    for epoch, step in STEPS:
        opt.zero_grad()
        losses = []
        for r, edges in enumerate(ranks):
            b = edges.batch(epoch, step, stream=r)
            x = {t: torch.from_numpy(g.x[t]).double()[b.blocks[0].src_ids[t] - off[t]] for t in g.x}
            aggs = [TypedAggregator(k, dtype=torch.float64) for k in b.blocks]
            h = model(aggs, x, step=epoch * edges.num_batches + step)
            part = typed_edge_batch_loss(model, task, h, b, task.loss_fn)
            part.loss.backward()
            losses.append(float(part.total.detach()))
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        out.append((losses, grads))
        opt.step()
    return out


@pytest.mark.parametrize("mode", ["minibatch", "full"])
def test_reference_engine_steps(mode):
    """Minibatch: the one-rank hand-written step. Full: it trains and evaluates."""
    task = _task(CITES)
    cfg = ReferenceEngineConfig(
        mode=mode, fanouts=(3, 2), batch_size=BATCH, dtype="float64", device="cpu", seed=SEED
    )
    model = _model(_graph(), "mlp")
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    eng = build_engine(model, _graph(), cfg, optimizer=opt, task=task)
    if mode == "minibatch":
        for (epoch, step), (losses, grads) in zip(STEPS, _hand_steps(task, 1, "mlp"), strict=True):
            stats = eng.train_step(epoch, step)
            assert stats.loss_sum == pytest.approx(losses[0], rel=1e-12)
            for n, p in eng.module.named_parameters():
                torch.testing.assert_close(p.grad, grads[n], rtol=1e-10, atol=1e-13)
        return
    eng.optimizer = torch.optim.Adam(eng.module.parameters(), lr=0.05)
    full, streamed = eng.infer(), eng.endpoint_embeddings()
    assert set(streamed) == {"paper"}  # cites: paper to paper
    torch.testing.assert_close(streamed["paper"], full["paper"], rtol=1e-12, atol=1e-12)
    ev = eng.evaluate()
    assert set(ev) >= {"val_auc", "val_ap", "val_mrr", "test_auc", "test_hits@10"}
    assert all(0.0 <= v <= 1.0 for v in ev.values())
    losses = [eng.run_epoch(epoch)[0].loss_sum for epoch in range(30)]
    assert losses[-1] < 0.9 * losses[0]  # (the toy graph's citations carry no signal to rank)


def _rank(comm, decoder, rel):
    task = _task(rel)
    cfg = MinibatchEngineConfig(
        batch_size=BATCH, dtype="float64", seed=SEED, fanouts=(3, 2), device="cpu"
    )
    model = _model(_graph(), decoder)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with build_engine(model, _graph(), cfg, context_of(comm), optimizer=opt, task=task) as eng:
        out = []
        for epoch, step in STEPS:
            stats = eng.train_step(epoch, step)
            grads = {n: p.grad.detach().clone() for n, p in eng.module.named_parameters()}
            out.append((stats.loss_sum, grads))
        full, streamed = eng.infer(), eng.endpoint_embeddings()
        return {"steps": out, "eval": eng.evaluate(), "rows": (full, streamed)}


@pytest.mark.slow
@pytest.mark.parametrize("decoder, rel", [("distmult", WRITES)])  # (cites, mlp): above
def test_minibatch_two_ranks_equal_reference_step_for_step(decoder, rel):
    results = run_world(_rank, 2, decoder, rel, timeout_s=300)
    want = _hand_steps(_task(rel), 2, decoder)
    for i, (losses, grads) in enumerate(want):
        for r, res in enumerate(results):
            loss_sum, rank_grads = res["steps"][i]
            assert loss_sum == pytest.approx(losses[r], rel=1e-12)
            for n, g in grads.items():  # the synchronised gradient, embedding tables included
                torch.testing.assert_close(rank_grads[n], g, rtol=1e-10, atol=1e-13)
        assert grads["encoder.embed.field.weight"].abs().sum() > 0
    assert results[0]["eval"] == results[1]["eval"]
    for res in results:  # each rank streamed its share; the all-reduce gives every row
        full, streamed = res["rows"]
        assert set(streamed) == {rel[0], rel[2]}
        for t, v in streamed.items():
            torch.testing.assert_close(v, full[t], rtol=1e-12, atol=1e-12)


def test_typed_link_refusals_are_one_line():
    g = _graph()
    with pytest.raises(ConfigError, match="does not train typed graphs") as e:
        build_engine(_model(g), g, FullGraphEngineConfig(), task=_task())
    assert "\n" not in str(e.value)
    from fleetgnn.graph.synthetic import generate_graph, spec_for

    homo = generate_graph(spec_for("tiny", 0.1), seed=1)
    with pytest.raises(ConfigError, match="for typed graphs"):
        build_engine(_model(g), homo, ReferenceEngineConfig(), task=_task())
