"""Edge mini-batches: the reference engine (mode minibatch) and the minibatch engine at W = 1..3."""

import dataclasses
import tracemalloc

import numpy as np
import pytest
import torch

from fleetgnn.config import ReferenceEngineConfig
from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines import build_engine
from fleetgnn.engines.link import EdgeBatches, edge_batch_loss
from fleetgnn.graph.edge_split import split_edges
from fleetgnn.nn import LocalAggregator, build_model
from fleetgnn.nn.decoders import DotDecoder, LinkModel
from fleetgnn.sampling import GraphTopology, NeighborSampler, edge_keys
from fleetgnn.tasks import LinkPrediction
from fleetgnn.train import engine_from_config
from fleetgnn.train.setup import model_from_config, task_from_config

from .link_setup import link_config, link_graph

BATCH = 48


_graph = link_graph


@pytest.fixture(scope="module")
def split():
    return split_edges(_graph(), 0.1, 0.1, seed=0)


def _block_edges(blocks):
    """Every sampled edge of ``blocks`` as a key ``dst * N + src`` of global IDs."""
    keys = []
    for b in blocks:
        dst = torch.repeat_interleave(b.dst_ids, b.dst_in_degree())
        keys.append(dst * 10**9 + b.src_ids[b.indices])
    return torch.cat(keys)


def _batches(split, keep, fanouts=(-1, -1)):
    task = LinkPrediction(split, negatives=2, seed=3, keep_target_edges=keep)
    sampler = NeighborSampler(GraphTopology(split.train_graph), list(fanouts), seed=3)
    return EdgeBatches(task, sampler, BATCH, seed=3)


def _pairs(batch, edges, epoch, step):
    idx = edges.loader.batch(epoch, step)
    return edges.task.train_pair_rows(idx)


@pytest.mark.parametrize("keep", [False, True])
def test_a_target_edge_is_absent_from_its_own_blocks_unless_kept(split, keep):
    edges = _batches(split, keep)
    found = 0
    for step in range(edges.num_batches):
        batch = edges.batch(0, step)
        src, dst = _pairs(batch, edges, 0, step)
        have = _block_edges(batch.blocks)
        both = torch.cat([dst * 10**9 + src, src * 10**9 + dst])
        found += int(torch.isin(both, have).sum())
        # the seeds are the deduplicated endpoints of the positives and the negatives
        seeds = batch.seeds
        assert torch.equal(seeds, torch.unique(seeds)) and torch.equal(seeds[batch.src], src)
        assert torch.equal(batch.blocks[-1].dst_ids, seeds)
    if keep:  # full neighbourhoods: every target edge and its reverse reach their own block
        assert found == 2 * edges.task.num_train_pairs()
    else:
        assert found == 0


def test_a_planted_validation_edge_never_appears_in_any_training_block(split):
    u, v = (int(a) for a in split.pos["val"][:, 0])
    g = split.train_graph
    assert g.num_nodes > max(u, v)
    for keep in (False, True):  # even with the targets kept: it is not a message-passing edge
        edges = _batches(split, keep)
        planted = torch.tensor([v * 10**9 + u, u * 10**9 + v])
        touched = False
        for epoch in range(2):
            for step in range(edges.num_batches):
                batch = edges.batch(epoch, step)
                assert not torch.isin(planted, _block_edges(batch.blocks)).any()
                touched |= bool(torch.isin(torch.tensor([u, v]), batch.blocks[0].src_ids).all())
        assert touched  # both endpoints were in some batch's blocks: the check had a chance


def test_exclusion_drops_edges_after_the_same_draws():
    g = _graph()
    sampler = NeighborSampler(GraphTopology(g), [3, 2], seed=1)
    seeds = torch.arange(0, 40, 3)
    plain = sampler.sample_from_nodes(seeds, epoch=2, step=5).blocks
    drop_src = plain[-1].src_ids[plain[-1].indices[:4]]
    drop_dst = torch.repeat_interleave(seeds, plain[-1].dst_in_degree())[:4]
    cut = sampler.sample_from_nodes(
        seeds, epoch=2, step=5, exclude=edge_keys(drop_src, drop_dst, g.num_nodes)
    ).blocks
    full = _block_edges(plain[-1:])
    kept = _block_edges(cut[-1:])
    dropped = torch.cat([drop_dst * 10**9 + drop_src, drop_src * 10**9 + drop_dst])
    assert torch.equal(kept, full[~torch.isin(full, dropped)])
    assert kept.numel() < full.numel()


def _config(extra=()):
    sets = [f"train.batch_size={BATCH}", "train.fanouts=[4,3]", "train.negatives=2"]
    return link_config("train.engine=minibatch", *sets, "model.name=sage", *extra)


#: (epoch, step) of the steps compared: two epochs, so the negatives' epoch key changes
STEPS = ((0, 0), (0, 1), (1, 0))


def _rank(comm, extra):
    engine = engine_from_config(_config(extra), _graph(), context_of(comm))
    try:
        ev = engine.evaluate()  # at the shared initial parameters
        out = []
        for epoch, step in STEPS:
            stats = engine.train_step(epoch, step, engine.prepare(epoch, step), 0.0)
            grads = {n: p.grad.detach().clone() for n, p in engine.module.named_parameters()}
            out.append((stats.loss_sum, stats.count, grads))
        return {"eval": ev, "steps": out, "n": engine.steps_per_epoch()}
    finally:
        engine.close()


def _reference(world_size, extra):
    """One process: every rank's edge batch on the reference engine's pieces, one loss a step."""
    cfg = _config(extra)
    g = _graph()
    task = task_from_config(cfg, g)
    graph = task.split.train_graph
    model = model_from_config(cfg, graph).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x = torch.from_numpy(np.asarray(graph.x)).double()
    sampler = NeighborSampler(GraphTopology(graph), [4, 3], seed=7)
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
    return out


@pytest.mark.parametrize("world_size", [2, 3])
def test_the_edge_order_of_an_epoch_is_the_same_for_one_rank_and_several(split, world_size):
    """What the reference engine deals (one rank) and a W-rank engine deals, step by step."""
    one = _batches(split, False)
    ranks = [
        EdgeBatches(
            one.task, one.sampler, BATCH // world_size, rank=r, world_size=world_size, seed=3
        )
        for r in range(world_size)
    ]
    for epoch in (0, 1):
        ref = one.loader.epoch_order(epoch)
        dealt = torch.cat(
            [e.loader.batch(epoch, s) for s in range(ranks[0].num_batches) for e in ranks]
        )
        assert torch.equal(dealt, ref)  # the same order, dealt into W slots a step
        assert torch.equal(torch.sort(ref).values, torch.arange(one.task.num_train_pairs()))
    assert not torch.equal(one.loader.epoch_order(0), one.loader.epoch_order(1))


def test_edge_batches_cost_memory_of_the_batch_not_of_the_training_edges(split, tmp_path):
    """Millions of mapped training pairs: building the batches and one batch stay O(batch)."""
    p = 4_000_000  # an order or a copy of the positions would be 32 MB
    big = np.lib.format.open_memmap(tmp_path / "train_pos.npy", "w+", np.int64, (2, p))
    big[:, :] = np.arange(p) % split.train_graph.num_nodes
    big.flush()
    mapped = np.load(tmp_path / "train_pos.npy", mmap_mode="r")
    task = LinkPrediction(split, negatives=2, seed=3)
    task.split = dataclasses.replace(split, pos={**split.pos, "train": mapped})
    sampler = NeighborSampler(GraphTopology(split.train_graph), [2, 2], seed=3)
    tracemalloc.start()
    try:
        edges = EdgeBatches(task, sampler, BATCH, rank=1, world_size=2, seed=3)
        batch = edges.batch(1, edges.num_batches - 1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert edges.num_batches == -(-p // (2 * BATCH)) and BATCH - 1 <= batch.src.numel() <= BATCH
    assert peak < 4 << 20


def test_reference_engine_minibatch_mode_is_the_one_rank_edge_batch():
    cfg = _config()
    g = _graph()
    task = task_from_config(cfg, g)
    graph = task.split.train_graph
    eng_cfg = ReferenceEngineConfig(
        mode="minibatch",
        dtype="float64",
        device="cpu",
        fanouts=(4, 3),
        batch_size=BATCH,
        seed=7,
        feature_norm="none",
    )
    model = model_from_config(cfg, graph)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    eng = build_engine(model, graph, eng_cfg, optimizer=opt, task=task)
    want = _reference(1, [])
    for (epoch, step), (loss, count, grads) in zip(STEPS, want, strict=True):
        stats = eng.train_step(epoch, step)
        assert stats.count == count
        assert stats.loss_sum == pytest.approx(loss, rel=1e-12)
        for n, p in eng.module.named_parameters():
            torch.testing.assert_close(p.grad, grads[n], rtol=1e-10, atol=1e-13)


@pytest.mark.slow
@pytest.mark.parametrize(
    "world_size, cap",
    [(1, None), (2, None), (3, None), (2, 7)],
    ids=["1", "2", "3", "2-capped-device-sampled"],
)
def test_minibatch_engine_link_loss_and_gradients_equal_reference(world_size, cap):
    extra = ["train.device=cpu"]
    if cap is not None:  # capped evaluation, and batches sampled from a CSC replica (torch)
        extra += [f"train.eval_edges={cap}", "store.sampling=device"]
    results = run_world(_rank, world_size, extra, timeout_s=300)
    want = _reference(world_size, extra)
    assert len({r["n"] for r in results}) == 1
    for i, (loss, count, grads) in enumerate(want):
        assert sum(r["steps"][i][1] for r in results) == count
        assert sum(r["steps"][i][0] for r in results) == pytest.approx(loss, rel=1e-10)
        for res in results:  # the synchronised gradient of the step, on every rank
            for n, g in grads.items():
                torch.testing.assert_close(res["steps"][i][2][n], g, rtol=1e-9, atol=1e-12)
    # evaluation: metric sums over ranks equal one process's scores of every pair
    cfg = _config(extra)
    g = _graph()
    task = task_from_config(cfg, g)
    graph = task.split.train_graph
    ref_cfg = ReferenceEngineConfig(
        mode="minibatch", dtype="float64", device="cpu", fanouts=(4, 3), feature_norm="none"
    )
    ref = build_engine(model_from_config(cfg, graph), graph, ref_cfg, task=task)
    want_ev = ref.evaluate()
    for res in results:
        assert res["eval"].keys() == want_ev.keys()
        for k, v in want_ev.items():
            assert res["eval"][k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


def test_model_decoder_is_used_for_edge_batches(split):
    """A model without a decoder is refused by the edge-batch engines in one line."""
    from fleetgnn.errors import ConfigError

    graph = split.train_graph
    enc = build_model("gcn", graph.num_features, 8, hidden_dim=8, dropout=0.0, seed=0)
    cfg = ReferenceEngineConfig(mode="minibatch", fanouts=(3, 3))
    with pytest.raises(ConfigError, match="pair decoder"):
        build_engine(enc, graph, cfg, task=LinkPrediction(split))
    model = LinkModel(enc, DotDecoder())
    assert build_engine(model, graph, cfg, task=LinkPrediction(split)).steps_per_epoch() >= 1
