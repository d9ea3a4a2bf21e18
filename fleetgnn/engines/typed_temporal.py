"""Typed temporal node classification: every target-type seed sampled at its node time.

A :class:`~fleetgnn.tasks.TypedTemporalNodeClassification` trains on the typed engines and modes
of :data:`TYPED_TEMPORAL_NODE_ENGINES` (:mod:`fleetgnn.engines.typed`); the others refuse it in
one line naming them and ``train.temporal=off`` (:func:`check_typed_temporal`).

- Training (:func:`typed_node_blocks`): a step's seeds are the target-type training nodes the
  typed engines' :class:`~fleetgnn.sampling.SeedLoader` deals, as for static typed node
  classification; the :class:`~fleetgnn.sampling.TypedTemporalSampler` samples each seed's
  subtree at the seed's node time in every relation (strict ``<``), with the typed sampler's
  keys (``stream`` = the rank on ``minibatch``). Seeds are distinct nodes, so the last block's
  target-type destinations are the seeds in batch order and the loss is the static task's.
- Evaluation (:func:`typed_temporal_node_metrics`): every split node of the target type is
  embedded at its node time by the homogeneous temporal node evaluation
  (:func:`~fleetgnn.engines.temporal_node.temporal_node_metrics`: chunks, one fixed key, a
  contiguous share per rank, sums all-reduced), the typed model run on each typed sample. Input
  rows are read from the typed graph's arrays (as typed streaming evaluation reads them), so no
  read is collective.
"""

from __future__ import annotations

from typing import Any

import torch

from fleetgnn.engines.link import temporal_refusal
from fleetgnn.engines.temporal_node import temporal_node_metrics
from fleetgnn.errors import ConfigError
from fleetgnn.graph.hetero import HeteroGraph
from fleetgnn.sampling import TypedTemporalSampler
from fleetgnn.tasks import Task, TypedTemporalNodeClassification

#: ``(engine, mode)`` pairs that train a typed temporal node task.
TYPED_TEMPORAL_NODE_ENGINES: tuple[tuple[str, str], ...] = (
    ("reference", "minibatch"),
    ("minibatch", "minibatch"),
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


def typed_node_blocks(
    sampler: Any, task: Task | None, seeds: torch.Tensor, epoch: int, step: int, stream: int = 0
) -> list[Any]:
    """Typed blocks of target-type ``seeds``: at their node times for a typed temporal task."""
    if is_typed_temporal_node(task):
        times = task.seed_times(seeds)  # type: ignore[union-attr]
        return list(sampler.sample(seeds, times, epoch, step, stream=stream).blocks)
    return sampler.sample(seeds, epoch, step, stream=stream)  # type: ignore[no-any-return]


def typed_temporal_node_metrics(engine: Any, on_sample: Any = None) -> dict[str, float]:
    """Accuracy per split and validation loss, every target split node at its node time.

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
