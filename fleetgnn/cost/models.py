"""Per-engine cost models: bytes per link kind, peak memory per tier and time of one epoch.

Every model counts what its engine moves and holds, from the same quantities the engine itself
reports, so a prediction can be checked against ``metrics.jsonl``:

==========  =====================================================================================
engine      counts (exact when the dataset is given; modelled from its shape otherwise)
==========  =====================================================================================
reference   the whole graph in one device: features, every layer's activations, the topology
fullgraph   halo rows per rank of the edge-balanced ranges, exchanged per layer (forward, and
            backward where the aggregated tensor needs a gradient); one gradient all-reduce
offload     HongTu's transition plan (:class:`~fleetgnn.exchange.TransitionPlan`) of the
            chunked partition: rows per channel (h2d, peer, reuse, d2h), buffers, host data
minibatch   a short pre-sampling with the engine's sampler: input rows and edges per step
split       the same sample, one copy of every row across ranks
==========  =====================================================================================

Time is compute (sparse aggregation at ``spmm_rate`` edge-features/s, dense transforms at
``gemm_rate`` flop/s; the backward pass costs twice the forward) plus communication (bytes per
link kind over the profile's bandwidth), overlapped where the engine overlaps (``fullgraph``'s
pipelined halo exchange). Traffic is the epoch's total over ranks (as ``metrics.jsonl`` sums it);
memory is the peak per rank and tier. The link kinds and tiers are those of the engines' reports.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from fleetgnn.errors import ConfigError
from fleetgnn.graph import Graph
from fleetgnn.nn import build_model
from fleetgnn.nn.gat_conv import GATConv
from fleetgnn.nn.gcn_conv import GCNConv
from fleetgnn.nn.sage_conv import SAGEConv

#: Bytes of one int64 index.
_IDX = 8
#: Sampled edges per second per rank: fleetgnn's CPU sampler measured 4.7-5.2 M edges/s on a
#: 2-core EPYC VM (one thread); GPU samplers (WholeGraph, XGNN) draw hundreds of millions.
SAMPLE_RATE = {"cpu": 5e6, "gpu": 5e8}
#: Fraction of a sampled layer's edges that cross METIS splits: GSplit Table 5 reports a local-edge
#: ratio of 0.93-0.94 at 4 splits, fleetgnn's split engine measured 0.84-0.89 (bench_split).
SPLIT_CUT = 0.13
#: Fixed cost of one collective (s): gloo on loopback about 1 ms, NCCL tens of microseconds.
COLLECTIVE_LATENCY = {"cpu": 1e-3, "gpu": 3e-5}


# ---------------------------------------------------------------------------------- inputs
@dataclasses.dataclass(frozen=True)
class ModelShape:
    """What the cost models need of a model: widths, heads, aggregation widths, parameters.

    Attributes:
        name: ``gcn``, ``sage``, ``gin`` or ``gat``.
        widths: ``[F, w_1, ..., C]``: each layer's input and output widths (GAT: heads x width).
        agg_widths: Width of the tensor each layer aggregates (what crosses edges).
        heads: Attention heads per layer (1 for other models).
        grad_through_agg: Per layer, whether the aggregated tensor needs a gradient (then the
            backward pass exchanges it too).
        cacheable: Per layer, whether the aggregation has no parameters (offload's hybrid).
        params: Number of parameters.
        elem: Bytes per element (4: float32, 8: float64).
    """

    name: str
    widths: tuple[int, ...]
    agg_widths: tuple[int, ...]
    heads: tuple[int, ...]
    grad_through_agg: tuple[bool, ...]
    cacheable: tuple[bool, ...]
    params: int
    elem: int = 4

    @property
    def num_layers(self) -> int:
        """Number of layers ``L``."""
        return len(self.widths) - 1

    @classmethod
    def build(
        cls, name: str, in_dim: int, classes: int, elem: int = 4, **kwargs: Any
    ) -> ModelShape:
        """The shape of :func:`~fleetgnn.nn.build_model` ``(name, in_dim, classes, **kwargs)``."""
        model = build_model(name, in_dim, classes, **kwargs)
        widths, aggw, heads, grad = [in_dim], [], [], []
        for i, conv in enumerate(model.convs):
            w_in = widths[-1]
            if isinstance(conv, GATConv):
                out, h = conv.out_width, conv.heads
                aggw.append(out)  # transformed rows cross edges, with their attention
                heads.append(h)
                grad.append(True)
            else:
                out = conv.out_channels
                heads.append(1)
                narrow = out < w_in
                if isinstance(conv, (GCNConv, SAGEConv)):
                    aggw.append(out if narrow else w_in)
                    grad.append(i > 0 or narrow)  # transformed first: parameters behind it
                else:  # GIN aggregates its input
                    aggw.append(w_in)
                    grad.append(i > 0)
            widths.append(out)
        return cls(
            name=name,
            widths=tuple(widths),
            agg_widths=tuple(aggw),
            heads=tuple(heads),
            grad_through_agg=tuple(grad),
            cacheable=tuple(bool(model.cacheable_aggregation(i)) for i in range(len(aggw))),
            params=sum(p.numel() for p in model.parameters()),
            elem=elem,
        )

    def forward_flops(self, nodes: float, edges: float) -> tuple[float, float]:
        """``(spmm edge-features, gemm flops)`` of one forward pass over ``nodes``/``edges``."""
        spmm = gemm = 0.0
        for i in range(self.num_layers):
            w_in, w_out = self.widths[i], self.widths[i + 1]
            spmm += edges * self.agg_widths[i] * (2 if self.heads[i] > 1 else 1)
            gemm += 2.0 * nodes * w_in * w_out * (2 if self.name == "gin" else 1)
        return spmm, gemm

    def activation_bytes(self, nodes: float, edges: float) -> float:
        """Autograd's saved activations of one forward pass (per node and per edge terms)."""
        per_layer = 0.0
        for i in range(self.num_layers):
            w_in, w_out = self.widths[i], self.widths[i + 1]
            per_layer += nodes * (2 * w_in + 3 * w_out) * self.elem  # dropout mask, input, out
            if self.heads[i] > 1:
                per_layer += edges * self.heads[i] * 4 * self.elem  # scores, softmax, dropout
        return per_layer + edges * _IDX * 2  # the topology and its transpose


@dataclasses.dataclass(frozen=True)
class Workload:
    """The graph and the training setup a plan is for.

    Attributes:
        num_nodes: ``N``.
        num_edges: ``E``.
        num_features: ``F``.
        num_classes: ``C``.
        num_train: Training nodes.
        model: The model's shape.
        batch_size: Seeds per step (mini-batch engines; the global batch).
        fanouts: Sampled neighbours per layer (mini-batch engines).
        graph: The dataset itself, for exact counts (``None``: modelled from the counts).
        source: Where the numbers come from (stated in reports).
    """

    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int
    num_train: int
    model: ModelShape
    batch_size: int = 1024
    fanouts: tuple[int, ...] = (10, 10)
    graph: Graph | None = None
    source: str = ""

    @property
    def mean_degree(self) -> float:
        """``E / N``."""
        return self.num_edges / max(self.num_nodes, 1)


@dataclasses.dataclass
class Prediction:
    """One engine's predicted epoch.

    Attributes:
        engine: The engine's name.
        fits: Whether every tier fits its capacity.
        epoch_s: Predicted seconds per epoch.
        traffic: Bytes per link kind per epoch, summed over ranks.
        memory: Peak bytes per rank and tier (``device``, ``host``).
        knobs: The engine settings the prediction is for.
        steps: Optimisation steps per epoch.
        breakdown: Seconds per component (``compute``, each link kind).
        reasons: Why it does not fit, or notes on the model.
    """

    engine: str
    fits: bool
    epoch_s: float
    traffic: dict[str, int]
    memory: dict[str, int]
    knobs: dict[str, Any]
    steps: int = 1
    breakdown: dict[str, float] = dataclasses.field(default_factory=dict)
    reasons: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` form of one engine."""
        return {
            "fits": self.fits,
            "epoch_s": self.epoch_s,
            "traffic": dict(self.traffic),
            "memory": dict(self.memory),
            "knobs": dict(self.knobs),
            "steps": self.steps,
            "breakdown": dict(self.breakdown),
            "reasons": list(self.reasons),
        }


# ---------------------------------------------------------------------------------- helpers
def _bw(hw: Any, kind: str) -> float:
    value = hw.bandwidth.get(kind)
    if not value:
        raise ConfigError(f"hardware profile {hw.name!r} has no {kind!r} bandwidth")
    return float(value)


def _compute_s(hw: Any, spmm: float, gemm: float, passes: float = 3.0) -> float:
    """Forward + backward (twice the forward) compute seconds."""
    return passes * (spmm / float(hw.spmm_rate) + gemm / float(hw.gemm_rate))


def _allreduce_bytes(model: ModelShape, world: int) -> int:
    """Ring all-reduce of the gradients, summed over ranks (as the communicator meters it)."""
    if world <= 1:
        return 0
    return world * (2 * (world - 1) * model.params * model.elem // world)


def _check_memory(pred: Prediction, hw: Any, world: int) -> None:
    device_cap = int(hw.device_memory)
    host_cap = int(hw.host_memory)
    per_host = min(world, int(hw.num_devices))
    if pred.memory.get("device", 0) > device_cap:
        pred.fits = False
        pred.reasons.append(
            f"device memory: needs {pred.memory['device'] / 2**30:.2f} GiB per rank, the "
            f"device has {device_cap / 2**30:.2f} GiB"
        )
    if pred.memory.get("host", 0) * per_host > host_cap:
        pred.fits = False
        pred.reasons.append(
            f"host memory: needs {pred.memory['host'] * per_host / 2**30:.2f} GiB per host, "
            f"the host has {host_cap / 2**30:.2f} GiB"
        )


def _expected_unique(draws: float, population: float) -> float:
    """Expected distinct items in ``draws`` uniform draws from ``population`` items."""
    if population <= 0:
        return 0.0
    return population * (1.0 - math.exp(-draws / population))


# ---------------------------------------------------------------------------------- full graph
def predict_reference(wl: Workload, hw: Any, world: int = 1, **knobs: Any) -> Prediction:
    """The whole graph on one device: features, activations and topology live there."""
    m = wl.model
    n, e = wl.num_nodes, wl.num_edges
    spmm, gemm = m.forward_flops(n, e)
    compute = _compute_s(hw, spmm, gemm)
    device = n * wl.num_features * m.elem + m.activation_bytes(n, e) + (n + 1) * _IDX
    pred = Prediction(
        "reference",
        True,
        compute,
        {"local": int(n * wl.num_features * m.elem)},
        {"device": int(device), "host": 0},
        {"mode": "full"},
        1,
        {"compute": compute},
    )
    _check_memory(pred, hw, 1)
    return pred


def _range_halo(wl: Workload, world: int) -> tuple[np.ndarray, np.ndarray]:
    """Per rank of the edge-balanced ranges: owned nodes and unique remote sources (halo)."""
    if wl.graph is not None:  # the fullgraph engine's own layout, rank by rank
        from fleetgnn.exchange import build_exchange_layout, range_owner
        from fleetgnn.partition import range_partition

        g = wl.graph
        offsets = np.asarray(range_partition(g, world).offsets, dtype=np.int64)
        indptr = np.asarray(g.indptr, dtype=np.int64)
        owner = range_owner(offsets)
        halo = np.zeros(world, dtype=np.int64)
        for r in range(world):
            lo, hi = int(offsets[r]), int(offsets[r + 1])
            layout = build_exchange_layout(
                np.arange(lo, hi, dtype=np.int64),
                indptr[lo : hi + 1] - indptr[lo],
                np.asarray(g.indices[indptr[lo] : indptr[hi]], dtype=np.int64),
                owner,
                rank=r,
                world_size=world,
            )
            halo[r] = layout.num_halo
        return np.diff(offsets), halo
    n, e = wl.num_nodes, wl.num_edges
    owned = np.full(world, n / world)
    remote_edges = e / world * (1 - 1 / world)
    halo = np.full(world, _expected_unique(remote_edges, n * (1 - 1 / world)))
    return owned, halo


def predict_fullgraph(
    wl: Workload, hw: Any, world: int, *, pipelined: bool = True, **knobs: Any
) -> Prediction:
    """MGG: edge-balanced ranges, halo rows exchanged per layer, overlapped with aggregation."""
    m = wl.model
    owned, halo = _range_halo(wl, world)
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
    spmm, gemm = m.forward_flops(n_r, e_r)
    compute = _compute_s(hw, spmm, gemm)
    bw = float(hw.min_peer_bandwidth()) if kind == "peer" else _bw(hw, "net")
    comm = (per_rank_exchange + allreduce / max(world, 1)) / bw if world > 1 else 0.0
    agg_compute = 3.0 * spmm / float(hw.spmm_rate)
    hidden = min(comm, agg_compute) if pipelined and world > 1 else 0.0
    device = (
        n_r * wl.num_features * m.elem
        + m.activation_bytes(n_r, e_r)
        + float(halo.max()) * max(m.agg_widths) * m.elem * 2
        + e_r * _IDX * 4
    )
    pred = Prediction(
        "fullgraph",
        True,
        compute + comm - hidden,
        traffic,
        {"device": int(device), "host": 0},
        {"partition": "range", "pipelined": pipelined},
        1,
        {"compute": compute, kind: comm, "hidden": hidden},
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
        staging = plan.staging_caps().sum(axis=1)
        biggest = max((r.size for part in rows for r in part), default=0)
        return {
            "intra": vol.intra,
            "reuse": vol.reuse,
            "peer": vol.peer,
            "local": vol.local,
            "capacity": int(plan.capacity.max()),
            "staging": int(staging.max()),
            "chunk_rows": int(biggest),
            "chunk_edges": int(cb.chunk_edges.max()),
            "chunk_dst": int(cb.chunk_sizes().max()),
            "exact": True,
        }
    # modelled: each chunk's rows are its destinations plus the distinct sources of its edges
    dst = n / (world * chunks)
    edges = e / (world * chunks)
    rows = dst + _expected_unique(edges, n)
    batch = _expected_unique(world * edges, n) + world * dst  # T_j with inter-rank overlap
    total = chunks * min(batch, n)
    return {
        "intra": total,
        "reuse": 0.0,
        "peer": total * (1 - 1 / world),
        "local": total / world,
        "capacity": min(batch, n) / world,
        "staging": rows * (1 - 1 / world),
        "chunk_rows": rows,
        "chunk_edges": edges,
        "chunk_dst": dst,
        "exact": False,
    }


def predict_offload(
    wl: Workload,
    hw: Any,
    world: int,
    *,
    chunks: int = 4,
    partition: str = "metis",
    **knobs: Any,
) -> Prediction:
    """HongTu: vertex data in host memory, one chunk of one layer on the device at a time."""
    m, n = wl.model, wl.num_nodes
    c = _offload_counts(wl, world, chunks, partition)
    e = m.elem
    hybrid = m.cacheable
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
    hmax = max(m.widths[:-1])
    gmax = max(m.widths[1:-1], default=0)
    buffers = (c["capacity"] * hmax + (c["capacity"] + c["staging"]) * gmax) * e
    worst = max(
        2 * c["chunk_rows"] * m.widths[i] * e
        + 2 * c["chunk_dst"] * m.widths[i + 1] * e
        + m.activation_bytes(c["chunk_rows"], c["chunk_edges"]) / m.num_layers
        for i in range(m.num_layers)
    )
    host = n / world * (sum(m.widths) + sum(m.widths[1:-1])) * e
    host += sum(n / world * m.widths[i] * e for i in range(m.num_layers) if hybrid[i])
    spmm, gemm = m.forward_flops(n / world, wl.num_edges / world)
    compute = _compute_s(hw, spmm, gemm, passes=2.0 + loads / m.num_layers)
    per_rank = {k: v / world for k, v in traffic.items()}
    peer_bw = float(hw.min_peer_bandwidth()) if world > 1 else _bw(hw, "local")
    comm = {
        "h2d": per_rank["h2d"] / _bw(hw, "h2d"),
        "d2h": per_rank["d2h"] / _bw(hw, "d2h"),
        "peer": per_rank["peer"] / peer_bw,
    }
    pred = Prediction(
        "offload",
        True,
        compute + sum(comm.values()),
        traffic,
        {"device": int(buffers + worst), "host": int(host)},
        {"chunks": chunks, "partition": partition, "counts": "exact" if c["exact"] else "model"},
        1,
        {"compute": compute, **comm},
    )
    _check_memory(pred, hw, world)
    return pred


# ---------------------------------------------------------------------------------- mini-batch
def _presample(wl: Workload, steps: int = 4, seed: int = 0) -> dict[str, float]:
    """Mean input rows and edges per step of the engine's sampler (or a model of it)."""
    if wl.graph is not None:
        import torch

        from fleetgnn.sampling import GraphTopology, NeighborSampler, SeedLoader

        g = wl.graph
        train = torch.from_numpy(np.flatnonzero(np.asarray(g.train_mask)))
        loader = SeedLoader(train, wl.batch_size, seed=seed, shuffle=True)
        sampler = NeighborSampler(GraphTopology(g), list(wl.fanouts), seed=seed)
        rows = edges = nodes = 0.0
        k = min(steps, loader.num_batches)
        for s in range(k):
            blocks = sampler.sample(loader.batch(0, s), 0, s)
            rows += blocks[0].num_src
            edges += sum(int(b.indices.numel()) for b in blocks)
            nodes += sum(b.num_src for b in blocks)
        return {
            "input_rows": rows / k,
            "edges": edges / k,
            "nodes": nodes / k,
            "steps": loader.num_batches,
        }
    frontier = float(wl.batch_size)
    edges = nodes = 0.0
    for f in reversed(wl.fanouts):
        fan = wl.mean_degree if f < 0 else min(f, wl.mean_degree)
        e = frontier * fan
        nodes += frontier
        edges += e
        frontier = min(frontier + _expected_unique(e, wl.num_nodes), wl.num_nodes)
    return {
        "input_rows": frontier,
        "edges": edges,
        "nodes": nodes + frontier,
        "steps": math.ceil(wl.num_train / wl.batch_size),
    }


def predict_minibatch(
    wl: Workload, hw: Any, world: int, *, device_budget: int | None = None, **knobs: Any
) -> Prediction:
    """Data parallelism: each rank samples its share of the batch and gathers its input rows."""
    m = wl.model
    per_rank = dataclasses.replace(wl, batch_size=max(1, wl.batch_size // world))
    s = _presample(per_rank)
    steps = math.ceil(wl.num_train / (per_rank.batch_size * world))  # each rank: its share
    row = wl.num_features * m.elem
    feat_bytes = wl.num_nodes * row
    budget = device_budget if device_budget is not None else int(hw.device_memory) // 2
    cached = min(1.0, budget * world / max(feat_bytes, 1))
    gathered = s["input_rows"] * row * steps * world
    traffic = {
        "local": int(gathered * cached / world),
        "peer": int(gathered * cached * (1 - 1 / world)) + _allreduce_bytes(m, world) * steps,
        "h2d": int(gathered * (1 - cached)),
    }
    spmm, gemm = m.forward_flops(s["nodes"] / m.num_layers, s["edges"] / m.num_layers)
    compute = steps * _compute_s(hw, spmm, gemm)
    sample = steps * s["edges"] / SAMPLE_RATE[hw.kind]
    comm = steps * COLLECTIVE_LATENCY[hw.kind] * (1 if world > 1 else 0) + (
        traffic["h2d"] / world / _bw(hw, "h2d")
        + traffic["peer"] / world / float(hw.min_peer_bandwidth() if world > 1 else 1e30)
        + traffic["local"] / world / float(hw.gather_rate)
    )
    device = (
        min(budget, feat_bytes / world)
        + s["input_rows"] * row
        + m.activation_bytes(s["nodes"] / m.num_layers, s["edges"] / m.num_layers)
    )
    host = feat_bytes * (1 - cached) / world + wl.num_edges * _IDX / world
    pred = Prediction(
        "minibatch",
        True,
        compute + comm + sample,
        traffic,
        {"device": int(device), "host": int(host)},
        {"batch_size": per_rank.batch_size, "fanouts": list(wl.fanouts), "cache": cached},
        steps,
        {"compute": compute, "sample": sample, "gather": comm},
    )
    _check_memory(pred, hw, world)
    return pred


def predict_split(
    wl: Workload, hw: Any, world: int, *, device_budget: int | None = None, **knobs: Any
) -> Prediction:
    """Split parallelism: one global batch, every row loaded and computed by one rank."""
    m = wl.model
    s = _presample(wl)
    steps = int(s["steps"])
    row = wl.num_features * m.elem
    feat_bytes = wl.num_nodes * row
    budget = device_budget if device_budget is not None else int(hw.device_memory) // 2
    cached = min(1.0, budget * world / max(feat_bytes, 1))
    gathered = s["input_rows"] * row * steps
    cut = min(SPLIT_CUT, 1 - 1 / world)  # edges between splits
    shuffle = sum(
        s["edges"] / m.num_layers * cut * m.agg_widths[i] * m.elem * 2 for i in range(m.num_layers)
    )
    traffic = {
        "local": int(gathered * cached),
        "h2d": int(gathered * (1 - cached)),
        "peer": int(shuffle * steps) + _allreduce_bytes(m, world) * steps,
    }
    spmm, gemm = m.forward_flops(s["nodes"] / m.num_layers / world, s["edges"] / m.num_layers)
    compute = steps * _compute_s(hw, spmm / world, gemm)
    sample = steps * s["edges"] / SAMPLE_RATE[hw.kind]  # every rank samples the global batch
    bw = float(hw.min_peer_bandwidth()) if world > 1 else 1e30
    # per layer: counts + rows forward, rows backward; plus the gradient all-reduce
    collectives = (3 * m.num_layers + 1) if world > 1 else 0
    comm = steps * COLLECTIVE_LATENCY[hw.kind] * collectives + (
        traffic["h2d"] / world / _bw(hw, "h2d")
        + traffic["peer"] / world / bw
        + traffic["local"] / world / float(hw.gather_rate)
    )
    device = (
        min(budget, feat_bytes / world)
        + s["input_rows"] * row / world
        + m.activation_bytes(s["nodes"] / m.num_layers / world, s["edges"] / m.num_layers / world)
    )
    host = feat_bytes * (1 - cached) / world + wl.num_edges * _IDX / world
    pred = Prediction(
        "split",
        True,
        compute + comm + sample,
        traffic,
        {"device": int(device), "host": int(host)},
        {"batch_size": wl.batch_size, "fanouts": list(wl.fanouts), "cache": cached},
        steps,
        {"compute": compute, "sample": sample, "communication": comm},
    )
    _check_memory(pred, hw, world)
    return pred


#: Engine name -> model.
MODELS: Mapping[str, Any] = {
    "reference": predict_reference,
    "fullgraph": predict_fullgraph,
    "offload": predict_offload,
    "minibatch": predict_minibatch,
    "split": predict_split,
}
