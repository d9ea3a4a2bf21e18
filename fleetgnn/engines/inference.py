"""Streaming layer-wise full-neighbour inference: bounded memory, spread over ranks.

One layer at a time over every node (or only the nodes ``select`` needs, see below), in eval mode
(no dropout), each destination with all its in-edges, so the result is the model's exact full-graph
function. Rank ``r`` of ``W`` computes the contiguous destination range
:func:`~fleetgnn.engines.chunks.rank_range` gives it, in chunks cut from the topology's CSC
``indptr`` (a memory map) so that a chunk holds at most ``max_nodes`` destinations and ``max_edges``
in-edges (:class:`~fleetgnn.engines.chunks.Chunking`; a node with more in-edges than that is a chunk
alone): a hub never blows a chunk up.

Each non-final layer's output goes to a ``[N, width]`` ``.npy`` scratch file (``[|S_l|, width]``
with ``select``, below) with its space reserved (:func:`~fleetgnn.graph.files.create_npy`: a full
disk is a one-line :class:`~fleetgnn.errors.DiskFullError` on every rank, never a SIGBUS), in a
temporary directory named after its owner process (:func:`~fleetgnn.graph.files.temp_prefix`, so a
later ``train`` sweeps what a killed process left) inside ``scratch_dir`` (``fleetgnn train``: the
run directory; ``None``: the system's temporary directory), removed at the end, also on errors. Rows
are written with ``pwrite`` and the next layer reads the rows ``h_prev[src_ids]`` of each chunk's
sources with a :class:`~fleetgnn.graph.rows.RowReader`: rows in the page cache are copied through
its mapping and unmapped block by block, others read with coalesced ``preadv`` calls; the files'
pages stay in the page cache and never stay part of the process's resident memory. One process whose
hidden layers are each at most :data:`~fleetgnn.engines.chunks.IN_MEMORY_LAYER_BYTES`
(``Chunking.in_memory_bytes``) keeps them in memory instead: a small graph never touches the disk
(Cora's evaluation would otherwise write and read two scratch files every epoch).

==============  ===========================================  ================================
ranks           scratch file of a layer                      before the next layer reads it
==============  ===========================================  ================================
one host        one file, every rank writes its range        a barrier
several hosts   one file per rank                            the other ranks' ranges are
                                                             all-gathered in blocks of bounded
                                                             rows (never a whole layer)
==============  ===========================================  ================================

The final layer's rows go to a *sink* chunk by chunk (:data:`Sink`):
:class:`~fleetgnn.engines.metric_sums.MetricSums` for evaluation (per-split correct counts and the
validation loss sum, all-reduced at the end: the numbers
:func:`~fleetgnn.engines.common.split_metrics` gives over all nodes at once),
:class:`~fleetgnn.engines.rowfiles.RowWriter` for ``predict``/``embed`` (rows into ``.npy`` files).

With ``select`` (``train.eval_nodes=labelled``) every layer computes only the destinations the
selected nodes need: layer ``l`` of ``L`` (0-based) computes the set ``S_l``, where ``S_{L-1}`` is
``select`` and ``S_l = S_{l+1}`` plus the in-neighbours of ``S_{l+1}`` (the sources of the next
layer's full-neighbour blocks). :func:`~fleetgnn.engines.chunks.needed_sets` builds ``S_{L-2}, ...,
S_0`` before the first layer by streaming over the in-edges of the previous set
(``topology.all_neighbors`` in chunks; ranks split the destinations and OR their masks with bounded
all-reduces), each kept as a :class:`~fleetgnn.engines.chunks.NodeSet` bitmap with per-word prefix
counts (2 bits per node per set; 1 byte per node while a set is built). A hidden layer's scratch
file is then *compact*: ``[|S_l|, width]``, row ``k`` holding the ``k``-th member of ``S_l`` in ID
order (:meth:`~fleetgnn.engines.chunks.NodeSet.position`), so its space, the free-space check and
the bytes written and read are ``|S_l|`` rows, not ``N``, and each chunk (ascending members, none
skipped) is still one contiguous ``pwrite``. (A sparse ``[N, width]`` file instead would allocate
whole file-system blocks, 8 rows of 512 bytes each, around scattered members, rely on the file
system's holes, and need a write per run of consecutive IDs.) The saving is largest when few
nodes are evaluated (a sparsely labelled graph, few layers): with more layers ``S_0`` grows
towards every node and the saving is the middle layers'.

Memory per process: the model, one chunk's block, its source rows (at most ``max_nodes + max_edges``
rows), its output rows and the layer's work on them; with the default chunking
(:data:`~fleetgnn.engines.chunks.DEFAULT_CHUNK_BYTES` of source rows at the layer's wider width)
that is about 6 x 32 MiB whatever ``N`` (measured: 77 MB above the start for a 250k-node, hidden-320
evaluation whose one layer is 320 MB; with ``select``, plus its sets: 2 bits per node each). No
``N``-sized float array is ever held. When the ranks' device reads are collective (the minibatch
engine's two-sided store), every rank runs the same number of chunks per layer (shorter ranges add
empty chunks).

**Typed graphs** (:func:`stream_typed_inference`, for models over
:class:`~fleetgnn.nn.hetero.TypedAggregator` hops such as
:class:`~fleetgnn.nn.hetero.HeteroGNN`) stream the same way, per layer and node type:

- **Which types.** The last layer computes the output types only (the target type for node
  classification, a link relation's two end types for link prediction). Layer ``l`` computes
  the types layer ``l + 1`` reads: its own destinations' types (their rows are its destination
  rows) and the source types of the relations into them (:func:`needed_types`). A type no later
  layer reads (institutions, two hops from the papers) is not computed.
- **Who computes what.** Rank ``r`` takes its range of every computed type's nodes, cut into
  chunks by the in-edges summed over the relations into the type (one ``int64`` prefix sum per
  type, 8 bytes per node); a chunk's hop is every in-edge of its destinations
  (:class:`~fleetgnn.sampling.hetero.HeteroNeighborSampler` with fanout -1).
- **Where rows go.** One scratch file (or in-memory array) per layer and type,
  ``h<l>-<type>.npy``, in the same scratch directory, shared or per rank as in the table above.
  Input rows are read from the typed graph's arrays, never collectively, so ranks need not run
  their chunks in step.

**One driver, two front ends.** A stream is a plan: per layer, the *parts* it computes (one per
node type; a homogeneous graph's layer is one part, of its one type) with their chunk offsets,
output widths, file rows and selection. One driver runs every plan: the chunks of each rank's
ranges, the scratch directory and the per-part row files or arrays, the barrier or all-gathers
between layers, the removal of files no later layer reads, and the sink. The typed stream reuses
this homogeneous core rather than the homogeneous stream being a one-type typed graph, because
what differs is the model's side, not the data's: a homogeneous model takes a tensor and a
:class:`~fleetgnn.sampling.Block`'s aggregator (with edge features), a typed one dicts and a
:class:`~fleetgnn.nn.hetero.TypedAggregator`; and only the homogeneous front end restricts layers
to ``select``'s needed sets and reads its input through a store whose reads may be collective.
Each front end is then what is its own: how a chunk's hop and input rows are built and which
layer runs on them.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetgnn.config.knobs import EVAL_NODES
from fleetgnn.engines.chunks import (
    Chunking,
    NodeSet,
    Select,
    count_chunks,
    in_step,
    iter_chunks,
    labelled_selector,
    needed_sets,
    rank_range,
)
from fleetgnn.engines.collectives import agreed, barrier, max_over_ranks, world_of
from fleetgnn.engines.edges import EdgeRows, block_aggregator
from fleetgnn.engines.metric_sums import MetricSums
from fleetgnn.engines.rowfiles import MemoryRows, RowFile, ScratchDir, make_scratch
from fleetgnn.errors import ConfigError
from fleetgnn.graph import Graph
from fleetgnn.graph.hetero import HeteroGraph, HeteroSchema
from fleetgnn.graph.rows import RowReader
from fleetgnn.nn import LocalAggregator
from fleetgnn.nn.hetero import TypedAggregator
from fleetgnn.sampling import Block, full_neighbor_block
from fleetgnn.sampling.hetero import HeteroBlock, HeteroNeighborSampler

#: A final-layer consumer: ``sink(ids, rows)`` with ``ids`` int64 ``[D]`` ascending global IDs
#: and ``rows`` ``[D, width]`` the layer's output for them (called once per non-empty chunk).
Sink = Callable[[np.ndarray, torch.Tensor], None]
#: ``features(node_type, local_ids) -> [len(ids), F_t]`` input rows on the device.
TypedFeatures = Callable[[str, np.ndarray], torch.Tensor]
#: ``sink(node_type, local_ids, rows)``: the last layer's rows of an output type, chunk by chunk.
TypedSink = Callable[[str, np.ndarray, torch.Tensor], None]


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty(0, dtype=dtype).numpy().dtype


def _empty_block() -> Block:
    z = torch.zeros(0, dtype=torch.int64)
    return Block(
        indptr=torch.zeros(1, dtype=torch.int64),
        indices=z,
        src_ids=z,
        num_dst=0,
        src_degree=torch.zeros(0, dtype=torch.float32),
    )


def layer_widths(
    module: torch.nn.Module,
    in_width: int,
    num_layers: int,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    edges: EdgeRows | None = None,
) -> list[int]:
    """``[in_width, width after layer 1, ..., width after layer num_layers]`` (no data needed).

    Runs each layer on an empty block (eval mode, no gradients), with no edge features of the
    width of ``edges`` for a model that reads them.
    """
    widths = [int(in_width)]
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            attr = None if edges is None else edges.empty()
            agg = LocalAggregator(
                _empty_block().to(device), dtype=dtype, validate=False, edge_attr=attr
            )
            for layer in range(num_layers):
                h = torch.zeros((0, widths[-1]), dtype=dtype, device=device)
                widths.append(int(module.layer_forward(layer, agg, h).shape[1]))
    finally:
        module.train(was_training)
    return widths


@dataclasses.dataclass
class InferenceStats:
    """What one rank's :func:`stream_inference` computed and stored.

    Attributes:
        rows: Destinations this rank computed, per layer.
        layer_rows: Rows of each hidden layer's output (``N``, or ``|S_l|`` with ``select``;
            summed over the computed types on a typed graph).
        scratch_bytes: Bytes of scratch space checked for (0: none, or in memory).
    """

    rows: list[int]
    layer_rows: list[int]
    scratch_bytes: int


# -------------------------------------------------------------------------------- the driver
@dataclasses.dataclass(frozen=True)
class _Part:
    """One node type's destinations in one layer of a stream.

    Attributes:
        key: The node type (``None``: a homogeneous graph's one type); names its scratch file.
        offsets: ``[N_t + 1]`` in-edge prefix sums of the type's nodes (a CSC ``indptr``; a
            memory map is fine), to cut chunks.
        width: Width of the layer's output rows.
        rows: Rows of the layer's output (``N_t``, or ``|S_l|`` with a selection).
        select: The destinations the layer computes (``None``: all).
        position: The output row of each ID of ``[0, N_t]`` (``None``: the ID).
    """

    key: str | None
    offsets: Any
    width: int
    rows: int
    select: Select | None = None
    position: Callable[[np.ndarray], np.ndarray] | None = None

    @property
    def count(self) -> int:
        """``N_t``."""
        return int(len(self.offsets)) - 1

    def row(self, ids: np.ndarray) -> np.ndarray:
        """The output rows of ``ids``."""
        return ids if self.position is None else self.position(ids)

    def file_name(self, layer: int) -> str:
        """The scratch file of this part's rows as layer ``layer`` (0-based) outputs them."""
        return f"h{layer + 1}.npy" if self.key is None else f"h{layer + 1}-{self.key}.npy"


class _Previous:
    """The previous layer's rows of each part it computed, read by ID."""

    def __init__(self, parts: list[_Part], readers: dict[str | None, RowReader]) -> None:
        self._parts = {p.key: p for p in parts}
        self._readers = readers

    def __contains__(self, key: str | None) -> bool:
        return key in self._readers

    def take(self, key: str | None, ids: np.ndarray) -> np.ndarray:
        """Rows of ``ids`` (the part's IDs, a member of its selection each)."""
        return self._readers[key].take(self._parts[key].row(ids))


#: ``compute(layer, part, ids, previous) -> [len(ids), width]``: one chunk of a layer.
_Compute = Callable[[int, _Part, np.ndarray, _Previous], torch.Tensor]


def _run_layers(
    module: torch.nn.Module,
    plan: list[list[_Part]],
    wide: list[int],
    compute: _Compute,
    sink: Callable[[Any, np.ndarray, torch.Tensor], None],
    *,
    comm: Any,
    device: torch.device | str,
    np_dtype: np.dtype,
    chunking: Chunking,
    scratch_dir: str | os.PathLike[str] | None,
    same_host: bool,
    lockstep: bool,
) -> InferenceStats:
    """Run the layers of ``plan`` (per layer, its parts) streaming; the last one into ``sink``.

    ``wide[l]``: the width that sizes layer ``l``'s chunks. ``lockstep``: every rank runs as many
    chunks per part as the rank with the most (collective reads in ``compute``). Collective
    like :func:`stream_inference`; see the module docstring.
    """
    world, rank = world_of(comm)
    layers = len(plan)
    shared = same_host or world == 1
    itemsize = np_dtype.itemsize
    layer_bytes = [sum(p.rows * p.width * itemsize for p in parts) for parts in plan[:-1]]
    in_memory = world == 1 and max(layer_bytes, default=0) <= chunking.in_memory_bytes
    stats = InferenceStats(
        rows=[0] * layers,
        layer_rows=[sum(p.rows for p in parts) for parts in plan[:-1]],
        scratch_bytes=0,
    )
    scratch: ScratchDir | None = None
    readers: dict[str | None, RowReader] = {}
    outs: dict[str | None, RowFile | MemoryRows] = {}
    prev: dict[str | None, Path | np.ndarray] = {}
    was_training = module.training
    module.eval()
    done = False
    try:
        if layers > 1 and not in_memory:
            # two consecutive layers' files live at once; one directory per rank (all of them:
            # the whole layers' rows) when the ranks do not share a host
            need = max(a + b for a, b in zip(layer_bytes, [*layer_bytes[1:], 0], strict=True))
            stats.scratch_bytes = need
            path = agreed(comm, lambda: make_scratch(scratch_dir, need), everywhere=not shared)
            scratch = ScratchDir(path, owner=rank == 0 or not shared)
        for layer, parts in enumerate(plan):
            final = layer == layers - 1
            max_nodes, max_edges = chunking.limits(wide[layer], itemsize)
            outs = {}
            for p in [] if final else parts:
                shape = (p.rows, p.width)
                if in_memory:
                    outs[p.key] = MemoryRows(np_dtype, shape)
                    continue
                assert scratch is not None
                target = scratch.path / p.file_name(layer)
                agreed(
                    comm,
                    lambda t=target, s=shape: RowFile.create(t, np_dtype, s),
                    everywhere=not shared,
                )
                outs[p.key] = RowFile(target)
            readers = {k: RowReader(v) for k, v in prev.items()}
            previous = _Previous(plan[layer - 1] if layer else [], readers)
            for p in parts:
                lo, hi = rank_range(p.count, world, rank)
                chunks = iter_chunks(p.offsets, lo, hi, max_nodes, max_edges, p.select)
                if lockstep:
                    args = (p.offsets, lo, hi, max_nodes, max_edges, p.select)
                    mine = count_chunks(*args) if world > 1 else 0
                    chunks = in_step(chunks, max_over_ranks(comm, mine, device))
                for ids in chunks:
                    out = compute(layer, p, ids, previous)
                    if ids.size == 0:
                        continue
                    stats.rows[layer] += int(ids.size)
                    if final:
                        sink(p.key, ids, out)
                    else:
                        # a chunk is consecutive members of the part's rows: one contiguous write
                        outs[p.key].write(int(p.row(ids[:1])[0]), out.cpu().numpy())
            for r in readers.values():
                r.close()
            readers = {}
            if final:
                break
            if in_memory:
                prev = {k: o.array for k, o in outs.items()}  # type: ignore[union-attr]
                continue
            for p in parts:
                out_file = outs[p.key]
                assert isinstance(out_file, RowFile)
                if not shared:
                    ends = [p.row(np.array(rank_range(p.count, world, r))) for r in range(world)]
                    bounds = [(int(a), int(b)) for a, b in ends]
                    fill_other_ranks(out_file, comm, bounds, chunking, device)
                out_file.close()
            barrier(comm)  # every rank's rows are in the files; every rank is done with prev
            assert scratch is not None
            if scratch.owner:
                for old in prev.values():
                    if isinstance(old, Path):
                        old.unlink(missing_ok=True)
            prev = {k: o.path for k, o in outs.items()}  # type: ignore[union-attr]
        done = True
    finally:
        module.train(was_training)
        for r in readers.values():
            r.close()
        for o in outs.values():
            o.close()
        if scratch is not None:
            scratch.release(comm, wait=done and shared)
    return stats


def fill_other_ranks(
    out: RowFile,
    comm: Any,
    ranges: list[tuple[int, int]],
    chunking: Chunking,
    device: torch.device | str,
) -> None:
    """Copy every other rank's rows of this layer into this rank's file (ranks on several hosts).

    ``ranges[r]`` are rank ``r``'s rows of the file. All-gathers blocks of at most
    ``target_bytes / W`` bytes of rows from each rank, block ``k`` of every range at once,
    through ``comm`` (metered); collective.
    """
    world, rank = world_of(comm)
    width = int(np.prod(out.shape[1:], dtype=np.int64))
    rows_per_block = max(1, chunking.target_bytes // max(1, world * width * out.dtype.itemsize))
    lo, hi = ranges[rank]
    longest = max(b - a for a, b in ranges)
    reader = RowReader(out.path)
    try:
        for k in range(math.ceil(longest / rows_per_block)):
            a = lo + k * rows_per_block
            b = min(hi, a + rows_per_block)
            block = np.zeros((rows_per_block, *out.shape[1:]), dtype=out.dtype)
            if b > a:
                block[: b - a] = reader.slice(a, b)
            parts = comm.all_gather(torch.from_numpy(block).to(device))
            for r, part in enumerate(parts):
                ra = ranges[r][0] + k * rows_per_block
                rb = min(ranges[r][1], ra + rows_per_block)
                if r != rank and rb > ra:
                    out.write(ra, part[: rb - ra].cpu().numpy())
    finally:
        reader.close()


# ------------------------------------------------------------------------ homogeneous graphs
@torch.no_grad()
def stream_inference(
    module: torch.nn.Module,
    topology: Any,
    features: Callable[[torch.Tensor], torch.Tensor],
    indptr: Any,
    sink: Sink,
    *,
    in_width: int,
    comm: Any = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    num_layers: int | None = None,
    select: Select | None = None,
    chunking: Chunking | None = None,
    scratch_dir: str | os.PathLike[str] | None = None,
    same_host: bool = True,
    edges: EdgeRows | None = None,
) -> InferenceStats:
    """Run layers ``1..num_layers`` streaming; the last one into ``sink``.

    Without ``select`` every layer covers every node; with it, each layer only the nodes the
    selected ones need (:func:`needed_sets`, compact scratch files).
    Collective when ``comm`` spans several ranks (every rank calls it with the same arguments
    except ``sink``): barriers between layers, one ``all_reduce`` of the chunk count per layer,
    and across hosts (``same_host=False``) bounded all-gathers of each layer's rows (metered).
    See the module docstring for the files and the memory.

    Args:
        module: The layer-wise model (unwrapped); run in eval mode, its flag restored.
        topology: A sampler topology source (``GraphTopology`` or a store).
        features: ``ids -> [len(ids), in_width]`` input rows on ``device``, cast and
            normalised (a store's reads may be collective: called once per chunk of layer 1).
        indptr: The graph's CSC ``indptr`` (a memory map is fine), to cut chunks.
        sink: Consumes the last layer's rows, chunk by chunk (only this rank's).
        in_width: Width of the input rows.
        comm: The communicator (``None``: one process).
        device: Where the computation runs.
        dtype: The model's dtype (also the scratch files').
        num_layers: Layers to run (``None``: all; fewer gives a hidden layer's output).
        select: Destinations of the last layer (``None``: every node); the earlier layers then
            compute only what those need.
        chunking: How ranges are cut (``None``: :class:`Chunking` defaults).
        scratch_dir: Where the scratch directory goes (``None``: the system's temporary one).
        same_host: Every rank runs on this host (one shared scratch file per layer); ``False``:
            one file per rank, filled by all-gathers.
        edges: The graph's edge features by edge ID, for a model that reads them (``None``:
            none; the topology must then name its edges, as a graph's or a store's does).

    Returns:
        This rank's :class:`InferenceStats`.

    Raises:
        ConfigError: ``num_layers`` outside ``[1, module.num_layers]``.
        DiskFullError: Not enough space for the scratch files (on every rank).
    """
    total_layers = int(module.num_layers)
    layers = total_layers if num_layers is None else int(num_layers)
    if not 1 <= layers <= total_layers:
        raise ConfigError(
            f"num_layers={num_layers!r} is outside [1, {total_layers}], the model's layers"
        )
    chunking = chunking or Chunking()
    num_nodes = int(len(indptr)) - 1
    widths = layer_widths(module, in_width, layers, device=device, dtype=dtype, edges=edges)
    sets: list[NodeSet] = []
    if select is not None:
        sets = needed_sets(
            topology, indptr, select, layers, comm=comm, device=device, chunking=chunking
        )
    plan = []  # one part per layer
    for layer in range(layers):
        if sets and layer < layers - 1:  # the needed set S_l: a compact file
            s = sets[layer]
            part = _Part(None, indptr, widths[layer + 1], s.size, s.select, s.position)
        else:  # every node, or the selection at the last layer
            last = select if layer == layers - 1 else None
            part = _Part(None, indptr, widths[layer + 1], num_nodes, last)
        plan.append([part])

    def compute(layer: int, part: _Part, ids: np.ndarray, previous: _Previous) -> torch.Tensor:
        block = full_neighbor_block(
            topology, torch.from_numpy(ids), with_edge_ids=edges is not None
        )
        if layer == 0:
            src = features(block.src_ids)
        else:
            src = torch.from_numpy(previous.take(None, block.src_ids.cpu().numpy())).to(device)
        agg = block_aggregator(block, dtype, device, edges)
        return module.layer_forward(layer, agg, src.to(device=device, dtype=dtype))  # type: ignore[no-any-return]

    return _run_layers(
        module,
        plan,
        [max(widths[layer : layer + 2]) for layer in range(layers)],
        compute,
        lambda _, ids, rows: sink(ids, rows),
        comm=comm,
        device=device,
        np_dtype=_np_dtype(dtype),
        chunking=chunking,
        scratch_dir=scratch_dir,
        same_host=same_host,
        lockstep=True,
    )


# ---------------------------------------------------------------------------------- evaluation
def streaming_metrics(
    module: torch.nn.Module,
    graph: Graph,
    topology: Any,
    features: Callable[[torch.Tensor], torch.Tensor],
    *,
    comm: Any = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    eval_nodes: str = "all",
    chunking: Chunking | None = None,
    scratch_dir: str | os.PathLike[str] | None = None,
    same_host: bool = True,
    edges: EdgeRows | None = None,
) -> dict[str, float]:
    """Accuracy per split and mean validation loss by streaming layer-wise inference.

    The numbers :func:`~fleetgnn.engines.common.split_metrics` gives on the logits of every node
    (summed over ranks, then divided). Collective with ``comm``; see :func:`stream_inference`.

    Args:
        module: The layer-wise model (unwrapped).
        graph: The dataset (``indptr``, labels and masks; memory maps are fine).
        topology: A sampler topology source over ``graph``.
        features: ``ids -> [len(ids), F]`` input rows on ``device``, cast and normalised.
        comm: The communicator (``None``: one process).
        device: Where the computation runs.
        dtype: The model's dtype.
        eval_nodes: ``"all"`` or ``"labelled"`` (the last layer only for masked nodes).
        chunking: How ranges are cut into chunks.
        scratch_dir: Where the scratch files go.
        same_host: Every rank runs on this host.
        edges: Where a model that reads edge features gets them (an engine's store-backed
            :class:`EdgeRows`; its reads are collective when two-sided); ``None``:
            ``graph.edge_attr`` directly when the model reads them.

    Raises:
        ConfigError: An unknown ``eval_nodes``.
    """
    if eval_nodes not in EVAL_NODES:
        raise ConfigError(
            f"train.eval_nodes={eval_nodes!r} is not an allowed value; choose one of: "
            f"{', '.join(EVAL_NODES)}"
        )
    sums = MetricSums(graph, device)
    stream_inference(
        module,
        topology,
        features,
        graph.indptr,
        sums,
        in_width=int(graph.num_features),
        comm=comm,
        device=device,
        dtype=dtype,
        select=labelled_selector(graph) if eval_nodes == "labelled" else None,
        chunking=chunking,
        scratch_dir=scratch_dir,
        same_host=same_host,
        edges=edges if edges is not None else EdgeRows.of(module, graph, dtype, device),
    )
    return sums.result(comm)


# ------------------------------------------------------------------------------ typed graphs
def _empty_typed_block(schema: HeteroSchema) -> HeteroBlock:
    none = torch.zeros(0, dtype=torch.int64)
    return HeteroBlock(
        schema,
        {t: none for t in schema.node_types},
        {t: 0 for t in schema.node_types},
        {r: (torch.zeros(1, dtype=torch.int64), none) for r in schema.relations},
    )


def typed_layer_widths(
    module: torch.nn.Module,
    graph: HeteroGraph,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> list[dict[str, int]]:
    """Per layer, the width of each node type it outputs (no data needed: an empty hop)."""
    s = graph.schema
    agg = TypedAggregator(_empty_typed_block(s).to(device), dtype=dtype)
    h: dict[str, torch.Tensor] = {
        t: torch.zeros((0, int(w)), dtype=dtype, device=device)
        for t in s.node_types
        if (w := graph.feature_width(t)) is not None
    }
    widths = []
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            for layer in range(int(module.num_layers)):
                h = module.layer_forward(layer, agg, h)
                widths.append({t: int(v.shape[1]) for t, v in h.items()})
    finally:
        module.train(was_training)
    return widths


def needed_types(
    schema: HeteroSchema, produced: list[dict[str, int]], outputs: Sequence[str]
) -> list[list[str]]:
    """Per layer, the node types it computes: ``outputs`` at the last, what the next one reads.

    Layer ``l + 1`` reads its destination types' own rows and the source types of the relations
    into them; ``produced[l]`` (:func:`typed_layer_widths`) limits layer ``l`` to what it can
    output. Schema order.
    """
    need = [[t for t in schema.node_types if t in outputs]]
    for layer in range(len(produced) - 2, -1, -1):
        after = set(need[0])
        reads = after | {s for s, _, d in schema.relations if d in after}
        need.insert(0, [t for t in schema.node_types if t in reads and t in produced[layer]])
    return need


def _in_degree_offsets(graph: HeteroGraph, ntype: str) -> np.ndarray:
    """``[N_t + 1]`` prefix sums of every node's in-edges over the relations into ``ntype``."""
    out = np.zeros(graph.schema.count(ntype) + 1, dtype=np.int64)
    for rel in graph.schema.relations:
        if rel[2] == ntype:
            out += np.asarray(graph.csc[rel][0], dtype=np.int64)
    return out


def _input_rows(
    graph: HeteroGraph,
    block: HeteroBlock,
    layer: int,
    features: TypedFeatures,
    previous: _Previous,
    device: torch.device | str,
) -> dict[str, torch.Tensor]:
    """A chunk's input rows per type.

    Layer 0: the featured types' features (a featureless type has none; the model embeds it).
    Later layers: the previous layer's rows of the types it computed.
    """
    s = graph.schema
    out = {}
    for t in s.node_types:
        local = block.src_ids[t].numpy() - s.type_range(t)[0]
        if layer == 0:
            if graph.feature_width(t) is not None:
                out[t] = features(t, local)
        elif t in previous:
            out[t] = torch.from_numpy(previous.take(t, local)).to(device)
    return out


@torch.no_grad()
def stream_typed_inference(
    module: torch.nn.Module,
    graph: HeteroGraph,
    features: TypedFeatures,
    sink: TypedSink,
    *,
    outputs: Sequence[str] | None = None,
    comm: Any = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    chunking: Chunking | None = None,
    scratch_dir: str | os.PathLike[str] | None = None,
    same_host: bool = True,
) -> list[int]:
    """Run every layer of a typed model streaming; the output types' last rows go to ``sink``.

    Collective when ``comm`` spans several ranks (every rank calls it with the same arguments
    except ``sink``): barriers between layers and, across hosts (``same_host=False``), bounded
    all-gathers of each hidden layer's rows. See the module docstring.

    Args:
        module: The typed layer-wise model (unwrapped); run in eval mode, its flag restored.
        graph: The typed graph (CSCs, memory maps are fine).
        features: Input rows of the featured types (cast and normalised, on ``device``).
        sink: Consumes the output types' rows (type-local IDs, ascending), this rank's only.
        outputs: The node types of the last layer (``None``: the schema's target).
        comm: The communicator (``None``: one process).
        device: Where the computation runs.
        dtype: The model's dtype (also the scratch files').
        chunking: How ranges are cut (``None``: :class:`Chunking` defaults).
        scratch_dir: Where the scratch directory goes (``None``: the system's temporary one).
        same_host: Every rank runs on this host (one shared file per layer and type).

    Returns:
        Destinations this rank computed, per layer.

    Raises:
        ConfigError: An output type the model's last layer gives no rows of.
        DiskFullError: Not enough space for the scratch files (on every rank).
    """
    s = graph.schema
    produced = typed_layer_widths(module, graph, device=device, dtype=dtype)
    layers = len(produced)
    outputs = [s.target] if outputs is None else list(outputs)
    missing = [t for t in outputs if t not in produced[-1]]
    if missing:
        raise ConfigError(
            f"the model's last layer gives no rows of node type(s) {missing}: no relation "
            f"reaches them; add reverse relations (fleetgnn prepare --add-reverse)"
        )
    need = needed_types(s, produced, outputs)
    degrees = {t: _in_degree_offsets(graph, t) for t in s.node_types if any(t in n for n in need)}
    plan = [
        [_Part(t, degrees[t], produced[layer][t], s.count(t)) for t in need[layer]]
        for layer in range(layers)
    ]
    in_width = max((graph.feature_width(t) or 0) for t in s.node_types)
    wide = [
        max([in_width, *produced[layer].values(), *(produced[layer - 1].values() if layer else ())])
        for layer in range(layers)
    ]
    off = {t: s.type_range(t)[0] for t in s.node_types}
    sampler = HeteroNeighborSampler(graph, [-1])

    def compute(layer: int, part: _Part, ids: np.ndarray, previous: _Previous) -> torch.Tensor:
        assert part.key is not None
        (block,) = sampler.sample_from_nodes(
            {part.key: torch.from_numpy(ids + off[part.key])}
        ).blocks
        h = _input_rows(graph, block, layer, features, previous, device)
        agg = TypedAggregator(block.to(device), dtype=dtype)
        return module.layer_forward(layer, agg, h)[part.key][: ids.size]  # type: ignore[no-any-return]

    stats = _run_layers(
        module,
        plan,
        wide,
        compute,
        sink,
        comm=comm,
        device=device,
        np_dtype=_np_dtype(dtype),
        chunking=chunking or Chunking(),
        scratch_dir=scratch_dir,
        same_host=same_host,
        lockstep=False,
    )
    return stats.rows
