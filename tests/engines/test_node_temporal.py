"""Temporal node classification on the reference engine: every seed sampled at its node time."""

import re

import numpy as np
import pytest
import torch

from fleetgnn.config import (
    FullGraphEngineConfig,
    OffloadEngineConfig,
    ReferenceEngineConfig,
)
from fleetgnn.engines import build_engine
from fleetgnn.engines.link import TEMPORAL_NODE_ENGINES
from fleetgnn.engines.metric_sums import MetricSums
from fleetgnn.engines.temporal_node import (
    check_node_times,
    split_nodes,
    temporal_node_metrics,
    temporal_node_rows,
)
from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.sampling import NeighborSampler, TemporalSampler
from fleetgnn.tasks import NodeClassification, TemporalNodeClassification
from fleetgnn.train import engine_from_config, load_config
from fleetgnn.train.setup import model_from_config, task_from_config

from .node_time_setup import (
    PairTimes,
    Recording,
    block_edges,
    future_edges,
    node_time_config,
    planted_graph,
)


@pytest.fixture(scope="module")
def planted():
    return planted_graph()


def _engine(graph, *sets):
    cfg = node_time_config("train.engine=reference", "train.mode=minibatch", *sets)
    return engine_from_config(cfg, graph)


def test_no_training_evaluation_or_inference_block_holds_an_edge_of_its_seeds_time(planted):
    """Training steps, evaluation and infer() (predict's rows) of the reference engine, with every
    earlier in-edge of a seed taken (fanout -1 at the first hop); the plain sampler puts the
    planted edges in their seed's block, the temporal one never."""
    graph, plant = planted
    eng = _engine(graph, "train.fanouts=[-1,3]")
    assert isinstance(eng.task, TemporalNodeClassification)
    rec = eng.sampler = Recording(eng.sampler)
    eng.run_epoch(0)
    n_train = len(rec.samples)
    assert n_train == eng.steps_per_epoch()
    ev = eng.evaluate()
    n_eval = len(rec.samples) - n_train
    assert 0.0 <= ev["val_acc"] <= 1.0 and n_eval == -(-split_nodes(graph).size // 2048)
    logits = eng.infer(chunk_size=500)
    assert logits.shape == (graph.num_nodes, graph.num_classes)
    pairs = PairTimes(graph)
    node_time = torch.from_numpy(np.asarray(graph.node_time))
    b = plant.dst[0]
    seeded = 0
    for sample in rec.samples:
        assert future_edges(sample, pairs, plant, graph.node_time) == (0, 0)
        seeds = sample.blocks[-1].dst_ids
        assert torch.equal(sample.seed_time, node_time[seeds])  # every seed at its node time
        seeded += int((seeds == b).sum())
    assert seeded == 3  # b trained once, evaluated once, inferred once
    # the same step sampled by the plain sampler: the planted edges are in b's block ...
    plain = NeighborSampler(eng.topology, [-1, 3], seed=eng.seed)
    step = next(s for s in range(n_train) if bool((eng.loader.batch(0, s) == b).any()))
    seeds = eng.loader.batch(0, step)
    blocks = plain.sample_from_nodes(seeds, epoch=0, step=step).blocks
    s, d, _ = block_edges(blocks[-1])
    assert {(a, b) for a in plant.src} <= set(zip(s.tolist(), d.tolist(), strict=True))
    # ... and the check finds them in the blocks of seeds after every edge (the plain draws)
    late = rec.inner.sample_from_nodes(
        seeds, seed_time=torch.full_like(seeds, 10**6), epoch=0, step=step
    )
    s2, d2, _ = block_edges(late.blocks[-1])  # the seeds' in-edges: every one, as plain takes
    assert sorted(zip(s2.tolist(), d2.tolist())) == sorted(zip(s.tolist(), d.tolist()))
    bad, hit = future_edges(late, pairs, plant, graph.node_time)
    assert bad > 0 and hit >= len(plant.src)


def test_a_step_trains_the_seeds_at_their_times_and_the_times_matter(planted):
    graph, _ = planted
    eng = _engine(graph)
    aggs, x, seeds, _ = eng.batch(1, 2)
    assert torch.equal(seeds, eng.loader.batch(1, 2))
    assert aggs[-1].num_dst == seeds.numel()
    stats = eng.run_epoch(0)
    assert all(np.isfinite(s.loss_sum) for s in stats)
    # with every node at time 0 no seed has an earlier in-edge: its blocks are empty
    early = graph.replace(node_time=np.zeros(graph.num_nodes, np.int64))
    eng0 = _engine(early)
    aggs0, _, _, _ = eng0.batch(1, 2)
    assert all(a.num_edges == 0 for a in aggs0) and aggs[-1].num_edges > 0


def test_evaluation_is_every_split_node_at_its_time_whatever_the_chunking(planted):
    graph, _ = planted
    cfg = node_time_config()
    task = task_from_config(cfg, graph)
    model = model_from_config(cfg, graph).double()
    sampler = TemporalSampler(graph, [4, 3], seed=9)
    x = torch.as_tensor(np.asarray(graph.x), dtype=torch.float64)
    kw = {"dtype": torch.float64, "device": torch.device("cpu")}
    whole = temporal_node_metrics(model, sampler, task, lambda i: x[i], graph, chunk=4096, **kw)
    small = temporal_node_metrics(model, sampler, task, lambda i: x[i], graph, chunk=7, **kw)
    assert small == pytest.approx(whole, rel=1e-12)
    assert model.training  # put back in training mode
    # by hand: each node embedded alone at its time, its rows into the same sums
    nodes = split_nodes(graph)
    assert nodes.size == int(np.asarray(graph.train_mask | graph.val_mask | graph.test_mask).sum())
    sums = MetricSums(graph)
    for v in nodes[::25]:
        temporal_node_rows(model, sampler, task, lambda i: x[i], np.array([v]), sums, **kw)
    part = MetricSums(graph)
    temporal_node_rows(model, sampler, task, lambda i: x[i], nodes[::25], part, chunk=5, **kw)
    torch.testing.assert_close(part.sums, sums.sums, rtol=1e-12, atol=1e-12)


def _refused(config):
    graph, _ = planted_graph(scale=0.001)
    task = TemporalNodeClassification(graph.node_time)
    model = model_from_config(node_time_config(), graph)
    with pytest.raises(ConfigError) as e:
        build_engine(model, graph, config, task=task)
    return str(e.value)


@pytest.mark.parametrize(
    ("config", "why"),
    [
        (FullGraphEngineConfig(), "a full graph has no 'now'"),
        (OffloadEngineConfig(), "a full graph has no 'now'"),
        (ReferenceEngineConfig(mode="full"), "a full graph has no 'now'"),
    ],
    ids=["fullgraph", "offload", "reference-full"],
)
def test_engines_that_cannot_sample_in_time_refuse_in_one_line(config, why):
    msg = _refused(config)
    assert "\n" not in msg and why in msg and "temporal node classification" in msg
    can = ", ".join(f"{e} \\(mode={m}\\)" for e, m in TEMPORAL_NODE_ENGINES)
    assert re.search(f"use {can}, or set train.temporal=off to ignore the node and edge", msg)


def test_train_temporal_knob_picks_the_node_task():
    graph, _ = planted_graph(scale=0.001)
    auto = load_config(None, [])
    assert auto.train.temporal == "auto"
    task = task_from_config(auto, graph)
    assert isinstance(task, TemporalNodeClassification) and task.strategy == "uniform"
    last = load_config(None, ["train.temporal_strategy=last"])
    assert task_from_config(last, graph).strategy == "last"
    off_cfg = load_config(None, ["train.temporal=off"])
    assert type(task_from_config(off_cfg, graph)) is NodeClassification
    on = load_config(None, ["train.temporal=on"])
    with pytest.raises(ConfigError, match="train.temporal=on for node classification needs node"):
        task_from_config(on, graph.replace(node_time=None))
    assert type(task_from_config(auto, graph.replace(node_time=None))) is NodeClassification
    untimed_edges = graph.replace(edge_time=None)  # node times alone (ogbn-arxiv's years)
    with pytest.raises(ConfigError, match="has node times .* but no edge times") as e:
        task_from_config(on, untimed_edges)
    assert "train.temporal=off" in str(e.value)
    assert type(task_from_config(auto, untimed_edges)) is NodeClassification  # not usable
    assert type(task_from_config(off_cfg, untimed_edges)) is NodeClassification


def test_engine_takes_the_strategy_and_checks_the_times():
    graph, _ = planted_graph(scale=0.001)
    with _engine(graph, "train.temporal_strategy=last", "train.fanouts=[2,2]") as eng:
        assert eng.sampler.strategy == "last" and eng.task.strategy == "last"
    other = generate_graph(spec_for("tiny", 0.3), seed=4)
    with pytest.raises(ConfigError, match="has 1000 node times but graph"):
        check_node_times(TemporalNodeClassification(graph.node_time), other)
    with pytest.raises(ConfigError, match="no edge times"):
        check_node_times(TemporalNodeClassification(graph.node_time), graph.replace(edge_time=None))
    with pytest.raises(ConfigError, match="temporal_strategy"):
        TemporalNodeClassification(graph.node_time, strategy="first")
    with pytest.raises(GraphError, match="must be int64"):
        TemporalNodeClassification(np.zeros(3, np.int32))
