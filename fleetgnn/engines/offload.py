"""The ``offload`` engine (HongTu): full-graph training with vertex data in host memory.

Every layer's vertex data (``H^l``, ``G^l`` and, for cacheable layers, the aggregation outputs
``a^l``) stays in host memory; the device holds one chunk of one layer at a time.

**Two-level partition.** The graph is cut into one contiguous part per rank (``range`` or
``metis``, relabelled contiguous), each part into ``M`` chunks of destinations with all their
in-edges (:func:`~fleetgnn.partition.chunk_partition`, edge-balanced). Batch ``j`` runs one
chunk of every part at once; the chunk order comes from HongTu's reorganisation
(:func:`~fleetgnn.exchange.reorganize`) when Eq. 4 models it cheaper.

**Deduplicated communication** (:class:`~fleetgnn.exchange.TransitionPlan`). For batch ``j``,
rank ``k`` fills its transition buffer with ``T_j^k``: rows already there from batch ``j - 1``
stay in their slot (reuse), the others are loaded from host (h2d). After a barrier every rank
reads its chunk's rows ``N(S_ij)`` from the owners' buffers (its own: ``local``; others:
``peer``, shared memory between processes on one host) and a second barrier frees the buffers.
The backward pass pushes the neighbour gradients to the owners' slots (the own rank's directly,
others through a per-(source, owner) staging area summed by the owner); a row's gradient keeps
accumulating on the device while it stays in the transition set and is flushed to host ``G^l``
(d2h) when it leaves.

**Recomputation and the cache hybrid.** The forward pass runs without autograd and writes
``H^(l+1)`` of each chunk to host. The backward pass goes layer by layer, last first: it reloads
the chunk's inputs and recomputes the layer under autograd (keyed dropout makes it exact), then
back-propagates ``G^(l+1)`` of the chunk's destinations (the last layer: the loss over its
training nodes, divided by the GLOBAL number of training nodes). For layers whose aggregation has
no parameters (the model's optional ``cacheable_aggregation(i)``: GCN and SAGE aggregating raw
inputs, GIN) the forward pass caches every ``aggregate()`` output of the chunk in host memory;
the backward pass then loads only the chunk's own rows (neighbour rows are zeros), replays the
cached aggregates and gets the neighbour gradients as ``A^T dL/da``. Both give the same
gradients, for a layer that aggregates its raw inputs: a one-chunk probe at start compares the
two on every cached layer and refuses a model whose declaration is wrong
(:meth:`OffloadEngine._check_cacheable`). One optimizer step per epoch after one all-reduce of
the parameter gradients.

**Overlapped transfers** (``overlap_transfers``, :class:`~fleetgnn.distributed.transfer.
Transfers`). The chunks are double-buffered: batch ``j + 1``'s rows are loaded while batch ``j``
computes, and batch ``j``'s outputs (or the gradients it flushes) return to host while the next
one computes. On CUDA the vertex data is pinned and the copies run on a side stream with events;
on the CPU the same order runs synchronously. The epoch reports ``transfer_s``,
``transfer_wait_s`` and ``hidden_fraction = 1 - wait / transfer``, like ``fullgraph``'s halo.

**Large graphs.** From :data:`FILE_TOPOLOGY_EDGES` edges on, each machine gets one scratch
directory (``scratch_dir``; ``fleetgnn train``: the run directory) holding the ``metis``
topology in new IDs, written once by rank 0 in a streamed pass and mapped read-only by every
rank, and the transition plan, built once by rank 0 (it needs every part's chunk rows) and
handed to each rank as its :class:`~fleetgnn.exchange.transition.RankPlan`. Smaller graphs keep
a private copy of both per rank.

**Link prediction** (``task``: a :class:`~fleetgnn.tasks.LinkPrediction`). The forward writes
``H^L`` (the embeddings) to host as above; the decoder and loss then run on it in chunks of the
training pairs whose source this rank owns, fetching the other endpoints' rows from their
owners, and their gradient ``G^L`` seeds the chunked backward in place of the node loss
(:mod:`fleetgnn.engines.offload_link`).

**Device budget.** ``device_budget`` bounds one rank's live device bytes: the transition,
gradient and staging buffers, the current chunk's topology, neighbour rows, outputs, gradients
and the autograd saved tensors (counted with ``torch.autograd.graph.saved_tensors_hooks``). The
number of chunks is the smallest power of two whose predicted peak fits (or the one given, if it
fits; else the run refuses to start, naming the smallest that does); the measured peak is
reported every epoch and a run that exceeds the budget stops with an error.
"""

from __future__ import annotations

import pickle
import shutil
import tempfile
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from fleetgnn.config import OffloadEngineConfig
from fleetgnn.distributed import DistContext, ShardedTensor
from fleetgnn.distributed.transfer import Pending, Transfers
from fleetgnn.engines.base import DistributedEngine, FullGraphEngineBase, StepStats
from fleetgnn.engines.collectives import agreed
from fleetgnn.engines.common import (
    LossFn,
    autocast_dtype,
    loss_sum,
    node_labels,
    normalize_rows,
    setup_distributed,
    setup_model,
    split_metrics,
    stored_values,
)
from fleetgnn.engines.link import check_link_model, setup_task
from fleetgnn.engines.offload_budget import OffloadBudget, OffloadBudgetError
from fleetgnn.engines.offload_link import OffloadLink
from fleetgnn.engines.step import StepLoss, run_step
from fleetgnn.errors import ConfigError
from fleetgnn.exchange import HONGTU_BANDWIDTHS, ChunkHop, build_transition_plan
from fleetgnn.exchange.transition import RankPlan, chunk_hop
from fleetgnn.graph import Graph
from fleetgnn.graph.compact_rows import applied_feature_dtype
from fleetgnn.graph.csc import open_topology, topology_nbytes
from fleetgnn.graph.files import (
    disk_full_as_error,
    disk_full_error,
    free_bytes,
    sweep_stale,
    temp_prefix,
)
from fleetgnn.nn import LocalAggregator, check_model
from fleetgnn.nn.recompute import REPLAY_TOLERANCE, replay_gradient_error
from fleetgnn.nn.recompute import RecordingAggregator as _Recording
from fleetgnn.nn.recompute import ReplayAggregator as _Replay
from fleetgnn.nn.recompute import SavedBytesMeter as _SavedMeter
from fleetgnn.partition import chunk_partition
from fleetgnn.partition.chunks import two_level_book
from fleetgnn.tasks import Task

#: From this many edges on, the relabelled (``metis``) topology is one file per machine that
#: every rank maps, written in a streamed pass; smaller graphs keep a copy per rank in memory.
FILE_TOPOLOGY_EDGES = 4_000_000
_TOPOLOGY_NAME = "offload-topology"
_DISK_FIX = (
    "free some space there, or put the offload engine's scratch on another disk (it goes to the "
    "run directory: fleetgnn train --run-dir; Python: OffloadEngineConfig(scratch_dir=))"
)


def _in_degree(indptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """In-degrees of ``rows`` (new IDs) read from ``indptr`` (a memory map is fine)."""
    rows = np.asarray(rows, dtype=np.int64)
    return np.asarray(indptr[rows + 1]) - np.asarray(indptr[rows])


# ---------------------------------------------------------------------------------- engine
class OffloadEngine(OffloadBudget, FullGraphEngineBase, DistributedEngine):
    """Full-graph training with host-resident vertex data, chunk by chunk (HongTu).

    Args:
        model: A layer-wise model (see :mod:`fleetgnn.nn.protocol`); parameters replicated
            (rank 0's broadcast). Optional ``cacheable_aggregation(i) -> bool`` enables the
            recompute/cache hybrid for layer ``i``.
        graph: The dataset (memory maps are fine: each rank reads its part's features).
        ctx: This process's :class:`~fleetgnn.distributed.DistContext` (``None``: from the
            environment). All ranks must share one host (transition buffers are shared memory).
        config: An :class:`~fleetgnn.config.OffloadEngineConfig`.
        optimizer: Over ``model``'s parameters (``None``: Adam, lr 0.01).
        loss: Per-node loss (``None``: cross-entropy; for a link task, the task's pair loss).
        task: What to train (``None``: node classification). A
            :class:`~fleetgnn.tasks.LinkPrediction` runs on its split's message-passing graph;
            the decoder and loss run on the last layer held in host memory and the chunked
            backward is seeded from there (:mod:`fleetgnn.engines.offload_link`).

    Raises:
        ConfigError: Ranks on several hosts, or ``cache_aggregates=True`` with a model whose
            layers are not all cacheable.
        OffloadBudgetError: The device budget cannot hold one chunk (names the smallest number
            of chunks that fits, if any).
    """

    name = "offload"

    def __init__(
        self,
        model: torch.nn.Module,
        graph: Graph,
        ctx: DistContext | None = None,
        config: OffloadEngineConfig | None = None,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        loss: LossFn | None = None,
        task: Task | None = None,
    ) -> None:
        check_model(model, self.name)
        graph, loss = setup_task(self, "full", task, graph, loss)
        if self.link:
            check_link_model(model)
        dist = setup_distributed(self.name, graph, config, OffloadEngineConfig, ctx, self.task)
        super().__init__(dist, graph)  # config, ctx, rank, device, clock, comm ...
        oc: OffloadEngineConfig = dist.config
        if self.world_size > 1 and not self.comm.same_host:
            raise ConfigError(
                "the offload engine runs its ranks on one host (their transition buffers are "
                "shared memory); use --nproc on one machine, or the fullgraph engine across hosts"
            )
        self._topology_dir: Path | None = None  # rank 0's, to remove
        try:
            self._setup(graph, oc, model, optimizer, loss)
            self.linked = OffloadLink(self, task) if self.link else None  # type: ignore[arg-type]
        except BaseException:
            self._remove_topology()
            raise

    def _setup(
        self,
        graph: Graph,
        oc: OffloadEngineConfig,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None,
        loss: LossFn | None,
    ) -> None:
        """Partition, plan and allocate (``__init__``'s work; the caller cleans up on errors)."""
        t0 = self.clock()
        # METIS (if asked) runs on rank 0 only; every rank plans over the whole topology in
        # new IDs but reads only its own rows of the node data
        self.book = two_level_book(graph, oc.partition, self.world_size, self.seed, comm=self.comm)
        identity = oc.partition == "range"
        self.orig_ids = None if identity else np.asarray(self.book.perm)
        # a large graph gets one scratch directory per machine: the relabelled topology (metis)
        # and the plan's per-rank views (rank 0 builds the plan once)
        large = graph.num_edges >= FILE_TOPOLOGY_EDGES
        need = 0 if identity else topology_nbytes(graph)
        self._shared_dir = (
            self._make_shared_dir(oc.scratch_dir, need)
            if large and (not identity or self.world_size > 1)
            else None
        )
        self._plans_made = 0
        g = graph if identity else self._relabelled_topology(graph)
        # the topology in new IDs: the dataset's (range), a private copy (small graphs) or
        # read-only maps of one file per machine; in-degrees come from indptr where needed
        self.indptr: np.ndarray = g.indptr
        self.indices: np.ndarray = g.indices
        offsets = np.asarray(self.book.offsets, dtype=np.int64)
        self.lo, self.hi = int(offsets[self.rank]), int(offsets[self.rank + 1])
        own = self.book.part_rows(graph, self.rank)
        stored = applied_feature_dtype(graph.x, oc.feature_dtype)  # as the dataset stores them
        x = stored_values(torch.from_numpy(own.x), stored)  # type: ignore[arg-type]
        x = x.to(self.dtype)
        # the labels, masks and training rows the task reads (none for link prediction)
        labels = node_labels(self.task, graph, "cpu", rows=own)
        del own
        self.y, self.masks = labels.y, labels.masks
        self.train_local = labels.train
        self.global_train = labels.num_train
        self.module = self.model = setup_model(self, model, optimizer, loss)
        self.hybrid = self._hybrid_layers(oc.cache_aggregates)
        self.widths = self._probe_widths(int(x.shape[1]))
        self.elem = torch.empty(0, dtype=self.dtype).element_size()
        # mixed precision: vertex rows (H^l, the transition buffers) are kept and moved in the
        # autocast dtype, half the bytes; gradient rows (G^l, staging) stay in self.dtype
        self.row_dtype = autocast_dtype(self.config) or self.dtype
        self.row_elem = torch.empty(0, dtype=self.row_dtype).element_size()
        self.overlap = bool(oc.overlap_transfers)
        self.xfer = Transfers(self.device, self.overlap)
        self.budget = self._budget(oc.device_budget)
        # ---- chunks, plan, this rank's hops
        self.num_chunks = self._choose_chunks(g, oc.chunks)
        self.chunk_book = chunk_partition(g, self.book, self.num_chunks, relabelled=True)
        self.plan = self._rank_plan(self.chunk_book, oc.reorganize)
        if self.budget is not None and oc.reorganize:
            hops = [self._hop_of(self.chunk_book, c) for c in range(self.num_chunks)]
            peak = (
                self._static_bytes(self.plan)
                + self._overlap_bytes(self.plan, hops)
                + self._dynamic_bound(hops)
            )
            # the reorganised order may need larger buffers: keep the identity order then
            if self._max_over_ranks(peak) > self.budget:
                self.plan = self._rank_plan(self.chunk_book, False)
        self.reorganized = not np.array_equal(
            self.plan.order, np.tile(np.arange(self.num_chunks), (self.world_size, 1))
        )
        self.hops = [self._hop(j) for j in range(self.num_chunks)]
        self._prepare_pulls()
        t1 = self.clock()
        self._check_cacheable()
        self.probe_s = self.clock() - t1
        self.preprocess_s = self.clock() - t0
        # ---- host-resident vertex data (this rank's rows only: one copy per machine), pinned
        # where the copies overlap on a CUDA device
        n, zeros = self.hi - self.lo, self.xfer.host_zeros
        x0 = normalize_rows(x, oc.feature_norm).to(self.row_dtype)
        self.H: list[torch.Tensor] = [x0.pin_memory() if self.xfer.pins else x0]
        self.H += [zeros(n, w, dtype=self.row_dtype) for w in self.widths[1:]]
        # G^1..G^(L-1); a link task seeds the backward from G^L (its pair loss's gradient)
        self.G: list[torch.Tensor | None] = [None] + [
            zeros(n, w, dtype=self.dtype) for w in self.widths[1 : None if self.link else -1]
        ]
        self.cache: dict[tuple[int, int], list[torch.Tensor]] = {}
        self._allocate_buffers()
        self._rows = self._zero_rows()
        self._peak = 0
        self._extra: dict[str, Any] = {}

    # ------------------------------------------------------------------ setup helpers
    def _make_shared_dir(self, scratch_dir: str | None, need: int) -> Path:
        """Rank 0 creates this machine's scratch directory (``need`` bytes checked); collective.

        In ``scratch_dir`` (``None``: the system's temporary directory), named after rank 0's
        process so a later run sweeps it if that process is killed
        (:func:`~fleetgnn.graph.files.sweep_stale`; ``fleetgnn train`` sweeps its run directory
        too); removed by :meth:`close`.
        """

        def make() -> str:
            root = Path(scratch_dir) if scratch_dir is not None else Path(tempfile.gettempdir())
            try:
                root.mkdir(parents=True, exist_ok=True)
                # dead owners' directories of this engine only (the system's temporary
                # directory is shared; fleetgnn train sweeps its run directory anyway)
                sweep_stale(root, files=False, legacy_names=(), names={_TOPOLOGY_NAME})
                if need > free_bytes(root):
                    raise disk_full_error(root, need, _DISK_FIX, checked=True)
                path = Path(tempfile.mkdtemp(prefix=temp_prefix(_TOPOLOGY_NAME), dir=root))
            except OSError as e:  # a read-only or missing place (a full disk: DiskFullError)
                raise ConfigError(
                    f"cannot create the offload engine's scratch directory in '{root}' "
                    f"({e.strerror or e}); it needs {need} bytes of writable space there"
                ) from e
            self._topology_dir = path
            return str(path)

        return Path(agreed(self._comm_or_none(), make, everywhere=False))

    def _comm_or_none(self) -> Any:
        return self.comm if self.world_size > 1 else None

    def _relabelled_topology(self, graph: Graph) -> Graph:
        """The topology in the book's new IDs: in memory, or one shared file per machine.

        Without a shared directory (graphs below :data:`FILE_TOPOLOGY_EDGES` edges) every rank
        permutes its own copy. With one, rank 0 writes it once
        (:meth:`~fleetgnn.partition.PartitionBook.relabel_to`, streamed: bounded memory) and
        every rank maps the files read-only (the ranks share one host), so no rank holds an
        ``N + E`` sized copy. Collective.
        """
        if self._shared_dir is None:
            return self.book.relabel(graph, node_data=False)
        shared = self._shared_dir

        def write() -> str:
            self.book.relabel_to(graph, shared)
            return str(shared)

        path = agreed(self._comm_or_none(), write, everywhere=False)
        return open_topology(path, num_classes=graph.num_classes, name=graph.name)

    def _rank_plan(self, chunks: Any, reorganise: bool) -> RankPlan:
        """This rank's view of the transition plan of ``chunks`` (collective with a directory).

        Every part's chunk rows are needed to build the plan (``8 (N + E)`` bytes at most);
        with a shared directory rank 0 builds it alone and writes one pickled
        :class:`~fleetgnn.exchange.transition.RankPlan` per rank there, which each rank reads
        and removes; else every rank builds it and keeps its view.
        """
        if self._shared_dir is None or self.world_size == 1:
            plan, _ = build_transition_plan(self.indptr, self.indices, chunks, reorganise)
            return plan.rank_view(self.rank)
        self._plans_made += 1
        files = [
            self._shared_dir / f"plan-{self._plans_made}-{k}.pkl" for k in range(self.world_size)
        ]

        def build() -> None:
            plan, _ = build_transition_plan(self.indptr, self.indices, chunks, reorganise)
            for k, file in enumerate(files):
                with disk_full_as_error(file, 0, _DISK_FIX), open(file, "wb") as f:
                    pickle.dump(plan.rank_view(k), f, protocol=pickle.HIGHEST_PROTOCOL)

        agreed(self.comm, build, everywhere=False)
        mine = files[self.rank]
        with open(mine, "rb") as f:
            view = pickle.load(f)
        mine.unlink()
        return view

    def _remove_topology(self) -> None:
        """Rank 0 removes the shared topology directory (other ranks' maps stay valid)."""
        path, self._topology_dir = self._topology_dir, None
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)

    def _hybrid_layers(self, setting: bool | None) -> list[bool]:
        probe = getattr(self.module, "cacheable_aggregation", None)
        able = [bool(probe(i)) if callable(probe) else False for i in range(self.num_layers)]
        if setting is False:
            return [False] * self.num_layers
        if setting is True and not all(able):
            bad = [i for i, a in enumerate(able) if not a]
            raise ConfigError(
                f"offload.cache_aggregates=true but layer(s) {bad} of {type(self.module).__name__}"
                f" do not declare a cacheable aggregation (cacheable_aggregation(i)); set "
                f"offload.cache_aggregates=null to cache where possible"
            )
        return able

    def _check_cacheable(self) -> None:
        """Refuse a layer that declares a cacheable aggregation but whose gradient replay is wrong.

        A one-chunk probe at start: for every layer the hybrid caches, on this rank's chunk with
        the fewest edges among those reading rows of other chunks, the gradients from the
        replayed aggregates must equal recomputation's (random inputs and output gradient;
        :func:`~fleetgnn.nn.recompute.replay_gradient_error`, tolerance per dtype). The
        verdicts are gathered over ranks (one collective) so every rank refuses alike.

        Raises:
            ConfigError: One line naming the layer, the difference and the fixes.
        """
        layers = [i for i, cached in enumerate(self.hybrid) if cached]
        if not layers:
            return
        outside = [j for j, h in enumerate(self.hops) if h.num_dst and h.rows.size > h.num_dst]
        errors: dict[int, float] = {}
        if outside:
            j = min(outside, key=lambda k: self.hops[k].num_edges)
            agg, rows = self.aggs[j], self.hops[j].rows.size
            gen = torch.Generator().manual_seed(self.seed)
            for i in layers:
                x = torch.randn(rows, self.widths[i], generator=gen, dtype=self.dtype)
                x = x.to(self.device)
                errors[i] = replay_gradient_error(self.module, i, agg, x, seed=self.seed + i)
        if self.world_size > 1:
            gathered = self.comm.all_gather_object(errors)
            errors = {i: max(e.get(i, 0.0) for e in gathered) for i in layers}
        tol = REPLAY_TOLERANCE.get(self.dtype, 1e-3)
        bad = [i for i in layers if errors.get(i, 0.0) > tol]
        if bad:
            i, name = bad[0], type(self.module).__name__
            raise ConfigError(
                f"layer {i} of {name} declares cacheable_aggregation({i}) but its gradient from "
                f"the cached aggregates differs from recomputation's by {errors[i]:.2g} "
                f"(relative, tolerance {tol:g} for {str(self.dtype).removeprefix('torch.')}) on "
                f"one chunk: it transforms its input before aggregating. Return False from "
                f"cacheable_aggregation({i}), or set offload.cache_aggregates=false"
            )

    def _probe_widths(self, in_dim: int) -> list[int]:
        """Widths of ``H^0..H^L``: run each layer on a one-node hop with one self edge."""
        adj = SimpleNamespace(
            indptr=torch.tensor([0, 1], device=self.device),
            indices=torch.tensor([0], device=self.device),
            src_ids=torch.tensor([0], device=self.device),
            num_dst=1,
            src_degree=torch.ones(1, dtype=self.dtype, device=self.device),
        )
        agg = LocalAggregator(adj, dtype=self.dtype, validate=False)
        widths = [in_dim]
        with torch.no_grad():
            for i in range(self.num_layers):
                h = torch.zeros(1, widths[-1], dtype=self.dtype, device=self.device)
                widths.append(int(self.module.layer_forward(i, agg, h, step=0).shape[1]))
        return widths

    def _hop_of(self, chunks: Any, order_chunk: int) -> ChunkHop:
        return chunk_hop(self.indptr, self.indices, chunks, self.rank, order_chunk)

    def _hop(self, j: int) -> ChunkHop:
        return self._hop_of(self.chunk_book, int(self.plan.order[self.rank, j]))

    def _aggregator(self, hop: ChunkHop) -> LocalAggregator:
        rows = hop.rows if self.orig_ids is None else self.orig_ids[hop.rows]
        adj = SimpleNamespace(
            indptr=torch.from_numpy(hop.indptr).to(self.device),
            indices=torch.from_numpy(hop.indices).to(self.device),
            src_ids=torch.from_numpy(np.asarray(rows, dtype=np.int64)).to(self.device),
            num_dst=hop.num_dst,
            src_degree=torch.from_numpy(_in_degree(self.indptr, hop.rows)).to(
                self.device, self.dtype
            ),
        )
        return LocalAggregator(adj, dtype=self.dtype, validate=False)

    def _prepare_pulls(self) -> None:
        """Tensors of this rank's reads (pulls) and of the gradients pushed to it, per batch."""
        p, r, m = self.world_size, self.rank, self.num_chunks
        dev = self.device

        def t(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(dev)

        self.pulls = [
            [(k, t(pos), t(sl)) for k, pos, sl in self.plan.pulls(r, j)] for j in range(m)
        ]
        self.stage_caps = self.plan.staging_caps()  # rank i's shard: its rows for each owner
        self.stage_offsets = np.zeros((p, p + 1), dtype=np.int64)
        np.cumsum(self.stage_caps, axis=1, out=self.stage_offsets[:, 1:])
        # gradients pushed to this rank in batch j: (source s, slots)
        self.incoming = [[(s, t(sl)) for s, sl in self.plan.incoming[j]] for j in range(m)]
        self.trans_rows = [
            (
                t(self.plan.trans[j][r] - self.lo),
                t(self.plan.slots[j][r]),
                torch.from_numpy(self.plan.load[j][r]).to(dev),
            )
            for j in range(m)
        ]
        self.leave = [
            (t(self.plan.leave[j][r][0] - self.lo), t(self.plan.leave[j][r][1]))
            for j in range(m + 1)
        ]
        # the host side of the copies: rows of H^l loaded per batch, rows of G^l flushed
        self.fill_rows = [
            torch.from_numpy(
                np.asarray(self.plan.trans[j][r][self.plan.load[j][r]] - self.lo, dtype=np.int64)
            )
            for j in range(m)
        ]
        self.leave_rows = [
            torch.from_numpy(np.asarray(self.plan.leave[j][r][0] - self.lo, dtype=np.int64))
            for j in range(m + 1)
        ]
        self.aggs = [self._aggregator(h) if h.num_dst else None for h in self.hops]
        train = self.train_local  # ascending; empty for a task that reads no labels
        self.hop_train = [
            train[(train >= h.lo - self.lo) & (train < h.hi - self.lo)] - (h.lo - self.lo)
            for h in self.hops
        ]

    def _allocate_buffers(self) -> None:
        r, cap = self.rank, int(self.plan.capacity[self.rank])
        tbuf = torch.zeros(cap, self._hmax, dtype=self.row_dtype, device=self.device)
        rows = int(self.stage_offsets[r, -1])
        stage = torch.zeros(rows, self._gmax, dtype=self.dtype, device=self.device)
        self._shared: list[ShardedTensor] = []
        if self.world_size > 1:
            token = uuid.uuid4().hex[:8] if self.rank == 0 else None
            token = self.comm.broadcast_object(token)
            st = ShardedTensor.create(tbuf, self.comm, name=f"offload.t.{token}")
            sg = ShardedTensor.create(stage, self.comm, name=f"offload.g.{token}")
            self._shared = [st, sg]
            self.tbufs, self.stages = st.shards, sg.shards
            self.tbuf, self.stage = self.tbufs[r], self.stages[r]
        else:
            self.tbuf, self.stage = tbuf, stage
            self.tbufs, self.stages = [tbuf], [stage]
        self.gbuf = torch.zeros(cap, self._gmax, dtype=self.dtype, device=self.device)
        live = self.gbuf.numel() + self.stage.numel()
        self.static_bytes = live * self.elem + self.tbuf.numel() * self.row_elem

    # ------------------------------------------------------------------ accounting
    @staticmethod
    def _zero_rows() -> dict[str, int]:
        return {"h2d": 0, "reuse": 0, "local": 0, "peer": 0, "d2h": 0}

    def _count(self, kind: str, rows: int, width: int, elem: int | None = None) -> None:
        """Count ``rows`` rows of ``width`` moved over ``kind``.

        ``elem``: bytes per element (``None``: a vertex row's, :attr:`row_elem`).
        """
        self._rows[kind] += int(rows)
        if kind != "reuse" and rows:
            self.meter.record(kind, int(rows) * width * (self.row_elem if elem is None else elem))

    def _live(self, nbytes: int) -> None:
        live = self.static_bytes + int(nbytes) + self.xfer.inflight_bytes
        self._peak = max(self._peak, live)

    def _check_budget(self) -> None:
        """Stop every rank if any rank's live bytes exceeded the budget (collective)."""
        peaks = self.comm.all_gather_object(self._peak) if self.world_size > 1 else [self._peak]
        if self.budget is not None and max(peaks) > self.budget:
            worst = int(np.argmax(peaks))
            raise OffloadBudgetError(
                f"rank {worst} needed {max(peaks)} live device bytes, over "
                f"offload.device_budget={self.budget}; use more chunks (offload.chunks="
                f"{2 * self.num_chunks}) or a larger budget"
            )

    def _barrier(self) -> None:
        if self.world_size > 1:
            self.comm.barrier()

    # ------------------------------------------------------------------ data movement
    def _issue_fill(self, layer: int, j: int) -> Pending:
        """Start loading the rows ``R_j^rank`` of ``H^layer`` that batch ``j`` does not reuse."""
        return self.xfer.load(self.H[layer], self.fill_rows[j], key=("fill", j % 2))

    def _fill(self, layer: int, j: int, loaded: Pending | None) -> None:
        """Bring ``T_j^rank`` of ``H^layer`` into the transition buffer: reuse D, load R."""
        d = self.widths[layer]
        rows, slots, load = self.trans_rows[j]
        new = self.fill_rows[j].numel()
        loaded = loaded if loaded is not None else self._issue_fill(layer, j)
        self.tbuf[slots[load], :d] = loaded.wait()
        self._count("h2d", new, d)
        self._count("reuse", rows.numel() - new, d)

    def _gather(self, layer: int, j: int) -> torch.Tensor:
        """``H^layer[N(S_j)]`` of this rank's chunk, read from the owners' transition buffers."""
        d = self.widths[layer]
        pulls = self.pulls[j]
        for k, pos, _ in pulls:
            self._count("local" if k == self.rank else "peer", pos.numel(), d)
        if len(pulls) == 1 and pulls[0][1].numel() == self.hops[j].rows.size:
            k, _, slots = pulls[0]  # one owner (positions in order): no scatter
            return self.tbufs[k][:, :d].index_select(0, slots)
        out = torch.empty(self.hops[j].rows.size, d, dtype=self.row_dtype, device=self.device)
        for k, pos, slots in pulls:
            out.index_copy_(0, pos, self.tbufs[k][:, :d].index_select(0, slots))
        return out

    def _load_neighbours(self, layer: int, j: int, loaded: Pending | None) -> torch.Tensor:
        """Deduplicated load of the chunk's rows (collective: two barriers).

        ``loaded``: the fill issued ahead (:meth:`_issue_fill`); ``None``: load it now.
        """
        self._fill(layer, j, loaded)
        self._barrier()
        nbr = self._gather(layer, j)
        self._barrier()
        return nbr

    def _flush(self, layer: int, k: int) -> tuple[int, torch.Tensor, Pending] | None:
        """Start returning the gradients of rows leaving the transition set before batch ``k``.

        Their slots are zeroed now; :meth:`_settle` adds them into host ``G^layer``.
        """
        rows, (_, slots) = self.leave_rows[k], self.leave[k]
        if not rows.numel():
            return None
        d = self.widths[layer]
        vals = self.gbuf[slots, :d]
        self.gbuf[slots, :d] = 0
        self._count("d2h", rows.numel(), d, self.elem)
        return layer, rows, self.xfer.save(vals, key=("flush", k % 2))

    def _settle(self, flushes: list[tuple[int, torch.Tensor, Pending] | None]) -> None:
        """Add returned gradients into host ``G`` in the order they were flushed; empty it."""
        for item in flushes:
            if item is not None:
                layer, rows, vals = item
                g = self.G[layer]
                assert g is not None
                g.index_add_(0, rows, vals.wait())
        flushes.clear()

    def _push(self, layer: int, j: int, grad: torch.Tensor) -> None:
        """Neighbour gradients to the owners' gradient buffers (collective: two barriers)."""
        d, r = self.widths[layer], self.rank
        for k, pos, slots in self.pulls[j]:
            if k == r:
                self.gbuf[:, :d].index_add_(0, slots, grad[pos])
                self._count("local", pos.numel(), d, self.elem)
            else:
                o = int(self.stage_offsets[r, k])
                self.stage[o : o + pos.numel(), :d] = grad[pos]
                self._count("peer", pos.numel(), d, self.elem)
        self._barrier()
        for s, slots in self.incoming[j]:
            o = int(self.stage_offsets[s, r])
            self.gbuf[:, :d].index_add_(0, slots, self.stages[s][o : o + slots.numel(), :d])
        self._barrier()

    # ------------------------------------------------------------------ passes
    def _forward(self, step: int, *, training: bool) -> tuple[float, int, int]:
        """Layer-by-layer chunked forward writing ``H^1..H^L`` (and cached aggregates).

        Double-buffered with ``overlap_transfers``: batch ``j + 1``'s rows load while batch
        ``j`` computes, and batch ``j``'s outputs return to host while ``j + 1`` computes.
        """
        loss_total, correct, count = 0.0, 0, 0
        last, m = self.num_layers - 1, self.num_chunks
        for layer in range(self.num_layers):
            d_out = self.widths[layer + 1]
            ahead = self._issue_fill(layer, 0) if self.overlap and m else None
            behind: list[Pending] = []  # the previous batch's write-back
            for j, hop in enumerate(self.hops):
                nbr = self._load_neighbours(layer, j, ahead)
                ahead = self._issue_fill(layer, j + 1) if self.overlap and j + 1 < m else None
                if hop.num_dst == 0:
                    continue
                if not training:  # evaluation computes in self.dtype (rows may be bfloat16)
                    nbr = nbr.to(self.dtype)
                agg: Any = self.aggs[j]
                record = training and self.hybrid[layer]
                if record:
                    agg = _Recording(agg)
                with torch.no_grad():
                    out = self.module.layer_forward(layer, agg, nbr, step=step)
                cached = sum(a.numel() for a in agg.outputs) if record else 0
                self._live((nbr.numel() + out.numel() + cached) * self.elem + hop.nbytes)
                if record:  # to (pinned) host at once: they are not counted as in flight
                    saved = [
                        self.xfer.save(a, key=("cache", layer, j, i))
                        for i, a in enumerate(agg.outputs)
                    ]
                    self.cache[(layer, j)] = [p.wait() for p in saved]
                    for a in agg.outputs:
                        width = a[0].numel() if a.shape[0] else 0
                        self._count("d2h", a.shape[0], width, a.element_size())
                sl = slice(hop.lo - self.lo, hop.hi - self.lo)
                for p in behind:
                    p.wait()
                behind = [self.xfer.save(out, self.H[layer + 1][sl], key=("out", j % 2))]
                if not self.overlap:
                    behind[0].wait()
                self._count("d2h", hop.num_dst, d_out)
                if layer == last and training and not self.link:
                    idx = self.hop_train[j]
                    if idx.numel():
                        logits = out.index_select(0, idx.to(self.device)).to(self.dtype)
                        target = self.y[sl][idx].to(self.device)
                        loss_total += float(loss_sum(self.loss, logits, target))
                        correct += int((logits.argmax(1) == target).sum())
                        count += int(idx.numel())
            for p in behind:
                p.wait()
            self.xfer.drain()
        return loss_total, correct, count

    def _issue_backward(self, layer: int, j: int) -> tuple[Pending, Pending | None]:
        """Start loading batch ``j``'s inputs of ``layer`` and the gradients of its outputs.

        The inputs are the chunk's own rows (a cached layer) or its transition rows; the
        gradients are ``None`` for the last layer and for empty chunks.
        """
        hop = self.hops[j]
        sl = slice(hop.lo - self.lo, hop.hi - self.lo)
        rows = self.xfer.load(self.H[layer][sl]) if self.hybrid[layer] else None
        rows = rows if rows is not None else self._issue_fill(layer, j)
        grads = self.G[layer + 1] if layer + 1 < len(self.G) else None
        seed = self.xfer.load(grads[sl]) if grads is not None and hop.num_dst else None
        return rows, seed

    def _backward(self, step: int) -> None:
        """Layer-by-layer chunked backward: recompute (or replay), back-propagate, push.

        Double-buffered like the forward: batch ``j + 1``'s inputs load while ``j`` computes,
        and the gradients flushed before ``j`` return to host while ``j`` computes.
        """
        for g in self.G[1 : self.num_layers]:  # G^L of a link task holds the seed
            if g is not None:
                g.zero_()
        last, m = self.num_layers - 1, self.num_chunks
        for layer in range(last, -1, -1):
            d_in = self.widths[layer]
            want = layer > 0
            flushes: list[tuple[int, torch.Tensor, Pending] | None] = []
            ahead = self._issue_backward(layer, 0) if m else None
            for j, hop in enumerate(self.hops):
                rows, seed = ahead if ahead is not None else self._issue_backward(layer, j)
                if self.hybrid[layer]:
                    own = rows.wait()
                    self._count("h2d", hop.num_dst, d_in)
                    nbr = torch.zeros(hop.rows.size, d_in, dtype=self.row_dtype, device=self.device)
                    nbr[: hop.num_dst] = own
                else:
                    nbr = self._load_neighbours(layer, j, rows)
                if want:
                    flushes.append(self._flush(layer, j))
                ahead = self._issue_backward(layer, j + 1) if self.overlap and j + 1 < m else None
                grad = self._chunk_backward(layer, j, hop, nbr, step, want, seed)
                if want:
                    self._push(layer, j, grad)
                    self._settle(flushes)  # returned while the chunk computed
            if want:
                flushes.append(self._flush(layer, self.num_chunks))
                self._settle(flushes)
            self.xfer.drain()

    def _chunk_backward(
        self,
        layer: int,
        j: int,
        hop: ChunkHop,
        nbr: torch.Tensor,
        step: int,
        want: bool,
        seed_load: Pending | None,
    ) -> torch.Tensor:
        """Recompute ``layer`` on chunk ``j`` under autograd and back-propagate into ``nbr``.

        ``seed_load``: the copy of the gradients of the chunk's outputs (not the last layer).
        """
        if hop.num_dst == 0:
            return nbr.to(self.dtype)
        base = self.aggs[j]
        agg: Any = _Replay(base, self.cache[(layer, j)], layer) if self.hybrid[layer] else base
        h = nbr.requires_grad_(want)
        meter = _SavedMeter([*self.module.parameters(), h])
        d_out = self.widths[layer + 1]
        sl = slice(hop.lo - self.lo, hop.hi - self.lo)
        with torch.enable_grad(), meter():
            out = self.module.layer_forward(layer, agg, h, step=step)
            if layer == self.num_layers - 1 and not self.link:
                idx = self.hop_train[j].to(self.device)
                target = self.y[sl].to(self.device).index_select(0, idx)
                loss = loss_sum(self.loss, out.index_select(0, idx).to(self.dtype), target)
                seed = None
                root = loss / max(self.global_train, 1)
            else:
                assert seed_load is not None
                root, seed = out, seed_load.wait()
                seed = seed.to(out.dtype)  # mixed precision: the output may be bfloat16
                self._count("h2d", hop.num_dst, d_out, self.elem)
        self._live(meter.bytes + self._chunk_bytes(hop, self.widths[layer], d_out))
        if root.requires_grad:
            root.backward(seed)
        if not want:
            return nbr
        grad = h.grad if h.grad is not None else torch.zeros_like(nbr)
        return grad.to(self.dtype)  # gradient rows are pushed and summed in self.dtype

    # ------------------------------------------------------------------ training

    def train_step(self, epoch: int) -> StepStats:
        """Chunked forward, chunked backward, one gradient all-reduce, one optimizer step."""
        self._rows = self._zero_rows()
        self._peak = 0
        self.xfer.times.reset()

        def forward() -> StepLoss:  # no graph: the backward recomputes chunk by chunk
            total, correct, count = self._forward(epoch, training=True)
            if self.linked is not None:  # pair loss on H^L: fills G^L and the decoder's grads
                return self.linked.loss(epoch)
            return StepLoss(total, None, correct, count)

        def backward(_: StepLoss) -> None:
            if self.linked is not None:
                self.linked.restore()
            self._backward(epoch)
            self.cache.clear()

        stats = run_step(
            self,
            forward,
            backward=backward,
        )
        self._check_budget()
        self._extra = self._epoch_report()
        return stats

    def _epoch_report(self) -> dict[str, Any]:
        vol = self.plan.volumes()
        passes = [self.widths[i] for i in range(self.num_layers)]  # forward loads
        passes += [self.widths[i] for i in range(self.num_layers) if not self.hybrid[i]]
        modelled = sum(self.plan.modelled_seconds(w, self.elem) for w in passes)
        times = self.xfer.times
        return {
            "chunks": self.num_chunks,
            "partition": self.config.partition,
            "reorganized": self.reorganized,
            "cached_layers": [i for i, c in enumerate(self.hybrid) if c],
            "volume_rows": vol.to_dict(),
            "reduction": vol.reductions(),
            "modelled_s": modelled,
            "modelled_bandwidths": dict(HONGTU_BANDWIDTHS),
            "capacity": [int(c) for c in self.plan.capacity],
            "budget_bytes": self.budget,
            "preprocess_s": self.preprocess_s,
            "cacheable_probe_s": self.probe_s,
            "overlap_transfers": self.overlap,
            "pinned": self.xfer.pins,
            "transfer_s": times.transfer_s,
            "transfer_wait_s": times.wait_s,
            "hidden_fraction": times.hidden_fraction,
            "transfers": {"loads": times.loads, "saves": times.saves},
        }

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Accuracy per split and validation loss, or a link task's metrics (collective).

        Both from an eval-mode chunked forward.
        """
        self.module.eval()
        rows, self._rows = self._rows, self._zero_rows()  # the epoch's counts stay the training's
        try:
            self._forward(0, training=False)
        finally:
            self.module.train()
            self._rows = rows
        if self.linked is not None:  # each rank scores the pairs whose source it owns
            return self.linked.evaluate()
        reduce = self.comm.all_reduce_sum if self.world_size > 1 else None
        return split_metrics(self.H[-1].to(self.dtype), self.y, self.masks, reduce)

    # ------------------------------------------------------------------ reports and state
    def epoch_extra(self) -> dict[str, Any]:
        """Plan volumes (HongTu Table 8), Eq. 4 time, chunks and preprocessing of the epoch."""
        return dict(self._extra)

    def rank_extra(self) -> dict[str, Any]:
        """This rank's rows per channel and peak live device bytes (last epoch)."""
        return {"rows": dict(self._rows), "peak_device_bytes": int(self._peak)}

    def peak_memory(self) -> dict[str, int]:
        """Peak live device bytes and this rank's host-resident vertex data."""
        host = sum(t.numel() for t in self.H) + sum(t.numel() for t in self.G if t is not None)
        return {"device": int(self._peak), "host": int(host * self.elem)}

    def close(self) -> None:
        """Release the shared buffers and (rank 0) remove the shared topology files.

        Local, like the buffers' release: removing the files does not disturb another rank
        still mapping them (their pages stay until the last map goes).
        """
        for s in self._shared:
            s.close()
        self._shared = []
        self.cache.clear()
        self._remove_topology()

    def __repr__(self) -> str:
        return (
            f"OffloadEngine(rank={self.rank}/{self.world_size}, chunks={self.num_chunks}, "
            f"nodes={self.hi - self.lo}, hybrid={self.hybrid})"
        )
