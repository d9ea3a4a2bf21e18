"""Training strategies behind one protocol (see :mod:`fleetgnn.engines.base`)."""

from __future__ import annotations

from typing import Any

from fleetgnn.engines.base import LINK_KINDS, TIME_KEYS, Engine, EpochStats, StepStats
from fleetgnn.errors import ConfigError
from fleetgnn.graph import Graph

#: Engines this build can run; the others are planned (see DESIGN.md).
AVAILABLE = ("reference", "minibatch", "fullgraph")
PLANNED = ("split", "offload")


def build_engine(graph: Graph, config: Any, ctx: Any = None) -> Engine:
    """Construct the engine named by ``config.train.engine`` for ``graph``.

    Args:
        graph: The dataset.
        config: A :class:`~fleetgnn.train.config.Config`.
        ctx: The :class:`~fleetgnn.distributed.DistContext` of this process (distributed engines).
    """
    name = config.train.engine
    if name == "reference":
        from fleetgnn.engines.reference import ReferenceEngine

        return ReferenceEngine(graph, config)
    if name == "minibatch":
        from fleetgnn.engines.minibatch import MinibatchEngine

        if ctx is None:
            from fleetgnn.distributed import init

            ctx = init()
        return MinibatchEngine(graph, config, ctx)
    if name == "fullgraph":
        from fleetgnn.engines.fullgraph import FullGraphEngine

        if ctx is None:
            from fleetgnn.distributed import init

            ctx = init()
        fc = config.fullgraph
        return FullGraphEngine(
            graph,
            config,
            ctx,
            partition=fc.partition,
            num_chunks=fc.num_chunks,
            depth=fc.depth,
            tune=fc.tune,
        )
    if name in PLANNED:
        raise ConfigError(
            f"engine {name!r} is not available in this build yet; available: {', '.join(AVAILABLE)}"
        )
    raise ConfigError(
        f"'train.engine' must be one of {', '.join(AVAILABLE + PLANNED)} (got {name!r})"
    )


__all__ = [
    "AVAILABLE",
    "LINK_KINDS",
    "TIME_KEYS",
    "Engine",
    "EpochStats",
    "StepStats",
    "build_engine",
]
