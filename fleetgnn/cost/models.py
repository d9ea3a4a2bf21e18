"""Per-engine cost models: bytes per link kind, peak memory per tier and time of one epoch.

Every model counts what its engine moves and holds, from the same quantities the engine itself
reports, so a prediction can be checked against ``metrics.jsonl``:

==========  =====================================================================================
engine      counts (exact when the dataset is given; modelled from its shape otherwise)
==========  =====================================================================================
reference   the whole graph in one device: features, every layer's activations, the topology;
            memory: what the engine holds, the step's profiled peak as workspace
fullgraph   halo rows per rank of the ranges (edge-balanced or METIS), exchanged per layer
            (forward, and backward where the aggregated tensor needs a gradient); one gradient
            all-reduce; memory: what each rank holds (:mod:`fleetgnn.cost.fullgraph_memory`),
            the step's profiled peak as workspace
offload     HongTu's transition plan (:class:`~fleetgnn.exchange.TransitionPlan`) of the
            chunked partition: rows per channel (h2d, peer, reuse, d2h), buffers, host data
minibatch   the epoch replayed (:mod:`fleetgnn.cost.replay`): every rank's seeds and samples,
            every topology read and input row priced at the store tier the engine's plan puts
            it on (own shard, peer, host, disk), the gradient all-reduce; memory: the store
split       the epoch replayed: the global samples split by the engine's partition, input rows
            from each rank's cache or host memory, the shuffle rows per layer, the all-reduce;
            memory: the cache
==========  =====================================================================================

The mini-batch replays count every step when the epoch samples at most
:data:`~fleetgnn.cost.replay.EXACT_EDGES` edges, else a prefix of steps scaled to the epoch
(``knobs["counts"]`` says which). Their ``memory`` is what the engines report (store, cache); a
step's rows, activations and the model's state are the prediction's ``workspace``.

Time is compute (sparse aggregation at ``spmm_rate`` edge-features/s, dense transforms at
``gemm_rate`` flop/s; the backward pass costs twice the forward), sampling (the mini-batch
engines' sampled edges at the profile's ``sample_rate``: fleetgnn's numpy sampler on the host,
which ``reference`` and ``split`` run on every device and whose reads ``minibatch`` shares, see
:mod:`fleetgnn.cost.gpu_rates`) plus communication (bytes per
link kind over the profile's bandwidth), overlapped where the engine overlaps (``fullgraph``'s
pipelined halo exchange). Traffic is the epoch's total over ranks (as ``metrics.jsonl`` sums it);
memory is the peak per rank and tier. The link kinds and tiers are those of the engines' reports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fleetgnn.config import FullGraphEngineConfig
from fleetgnn.config.knobs import PLACEMENTS
from fleetgnn.cost.fullgraph_memory import (
    RankCounts,
    fullgraph_parts,
    model_step_bytes,
    modelled_counts,
    rank_counts,
    reference_parts,
    step_peak_bytes,
)
from fleetgnn.cost.minibatch_store import (
    FEAT_ELEM,
    cached_store,
    edge_split,
    edge_tiers,
    expected_unique,
    modelled_store,
    parse_budget,
    presample,
    store_loads,
    xgnn_cache,
)
from fleetgnn.cost.offload_memory import chunk_live_bytes, layer_memory
from fleetgnn.cost.replay import minibatch_counts, split_counts
from fleetgnn.cost.workload import IDX_BYTES as _IDX
from fleetgnn.cost.workload import ModelShape, Prediction, Workload
from fleetgnn.errors import ConfigError
from fleetgnn.graph import Graph
from fleetgnn.store import resolve_sampling
from fleetgnn.store.tiers import TierBudgets

#: Fraction of a sampled layer's edges that cross METIS splits: GSplit Table 5 reports a local-edge
#: ratio of 0.93-0.94 at 4 splits, fleetgnn's split engine measured 0.84-0.89 (bench_split).
SPLIT_CUT = 0.13
#: Graph edges above which the split model does not run METIS (it models the cut instead).
METIS_EDGES = 10_000_000
#: Fixed cost of one collective (s): gloo on loopback about 1 ms, NCCL tens of microseconds.
COLLECTIVE_LATENCY = {"cpu": 1e-3, "gpu": 3e-5}


# ---------------------------------------------------------------------------------- helpers
def _bw(hw: Any, kind: str) -> float:
    value = hw.bandwidth.get(kind)
    if not value:
        raise ConfigError(f"hardware profile {hw.name!r} has no {kind!r} bandwidth")
    return float(value)


def _compute_s(hw: Any, m: ModelShape, nodes: float, edges: float, passes: float = 3.0) -> float:
    """Forward + backward (twice the forward) compute seconds over ``nodes`` and ``edges``.

    Each layer's transform at the rate of its output width
    (:meth:`~fleetgnn.cost.hardware.HardwareProfile.gemm_rate_at`: narrow transforms run
    slower per flop than square products on CPUs), and a model that reads edge features its
    edge projection over ``edges`` (:meth:`~fleetgnn.cost.workload.ModelShape.edge_gemm_layers`).
    """
    spmm, _ = m.forward_flops(nodes, edges)
    gemm = sum(f / hw.gemm_rate_at(w) for f, w in m.gemm_layers(nodes) + m.edge_gemm_layers(edges))
    return passes * (spmm / float(hw.spmm_rate) + gemm)


def _fixed_s(
    hw: Any, m: ModelShape, rows: Sequence[float], *, calls: int = 1, collectives: float = 0
) -> dict[str, float]:
    """Seconds of one step that the compute rates miss, by what they are spent on.

    ``dropout``: keyed dropout hashes every element of each layer's input (``rows[i]`` rows of
    ``widths[i]``) at ``hw.elementwise_rate`` (on small graphs it costs more than the
    transforms it precedes). ``overhead``: each layer's framework work per call (``calls``:
    the layer's pieces, e.g. fullgraph's chunks) and the optimizer's per parameter tensor.
    ``latency``: ``collectives`` calls at :data:`COLLECTIVE_LATENCY`.
    """
    elements = sum(r * w for r, w in zip(rows, m.widths, strict=False))
    return {
        "dropout": elements / float(hw.elementwise_rate),
        "overhead": m.num_layers * calls * float(hw.layer_overhead)
        + m.tensors * float(hw.param_overhead),
        "latency": collectives * COLLECTIVE_LATENCY[hw.kind],
    }


def _normalize(hw: Any, wl: Workload, rows: float) -> dict[str, float]:
    """A step's row normalisation of ``rows`` input rows (``data.feature_norm=row``), if any.

    The sampled engines normalise each batch's rows as they read them (an absolute value, a
    row sum and a divide over ``rows * F`` elements), priced at the element-wise rate the
    keyed dropout is calibrated at; ``{}`` without the transform.
    """
    if wl.feature_norm != "row" or rows <= 0:
        return {}
    return {"normalize": rows * wl.num_features / float(hw.elementwise_rate)}


def _allreduce_bytes(model: ModelShape, world: int) -> int:
    """Ring all-reduce of the gradients, summed over ranks (as the communicator meters it)."""
    if world <= 1:
        return 0
    return world * (2 * (world - 1) * model.params * model.elem // world)


def _check_memory(pred: Prediction, hw: Any, world: int, *, host_shared: bool = False) -> None:
    """Mark ``pred`` as not fitting where ``memory`` plus ``workspace`` exceeds a tier.

    ``host_shared``: ``memory["host"]`` is one copy per host (the store's host tier), not per
    rank; the workspace is always per rank.
    """
    device_cap = int(hw.device_memory)
    host_cap = int(hw.host_memory)
    per_host = min(world, int(hw.num_devices))
    ws = pred.workspace
    device = pred.memory.get("device", 0) + ws.get("device", 0)
    host = pred.memory.get("host", 0) * (1 if host_shared else per_host)
    host += ws.get("host", 0) * per_host
    if device > device_cap:
        pred.fits = False
        pred.reasons.append(
            f"device memory: needs {device / 2**30:.2f} GiB per rank, the "
            f"device has {device_cap / 2**30:.2f} GiB"
        )
    if host > host_cap:
        pred.fits = False
        pred.reasons.append(
            f"host memory: needs {host / 2**30:.2f} GiB per host, "
            f"the host has {host_cap / 2**30:.2f} GiB"
        )


def temporal_rate(hw: Any) -> float:
    """Sampled edges/s of a temporal task's batches: the profile's ``temporal_sample_rate``.

    A profile that did not measure the temporal sampler prices it at its ``sample_rate`` (the
    plan's reason says so: :func:`temporal_rate_text`).
    """
    return float(hw.temporal_sample_rate or hw.sample_rate)


def temporal_rate_text(hw: Any) -> str:
    """Where :func:`temporal_rate` comes from, in words."""
    if hw.temporal_sample_rate:
        return (
            f"the temporal sampler's {float(hw.temporal_sample_rate):.3g} sampled edges/s "
            f"(the profile's temporal_sample_rate)"
        )
    return (
        f"the plain sampler's {float(hw.sample_rate):.3g} edges/s: profile {hw.name!r} did not "
        f"measure the temporal sampler (temporal_sample_rate), which is slower per edge"
    )


def _temporal_knobs(wl: Workload, edges: float) -> dict[str, Any]:
    """The knobs a temporal prediction adds: its sampler, and its sampled edges per step.

    ``edges``: the replay's mean sampled edges per step and rank (what sampling is priced on).
    """
    if wl.temporal is None:
        return {}
    return {
        "sampler": f"temporal {wl.temporal.kind} ({wl.temporal.strategy})",
        "sampled_edges": int(round(edges)),
    }


# ---------------------------------------------------------------------------------- full graph
def _dataset_masks(graph: Graph | None) -> int:
    """Split masks the dataset has (three for a graph known by its counts)."""
    if graph is None:
        return 3
    return sum(getattr(graph, f"{s}_mask", None) is not None for s in ("train", "val", "test"))


def _device_and_host(hw: Any, parts: Mapping[str, float], host_part: float) -> dict[str, int]:
    """``memory`` as an engine on ``hw`` reports it: CPU ranks count everything as ``device``.

    On GPUs ``host_part`` (the state kept in host arrays: layout, plans, Adam's step counters)
    is ``host`` and the rest ``device``, as the engines' ``peak_memory()`` splits them.
    """
    total = float(sum(parts.values()))
    if hw.kind == "cpu":
        return {"device": int(total), "host": 0}
    return {"device": int(total - host_part), "host": int(host_part)}


def predict_reference(wl: Workload, hw: Any, world: int = 1, **knobs: Any) -> Prediction:
    """The whole graph on one device: features, the full-graph aggregator, the model.

    ``memory``: what the engine holds in full mode
    (:func:`~fleetgnn.cost.fullgraph_memory.reference_parts`: features, labels, masks, training
    IDs, the aggregator's structures, parameters, gradients and Adam's state); ``workspace``:
    the step's transient peak on top (activations and gradients in flight, profiled on probe
    graphs of the model, :func:`~fleetgnn.cost.fullgraph_memory.step_peak_bytes`).
    """
    m = wl.model
    n, e = wl.num_nodes, wl.num_edges
    compute = _compute_s(hw, m, n, e)
    fixed = _fixed_s(hw, m, [n] * m.num_layers)
    parts = reference_parts(
        m, n, e, wl.num_features, wl.num_train, _dataset_masks(wl.graph), cpu=hw.kind == "cpu"
    )
    counts = RankCounts(n, e, e, 0, 0, wl.num_train)
    pred = Prediction(
        "reference",
        True,
        compute + sum(fixed.values()),
        {"local": int(n * wl.num_features * m.elem)},
        _device_and_host(hw, parts, _IDX * wl.num_train + model_step_bytes(m)),
        {"mode": "full"},
        1,
        {"compute": compute, **fixed},
        workspace={"device": int(step_peak_bytes(m, counts, _shape(wl), halo=False))},
    )
    _check_memory(pred, hw, 1)
    return pred


def _shape(wl: Workload) -> tuple[float, float]:
    """In-edges and training nodes per node (the shape the step's peak is probed at)."""
    n = max(wl.num_nodes, 1)
    return wl.num_edges / n, wl.num_train / n


def _fullgraph_counts(
    wl: Workload, world: int, partition: str, seed: int
) -> tuple[list[RankCounts], str]:
    """Every rank's layout counts and how they were found.

    Exact from the dataset (above :data:`METIS_EDGES` edges the range layout stands in for
    METIS's, which would take minutes); modelled from the counts (uniform sources) otherwise.
    """
    if wl.graph is None:
        counts = modelled_counts(wl.num_nodes, wl.num_edges, wl.num_train, world)
        return [counts] * world, "model (uniform sources)"
    if partition != "range" and world > 1 and wl.graph.num_edges > METIS_EDGES:
        return rank_counts(wl.graph, world, "range", seed), "exact; range layout for metis"
    return rank_counts(wl.graph, world, partition, seed), "exact"


def _held_chunks(world: int, num_chunks: int | None, tune: bool) -> tuple[int, ...]:
    """``K`` of each aggregator the engine holds at most (two while its tuner searches)."""
    if num_chunks is not None:
        return (int(num_chunks),)
    if world == 1 or not tune:
        return (1,)
    return tuple(sorted(FullGraphEngineConfig().tuner_chunks)[-2:])


def predict_fullgraph(
    wl: Workload, hw: Any, world: int, *, pipelined: bool = True, **knobs: Any
) -> Prediction:
    """MGG: edge-balanced ranges, halo rows exchanged per layer, overlapped with aggregation.

    ``memory`` is the engine's ``peak_memory()`` on its fullest rank
    (:func:`~fleetgnn.cost.fullgraph_memory.fullgraph_parts`: the owned node data, the layout
    and send lists, the halo plans and aggregators it holds, the model and Adam's state);
    ``workspace`` the step's transient peak on top, on the rank where it is largest
    (:func:`~fleetgnn.cost.fullgraph_memory.step_peak_bytes`).

    Knobs: ``partition`` (``range``/``metis``, default ``range``), ``num_chunks`` (``K``;
    ``None``: tuned, and then the two largest candidates are counted as the two aggregators the
    tuner may hold), ``tune`` (default ``True``), ``seed`` (METIS's, default 0).
    """
    m = wl.model
    partition = str(knobs.get("partition") or "range")
    num_chunks = knobs.get("num_chunks")
    chunks = _held_chunks(world, num_chunks, bool(knobs.get("tune", True)))
    counts, how = _fullgraph_counts(wl, world, partition, int(knobs.get("seed", 0)))
    owned = np.array([c.owned for c in counts], dtype=np.float64)
    halo = np.array([c.halo for c in counts], dtype=np.float64)
    rows = int(halo.sum())
    per_rank_exchange = 0
    exchange = 0
    for i in range(m.num_layers):
        row_bytes = m.agg_widths[i] * m.elem
        times = 1 + (1 if m.grad_through_agg[i] else 0)
        exchange += rows * row_bytes * times
        per_rank_exchange = max(per_rank_exchange, int(halo.max()) * row_bytes * times)
    allreduce = _allreduce_bytes(m, world)
    kind = "peer" if world <= int(hw.num_devices) else "net"
    traffic = {kind: int(exchange + allreduce)} if world > 1 else {}
    n_r = float(owned.max())
    e_r = wl.num_edges / world
    spmm, _ = m.forward_flops(n_r, e_r)
    compute = _compute_s(hw, m, n_r, e_r)
    bw = float(hw.min_peer_bandwidth()) if kind == "peer" else _bw(hw, "net")
    comm = (per_rank_exchange + allreduce / max(world, 1)) / bw if world > 1 else 0.0
    agg_compute = 3.0 * spmm / float(hw.spmm_rate)
    hidden = min(comm, agg_compute) if pipelined and world > 1 else 0.0
    # the layers run in K pieces (the tuner settles on few on a small graph: its first choice,
    # K = 1, is counted), each exchanging forward and, where needed, backward; one all-reduce
    k = int(num_chunks or 1) if world > 1 else 1
    exchanges = sum(1 + int(g) for g in m.grad_through_agg) * k + 1 if world > 1 else 0
    fixed = _fixed_s(hw, m, [n_r] * m.num_layers, calls=k, collectives=exchanges)
    masks = _dataset_masks(wl.graph)
    memory: dict[str, int] = {"device": 0, "host": 0}
    for c in counts:
        parts = fullgraph_parts(
            m,
            c,
            num_nodes=wl.num_nodes,
            num_features=wl.num_features,
            world=world,
            partition=partition,
            chunks=chunks,
            masks=masks,
        )
        narrow = 4 if wl.num_nodes < 2**31 else _IDX
        # host arrays on GPUs: layout, send lists and plans, METIS's original IDs, Adam's steps;
        # the exchange pipelines' send rows are device copies of the plans' (one per aggregator)
        host = parts["layout"] + parts["plans"] + model_step_bytes(m)
        host += narrow * wl.num_nodes if partition != "range" else 0
        if hw.kind != "cpu":
            parts = {**parts, "pipeline": _IDX * c.send * len(chunks)}
        rank = _device_and_host(hw, parts, host)
        memory = {k: max(memory[k], rank[k]) for k in memory}
    peak = max(step_peak_bytes(m, c, _shape(wl)) for c in counts)
    pred = Prediction(
        "fullgraph",
        True,
        compute + comm - hidden + sum(fixed.values()),
        traffic,
        memory,
        {
            "partition": partition,
            "pipelined": pipelined,
            "num_chunks": num_chunks,
            "held_chunks": list(chunks),
            "counts": how,
        },
        1,
        {"compute": compute, kind: comm, "hidden": hidden, **fixed},
        workspace={"device": int(peak)},
    )
    _check_memory(pred, hw, world)
    return pred


def _offload_counts(wl: Workload, world: int, chunks: int, partition: str) -> dict[str, Any]:
    """Per pass (rows) and per rank (capacity, staging, chunk sizes) of the transition plan."""
    n, e = wl.num_nodes, wl.num_edges
    if wl.graph is not None:
        from fleetgnn.exchange import build_transition_plan
        from fleetgnn.partition import chunk_partition, two_level_partition

        book, g = two_level_partition(wl.graph, partition, world, 0)
        cb = chunk_partition(g, book, chunks, relabelled=True)
        indptr = np.asarray(g.indptr, dtype=np.int64)
        plan, rows = build_transition_plan(indptr, g.indices, cb, reorganise=True)
        vol = plan.volumes()
        bounds = np.asarray(cb.bounds, dtype=np.int64)
        train = np.zeros(g.num_nodes + 1, dtype=np.int64)
        if g.train_mask is not None:
            np.cumsum(np.asarray(g.train_mask, dtype=bool), out=train[1:])
        return {
            "intra": vol.intra,
            "reuse": vol.reuse,
            "peer": vol.peer,
            "local": vol.local,
            # per rank [P] and per chunk [P, M]
            "capacity": np.asarray(plan.capacity, dtype=np.int64),
            "staging": plan.staging_caps().sum(axis=1),
            "chunk_rows": np.array([[r.size for r in part] for part in rows], dtype=np.int64),
            "chunk_edges": np.asarray(cb.chunk_edges, dtype=np.int64),
            "chunk_dst": cb.chunk_sizes(),
            "chunk_train": np.diff(train[bounds], axis=1),
            "exact": True,
        }
    # modelled: each chunk's rows are its destinations plus the distinct sources of its edges
    dst = n / (world * chunks)
    edges = e / (world * chunks)
    rows = dst + expected_unique(edges, n)
    batch = expected_unique(world * edges, n) + world * dst  # T_j with inter-rank overlap
    total = chunks * min(batch, n)
    return {
        "intra": total,
        "reuse": 0.0,
        "peer": total * (1 - 1 / world),
        "local": total / world,
        "capacity": np.array([min(batch, n) / world]),
        "staging": np.array([rows * (1 - 1 / world)]),
        "chunk_rows": np.array([[rows]]),
        "chunk_edges": np.array([[edges]]),
        "chunk_dst": np.array([[dst]]),
        "chunk_train": np.array([[dst * wl.num_train / max(n, 1)]]),
        "exact": False,
    }


def _offload_device_peak(m: ModelShape, c: dict[str, Any], hybrid: Sequence[bool]) -> float:
    """The engine's ``peak_memory()["device"]``: the fullest rank's buffers and largest chunk.

    Per rank: the transition buffer (``capacity`` rows of the widest layer input), the gradient
    buffer and the staging rows (the widest hidden width), plus the largest live bytes of one
    chunk of one layer (:func:`~fleetgnn.cost.offload_memory.chunk_live_bytes`: rows, outputs,
    their gradients, topology, cached aggregates and autograd's saved tensors, the last
    measured on probe blocks). Chunks without destinations hold nothing (the engine skips them).
    """
    hmax = max(m.widths[:-1])
    gmax = max(m.widths[1:-1], default=0)
    capacity = np.asarray(c["capacity"], dtype=np.float64)
    staging = np.asarray(c["staging"], dtype=np.float64)
    buffers = (capacity * hmax + (capacity + staging) * gmax) * m.elem  # [P]
    memory = layer_memory(m, tuple(bool(h) for h in hybrid))
    rows, edges, dst, train = (
        np.asarray(c[k], dtype=np.float64)  # [P, M]
        for k in ("chunk_rows", "chunk_edges", "chunk_dst", "chunk_train")
    )
    live = np.zeros(buffers.shape)
    for i in range(m.num_layers):
        chunk = chunk_live_bytes(m, i, memory[i], rows, edges, dst, train, cached=hybrid[i])
        live = np.maximum(live, np.where(dst > 0, chunk, 0.0).max(axis=1))
    return float((buffers + live).max())


def predict_offload(
    wl: Workload,
    hw: Any,
    world: int,
    *,
    chunks: int = 4,
    partition: str = "metis",
    **knobs: Any,
) -> Prediction:
    """HongTu: vertex data in host memory, one chunk of one layer on the device at a time.

    ``memory["device"]`` is what the engine's ``peak_memory()`` measures on its fullest rank
    (see :func:`_offload_device_peak`); ``host`` its vertex data per rank.

    Knobs: ``chunks`` (per part), ``partition`` (``metis``/``range``), ``cache_aggregates``
    (``None``: cache where the model allows, ``False``: always recompute).
    """
    m, n = wl.model, wl.num_nodes
    c = _offload_counts(wl, world, chunks, partition)
    e = m.elem
    hybrid = m.cacheable if knobs.get("cache_aggregates") is not False else (False,) * m.num_layers
    loads = m.num_layers + sum(1 for h in hybrid if not h)
    h2d = sum(c["intra"] * m.widths[i] * e for i in range(m.num_layers))  # forward
    h2d += sum(
        (n * m.widths[i] if hybrid[i] else c["intra"] * m.widths[i]) * e
        for i in range(m.num_layers)
    )  # backward: own rows (cached layers) or the reloaded transition sets
    h2d += sum(n * m.widths[i + 1] * e for i in range(m.num_layers - 1))  # G seeds
    peer = sum(c["peer"] * m.widths[i] * e for i in range(m.num_layers))
    peer += sum(c["peer"] * m.widths[i] * e for i in range(m.num_layers) if not hybrid[i])
    peer += sum(c["peer"] * m.widths[i] * e for i in range(1, m.num_layers))  # pushes
    local = sum(c["local"] * m.widths[i] * e for i in range(m.num_layers))
    local += sum(c["local"] * m.widths[i] * e for i in range(m.num_layers) if not hybrid[i])
    local += sum(c["local"] * m.widths[i] * e for i in range(1, m.num_layers))
    d2h = sum(n * m.widths[i + 1] * e for i in range(m.num_layers))  # H^(l+1)
    d2h += sum(n * m.widths[i] * e for i in range(m.num_layers) if hybrid[i])
    d2h += sum(c["intra"] * m.widths[i] * e for i in range(1, m.num_layers))  # G flushes
    allreduce = _allreduce_bytes(m, world)
    traffic = {
        "local": int(local),
        "peer": int(peer + allreduce),
        "h2d": int(h2d),
        "d2h": int(d2h),
    }
    device = _offload_device_peak(m, c, hybrid)
    host = n / world * (sum(m.widths) + sum(m.widths[1:-1])) * e
    host += sum(n / world * m.widths[i] * e for i in range(m.num_layers) if hybrid[i])
    compute = _compute_s(hw, m, n / world, wl.num_edges / world, 2.0 + loads / m.num_layers)
    per_rank = {k: v / world for k, v in traffic.items()}
    peer_bw = float(hw.min_peer_bandwidth()) if world > 1 else _bw(hw, "local")
    comm = {
        "h2d": per_rank["h2d"] / _bw(hw, "h2d"),
        "d2h": per_rank["d2h"] / _bw(hw, "d2h"),
        "peer": per_rank["peer"] / peer_bw,
    }
    # every chunk runs each layer: the framework's fixed cost per chunk; dropout on the rows
    fixed = _fixed_s(hw, m, [n / world] * m.num_layers, calls=chunks)
    pred = Prediction(
        "offload",
        True,
        compute + sum(comm.values()) + sum(fixed.values()),
        traffic,
        {"device": int(device), "host": int(host)},
        {"chunks": chunks, "partition": partition, "counts": "exact" if c["exact"] else "model"},
        1,
        {"compute": compute, **comm, **fixed},
    )
    _check_memory(pred, hw, world)
    return pred


# ---------------------------------------------------------------------------------- mini-batch
def _link_seconds(hw: Any, traffic: Mapping[str, int], world: int) -> float:
    """Seconds per rank to move its share of ``traffic`` over each link kind."""
    rates = {"local": float(hw.gather_rate)}
    if world > 1:
        rates["peer"] = float(hw.min_peer_bandwidth())
    for kind in ("h2d", "net", "disk"):
        if traffic.get(kind, 0):
            rates[kind] = _bw(hw, kind)
    return sum(v / world / rates[k] for k, v in traffic.items() if v and k in rates)


def predict_minibatch(
    wl: Workload, hw: Any, world: int, *, device_budget: int | str | None = None, **knobs: Any
) -> Prediction:
    """Data parallelism over the unified store: each rank samples its own batch of seeds.

    ``wl.batch_size`` seeds per rank and step (the engine's ``SeedLoader`` slots). With the
    dataset the epoch is replayed (:func:`~fleetgnn.cost.replay.minibatch_counts`): the bytes
    per link kind are the store's (topology and features, per source) plus the gradient
    all-reduce, exactly as the engine meters them; ``memory`` is the store's shard and host
    tier (the engine's ``peak_memory()``); a step's rows, activations and the model's state are
    the ``workspace``. Without the dataset the sample and the tiers are modelled.

    Knobs: ``device_budget`` (bytes per rank, default half the device), ``host_budget``
    (bytes per host, default half the host), ``placement`` (``degree``/``presample``),
    ``order`` (``graph_first``/``features_first``), ``topology`` (``store.topology``),
    ``seed`` (the run's seed, default 0).
    """
    m = wl.model
    per_host = min(world, int(hw.num_devices))
    dev_b = parse_budget(device_budget, int(hw.device_memory) // 2, "device_budget")
    host_b = parse_budget(knobs.get("host_budget"), int(hw.host_memory) // 2, "host_budget")
    # store.sampling as the engine resolves it: a CSC replica on the device, out of the budget
    replica = (wl.num_nodes + 1) * _IDX + wl.num_edges * _IDX
    sampling = str(knobs.get("sampling") or "auto")
    on_device = hw.kind == "gpu" and resolve_sampling(sampling, "cuda", replica, dev_b) == "device"
    if on_device:
        dev_b -= replica
        if device_budget is not None:
            device_budget = dev_b
    rate = hw.device_sample_rate if on_device and hw.device_sample_rate else hw.sample_rate
    if wl.temporal is not None and not on_device:  # the host temporal sampler's rate
        rate = temporal_rate(hw)
    placement = str(knobs.get("placement", "degree"))
    order = str(knobs.get("order") or "graph_first")
    if placement not in PLACEMENTS:
        raise ConfigError(f"placement={placement!r} is not one of {', '.join(PLACEMENTS)}")
    cache = None
    edge_knobs: dict[str, Any] = {}
    if wl.graph is not None:
        c = minibatch_counts(
            wl.graph,
            world,
            batch_size=wl.batch_size,
            fanouts=wl.fanouts,
            seed=int(knobs.get("seed", 0)),
            device_budget=dev_b,
            host_budget=host_b,
            placement=placement,
            order=order,
            topology=knobs.get("topology"),
            ranks_per_host=per_host,
            feature_dtype=wl.feature_dtype,
            temporal=wl.temporal,
            edge_rows=wl.edge_dim > 0,
            edge_feature_dtype=wl.edge_feature_dtype,
            edge_share=wl.edge_share,
        )
        steps, loads = c.steps, dict(c.loads)
        mean = {"input_rows": c.input_rows, "edges": c.edges, "nodes": c.nodes}
        peak = {"input_rows": c.max_input_rows, "edges": c.max_edges, "nodes": c.max_nodes}
        device, host = max(c.device_bytes), c.host_bytes
        counts = "exact" if c.exact else f"presampled {c.replayed} of {c.steps} steps per rank"
        if wl.edge_dim:
            edge_knobs = {
                "row_bytes": wl.edge_row_bytes(),
                "device_bytes": max(c.edge_device_bytes, default=0),
                "host_bytes": c.edge_host_bytes,
                "loads": dict(c.edge_loads),
            }
    else:
        mean = peak = presample(wl)
        steps = math.ceil(wl.num_train / (wl.batch_size * world))
        node_dev, node_host = device_budget, host_b
        split = None
        if wl.edge_dim:  # the node rows get what the edge rows leave of each tier
            total = dev_b
            if device_budget is None:  # XGNN's budget: the device less the step's workspace
                first = xgnn_cache(wl, hw, world, None, host_b, knobs.get("order"))
                total = first.budget if first is not None else dev_b
            split = edge_split(wl, TierBudgets(total, host_b))
            node_dev, node_host = split.nodes.device, split.nodes.host
        cache = xgnn_cache(wl, hw, world, node_dev, node_host, knobs.get("order"))
        if cache is not None:  # XGNN's placement: degree-skewed hits, the faster order
            dev_b, order = cache.budget, cache.order
            store = cached_store(wl, cache)
            cache_knobs = {
                "cache_ratio": round(cache.cache_ratio, 4),
                "feature_hit": round(cache.feature_hit, 4),
                "topology_hit": round(cache.topology_hit, 4),
                "order_reason": cache.reason,
            }
            if cache.placement is not None:
                cache_knobs["stores"] = [list(s) for s in cache.placement.stores]
            counts = "model (degree-skewed access, XGNN placement)"
        else:  # the degree model does not apply (e.g. no training nodes): uniform access
            if split is not None:
                dev_b = split.nodes.device
            store = modelled_store(wl, world, dev_b, host_b if split is None else node_host, order)
            cache_knobs = {}
            counts = "model (uniform access)"
        if split is not None:  # the edge table in its share of the tiers, read uniformly
            on_dev, on_host, edge_dev, edge_host = edge_tiers(wl, world, split.edges)
            fractions = {**store[0], "edges": (on_dev, on_host)}
            store = (fractions, store[1] + edge_dev, store[2] + edge_host, store[3])
            dev_b = split.nodes.device + split.edges.device  # the store's whole budget
            edge_knobs = {
                "row_bytes": wl.edge_row_bytes(),
                "device_bytes": edge_dev,
                "host_bytes": edge_host,
                "loads": {
                    k: int(v)
                    for k, v in store_loads(
                        wl, world, per_host, steps, mean, ({"edges": (on_dev, on_host)}, 0, 0, 0)
                    ).items()
                },
            }
        loads = store_loads(wl, world, per_host, steps, mean, store)
        device, host = store[1], store[2]
    link = "peer" if world <= int(hw.num_devices) else "net"
    loaded = {k: int(v) for k, v in loads.items()}
    # the gradient all-reduce, one per step: its own link time and latency, not the gather's
    sync_bytes = {link: _allreduce_bytes(m, world) * steps} if world > 1 else {}
    traffic = {k: loaded.get(k, 0) + sync_bytes.get(k, 0) for k in {*loaded, *sync_bytes}}
    layers = m.num_layers
    compute = steps * _compute_s(hw, m, mean["nodes"] / layers, mean["edges"] / layers)
    sample = steps * mean["edges"] / float(rate)  # the host's or the device's (gpu_rates)
    device += replica if on_device else 0
    gather = _link_seconds(hw, loaded, world)
    sync = _link_seconds(hw, sync_bytes, world)
    rows = [mean["input_rows"]] + [mean["nodes"] / layers] * (layers - 1)
    collectives = 1 if world > 1 else 0
    fixed = {k: steps * v for k, v in _fixed_s(hw, m, rows, collectives=collectives).items()}
    fixed.update({k: steps * v for k, v in _normalize(hw, wl, mean["input_rows"]).items()})
    workspace = (
        peak["input_rows"] * wl.num_features * m.elem
        + m.activation_bytes(peak["nodes"] / layers, peak["edges"] / layers)
        + 4 * m.params * m.elem  # parameters, gradients, Adam's two moments
    )
    if wl.graph is None and cache is not None:
        # the budget XGNN's plan gave the store is the device less this very workspace (its
        # own, finer estimate, with a runtime reserve): count that one, not a second estimate
        workspace = sum(cache.workspace.values())
    # a step's edge rows, read back at the compute width: one [E_block, D] tensor per block
    workspace += peak["edges"] * wl.edge_dim * m.elem
    pred = Prediction(
        "minibatch",
        True,
        compute + gather + sync + sample + sum(fixed.values()),
        traffic,
        {"device": int(device), "host": int(host)},
        {
            "batch_size": wl.batch_size,
            "fanouts": list(wl.fanouts),
            "device_budget": dev_b,
            "host_budget": host_b,
            "placement": placement,
            "order": order,
            "sampling": "device" if on_device else "host",
            "counts": counts,
            **(cache_knobs if wl.graph is None else {}),
            **_temporal_knobs(wl, mean["edges"]),
            **({"edge_rows": edge_knobs} if edge_knobs else {}),
        },
        steps,
        {"compute": compute, "sample": sample, "gather": gather, link: sync, **fixed},
        workspace={"device": int(workspace)},
    )
    _check_memory(pred, hw, world, host_shared=True)
    return pred


def _split_shuffle(m: ModelShape, rows: Sequence[tuple[float, float]]) -> float:
    """Bytes of an epoch's split shuffles (forward and backward) from the rows per layer.

    Sum/mean aggregation sends one partial sum per (destination, sending rank) pair
    (``rows[l][0]``), forward and, where the aggregated tensor needs a gradient, backward.
    GAT's edge-weighted aggregations send source rows per (source, destination rank)
    (``rows[l][1]``): its scores (``heads``), the softmax denominators (``heads``) and the
    transformed rows (an approximation of its halo exchanges).
    """
    total = 0.0
    for i, (pre, halo) in enumerate(rows):
        back = 2 if m.grad_through_agg[i] else 1
        if m.heads[i] > 1 or m.name == "gat":
            total += halo * (m.agg_widths[i] + 2 * m.heads[i]) * m.elem * back
        else:
            total += pre * m.agg_widths[i] * m.elem * back
    return total


def predict_split(
    wl: Workload, hw: Any, world: int, *, device_budget: int | str | None = None, **knobs: Any
) -> Prediction:
    """Split parallelism (GSplit): one global batch, every row loaded and computed by one rank.

    ``wl.batch_size`` seeds per step for all ranks. With the dataset the epoch is replayed
    (:func:`~fleetgnn.cost.replay.split_counts`): input rows from each rank's store shard
    (``local``), the host tier (``h2d``) or disk, the shuffles per layer and the gradient
    all-reduce, as the engine meters them; ``memory["device"]`` is the largest shard (the
    engine's ``peak_memory()``), ``host`` the rows off the devices and the topology. Without
    the dataset the sample is modelled and :data:`SPLIT_CUT` of a layer's edges cross splits.

    Knobs: ``device_budget`` (shard bytes per rank, default half the device), ``host_budget``
    (host-tier bytes per host, default unlimited, as the engine's), ``partition`` (``metis``,
    ``range``, ``hash``, ``random``; default ``metis``), ``seed`` (default 0).
    """
    m = wl.model
    dev_b = parse_budget(device_budget, int(hw.device_memory) // 2, "device_budget")
    host = knobs.get("host_budget")
    host_b = None if host is None else parse_budget(host, 0, "host_budget")
    method = str(knobs.get("partition", "metis"))
    if wl.graph is not None:
        g = wl.graph
        # METIS on a large graph takes minutes: there the owners are a stand-in (hash, for
        # the caches) and the shuffles are modelled
        modelled_cut = method == "metis" and world > 1 and g.num_edges > METIS_EDGES
        c = split_counts(
            g,
            world,
            batch_size=wl.batch_size,
            fanouts=wl.fanouts,
            seed=int(knobs.get("seed", 0)),
            partition_method=method,
            device_budget=dev_b,
            host_budget=host_b,
            owner=np.arange(g.num_nodes, dtype=np.int64) % world if modelled_cut else None,
            feature_dtype=wl.feature_dtype,
            temporal=wl.temporal,
        )
        steps, loads, rows = c.steps, dict(c.loads), c.shuffle_rows
        if modelled_cut:
            rows = tuple((e * SPLIT_CUT * steps,) * 2 for e in c.layer_edges)
        mean = {"input_rows": c.input_rows, "edges": c.edges, "nodes": c.nodes}
        peak = {"input_rows": c.max_input_rows, "edges": c.max_edges, "nodes": c.max_nodes}
        row = wl.feature_row_bytes(FEAT_ELEM)  # as the store holds it (store.feature_dtype)
        device = max(c.device_bytes)
        uncached = (wl.num_nodes - sum(c.device_bytes) // max(row, 1)) * row
        counts = "exact" if c.exact else f"presampled {c.replayed} of {c.steps} steps"
        if modelled_cut:
            counts += f"; metis modelled ({SPLIT_CUT:.0%} of sampled edges cross splits)"
    else:
        mean = peak = presample(wl)
        steps = math.ceil(wl.num_train / wl.batch_size)
        row = wl.feature_row_bytes(FEAT_ELEM)
        feat_bytes = wl.num_nodes * row
        cached = min(1.0, dev_b * world / max(feat_bytes, 1))
        gathered = mean["input_rows"] * row * steps
        loads = {"local": gathered * cached, "h2d": gathered * (1 - cached)}
        cut = min(SPLIT_CUT, 1 - 1 / world)  # edges between splits
        rows = tuple((e * cut * steps, e * cut * steps) for e in mean["hop_edges"])
        device = min(dev_b, feat_bytes // world)
        uncached = feat_bytes * (1 - cached)
        counts = f"model ({SPLIT_CUT:.0%} of sampled edges cross splits)"
    link = "peer" if world <= int(hw.num_devices) else "net"
    traffic = {k: int(v) for k, v in loads.items()}
    if world > 1:
        traffic[link] = int(_split_shuffle(m, rows)) + _allreduce_bytes(m, world) * steps
    layers = m.num_layers
    compute = steps * _compute_s(
        hw, m, mean["nodes"] / layers / world, mean["edges"] / layers / world
    )
    rate = temporal_rate(hw) if wl.temporal is not None else float(hw.sample_rate)
    sample = steps * mean["edges"] / rate  # each rank samples the global batch
    # per layer: rows forward and backward; plus the gradient all-reduce (none on one rank)
    collectives = (2 * layers + 1) if world > 1 else 0
    between = {link: traffic.get(link, 0)} if world > 1 else {}
    within = {k: v for k, v in traffic.items() if k not in between}
    gather = _link_seconds(hw, within, world)  # input rows from the shard, host tier or disk
    comm = steps * COLLECTIVE_LATENCY[hw.kind] * collectives + _link_seconds(hw, between, world)
    rows = [mean["input_rows"] / world] + [mean["nodes"] / layers / world] * (layers - 1)
    fixed = {k: steps * v for k, v in _fixed_s(hw, m, rows).items()}
    fixed.update({k: steps * v for k, v in _normalize(hw, wl, mean["input_rows"] / world).items()})
    workspace = (
        peak["input_rows"] / world * wl.num_features * m.elem
        + m.activation_bytes(peak["nodes"] / layers / world, peak["edges"] / layers / world)
        + 4 * m.params * m.elem  # parameters, gradients, Adam's two moments
    )
    idx = 4 if wl.num_nodes < 2**31 else 8
    pred = Prediction(
        "split",
        True,
        compute + gather + comm + sample + sum(fixed.values()),
        traffic,
        {"device": int(device), "host": int(uncached + 8 * wl.num_nodes + idx * wl.num_edges)},
        {
            "batch_size": wl.batch_size,
            "fanouts": list(wl.fanouts),
            "device_budget": dev_b,
            **({} if host_b is None else {"host_budget": host_b}),
            "partition": method,
            "counts": counts,
            **_temporal_knobs(wl, mean["edges"]),
        },
        steps,
        {
            "compute": compute,
            "sample": sample,
            "gather": gather,
            **({link: comm} if world > 1 else {}),
            **fixed,
        },
        workspace={"device": int(workspace)},
    )
    _check_memory(pred, hw, world, host_shared=True)
    return pred


#: Engine name -> model.
MODELS: Mapping[str, Any] = {
    "reference": predict_reference,
    "fullgraph": predict_fullgraph,
    "offload": predict_offload,
    "minibatch": predict_minibatch,
    "split": predict_split,
}
