"""Link prediction: keyed negative sampling, pair losses and the task object.

A step trains on positive pairs ``(src, dst)`` (training edges) and ``K`` negatives per positive
that corrupt the destination: ``(src, w_1), ..., (src, w_K)``. The negatives are drawn from the
keyed hash of :mod:`fleetgnn.ops.random`, keyed by ``(seed, step, src, dst)`` (``step`` the global
step, ``epoch * steps_per_epoch + step``), so every engine, world size and resumed run draws the
same negatives for the same positive. Losses are per positive (a row of scores
``[pos, neg_1..neg_K]``):

- ``bce``: ``softplus(-s_pos) + mean_k softplus(s_neg_k)``, binary cross-entropy on logits with
  the negatives weighted as much as the positive (PyG's GAE ``recon_loss``);
- ``bpr``: ``mean_k softplus(-(s_pos - s_neg_k))``, Bayesian personalised ranking.

On a typed graph the task is keyed by one relation (:class:`TypedLinkPrediction`): the pairs are
type-local ``(src, dst)`` IDs of the target relation ``(src_type, name, dst_type)``, the negatives
corrupt the destination within the destination type (``K`` type-local IDs in ``[0, N_dst)``, the
same keys), and evaluation scores the fixed pairs from the embedding tables of the two types
(:meth:`TypedLinkPrediction.typed_metric_sums`) with the same summable sums. Everything else (the
pairs, the losses, the evaluated shares and the metrics) is the link task's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from fleetgnn.errors import ConfigError
from fleetgnn.ops.random import hash_uniform_edges
from fleetgnn.tasks.base import LossTerms
from fleetgnn.tasks.link_metrics import auc_ap, histogram_sums, ranking_metrics, ranking_sums

NEGATIVE_SAMPLERS: tuple[str, ...] = ("uniform", "degree")
LINK_LOSSES: tuple[str, ...] = ("bce", "bpr")
#: The ``layer`` of the keyed hash reserved for negatives (ASCII "neg"; models use 0..L-1).
NEGATIVE_KEY = 0x6E6567

#: A link loss: scores ``[P, 1 + K]`` (column 0 the positive) -> per-positive losses ``[P]``.
LinkLossFn = Callable[[torch.Tensor], torch.Tensor]


def bce_loss(scores: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy on logits per positive row (see the module docstring)."""
    return F.softplus(-scores[:, 0]) + F.softplus(scores[:, 1:]).mean(dim=1)


def bpr_loss(scores: torch.Tensor) -> torch.Tensor:
    """Bayesian personalised ranking per positive row (see the module docstring)."""
    return F.softplus(-(scores[:, :1] - scores[:, 1:])).mean(dim=1)


LOSSES: dict[str, LinkLossFn] = {"bce": bce_loss, "bpr": bpr_loss}


class NegativeSampler:
    """Corrupts the destination of positive pairs: ``K`` keyed negatives per positive.

    ``uniform`` draws destinations uniformly from all nodes; ``degree`` with probability
    proportional to ``degree^0.75`` (word2vec's smoothing), by inverse CDF. Each negative uses
    48 random bits (two 24-bit draws of the keyed hash), so graphs beyond ``2^24`` nodes are
    covered. Negatives are not filtered against true edges (at the graphs' densities a collision
    is rare, as in PyG's and DGL's default samplers).

    Args:
        num_nodes: ``N``.
        k: Negatives per positive (>= 1).
        kind: ``"uniform"`` or ``"degree"``.
        degrees: ``[N]`` node degrees (``"degree"`` only).
        seed: Run seed.
    """

    def __init__(
        self,
        num_nodes: int,
        k: int = 1,
        kind: str = "uniform",
        degrees: Any = None,
        seed: int = 0,
    ) -> None:
        if kind not in NEGATIVE_SAMPLERS:
            raise ConfigError(
                f"negative sampler {kind!r} is unknown; use one of {', '.join(NEGATIVE_SAMPLERS)}"
            )
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ConfigError(f"negatives per positive must be an int >= 1 (got {k!r})")
        self.num_nodes, self.k, self.kind, self.seed = int(num_nodes), k, kind, int(seed)
        self.cdf: torch.Tensor | None = None
        if kind == "degree":
            if degrees is None:
                raise ConfigError("the 'degree' negative sampler needs the node degrees")
            w = np.asarray(degrees, dtype=np.float64) ** 0.75
            if not w.sum() > 0:
                w = np.ones(self.num_nodes)
            self.cdf = torch.from_numpy(np.cumsum(w) / w.sum())

    def __repr__(self) -> str:
        return f"NegativeSampler(kind={self.kind!r}, k={self.k}, num_nodes={self.num_nodes})"

    def sample(self, src: torch.Tensor, dst: torch.Tensor, step: int) -> torch.Tensor:
        """Negative destinations ``[P, K]`` (int64) of positives ``(src[i], dst[i])`` at ``step``.

        Row ``i`` depends only on ``(seed, step, src[i], dst[i])``, not on ``i`` or on the
        other pairs of the batch.
        """
        u = hash_uniform_edges(
            self.seed, int(step), NEGATIVE_KEY, src, dst, 2 * self.k, torch.float64
        )
        u = (u[:, 0::2] + u[:, 1::2] * 2.0**-24).clamp_(max=1.0 - 2.0**-53)  # 48 bits, [0, 1)
        if self.cdf is None:
            return (u * self.num_nodes).floor_().to(torch.int64)
        cdf = self.cdf.to(u.device)
        return (
            torch.searchsorted(cdf, u.reshape(-1), right=True)
            .clamp_(max=self.num_nodes - 1)
            .view_as(u)
        )


class LinkPrediction:
    """Predict edges: train on positive pairs and keyed negatives, judge by AUC/AP and MRR.

    Args:
        split: The :class:`~fleetgnn.graph.edge_split.EdgeSplit` (its training edges are the
            message-passing graph and the positives).
        negatives: ``K`` negatives per positive in training.
        sampler: ``"uniform"`` or ``"degree"`` (:class:`NegativeSampler`).
        loss: ``"bce"`` or ``"bpr"``.
        seed: Run seed (negatives are keyed by it).
        keep_target_edges: In edge mini-batches, keep a batch's target edges (and their
            reverses) in its own message passing (default: excluded, so the model cannot read
            an edge's existence off its own neighbourhood).
        eval_edges: Evaluate on at most this many pairs of each evaluation split, evenly spread
            over it (with their fixed negatives); ``None``: every pair. Capped, the engines
            compute only the embeddings of those pairs' endpoints (:meth:`eval_nodes`).

    Evaluation reports ``{val,test}_auc``, ``_ap`` (GAE protocol negatives) and ``_mrr``,
    ``_hits@K`` (OGB protocol negatives); the best epoch is selected on ``val_auc``.
    ``loss_terms`` counts as "correct" a positive scored above all its negatives. Node labels
    and split masks are never read (:attr:`~fleetgnn.tasks.Task.needs_labels`): a graph with
    features and edges alone trains.
    """

    name: ClassVar[str] = "link"
    select_metric: ClassVar[str] = "val_auc"
    needs_labels: ClassVar[bool] = False

    def __init__(
        self,
        split: Any,
        negatives: int = 1,
        sampler: str = "uniform",
        loss: str = "bce",
        seed: int = 0,
        keep_target_edges: bool = False,
        eval_edges: int | None = None,
    ) -> None:
        if loss not in LOSSES:
            raise ConfigError(f"link loss {loss!r} is unknown; use one of {', '.join(LOSSES)}")
        self.split = split
        self.loss_name = loss
        self.loss_fn: LinkLossFn = LOSSES[loss]
        self.keep_target_edges = bool(keep_target_edges)
        if eval_edges is not None and (
            isinstance(eval_edges, bool) or not isinstance(eval_edges, int) or eval_edges < 1
        ):
            raise ConfigError(f"'eval_edges' must be an int >= 1 or None (got {eval_edges!r})")
        self.eval_edges = eval_edges
        n, degrees = self._destinations(sampler == "degree")
        self.sampler = NegativeSampler(n, negatives, sampler, degrees, seed)

    def _destinations(self, degree: bool) -> tuple[int, Any]:
        """The nodes negatives replace destinations with.

        Their count, and their in-degrees in the message-passing graph when the sampler is
        degree-biased (``degree``).
        """
        graph = self.split.train_graph
        return graph.num_nodes, (graph.in_degrees() if degree else None)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(split={self.split!r}, sampler={self.sampler!r}, "
            f"loss={self.loss_name!r})"
        )

    def train_pairs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The training positives ``(src [P], dst [P])`` (int64)."""
        pos = torch.from_numpy(self.split.pos["train"])
        return pos[0], pos[1]

    def num_train_pairs(self) -> int:
        """Number of training positives."""
        return int(self.split.pos["train"].shape[1])

    @property
    def relation(self) -> tuple[str, str, str] | None:
        """The pairs' relation on a typed graph; ``None``: a homogeneous graph's edges."""
        return None

    def train_pair_times(self, idx: torch.Tensor) -> torch.Tensor | None:
        """The times of the training positives at ``idx``; ``None``: a static task has none."""
        return None

    def train_pair_rows(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The training positives at positions ``idx`` (int64 ``src``, ``dst``), read in place.

        Only those pairs are read from the split's (possibly memory-mapped) array.
        """
        at = idx.numpy()
        order = np.argsort(at, kind="stable")  # ascending reads; results in ``idx`` order
        rows = np.empty((2, at.size), np.int64)
        rows[:, order] = self.split.pos["train"][:, at[order]]
        pos = torch.from_numpy(rows)
        return pos[0], pos[1]

    def loss_terms(
        self, loss: LinkLossFn | None, scores: torch.Tensor, target: Any = None
    ) -> LossTerms:
        """Summed per-positive loss of ``scores`` ``[P, 1 + K]`` (column 0 the positive).

        Args:
            loss: A link loss (``None``: the task's own).
            scores: ``[P, 1 + K]`` logits of each positive and its negatives.
            target: Unused (the columns say which score is the positive).
        """
        per_pos = (loss or self.loss_fn)(scores)
        if scores.shape[0] == 0:
            return LossTerms(per_pos.sum(), 0, 0)
        correct = (scores[:, 0:1] > scores[:, 1:]).all(dim=1).sum()  # a device count
        return LossTerms(per_pos.sum(), correct, int(scores.shape[0]))

    # ------------------------------------------------------------------ evaluation
    def eval_positions(self, s: str, share: tuple[int, int] = (0, 1)) -> np.ndarray:
        """Positions of split ``s``'s evaluated pairs in part ``share=(r, W)`` (int64).

        Every pair, or ``eval_edges`` of them evenly spread over the split; cut into ``W``
        contiguous, near-equal parts (rank ``r``'s is part ``r``; the parts make the whole).
        """
        n = int(self.split.pos[s].shape[1])
        c = n if self.eval_edges is None else min(n, self.eval_edges)
        r, w = share
        at = np.arange(c * r // w, c * (r + 1) // w, dtype=np.int64)
        return at if c == n else at * n // c

    def _eval_pairs(self, s: str, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Positives ``[2, m]``, GAE ``[2, m]`` and OGB ``[m, K]`` negatives of ``s`` at ``at``."""
        contiguous = at.size == 0 or int(at[-1]) - int(at[0]) + 1 == at.size
        cols = slice(int(at[0]), int(at[-1]) + 1) if contiguous and at.size else at
        pos = np.asarray(self.split.pos[s][:, cols], np.int64)
        neg = np.asarray(self.split.neg[s][:, cols], np.int64)
        nd = np.asarray(self.split.neg_dst[s][cols], np.int64)
        return pos, neg, nd

    def eval_pairs(self, s: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Split ``s``'s evaluated pairs: positives ``[2, m]``, GAE ``[2, m]``, OGB ``[m, K]``.

        Every pair, or ``eval_edges`` of them evenly spread over the split (the pairs every
        rank's share of :meth:`eval_positions` makes up).
        """
        return self._eval_pairs(s, self.eval_positions(s))

    def eval_nodes(self) -> np.ndarray | None:
        """Sorted distinct endpoints of every evaluated pair (``None`` when uncapped: all nodes).

        Every rank derives the same set; it bounds the embeddings evaluation needs.
        """
        if self.eval_edges is None:
            return None
        parts = []
        for s in ("val", "test"):
            pos, neg, nd = self._eval_pairs(s, self.eval_positions(s))
            parts += [pos.reshape(-1), neg.reshape(-1), nd.reshape(-1)]
        return np.unique(np.concatenate(parts))

    def metric_sums(
        self,
        h: torch.Tensor,
        decoder: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        share: tuple[int, int] = (0, 1),
        nodes: np.ndarray | None = None,
    ) -> dict[str, torch.Tensor]:
        """Per evaluation split, the summable histogram and ranking sums of its fixed pairs.

        ``h``: the embeddings (from the message-passing graph of training edges) of every node
        ``[N, D]``, or of ``nodes`` (sorted node IDs, covering :meth:`eval_nodes`) in their
        order. Returns ``{"val_hist", "val_rank", "test_hist", "test_rank"}``
        (:func:`~fleetgnn.tasks.link_metrics.histogram_sums`, :func:`...ranking_sums`).
        ``share=(r, W)``: only part ``r`` of the evaluated pairs (:meth:`eval_positions`;
        the parts' sums add up to the whole's).
        """
        return self._pair_sums(_rows_of(h, nodes), _rows_of(h, nodes), decoder, share)

    def _pair_sums(
        self,
        src_rows: Callable[[np.ndarray], torch.Tensor],
        dst_rows: Callable[[np.ndarray], torch.Tensor],
        decoder: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        share: tuple[int, int],
    ) -> dict[str, torch.Tensor]:
        """:meth:`metric_sums` with the pairs' source and destination rows read by ``*_rows``."""
        out: dict[str, torch.Tensor] = {}
        for s in ("val", "test"):
            pos, neg, nd = self._eval_pairs(s, self.eval_positions(s, share))
            ps = decoder(src_rows(pos[0]), dst_rows(pos[1]))
            ns = decoder(src_rows(neg[0]), dst_rows(neg[1]))
            out[f"{s}_hist"] = histogram_sums(ps, ns)
            k = nd.shape[1]
            rank_neg = decoder(src_rows(np.repeat(pos[0], k)), dst_rows(nd.reshape(-1)))
            out[f"{s}_rank"] = ranking_sums(ps, rank_neg.view(-1, k))
        return out

    @staticmethod
    def metrics_from_sums(sums: dict[str, torch.Tensor]) -> dict[str, float]:
        """``{split}_auc``, ``_ap``, ``_mrr`` and ``_hits@K`` from summed :meth:`metric_sums`."""
        out: dict[str, float] = {}
        for s in ("val", "test"):
            auc, ap = auc_ap(sums[f"{s}_hist"])
            out[f"{s}_auc"], out[f"{s}_ap"] = auc, ap
            out.update(ranking_metrics(sums[f"{s}_rank"], s))
        return out

    def evaluate(
        self,
        h: torch.Tensor,
        decoder: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
        share: tuple[int, int] = (0, 1),
        nodes: np.ndarray | None = None,
    ) -> dict[str, float]:
        """The evaluation metrics of embeddings ``h`` (``reduce`` sums a tensor over ranks).

        With ``reduce``, each rank scores its ``share`` of the pairs; ``h`` holds every node's
        row, or those of ``nodes`` (:meth:`metric_sums`).
        """
        sums = self.metric_sums(h, decoder, share, nodes)
        if reduce is not None:
            sums = {k: reduce(v) for k, v in sums.items()}
        return self.metrics_from_sums(sums)


def _rows_of(h: torch.Tensor, nodes: np.ndarray | None) -> Callable[[np.ndarray], torch.Tensor]:
    """``ids -> h``'s rows of them: ``h`` holds every node's row, or those of sorted ``nodes``."""
    table = None if nodes is None else torch.from_numpy(np.asarray(nodes, np.int64))

    def rows(ids: np.ndarray) -> torch.Tensor:
        at = torch.from_numpy(ids)
        if table is not None:
            at = torch.searchsorted(table, at)
        return h[at.to(h.device)]

    return rows


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
        return self._pair_sums(_rows_of(h_src, None), _rows_of(h_dst, None), decoder, share)
