"""Tasks: what a step trains on and how it is judged (see :mod:`fleetgnn.tasks.base`).

Single-device math between ``cost`` and ``engines``: engines ask a task for a step's loss terms
and an evaluation's metric sums and add the sums over ranks; the Trainer asks it which metric
selects the best epoch. Never imports ``torch.distributed``.
"""

from fleetgnn.tasks.base import LossFn, LossTerms, Task
from fleetgnn.tasks.link import LinkPrediction, NegativeSampler, TypedLinkPrediction
from fleetgnn.tasks.node import (
    NODE_CLASSIFICATION,
    NodeClassification,
    check_label_range,
    cross_entropy,
)
from fleetgnn.tasks.temporal_link import TemporalLinkPrediction
from fleetgnn.tasks.temporal_node import (
    TemporalNodeClassification,
    TypedTemporalNodeClassification,
)


def task_of(engine: object) -> Task:
    """The task ``engine`` trains (node classification for an engine that names none)."""
    task = getattr(engine, "task", None)
    return task if task is not None else NODE_CLASSIFICATION


__all__ = [
    "NODE_CLASSIFICATION",
    "LossFn",
    "LinkPrediction",
    "LossTerms",
    "NegativeSampler",
    "NodeClassification",
    "Task",
    "TemporalLinkPrediction",
    "TemporalNodeClassification",
    "TypedLinkPrediction",
    "TypedTemporalNodeClassification",
    "check_label_range",
    "cross_entropy",
    "task_of",
]
