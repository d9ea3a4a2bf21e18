"""The planner prices temporal tasks: its replay samples what the engines' temporal samplers
sample (exact counts, on a small graph), and its reason says it priced a temporal task."""

import dataclasses

import numpy as np
import pytest
import torch

from fleetgnn.cli.plan import temporal_seeds
from fleetgnn.config.units import UNLIMITED
from fleetgnn.cost import make_plan
from fleetgnn.cost.hardware import HardwareProfile
from fleetgnn.cost.planner import workload_from_config
from fleetgnn.cost.replay import minibatch_counts, split_counts
from fleetgnn.cost.workload import NodeTimeSeeds, TemporalSeeds
from fleetgnn.engines.link import EdgeBatches
from fleetgnn.engines.temporal_link import LinkTimeSeeds
from fleetgnn.engines.temporal_node import node_blocks
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.graph.time_split import split_by_time
from fleetgnn.sampling import GraphTopology, SeedLoader, TemporalSampler
from fleetgnn.tasks import TemporalNodeClassification
from fleetgnn.tasks.temporal_link import TemporalLinkPrediction
from fleetgnn.train import load_config

FANOUTS = (4, 3)
SEED = 3
#: A CPU machine (the built-in profiles are GPU ones), no temporal rate measured.
CPU = HardwareProfile(
    name="test-cpu",
    kind="cpu",
    num_devices=2,
    peer=[[2e10, 5e9], [5e9, 2e10]],
    device_memory=8 << 30,
    host_memory=16 << 30,
    bandwidth={"local": 2e10, "h2d": 1e10, "d2h": 1e10, "net": 5e9, "disk": 1e9},
    gather_rate=5e9,
    spmm_rate=2e9,
    gemm_rate=1e11,
)


@pytest.fixture(scope="module")
def graph():
    """The temporal-like graph (edge and node times), 1,000 nodes."""
    return generate_graph(spec_for("temporal-like", 0.001), seed=5)


def _sizes(blocks):
    """What the replay counts of one step: input rows, edges and rows per layer."""
    return (
        int(blocks[0].num_src),
        tuple(int(b.indices.numel()) for b in blocks),
        tuple(int(b.num_src) for b in blocks),
    )


def _engine_steps(sampler, steps, world, draw):
    """Every rank's steps of epoch 0 as the engine samples them: their sizes, rank-major."""
    return [_sizes(draw(sampler, r, s)) for r in range(world) for s in range(steps)]


def _check(counts, sizes, world):
    """``counts`` (a replay) holds exactly the sizes of the engine's ``sizes`` (every step)."""
    assert counts.exact and counts.steps * world == len(sizes)
    rows = [s[0] for s in sizes]
    edges = [sum(s[1]) for s in sizes]
    nodes = [sum(s[2]) for s in sizes]
    assert counts.max_input_rows == max(rows)
    assert counts.max_edges == max(edges)
    assert counts.max_nodes == max(nodes)
    n = len(sizes)
    assert counts.input_rows == sum(rows) / n
    assert counts.edges == sum(edges) / n
    assert counts.nodes == sum(nodes) / n
    per_layer = np.sum([s[1] for s in sizes], axis=0)
    assert counts.layer_edges == tuple(float(e) / n for e in per_layer)


@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_node_replay_samples_what_the_engine_samples(graph, strategy):
    """Every training node at its node time, one subtree each: the replay's counts are the
    engine's (:func:`node_blocks` over a temporal sampler with the rank as stream)."""
    world, batch = 2, 64
    task = TemporalNodeClassification(graph.node_time, strategy=strategy)
    temporal = NodeTimeSeeds(graph, seed=SEED, strategy=strategy)
    sampler = TemporalSampler(GraphTopology(graph), list(FANOUTS), seed=SEED, strategy=strategy)
    train = torch.from_numpy(np.flatnonzero(np.asarray(graph.train_mask)))
    loaders = [SeedLoader(train, batch, rank=r, world_size=world, seed=SEED) for r in range(2)]

    def draw(sampler, r, s):
        return node_blocks(sampler, task, loaders[r].batch(0, s), 0, s, stream=r)

    sizes = _engine_steps(sampler, loaders[0].num_batches, world, draw)
    counts = minibatch_counts(
        graph,
        world,
        batch_size=batch,
        fanouts=FANOUTS,
        seed=SEED,
        device_budget=UNLIMITED,
        host_budget=UNLIMITED,
        temporal=temporal,
    )
    _check(counts, sizes, world)
    # disjoint subtrees: more rows than distinct nodes can make, unlike the plain replay
    plain = minibatch_counts(
        graph,
        world,
        batch_size=batch,
        fanouts=FANOUTS,
        seed=SEED,
        device_budget=UNLIMITED,
        host_budget=UNLIMITED,
    )
    assert counts.input_rows != plain.input_rows
    # split: the reference's global step (stream 0) on every rank
    one = SeedLoader(train, batch, seed=SEED)
    _check(
        split_counts(graph, 2, batch_size=batch, fanouts=FANOUTS, seed=SEED, temporal=temporal),
        _engine_steps(
            sampler,
            one.num_batches,
            1,
            lambda smp, r, s: node_blocks(smp, task, one.batch(0, s), 0, s, stream=0),
        ),
        1,
    )


def test_link_replay_samples_what_the_engine_samples(graph):
    """Both endpoints and the negatives of every positive at the positive's time, over the time
    split's training graph: the replay's counts are :class:`EdgeBatches`'."""
    world, batch = 2, 48
    task = TemporalLinkPrediction(split_by_time(graph, 0.1, 0.1, SEED), negatives=2, seed=SEED)
    train = task.split.train_graph
    temporal = LinkTimeSeeds(task, seed=SEED)
    assert isinstance(temporal, TemporalSeeds) and temporal.graph is train
    sampler = TemporalSampler(GraphTopology(train), list(FANOUTS), seed=SEED)
    edges = [
        EdgeBatches(task, sampler, batch, rank=r, world_size=world, seed=SEED) for r in range(world)
    ]

    def draw(sampler, r, s):
        return edges[r].batch(0, s).blocks

    sizes = _engine_steps(sampler, edges[0].num_batches, world, draw)
    counts = minibatch_counts(
        train,
        world,
        batch_size=batch,
        fanouts=FANOUTS,
        seed=SEED,
        device_budget=UNLIMITED,
        host_budget=UNLIMITED,
        temporal=temporal,
    )
    _check(counts, sizes, world)
    assert temporal.num_items == task.num_train_pairs()
    one = EdgeBatches(task, sampler, batch, seed=SEED)  # split: the reference's batch
    _check(
        split_counts(train, 2, batch_size=batch, fanouts=FANOUTS, seed=SEED, temporal=temporal),
        _engine_steps(sampler, one.num_batches, 1, lambda smp, r, s: one.batch(0, s).blocks),
        1,
    )


def _cfg(*sets):
    return load_config(
        None, ["train.batch_size=64", "train.fanouts=[4,3]", f"train.seed={SEED}", *sets]
    )


@pytest.mark.parametrize("task", ["node", "link"])
def test_the_reason_names_the_temporal_pricing(graph, task):
    """A temporal workload (from the run's config) is replayed in time and the reason says so,
    naming the rate: the profile's temporal sampler's, or the plain one's where not measured."""
    cfg = _cfg(f"train.task={task}")
    temporal = temporal_seeds(cfg, graph)
    assert temporal is not None and temporal.kind == task
    wl = workload_from_config(cfg, graph=graph, temporal=temporal)
    assert wl.temporal is temporal and wl.task == task and "temporal" in wl.source
    hw = dataclasses.replace(CPU, temporal_sample_rate=1e6)
    plan = make_plan(wl, hw, 1, mode="minibatch", engines=["minibatch"])
    assert plan.choice == "minibatch"
    assert f"Priced a temporal {task} task" in plan.reason
    assert "temporal sampler's 1e+06 sampled edges/s" in plan.reason
    pred = plan.predictions["minibatch"]
    assert pred.knobs["sampler"] == f"temporal {task} (uniform)"
    edges = pred.knobs["sampled_edges"]
    # priced on the replay's mean edges per step (the knob rounds it to an int)
    assert pred.breakdown["sample"] == pytest.approx(edges * pred.steps / 1e6, abs=pred.steps / 2e6)
    assert f"{edges:,} sampled edges per step and rank" in plan.reason
    unmeasured = make_plan(wl, CPU, 1, mode="minibatch", engines=["minibatch"])
    assert "did not measure the temporal sampler" in unmeasured.reason
    # the slower temporal rate costs its sampling time, nothing else
    ratio = unmeasured.predictions["minibatch"].breakdown["sample"] / pred.breakdown["sample"]
    assert ratio == pytest.approx(1e6 / float(CPU.sample_rate))


def test_a_static_task_is_not_priced_in_time(graph):
    """``train.temporal=off``: no temporal seeds, the plain replay, no temporal sentence."""
    cfg = _cfg("train.temporal=off")
    assert temporal_seeds(cfg, graph) is None
    wl = workload_from_config(cfg, graph=graph)
    plan = make_plan(wl, CPU, 1, mode="minibatch", engines=["minibatch"])
    assert "temporal" not in plan.reason and "sampler" not in plan.predictions["minibatch"].knobs
