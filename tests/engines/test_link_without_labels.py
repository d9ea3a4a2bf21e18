"""Link prediction trains on a graph with node features and edges only: no labels, no masks.

Every engine that trains link prediction (static and temporal, homogeneous and typed) gives
exactly the losses and metrics on the label-free graph that it gives on the same graph with
labels and masks: the labels are never read. Node classification refuses the label-free graph
in one line.
"""

import contextlib
import dataclasses

import pytest

from fleetgnn.config.run import LINK_ENGINES, TYPED_LINK_ENGINES
from fleetgnn.distributed import destroy, init
from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines.link import TEMPORAL_ENGINES
from fleetgnn.errors import DatasetError
from fleetgnn.graph.hetero_toy import toy_mag
from fleetgnn.train import engine_from_config

from .link_setup import link_config, link_graph, planted_temporal_graph

#: Batches and fanouts of the sampled modes (a few steps an epoch).
SAMPLED = ("train.batch_size=64", "train.fanouts=[4,3]", "train.negatives=2")
LABELS = ("y", "train_mask", "val_mask", "test_mask")


def _bare(graph):
    """``graph`` without its labels, class count and split masks (features and edges kept)."""
    return dataclasses.replace(graph, y=None, num_classes=None, **dict.fromkeys(LABELS[1:]))


@contextlib.contextmanager
def _context(engine):
    """A one-rank process group of its own for a distributed engine (``None``: reference)."""
    if engine == "reference":
        yield None
        return
    ctx = init(backend="gloo")
    try:
        yield ctx
    finally:
        destroy(ctx)


def _train(cfg, graph, ctx=None, epochs=2):
    """Every step's (loss sum, count, correct) over ``epochs``, then the evaluation."""
    engine = engine_from_config(cfg, graph, ctx)
    try:
        steps = [
            (s.loss_sum, s.count, s.correct) for e in range(epochs) for s in engine.run_epoch(e)
        ]
        return steps, engine.evaluate()
    finally:
        engine.close()


def _same(bare, labelled):
    """Bit-identical steps and metrics (NaN == NaN: a metric with no pairs is NaN in both)."""
    assert bare[0] == labelled[0]
    assert bare[1].keys() == labelled[1].keys()
    for key, want in labelled[1].items():
        got = bare[1][key]
        assert got == want or (got != got and want != want), key


def _one_rank(engine, cfg, graph):
    with _context(engine) as ctx:
        return _train(cfg, graph, ctx)


@pytest.mark.parametrize(
    "engine, mode, extra",
    [
        *((e, m, ()) for e, m in LINK_ENGINES),
        ("minibatch", "minibatch", ("store.placement=presample", "store.device_budget=2KiB")),
        ("split", "minibatch", ("store.placement=presample", "store.device_budget=2KiB")),
    ],
    ids=lambda v: v if isinstance(v, str) else ("presample" if v else "default"),
)
def test_a_static_link_run_reads_no_labels(engine, mode, extra):
    graph = link_graph()
    assert graph.y is not None and graph.train_mask is not None
    cfg = link_config(
        f"train.engine={engine}", f"train.mode={mode}", "model.name=sage", *SAMPLED, *extra
    )
    bare = _one_rank(engine, cfg, _bare(graph))
    _same(bare, _one_rank(engine, cfg, graph))
    assert len(bare[0]) >= 2 and 0.0 <= bare[1]["test_auc"] <= 1.0


@pytest.mark.parametrize("engine, mode", TEMPORAL_ENGINES)
def test_a_temporal_link_run_reads_no_labels(engine, mode):
    graph, _, _ = planted_temporal_graph()
    assert graph.y is not None and graph.edge_time is not None
    cfg = link_config(
        f"train.engine={engine}",
        f"train.mode={mode}",
        "train.temporal=on",
        "model.name=sage",
        *SAMPLED,
        "train.batch_size=256",  # a few steps: time-split evaluation is most of the run
    )
    bare = _one_rank(engine, cfg, _bare(graph))
    _same(bare, _one_rank(engine, cfg, graph))
    assert len(bare[0]) >= 2 and 0.0 <= bare[1]["test_auc"] <= 1.0


def _typed_graph():
    return toy_mag(num_papers=60, num_authors=30, num_fields=5, featureless_fields=True, seed=4)


@pytest.mark.parametrize("engine", TYPED_LINK_ENGINES)
def test_a_typed_link_run_reads_no_labels(engine):
    graph = _typed_graph()
    assert graph.y is not None and graph.train_mask is not None
    mode = "minibatch"
    cfg = link_config(
        f"train.engine={engine}",
        f"train.mode={mode}",
        "model.name=rgcn",
        "model.dropout=0",
        "train.link_relation=writes",
        "train.batch_size=8",
        "train.fanouts=[3,3]",
    )
    bare = _one_rank(engine, cfg, _bare(graph))
    _same(bare, _one_rank(engine, cfg, graph))
    assert 0.0 <= bare[1]["test_auc"] <= 1.0


@pytest.mark.parametrize("engine", ["reference", "minibatch", "fullgraph"])
def test_node_classification_refuses_a_graph_without_labels_in_one_line(engine):
    cfg = link_config(f"train.engine={engine}", "train.task=node", "model.name=sage")
    with _context(engine) as ctx, pytest.raises(DatasetError) as caught:
        engine_from_config(cfg, _bare(link_graph()), ctx)
    msg = str(caught.value)
    assert "\n" not in msg
    assert msg.startswith("dataset 'tiny@0.3' has no labels (y); node classification trains")
    assert "--task link" in msg


def _rank(comm):
    """This rank's steps and evaluation on the label-free graph and on the labelled one."""
    cfg = link_config("train.engine=minibatch", "model.name=sage", *SAMPLED)
    graph = link_graph()
    return [_train(cfg, g, context_of(comm)) for g in (_bare(graph), graph)]


@pytest.mark.slow
def test_a_two_rank_minibatch_link_run_reads_no_labels():
    results = run_world(_rank, 2, timeout_s=300)
    for bare, labelled in results:
        _same(bare, labelled)
    # the ranks evaluate together: one result, on both ranks
    assert results[0][0][1] == results[1][0][1]
