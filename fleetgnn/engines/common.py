"""Pieces every engine shares: dtypes, data checks, labels and features, model, optimizer, metrics.

Every engine builds the same model the same way (same seed, same initialisation) and evaluates
with numerators and denominators summed over ranks, so their results are comparable bit for bit
with the single-process reference.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fleetgnn.errors import ConfigError, DatasetError
from fleetgnn.graph import Graph
from fleetgnn.nn import build_model

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float64": torch.float64}
SPLITS: tuple[str, ...] = ("train", "val", "test")


def require_trainable(graph: Graph) -> None:
    """Raise :class:`DatasetError` unless ``graph`` has features, labels and a training split."""
    if graph.y is None or graph.train_mask is None:
        raise DatasetError(
            f"dataset '{graph.name}' has no labels or no train_mask; training needs both"
        )
    if graph.x is None:
        raise DatasetError(
            f"dataset '{graph.name}' has no node features (x); training needs them; prepare the "
            f"dataset with --features"
        )


def num_classes_of(graph: Graph) -> int:
    """The class count: ``graph.num_classes``, else ``max(y) + 1``."""
    return int(graph.num_classes or int(np.max(np.asarray(graph.y))) + 1)


def labels_and_masks(
    graph: Graph, lo: int = 0, hi: int | None = None, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Labels ``[R]`` and split masks of rows ``[lo, hi)`` as owned tensors on ``device``."""
    hi = graph.num_nodes if hi is None else hi
    y = torch.from_numpy(np.array(graph.y[lo:hi], dtype=np.int64)).to(device)
    masks = {
        s: torch.from_numpy(np.array(getattr(graph, f"{s}_mask")[lo:hi], dtype=bool)).to(device)
        for s in SPLITS
        if getattr(graph, f"{s}_mask") is not None
    }
    return y, masks


def model_kwargs(cfg: Any) -> dict[str, Any]:
    """Keyword arguments for :func:`~fleetgnn.nn.build_model` from a ModelConfig.

    Fields left ``None`` fall back to the model's own defaults.
    """
    out: dict[str, Any] = {"num_layers": cfg.num_layers}
    for key in ("hidden", "dropout", "heads", "norm"):
        value = getattr(cfg, key, None)
        if value is not None:
            out["hidden_dim" if key == "hidden" else key] = value
    if getattr(cfg, "residual", False):
        out["residual"] = True
    return out


def build_replica(
    config: Any, in_dim: int, num_classes: int, device: torch.device | str, dtype: torch.dtype
) -> torch.nn.Module:
    """The model of ``config``, initialised from ``train.seed`` (identical on every rank)."""
    seed = int(config.train.seed)
    torch.manual_seed(seed)  # parameter initialisation only; training draws are keyed
    model = build_model(
        config.model.name, in_dim, num_classes, seed=seed, **model_kwargs(config.model)
    )
    return model.to(device=device, dtype=dtype)


def build_optimizer(model: torch.nn.Module, cfg: Any) -> torch.optim.Optimizer:
    """The optimizer named by ``optim.optimizer`` over ``model``'s parameters."""
    name = getattr(cfg, "optimizer", "adam")
    classes = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    if name not in classes:
        raise ConfigError(f"'optim.optimizer' must be one of adam, adamw, sgd (got {name!r})")
    return classes[name](model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)


def node_features(graph: Graph, dtype: torch.dtype, feature_norm: str = "none") -> torch.Tensor:
    """The feature matrix as an owned tensor, normalised per ``data.feature_norm``."""
    x = torch.from_numpy(np.array(graph.x, copy=True)).to(dtype)  # owned, writable copy
    return normalize_rows(x, feature_norm)


def normalize_rows(x: torch.Tensor, feature_norm: str) -> torch.Tensor:
    """Apply ``data.feature_norm`` to rows of features (row-wise, so any subset of rows works).

    ``"row"`` scales each row to unit L1 norm: GCN's row normalisation for non-negative
    bag-of-words features, and still well defined when features can be negative.
    """
    if feature_norm == "row":
        return x / x.abs().sum(dim=1, keepdim=True).clamp_min(1e-12)
    if feature_norm != "none":
        raise ConfigError(f"'data.feature_norm' must be 'none' or 'row' (got {feature_norm!r})")
    return x


def split_metrics(
    logits: torch.Tensor,
    y: torch.Tensor,
    masks: Mapping[str, torch.Tensor],
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> dict[str, float]:
    """Accuracy per split and the mean validation loss of the rows this rank holds.

    Every rank computes ``(correct, count)`` per split and the summed validation loss over its
    rows; ``reduce`` (e.g. :meth:`~fleetgnn.distributed.Communicator.all_reduce_sum`) adds them over
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
