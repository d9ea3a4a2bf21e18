"""Temporal node classification on the sampled engines: every seed sampled at its node time.

A :class:`~fleetgnn.tasks.TemporalNodeClassification` trains on the engines and modes of
:data:`~fleetgnn.engines.link.TEMPORAL_NODE_ENGINES`; every other one refuses it in one line
(:func:`~fleetgnn.engines.link.check_temporal`): a full graph has no "now".

- Training (:func:`node_blocks`): a step's seeds are the training nodes
  :class:`~fleetgnn.sampling.SeedLoader` deals, as for static node classification; the
  :class:`~fleetgnn.sampling.TemporalSampler` samples each seed's subtree at the seed's node time
  (strict ``<``: no block holds an edge of that time or later) with the keys of the plain
  sampler (``stream`` = the rank). Seeds are distinct nodes, so ``blocks[-1].dst_ids`` are the
  seeds and the loss is the static task's.
- Evaluation, ``predict`` and ``embed`` (:func:`temporal_node_rows`): every node of a list (the
  splits' nodes to evaluate, every node to export) is embedded at its node time, in chunks of
  :data:`~fleetgnn.engines.temporal_link.EVAL_CHUNK` nodes, with the training fanouts and one
  fixed key (``epoch=0, step=0``, stream :data:`~fleetgnn.engines.temporal_link.EVAL_STREAM`),
  so a node's subtree depends neither on the chunking nor on how the nodes are shared between
  ranks; the model runs in eval mode (no dropout). Rank ``r`` of ``W`` takes a contiguous share
  of the list, and every rank runs as many chunks as the largest share needs (a shorter share's
  last ones are empty), so a store whose reads are collective is read equally often everywhere.
  Evaluation passes the rows to :class:`~fleetgnn.engines.metric_sums.MetricSums`, whose sums are
  all-reduced: every rank reports the numbers one process would.
- On ``split`` every rank draws the reference's step (its seeds at their node times, stream 0)
  and computes the ``(seed, node)`` rows whose node it owns (:mod:`fleetgnn.engines.split`);
  ``minibatch`` and ``split`` evaluate through :func:`sampled_temporal_node_metrics`.

A :class:`~fleetgnn.tasks.TypedTemporalNodeClassification` is the same task on a typed graph's
target type, trained by the typed engines and modes of :data:`TYPED_TEMPORAL_NODE_ENGINES`
(:mod:`fleetgnn.engines.typed`; the others refuse it in one line naming them and
``train.temporal=off``, :func:`check_typed_temporal`). Its seeds are target-type nodes, sampled
by a :class:`~fleetgnn.sampling.TypedTemporalSampler` at their node times in every relation with
the typed sampler's keys (:func:`node_blocks`: the task shifts the seeds to type-local IDs for
their times), so the last block's target-type destinations are the seeds in batch order.
Evaluation (:func:`typed_temporal_node_metrics`) is :func:`temporal_node_metrics` with the typed
model run on each typed sample; its input rows are read from the typed graph's arrays (as typed
streaming evaluation reads them), so no read is collective.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fleetgnn.engines.chunks import rank_range
from fleetgnn.engines.common import SPLITS
from fleetgnn.engines.edges import EdgeRows, block_aggregator
from fleetgnn.engines.inference import Sink
from fleetgnn.engines.link import temporal_refusal
from fleetgnn.engines.metric_sums import MetricSums
from fleetgnn.engines.temporal_link import EVAL_CHUNK, EVAL_STREAM
from fleetgnn.errors import ConfigError
from fleetgnn.graph import Graph
from fleetgnn.graph.hetero import HeteroGraph
from fleetgnn.sampling import Sampler, TypedTemporalSampler
from fleetgnn.tasks import (
    NodeClassification,
    Task,
    TemporalNodeClassification,
    TypedTemporalNodeClassification,
)

#: Nodes read per step when listing the splits' nodes (:func:`split_nodes`).
_MASK_BLOCK = 1 << 22
#: ``(engine, mode)`` pairs that train a typed temporal node task.
TYPED_TEMPORAL_NODE_ENGINES: tuple[tuple[str, str], ...] = (
    ("reference", "minibatch"),
    ("minibatch", "minibatch"),
)


def is_temporal_node(task: Task | None) -> bool:
    """Whether ``task`` is a temporal node task."""
    return isinstance(task, TemporalNodeClassification)


def check_node_times(task: TemporalNodeClassification, graph: Graph) -> None:
    """Raise :class:`ConfigError` unless ``graph`` can be sampled at ``task``'s node times.

    The task's times must be one per node of ``graph``, and ``graph`` must have edge times (the
    sampler keeps the in-edges before each seed's time).
    """
    if task.num_nodes != graph.num_nodes:
        raise ConfigError(
            f"the temporal node task has {task.num_nodes} node times but graph '{graph.name}' "
            f"has {graph.num_nodes} nodes; build the task from the graph's own node_time"
        )
    if graph.edge_time is None:
        raise ConfigError(
            f"temporal node classification samples each node's in-edges from before its node "
            f"time, and graph '{graph.name}' has no edge times (edge_time); prepare it with edge "
            f"times (prepare edgelist --time-column K), or set train.temporal=off to ignore the "
            f"node times"
        )


def is_typed_temporal_node(task: Task | None) -> bool:
    """Whether ``task`` is a typed temporal node task."""
    return isinstance(task, TypedTemporalNodeClassification)


def typed_temporal_refusal(engine: str, mode: str | None) -> str:
    """The one-line refusal of typed temporal node classification by ``engine`` in ``mode``."""
    return temporal_refusal(
        engine,
        mode,
        "node classification on typed graphs",
        TYPED_TEMPORAL_NODE_ENGINES,
        "the node and edge times",
    )


def refuse_typed_temporal(engine: str, mode: str | None) -> None:
    """Raise :class:`ConfigError` if ``engine`` in ``mode`` cannot train typed temporal nodes."""
    if (engine, mode) not in TYPED_TEMPORAL_NODE_ENGINES:
        raise ConfigError(typed_temporal_refusal(engine, mode))


def check_typed_temporal(engine: str, mode: str | None, task: Task | None) -> None:
    """Raise :class:`ConfigError` if ``engine`` in ``mode`` cannot train typed temporal ``task``."""
    if is_typed_temporal_node(task):
        refuse_typed_temporal(engine, mode)


def check_typed_node_times(task: TypedTemporalNodeClassification, graph: HeteroGraph) -> None:
    """Raise :class:`ConfigError` unless ``graph`` can be sampled at ``task``'s node times.

    The task's times must be one per node of its type, which must be the graph's target type
    at the graph's offset, and every relation must have edge times.
    """
    s = graph.schema
    if task.node_type != s.target or task.offset != s.type_range(task.node_type)[0]:
        raise ConfigError(
            f"the typed temporal node task classifies type {task.node_type!r} at offset "
            f"{task.offset}, but graph '{graph.name}' targets {s.target!r}; build the task from "
            f"the graph's target type"
        )
    if task.num_nodes != s.count(task.node_type):
        raise ConfigError(
            f"the typed temporal node task has {task.num_nodes} node times but type "
            f"{task.node_type!r} of '{graph.name}' has {s.count(task.node_type)} nodes; build the "
            f"task from the graph's node_time[{task.node_type!r}]"
        )
    if not graph.has_edge_time:
        raise ConfigError(
            f"typed temporal node classification samples each node's in-edges from before its "
            f"node time, and typed graph '{graph.name}' has no edge times; prepare it with them, "
            f"or set train.temporal=off to ignore the node times"
        )


def typed_temporal_sampler(
    graph: HeteroGraph, fanouts: Any, seed: int, task: TypedTemporalNodeClassification
) -> TypedTemporalSampler:
    """The typed temporal sampler of a run: its fanouts and seed, the task's strategy."""
    check_typed_node_times(task, graph)
    return TypedTemporalSampler(graph, fanouts, seed, strategy=task.strategy)  # type: ignore[arg-type]


def node_blocks(
    sampler: Sampler,
    task: Task | None,
    seeds: torch.Tensor,
    epoch: int,
    step: int,
    stream: int = 0,
) -> list[Any]:
    """The blocks of node ``seeds``, at the task's times for them (``task.seed_times``).

    One call for every sampler and node task (typed: target-type seeds): a static task has no
    times (``None``), a temporal one gives each seed's node time.
    """
    times = task.seed_times(seeds) if isinstance(task, NodeClassification) else None
    sample = sampler.sample_from_nodes(
        seeds, seed_time=times, epoch=epoch, step=step, stream=stream
    )
    return list(sample.blocks)


def split_nodes(graph: Any) -> np.ndarray:
    """int64 ascending IDs of the nodes in a split mask (train, val or test), read in blocks.

    The masks' own IDs: global on a graph, type-local of the target type on a typed graph.
    """
    masks = [getattr(graph, f"{s}_mask") for s in SPLITS]
    masks = [m for m in masks if m is not None]
    n = int(masks[0].shape[0]) if masks else 0
    parts = []
    for lo in range(0, n, _MASK_BLOCK):
        hi = min(n, lo + _MASK_BLOCK)
        hit = np.zeros(hi - lo, dtype=bool)
        for m in masks:
            hit |= np.asarray(m[lo:hi], dtype=bool)
        parts.append(lo + np.flatnonzero(hit))
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


@torch.no_grad()
def temporal_node_rows(
    model: Any,
    sampler: Any,
    task: TemporalNodeClassification,
    features: Callable[[torch.Tensor], torch.Tensor],
    nodes: np.ndarray,
    sink: Sink,
    *,
    dtype: torch.dtype,
    device: torch.device,
    edges: EdgeRows | None = None,
    share: tuple[int, int] = (0, 1),
    chunk: int = EVAL_CHUNK,
    on_sample: Callable[[Any], None] | None = None,
    forward: Callable[[Any], torch.Tensor] | None = None,
    offset: int = 0,
) -> None:
    """Embed ``nodes`` at their node times: ``sink(ids, rows)`` per non-empty chunk.

    The model applies one layer per block the sampler samples (``len(sampler.fanouts)``, fewer
    than the model's layers for an inner layer's output), in eval mode, then back.

    Args:
        model: A layer-wise model.
        sampler: The temporal sampler (fanouts, key and strategy of the run): a
            :class:`~fleetgnn.sampling.TemporalSampler`, or with ``forward`` a typed one.
        task: The temporal node task (the node times).
        features: Input rows of node IDs (repeats allowed), on ``device``.
        nodes: int64 ascending global IDs to embed (the whole list, the same on every rank).
        sink: Called with ascending ``ids`` (numpy) and their rows ``[len(ids), width]``.
        dtype: The compute dtype.
        device: Where the model runs.
        edges: The graph's edge rows for a model that reads edge features (``None``: none).
        share: ``(r, W)``: embed part ``r`` of ``W`` contiguous parts of ``nodes``; every part
            runs the largest part's number of chunks (the module docstring).
        chunk: Nodes embedded at once (bounds memory; the rows do not depend on it).
        on_sample: Called with every sample (tests check their times).
        forward: ``forward(sample) -> rows`` of the sample's seeds, run in eval mode instead of
            the layer-by-layer forward above (a typed model over a typed sample: ``features``
            is then unused).
        offset: Added to ``nodes`` to give the seeds sampled (a typed target type's first
            global ID when ``nodes`` are type-local); ``sink`` gets ``nodes`` as given.
    """
    r, world = share
    bounds = [rank_range(int(nodes.size), world, k) for k in range(world)]
    lo, hi = bounds[r]
    mine = nodes[lo:hi]
    most = max(b - a for a, b in bounds)
    was_training = model.training
    model.eval()
    try:
        for a in range(0, most, chunk):  # as many chunks on every rank: equal store reads
            ids = mine[a : a + chunk]
            seeds = torch.from_numpy(ids + offset)
            times = task.seed_times(seeds)
            sample = sampler.sample_from_nodes(seeds, seed_time=times, stream=EVAL_STREAM)
            if on_sample is not None:
                on_sample(sample)
            if forward is not None:
                h = forward(sample)
            else:
                h = features(sample.blocks[0].src_ids)
                for i, block in enumerate(sample.blocks):
                    h = model.layer_forward(i, block_aggregator(block, dtype, device, edges), h)
            if ids.size:
                sink(ids, h)
    finally:
        model.train(was_training)


def temporal_node_metrics(
    model: Any,
    sampler: Any,
    task: TemporalNodeClassification,
    features: Callable[[torch.Tensor], torch.Tensor],
    graph: Any,
    *,
    dtype: torch.dtype,
    device: torch.device,
    edges: EdgeRows | None = None,
    comm: Any = None,
    chunk: int = EVAL_CHUNK,
    on_sample: Callable[[Any], None] | None = None,
    forward: Callable[[Any], torch.Tensor] | None = None,
    offset: int = 0,
) -> dict[str, float]:
    """Accuracy per split and validation loss, every split node embedded at its node time.

    ``comm``: the ranks' communicator (``None``: one process); collective when it has several
    ranks, which then share the nodes and all-reduce the sums. ``graph``: the labels and masks
    (a typed graph's are its target type's, ``offset`` its first global ID). The other
    arguments are :func:`temporal_node_rows`'s.
    """
    sums = MetricSums(graph, device)
    world = comm.world_size if comm is not None else 1
    share = (comm.rank if comm is not None else 0, world)
    temporal_node_rows(
        model,
        sampler,
        task,
        features,
        split_nodes(graph),
        sums,
        dtype=dtype,
        device=device,
        edges=edges,
        share=share,
        chunk=chunk,
        on_sample=on_sample,
        forward=forward,
        offset=offset,
    )
    return sums.result(comm if world > 1 else None)


def sampled_temporal_node_metrics(engine: Any) -> dict[str, float]:
    """:func:`temporal_node_metrics` of a sampled distributed engine; collective over ranks.

    Rank ``r`` of ``W`` embeds share ``(r, W)`` of the split nodes with its replica of the model
    (the parameters are equal on every rank), reading input rows through the engine's
    ``_features`` (any node's, from the engine's store); the sums are all-reduced, so every rank
    returns the one-process result.

    ``engine``: a ``minibatch`` or ``split`` engine training a temporal node task (its
    ``module``, ``sampler``, ``task``, ``_features``, ``graph``, ``dtype``, ``device``, ``comm``,
    ``eval_chunk`` and, when its model reads edge features, ``edge_rows``).
    """
    return temporal_node_metrics(
        engine.module,
        engine.sampler,
        engine.task,
        engine._features,
        engine.graph,
        dtype=engine.dtype,
        device=engine.device,
        edges=getattr(engine, "edge_rows", None),
        comm=engine.comm,
        chunk=engine.eval_chunk,
    )


def typed_temporal_node_metrics(engine: Any, on_sample: Any = None) -> dict[str, float]:
    """:func:`temporal_node_metrics` of a typed engine, every target split node at its node time.

    Collective over ``engine.comm``'s ranks (``None``: one process): rank ``r`` of ``W`` embeds
    share ``(r, W)`` of the split nodes in chunks of ``engine.eval_chunk`` with its replica of
    the model, and the sums are all-reduced. ``engine``: a typed reference or minibatch engine
    training a typed temporal node task (``module``, ``sampler``, ``task``, ``graph``,
    ``features``, ``aggregators``, ``dtype``, ``device``). ``on_sample``: called with every
    sample (tests check their times).
    """

    def forward(sample: Any) -> torch.Tensor:
        blocks = list(sample.blocks)
        return engine.module(engine.aggregators(blocks), engine.features(blocks[0]))  # type: ignore[no-any-return]

    return temporal_node_metrics(
        engine.module,
        engine.sampler,
        engine.task,
        None,  # type: ignore[arg-type]
        engine.graph,
        dtype=engine.dtype,
        device=engine.device,
        comm=engine.comm,
        chunk=engine.eval_chunk,
        on_sample=on_sample,
        forward=forward,
        offset=engine.task.offset,
    )
