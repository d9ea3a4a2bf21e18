"""Which metrics show a run's results, by task: the end-of-run table and ``fleetgnn report``.

A node-classification run is judged by accuracy (``{train,val,test}_acc``); a link-prediction
run (homogeneous or typed) by AUC and AP over its evaluation pairs and MRR over its ranking
queries (``{val,test}_{auc,ap,mrr}``), and has no accuracy. Both the end-of-run table and the
report read the task off the record itself (a ``summary.json`` or a ``metrics.jsonl`` epoch),
so runs written before this module, and engines whose config names no task, are shown by what
they measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The summary table's metric rows of a node-classification run, in order.
NODE_METRICS: tuple[str, ...] = ("test_acc", "val_acc", "train_acc")
#: The summary table's metric rows of a link-prediction run, in order (MRR where computed).
LINK_METRICS: tuple[str, ...] = ("test_auc", "test_ap", "test_mrr", "val_auc", "val_ap", "val_mrr")

#: Under a node run's summary: why the epoch lines' ``train`` and the table's ``train_acc`` differ.
NODE_NOTE = (
    "accuracies are of the best-validation epoch, in evaluation mode; an epoch line's 'train' is "
    "the training-mode accuracy over that epoch's batches (dropout on, weights still changing; "
    "metrics.jsonl: train_acc, and eval_train_acc for evaluation mode)"
)
#: Under a link run's summary: which epoch its numbers are of; what an epoch line's 'train' is.
LINK_NOTE = (
    "AUC/AP/MRR are of the best-validation epoch (highest val_auc), in evaluation mode; an epoch "
    "line's 'train' is the fraction of that epoch's positive training pairs scored above all "
    "their negatives, in training mode"
)


def run_task(record: Mapping[str, Any]) -> str:
    """``"link"`` when ``record`` holds link metrics and no accuracy, else ``"node"``.

    Args:
        record: A ``summary.json`` object or a ``metrics.jsonl`` epoch record.
    """
    if record.get("val_acc") is None and record.get("test_acc") is None:
        if any(record.get(k) is not None for k in ("val_auc", "test_auc")):
            return "link"
    return "node"


def metric_keys(summary: Mapping[str, Any]) -> tuple[str, ...]:
    """The metric rows of ``summary``'s end-of-run table (a link run's MRR only when computed)."""
    if run_task(summary) == "link":
        return tuple(k for k in LINK_METRICS if not k.endswith("_mrr") or k in summary)
    return NODE_METRICS


def summary_note(summary: Mapping[str, Any]) -> str:
    """The footnote under ``summary``'s end-of-run table (it depends on the task)."""
    return LINK_NOTE if run_task(summary) == "link" else NODE_NOTE
