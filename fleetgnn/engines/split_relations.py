"""Typed graphs on the ``split`` engine: GSplit's split of a typed block, one relation at a time.

Node types are ranges of one global ID space, so the split engine's partition book over global
IDs (:func:`~fleetgnn.engines.split.split_book`: a typed graph is partitioned through its
homogeneous view, every relation's edges together) owns typed rows unchanged: the row of
``src_ids[t][i]`` belongs to ``part_of[src_ids[t][i]]``. Every step samples the reference's
typed blocks (the global batch, stream 0) and each rank keeps, per node type, the rows it owns
in block order (its destinations first, so the rows of layer ``l + 1`` are the owned
destinations of layer ``l``).

A relation ``r = (s, name, d)`` of a typed block is the homogeneous block the typed aggregator
runs it as (:class:`~fleetgnn.nn.hetero.TypedAggregator`: type ``d``'s destinations followed by
type ``s``'s sources, just type ``s``'s rows when ``s == d``), so the homogeneous machinery
splits and runs it unchanged: :func:`~fleetgnn.engines.split.split_block` splits it by the
owners of its rows, and a :class:`~fleetgnn.engines.split.SplitAggregator` is its hop, whose
owned rows are ``h[d][:owned D_d]`` then ``h[s]`` in the order the typed layers build them
(:meth:`~fleetgnn.nn.hetero.TypedAggregator.relation_input`). A relation's ``aggregate`` sends
the partial sums of its owned sources to each destination's owner, one all-to-all per relation
and layer (its transpose backward), as a homogeneous layer does.

:class:`TypedSplitEngine` is the typed mini-batch engine (:class:`~fleetgnn.engines.typed.
TypedMinibatchEngine`: the keyed store, prefetch, streaming evaluation) with the reference's
global batch, the partition book, and these aggregators. Layers that run on
:meth:`~fleetgnn.nn.hetero.TypedAggregator.relation` (R-GCN, hetero-SAGE) train on it;
R-GAT's fused per-type scores read the bipartite relations, which the split does not serve.

Link prediction on one relation trains on
:class:`~fleetgnn.engines.typed_link.TypedLinkSplitEngine` (the typed link engine with this
engine's book, splits and aggregators; the pairs scored by the owner of their source).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fleetgnn.config import SplitEngineConfig
from fleetgnn.distributed import Communicator
from fleetgnn.engines.base import StepStats
from fleetgnn.engines.batch import MiniBatch
from fleetgnn.engines.common import LossFn, autocast_dtype
from fleetgnn.engines.split import (
    LayerSplit,
    SplitAggregator,
    split_block,
    split_book,
    split_quality,
)
from fleetgnn.engines.typed import TypedMinibatchEngine
from fleetgnn.errors import ConfigError
from fleetgnn.graph.hetero import HeteroGraph, Relation
from fleetgnn.nn.hetero import TypedAggregator
from fleetgnn.ops.adjacency import Structure
from fleetgnn.partition import PartitionBook
from fleetgnn.sampling import Block, SeedLoader
from fleetgnn.sampling.hetero import HeteroBlock

__all__ = [
    "TypedSplit",
    "TypedSplitAggregator",
    "TypedSplitEngine",
    "relation_block",
    "split_hetero_block",
]


def relation_block(block: HeteroBlock, rel: Relation) -> Block:
    """Relation ``rel = (s, name, d)`` of ``block`` as a homogeneous :class:`Block`.

    Its rows are type ``d``'s destinations followed by type ``s``'s sources (type ``s``'s rows
    alone when ``s == d``), as :class:`~fleetgnn.nn.hetero.TypedAggregator` runs the relation;
    ``src_ids`` are their global IDs.
    """
    s, _, d = rel
    indptr, indices = block.edges[rel]
    m = int(block.num_dst[d])
    if s == d:
        ids, local = block.src_ids[s], indices
    else:
        ids, local = torch.cat([block.src_ids[d][:m], block.src_ids[s]]), indices + m
    return Block(indptr.long(), local.long(), ids.long(), m)


@dataclasses.dataclass(frozen=True, repr=False)
class TypedSplit:
    """Rank ``r``'s share of one typed block (built without communication).

    Attributes:
        block: The sampled typed block (the same on every rank).
        src_ids: Per type, int64 global IDs of the owned rows (block order; the owned
            destinations first).
        num_dst: Per type, the owned destinations.
        relations: Per relation (schema order), its :class:`LayerSplit` over
            :func:`relation_block`'s rows.
    """

    block: HeteroBlock
    src_ids: dict[str, Tensor]
    num_dst: dict[str, int]
    relations: dict[Relation, LayerSplit]

    @property
    def edges_per_rank(self) -> np.ndarray:
        """int64 ``[W]``: edges of every relation each rank processes."""
        return sum(sp.edges_per_rank for sp in self.relations.values())  # type: ignore[return-value]

    @property
    def block_local_edges(self) -> int:
        """Edges of every relation whose source and destination share an owner."""
        return int(sum(sp.block_local_edges for sp in self.relations.values()))

    def __repr__(self) -> str:
        rows = {t: int(v.numel()) for t, v in self.src_ids.items() if v.numel()}
        return f"TypedSplit(rows={rows}, relations={len(self.relations)})"


def split_hetero_block(
    block: HeteroBlock, owner: np.ndarray, rank: int, world_size: int
) -> TypedSplit:
    """Split ``block`` for ``rank`` by ``owner`` (the part of every global ID), per relation.

    Every rank calls it with the same block and owners, so each relation's exchange counts
    agree without messages (see :func:`~fleetgnn.engines.split.split_block`).
    """
    src_ids, num_dst = {}, {}
    for t, ids in block.src_ids.items():
        mine = owner[ids.numpy()] == rank
        src_ids[t] = ids[torch.from_numpy(mine)]
        num_dst[t] = int(np.count_nonzero(mine[: block.num_dst[t]]))
    rels = {}
    for rel in block.schema.relations:
        if rel in block.edges:
            rb = relation_block(block, rel)
            rels[rel] = split_block(rb, owner[rb.src_ids.numpy()], rank, world_size)
    return TypedSplit(block, src_ids, num_dst, rels)


class TypedSplitAggregator(TypedAggregator):
    """The typed hop of rank ``r``'s split: a :class:`SplitAggregator` per relation.

    Rows per type are the owned rows (:attr:`TypedSplit.src_ids`), outputs the owned
    destinations; relation ``(s, name, d)`` takes ``h[d][:num_dst[d]]`` then ``h[s]``
    (:meth:`relation_input`), its split's rows. Each relation's aggregation is collective
    (see :class:`~fleetgnn.engines.split.SplitAggregator`); every rank runs the same model on
    the same relations, so the collectives match.

    Args:
        split: This rank's :class:`TypedSplit`.
        comm: The communicator (``None`` or one rank: nothing is exchanged).
        dtype: Float dtype of degrees.
        device: Where the structures and rows live.
        wire_dtype: The dtype exchanged rows travel in (``None``: their own).
        meter_bytes: A list to append the relations' forward shuffle bytes to.
    """

    def __init__(  # the base's block-built state is replaced by the split's
        self,
        split: TypedSplit,
        comm: Communicator | None,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        wire_dtype: torch.dtype | None = None,
        meter_bytes: list[int] | None = None,
    ) -> None:
        self.split = split
        self.schema = split.block.schema
        self.src_ids = {t: v.to(device) for t, v in split.src_ids.items()}
        self.num_dst = dict(split.num_dst)
        self.relations = tuple(split.relations)
        self._comm, self._device, self._dtype = comm, torch.device(device), dtype
        self._wire = wire_dtype
        self._bytes = meter_bytes if meter_bytes is not None else []
        self._split_aggs: dict[Relation, SplitAggregator] = {}

    def relation(self, rel: Relation) -> SplitAggregator:  # type: ignore[override]
        """Relation ``rel``'s split aggregator (rows: :meth:`relation_input`), built once."""
        a = self._split_aggs.get(rel)
        if a is None:
            a = self._split_aggs[rel] = SplitAggregator(
                self.split.relations[rel],
                self._comm,
                dtype=self._dtype,
                device=self._device,
                meter_bytes=self._bytes,
                wire_dtype=self._wire,
            )
        return a

    def bipartite(self, rel: Relation) -> Structure:
        """Not served: a bipartite relation reads remote source rows the split does not hold.

        Raises:
            ConfigError: Always (R-GAT's fused scores; train it on reference or minibatch).
        """
        raise ConfigError(
            f"the split engine runs typed layers through agg.relation(rel) (R-GCN, hetero-SAGE); "
            f"relation {rel} was asked for as a bipartite adjacency (R-GAT): train it with "
            f"engine reference or minibatch"
        )

    def edge_ids(self, rel: Relation) -> tuple[Tensor, Tensor]:
        """Global ``(src_gid, dst_gid)`` of relation ``rel``'s in-edges of owned destinations."""
        return self.relation(rel).edge_ids()

    def __repr__(self) -> str:
        return f"TypedSplitAggregator({self.split!r})"


class TypedSplitEngine(TypedMinibatchEngine):
    """Split-parallel training of a typed model on a typed graph (see the module docstring).

    Every step is the reference engine's step (its shuffled global batch, its keyed sample),
    each rank computing the rows its part owns; the loss of the owned seeds is divided by the
    global batch and the gradients summed by the one all-reduce.

    Args:
        model: A typed layer-wise model running on ``agg.relation`` (R-GCN, hetero-SAGE);
            rank 0's parameters are broadcast.
        graph: The :class:`~fleetgnn.graph.hetero.HeteroGraph` (every rank opens it).
        ctx: This process's :class:`~fleetgnn.distributed.DistContext`.
        config: A :class:`~fleetgnn.config.SplitEngineConfig` (``batch_size``: the global
            batch; ``partition``/``book``: the partition; ``store.*`` budgets put the features
            in a keyed store, placed by in-degree, not by part).
        optimizer: Over ``model``'s parameters (``None``: Adam, lr 0.01).
        loss: Per-node loss (``None``: cross-entropy).
        fanouts: Per-relation fanouts overriding ``config.fanouts``.
        book: A partition book over the global IDs to use instead of the config's.
    """

    name = "split"
    config_cls = SplitEngineConfig

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
        book: PartitionBook | None = None,
    ) -> None:
        super().__init__(model, graph, ctx, config, optimizer=optimizer, loss=loss, fanouts=fanouts)  # type: ignore[arg-type]
        self._setup_split(book)

    def _setup_split(self, book: PartitionBook | None) -> None:
        """The partition book over ``self.graph``'s global IDs (collective) and the split's totals.

        Closes the engine (its prefetch thread, its store) when the book cannot be had.
        """
        t0 = self.clock()
        try:
            self.book = split_book(self.comm, self.graph, self.config, book, seed=self.seed)
        except BaseException:
            self.close()
            raise
        self.owner = np.asarray(self.book.part_of)
        self.preprocess_s = self.clock() - t0
        self._extra: dict[str, Any] = {}
        self._sent: list[list[int]] = []
        self._reset_totals()

    def _seed_loader(self, cfg: Any) -> SeedLoader:
        """The reference's loader: ONE shuffled global batch per step for all ranks."""
        return SeedLoader(self.train_ids, cfg.batch_size, seed=self.seed, shuffle=True)

    def _sample(self, epoch: int, step: int) -> MiniBatch:
        """The reference's typed blocks, split for this rank, and its owned seeds' labels.

        The splits are the batch's :attr:`~fleetgnn.engines.batch.MiniBatch.hops`: their
        ``src_ids`` are the owned rows, which the features are read for.
        """
        seeds = self.loader.batch(epoch, step)
        blocks = self.sampler.sample_from_nodes(seeds, epoch=epoch, step=step).blocks
        splits = [split_hetero_block(b, self.owner, self.rank, self.world_size) for b in blocks]
        t = self.schema.target
        owned = splits[-1].src_ids[t][: splits[-1].num_dst[t]]  # type: ignore[index]
        target = self.labels(owned)
        return MiniBatch(blocks, {t: seeds}, int(seeds.numel()), splits=splits, target=target)

    def aggregators(self, blocks: list[Any]) -> list[TypedAggregator]:
        """One :class:`TypedSplitAggregator` per split (their shuffle bytes kept per layer)."""
        self._sent = [[] for _ in blocks]
        return [
            TypedSplitAggregator(
                sp,
                self.comm,
                dtype=self.dtype,
                device=self.device,
                wire_dtype=autocast_dtype(self.config),
                meter_bytes=sent,
            )
            for sp, sent in zip(blocks, self._sent, strict=True)
        ]

    # ------------------------------------------------------------------ the split's numbers
    def _reset_totals(self) -> None:
        """Zero what the epoch sums: edges per rank, local edges, shuffle bytes per layer."""
        self._totals: dict[str, Any] = {
            "edges_per_rank": np.zeros(self.world_size, np.int64),
            "local_edges": 0,
        }
        self._shuffle = np.zeros(self.num_layers, dtype=np.int64)

    def _epoch_start(self) -> None:
        super()._epoch_start()
        self._reset_totals()

    def _run_step(self, epoch: int, step: int, batch: MiniBatch, waited: float) -> StepStats:
        stats = super()._run_step(epoch, step, batch, waited)
        for sp in batch.hops:
            self._totals["edges_per_rank"] += sp.edges_per_rank
            self._totals["local_edges"] += sp.block_local_edges
        self._shuffle += np.array([sum(b) for b in self._sent], dtype=np.int64)
        return stats

    def _epoch_end(self) -> None:
        t = self._totals
        self._extra = {
            **split_quality(t["edges_per_rank"], t["local_edges"]),
            "partition": self.book.method,
            "preprocess_s": self.preprocess_s,
        }

    def epoch_extra(self) -> Mapping[str, Any]:
        """Split quality of the last epoch (GSplit Table 5), from the shared sample."""
        return dict(self._extra)

    def rank_extra(self) -> Mapping[str, Any]:
        """This rank's forward shuffle bytes per layer (and the keyed store's hit rates)."""
        return {**super().rank_extra(), "shuffle_bytes_per_layer": self._shuffle.tolist()}

    def __repr__(self) -> str:
        return (
            f"TypedSplitEngine(rank={self.rank}/{self.world_size}, "
            f"parts={self.book.part_sizes().tolist()})"
        )
