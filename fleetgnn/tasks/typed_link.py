"""Link prediction on one relation of a typed graph.

:class:`TypedLinkPrediction` is :class:`~fleetgnn.tasks.LinkPrediction` over a
:class:`~fleetgnn.graph.edge_split.EdgeSplit` of one relation: its pairs are type-local
``(src, dst)`` IDs of the target relation ``(src_type, name, dst_type)``, its keyed negatives
corrupt the destination within the destination type (``K`` type-local IDs in ``[0, N_dst)``,
keyed by ``(seed, epoch, src, dst)``), and its evaluation scores the fixed pairs from the
embedding tables of the two types (:meth:`TypedLinkPrediction.typed_metric_sums`), reduced with
the same summable histogram and ranking sums.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fleetgnn.tasks.link import LinkPrediction
from fleetgnn.tasks.link_metrics import histogram_sums, ranking_sums


class TypedLinkPrediction(LinkPrediction):
    """Predict edges of one relation of a typed graph (see the module docstring).

    Args:
        split: The :class:`~fleetgnn.graph.edge_split.EdgeSplit` of the relation.
        negatives: ``K`` negatives per positive in training.
        sampler: ``"uniform"`` over the destination type, or ``"degree"`` (its in-degree in
            the training relation, to the power 0.75).
        loss: ``"bce"`` or ``"bpr"``.
        seed: Run seed (negatives are keyed by it).
        keep_target_edges: Keep a batch's target edges (and their reverses) in its own blocks.
        eval_edges: Evaluate on at most this many pairs of each evaluation split.
    """

    @property
    def relation(self) -> tuple[str, str, str]:
        """The target relation ``(src_type, name, dst_type)``."""
        return self.split.relation

    def _destinations(self, degree: bool) -> tuple[int, Any]:
        """The destination type: its node count, and in-degrees in the training relation."""
        graph = self.split.train_graph
        n_dst = graph.schema.count(self.relation[2])
        return n_dst, (np.diff(np.asarray(graph.csc[self.relation][0])) if degree else None)

    def __repr__(self) -> str:
        return (
            f"TypedLinkPrediction(split={self.split!r}, sampler={self.sampler!r}, "
            f"loss={self.loss_name!r})"
        )

    def typed_metric_sums(
        self,
        h_src: torch.Tensor,
        h_dst: torch.Tensor,
        decoder: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        share: tuple[int, int] = (0, 1),
    ) -> dict[str, torch.Tensor]:
        """Per evaluation split, the summable sums of its fixed pairs' scores.

        ``h_src`` ``[N_src, D]`` and ``h_dst`` ``[N_dst, D]``: the embeddings of every node of the
        relation's source and destination types (rows in type-local ID order).
        ``share=(r, W)``: only part ``r`` of the evaluated pairs.
        """
        out: dict[str, torch.Tensor] = {}
        dev = h_src.device

        def rows(h: torch.Tensor, ids: np.ndarray) -> torch.Tensor:
            return h[torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64)).to(dev)]

        for s in ("val", "test"):
            pos, neg, nd = self._eval_pairs(s, self.eval_positions(s, share))
            ps = decoder(rows(h_src, pos[0]), rows(h_dst, pos[1]))
            ns = decoder(rows(h_src, neg[0]), rows(h_dst, neg[1]))
            out[f"{s}_hist"] = histogram_sums(ps, ns)
            k = nd.shape[1]
            rank_neg = decoder(rows(h_src, np.repeat(pos[0], k)), rows(h_dst, nd.reshape(-1)))
            out[f"{s}_rank"] = ranking_sums(ps, rank_neg.view(-1, k))
        return out
