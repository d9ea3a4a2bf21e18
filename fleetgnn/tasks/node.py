"""Node classification: a cross-entropy over labelled nodes, judged by accuracy per split."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.tasks.base import LossFn, LossTerms

SPLITS: tuple[str, ...] = ("train", "val", "test")


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The default loss: per-node cross-entropy, ``[B]``."""
    return F.cross_entropy(logits, target, reduction="none")


def check_label_range(y: Any, masks: Sequence[Any], num_classes: int) -> None:
    """Raise :class:`~fleetgnn.errors.GraphError` unless every masked label lies in ``[0, C)``.

    Run once where labels are loaded (on the host, no device sync), not at every step's loss.
    Unmasked nodes may hold anything (``-1`` marks an unlabelled node).

    Args:
        y: Integer labels ``[R]`` (numpy or a CPU tensor).
        masks: Bool ``[R]`` masks of the splits whose labels are used (train/val/test).
        num_classes: ``C``.
    """
    yn = y.numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
    if yn.size == 0 or not masks:
        return
    used = np.zeros(yn.shape[0], dtype=bool)
    for m in masks:
        used |= m.numpy() if isinstance(m, torch.Tensor) else np.asarray(m, dtype=bool)
    vals = yn[used]
    if vals.size == 0:
        return
    check_label_bounds(int(vals.min()), int(vals.max()), num_classes)


def check_label_bounds(lo: int, hi: int, num_classes: int) -> None:
    """Raise :class:`~fleetgnn.errors.GraphError` unless labels ``lo..hi`` lie in ``[0, C)``.

    ``lo``/``hi``: the smallest and largest label used (training or validation nodes').
    """
    c = int(num_classes)
    if lo < 0 or hi >= c:
        bad = lo if lo < 0 else hi
        raise GraphError(
            f"'y' holds label {bad} for a training or validation node, outside the model's "
            f"{c} classes [0, {c}); the labels changed after their values were checked: run "
            f"'fleetgnn info DATASET --verify' (or prepare the dataset again)"
        )


class NodeClassification:
    """Classify nodes: the loss is a per-node loss over a step's training nodes.

    ``loss_terms`` counts correct argmax predictions; evaluation reports ``{split}_acc`` and
    ``val_loss`` from summed ``(correct, count)`` pairs and is selected on ``val_acc``.
    Labels are range-checked once where an engine loads them (:func:`check_label_range`).
    """

    name: ClassVar[str] = "node"
    select_metric: ClassVar[str] = "val_acc"
    needs_labels: ClassVar[bool] = True

    def __repr__(self) -> str:
        return "NodeClassification()"

    def seed_times(self, ids: torch.Tensor) -> torch.Tensor | None:
        """The times the seeds ``ids`` are sampled at; ``None``: a static task has none."""
        return None

    def loss_terms(self, loss: LossFn, logits: torch.Tensor, target: torch.Tensor) -> LossTerms:
        """Summed per-node loss of ``logits`` ``[B, C]`` against ``target`` ``[B]``; correct count.

        Raises:
            ConfigError: If ``loss`` does not return one value per node.
        """
        per_node = loss(logits, target)
        if not isinstance(per_node, torch.Tensor) or per_node.shape != target.shape[:1]:
            got = tuple(per_node.shape) if isinstance(per_node, torch.Tensor) else type(per_node)
            raise ConfigError(
                f"'loss' must return one loss per node, shape {tuple(target.shape[:1])} (got "
                f"{got}); use reduction='none', e.g. torch.nn.CrossEntropyLoss(reduction='none')"
            )
        # a device count: the step reads it on the host only after it has run
        correct = (logits.argmax(dim=1) == target).sum() if target.numel() else 0
        return LossTerms(per_node.sum(), correct, int(target.numel()))

    def metric_sums(
        self, logits: torch.Tensor, y: torch.Tensor, masks: Mapping[str, torch.Tensor]
    ) -> tuple[list[str], torch.Tensor]:
        """The splits present and their float64 sums ``[correct, count]*, (val loss sum)``.

        Every rank computes them over the rows it holds; summing them over ranks before
        :meth:`metrics_from_sums` gives the single-process value.
        """
        pred = logits.argmax(dim=1)
        keys = [s for s in SPLITS if s in masks]
        sums: list[float] = []
        for s in keys:
            m = masks[s]
            sums += [float((pred[m] == y[m]).sum()), float(m.sum())]
        if "val" in masks:
            m = masks["val"]
            val = F.cross_entropy(logits[m], y[m], reduction="sum") if m.any() else 0.0
            sums.append(float(val))
        return keys, torch.tensor(sums, dtype=torch.float64)

    @staticmethod
    def metrics_from_sums(keys: Sequence[str], t: torch.Tensor, has_val: bool) -> dict[str, float]:
        """``{split}_acc`` and ``val_loss`` from :meth:`metric_sums` (summed over ranks).

        Args:
            keys: The splits, in :data:`SPLITS` order.
            t: float64 ``[correct_0, count_0, correct_1, count_1, ..., (val loss sum)]``.
            has_val: Whether the last entry is the validation loss sum.
        """
        out: dict[str, float] = {}
        for i, s in enumerate(keys):
            out[f"{s}_acc"] = float(t[2 * i] / t[2 * i + 1]) if t[2 * i + 1] else float("nan")
        if has_val:
            n_val = float(t[2 * list(keys).index("val") + 1])
            out["val_loss"] = float(t[-1] / n_val) if n_val else float("nan")
        return out

    def evaluate(
        self,
        logits: torch.Tensor,
        y: torch.Tensor,
        masks: Mapping[str, torch.Tensor],
        reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> dict[str, float]:
        """Accuracy per split and the mean validation loss (``reduce`` sums over ranks)."""
        keys, t = self.metric_sums(logits, y, masks)
        if reduce is not None:
            t = reduce(t)
        return self.metrics_from_sums(keys, t, "val" in masks)


#: The one node-classification task (it holds no state).
NODE_CLASSIFICATION = NodeClassification()
