"""Link prediction on one relation of a typed graph, on ``reference``, ``minibatch`` and ``split``.

The typed counterpart of :mod:`fleetgnn.engines.link`, for a
:class:`~fleetgnn.tasks.link.TypedLinkPrediction` over the target relation
``(src_type, name, dst_type)``:

- Message passing runs on the split's training graph
  (:attr:`~fleetgnn.graph.edge_split.EdgeSplit.train_graph`: validation and test
  pairs removed from the relation and from its reverse), never on the held-out edges.
- Edge mini-batches (:class:`~fleetgnn.engines.link.EdgeBatches`, the one edge builder): a
  step's positives are dealt like the homogeneous ones
  (:class:`~fleetgnn.sampling.PositionLoader` over the training pairs, equal slots per rank),
  ``K`` keyed negatives per positive corrupt the destination within the destination type
  (keyed by ``(seed, epoch, src, dst)``, so every engine and world size draws the same ones),
  and the typed sampler's ``sample_from_edges`` (given the relation) samples the
  neighbourhoods of the batch's endpoints as seeds of their types (the source type's sources;
  the destination type's destinations and negatives), with the batch's target edges and their
  reverses dropped from its blocks unless the task keeps them (``train.keep_target_edges``).
  Each rank's loss is its positives' summed loss over the step's positives on every rank, so
  the summed gradient is the gradient of the step's mean loss, as in the homogeneous engines.
- Split-parallel edge batches (``split``, :class:`TypedLinkSplitEngine`): one global edge batch
  a step, the reference's (one deal, stream 0), drawn by every rank; its typed blocks are split
  by the partition book over the training graph's global IDs relation by relation
  (:class:`~fleetgnn.engines.split_relations.TypedSplitEngine`), and each rank scores the
  positives whose source it owns, the other endpoints' rows fetched from their owners once per
  step (:func:`split_typed_edge_batch_loss`); the loss is over the batch's positives.
- Full graph (``reference``, ``mode=full``): every training pair and its negatives scored from
  one full forward over the training graph, one step per epoch.
- Evaluation (every engine alike): the end types' full-neighbourhood rows over the training
  graph, streamed layer by layer (:meth:`_TypedLink.endpoint_embeddings`: each rank computes
  its share, one all-reduce gives every rank all the rows; collective), then every rank scores
  the fixed validation and test pairs from the two types' tables, AUC/AP/MRR/Hits from the
  task's metric sums (the same numbers on every rank).

The decoders are the homogeneous ones (:mod:`fleetgnn.nn.decoders`: dot, Hadamard-MLP,
DistMult with the target relation's diagonal); the loss is the task's (``bce`` or ``bpr``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from fleetgnn.config import MinibatchEngineConfig, ReferenceEngineConfig, SplitEngineConfig
from fleetgnn.config.run import TYPED_LINK_ENGINES
from fleetgnn.engines.base import DistributedEngine, StepStats
from fleetgnn.engines.batch import MiniBatch
from fleetgnn.engines.common import (
    LossFn,
    dist_setup,
    engine_config,
    one_process_setup,
    setup_model,
)
from fleetgnn.engines.inference import typed_layer_widths
from fleetgnn.engines.link import (
    EdgeBatches,
    check_link_model,
    pair_scores,
    split_edge_batch_loss,
)
from fleetgnn.engines.split_relations import TypedSplitEngine, split_hetero_block
from fleetgnn.engines.step import Prepared, StepLoss, run_step
from fleetgnn.engines.typed import TypedMinibatchEngine, TypedReferenceEngine, _TypedData
from fleetgnn.errors import ConfigError
from fleetgnn.graph.compact_rows import applied_feature_dtypes
from fleetgnn.graph.hetero import HeteroGraph
from fleetgnn.nn.protocol import LayerwiseModule
from fleetgnn.partition import PartitionBook
from fleetgnn.sampling.hetero import full_hetero_block
from fleetgnn.tasks.link import TypedLinkPrediction


def _endpoint_rows(h: dict[str, torch.Tensor], rel: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows of ``rel``'s source type and destination type in ``h``.

    Raises:
        ConfigError: An end type has no rows (no relation of the last layer reaches it).
    """
    for t in (rel[0], rel[2]):
        if t not in h:
            raise ConfigError(
                f"no relation reaches node type {t!r} (an endpoint of the link relation {rel}) "
                f"in the model's last layer; add reverse relations (fleetgnn prepare "
                f"--add-reverse, or fleetgnn.graph.hetero.add_reverse_relations)"
            )
    return h[rel[0]], h[rel[2]]


def typed_pair_scores(
    decoder: Any,
    h: dict[str, torch.Tensor],
    rel: Any,
    src: torch.Tensor,
    dst: torch.Tensor,
    neg: torch.Tensor,
) -> torch.Tensor:
    """Scores ``[P, 1 + K]``: rows ``src`` of the source type's ``h`` against ``dst``/``neg``."""
    hs, hd = _endpoint_rows(h, rel)
    dev = hs.device
    src, dst, neg = src.to(dev), dst.to(dev), neg.to(dev)
    if rel[0] == rel[2]:
        return pair_scores(decoder, hs, src, dst, neg)
    n = hs.shape[0]
    return pair_scores(decoder, torch.cat([hs, hd]), src, dst + n, neg + n)


def typed_edge_batch_loss(
    model: Any,
    task: TypedLinkPrediction,
    h: dict[str, torch.Tensor],
    batch: MiniBatch,
    loss: Any,
) -> StepLoss:
    """The step loss of a typed edge batch from its seeds' output rows ``h`` (per type)."""
    scores = typed_pair_scores(model.decoder, h, task.relation, batch.src, batch.dst, batch.neg)
    return StepLoss.of(loss, scores, None, batch.global_count, task)  # type: ignore[arg-type]


def _require_link(graph: Any, task: Any) -> TypedLinkPrediction:
    if not isinstance(graph, HeteroGraph) or not isinstance(task, TypedLinkPrediction):
        raise ConfigError(
            "typed link prediction needs a typed graph and a TypedLinkPrediction task (got "
            f"{type(graph).__name__} and {type(task).__name__}); set train.link_relation"
        )
    return task


class _TypedLink(_TypedData):
    """What both typed link engines hold: the task, the training graph, features, evaluation."""

    task: TypedLinkPrediction

    def _setup_link(
        self, task: TypedLinkPrediction, feature_norm: str | None, feature_dtype: str | None
    ) -> None:
        self.task = task
        self.graph = task.split.train_graph
        s = self.graph.schema
        self.schema = s
        self.feature_norm = feature_norm or "none"
        self.feature_dtype = feature_dtype  # store.feature_dtype: the rows' stored values
        # per type, what it still applies (a table written compact: as stored, or widened)
        self.applied_dtypes = applied_feature_dtypes(self.graph.x, feature_dtype)
        self.offsets = {t: s.type_range(t)[0] for t in s.node_types}
        self._full = None

    def _embeddings(self, step: int = 0) -> dict[str, torch.Tensor]:
        """Every type's output rows of one full forward over the training graph."""
        full = self.full_aggregator
        x = self.features(full_hetero_block(self.graph))
        return LayerwiseModule.forward(self.module, [full] * self.num_layers, x, step=step)  # type: ignore[attr-defined,arg-type,return-value]

    @torch.no_grad()
    def infer(self) -> dict[str, torch.Tensor]:  # type: ignore[override]
        """Every type's embeddings ``{t: [N_t, D]}`` from one whole-graph forward (eval mode).

        For small graphs and tests; :meth:`evaluate` streams instead.
        """
        self.module.eval()  # type: ignore[attr-defined]
        try:
            return self._embeddings()
        finally:
            self.module.train()  # type: ignore[attr-defined]

    @torch.no_grad()
    def endpoint_embeddings(self) -> dict[str, torch.Tensor]:
        """The link relation's end types' embeddings ``{t: [N_t, D]}``, streamed.

        :func:`~fleetgnn.engines.inference.stream_typed_inference` with the two end
        types as outputs: each rank computes its share, then one all-reduce gives every rank
        all the rows (the evaluation pairs may touch any node). Only the last layer's rows of
        those types are ever held whole. Collective.
        """
        rel = self.task.relation
        widths = typed_layer_widths(self.module, self.graph, device=self.device, dtype=self.dtype)  # type: ignore[attr-defined]
        _endpoint_rows(widths[-1], rel)  # type: ignore[arg-type]  # the end types have rows
        rows = {
            t: torch.zeros(
                (self.schema.count(t), widths[-1][t]), dtype=self.dtype, device=self.device
            )
            for t in dict.fromkeys((rel[0], rel[2]))
        }

        def sink(t: str, ids: np.ndarray, out: torch.Tensor) -> None:
            rows[t][torch.from_numpy(ids).to(self.device)] = out

        self.stream(sink, outputs=list(rows))
        comm = self.comm  # type: ignore[attr-defined]
        if comm is not None and comm.world_size > 1:
            rows = {t: comm.all_reduce_sum(v) for t, v in rows.items()}
        return rows

    def evaluate(self) -> dict[str, float]:
        """``{val,test}_{auc,ap,mrr,hits@K}`` of the fixed pairs (full neighbourhoods, streamed)."""
        hs, hd = _endpoint_rows(self.endpoint_embeddings(), self.task.relation)
        with torch.no_grad():
            sums = self.task.typed_metric_sums(hs, hd, self.module.decoder)  # type: ignore[attr-defined]
        return self.task.metrics_from_sums({k: v.cpu() for k, v in sums.items()})


class TypedLinkReferenceEngine(_TypedLink, TypedReferenceEngine):
    """Single-process typed link prediction: the ground truth of the typed link engines.

    Args:
        model: A :class:`~fleetgnn.nn.decoders.LinkModel` over a typed encoder
            (:class:`~fleetgnn.nn.hetero.HeteroGNN` giving embeddings of width ``D``).
        graph: The typed graph (its split's training graph is what passes messages).
        ctx: Unused (single process).
        config: A :class:`~fleetgnn.config.ReferenceEngineConfig` (``mode`` minibatch or full).
        optimizer: Over ``model``'s parameters (``None``: Adam, lr 0.01).
        loss: A link loss on ``[P, 1 + K]`` scores (``None``: the task's).
        fanouts: Per-relation fanouts overriding ``config.fanouts``.
        task: The :class:`~fleetgnn.tasks.link.TypedLinkPrediction`.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        graph: HeteroGraph,
        ctx: Any = None,
        config: ReferenceEngineConfig | None = None,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        loss: LossFn | None = None,
        fanouts: Any = None,
        task: Any = None,
    ) -> None:
        config = one_process_setup(self, config)
        task = _require_link(graph, task)
        self._setup_link(task, config.feature_norm, config.feature_dtype)
        loss = loss if loss is not None else task.loss_fn
        self.model = self.module = setup_model(self, model, optimizer, loss, broadcast=False)
        check_link_model(self.module)
        if self.mode == "minibatch":
            self._setup_sampler(fanouts, config.fanouts)
            self.edges = EdgeBatches(task, self.sampler, config.batch_size, seed=self.seed)

    def steps_per_epoch(self) -> int:
        """One step in full mode; the number of edge batches in mini-batch mode."""
        return 1 if self.mode == "full" else self.edges.num_batches

    def train_step(self, epoch: int, step: int) -> StepStats:
        """One optimisation step (full graph, or one edge batch)."""
        t0 = self.clock()
        g_step = epoch * self.steps_per_epoch() + step
        task = self.task
        if self.mode == "full":
            src, dst = task.train_pairs()
            neg = task.sampler.sample(src, dst, epoch)  # one step per epoch: keyed by epoch
            t_prep = self.clock() - t0

            def forward() -> StepLoss:
                h = self._embeddings(step=g_step)
                scores = typed_pair_scores(self.module.decoder, h, task.relation, src, dst, neg)
                return StepLoss.of(self.loss, scores, None, int(src.numel()), task)  # type: ignore[arg-type]

        else:
            batch = self.edges.batch(epoch, step)
            aggs = self.aggregators(batch.blocks)
            x = self.features(batch.blocks[0])
            t_prep = self.clock() - t0

            def forward() -> StepLoss:
                h = self.module(aggs, x, step=g_step)
                return typed_edge_batch_loss(self.module, task, h, batch, self.loss)

        return run_step(self, forward, prepared=Prepared(t_prep, 0.0, inline=t_prep))


class TypedLinkMinibatchEngine(_TypedLink, TypedMinibatchEngine):
    """Data-parallel typed link prediction on edge mini-batches (see the module docstring).

    Args: as :class:`~fleetgnn.engines.typed.TypedMinibatchEngine`, plus ``task`` (the
    :class:`~fleetgnn.tasks.link.TypedLinkPrediction`); ``loss`` ``None``: the task's.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        graph: HeteroGraph,
        ctx: Any = None,
        config: MinibatchEngineConfig | None = None,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        loss: LossFn | None = None,
        fanouts: Any = None,
        task: Any = None,
    ) -> None:
        from fleetgnn.distributed import TrafficMeter

        cfg = engine_config(self.name, config, self.config_cls)
        task = _require_link(graph, task)
        DistributedEngine.__init__(self, dist_setup(self.name, cfg, ctx), task.split.train_graph)
        self._setup_link(task, cfg.feature_norm, cfg.feature_dtype)
        self.store = None
        self.store_comm = None
        if self.graph.x and (cfg.device_budget is not None or cfg.host_budget is not None):
            self._build_store(cfg, TrafficMeter)
        loss = loss if loss is not None else task.loss_fn
        self.module = self.model = setup_model(self, model, optimizer, loss)
        check_link_model(self.module)
        self._setup_sampler(fanouts, cfg.fanouts)
        self.edges = self._edge_batches(cfg)
        self._setup_prefetch(cfg)

    def _edge_batches(self, cfg: Any) -> EdgeBatches:
        """This rank's slot of every step's training pairs (its blocks: ``stream = rank``)."""
        return EdgeBatches(
            self.task,
            self.sampler,
            cfg.batch_size,
            rank=self.rank,
            world_size=self.world_size,
            seed=self.seed,
        )

    def steps_per_epoch(self) -> int:
        """Edge batches per epoch, equal on every rank."""
        return self.edges.num_batches

    def _sample(self, epoch: int, step: int) -> MiniBatch:
        """This rank's edge batch (its pairs set)."""
        return self.edges.batch(epoch, step)

    def _step_loss(self, out: Any, batch: MiniBatch) -> StepLoss:
        return typed_edge_batch_loss(self.module, self.task, out, batch, self.loss)


def split_typed_edge_batch_loss(
    model: Any,
    task: TypedLinkPrediction,
    comm: Any,
    h_own: dict[str, torch.Tensor],
    batch: MiniBatch,
    owner: np.ndarray,
    loss: Any,
) -> StepLoss:
    """This rank's share of a split typed edge batch's loss (one global batch a step).

    ``h_own[t]``: the output rows of the seeds of type ``t`` this rank owns (``owner`` of their
    global IDs), in seed order. The end types' seeds are laid end to end (the source type's,
    then the destination type's; one list when they are one type), so the homogeneous
    :func:`~fleetgnn.engines.link.split_edge_batch_loss` scores the positives whose source this
    rank owns, the other endpoints' rows fetched from their owners. Collective.
    """
    s_t, _, d_t = task.relation
    hs, hd = _endpoint_rows(h_own, task.relation)
    dst, neg = batch.dst, batch.neg
    if s_t == d_t:
        seeds, h = batch.seeds[s_t], hs
    else:
        n = int(batch.seeds[s_t].numel())
        seeds, h = torch.cat([batch.seeds[s_t], batch.seeds[d_t]]), torch.cat([hs, hd])
        dst, neg = dst + n, neg + n
    flat = dataclasses.replace(batch, seeds=seeds, dst=dst, neg=neg)
    seed_owner = torch.from_numpy(np.asarray(owner[seeds.numpy()], dtype=np.int64))
    return split_edge_batch_loss(model, task, comm, h, flat, seed_owner, loss)  # type: ignore[arg-type]


class TypedLinkSplitEngine(TypedLinkMinibatchEngine, TypedSplitEngine):
    """Split-parallel link prediction on one relation of a typed graph (see the module docstring).

    The typed link engine (:class:`~fleetgnn.engines.typed_link.TypedLinkMinibatchEngine`) with
    the reference's edge batch on every rank (:meth:`_edge_batches`), its typed blocks split by
    the partition book over the training graph's global IDs (:meth:`_sample`), the split's
    aggregators and numbers (:class:`TypedSplitEngine`), and the pairs scored by the owner of
    their source (:func:`split_typed_edge_batch_loss`).

    Args: as :class:`~fleetgnn.engines.typed_link.TypedLinkMinibatchEngine` with a
    :class:`~fleetgnn.config.SplitEngineConfig`, plus ``book`` (a partition book over the
    global IDs to use instead of the config's).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        graph: HeteroGraph,
        ctx: Any = None,
        config: SplitEngineConfig | None = None,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        loss: LossFn | None = None,
        fanouts: Any = None,
        task: Any = None,
        book: PartitionBook | None = None,
    ) -> None:
        TypedLinkMinibatchEngine.__init__(
            self,
            model,
            graph,
            ctx,
            config,  # type: ignore[arg-type]
            optimizer=optimizer,
            loss=loss,
            fanouts=fanouts,
            task=task,
        )
        self._setup_split(book)  # over the training graph (held-out pairs removed)

    def _edge_batches(self, cfg: Any) -> EdgeBatches:
        """The reference's deal: ONE batch of training pairs per step for all ranks."""
        return EdgeBatches(self.task, self.sampler, cfg.batch_size, seed=self.seed)

    def _sample(self, epoch: int, step: int) -> MiniBatch:
        """The reference's edge batch (stream 0), its typed blocks split for this rank."""
        batch = self.edges.batch(epoch, step, stream=0)
        splits = [
            split_hetero_block(b, self.owner, self.rank, self.world_size) for b in batch.blocks
        ]
        return dataclasses.replace(batch, splits=splits)

    def _step_loss(self, out: Any, batch: MiniBatch) -> StepLoss:
        """This rank's share: the positives whose source it owns (collective)."""
        return split_typed_edge_batch_loss(
            self.module, self.task, self.comm, out, batch, self.owner, self.loss
        )

    def __repr__(self) -> str:
        return (
            f"TypedLinkSplitEngine(rank={self.rank}/{self.world_size}, "
            f"relation={self.task.relation}, parts={self.book.part_sizes().tolist()})"
        )


def typed_link_engine(name: str) -> type:
    """The typed link class of engine ``name`` (:data:`~fleetgnn.config.run.TYPED_LINK_ENGINES`).

    Raises:
        ConfigError: For an engine that trains typed node classification only (one line).
    """
    classes = {
        "reference": TypedLinkReferenceEngine,
        "minibatch": TypedLinkMinibatchEngine,
        "split": TypedLinkSplitEngine,
    }
    if name not in TYPED_LINK_ENGINES or name not in classes:
        raise ConfigError(
            f"the {name} engine trains typed graphs for node classification only; link "
            f"prediction on a typed graph runs on engine {' or '.join(TYPED_LINK_ENGINES)}"
        )
    return classes[name]


__all__ = [
    "TypedLinkMinibatchEngine",
    "TypedLinkReferenceEngine",
    "TypedLinkSplitEngine",
    "typed_edge_batch_loss",
    "typed_link_engine",
    "typed_pair_scores",
    "split_typed_edge_batch_loss",
]
