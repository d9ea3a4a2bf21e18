"""Streaming layer-wise inference on typed graphs: bounded memory, spread over ranks.

The typed counterpart of :mod:`fleetgnn.engines.inference`, for models over
:class:`~fleetgnn.nn.hetero.TypedAggregator` hops (:class:`~fleetgnn.nn.hetero.HeteroGNN`).
One layer at a time, in eval mode, each destination with all its in-edges of every relation, so
the result is the model's full-graph function; the last layer computes the output types only (the
target type for node classification, a link relation's two end types for link prediction) and
hands their rows to a sink chunk by chunk (:class:`~fleetgnn.engines.metric_sums.MetricSums` for
evaluation).

Per layer and node type:

- **Which types.** Layer ``L - 1`` computes the output types. Layer ``l`` computes the types
  layer ``l + 1`` reads: its own destinations' types (their rows are its destination rows) and
  the source types of the relations into them (:func:`needed_types`). A type no later layer
  reads (institutions, two hops from the papers) is not computed.
- **Who computes what.** Rank ``r`` of ``W`` takes the contiguous range
  :func:`~fleetgnn.engines.chunks.rank_range` gives it of every type's nodes, cut into chunks of
  at most ``max_nodes`` destinations and ``max_edges`` in-edges summed over the relations into
  the type (:func:`~fleetgnn.engines.chunks.iter_chunks`); a chunk's hop is every in-edge of its
  destinations (:class:`~fleetgnn.sampling.hetero.HeteroNeighborSampler` with fanout -1).
- **Where rows go.** A hidden layer's rows of type ``t`` go to a ``[N_t, width]`` ``.npy``
  scratch file per type (space reserved; :class:`~fleetgnn.engines.rowfiles.RowFile`), in a
  scratch directory like the homogeneous one's: shared by the ranks of one host (a barrier
  between layers), one per rank across hosts (the other ranks' ranges all-gathered in bounded
  blocks). The next layer reads each chunk's source rows through a
  :class:`~fleetgnn.graph.rows.RowReader`. One process whose hidden layers are each at most
  ``Chunking.in_memory_bytes`` keeps them in memory.

Memory per process: the model, one chunk's hop and rows and, per type, one ``int64`` in-degree
prefix sum (8 bytes per node), never a layer's ``[N, width]`` rows nor the whole graph's features
(the whole-graph forward this replaces held both, on every rank).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetgnn.engines.chunks import Chunking, iter_chunks, rank_range
from fleetgnn.engines.collectives import agreed, barrier, world_of
from fleetgnn.engines.inference import fill_other_ranks
from fleetgnn.engines.rowfiles import MemoryRows, RowFile, ScratchDir, make_scratch
from fleetgnn.errors import ConfigError
from fleetgnn.graph.hetero import HeteroGraph, HeteroSchema
from fleetgnn.graph.rows import RowReader
from fleetgnn.nn.hetero import TypedAggregator
from fleetgnn.sampling.hetero import HeteroBlock, HeteroNeighborSampler

#: ``features(node_type, local_ids) -> [len(ids), F_t]`` input rows on the device.
TypedFeatures = Callable[[str, np.ndarray], torch.Tensor]
#: ``sink(node_type, local_ids, rows)``: the last layer's rows of an output type, chunk by chunk.
TypedSink = Callable[[str, np.ndarray, torch.Tensor], None]


def _empty_block(schema: HeteroSchema) -> HeteroBlock:
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
    agg = TypedAggregator(_empty_block(s).to(device), dtype=dtype)
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
    readers: dict[str, RowReader],
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
        elif t in readers:
            out[t] = torch.from_numpy(readers[t].take(local)).to(device)
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
    scratch_dir: str | Path | None = None,
    same_host: bool = True,
) -> list[int]:
    """Run every layer streaming; the output types' last-layer rows go to ``sink``.

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
    chunking = chunking or Chunking()
    world, rank = world_of(comm)
    shared = same_host or world == 1
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
    itemsize = np_dtype.itemsize
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
    off = {t: s.type_range(t)[0] for t in s.node_types}
    in_width = max((graph.feature_width(t) or 0) for t in s.node_types)
    layer_bytes = [
        sum(s.count(t) * produced[i][t] * itemsize for t in need[i]) for i in range(layers - 1)
    ]
    in_memory = world == 1 and max(layer_bytes, default=0) <= chunking.in_memory_bytes
    sampler = HeteroNeighborSampler(graph, [-1])
    degrees: dict[str, np.ndarray] = {}
    rows_done = [0] * layers
    scratch: ScratchDir | None = None
    readers: dict[str, RowReader] = {}
    prev: dict[str, Path | np.ndarray] = {}
    was_training = module.training
    module.eval()
    done = False
    try:
        if layers > 1 and not in_memory:
            pairs = zip(layer_bytes, [*layer_bytes[1:], 0], strict=True)
            need_bytes = max(a + b for a, b in pairs)
            path = agreed(
                comm, lambda: make_scratch(scratch_dir, need_bytes), everywhere=not shared
            )
            scratch = ScratchDir(path, owner=rank == 0 or not shared)
        for layer in range(layers):
            final = layer == layers - 1
            widths = produced[layer]
            wide = max(
                [in_width, *widths.values(), *(produced[layer - 1].values() if layer else ())]
            )
            max_nodes, max_edges = chunking.limits(wide, itemsize)
            outs: dict[str, RowFile | MemoryRows] = {}
            for t in [] if final else need[layer]:
                shape = (s.count(t), widths[t])
                if in_memory:
                    outs[t] = MemoryRows(np_dtype, shape)
                else:
                    assert scratch is not None
                    target = scratch.path / f"h{layer + 1}-{t}.npy"
                    agreed(
                        comm,
                        lambda p=target, sh=shape: RowFile.create(p, np_dtype, sh),
                        everywhere=not shared,
                    )
                    outs[t] = RowFile(target)
            readers = {t: RowReader(p) for t, p in prev.items()} if prev else {}

            for d in need[layer]:
                if d not in degrees:
                    degrees[d] = _in_degree_offsets(graph, d)
                lo, hi = rank_range(s.count(d), world, rank)
                for ids in iter_chunks(degrees[d], lo, hi, max_nodes, max_edges):
                    (block,) = sampler.sample({d: torch.from_numpy(ids + off[d])})
                    h = _input_rows(graph, block, layer, features, readers, device)
                    agg = TypedAggregator(block.to(device), dtype=dtype)
                    out = module.layer_forward(layer, agg, h)
                    rows = out[d][: ids.size]
                    rows_done[layer] += int(ids.size)
                    if final:
                        sink(d, ids, rows)
                    else:
                        outs[d].write(int(ids[0]), rows.cpu().numpy())
            for r in readers.values():
                r.close()
            readers = {}
            if final:
                break
            if in_memory:
                prev = {t: o.array for t, o in outs.items()}  # type: ignore[union-attr]
                continue
            for t, o in outs.items():
                assert isinstance(o, RowFile)
                if not shared:
                    ranges = [rank_range(s.count(t), world, r) for r in range(world)]
                    fill_other_ranks(o, comm, ranges, chunking, device)
                o.close()
            barrier(comm)  # every rank's rows are written; nobody reads the previous layer
            assert scratch is not None
            if scratch.owner:
                for p in prev.values():
                    if isinstance(p, Path):
                        p.unlink(missing_ok=True)
            prev = {t: o.path for t, o in outs.items()}  # type: ignore[union-attr]
        done = True
    finally:
        module.train(was_training)
        for r in readers.values():
            r.close()
        if scratch is not None:
            scratch.release(comm, wait=done and shared)
    return rows_done
