"""What every task gives the engines and the Trainer: the loss of a step and how it is judged.

A task is one small object (:class:`NodeClassification`, :class:`LinkPrediction`) that an engine
asks for the loss terms of a step's output rows (:meth:`Task.loss_terms`), the metric sums each
rank contributes to an evaluation, and that the Trainer asks which evaluation metric selects the
best epoch and drives early stopping (:attr:`Task.select_metric`, higher is better). A task
also says what of the dataset it reads (:attr:`Task.needs_labels`): engines load node labels and
split masks only for a task that trains on them, so link prediction runs on a graph that has
neither. Tasks are single-device math: sums leave a task as tensors, and engines add them over
ranks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch

#: A per-item loss: ``loss(output, target) -> [B]`` losses (``reduction="none"``).
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclasses.dataclass(frozen=True)
class LossTerms:
    """This rank's share of a step's loss and training metric.

    Attributes:
        total: Sum of the per-item losses (a tensor carrying the autograd graph).
        correct: Items the model gets right (node classes; link pairs on the right side of 0);
            a 0-d tensor on the logits' device, so the step does not read it on the host.
        count: Items the loss is summed over (training nodes; scored pairs).
    """

    total: torch.Tensor
    correct: int | torch.Tensor
    count: int


@runtime_checkable
class Task(Protocol):
    """A training task (see the module docstring).

    Attributes:
        name: ``"node"`` or ``"link"`` (the ``train.task`` key's values).
        select_metric: The key of ``engine.evaluate()``'s result that selects the best epoch
            and drives early stopping (higher is better).
        needs_labels: Whether a step or an evaluation reads node labels (``y``) and the split
            masks: engines refuse a dataset without them and load them only when it does
            (:func:`~fleetgnn.engines.common.require_trainable`,
            :func:`~fleetgnn.engines.common.node_labels`). Link prediction reads neither: its
            items are edges and its model's head is the embedding width.
    """

    name: str
    select_metric: str
    needs_labels: bool

    def loss_terms(self, loss: Any, out: torch.Tensor, target: torch.Tensor) -> LossTerms:
        """The loss sum and training metric of ``out`` against ``target``."""
        ...
