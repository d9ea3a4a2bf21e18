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
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
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
from fleetgnn.graph.rows import RowReader
from fleetgnn.nn import LocalAggregator
from fleetgnn.sampling import Block, full_neighbor_block

#: A final-layer consumer: ``sink(ids, rows)`` with ``ids`` int64 ``[D]`` ascending global IDs
#: and ``rows`` ``[D, width]`` the layer's output for them (called once per non-empty chunk).
Sink = Callable[[np.ndarray, torch.Tensor], None]


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
        layer_rows: Rows of each hidden layer's output (``N``, or ``|S_l|`` with ``select``).
        scratch_bytes: Bytes of scratch space checked for (0: none, or in memory).
    """

    rows: list[int]
    layer_rows: list[int]
    scratch_bytes: int


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
    world, rank = world_of(comm)
    num_nodes = int(len(indptr)) - 1
    lo, hi = rank_range(num_nodes, world, rank)
    np_dtype = _np_dtype(dtype)
    itemsize = np_dtype.itemsize
    widths = layer_widths(module, in_width, layers, device=device, dtype=dtype, edges=edges)
    shared = same_host or world == 1
    sets: list[NodeSet] = []
    if select is not None:
        sets = needed_sets(
            topology, indptr, select, layers, comm=comm, device=device, chunking=chunking
        )
    # rows of each hidden layer's output (its file); layer l's destinations
    layer_rows = [s.size for s in sets] if sets else [num_nodes] * (layers - 1)
    dests: list[Select | None] = [s.select for s in sets] if sets else [None] * (layers - 1)
    dests.append(select)
    layer_bytes = [r * w * itemsize for r, w in zip(layer_rows, widths[1:layers], strict=False)]
    in_memory = world == 1 and max(layer_bytes, default=0) <= chunking.in_memory_bytes
    stats = InferenceStats(rows=[0] * layers, layer_rows=list(layer_rows), scratch_bytes=0)
    scratch: ScratchDir | None = None
    readers: list[RowReader] = []
    writers: list[RowFile] = []
    was_training = module.training
    module.eval()
    done = False
    try:
        if layers > 1 and not in_memory:
            # two consecutive layer files live at once; one per rank (all of them: the whole
            # layer's rows) when the ranks do not share a host
            need = max(a + b for a, b in zip(layer_bytes, [*layer_bytes[1:], 0], strict=True))
            stats.scratch_bytes = need
            if shared:
                path = agreed(comm, lambda: make_scratch(scratch_dir, need), everywhere=False)
                scratch = ScratchDir(path, owner=rank == 0)
            else:
                path = agreed(comm, lambda: make_scratch(scratch_dir, need), everywhere=True)
                scratch = ScratchDir(path, owner=True)
        prev: Path | np.ndarray | None = None
        for layer in range(layers):
            final = layer == layers - 1
            max_nodes, max_edges = chunking.limits(max(widths[layer : layer + 2]), itemsize)
            sel = dests[layer]
            # rows of this layer's output file / the previous layer's file, by global ID
            out_pos = sets[layer].position if sets and not final else None
            in_pos = sets[layer - 1].position if sets and layer > 0 else None
            mine = count_chunks(indptr, lo, hi, max_nodes, max_edges, sel) if world > 1 else 0
            rounds = max_over_ranks(comm, mine, device)
            out_file: RowFile | MemoryRows | None = None
            if not final and in_memory:
                out_file = MemoryRows(np_dtype, (layer_rows[layer], widths[layer + 1]))
            elif not final:
                assert scratch is not None
                target = scratch.path / f"h{layer + 1}.npy"
                shape = (layer_rows[layer], widths[layer + 1])
                agreed(
                    comm,
                    lambda t=target, s=shape: RowFile.create(t, np_dtype, s),
                    everywhere=not shared,
                )
                out_file = RowFile(target)
                writers.append(out_file)
            reader = RowReader(prev) if prev is not None else None
            if reader is not None:
                readers.append(reader)
            for ids in in_step(iter_chunks(indptr, lo, hi, max_nodes, max_edges, sel), rounds):
                block = full_neighbor_block(
                    topology, torch.from_numpy(ids), with_edge_ids=edges is not None
                )
                if reader is None:
                    src = features(block.src_ids)
                else:
                    rows = block.src_ids.cpu().numpy()
                    rows = in_pos(rows) if in_pos is not None else rows
                    src = torch.from_numpy(reader.take(rows)).to(device)
                agg = block_aggregator(block, dtype, device, edges)
                out = module.layer_forward(layer, agg, src.to(device=device, dtype=dtype))
                if ids.size == 0:
                    continue
                stats.rows[layer] += int(ids.size)
                if final:
                    sink(ids, out)
                else:
                    # a chunk is consecutive members of the layer's set: one contiguous write
                    start = int(out_pos(ids[:1])[0]) if out_pos is not None else int(ids[0])
                    assert out_file is not None
                    out_file.write(start, out.cpu().numpy())
            if final:
                break
            if isinstance(out_file, MemoryRows):
                if reader is not None:
                    reader.close()
                    readers.remove(reader)
                prev = out_file.array
                continue
            assert out_file is not None and scratch is not None
            if not shared:
                bounds = [rank_range(num_nodes, world, r) for r in range(world)]
                if out_pos is not None:
                    bounds = [(int(out_pos([a])[0]), int(out_pos([b])[0])) for a, b in bounds]
                fill_other_ranks(out_file, comm, bounds, chunking, device)
            out_file.close()
            barrier(comm)  # every rank's rows are in the file; every rank is done with prev
            if reader is not None:
                reader.close()
                readers.remove(reader)
            if isinstance(prev, Path) and scratch.owner:
                prev.unlink(missing_ok=True)
            prev = out_file.path
        done = True
    finally:
        module.train(was_training)
        for r in readers:
            r.close()
        for w in writers:
            w.close()
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
