"""The ``split`` engine (GSplit): split-parallel mini-batch training.

Data parallelism gives every rank its own mini-batch and its own k-hop neighbourhood; those
overlap, so the same input rows are loaded, and the same hidden rows computed, on several ranks.
Split parallelism samples ONE mini-batch per step (the global batch, the same sample the
reference engine draws for the step) and splits its vertices at every layer by an offline
partition: rank ``r`` owns the vertices ``v`` with ``part[v] == r``. Each input row is loaded by
exactly one rank, each hidden row computed once, and edges that cross splits are handled by one
all-to-all shuffle per aggregation forward and its transpose backward.

Per step (every rank; the sample is keyed by ``(seed, epoch, step)``, so every rank draws it
itself and nothing is sent):

1. sample the mini-batch's blocks; split every block (:func:`split_block`, vectorised): the
   owned destinations and source rows, the local edges, the outgoing *reference vertices*
   (destinations owned elsewhere with an in-edge from an owned source) grouped by the owner, the
   incoming ones and where they add up, and the sampled in-degree of the owned destinations. Both
   sides of every exchange derive the same counts from the shared sample: no count exchange;
2. load the input rows this rank owns through the unified store
   (:class:`~fleetgnn.store.UnifiedStore`) with a partition-aware placement
   (:func:`~fleetgnn.store.plan_partitioned`): its device shard holds the hottest rows of its
   own part, up to ``device_budget`` (a hit stays on the device), the host tier the
   next-hottest rows of every part, up to ``host_budget`` (one copy per host), the rest stays
   on disk (the dataset's arrays);
3. forward through :class:`SplitAggregator` (the :class:`~fleetgnn.nn.Aggregator` of the owned
   split), loss on the owned targets divided by the global number of targets, backward, one
   gradient all-reduce (sum), the same optimizer step everywhere.

How an aggregation crosses splits (rank ``r``, layer ``l``):

===========================  ======================================================================
call                         exchange
===========================  ======================================================================
``aggregate(x, sum|mean)``   pre-aggregation: every rank sums its local sources' rows per reference
                             vertex and sends the partial sums to the owner, which adds them (mean:
                             divided by the global sampled in-degree). One all-to-all of
                             ``#references x width`` rows; backward the transpose.
``aggregate(x, .., w)``,     the remote source rows themselves, once per (source, destination
``max``, ``src_to_edge``     rank), through :class:`~fleetgnn.exchange.HaloSpmm` (GAT's path).
``edge_softmax``,            local: every in-edge of an owned destination is on its owner.
``dst_to_edge``
===========================  ======================================================================

A link task (``train.task=link``) samples the reference's edge batch instead: its seeds (the
endpoints of the positives and negatives) are split like node seeds, and each rank scores the
pairs whose source it owns, the other endpoints' rows fetched from their owners once per step
(:func:`~fleetgnn.engines.link.split_edge_batch_loss`).

A temporal link task (:class:`~fleetgnn.tasks.TemporalLinkPrediction`) samples the reference's
timed edge batch (:class:`~fleetgnn.engines.link.EdgeBatches`, stream 0): every
seed has its own subtree, so a block's rows are ``(seed, node)`` pairs and a node reached by
several seeds is several rows, one per subtree. Every row belongs to the owner of its node
(``part[src_ids[p]]``), so a rank computes all the copies of its nodes, each copy from its own
in-edges, and reads a node's input row once per copy in the first block. The pre-aggregation
and the halo exchange key rows by block position (never by node ID, which would merge the
copies), so every rank computes the reference's rows. Evaluation embeds every query at its
time, each rank its share of the queries with its replica of the model, and all-reduces the
metric sums (:func:`~fleetgnn.engines.temporal_link.sampled_temporal_metrics`).

A temporal node task (:class:`~fleetgnn.tasks.TemporalNodeClassification`) samples the
reference's seeds each at its node time (:func:`~fleetgnn.engines.temporal_node.node_blocks`,
stream 0); its rows are ``(seed, node)`` pairs owned as above, the loss the static task's on the
owned seeds. Evaluation embeds every split node at its node time, the nodes shared over the
ranks, sums all-reduced
(:func:`~fleetgnn.engines.temporal_node.sampled_temporal_node_metrics`).

A typed graph trains on :class:`~fleetgnn.engines.split_relations.TypedSplitEngine`: the
book is over its global IDs (:func:`split_book`), and each relation of the reference's typed
block is split by :func:`split_block` and run by a :class:`SplitAggregator`.

Steps 1-2 of the next step run in a background thread while the current step trains.

Input rows (the store's accounting, :meth:`~fleetgnn.store.UnifiedStore.requests`): training reads
only owned rows, so they come from the rank's own shard (``local``), the host tier (``host``, link
``h2d``) or disk, never a peer's shard; evaluation reads any row (peers' shards one-sided, or
two-sided across hosts). ``rank_extra()["input_rows"]`` counts the epoch's training rows per
source, ``rank_extra()["hit_rates"]`` their fractions (``local``: the device hit rate of the
rank's own part); ``epoch_extra()`` sums them over ranks (``hit_rates``, ``store_requests``,
``store_bytes``) as the ``minibatch`` engine reports its store.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fleetgnn.config import SplitEngineConfig
from fleetgnn.config.units import budget_bytes
from fleetgnn.distributed import Communicator, DistContext, TrafficMeter
from fleetgnn.engines.base import StepStats
from fleetgnn.engines.batch import MiniBatch
from fleetgnn.engines.chunks import Chunking
from fleetgnn.engines.common import (
    LossFn,
    autocast_dtype,
    check_fanouts,
    label_rows,
    normalize_rows,
    presample_seeds,
    seed_loader,
    setup_distributed,
    setup_model,
)
from fleetgnn.engines.link import (
    EdgeBatches,
    check_link_model,
    is_temporal,
    sampled_link_metrics,
    setup_task,
    split_edge_batch_loss,
)
from fleetgnn.engines.minibatch import resolve_gather
from fleetgnn.engines.sampled import SampledEngine
from fleetgnn.engines.step import Prefetcher, Prepared, StepLoss, run_step
from fleetgnn.engines.temporal_link import EVAL_CHUNK, sampled_temporal_metrics
from fleetgnn.engines.temporal_node import (
    check_node_times,
    is_temporal_node,
    node_blocks,
    sampled_temporal_node_metrics,
)
from fleetgnn.errors import ConfigError, PartitionError
from fleetgnn.exchange import HaloSpmm, block_layout, build_plan, requests_from_edges, send_lists
from fleetgnn.graph import Graph
from fleetgnn.graph.hetero import HeteroGraph
from fleetgnn.nn.aggregator import BipartiteHop
from fleetgnn.ops import edge_softmax, gspmm
from fleetgnn.ops.adjacency import Structure
from fleetgnn.partition import PartitionBook, partition
from fleetgnn.sampling import Block, GraphTopology, NeighborSampler, TemporalSampler
from fleetgnn.sampling.presample import presample_hotness
from fleetgnn.store import (
    SOURCE_LINKS,
    SOURCES,
    TierBudgets,
    UnifiedStore,
    hotness_order,
    plan_partitioned,
)
from fleetgnn.tasks import Task
from fleetgnn.types import PathLikeStr


# ---------------------------------------------------------------------------------- splitting
@dataclasses.dataclass(frozen=True, repr=False)
class LayerSplit:
    """Rank ``r``'s share of one sampled block (built without communication).

    Positions are into the block (``0 <= p < num_src``; destinations are the first
    ``num_dst``). Rows are this rank's rows: the owned source positions in block order, so the
    owned destinations come first and the rows of layer ``l + 1`` are the owned destinations of
    layer ``l``.

    Attributes:
        block: The sampled block (the same on every rank).
        rank: This rank.
        world_size: ``W``.
        src_owner: int64 ``[num_src]`` owner of every block position.
        rows: int64 ``[R]`` owned source positions (block order).
        num_dst: Owned destinations (a prefix of ``rows``).
        local: Structure ``[num_dst, R]`` of the edges with owned source and destination.
        refs_out: Structure ``[F_out, R]``: the owned sources of each outgoing reference vertex.
        send_counts: int64 ``[W]`` outgoing reference vertices per owner (0 for ``rank``).
        recv_counts: int64 ``[W]`` incoming reference vertices per sender (0 for ``rank``).
        recv_rows: int64 ``[F_in]`` the owned destination each incoming partial adds to.
        in_degree: int64 ``[num_dst]`` sampled in-degree (all ranks' edges) of the owned
            destinations.
        num_edges: Edges into the owned destinations (local and remote).
        num_local_edges: Edges whose source is owned too.
        edges_per_rank: int64 ``[W]`` edges each rank processes (in-edges of its destinations).
        block_local_edges: Edges of the whole block whose source and destination share an owner.
    """

    block: Block
    rank: int
    world_size: int
    src_owner: np.ndarray
    rows: np.ndarray
    num_dst: int
    local: Structure
    refs_out: Structure
    send_counts: np.ndarray
    recv_counts: np.ndarray
    recv_rows: np.ndarray
    in_degree: np.ndarray
    num_edges: int
    num_local_edges: int
    edges_per_rank: np.ndarray
    block_local_edges: int

    @property
    def num_rows(self) -> int:
        """``R``: owned source rows."""
        return int(self.rows.size)

    def __repr__(self) -> str:
        return (
            f"LayerSplit(rank={self.rank}/{self.world_size}, rows={self.num_rows}, "
            f"dst={self.num_dst}, edges={self.num_edges}, local_edges={self.num_local_edges}, "
            f"send={self.send_counts.tolist()}, recv={self.recv_counts.tolist()})"
        )


def _unique_pairs(major: np.ndarray, minor: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique ``(major, minor)`` pairs (``0 <= minor < span``), ``[2, P]``.

    Also every input's pair index; one int64 key per pair and one ``np.unique``.
    """
    if major.size == 0:
        return np.zeros((2, 0), dtype=np.int64), np.zeros(0, dtype=np.int64)
    keys, inverse = np.unique(major * span + minor, return_inverse=True)
    return np.stack([keys // span, keys % span]), inverse.reshape(-1)


def split_block(block: Block, src_owner: np.ndarray, rank: int, world_size: int) -> LayerSplit:
    """Split ``block`` for ``rank`` given the owner of every block position (vectorised).

    Every rank calls it with the same block and owners; the send counts of rank ``j`` towards
    ``r`` equal the receive counts of ``r`` from ``j``, in the same order (reference vertices
    sorted by block position), so the exchange needs no count messages.
    """
    indptr = block.indptr.cpu().numpy().astype(np.int64, copy=False)
    spos = block.indices.cpu().numpy().astype(np.int64, copy=False)
    m, s = int(block.num_dst), int(block.num_src)
    own = np.asarray(src_owner, dtype=np.int64)
    deg = np.diff(indptr)
    dpos = np.repeat(np.arange(m, dtype=np.int64), deg)
    eo_dst, eo_src = own[dpos], own[spos]
    rows = np.flatnonzero(own == rank).astype(np.int64)
    row_of = np.full(s, -1, dtype=np.int64)
    row_of[rows] = np.arange(rows.size, dtype=np.int64)
    num_dst = int(np.count_nonzero(own[:m] == rank))
    # local edges: CSC order is destination order, and rows keep block order
    sel = (eo_dst == rank) & (eo_src == rank)
    local = Structure.from_sorted_edges(row_of[dpos[sel]], row_of[spos[sel]], num_dst, rows.size)
    # outgoing reference vertices: (owner of v, v) for owned sources into others' destinations
    out = (eo_src == rank) & (eo_dst != rank)
    pairs, ref = _unique_pairs(eo_dst[out], dpos[out], max(m, 1))
    order = np.argsort(ref, kind="stable")
    refs_out = Structure.from_sorted_edges(
        ref[order], row_of[spos[out]][order], pairs.shape[1], rows.size
    )
    send = np.bincount(pairs[0], minlength=world_size).astype(np.int64)
    # incoming reference vertices: (sender j, v) for others' sources into owned destinations
    inc = (eo_dst == rank) & (eo_src != rank)
    pin, _ = _unique_pairs(eo_src[inc], dpos[inc], max(m, 1))
    recv = np.bincount(pin[0], minlength=world_size).astype(np.int64)
    return LayerSplit(
        block=block,
        rank=rank,
        world_size=world_size,
        src_owner=own,
        rows=rows,
        num_dst=num_dst,
        local=local,
        refs_out=refs_out,
        send_counts=send,
        recv_counts=recv,
        recv_rows=row_of[pin[1]],
        in_degree=deg[own[:m] == rank],
        num_edges=int(np.count_nonzero(eo_dst == rank)),
        num_local_edges=int(np.count_nonzero(sel)),
        edges_per_rank=np.bincount(eo_dst, minlength=world_size).astype(np.int64),
        block_local_edges=int(np.count_nonzero(eo_dst == eo_src)),
    )


# ---------------------------------------------------------------------------------- aggregator
class SplitAggregator:
    """The :class:`~fleetgnn.nn.Aggregator` of rank ``r``'s split of one sampled block.

    Rows: ``num_src`` owned sources (block order), the first ``num_dst`` of them the owned
    destinations; ``src_ids`` their ORIGINAL global IDs (dropout keys equal the reference's;
    a temporal block may repeat an ID, once per subtree, so the exchanges key rows by block
    position).
    Edge tensors (``edge_weight``, scores) cover the in-edges of the owned destinations, local and
    remote, in block CSC order. See the module docstring for which calls communicate; every rank
    makes the same calls (the model is the same), so the collectives match.

    Args:
        split: This rank's :class:`LayerSplit`.
        comm: The communicator (``None`` or one rank: nothing is exchanged).
        dtype: Float dtype of degrees.
        wire_dtype: The dtype shuffled rows (remote source rows, pre-aggregated partial sums)
            and their gradients travel in (mixed precision: ``torch.bfloat16``, half the
            bytes); ``None``: the rows' own.
        device: Where the structures live.
        meter_bytes: A list to append this aggregator's forward shuffle bytes to.
    """

    def __init__(
        self,
        split: LayerSplit,
        comm: Communicator | None,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        meter_bytes: list[int] | None = None,
        wire_dtype: torch.dtype | None = None,
    ) -> None:
        self.split = split
        self.wire_dtype = wire_dtype
        self.comm = comm if comm is not None and comm.world_size > 1 else None
        self.device = torch.device(device)
        self.dtype = dtype
        block = split.block
        rows = torch.from_numpy(split.rows)
        self.src_ids = block.src_ids.index_select(0, rows).long().to(self.device)
        self.num_src = split.num_rows
        self.num_dst = split.num_dst
        self._local = split.local.to(self.device)
        self._refs = split.refs_out.to(self.device)
        self._recv_rows = torch.from_numpy(split.recv_rows).to(self.device)
        self._in_degree = torch.from_numpy(split.in_degree).to(device=self.device, dtype=dtype)
        sd = getattr(block, "src_degree", None)
        self._src_degree = None if sd is None else sd.index_select(0, rows).to(self.device, dtype)
        self._halo: HaloSpmm | None = None
        self._edge_ids: tuple[Tensor, Tensor] | None = None
        self.shuffle_bytes = meter_bytes if meter_bytes is not None else []

    # ------------------------------------------------------------------ the halo path
    @property
    def halo(self) -> HaloSpmm:
        """The exchange of remote source rows (built on first use; no communication)."""
        if self._halo is None:
            sp, w, r = self.split, self.split.world_size, self.split.rank
            block, own = sp.block, sp.src_owner
            # rows are keyed by block position, not node ID: a temporal block holds a node once
            # per subtree that reached it, and each copy is a row of its own
            keyed = dataclasses.replace(block, src_ids=torch.arange(block.num_src))
            lay = block_layout(keyed, own, rank=r, world_size=w)
            src_all = block.indices.cpu().numpy().astype(np.int64)
            deg = np.diff(block.indptr.cpu().numpy())
            dst_owner = np.repeat(own[: block.num_dst], deg)
            rows, counts = send_lists(
                lay, *requests_from_edges(src_all, dst_owner, own, rank=r, world_size=w)
            )
            plan = build_plan(lay, rows, counts, 1)
            # one chunk: active iff any edge crosses splits anywhere (the same on every rank)
            crossing = sp.block_local_edges < block.num_edges
            plan = dataclasses.replace(plan, active=(crossing,))
            self._halo = HaloSpmm(
                lay, plan, self.comm, depth=1, device=self.device, wire_dtype=self.wire_dtype
            )
        return self._halo

    def _check_rows(self, x: Tensor) -> None:
        if x.dim() < 1 or x.shape[0] != self.num_src:
            raise ConfigError(
                f"'x_src' must hold this rank's {self.num_src} owned rows of the hop (got shape "
                f"{tuple(x.shape)}); the split aggregator exchanges remote rows itself"
            )

    # ------------------------------------------------------------------ protocol
    def aggregate(
        self, x_src: Tensor, reduce: str = "sum", edge_weight: Tensor | None = None
    ) -> Tensor:
        """``[R, ...] -> [num_dst, ...]``: reduce over every in-edge of the owned destinations.

        Collective (one all-to-all forward, its transpose backward).
        """
        self._check_rows(x_src)
        if reduce not in ("sum", "mean", "max"):
            raise ConfigError(f"'reduce' must be 'sum', 'mean' or 'max' (got {reduce!r})")
        if reduce == "max":
            ext = self.halo.extended(x_src)
            self._count(self.halo.volume.send_rows, x_src)
            return gspmm(self.halo.structure, ext, "max", edge_weight)
        if edge_weight is not None:
            self._count(self.halo.volume.send_rows, x_src)
            out = self.halo.sum(x_src, edge_weight.to(x_src.dtype))
        else:
            out = self._pre_aggregated_sum(x_src)
        if reduce == "mean":
            deg = self._in_degree.to(out.dtype).clamp_min(1.0)
            out = out / deg.view(-1, *([1] * (out.dim() - 1)))
        return out

    def _pre_aggregated_sum(self, x: Tensor) -> Tensor:
        """Local edges, plus the partial sums other ranks computed for the owned destinations."""
        out = gspmm(self._local, x, "sum")
        if self.comm is None:
            return out
        partial = gspmm(self._refs, x, "sum")  # [F_out, ...] per outgoing reference vertex
        wire = partial if self.wire_dtype is None else partial.to(self.wire_dtype)
        self._count(int(partial.shape[0]), wire)
        recv, _ = self.comm.all_to_all(
            wire,
            self.split.send_counts.tolist(),
            recv_counts=self.split.recv_counts.tolist(),
        )
        return out.index_add(0, self._recv_rows, recv.to(out.dtype))

    def _count(self, rows: int, x: Tensor) -> None:
        width = int(np.prod(x.shape[1:], dtype=np.int64))
        wire = self.wire_dtype
        elem = wire.itemsize if wire is not None and x.is_floating_point() else x.element_size()
        self.shuffle_bytes.append(rows * width * elem)

    def bipartite(self, x_src: Tensor) -> BipartiteHop:
        """The hop as PyG takes it: owned rows then remote rows, ``edge_index`` over them.

        ``x_src`` of the result is ``[R + H, ...]``, ``x_dst`` the first ``num_dst`` owned rows,
        ``edge_index`` every in-edge of the owned destinations (block CSC order), ``size``
        ``(R + H, num_dst)``. Collective: the remote source rows themselves are exchanged (not
        the pre-aggregated partial sums :meth:`aggregate` sends).
        """
        self._check_rows(x_src)
        self._count(self.halo.volume.send_rows, x_src)
        st = self.halo.structure
        ext = self.halo.extended(x_src)
        edge_index = torch.stack([st.indices, st.dst_index()])
        size = (int(ext.shape[0]), self.num_dst)
        return BipartiteHop(ext, x_src[: self.num_dst], edge_index, size)

    def src_to_edge(self, x_src: Tensor) -> Tensor:
        """``[R, ...] -> [E, ...]``: the source row of every in-edge (exchanges remote rows)."""
        self._check_rows(x_src)
        self._count(self.halo.volume.send_rows, x_src)
        return self.halo.extended(x_src).index_select(0, self.halo.structure.indices)

    def dst_to_edge(self, x_dst: Tensor) -> Tensor:
        """``[num_dst, ...] -> [E, ...]``: the destination row of every in-edge (local)."""
        if x_dst.shape[:1] != (self.num_dst,):
            raise ConfigError(
                f"'x_dst' must have {self.num_dst} rows (got shape {tuple(x_dst.shape)})"
            )
        return x_dst.index_select(0, self.halo.structure.dst_index())

    def edge_softmax(self, scores: Tensor) -> Tensor:
        """Softmax over each owned destination's in-edges (all on this rank: local)."""
        return edge_softmax(self.halo.structure, scores)

    def dst_degree(self) -> Tensor:
        """Sampled in-degree (over every rank's edges) of the owned destinations."""
        return self._in_degree

    def src_degree(self) -> Tensor:
        """Whole-graph in-degree of the owned sources (GCN normalisation)."""
        if self._src_degree is None:
            raise ConfigError("the sampled block carries no 'src_degree' (GCN needs it)")
        return self._src_degree

    def edge_ids(self) -> tuple[Tensor, Tensor]:
        """Original global ``(src_gid, dst_gid)`` of every in-edge of the owned destinations."""
        if self._edge_ids is None:
            lay = self.halo.layout  # over block positions: their node IDs are the block's
            gid = self.split.block.src_ids.long()
            src = gid[torch.from_numpy(lay.src)].to(self.device)
            dst = gid[torch.from_numpy(lay.dst_ids)].to(self.device)
            self._edge_ids = (src, dst.index_select(0, self.halo.structure.dst_index()))
        return self._edge_ids

    def __repr__(self) -> str:
        return f"SplitAggregator({self.split!r})"


# ---------------------------------------------------------------------------------- engine
class SplitEngine(SampledEngine):
    """Split-parallel mini-batch training (GSplit) over an offline partition.

    Args:
        model: A layer-wise model (see :mod:`fleetgnn.nn.protocol`); every rank starts from rank
            0's parameters.
        graph: The dataset in its original numbering (memory maps are fine: each rank loads only
            the input rows it owns).
        ctx: This process's :class:`~fleetgnn.distributed.DistContext` (``None``: from the
            environment).
        config: A :class:`~fleetgnn.config.SplitEngineConfig`.
        optimizer: Over ``model``'s parameters (``None``: Adam, lr 0.01).
        loss: Per-node loss ``loss(logits, target) -> [B]`` (``None``: cross-entropy; for a
            link task, the task's pair loss).
        book: A partition book to use instead of ``config.partition``/``config.book`` (e.g. a
            degenerate one in tests); its parts are the ranks.
        task: What to train (``None``: node classification). A
            :class:`~fleetgnn.tasks.LinkPrediction` trains on one global batch of its split's
            training edges a step, the reference's (:class:`~fleetgnn.engines.link.EdgeBatches`);
            its seeds are split by owner like node seeds, and each rank scores the pairs whose
            source it owns (:func:`~fleetgnn.engines.link.split_edge_batch_loss`). A
            :class:`~fleetgnn.tasks.TemporalLinkPrediction` trains on the reference's timed
            edge batch, sampled at the positives' times, its ``(seed, node)`` rows owned by
            their nodes' owners (see the module docstring); a
            :class:`~fleetgnn.tasks.TemporalNodeClassification` the reference's seeds, each
            sampled at its node time.
    """

    name = "split"

    def __init__(
        self,
        model: torch.nn.Module,
        graph: Graph,
        ctx: DistContext | None = None,
        config: SplitEngineConfig | None = None,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        loss: LossFn | None = None,
        book: PartitionBook | None = None,
        task: Task | None = None,
    ) -> None:
        graph, loss = setup_task(self, "minibatch", task, graph, loss)
        dist = setup_distributed(self.name, graph, config, SplitEngineConfig, ctx, self.task)
        super().__init__(dist, graph)  # config, ctx, rank, device, clock, comm ...
        sc: SplitEngineConfig = dist.config
        check_fanouts(sc.fanouts, model)
        t0 = self.clock()
        self.book = self._book(graph, sc, book)
        self.owner = np.asarray(self.book.part_of)  # the book's int32 array, not a copy
        self.preprocess_s = self.clock() - t0
        #: The seeds' labels, each batch reading its own rows (``None``: the task reads none).
        self.y = label_rows(self.task, graph)
        #: How evaluation cuts each rank's nodes into chunks (bounds its memory).
        self.chunking = Chunking()
        self.module = setup_model(self, model, optimizer, loss)
        self.model = self.module
        # ONE global mini-batch per step, drawn exactly as the reference engine draws it
        # (``None``: the task's seeds are edges, ``self.edges``)
        self.loader = seed_loader(self.task, graph, sc.batch_size, seed=self.seed, shuffle=True)
        self.topology = GraphTopology(graph)
        self.sampler = NeighborSampler(self.topology, list(sc.fanouts), seed=self.seed)
        task: Any = self.task
        if is_temporal_node(task):  # the reference's seeds, each sampled at its node time
            check_node_times(task, graph)
        if is_temporal_node(task) or is_temporal(task):  # link: at the pairs' times
            self.sampler = TemporalSampler(
                self.topology, list(sc.fanouts), seed=self.seed, strategy=task.strategy
            )
        if self.link:  # the reference's edge batch on every rank (one rank's deal, its stream)
            check_link_model(self.module)
            self.edges = EdgeBatches(task, self.sampler, sc.batch_size, seed=self.seed)
        #: Temporal link evaluation: queries embedded at once (bounds its memory).
        self.eval_chunk = EVAL_CHUNK
        self._build_store(graph, sc)
        self.eval_topology = self.topology
        self.prefetcher: Prefetcher[MiniBatch] = Prefetcher(
            self.prepare, enabled=sc.prefetch, name="fleetgnn-split", device=self.device
        )
        self._extra: dict[str, Any] = {}
        self._mine: dict[str, Any] = {}
        self._totals: dict[str, Any] = {}
        self._shuffle = np.zeros(self.num_layers, dtype=np.int64)

    # ------------------------------------------------------------------ partition and cache
    def _book(
        self, graph: Graph, sc: SplitEngineConfig, book: PartitionBook | None
    ) -> PartitionBook:
        """The offline partition (:func:`split_book`)."""
        return split_book(self.comm, graph, sc, book, seed=self.seed)

    def _build_store(self, graph: Graph, sc: SplitEngineConfig) -> None:
        """The unified store over a partition-aware placement (collective: every rank calls it).

        Rank ``r``'s device shard holds the hottest rows of its own part within
        ``device_budget``; the host tier (one per host) the next-hottest within ``host_budget``.
        """
        self.hosts = self.ctx.hosts(self.comm)  # one all_gather_object when ranks span hosts
        self.gather = resolve_gather(sc.gather, self.ctx, self.hosts)
        budgets = TierBudgets(  # errors name the config fields
            budget_bytes(sc.device_budget, "device_budget"),
            budget_bytes(sc.host_budget, "host_budget"),
        )
        hot = (
            presample_hotness(
                graph, presample_seeds(self.task, graph), sc.batch_size, sc.fanouts, sc.seed
            )
            if sc.placement == "presample"
            else hotness_order(graph, "degree")
        )
        plan = plan_partitioned(
            graph,
            self.owner,
            budgets,
            self.world_size,
            hotness=hot,
            ranks_per_host=self.hosts.count(self.hosts[self.rank]),
            feature_dtype=sc.feature_dtype,
        )
        # the store's two-sided gathers run in the prefetch thread: their own group (none on
        # one rank), so they never interleave with the training group's collectives
        self.store_comm = (
            self.comm.new_group(backend="gloo", meter=TrafficMeter())
            if self.world_size > 1
            else None
        )
        self.store_meter = TrafficMeter()  # bytes served per tier (the store's accounting)
        self.store = UnifiedStore.build(
            graph,
            self.store_comm,
            plan=plan,
            one_sided=self.gather == "one_sided",
            meter=self.store_meter,
            name="split",
            hosts=self.hosts,
            device=self.device,  # device-tier rows never leave it; the rest arrive there
            feature_dtype=sc.feature_dtype,
        )
        self.row_bytes = self.store.row_bytes()  # as stored (compact with store.feature_dtype)

    def _load(self, ids: Tensor) -> tuple[Tensor, dict[str, int], dict[str, int]]:
        """Rows of ``ids`` through the store, cast and normalised; requests and bytes per source.

        Training loads only owned rows (own shard, host tier or disk); evaluation reads any.
        The counts are the store's (the delta of its counters: only the thread that loads
        reads the store meanwhile).
        """
        before = self.store.requests("features")
        served = self.store_meter.snapshot()
        # sampled IDs, from the topology (the seeds were checked): no range check (a GPU sync)
        x = self.store.gather(ids, checked=True).to(dtype=self.dtype)  # on self.device
        after = self.store.requests("features")
        rows = {src: after[src] - before[src] for src in SOURCES}
        traffic = {k: v["bytes"] for k, v in self.store_meter.delta(served).items()}
        return normalize_rows(x, self.config.feature_norm), rows, traffic

    # ------------------------------------------------------------------ batches
    def steps_per_epoch(self) -> int:
        """Mini-batches per epoch (one per step for all ranks)."""
        return self.edges.num_batches if self.link else self.loader.num_batches

    def prepare(self, epoch: int, step: int) -> MiniBatch:
        """Sample, split and load one step (no communication; runs in the prefetch thread).

        Timed with the host clock: the thread's work is host-side, and a device synchronise here
        would wait for the training step it overlaps.
        """
        t0 = time.perf_counter()
        batch = self._sample(epoch, step)  # the reference's: one deal, stream 0
        splits = [
            split_block(b, self.owner[b.src_ids.numpy()], self.rank, self.world_size)
            for b in batch.blocks
        ]
        t1 = time.perf_counter()
        first, last = splits[0], splits[-1]
        ids = first.block.src_ids.numpy()[first.rows]
        x, loaded, traffic = self._load(torch.from_numpy(ids))
        owned = last.block.src_ids[torch.from_numpy(last.rows[: last.num_dst])]  # global IDs
        target = None if self.link else self.y[owned].to(self.device, non_blocking=True)
        t2 = time.perf_counter()
        counters = self._counters(batch.blocks, splits, loaded)
        if self.rank == 0 and self.config.report_dp and self.world_size > 1:
            counters.update(self._dp_counterfactual(batch, epoch, step))
        return dataclasses.replace(
            batch,
            splits=splits,
            x=x,
            target=target,
            t_sample=t1 - t0,
            t_gather=t2 - t1,
            traffic=traffic,
            counters=counters,
        )

    def _counters(
        self, blocks: list[Block], splits: list[LayerSplit], loaded: Mapping[str, int]
    ) -> dict[str, Any]:
        """GSplit's split-quality numbers (every rank's, from the shared sample) and loads.

        ``rows_<source>``: this rank's input rows per store source (:data:`~fleetgnn.store.
        SOURCES`).
        """
        per_rank = sum(sp.edges_per_rank for sp in splits)
        local = sum(sp.block_local_edges for sp in splits)
        return {
            "edges_per_rank": per_rank,
            "edges": int(per_rank.sum()),
            "local_edges": local,
            **{f"rows_{src}": int(loaded[src]) for src in SOURCES},
            "input_rows_total": int(blocks[0].num_src),
        }

    def _dp_counterfactual(self, batch: MiniBatch, epoch: int, step: int) -> dict[str, Any]:
        """Edges and input rows data parallelism would process for the same targets.

        The global batch cut into ``W`` contiguous micro-batches, each sampled on its own stream
        (as data-parallel ranks sample), counted without training. A link task's micro-batches
        are slices of its positives, each seeding its own endpoints and negatives
        (:meth:`~fleetgnn.engines.link.EdgeBatches.part_blocks`; a temporal task's at the
        positives' times).
        """
        edges = rows = 0
        parts = torch.arange(batch.src.numel()) if self.link else batch.seeds  # type: ignore[union-attr]
        for r, micro in enumerate(torch.tensor_split(parts, self.world_size)):
            if micro.numel() == 0:
                continue
            if self.link:
                mb = self.edges.part_blocks(batch, micro, epoch, step, stream=r)
            else:
                mb = node_blocks(self.sampler, self.task, micro, epoch, step, stream=r)
            edges += sum(b.num_edges for b in mb)
            rows += mb[0].num_src
        return {"dp_edges": int(edges), "dp_input_rows": int(rows)}

    # ------------------------------------------------------------------ training
    def _epoch_start(self) -> None:
        self.store.reset_stats()  # the store's counters then hold this epoch's training reads
        self._totals = {}
        self._shuffle = np.zeros(self.num_layers, dtype=np.int64)

    def _run_step(self, epoch: int, step: int, batch: MiniBatch, waited: float) -> StepStats:
        stats, per_layer = self.train_step(epoch, step, batch, waited)
        self._shuffle += per_layer
        for k, v in batch.counters.items():
            self._totals[k] = self._totals.get(k, 0) + v
        return stats

    def _epoch_end(self) -> None:
        totals = self._totals
        rows = {src: int(totals.get(f"rows_{src}", 0)) for src in SOURCES}
        self._extra = {**self._epoch_extra(totals, self._shuffle), **self._store_stats(rows)}
        # this rank's own numbers (the Trainer gathers every rank's into extra["per_rank"])
        self._mine = {
            "shuffle_bytes_per_layer": self._shuffle.tolist(),  # forward; the backward as much
            "input_rows": rows,  # its own part's rows per store source
            "hit_rates": _rates(rows),
        }

    def _store_stats(self, rows: Mapping[str, int]) -> dict[str, Any]:
        """The epoch's input rows and feature bytes per source, summed over ranks.

        Collective (one ``all_reduce_sum`` of 10 int64 counts) in multi-rank runs: every rank
        calls it at the end of :meth:`run_epoch`.
        """
        links = tuple(SOURCE_LINKS.values())
        counts = [rows[src] for src in SOURCES] + [rows[s] * self.row_bytes for s in SOURCES]
        t = torch.tensor(counts, dtype=torch.int64)
        if self.world_size > 1:
            self.comm.all_reduce_sum(t)
        values = t.tolist()
        requests = dict(zip(SOURCES, values[: len(SOURCES)], strict=True))
        served = dict(zip(links, values[len(SOURCES) :], strict=True))
        return {
            "hit_rates": _rates(requests),
            "store_requests": {"features": requests},
            "store_bytes": {"features": served},
            "store_gather": self.gather,
        }

    def train_step(
        self, epoch: int, step: int, batch: MiniBatch, waited: float = 0.0
    ) -> tuple[StepStats, np.ndarray]:
        """Forward with shuffles, loss on the owned targets, backward, all-reduce, step.

        Returns:
            The step's stats and the forward shuffle bytes sent by this rank per layer.
        """
        splits: list[LayerSplit] = batch.splits  # type: ignore[assignment]
        sent: list[list[int]] = [[] for _ in splits]

        def forward() -> StepLoss:  # the shuffles run inside the aggregators
            aggs = [
                SplitAggregator(
                    sp,
                    self.comm,
                    dtype=self.dtype,
                    device=self.device,
                    meter_bytes=b,
                    wire_dtype=autocast_dtype(self.config),
                )
                for sp, b in zip(splits, sent, strict=True)
            ]
            logits = self.module(aggs, batch.x, step=epoch * self.steps_per_epoch() + step)
            if self.link:  # the owned seeds' rows: score the owned sources' pairs
                last = splits[-1]
                owner = torch.from_numpy(last.src_owner[: last.block.num_dst])
                task: Any = self.task
                return split_edge_batch_loss(
                    self.module, task, self.comm, logits, batch, owner, self.loss
                )
            return StepLoss.of(self.loss, logits, batch.target, batch.global_count)  # type: ignore[arg-type]

        prepared = Prepared(
            batch.t_sample,
            batch.t_gather,
            inline=waited,
            traffic=batch.traffic,  # bytes the store served per link kind
        )
        stats = run_step(
            self,
            forward,
            prepared=prepared,
        )
        return stats, np.array([sum(b) for b in sent], dtype=np.int64)

    def _epoch_extra(self, t: Mapping[str, Any], shuffle: np.ndarray) -> dict[str, Any]:
        if not t:
            return {}
        extra: dict[str, Any] = {
            **split_quality(t["edges_per_rank"], t["local_edges"]),
            "partition": self.book.method,
            "preprocess_s": self.preprocess_s,
        }
        if "dp_edges" in t:
            e = int(t["edges"])
            extra["dp_counterfactual"] = {
                "edges": int(t["dp_edges"]),
                "redundancy": (int(t["dp_edges"]) - e) / e if e else 0.0,
                "input_rows": int(t["dp_input_rows"]),
                "host_bytes": int(t["dp_input_rows"]) * self.row_bytes,
                "split_input_rows": int(t["input_rows_total"]),
            }
        return extra

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> dict[str, float]:
        """Node task: accuracies (streaming); link task: AUC/AP/MRR/Hits from summed sums.

        A temporal link task embeds every query at its time, the queries shared over the ranks
        (:func:`~fleetgnn.engines.temporal_link.sampled_temporal_metrics`); a temporal node
        task every split node at its node time, the nodes shared likewise.
        """
        if is_temporal_node(self.task):
            return sampled_temporal_node_metrics(self)
        if is_temporal(self.task):
            return sampled_temporal_metrics(self)
        if self.link:
            return sampled_link_metrics(self)
        return super().evaluate()

    def _features(self, ids: Tensor) -> Tensor:
        """Input rows of any nodes (evaluation), through the store."""
        return self._load(ids)[0]

    # ------------------------------------------------------------------ state
    def epoch_extra(self) -> dict[str, Any]:
        """Split quality (GSplit Table 5) and the data-parallel counterfactual (Tables 1-2).

        Computed from the shared sample, so they describe the whole job; each rank's input rows
        per tier and shuffle bytes per layer are in :meth:`rank_extra`.
        """
        return dict(self._extra)

    def rank_extra(self) -> dict[str, Any]:
        """This rank's shuffle bytes per layer and input rows per store source (last epoch).

        ``input_rows``: the epoch's training rows (all of its own part) per source;
        ``hit_rates``: their fractions (``local``: the rows found in its device shard).
        """
        return dict(self._mine)

    def peak_memory(self) -> dict[str, int]:
        """Bytes this rank holds per store tier (its device shard, its host's tier, disk)."""
        return dict(self.store.memory())

    def _release(self) -> None:
        """Release the store's shared memory and its group (after the prefetch thread)."""
        self.store.close()
        if self.store_comm is not None:
            self.store_comm.destroy()

    def __repr__(self) -> str:
        return (
            f"SplitEngine(rank={self.rank}/{self.world_size}, parts="
            f"{self.book.part_sizes().tolist()}, device_rows="
            f"{self.store.plan.features.partition_sizes().tolist()})"  # type: ignore[union-attr]
        )


def split_quality(edges_per_rank: np.ndarray, local_edges: int) -> dict[str, Any]:
    """GSplit's Table 5 of summed splits: edge skew, local-edge ratio, edges.

    ``edge_skew`` is ``(max - min) / mean`` of the edges each rank processed, the local-edge
    ratio the fraction of them whose source and destination share an owner.
    """
    per_rank = np.asarray(edges_per_rank, dtype=np.float64)
    edges = int(per_rank.sum())
    mean = per_rank.mean() if per_rank.size else 0.0
    return {
        "edge_skew": float((per_rank.max() - per_rank.min()) / mean) if mean else 0.0,
        "local_edge_ratio": float(local_edges / edges) if edges else 1.0,
        "edges": edges,
    }


def _rates(rows: Mapping[str, int]) -> dict[str, float]:
    """Each source's fraction of the rows (all 0 without rows)."""
    total = sum(rows.values())
    return {src: (v / total if total else 0.0) for src, v in rows.items()}


def agree_on_book(comm: Communicator, book: PartitionBook, path: PathLikeStr) -> None:
    """Check that every rank loaded the same book (collective: one all_gather_object).

    Each rank reads its own copy of the files; one that read them while ``fleetgnn
    partition`` replaced them would otherwise exchange with a different owner map.

    Raises:
        PartitionError: The ranks' checksums differ.
    """
    sums = comm.all_gather_object(book.checksum())
    if len(set(sums)) > 1:
        groups: dict[str, list[int]] = {}
        for r, s in enumerate(sums):
            groups.setdefault(s, []).append(r)
        said = "; ".join(f"ranks {rs} read {s[:8]}" for s, rs in groups.items())
        raise PartitionError(
            f"the ranks loaded different partition books from '{path}' ({said}): it was "
            f"rewritten while the run started; wait for 'fleetgnn partition' to finish and "
            f"start again"
        )


def split_book(
    comm: Communicator,
    graph: Graph | HeteroGraph,
    sc: SplitEngineConfig,
    book: PartitionBook | None = None,
    *,
    seed: int = 0,
) -> PartitionBook:
    """The split engine's offline partition: given, loaded, or computed on rank 0 and broadcast.

    Collective (one ``broadcast_object``, or one ``all_gather_object`` for a loaded book). A
    typed graph is partitioned over its global IDs (node types are ranges of them) through its
    homogeneous view, every relation's edges together (:meth:`~fleetgnn.graph.hetero.
    HeteroGraph.to_homogeneous`, without features), so ``sc.partition`` (METIS too) applies.

    Raises:
        ConfigError: The book's parts are not the ranks or its nodes not the graph's.
    """
    world_size, rank = comm.world_size, comm.rank
    if book is None and sc.book is not None:
        path = Path(sc.book)
        book = PartitionBook.load(path)
        agree_on_book(comm, book, path)
    if book is None:
        flat = graph
        if rank == 0 and isinstance(graph, HeteroGraph):
            flat, _ = graph.to_homogeneous(x=np.zeros((graph.num_nodes, 0), dtype=np.float32))
        book = comm.broadcast_object(
            partition(flat, sc.partition, world_size, seed=seed)  # type: ignore[arg-type]
            if rank == 0
            else None
        )
    if book.num_parts != world_size or book.num_nodes != graph.num_nodes:
        raise ConfigError(
            f"the partition book has {book.num_parts} parts over {book.num_nodes} nodes; the "
            f"split engine needs one part per rank ({world_size}) over the graph's "
            f"{graph.num_nodes} nodes; run 'fleetgnn partition --parts {world_size}'"
        )
    return book
