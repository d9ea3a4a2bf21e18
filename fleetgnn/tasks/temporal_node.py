"""Temporal node classification: every node is classified at its node time.

A graph's ``node_time`` (:attr:`~fleetgnn.graph.Graph.node_time`) says when each node's label is
asked (its creation time, the moment it changes class, ...). The task is node classification
(its loss, metric sums and selection metric are :class:`~fleetgnn.tasks.NodeClassification`'s)
in which an engine samples every seed's neighbourhood with a
:class:`~fleetgnn.sampling.TemporalSampler` at the seed's node time (strict ``<``): no block of a
training step, of an evaluation or of ``predict``/``embed`` holds an edge of the seed's time or
later, so a model cannot read a label off the future. Evaluation embeds every node of the splits
at its own time (:mod:`fleetgnn.engines.temporal_node`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph.edge_time import check_node_time
from fleetgnn.tasks.node import NodeClassification

#: The temporal sampler's strategies (``train.temporal_strategy``).
STRATEGIES: tuple[str, ...] = ("uniform", "last")


class TemporalNodeClassification(NodeClassification):
    """Node classification with every seed sampled at its node time.

    Args:
        node_time: int64 ``[N]`` node times ``>= 0`` (a graph's ``node_time``; a memory map is
            read row by row).
        strategy: The temporal sampler's ``"uniform"`` or ``"last"``
            (``train.temporal_strategy``), for training, evaluation and inference alike.

    Engines that train it sample with a :class:`~fleetgnn.sampling.TemporalSampler` (see the
    module docstring); ``reference`` and ``minibatch`` in mini-batch mode do.

    Raises:
        ConfigError: An unknown ``strategy``.
        GraphError: ``node_time`` is not int64 ``[N]``.
    """

    temporal: ClassVar[bool] = True

    def __init__(self, node_time: Any, strategy: str = "uniform") -> None:
        if strategy not in STRATEGIES:
            raise ConfigError(
                f"train.temporal_strategy must be 'uniform' or 'last' (got {strategy!r})"
            )
        if not isinstance(node_time, np.ndarray) or node_time.ndim != 1:
            raise GraphError(
                f"'node_time' must be a 1-D int64 array, one time per node (got "
                f"{type(node_time).__name__} with shape {getattr(node_time, 'shape', None)})"
            )
        check_node_time(node_time, int(node_time.shape[0]), values=False)
        #: The temporal sampler's strategy (``train.temporal_strategy``).
        self.strategy = strategy
        #: int64 ``[N]``: each node's time.
        self.node_time = node_time

    @property
    def num_nodes(self) -> int:
        """``N``: the nodes the times are for."""
        return int(self.node_time.shape[0])

    def seed_times(self, ids: torch.Tensor) -> torch.Tensor:
        """int64 ``[len(ids)]`` on the CPU: the node times of ``ids`` (global node IDs)."""
        idn = ids.detach().cpu().numpy()
        return torch.from_numpy(np.asarray(self.node_time[idn], dtype=np.int64))

    def __repr__(self) -> str:
        return f"TemporalNodeClassification(num_nodes={self.num_nodes}, strategy={self.strategy!r})"


class TypedTemporalNodeClassification(TemporalNodeClassification):
    """Temporal node classification on a typed graph's target type.

    Every target-type seed is sampled with a
    :class:`~fleetgnn.sampling.TypedTemporalSampler` at its node time (strict ``<`` in every
    relation); evaluation embeds every split node of the target type at its own time
    (:mod:`fleetgnn.engines.temporal_node`).

    Args:
        node_time: int64 ``[N_target]``: the target type's node times, by type-local ID (a typed
            graph's ``node_time[target]``).
        node_type: The target type.
        offset: The target type's first global ID (``schema.type_range(node_type)[0]``).
        strategy: ``"uniform"`` or ``"last"`` (``train.temporal_strategy``).
    """

    def __init__(
        self, node_time: Any, node_type: str, offset: int, strategy: str = "uniform"
    ) -> None:
        super().__init__(node_time, strategy)
        #: The classified node type.
        self.node_type = str(node_type)
        #: Its first global ID: ``seed_times`` takes global IDs.
        self.offset = int(offset)

    def seed_times(self, ids: torch.Tensor) -> torch.Tensor:
        """int64 ``[len(ids)]`` on the CPU: the node times of target-type global IDs ``ids``."""
        return super().seed_times(ids - self.offset)

    def __repr__(self) -> str:
        return (
            f"TypedTemporalNodeClassification(node_type={self.node_type!r}, "
            f"num_nodes={self.num_nodes}, strategy={self.strategy!r})"
        )
