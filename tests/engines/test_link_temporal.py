"""Temporal link prediction on the engines: no block sees the future, pairs scored at their time."""

import re

import numpy as np
import pytest
import torch

from fleetgnn.config import (
    FullGraphEngineConfig,
    OffloadEngineConfig,
    ReferenceEngineConfig,
    load_config,
)
from fleetgnn.engines import build_engine
from fleetgnn.engines.temporal_link import EVAL_STREAM, embed_at, temporal_link_metrics
from fleetgnn.errors import ConfigError
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.graph.time_split import split_by_time
from fleetgnn.nn import build_model
from fleetgnn.nn.decoders import DotDecoder, LinkModel
from fleetgnn.sampling import TemporalSampler
from fleetgnn.tasks import LinkPrediction, TemporalLinkPrediction
from fleetgnn.tasks.link_metrics import auc_ap, histogram_sums, ranking_metrics, ranking_sums
from fleetgnn.train import engine_from_config
from fleetgnn.train.setup import task_from_config

from .link_setup import planted_temporal_graph


def _model(graph, seed=0):
    torch.manual_seed(seed)
    enc = build_model("sage", graph.num_features, 8, hidden_dim=8, dropout=0.2, seed=seed)
    return LinkModel(enc, DotDecoder())


def _config(**kw):
    base = {"mode": "minibatch", "dtype": "float64", "device": "cpu", "feature_norm": "none"}
    return ReferenceEngineConfig(**{**base, "batch_size": 64, "fanouts": (5, 5), **kw})


class _Recording:
    """A temporal sampler that records every sample (its blocks carry edge IDs)."""

    def __init__(self, inner):
        self.inner, self.samples = inner, []

    def sample_from_nodes(self, *args, **kwargs):
        out = self.inner.sample_from_nodes(*args, **kwargs)
        self.samples.append(out)
        return out

    def sample_from_edges(self, *args, **kwargs):
        out = self.inner.sample_from_edges(*args, **kwargs)
        self.samples.append(out.sample)
        return out


def _pairs(nodes, times):
    """The set of ``(node, time)`` seeds."""
    return set(zip(nodes.tolist(), times.tolist(), strict=True))


def _record(eng, fanouts):
    rec = _Recording(TemporalSampler(eng.topology, list(fanouts), eng.seed, with_edge_ids=True))
    eng.sampler = eng.edges.sampler = rec
    return rec


@pytest.mark.parametrize("fanouts", [(5, 5), (-1, -1)])
def test_no_training_or_evaluation_block_holds_an_edge_of_its_time_or_later(fanouts):
    g, (a, b), plant = planted_temporal_graph()
    split = split_by_time(g, 0.1, 0.1, seed=1)
    assert split.cuts[0] == plant + 1
    task = TemporalLinkPrediction(split, negatives=2, seed=3, eval_edges=150)
    tg = split.train_graph
    eng = build_engine(_model(tg), tg, _config(fanouts=fanouts), task=task)
    rec = _record(eng, fanouts)
    plain = eng.sampler.inner
    eng.run_epoch(0)
    n_train = len(rec.samples)
    ev = eng.evaluate()
    assert 0.0 <= ev["val_auc"] <= 1.0 and 0.0 <= ev["test_mrr"] <= 1.0
    assert n_train == eng.steps_per_epoch() and len(rec.samples) > n_train
    times = torch.from_numpy(np.asarray(tg.edge_time))
    src = torch.from_numpy(np.asarray(tg.indices, np.int64))
    planted = torch.nonzero((src == a) | (src == b)).reshape(-1)
    dst_of = torch.from_numpy(np.repeat(np.arange(tg.num_nodes), np.diff(tg.indptr)))
    planted = planted[(dst_of[planted] == a) | (dst_of[planted] == b)]
    assert planted.numel() == 2 and bool((times[planted] == plant).all())
    seen_in = {"train": 0, "eval": 0}
    for i, sample in enumerate(rec.samples):
        for layer, block in enumerate(sample.blocks):
            dst = torch.repeat_interleave(torch.arange(block.num_dst), block.indptr.diff())
            t_dst = sample.src_time(layer)[dst]  # the time of each edge's subtree
            eids = block.edge_ids
            assert bool((times[eids] < t_dst).all()), "a block holds an edge of its time or later"
            # the edge IDs are the blocks' edges
            assert torch.equal(src[eids], block.src_ids[block.indices])
            assert torch.equal(dst_of[eids], block.src_ids[dst])
            hit = torch.isin(eids, planted)
            seen_in["train" if i < n_train else "eval"] += int(hit.sum())
            assert bool((t_dst[hit] > plant).all())
    # every sample was seeded at its pairs' times: training steps at their positives' ...
    for step in range(n_train):
        idx = eng.edges.loader.batch(0, step)
        s_, d_ = task.train_pair_rows(idx)
        t_ = task.train_pair_times(idx)
        n_ = task.sampler.sample(s_, d_, 0)
        want = _pairs(
            torch.cat([s_, d_, n_.reshape(-1)]), torch.cat([t_, t_, t_.repeat_interleave(2)])
        )
        got = rec.samples[step]
        assert _pairs(got.blocks[-1].dst_ids, got.seed_time) == want
    # ... and evaluation at its queries'
    want = set()
    for s in ("val", "test"):
        pos, neg, nd, t = (torch.from_numpy(np.asarray(v, np.int64)) for v in task.eval_queries(s))
        k = nd.shape[1]
        nodes = torch.cat([pos[0], pos[1], neg[0], neg[1], nd.reshape(-1)])
        want |= _pairs(nodes, torch.cat([t.repeat(4), t.repeat_interleave(k)]))
    got = set()
    for sample in rec.samples[n_train:]:
        got |= _pairs(sample.blocks[-1].dst_ids, sample.seed_time)
    assert got == want
    # evaluation pairs (after the cut) see the planted edge when every candidate is taken
    if fanouts == (-1, -1):
        assert seen_in["eval"] > 0
    # the temporal sampler is the engine's, with its seed and fanouts
    assert plain.fanouts == list(fanouts) or tuple(plain.fanouts) == fanouts


def test_a_step_seeds_positives_and_negatives_at_the_positive_time():
    g, _, _ = planted_temporal_graph()
    split = split_by_time(g, 0.1, 0.1, seed=1)
    task = TemporalLinkPrediction(split, negatives=3, seed=3)
    tg = split.train_graph
    eng = build_engine(_model(tg), tg, _config(), task=task)
    batch = eng.edges.batch(2, 1)
    idx = eng.edges.loader.batch(2, 1)
    src, dst = task.train_pair_rows(idx)
    t = task.train_pair_times(idx)
    neg = task.sampler.sample(src, dst, 2)
    seeds, seed_time = batch.seeds, batch.sample.seed_time
    assert torch.equal(seeds[batch.src], src) and torch.equal(seeds[batch.dst], dst)
    assert torch.equal(seeds[batch.neg], neg)
    assert torch.equal(seed_time[batch.src], t) and torch.equal(seed_time[batch.dst], t)
    assert torch.equal(seed_time[batch.neg], t[:, None].expand_as(neg))
    # distinct (node, time) seeds, every block's output is the seeds
    pairs = torch.stack([seed_time, seeds], 1)
    assert torch.unique(pairs, dim=0).shape[0] == seeds.numel()
    assert torch.equal(batch.blocks[-1].dst_ids, seeds)
    assert batch.global_count == src.numel()
    stats = eng.run_epoch(0)
    assert all(np.isfinite(s.loss_sum) for s in stats)


def test_evaluation_scores_every_query_at_its_time_whatever_the_chunking():
    g, _, _ = planted_temporal_graph()
    split = split_by_time(g, 0.1, 0.1, seed=1, ranking_negatives=5)
    task = TemporalLinkPrediction(split, seed=3, eval_edges=40)
    tg = split.train_graph
    model = _model(tg).double().eval()
    sampler = TemporalSampler(tg, [4, 3], seed=9)
    x = torch.as_tensor(np.asarray(tg.x), dtype=torch.float64)

    def feats(ids):
        return x[ids]

    kw = {"dtype": torch.float64, "device": torch.device("cpu")}
    got = temporal_link_metrics(task, model, sampler, feats, chunk=7, **kw)
    whole = temporal_link_metrics(task, model, sampler, feats, chunk=1000, **kw)
    assert got == pytest.approx(whole, rel=1e-12)  # equal up to the order of the sums
    # by hand: every endpoint embedded alone, at its positive's time
    want = {}
    for s in ("val", "test"):
        pos, neg, nd, t = task.eval_queries(s)

        def emb(node, time):
            seeds = torch.tensor([int(node)])
            times = torch.tensor([int(time)])
            return embed_at(model, sampler, feats, seeds, times, **kw)[0]

        with torch.no_grad():
            ps = torch.stack([model.decoder(emb(u, tt), emb(v, tt)) for u, v, tt in zip(*pos, t)])
            ns = torch.stack([model.decoder(emb(u, tt), emb(v, tt)) for u, v, tt in zip(*neg, t)])
            rn = torch.stack(
                [
                    torch.stack([model.decoder(emb(u, tt), emb(w, tt)) for w in row])
                    for u, row, tt in zip(pos[0], nd, t)
                ]
            )
        want[f"{s}_auc"], want[f"{s}_ap"] = auc_ap(histogram_sums(ps, ns))
        want.update(ranking_metrics(ranking_sums(ps, rn), s))
    assert got == pytest.approx(want, rel=1e-12)
    assert EVAL_STREAM > 1 << 16  # no training rank's stream


def _task(g):
    return TemporalLinkPrediction(split_by_time(g, 0.1, 0.1, seed=1))


@pytest.mark.parametrize(
    ("config", "why"),
    [
        (FullGraphEngineConfig(), "a full graph has no 'now'"),
        (OffloadEngineConfig(), "a full graph has no 'now'"),
        (ReferenceEngineConfig(mode="full"), "a full graph has no 'now'"),
    ],
)
def test_engines_that_cannot_sample_in_time_refuse_in_one_line(config, why):
    g, _, _ = planted_temporal_graph()
    task = _task(g)
    with pytest.raises(ConfigError) as e:
        build_engine(_model(task.split.train_graph), task.split.train_graph, config, task=task)
    msg = str(e.value)
    assert "\n" not in msg and why in msg
    assert re.search(
        r"use reference \(mode=minibatch\), minibatch \(mode=minibatch\), split "
        r"\(mode=minibatch\), or set train.temporal=off",
        msg,
    ), msg


def test_the_task_refuses_a_static_split_and_whole_graph_scoring():
    g, _, _ = planted_temporal_graph()
    task = _task(g)
    with pytest.raises(ConfigError, match="needs a time split"):
        TemporalLinkPrediction(object())
    with pytest.raises(ConfigError, match="scores each pair at its own time"):
        task.evaluate(torch.zeros(g.num_nodes, 2), DotDecoder())


def test_train_temporal_knob_picks_the_split(tmp_path):
    g, _, _ = planted_temporal_graph()
    cfg = load_config(None, ["train.task=link", "train.val_edges=0.1", "train.test_edges=0.1"])
    assert cfg.train.temporal == "auto"
    assert isinstance(task_from_config(cfg, g), TemporalLinkPrediction)
    on = load_config(None, ["train.task=link", "train.temporal=on"])
    assert isinstance(task_from_config(on, g), TemporalLinkPrediction)
    off = load_config(None, ["train.task=link", "train.temporal=off"])
    task = task_from_config(off, g)
    assert isinstance(task, LinkPrediction) and not isinstance(task, TemporalLinkPrediction)
    assert task.split.train_graph.edge_time is None  # the times are ignored
    untimed = g.replace(edge_time=None)
    assert type(task_from_config(cfg, untimed)) is LinkPrediction
    with pytest.raises(ConfigError, match="train.temporal=on needs edge times"):
        task_from_config(on, untimed)
    with pytest.raises(ConfigError, match="temporal"):
        load_config(None, ["train.temporal=sometimes"])


def test_train_temporal_strategy_reaches_the_sampler():
    """train.temporal_strategy=last: the engine samples each node's most recent in-edges."""
    g = generate_graph(spec_for("temporal-like", 0.002), seed=5)
    sets = ["train.task=link", "train.engine=reference", "train.mode=minibatch", "train.seed=3"]
    sets.append("train.fanouts=[2,2]")
    src = {}
    for strategy in ("uniform", "last"):
        cfg = load_config(None, [*sets, f"train.temporal_strategy={strategy}"])
        assert task_from_config(cfg, g).strategy == strategy
        with engine_from_config(cfg, g) as eng:
            assert eng.task.strategy == eng.sampler.strategy == strategy
            src[strategy] = [b.src_ids for b in eng.edges.batch(0, 0).blocks]
    assert any(not torch.equal(a, b) for a, b in zip(src["uniform"], src["last"]))
    with pytest.raises(ConfigError, match="temporal_strategy"):
        load_config(None, ["train.temporal_strategy=first"])
