"""From a run config to a ready engine: the model, the optimizer and the typed engine config.

This is what ``fleetgnn train`` does with a YAML config; a script using the Python API builds its
own model and optimizer and calls :func:`fleetgnn.engines.build_engine` directly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from fleetgnn.config import Config, ModelConfig, OptimConfig, SplitEngineConfig, engine_spec
from fleetgnn.config.run import HETERO_MODEL_DEFAULTS, MODEL_DEFAULTS
from fleetgnn.engines import Engine, build_engine
from fleetgnn.engines.common import num_classes_of, require_trainable
from fleetgnn.errors import ConfigError
from fleetgnn.graph import Graph
from fleetgnn.graph.edge_split import edge_split_for
from fleetgnn.graph.hetero import HeteroGraph
from fleetgnn.graph.time_split import split_by_time
from fleetgnn.nn import build_model
from fleetgnn.nn.decoders import LinkModel, build_decoder
from fleetgnn.nn.hetero import build_hetero_model
from fleetgnn.nn.models import EDGE_CONVS
from fleetgnn.partition import book_dir
from fleetgnn.tasks import (
    NODE_CLASSIFICATION,
    LinkPrediction,
    Task,
    TemporalLinkPrediction,
    TemporalNodeClassification,
    TypedLinkPrediction,
    TypedTemporalNodeClassification,
)
from fleetgnn.train.resolve import resolve_device_name, resolve_feature_norm


def model_kwargs(cfg: ModelConfig) -> dict[str, Any]:
    """Keyword arguments for :func:`~fleetgnn.nn.build_model` from a ModelConfig.

    Fields left ``None`` fall back to the model's own defaults.
    """
    out: dict[str, Any] = {"num_layers": cfg.num_layers}
    for key in ("hidden", "dropout", "heads", "norm"):
        value = getattr(cfg, key, None)
        if value is not None:
            out["hidden_dim" if key == "hidden" else key] = value
    if cfg.residual:
        out["residual"] = True
    return out


def graph_model_kwargs(cfg: Config, graph: Graph) -> dict[str, Any]:
    """:func:`model_kwargs` of ``cfg.model``, with ``edge_dim`` from ``graph`` for an edge conv.

    Raises:
        ConfigError: The model reads edge features and ``graph`` has none.
    """
    kwargs = model_kwargs(cfg.model)
    if cfg.model.name in EDGE_CONVS:
        if graph.edge_attr is None:
            raise ConfigError(
                f"model.name={cfg.model.name} reads edge features but '{graph.name}' has no "
                f"edge_attr; prepare a dataset with them (e.g. 'fleetgnn prepare synthetic "
                f"--edge-features 4') or pick another model"
            )
        kwargs["edge_dim"] = graph.num_edge_features
    return kwargs


def model_from_config(cfg: Config, graph: Graph) -> torch.nn.Module:
    """The model of ``cfg.model`` for ``graph``, initialised from ``train.seed``.

    Identical on every rank (same seed, same initialisation).
    """
    name = cfg.model.name
    if isinstance(graph, HeteroGraph) or name in HETERO_MODEL_DEFAULTS:
        return _typed_model_from_config(cfg, graph)
    link = cfg.train.task == "link"
    require_trainable(graph, LinkPrediction if link else NODE_CLASSIFICATION)
    seed = int(cfg.train.seed)
    torch.manual_seed(seed)  # parameter initialisation only; training draws are keyed
    kwargs = graph_model_kwargs(cfg, graph)
    with _allocating(cfg.model):
        model = build_model(
            cfg.model.name,
            graph.num_features,
            cfg.train.link_dim if link else num_classes_of(graph),
            seed=seed,
            **kwargs,
        )
    if link:  # node embeddings of width train.link_dim, scored in pairs by the decoder
        return LinkModel(model, build_decoder(cfg.train.decoder, cfg.train.link_dim))
    return model


@contextlib.contextmanager
def _allocating(model: ModelConfig) -> Iterator[None]:
    """Turn a failure to allocate the model's parameters into one line naming its size keys.

    ``model.hidden=10**12`` asks for terabytes; torch's allocator refuses with a paragraph
    (``DefaultCPUAllocator: can't allocate memory``, or CUDA's out-of-memory error).
    """
    try:
        yield
    except (RuntimeError, MemoryError) as e:
        text = " ".join(str(e).split())
        if not isinstance(e, MemoryError | torch.OutOfMemoryError) and "allocate" not in text:
            raise
        asked = re.search(r"allocate ([0-9.]+ ?[KMGTP]?i?B|[0-9]+ bytes)", text)
        size = f" ({asked.group(1)} at once)" if asked else ""
        raise ConfigError(
            f"the model (model.name={model.name}, model.hidden={model.hidden}, "
            f"model.num_layers={model.num_layers}) does not fit in memory: its parameters could "
            f"not be allocated{size}; lower model.hidden"
        ) from None


def _typed_model_from_config(cfg: Config, graph: Any) -> torch.nn.Module:
    """A typed model (``model.name`` rgcn | rgat | hetero-sage) for a typed graph."""
    name, typed = cfg.model.name, tuple(HETERO_MODEL_DEFAULTS)
    if not isinstance(graph, HeteroGraph):
        raise ConfigError(
            f"model.name={name} needs a typed graph (node and edge types); for '{graph.name}' "
            f"choose one of {', '.join(MODEL_DEFAULTS)}"
        )
    if name not in HETERO_MODEL_DEFAULTS:
        raise ConfigError(
            f"'{graph.name}' is a typed graph: model.name={name} has one weight for every "
            f"relation; choose one of {', '.join(typed)}"
        )
    link = cfg.train.task == "link"
    seed = int(cfg.train.seed)
    torch.manual_seed(seed)  # parameter initialisation only; training draws are keyed
    kwargs = {**HETERO_MODEL_DEFAULTS[name], "num_layers": cfg.model.num_layers}
    for key in ("hidden", "dropout", "heads", "num_bases"):
        value = getattr(cfg.model, key)
        if value is not None:
            kwargs["hidden_dim" if key == "hidden" else key] = value
    if link:  # embeddings of width train.link_dim for every type, scored in pairs
        with _allocating(cfg.model):
            encoder = build_hetero_model(name, graph, cfg.train.link_dim, seed=seed, **kwargs)
        return LinkModel(encoder, build_decoder(cfg.train.decoder, cfg.train.link_dim))
    classes = int(graph.num_classes or int(graph.y.max()) + 1)
    with _allocating(cfg.model):
        return build_hetero_model(name, graph, classes, seed=seed, **kwargs)


def uses_time(temporal: str, graph: Graph) -> bool:
    """Whether a link run's ``train.temporal`` splits and samples ``graph`` by time.

    Raises:
        ConfigError: ``on`` for a graph without edge times.
    """
    if temporal == "on" and graph.edge_time is None:
        raise ConfigError(
            f"train.temporal=on needs edge times, and dataset '{graph.name}' has none "
            f"(edge_time); set train.temporal=auto or off, or prepare it with times"
        )
    return temporal != "off" and graph.edge_time is not None


def uses_node_time(temporal: str, graph: Graph) -> bool:
    """Whether a node run's ``train.temporal`` samples ``graph``'s seeds at their node times.

    ``auto`` is ``on`` when the graph has node times (``node_time``) and edge times: sampling at a
    time needs edge times, so node times alone (ogbn-arxiv's years, ``prepare ogb``) train
    without time under ``auto``, and are refused under ``on``.

    Raises:
        ConfigError: ``on`` for a graph without node times, or node times without edge times.
    """
    if temporal == "off" or isinstance(graph, HeteroGraph):
        return False
    if temporal == "on" and graph.node_time is None:
        raise ConfigError(
            f"train.temporal=on for node classification needs node times, and dataset "
            f"'{graph.name}' has none (node_time); set train.temporal=auto or off, or prepare it "
            f"with them (prepare edgelist --node-time FILE)"
        )
    if temporal == "auto" and graph.edge_time is None:
        return False
    if graph.node_time is not None and graph.edge_time is None:
        raise ConfigError(
            f"dataset '{graph.name}' has node times (node_time) but no edge times (edge_time): "
            f"sampling each node at its time keeps its in-edges from before it, which needs edge "
            f"times; prepare it with them (prepare edgelist --time-column K), or set "
            f"train.temporal=off to ignore the node times"
        )
    return graph.node_time is not None


def refuse_typed_times(temporal: str, task: str, graph: HeteroGraph) -> None:
    """Raise where a typed link run would sample in time: typed temporal link is not built.

    Refused, as a homogeneous run would sample in time: ``train.temporal=on``, or ``auto`` with
    edge times. ``off`` trains ignoring every time. Node classification is
    :func:`uses_typed_node_time`'s (it trains in time).

    Raises:
        ConfigError: One line naming the times and ``train.temporal=off``.
    """
    if temporal == "off" or task != "link":
        return
    if temporal == "on" or graph.has_edge_time:
        held = (
            f"'{graph.name}' has edge times (edge_time)"
            if graph.has_edge_time
            else f"train.temporal={temporal}"
        )
        raise ConfigError(
            f"{held}, but typed link prediction does not train in time yet (typed temporal link "
            f"prediction is not built); set train.temporal=off to train ignoring the times"
        )


def uses_typed_node_time(temporal: str, graph: HeteroGraph) -> bool:
    """Whether a typed node run samples its target-type seeds at their node times.

    ``auto`` is ``on`` when the target type has node times (``node_time[target]``) and the
    relations edge times: sampling at a time needs every relation's edge times, so node times
    alone (ogbn-mag's paper years, ``prepare ogb``) train without time under ``auto``.

    Raises:
        ConfigError: ``on`` without node times of the target type, or node times without edge
            times (under ``on``).
    """
    target = graph.schema.target
    has = target in graph.node_time
    if temporal == "off" or (temporal == "auto" and not graph.has_edge_time):
        return False
    if temporal == "on" and not has:
        raise ConfigError(
            f"train.temporal=on for node classification needs node times of the target type "
            f"{target!r}, and typed dataset '{graph.name}' has none (node_time/{target}.npy); "
            f"set train.temporal=auto or off"
        )
    if has and not graph.has_edge_time:
        raise ConfigError(
            f"typed dataset '{graph.name}' has node times of its target type {target!r} but no "
            f"edge times: sampling each node at its time keeps its in-edges from before it, "
            f"which needs every relation's edge times; set train.temporal=off to ignore the "
            f"node times"
        )
    return has


def temporal_kind(cfg: Config, graph: Graph | HeteroGraph) -> str | None:
    """``"link"`` or ``"node"`` when ``cfg``'s task on ``graph`` samples in time, else ``None``.

    As :func:`task_from_config` decides (:func:`uses_time`, :func:`uses_node_time`,
    :func:`uses_typed_node_time`); a typed link task whose times would be used is refused
    (:func:`refuse_typed_times`).
    """
    if isinstance(graph, HeteroGraph):
        if cfg.train.task == "link":
            refuse_typed_times(cfg.train.temporal, cfg.train.task, graph)
            return None
        return "node" if uses_typed_node_time(cfg.train.temporal, graph) else None
    if cfg.train.task == "link":
        return "link" if uses_time(cfg.train.temporal, graph) else None
    return "node" if uses_node_time(cfg.train.temporal, graph) else None


def task_from_config(cfg: Config, graph: Graph) -> Task:
    """The task of ``train.task`` for ``graph``.

    For ``link``: over the edge split of ``(train.val_edges, train.test_edges, train.seed)``
    saved with ``data.dataset`` (drawn, and saved there, if absent); on a typed graph, of the
    edges of ``train.link_relation`` (:mod:`fleetgnn.graph.edge_split`). With
    ``train.temporal`` on (``auto``: when the graph has edge times), the edges are split by
    time (:func:`~fleetgnn.graph.time_split.split_by_time`, recomputed, not saved) and the
    task is :class:`~fleetgnn.tasks.TemporalLinkPrediction`; off, the times are dropped and
    the random split is used.

    For ``node``: with ``train.temporal`` on (``auto``: when the graph has node times,
    :func:`uses_node_time`) the task is :class:`~fleetgnn.tasks.TemporalNodeClassification`
    over the graph's ``node_time``; on a typed graph (``auto``: when its target type has node
    times, :func:`uses_typed_node_time`) it is
    :class:`~fleetgnn.tasks.TypedTemporalNodeClassification` over ``node_time[target]``; off,
    the times are ignored.
    """
    t = cfg.train
    if isinstance(graph, HeteroGraph):  # typed link in time: refused unless train.temporal=off
        refuse_typed_times(t.temporal, t.task, graph)
    if t.task != "link" and isinstance(graph, HeteroGraph):
        if uses_typed_node_time(t.temporal, graph):
            target = graph.schema.target
            return TypedTemporalNodeClassification(
                np.asarray(graph.node_time[target]),
                str(target),
                graph.schema.type_range(str(target))[0],
                strategy=t.temporal_strategy,
            )
        return NODE_CLASSIFICATION
    if t.task != "link":
        if uses_node_time(t.temporal, graph):
            return TemporalNodeClassification(graph.node_time, strategy=t.temporal_strategy)
        return NODE_CLASSIFICATION
    if isinstance(graph, HeteroGraph):
        if t.link_relation is None:
            rels = ", ".join(",".join(r) for r in graph.schema.relations)
            raise ConfigError(
                f"train.task=link on the typed graph '{graph.name}' needs train.link_relation: "
                f"one of {rels}"
            )
        typed = edge_split_for(
            graph,
            cfg.data.dataset,
            t.val_edges,
            t.test_edges,
            int(t.seed),
            relation=t.link_relation,
        )
        return TypedLinkPrediction(
            typed,
            t.negatives,
            t.negative_sampler,
            t.link_loss,
            int(t.seed),
            keep_target_edges=bool(t.keep_target_edges),
            eval_edges=t.eval_edges,
        )
    if t.link_relation is not None:
        raise ConfigError(
            f"train.link_relation={t.link_relation} is for typed graphs; '{graph.name}' has one "
            f"relation: leave it unset"
        )
    if uses_time(t.temporal, graph):
        return TemporalLinkPrediction(
            split_by_time(graph, t.val_edges, t.test_edges, int(t.seed)),
            t.negatives,
            t.negative_sampler,
            t.link_loss,
            int(t.seed),
            eval_edges=t.eval_edges,
            strategy=t.temporal_strategy,
        )
    if graph.edge_time is not None:  # train.temporal=off: the times are ignored
        graph = graph.replace(edge_time=None)
    split = edge_split_for(graph, cfg.data.dataset, t.val_edges, t.test_edges, int(t.seed))
    return LinkPrediction(
        split,
        t.negatives,
        t.negative_sampler,
        t.link_loss,
        int(t.seed),
        keep_target_edges=bool(t.keep_target_edges),
        eval_edges=t.eval_edges,
    )


def optimizer_from_config(
    model: torch.nn.Module, cfg: OptimConfig, device: str | torch.device = "cpu"
) -> torch.optim.Optimizer:
    """The optimizer named by ``optim.optimizer`` over ``model``'s parameters.

    On CUDA (``device``, where the engine puts the parameters) Adam and AdamW are torch's
    fused implementations: one kernel a step for every parameter, where the default (foreach)
    launches several per group of tensors, on steps whose launches the host bounds. The
    results equal the default's up to rounding.
    """
    classes = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    if cfg.optimizer not in classes:
        raise ConfigError(
            f"'optim.optimizer' must be one of {', '.join(classes)} (got {cfg.optimizer!r})"
        )
    extra = {}
    if cfg.optimizer != "sgd" and torch.device(device).type == "cuda":
        extra["fused"] = True
    return classes[cfg.optimizer](
        model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, **extra
    )


def _other_books_note(dataset: str, method: str, world: int) -> str | None:
    """What the split engine does when ``dataset`` has books of ``method``, none for ``world``.

    ``None`` when it has none of that method (computing one is then what was asked for).
    """
    where = book_dir(dataset, method, world).parent
    others = [p.name for p in sorted(where.glob(f"{method}-*")) if p.is_dir()]
    if not others:
        return None
    return (
        f"no saved {method} book for {world} parts under '{where}' (found "
        f"{', '.join(others)}); rank 0 computes one for this run and does not keep it (save "
        f"one with 'fleetgnn partition {dataset} --method {method} --parts {world}')"
    )


def engine_from_config(
    cfg: Config, graph: Graph, ctx: Any = None, *, engine: str | None = None, **changes: Any
) -> Engine:
    """The engine of ``cfg`` with its model and optimizer built from ``cfg``.

    ``data.feature_norm`` left ``None`` is resolved to the transform ``data.dataset``'s
    ``meta.json`` records (:func:`~fleetgnn.train.resolve_feature_norm`; ``"none"`` without a
    dataset directory).

    Args:
        cfg: A validated run config.
        graph: The dataset.
        ctx: This process's distributed context (distributed engines; ``None``: from the
            environment).
        engine: Build this engine instead of ``train.engine``, in the same mode (e.g. the
            ``reference`` twin of a distributed run, for comparisons).
        **changes: Fields of the typed engine config to override (e.g. ``num_chunks=4``).
    """
    if engine is not None:
        nproc = cfg.train.nproc if engine_spec(engine).distributed else 1
        train = dataclasses.replace(cfg.train, engine=engine, mode=cfg.mode, nproc=nproc)
        cfg = dataclasses.replace(cfg, train=train).validate()
    cfg = resolve_device_name(cfg)  # "auto" -> the device that runs
    cfg = resolve_feature_norm(cfg)
    model = model_from_config(cfg, graph)
    engine_cfg = cfg.engine_config()
    if changes:
        engine_cfg = engine_cfg.replace(**changes)
    if isinstance(engine_cfg, SplitEngineConfig) and engine_cfg.book is None and cfg.data.dataset:
        # a book saved by `fleetgnn partition` for this world size is used instead of computing one
        world = ctx.world_size if ctx is not None else int(os.environ.get("WORLD_SIZE", "1"))
        saved = book_dir(cfg.data.dataset, engine_cfg.partition, world)
        if saved.is_dir():
            engine_cfg = engine_cfg.replace(book=str(saved))
        else:
            rank = ctx.rank if ctx is not None else int(os.environ.get("RANK", "0"))
            note = _other_books_note(cfg.data.dataset, engine_cfg.partition, world)
            if note and rank == 0:
                print(f"fleetgnn: split: {note}", file=sys.stderr, flush=True)
    return build_engine(
        model,
        graph,
        engine_cfg,
        ctx,
        optimizer=optimizer_from_config(model, cfg.optim, cfg.train.device),
        task=task_from_config(cfg, graph),
    )
