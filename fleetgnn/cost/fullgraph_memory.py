"""What the full-graph engines hold per rank, counted from the partition and the model's shape.

The ``fullgraph`` engine's ``peak_memory()["device"]`` is the largest, over step ends, of the
bytes of every tensor and array of the rank's state (its ``held_bytes()`` parts): the owned
node data, the :class:`~fleetgnn.exchange.ExchangeLayout` (int32 IDs and positions while
``N < 2**31``) and the send lists, the halo plans, the aggregators' index structures (each piece's
CSR, and after the first backward pass the transposed pieces and their destination indices),
the parameters, their gradients and the optimizer's state (:func:`fullgraph_parts`).
Activations live only during a step and are not part of it; the prediction's ``workspace``
counts them: the step's transient peak above the held state (saved activations, gradients in
flight), profiled on small probe graphs of the model itself (:func:`step_peak`), plus what the
engine's aggregator saves beyond a local one (:func:`step_peak_bytes`). Autograd's saved bytes
alone (:func:`step_saved_bytes`, from :func:`~fleetgnn.cost.offload_memory.layer_memory`'s
probes) stand in where the profiler cannot run.

The ``reference`` engine reports no ``peak_memory()``; :func:`reference_parts` counts the same
parts for its whole-graph state (features, labels, masks, the training IDs, the full-graph
aggregator, the model and optimizer), what a ``held_bytes()`` walk of the engine measures.

Every count is exact when the dataset is given (:func:`rank_counts` builds each rank's layout
as the engine does) and modelled from ``N``, ``E`` and uniform sources otherwise. The model is
rebuilt from its shape with :func:`~fleetgnn.nn.build_model`'s other defaults (GAT's attention
dropout decides whether the edges' global IDs are cached); the optimizer is Adam, the engines'
default.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from fleetgnn.cost.offload_memory import layer_memory, probe_model
from fleetgnn.graph import Graph
from fleetgnn.nn.gat_conv import GATConv
from fleetgnn.ops.adjacency import block_rows

#: Bytes of an int64 index (the aggregators' structures, labels, training IDs, send lists).
_I64 = 8
_INT32_MAX = 2**31 - 1
#: Split masks a dataset known only by its counts is assumed to have (train, val, test).
_MASKS = 3


@dataclasses.dataclass(frozen=True)
class RankCounts:
    """One rank's share of the graph in the ``fullgraph`` engine's layout.

    Attributes:
        owned: ``M``: owned nodes (destinations and local rows).
        edges: ``E``: in-edges of the owned nodes.
        local_edges: Of them, edges whose source is owned here.
        halo: ``H``: unique remote sources.
        send: Rows this rank sends per exchange (the other ranks' halo rows it owns).
        train: Owned training nodes.
    """

    owned: float
    edges: float
    local_edges: float
    halo: float
    send: float
    train: float

    @property
    def remote_edges(self) -> float:
        """Edges whose source is owned elsewhere."""
        return self.edges - self.local_edges


def rank_counts(
    graph: Graph, world: int, partition: str = "range", seed: int = 0
) -> list[RankCounts]:
    """Every rank's :class:`RankCounts`, from the layouts the engine builds (exact)."""
    from fleetgnn.exchange import build_exchange_layout, range_owner
    from fleetgnn.partition import contiguous_partition

    book, g = contiguous_partition(graph, partition, world, seed)
    offsets = np.asarray(book.offsets, dtype=np.int64)
    indptr = np.asarray(g.indptr, dtype=np.int64)
    owner = range_owner(offsets)
    train = np.zeros(g.num_nodes + 1, dtype=np.int64)
    if g.train_mask is not None:
        np.cumsum(np.asarray(g.train_mask, dtype=bool), out=train[1:])
    layouts = []
    for r in range(world):
        lo, hi = int(offsets[r]), int(offsets[r + 1])
        layouts.append(
            build_exchange_layout(
                np.arange(lo, hi, dtype=np.int64),
                indptr[lo : hi + 1] - indptr[lo],
                np.asarray(g.indices[indptr[lo] : indptr[hi]], dtype=np.int64),
                owner,
                rank=r,
                world_size=world,
            )
        )
    need = np.array([lay.need_counts for lay in layouts], dtype=np.int64)  # [requester, owner]
    return [
        RankCounts(
            owned=lay.num_dst,
            edges=lay.num_edges,
            local_edges=lay.num_local_edges,
            halo=lay.num_halo,
            send=int(need[:, r].sum()),
            train=int(train[offsets[r + 1]] - train[offsets[r]]),
        )
        for r, lay in enumerate(layouts)
    ]


def modelled_counts(num_nodes: int, num_edges: int, num_train: int, world: int) -> RankCounts:
    """One rank's counts for a graph known by its counts: equal ranges, uniform sources."""
    n, e = float(num_nodes), float(num_edges)
    remote = e / world * (1 - 1 / world)
    population = n * (1 - 1 / world)
    halo = population * (1.0 - np.exp(-remote / population)) if population > 0 else 0.0
    return RankCounts(n / world, e / world, e / world - remote, halo, halo, num_train / world)


@functools.lru_cache(maxsize=64)
def _model_facts(model: Any) -> tuple[int, bool, bool]:
    """``(parameter tensors, any GAT layer, attention dropout)`` of the model of this shape."""
    net = probe_model(model, torch.float64 if model.elem == 8 else torch.float32)
    gat = [c for c in net.convs if isinstance(c, GATConv)]
    return (
        sum(1 for _ in net.parameters()),
        bool(gat),
        any(c.attn_dropout > 0 for c in gat),
    )


def model_step_bytes(model: Any) -> int:
    """Adam's step counters: one float32 scalar per parameter tensor (kept on the CPU)."""
    tensors, _, _ = _model_facts(model)
    return 4 * tensors


def model_state_bytes(model: Any) -> int:
    """Parameters, gradients and Adam's two moments, plus its step counters."""
    return 4 * model.params * model.elem + model_step_bytes(model)


def _aggregator_bytes(model: Any, c: RankCounts, chunks: int) -> float:
    """One ``HaloAggregator`` (its ``HaloSpmm``) after a training step, beyond layout and plan.

    The combined structure (``indptr``, ``E`` int64 sources), the local piece and ``K`` chunk
    pieces (each an ``M + 1`` ``indptr``, its edges' sources and edge IDs), the owned rows' IDs
    and degrees; where the backward pass sends gradients through an aggregation, every piece's
    transpose (``indptr`` over its sources, destinations and permutation per edge, and the
    piece's cached destination index and in-degrees); GAT: the combined structure's destination
    index and in-degrees, and with attention dropout the edges' global IDs. A model that reduces
    per-edge messages (GINE) keeps the combined structure's destination index and in-degrees
    instead of the transposes.
    """
    m, e, loc, rem, h, k = c.owned, c.edges, c.local_edges, c.remote_edges, c.halo, chunks
    _, gat, attn_dropout = _model_facts(model)
    n = _I64 * ((m + 1) + e)  # the combined structure
    n += _I64 * ((m + 1) + 2 * loc)  # the local piece and its edge IDs
    n += _I64 * (k * (m + 1) + 2 * rem)  # the chunk pieces and their edge IDs
    n += _I64 * m + model.elem * m  # owned rows' global IDs, their degrees
    if model.edge_dim:  # per-edge messages (GINE): reduced over the combined structure's
        # destination index and in-degrees, never through the pieces' sparse products
        return n + _I64 * (e + m)
    if any(model.grad_through_agg):  # the transposed pieces of the pipelined backward
        n += _I64 * ((m + 1) + 3 * loc + m)  # local: t_indptr, t_indices, perm, dst, in_deg
        n += _I64 * ((h + k) + 3 * rem + k * m)  # chunks: the same, over the chunk rows
    if gat:
        n += _I64 * (e + m)  # dst_index and in_degree of the combined structure
        if attn_dropout:
            n += 2 * _I64 * e  # the edges' (src, dst) global IDs
    return n


def fullgraph_parts(
    model: Any,
    c: RankCounts,
    *,
    num_nodes: int,
    num_features: int,
    world: int,
    partition: str = "range",
    chunks: tuple[int, ...] = (1,),
    masks: int = _MASKS,
) -> dict[str, float]:
    """The ``fullgraph`` engine's ``held_bytes()`` parts of one rank after a training step.

    A model that reads edge features (``model.edge_dim``) adds the ``[E, D]`` rows of the
    owned nodes' in-edges at the compute width to ``aggregators`` (the tensor they serve).

    Args:
        model: The :class:`~fleetgnn.cost.models.ModelShape`.
        c: The rank's counts.
        num_nodes: ``N`` (the ID width, and METIS's ``N`` original IDs).
        num_features: ``F``.
        world: Ranks.
        partition: ``range`` (identity numbering) or ``metis`` (the original IDs are kept).
        chunks: ``K`` of each aggregator held (two while the tuner searches).
        masks: Split masks the dataset has.
    """
    m, e, h = c.owned, c.edges, c.halo
    narrow = 4 if num_nodes <= _INT32_MAX else _I64
    degree = 4 if e <= _INT32_MAX else _I64
    features = m * num_features * model.elem + _I64 * m + masks * m + _I64 * c.train
    if partition != "range":
        features += narrow * num_nodes  # orig_ids (METIS's permutation)
    layout = (
        narrow * (2 * m + 3 * e + 2 * h)  # dst/row IDs, src, src_row, halo_pos, halo, owner
        + e  # is_local
        + _I64 * (m + 1)  # indptr
        + _I64 * (2 * world + 1)  # need_counts, bounds
        + degree * m  # in_degree
        + _I64 * (c.send + world)  # the send lists
    )
    plans = sum(_I64 * (c.send + h + k + 1) for k in chunks)
    aggregators = sum(_aggregator_bytes(model, c, k) for k in chunks)
    # the owned nodes' in-edge rows (a model that reads edge features), read back at the
    # compute width, one tensor every aggregator shares
    aggregators += model.elem * model.edge_dim * e
    return {
        "features": features,
        "layout": layout,
        "plans": plans,
        "aggregators": aggregators,
        "model": model_state_bytes(model),
    }


def column_block_bytes(num_nodes: int, num_edges: int, elem: int) -> float:
    """What a whole-graph structure's cached column blocks hold on CPU (0 when not cut).

    Both directions (the product and, after a backward pass, its transpose), each: int32
    offsets per block, int32 columns and edge IDs (int64 from 2^31 edges); see
    :meth:`~fleetgnn.ops.adjacency.Structure.column_blocks`.
    """
    per = block_rows(elem)
    if num_nodes <= per * 3 // 2 or num_edges == 0:
        return 0.0
    blocks = -(-num_nodes // per)
    sel = 4 if num_edges < 2**31 else _I64
    return float(2 * (4 * blocks * (num_nodes + 1) + (4 + sel) * num_edges))


def reference_parts(
    model: Any,
    num_nodes: int,
    num_edges: int,
    num_features: int,
    num_train: int,
    masks: int,
    *,
    cpu: bool = True,
) -> dict[str, float]:
    """The ``reference`` engine's state in full mode (the same parts as ``fullgraph``'s).

    Features ``[N, F]``, int64 labels, the masks, the int64 training IDs; the full-graph
    ``LocalAggregator``: int64 ``indptr``, sources and source IDs, the source degrees, GCN's
    destination degrees and its normalised matrix's values both ways, after the backward pass
    the structure's transpose with its cached destination index and in-degrees (as in
    :func:`_aggregator_bytes`), on CPU the column blocks (:func:`column_block_bytes`), GAT's
    cached edge IDs where it drops attention; the model and Adam's state. A model that reduces
    per-edge messages over edge features (GINE) holds, beside the structure, its destination
    index and in-degrees and the ``[E, D]`` edge rows at the compute width (no sparse product:
    no transposes, no column blocks).
    """
    n, e = num_nodes, num_edges
    _, _, attn_dropout = _model_facts(model)
    features = n * num_features * model.elem + _I64 * n + masks * n + _I64 * num_train
    agg = _I64 * ((n + 1) + e + n) + model.elem * n
    if model.edge_dim:  # per-edge messages (GINE): a destination index and in-degrees, and
        # the edge rows read back at the compute width; no sparse product, no transposes
        return {
            "features": features,
            "aggregators": agg + _I64 * (e + n) + model.elem * model.edge_dim * e,
            "model": model_state_bytes(model),
        }
    if model.name == "gcn":
        agg += model.elem * n  # dst_degree, cached in the model's dtype
        agg += model.elem * (2 * e + n)  # ScaledSpMM: values both ways, the self loops'
    if cpu:
        agg += column_block_bytes(n, e, model.elem)
    if any(model.grad_through_agg):  # GAT's attention always: its softmax's index is in here
        agg += _I64 * ((n + 1) + 3 * e + n)
    if attn_dropout:
        agg += 2 * _I64 * e
    return {"features": features, "aggregators": agg, "model": model_state_bytes(model)}


def _halo_saved_bytes(model: Any, c: RankCounts) -> float:
    """What a step saves with the ``fullgraph`` aggregator beyond a ``LocalAggregator``.

    SAGE's mean divides by a clamped copy of the degrees where the aggregate needs a gradient;
    GAT's weighted sums keep the received halo rows (the transformed rows and the ones that
    count each neighbour, ``heads`` wide) and its source gathers the send rows' int64 index.
    """
    _, gat, _ = _model_facts(model)
    extra = 0.0
    for i in range(model.num_layers):
        if model.name == "sage" and model.grad_through_agg[i]:
            extra += c.owned * model.elem
        if gat:
            extra += c.halo * (model.agg_widths[i] + model.heads[i]) * model.elem
    if gat and c.halo:
        extra += _I64 * c.send
    return extra


def _fused(model: Any, reused: bool) -> bool:
    """Whether a reused (whole-graph) aggregator changes what ``model``'s steps allocate.

    Only GCN's layers take another path there (the normalised matrix built once); the others'
    probes are the same either way and share one cached measurement.
    """
    return reused and model.name == "gcn"


def step_saved_bytes(model: Any, c: RankCounts, *, halo: bool = True) -> float:
    """Autograd's saved bytes of one whole-graph training step on a rank of counts ``c``.

    The probe coefficients of every layer (:func:`~fleetgnn.cost.offload_memory.layer_memory`)
    on ``M`` rows and destinations and ``E`` edges (the last layer's loss over the owned
    training nodes); GAT's layers share one aggregator, so its two int64 edge indices (sources
    and destinations of every edge, saved by every layer's probe) are saved once per step.
    ``halo``: the ``fullgraph`` engine's aggregator (:func:`_halo_saved_bytes` on top);
    ``False``: the reference engine's ``LocalAggregator``, the probes' own.
    """
    mem = layer_memory(model, (False,) * model.num_layers, _fused(model, not halo))
    last = model.num_layers - 1
    _, gat, _ = _model_facts(model)
    saved = sum(
        lm.saved(c.owned, c.edges, c.owned, c.train if i == last else 0) for i, lm in enumerate(mem)
    )
    if gat:
        saved -= (model.num_layers - 1) * 2 * _I64 * c.edges
    return saved + (_halo_saved_bytes(model, c) if halo else 0.0)


#: Nodes of the two probe graphs of :func:`step_peak_line` (the second twice the first).
_PEAK_PROBE_NODES = 192


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Send file descriptor 2 to ``/dev/null`` (the profiler's start/stop lines) meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def profiled_peak(fn: Any, device: Any = "cpu") -> int:
    """The largest net bytes ``fn()`` has allocated at any moment on ``device``.

    CPU: the CPU allocator's events, profiled. CUDA: the CUDA allocator's own peak over the call
    (``torch.cuda.max_memory_allocated`` after a reset) less what was allocated before it.

    Raises:
        RuntimeError: If the profiler cannot start (e.g. another one is running).
    """
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        base = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        fn()
        torch.cuda.synchronize(dev)
        return int(torch.cuda.max_memory_allocated(dev) - base)
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [ev for ev in prof.events() if ev.self_cpu_memory_usage != 0]
    events.sort(key=lambda ev: ev.time_range.start)
    now = peak = 0
    for ev in events:
        now += ev.self_cpu_memory_usage
        peak = max(peak, now)
    return peak


def _probe_step_peak(model: Any, nodes: int, edges: int, train: int, reused: bool) -> int:
    """Transient peak bytes of a whole-graph training step (the second) on a probe graph.

    ``reused``: the probe's aggregator caches what a whole-graph one does (the reference
    engine's; GCN's normalised matrix), else it is a plain local aggregator (``fullgraph``'s
    pieces).
    """
    from fleetgnn.nn import LocalAggregator

    dtype = torch.float64 if model.elem == 8 else torch.float32
    gen = torch.Generator().manual_seed(0)
    net = probe_model(model, dtype)
    indptr = torch.from_numpy(np.linspace(0, edges, nodes + 1).round().astype(np.int64))
    adj = dataclasses.make_dataclass("ProbeAdj", ["indptr", "indices", "src_ids", "num_dst"])(
        indptr,
        torch.randint(0, nodes, (edges,), generator=gen),
        torch.arange(nodes, dtype=torch.int64),
        nodes,
    )
    adj.src_degree = (indptr[1:] - indptr[:-1]).to(dtype)
    adj.reused = reused
    attr = torch.zeros(edges, model.edge_dim, dtype=dtype) if model.edge_dim else None
    agg = LocalAggregator(adj, dtype=dtype, validate=False, edge_attr=attr)
    x = torch.randn(nodes, model.widths[0], generator=gen, dtype=dtype)
    idx = torch.arange(train, dtype=torch.int64) * max(nodes // max(train, 1), 1)
    target = torch.randint(0, model.widths[-1], (train,), generator=gen)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)

    def step(epoch: int) -> None:
        # the logits are not held through the backward pass (the engines drop theirs)
        loss = torch.nn.functional.cross_entropy(
            net([agg] * model.num_layers, x, step=epoch).index_select(0, idx),
            target,
            reduction="none",
        ).sum() / max(train, 1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    with torch.random.fork_rng(devices=[]):
        step(0)  # the structures' caches, the gradients and Adam's state, as after epoch 0
        return profiled_peak(lambda: step(1))


@dataclasses.dataclass(frozen=True)
class StepPeak:
    """A training step's transient peak bytes, linear in the counts of a graph near its shape.

    ``peak = const + per_node * M + per_edge * E + per_train * T``.
    """

    const: float
    per_node: float
    per_edge: float
    per_train: float

    def at(self, c: RankCounts) -> float:
        """The peak on a rank of counts ``c``."""
        return (
            self.const
            + self.per_node * c.owned
            + self.per_edge * c.edges
            + (self.per_train * c.train)
        )


def _two_digits(x: float) -> float:
    """``x`` to two significant digits (the probes' shape: nearby graphs share them)."""
    return float(f"{x:.2g}")


@functools.lru_cache(maxsize=64)
def _step_peak(model: Any, edges_per_node: float, train_per_node: float, reused: bool) -> StepPeak:
    m = _PEAK_PROBE_NODES
    e = max(1, round(m * edges_per_node))
    t = min(m, max(1, round(m * train_per_node)))

    def probe(nodes: int, edges: int, train: int) -> int:
        return _probe_step_peak(model, nodes, edges, train, reused)

    p0 = probe(m, e, t)
    twice = probe(2 * m, 2 * e, min(2 * m, 2 * t)) - p0
    per_edge = (probe(m, 2 * e, t) - p0) / e
    per_train = (probe(m, e, min(m, 2 * t)) - p0) / max(min(m, 2 * t) - t, 1)
    per_node = (twice - per_edge * e - per_train * t) / m
    return StepPeak(p0 - twice, per_node, per_edge, per_train)


def step_peak(
    model: Any, edges_per_node: float, train_per_node: float, *, reused: bool = False
) -> StepPeak:
    """The :class:`StepPeak` of ``model`` on graphs of this shape (profiled probes, cached).

    Profiles the second training step (forward, loss over the training nodes, backward, Adam)
    of the model on four probe graphs of :data:`_PEAK_PROBE_NODES` nodes with the shape's
    in-edges and training nodes per node (two significant digits), then twice the nodes, edges
    and training nodes, and each of the last two doubled alone; the peak's terms (saved
    activations, gradients in flight, per-edge and per-training-node buffers) are linear in the
    three counts near that shape. Counted from the step's start, where the previous step's
    gradients are held (the engines free them before the backward pass makes new ones).
    ``reused``: probe with a whole-graph aggregator's caches (the reference engine's).

    Raises:
        RuntimeError: If the profiler cannot start (e.g. another one is running).
    """
    return _step_peak(
        model, _two_digits(edges_per_node), _two_digits(train_per_node), _fused(model, reused)
    )


def step_peak_bytes(
    model: Any, c: RankCounts, shape: tuple[float, float], *, halo: bool = True
) -> float:
    """Transient peak bytes of one training step on a rank of counts ``c``.

    :func:`step_peak` at the graph's ``shape`` (in-edges and training nodes per node) evaluated
    at the rank's counts; ``halo``: the ``fullgraph`` engine, whose aggregator saves more
    (:func:`_halo_saved_bytes`; its exchange buffers live between the moments of the peak,
    where the activations are all held). Without a profiler (another one running), autograd's
    saved bytes (:func:`step_saved_bytes`).
    """
    try:
        peak = step_peak(model, *shape, reused=not halo).at(c)
    except RuntimeError:
        return step_saved_bytes(model, c, halo=halo)
    return peak + (_halo_saved_bytes(model, c) if halo else 0.0)
