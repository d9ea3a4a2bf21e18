"""Evaluation metrics from per-rank numerators and denominators (never averages of averages)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F

SPLITS: tuple[str, ...] = ("train", "val", "test")


def split_metrics(
    logits: torch.Tensor,
    y: torch.Tensor,
    masks: Mapping[str, torch.Tensor],
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> dict[str, float]:
    """Accuracy per split and the mean validation loss of the rows this rank holds.

    Every rank computes ``(correct, count)`` per split and the summed validation loss over its
    rows; ``reduce`` (e.g. :meth:`~fleetgnn.dist.Communicator.all_reduce_sum`) adds them over
    ranks before the divisions, so the result equals the single-process value.

    Args:
        logits: ``[R, C]`` logits of this rank's rows.
        y: ``[R]`` labels of the same rows.
        masks: Split name -> bool ``[R]`` over the same rows.
        reduce: Sums a float64 tensor over ranks (``None``: one process).

    Returns:
        ``{"train_acc", "val_acc", "test_acc", "val_loss"}`` for the splits present (NaN where a
        split is empty everywhere).
    """
    pred = logits.argmax(dim=1)
    keys = [s for s in SPLITS if s in masks]
    sums: list[float] = []
    for s in keys:
        m = masks[s]
        sums += [float((pred[m] == y[m]).sum()), float(m.sum())]
    if "val" in masks:
        m = masks["val"]
        sums.append(float(F.cross_entropy(logits[m], y[m], reduction="sum")) if m.any() else 0.0)
    t = torch.tensor(sums, dtype=torch.float64)
    if reduce is not None:
        t = reduce(t)
    out: dict[str, float] = {}
    for i, s in enumerate(keys):
        out[f"{s}_acc"] = float(t[2 * i] / t[2 * i + 1]) if t[2 * i + 1] else float("nan")
    if "val" in masks:
        n_val = float(t[2 * keys.index("val") + 1])
        out["val_loss"] = float(t[-1] / n_val) if n_val else float("nan")
    return out
