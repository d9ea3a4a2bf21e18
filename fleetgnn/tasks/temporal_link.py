"""Temporal link prediction: positives are timed edges, each scored at its own time.

The task of a :class:`~fleetgnn.graph.time_split.TimeSplit`: training positives are the training
events ``(src, dst, t)``; a step scores each with its ``K`` keyed negatives ``(src, w_k)``
(:class:`~fleetgnn.tasks.NegativeSampler`, as the static task draws them) and both endpoints and
every negative are embedded **at time t**: an engine samples their neighbourhoods with a
:class:`~fleetgnn.sampling.TemporalSampler` at seed time ``t`` (strict ``<``), so an edge never
sees itself, its reverse or any later edge. Target edges need no exclusion from their own
message passing (time keeps them out); a pair's earlier interactions are its history and stay.

Evaluation ranks each validation or test positive ``(src, dst, t)`` against negatives at the
same time: its one negative pair (AUC, AP) and its ``K`` negative destinations (MRR, Hits@K),
every endpoint embedded at ``t`` over the training graph. The metric sums are
:class:`~fleetgnn.tasks.LinkPrediction`'s, so ranks add them and the metrics are its metrics.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from fleetgnn.errors import ConfigError
from fleetgnn.tasks.link import LinkPrediction
from fleetgnn.tasks.link_metrics import histogram_sums, ranking_sums


class TemporalLinkPrediction(LinkPrediction):
    """Link prediction on a time split: every pair is embedded and scored at its time.

    Args:
        split: A :class:`~fleetgnn.graph.time_split.TimeSplit` (its training graph carries the
            training edges' times).
        negatives: ``K`` negatives per positive in training.
        sampler: ``"uniform"`` or ``"degree"`` (:class:`~fleetgnn.tasks.NegativeSampler`).
        loss: ``"bce"`` or ``"bpr"``.
        seed: Run seed (negatives are keyed by it).
        eval_edges: Evaluate on at most this many positives of each evaluation split, evenly
            spread over it (``None``: every one).
        strategy: The temporal sampler's ``"uniform"`` or ``"last"``
            (``train.temporal_strategy``), for training and evaluation alike.

    Engines that train it sample with a :class:`~fleetgnn.sampling.TemporalSampler` (see the
    module docstring); ``reference`` and ``minibatch`` in mini-batch mode do.
    """

    name: ClassVar[str] = "link"
    temporal: ClassVar[bool] = True

    def __init__(
        self,
        split: Any,
        negatives: int = 1,
        sampler: str = "uniform",
        loss: str = "bce",
        seed: int = 0,
        eval_edges: int | None = None,
        strategy: str = "uniform",
    ) -> None:
        if strategy not in ("uniform", "last"):
            raise ConfigError(
                f"train.temporal_strategy must be 'uniform' or 'last' (got {strategy!r})"
            )
        #: The temporal sampler's strategy (``train.temporal_strategy``).
        self.strategy = strategy
        if getattr(split, "pos_time", None) is None or split.train_graph.edge_time is None:
            raise ConfigError(
                f"temporal link prediction needs a time split (fleetgnn.graph.time_split."
                f"split_by_time) of a graph with edge times (got {type(split).__name__})"
            )
        super().__init__(
            split, negatives, sampler, loss, seed, keep_target_edges=True, eval_edges=eval_edges
        )

    def __repr__(self) -> str:
        return (
            f"TemporalLinkPrediction(split={self.split!r}, sampler={self.sampler!r}, "
            f"loss={self.loss_name!r})"
        )

    def train_pair_times(self, idx: torch.Tensor) -> torch.Tensor:
        """int64 ``[len(idx)]``: the times of the training positives at positions ``idx``."""
        return torch.from_numpy(np.asarray(self.split.pos_time["train"][idx.numpy()], np.int64))

    def eval_queries(
        self, s: str, share: tuple[int, int] = (0, 1)
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Split ``s``'s evaluated queries in part ``share`` (int64), as four arrays.

        Positives ``[2, m]``, negative pairs ``[2, m]``, negative destinations ``[m, K]`` and
        the positives' times ``[m]``.
        """
        at = self.eval_positions(s, share)
        pos, neg, nd = self._eval_pairs(s, at)
        return pos, neg, nd, np.asarray(self.split.pos_time[s][at], np.int64)

    def eval_nodes(self) -> np.ndarray | None:
        """``None``: temporal evaluation embeds its pairs' endpoints at their times, not nodes."""
        return None

    @staticmethod
    def query_sums(
        pos: torch.Tensor, neg: torch.Tensor, rank_neg: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The summable histogram and ranking sums of scored queries.

        Args:
            pos: ``[m]`` scores of the positives.
            neg: ``[m]`` scores of their negative pairs.
            rank_neg: ``[m, K]`` scores of their negative destinations.
        """
        return histogram_sums(pos, neg), ranking_sums(pos, rank_neg)

    def metric_sums(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        """Refused: temporal pairs are embedded at their times by the engine, not from one ``h``."""
        raise ConfigError(
            "temporal link prediction scores each pair at its own time: evaluate it with an "
            "engine that samples temporally (reference or minibatch, mode=minibatch)"
        )
