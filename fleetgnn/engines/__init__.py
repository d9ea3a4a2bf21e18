"""Training strategies behind one protocol (see :mod:`fleetgnn.engines.base`).

Every engine is built from ``(model, graph, ctx, engine_config, *, optimizer=None, loss=None)``;
which class implements an engine name, and with which typed config, comes from the one registry
:data:`fleetgnn.config.ENGINES`.
"""

from __future__ import annotations

import importlib
from typing import Any

from fleetgnn.config import ENGINES, EngineConfig, available_engines, spec_of
from fleetgnn.engines.base import (
    LINK_KINDS,
    TIME_KEYS,
    Engine,
    EngineBase,
    EpochStats,
    StepStats,
)
from fleetgnn.engines.common import TYPED_ENGINES, LossFn, cross_entropy, refuse_typed
from fleetgnn.engines.temporal_node import check_typed_temporal, is_typed_temporal_node
from fleetgnn.engines.typed import TypedMinibatchEngine, TypedReferenceEngine, is_typed
from fleetgnn.errors import ConfigError
from fleetgnn.graph import Graph
from fleetgnn.tasks import TemporalNodeClassification


def engine_class(name: str) -> type:
    """The class implementing engine ``name`` (imported on first use).

    Raises:
        ConfigError: For an unknown engine, or one this build does not implement yet.
    """
    from fleetgnn.config import engine_spec

    spec = engine_spec(name)
    if not spec.available:
        raise ConfigError(
            f"engine {name!r} is not available in this build yet; available: "
            f"{', '.join(available_engines())}"
        )
    module, _, cls = spec.impl.partition(":")
    return getattr(importlib.import_module(module), cls)


def build_engine(
    model: Any,
    graph: Graph,
    config: EngineConfig,
    ctx: Any = None,
    *,
    optimizer: Any = None,
    loss: LossFn | None = None,
    task: Any = None,
    fanouts: Any = None,
) -> Engine:
    """Construct the engine whose typed config ``config`` is, training ``model`` on ``graph``.

    Args:
        model: A layer-wise ``nn.Module`` (see :mod:`fleetgnn.nn.protocol`).
        graph: The dataset (arrays may be memory maps); a typed
            :class:`~fleetgnn.graph.hetero.HeteroGraph` is trained by the typed classes of
            ``reference``, ``minibatch`` (:mod:`fleetgnn.engines.typed`) and ``split``
            (:mod:`fleetgnn.engines.split_relations`), link prediction on one relation by
            their classes in :mod:`fleetgnn.engines.typed_link`; refused by the others. Typed
            temporal node classification trains on ``reference`` and ``minibatch`` in
            ``mode=minibatch`` (:mod:`fleetgnn.engines.temporal_node`).
        config: An engine config, e.g. :class:`~fleetgnn.config.MinibatchEngineConfig`.
        ctx: This process's :class:`~fleetgnn.distributed.DistContext` (distributed engines;
            ``None``: initialised from the environment, a one-rank group without a launcher).
        optimizer: Over ``model``'s parameters (``None``: Adam, lr 0.01).
        loss: ``loss(logits, target) -> per-node losses`` (``None``: cross-entropy).
        task: A :class:`~fleetgnn.tasks.Task` (``None``: node classification); engines that
            cannot train it refuse it in one line naming those that can.
        fanouts: Typed graphs only: per-relation fanouts (``{relation: [per hop]}``, see
            :func:`~fleetgnn.sampling.hetero.relation_fanouts`) instead of ``config.fanouts``
            (``None``: ``config.relation_fanouts`` where set, ``train.relation_fanouts``).

    Raises:
        ConfigError: For a config that is no engine's, an engine not in this build, or a task
            the engine does not train.
    """
    name = spec_of(config).name
    by_relation = dict(getattr(config, "relation_fanouts", None) or {})
    if fanouts is None and by_relation:
        fanouts = by_relation  # train.relation_fanouts
    if is_typed(graph):
        if name not in TYPED_ENGINES:
            refuse_typed(name, graph)
        if task is not None and task.name != "node":
            from fleetgnn.engines.typed_link import typed_link_engine

            cls = typed_link_engine(name)
            return cls(
                model,
                graph,
                ctx,
                config,
                optimizer=optimizer,
                loss=loss,
                fanouts=fanouts,
                task=task,
            )
        # typed temporal node classification: reference and minibatch, in mode=minibatch
        check_typed_temporal(name, getattr(config, "mode", None) or "minibatch", task)
        extra = {"task": task} if is_typed_temporal_node(task) else {}
        if name == "split":
            from fleetgnn.engines.split_relations import TypedSplitEngine

            typed: type = TypedSplitEngine
        else:
            typed = {"reference": TypedReferenceEngine, "minibatch": TypedMinibatchEngine}[name]
        return typed(
            model, graph, ctx, config, optimizer=optimizer, loss=loss, fanouts=fanouts, **extra
        )
    if getattr(task, "relation", None) is not None:  # a typed link task
        raise ConfigError(
            f"link prediction on a relation is for typed graphs; '{graph.name}' has one relation: "
            f"leave train.link_relation unset"
        )
    if fanouts is not None:
        raise ConfigError(
            f"'fanouts' per relation is for typed graphs; '{graph.name}' has one relation: set "
            f"train.fanouts, and leave train.relation_fanouts empty"
        )
    cls = engine_class(name)
    if task is None or (task.name == "node" and not isinstance(task, TemporalNodeClassification)):
        return cls(model, graph, ctx, config, optimizer=optimizer, loss=loss)
    if name != "reference":
        from fleetgnn.engines.link import check_task

        check_task(name, getattr(config, "mode", None) or spec_of(config).modes[0], task)
    return cls(model, graph, ctx, config, optimizer=optimizer, loss=loss, task=task)


__all__ = [
    "ENGINES",
    "LINK_KINDS",
    "TIME_KEYS",
    "Engine",
    "EngineBase",
    "EpochStats",
    "LossFn",
    "StepStats",
    "build_engine",
    "cross_entropy",
    "engine_class",
]
