"""XGNN's store placement decision: how much of the topology and the features the devices hold.

:func:`plan_feature_cache` decides, for a mini-batch workload on a hardware profile, what the
unified store (:mod:`fleetgnn.store`) should place on the device tier and in which order, as XGNN
does (Tang et al., PVLDB 17(5) 2024, Sec. 4 and 6.8):

1. **Partition placement.** On an asymmetric device topology (the profile's ``peer`` matrix has
   zeros, e.g. ``dgx1-v100``) :func:`~fleetgnn.store.placement.solve_placement` maps the ``N``
   logical partitions onto devices, replicating some; the busiest device stores ``max_parts``
   partitions, so the device tier holds ``budget * N / max_parts`` distinct bytes.
2. **Budget.** Each rank's store budget is its device memory minus the model's workspace for one
   batch (parameters, gradients and Adam state, the batch's input rows, activations from
   :meth:`~fleetgnn.cost.models.ModelShape.activation_bytes` per sampled layer, the sampler's
   buffers, the per-node hot-rank table) and minus :data:`RUNTIME_RESERVE`; or ``device_budget``.
3. **Order.** ``graph_first`` gives the budget to the topology first and the features the rest,
   ``features_first`` the other way round (then the host tier in the same order, the rest on
   disk). Both are evaluated; the one with the smaller predicted gather + sample time per step is
   chosen. A missed feature row is one sequential read of ``F * itemsize`` bytes over PCIe; a
   missed topology read is a random 4-byte read that moves a whole 32-byte sector and pays
   PCIe's small-read overhead (:data:`RANDOM_READ_BYTES`), so topology misses cost about 16x
   their payload and graph-first wins unless memory is tight (XGNN Sec. 6.8).

Counts come from the dataset when the workload has one (exact: ``plan_store`` on the real row
bytes and a pre-sampling with the engines' :class:`~fleetgnn.sampling.NeighborSampler`; hit rates
are then what the store's meter reports for those batches), otherwise from a degree model
(:class:`DegreeModel`): Chung-Lu in-degrees with Zipf weights, accesses proportional to
in-degree, zero-in-degree nodes sampled only as seeds.

============================  ==================================================================
:class:`StoreCachePlan`       what the planner should use
============================  ==================================================================
``cache_ratio``               distinct feature rows on the device tier / ``N``
``feature_hit``               fraction of a step's input rows served from device memory (the
                              store's ``hit_rates("features")`` local + peer)
``topology_hit``              fraction of topology reads (degree look-ups and sampled
                              neighbours, one per node ID as the store meters them) served from
                              device memory
``device_bytes``              per rank: ``{"topology", "features"}`` bytes of the store's shard
``host_bytes``                per host: ``{"topology", "features"}`` bytes of the host tier
``disk_bytes``                bytes left on disk
``workspace``                 per rank: the batch's device bytes by component (they and
                              ``device_bytes`` add up to the device memory used)
``order``, ``reason``         the chosen order and why
============================  ==================================================================
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Protocol

import numpy as np

from fleetgnn.cost.hardware import HardwareProfile
from fleetgnn.cost.workload import ModelShape, Workload
from fleetgnn.errors import ConfigError
from fleetgnn.store.hotness import hotness_order
from fleetgnn.store.placement import PlacementPlan, solve_placement
from fleetgnn.store.tiers import TierBudgets, plan_store

__all__ = [
    "ORDERS",
    "RANDOM_READ_BYTES",
    "RUNTIME_RESERVE",
    "SECTOR_BYTES",
    "DegreeModel",
    "OrderOutcome",
    "StoreCachePlan",
    "plan_feature_cache",
]

ORDERS: tuple[str, ...] = ("graph_first", "features_first")
#: Bytes of device memory a rank cannot give to the store besides its batch workspace: the CUDA
#: context and the framework's kernels and handles (~0.5-1 GiB on a V100 with PyTorch and DGL),
#: communicator buffers and the caching allocator's fragmentation. XGNN's artifact searches the
#: largest cache ratio whose peak stays under 15.8 GB of a 16 GB V100; 2 GiB is the round figure
#: that covers these costs there (one constant for every dataset and model).
RUNTIME_RESERVE: int = 2 * 2**30
#: Bytes one random device-memory read moves: a whole 32-byte sector (XGNN notes' coalescing
#: model counts distinct sectors).
SECTOR_BYTES: int = 32
#: Link time of one random small read over PCIe (zero-copy from pinned host memory): the 32-byte
#: sector plus the request/completion packet headers and framing (~24-32 B), so small reads move
#: at about half the link's rate. A 4-byte index read therefore costs 16x its payload.
RANDOM_READ_BYTES: int = 64
#: Bytes per sampled edge of the sampler's buffers (sampled IDs, positions, the dedup table).
SAMPLER_EDGE_BYTES: int = 24
#: Bytes per node and per edge of the topology in the shape model: int32 ``indptr`` entries and
#: int32 neighbour IDs, as in the XGNN artifact (its papers100M graph: 6.43 GiB).
SHAPE_ID_BYTES: int = 4
#: Bytes one random disk read moves (a page).
DISK_PAGE: int = 4096


# ---------------------------------------------------------------------------------- results
@dataclasses.dataclass(frozen=True)
class OrderOutcome:
    """The store under one order (``graph_first`` or ``features_first``).

    Attributes:
        order: The order.
        cache_ratio: Distinct feature rows on the device tier / ``N``.
        topology_ratio: Nodes whose adjacency segment is on the device tier / ``N``.
        feature_hit: Fraction of input rows per step served from device memory.
        topology_hit: Fraction of topology reads per step served from device memory.
        device_bytes: Per rank (the busiest): ``{"topology", "features"}`` bytes.
        host_bytes: Per host: ``{"topology", "features"}`` bytes of the host tier.
        disk_bytes: ``{"topology", "features"}`` bytes left on disk.
        step_s: Predicted seconds per step and rank of the store-dependent work: ``gather``
            (feature rows) and ``sample`` (topology reads).
    """

    order: str
    cache_ratio: float
    topology_ratio: float
    feature_hit: float
    topology_hit: float
    device_bytes: dict[str, int]
    host_bytes: dict[str, int]
    disk_bytes: dict[str, int]
    step_s: dict[str, float]

    @property
    def time_s(self) -> float:
        """Gather + sample seconds per step."""
        return sum(self.step_s.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {**dataclasses.asdict(self), "time_s": self.time_s}


@dataclasses.dataclass(frozen=True)
class StoreCachePlan:
    """XGNN's placement of one workload: tiers, hit rates and the chosen order.

    Attributes:
        order: The chosen order, ``graph_first`` or ``features_first``.
        reason: One line: why this order.
        cache_ratio: Distinct feature rows on the device tier / ``N`` (XGNN's ``R%``).
        feature_hit: Fraction of input rows served from device memory (XGNN's ``H%``).
        topology_ratio: Nodes whose adjacency segment is on the device tier / ``N``.
        topology_hit: Fraction of topology reads served from device memory.
        device_bytes: Per rank: ``{"topology", "features"}`` bytes of the store's device shard.
        host_bytes: Per host: ``{"topology", "features"}`` bytes of the host tier.
        disk_bytes: ``{"topology", "features"}`` bytes left on disk.
        budget: Device bytes per rank given to the store.
        workspace: Device bytes per rank by component (``params``, ``optimizer``, ``inputs``,
            ``activations``, ``sampler``, ``rank_table``, ``reserve``).
        fits: Whether the workspace fits the device (``False``: budget 0, see ``reason``).
        placement: The partition placement (``None``: one partition per device).
        outcomes: Both orders, by name.
        batch: Per rank and step: ``seeds``, ``input_rows``, ``edges``, ``topology_reads``.
        steps: Steps per epoch.
        exact: Counts from the dataset (``True``) or from the degree model.
        degree_model: The degree model used (``None`` when exact).
        row_bytes: Bytes of one feature row as the store holds it (the tiers' rows).
        feature_dtype: The stored feature dtype (``store.feature_dtype``; ``None``: as the
            dataset stores them).
    """

    order: str
    reason: str
    cache_ratio: float
    feature_hit: float
    topology_ratio: float
    topology_hit: float
    device_bytes: dict[str, int]
    host_bytes: dict[str, int]
    disk_bytes: dict[str, int]
    budget: int
    workspace: dict[str, int]
    fits: bool
    placement: PlacementPlan | None
    outcomes: dict[str, OrderOutcome]
    batch: dict[str, float]
    steps: int
    exact: bool
    degree_model: DegreeModel | None = None
    row_bytes: int = 0
    feature_dtype: str | None = None

    @property
    def stores(self) -> tuple[tuple[int, ...], ...] | None:
        """Logical partitions each device stores (``None``: partition ``p`` on device ``p``)."""
        return None if self.placement is None else self.placement.stores

    @property
    def max_parts(self) -> int:
        """Partitions stored by the busiest device (1 without a placement)."""
        return 1 if self.placement is None else self.placement.max_parts

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the planner's ``knobs`` for the store)."""
        return {
            "order": self.order,
            "reason": self.reason,
            "cache_ratio": self.cache_ratio,
            "feature_hit": self.feature_hit,
            "topology_ratio": self.topology_ratio,
            "topology_hit": self.topology_hit,
            "device_bytes": dict(self.device_bytes),
            "host_bytes": dict(self.host_bytes),
            "disk_bytes": dict(self.disk_bytes),
            "budget": self.budget,
            "workspace": dict(self.workspace),
            "fits": self.fits,
            "stores": None if self.stores is None else [list(s) for s in self.stores],
            "max_parts": self.max_parts,
            "outcomes": {k: v.to_dict() for k, v in self.outcomes.items()},
            "batch": dict(self.batch),
            "steps": self.steps,
            "exact": self.exact,
            "degree_model": None if self.degree_model is None else repr(self.degree_model),
            "row_bytes": self.row_bytes,
            "feature_dtype": self.feature_dtype,
        }

    def __repr__(self) -> str:
        gib = 2**30
        return (
            f"StoreCachePlan(order={self.order!r}, cache_ratio={self.cache_ratio:.3f}, "
            f"feature_hit={self.feature_hit:.3f}, topology_ratio={self.topology_ratio:.3f}, "
            f"topology_hit={self.topology_hit:.3f}, budget={self.budget / gib:.2f}GiB, "
            f"device={{topology: {self.device_bytes['topology'] / gib:.2f}GiB, features: "
            f"{self.device_bytes['features'] / gib:.2f}GiB}}, max_parts={self.max_parts}, "
            f"exact={self.exact})"
        )


# ---------------------------------------------------------------------------------- degrees
@dataclasses.dataclass(frozen=True)
class DegreeModel:
    """In-degrees of a graph known only by its counts (Chung-Lu with Zipf weights).

    Node ``k`` (``k = 1..N``, hottest first) has weight ``k^-alpha`` with ``alpha = 1 / (exponent
    - 1)``, so the in-degree tail follows ``P(deg = d) ~ d^-exponent``; its in-degree is Poisson
    with mean ``lambda_k = E * w_k / sum(w)`` (capped at ``sqrt(E)``, the Chung-Lu bound that
    fleetgnn's synthetic generator also applies). Poisson draws give the zero-in-degree nodes
    naturally (papers100M at the default: 4% of the nodes); ``zero_fraction`` sets their share
    instead (the coldest ranks get no edges). A node is drawn as someone's neighbour in
    proportion to its in-degree (undirected graphs; for directed ones the degree the sampler
    follows), so a zero-in-degree node enters a batch only as a seed. Seeds are uniform over
    nodes (a random training subset).

    The default exponent 2.1 is the in-degree tail of the web graph (Broder et al., "Graph
    structure in the web", 2000) and close to Twitter's follower law (Kwak et al., WWW 2010:
    2.276); it is one constant for every dataset. Citation graphs have steeper tails (~3), which
    this model then overstates the skew of at the head; a higher exponent spreads accesses and
    lowers hit rates at small cache ratios.

    Attributes:
        exponent: Power-law exponent ``gamma > 1`` of the in-degree tail.
        zero_fraction: Fraction of nodes with in-degree 0 (``None``: what the Poisson draws
            give). The coldest ranks get no edges so that, with the other nodes' Poisson zeros,
            this share has in-degree 0 (when the draws alone give more, they are kept).
        grid: Points of the rank grid the expectation is integrated on.
    """

    exponent: float = 2.1
    zero_fraction: float | None = None
    grid: int = 2048

    def __post_init__(self) -> None:
        e = self.exponent
        if isinstance(e, bool) or not isinstance(e, (int, float)) or not 1.0 < e <= 10.0:
            raise ConfigError(
                f"DegreeModel.exponent must be a number in (1, 10] (got {e!r}); real graphs "
                "have 2 to 3"
            )
        z = self.zero_fraction
        if z is not None and (
            isinstance(z, bool) or not isinstance(z, (int, float)) or not 0.0 <= z < 1.0
        ):
            raise ConfigError(
                f"DegreeModel.zero_fraction must be None or a fraction in [0, 1) (got {z!r})"
            )
        if isinstance(self.grid, bool) or not isinstance(self.grid, int) or self.grid < 16:
            raise ConfigError(f"DegreeModel.grid must be an int >= 16 (got {self.grid!r})")

    def classes(self, num_nodes: int, num_edges: int) -> tuple[np.ndarray, np.ndarray]:
        """Degree classes, hottest first: ``(fraction of nodes [C], in-degree [C])``.

        Low expected degrees (< 64) are split into their Poisson integer classes; higher ones
        are one class each (a Poisson of mean >= 64 varies by < 13%).
        """
        if self.zero_fraction is None:
            return self._classes(num_nodes, num_edges, 0.0)
        target = float(self.zero_fraction)
        lo, hi = 0.0, target  # nodes without edges, besides the actives' Poisson zeros
        frac, deg = self._classes(num_nodes, num_edges, 0.0)
        if float(frac[deg == 0].sum()) >= target:
            return frac, deg  # the Poisson draws alone give at least the requested share
        for _ in range(40):  # bisection: the total share of in-degree 0 equals the target
            mid = 0.5 * (lo + hi)
            frac, deg = self._classes(num_nodes, num_edges, mid)
            if float(frac[deg == 0].sum()) < target:
                lo = mid
            else:
                hi = mid
        frac, deg = self._classes(num_nodes, num_edges, hi)
        return frac, deg

    def _classes(
        self, num_nodes: int, num_edges: int, zero: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """The classes with a fraction ``zero`` of the nodes given no edges at all."""
        n, e = float(num_nodes), float(num_edges)
        if n <= 0 or e <= 0:
            return np.ones(1), np.zeros(1)
        active = n * (1.0 - zero)
        alpha = 1.0 / (self.exponent - 1.0)
        edges_u = np.concatenate([[0.0], np.logspace(math.log10(1.0 / active), 0.0, self.grid)])
        u = 0.5 * (edges_u[1:] + edges_u[:-1])
        width = np.diff(edges_u) * (1.0 - zero)  # fraction of all nodes per grid point
        w = (u * active) ** -alpha
        lam = e * w / float(np.sum(w * width * n))
        cap = math.sqrt(e)
        for _ in range(8):  # clip to the Chung-Lu bound, keep the edge total
            over = lam > cap
            if not over.any():
                break
            lam[over] = cap
            rest = ~over
            lam[rest] *= (e - float(np.sum(lam[over] * width[over] * n))) / float(
                np.sum(lam[rest] * width[rest] * n)
            )
        small = lam < 64.0
        dmax = 160
        d = np.arange(dmax + 1, dtype=np.float64)
        # Poisson pmf in log space (no scipy): log p = d log(lam) - lam - lgamma(d + 1)
        lg = np.array([math.lgamma(k + 1.0) for k in range(dmax + 1)])
        lam_s = lam[small][:, None]
        with np.errstate(divide="ignore"):
            logp = d[None, :] * np.log(lam_s) - lam_s - lg[None, :]
        pmf = np.exp(logp)
        pmf[:, 0] = np.exp(-lam_s[:, 0])
        frac_int = (pmf * width[small][:, None]).sum(axis=0)
        frac = np.concatenate([frac_int, width[~small], [zero]])
        deg = np.concatenate([d, lam[~small], [0.0]])
        keep = frac > 0
        frac, deg = frac[keep], deg[keep]
        order = np.argsort(-deg, kind="stable")
        frac, deg = frac[order], deg[order]
        return frac / frac.sum(), deg

    def zero_share(self, num_nodes: int, num_edges: int) -> float:
        """Fraction of nodes with in-degree 0 under this model."""
        frac, deg = self.classes(num_nodes, num_edges)
        return float(frac[deg == 0].sum())


# ---------------------------------------------------------------------------------- demand
@dataclasses.dataclass
class _Layer:
    """One sampled block per rank and step, input side first: sources, destinations, edges."""

    src: float
    dst: float
    edges: float


class _Demand(Protocol):
    """What a step reads per rank, as shares of a degree-ranked hot prefix (both count paths)."""

    seeds: float
    input_rows: float
    topology_reads: float
    layers: list[_Layer]

    def feature_share(self, k: float) -> float:
        """Fraction of input rows whose node has hot rank < ``k``."""
        ...

    def topology_share(self, k: float) -> float:
        """Fraction of topology reads of nodes with hot rank < ``k``."""
        ...


class _ShapeDemand:
    """The expected batch of a degree model: per degree class, the chance to be in the batch."""

    def __init__(self, wl: Workload, per_rank: int, model: DegreeModel) -> None:
        n, e = wl.num_nodes, wl.num_edges
        frac, deg = model.classes(n, e)
        self.frac, self.deg = frac, deg
        self.cum_nodes = np.concatenate([[0.0], np.cumsum(frac)]) * n
        self.cum_nodes[-1] = float(n)  # exactly: a full prefix is every node
        nodes_c = frac * n
        seed_p = min(1.0, per_rank / max(n, 1))  # a random training subset: uniform seeds
        p = np.full(frac.size, seed_p)  # chance of each class's node to be in the batch
        draws = 0.0
        reads = nodes_c * p  # in_degree of the seeds
        layers = []
        for f in wl.fanouts:
            take = deg if f < 0 else np.minimum(deg, float(f))
            dst_c = nodes_c * p
            edges_c = dst_c * take
            edges = float(edges_c.sum())
            draws += edges
            p_new = 1.0 - (1.0 - seed_p) * np.exp(-draws * deg / max(float(e), 1.0))
            p_new = np.maximum(p_new, p)
            reads = reads + edges_c + nodes_c * (p_new - p)  # neighbours read, new in_degree
            layers.append(
                _Layer(src=float((nodes_c * p_new).sum()), dst=float(dst_c.sum()), edges=edges)
            )
            p = p_new
        layers.reverse()  # input side first, as the blocks
        self.layers = layers
        self.seeds = float(per_rank)
        rows_c = nodes_c * p
        self.input_rows = float(rows_c.sum())
        self.topology_reads = float(reads.sum())
        self._rows = np.concatenate([[0.0], np.cumsum(rows_c)])
        self._reads = np.concatenate([[0.0], np.cumsum(reads)])

    def _share(self, cum: np.ndarray, k: float) -> float:
        if cum[-1] <= 0:
            return 0.0
        return float(np.interp(k, self.cum_nodes, cum) / cum[-1])

    def feature_share(self, k: float) -> float:
        """Fraction of input rows whose node has hot rank < ``k`` (linear inside a class)."""
        return self._share(self._rows, k)

    def topology_share(self, k: float) -> float:
        """Fraction of topology reads of nodes with hot rank < ``k``."""
        return self._share(self._reads, k)

    def topology_prefix(self, cap: float) -> tuple[float, float]:
        """``(nodes, bytes)`` of the longest hot prefix of CSC segments within ``cap`` bytes."""
        per_node = SHAPE_ID_BYTES * (1.0 + self.deg)
        cum_bytes = np.concatenate([[0.0], np.cumsum(self.frac * per_node)]) * self.cum_nodes[-1]
        if cap >= cum_bytes[-1]:
            return float(self.cum_nodes[-1]), float(cum_bytes[-1])
        k = float(math.floor(np.interp(cap, cum_bytes, self.cum_nodes)))  # whole segments
        return k, float(np.interp(k, self.cum_nodes, cum_bytes))

    def topology_bytes(self, k0: float, k1: float) -> float:
        """Topology bytes of hot ranks ``[k0, k1)``."""
        per_node = SHAPE_ID_BYTES * (1.0 + self.deg)
        cum_bytes = np.concatenate([[0.0], np.cumsum(self.frac * per_node)]) * self.cum_nodes[-1]
        return float(
            np.interp(k1, self.cum_nodes, cum_bytes) - np.interp(k0, self.cum_nodes, cum_bytes)
        )


class _ExactDemand:
    """Pre-sampled batches of the dataset: node IDs read per step, hot ranks from a plan."""

    def __init__(self, wl: Workload, per_rank: int, steps: int, seed: int) -> None:
        import torch

        from fleetgnn.sampling import GraphTopology, NeighborSampler, SeedLoader

        g = wl.graph
        assert g is not None
        if g.train_mask is None or not np.asarray(g.train_mask).any():
            raise ConfigError(
                f"dataset {g.name!r} has no training nodes; the store model pre-samples batches "
                "of training seeds (give a train_mask)"
            )
        train = torch.from_numpy(np.flatnonzero(np.asarray(g.train_mask)))
        loader = SeedLoader(train, per_rank, seed=seed, shuffle=True)
        sampler = NeighborSampler(GraphTopology(g), list(wl.fanouts), seed=seed)
        k = max(1, min(steps, loader.num_batches))
        weighted = g.edge_weight is not None  # the sampler then reads the weights too
        rows, reads = [], []
        layer_sums = np.zeros((len(wl.fanouts), 3))
        seeds = 0
        for s in range(k):
            batch = loader.batch(0, s)
            blocks = sampler.sample_from_nodes(batch, step=s).blocks
            seeds += batch.numel()
            rows.append(blocks[0].src_ids.numpy())
            reads.append(batch.numpy())  # in_degree of the seeds
            for i, b in enumerate(blocks):
                dst = b.src_ids[: b.num_dst].numpy()
                per_dst = np.diff(b.indptr.numpy())
                per_edge = np.repeat(dst, per_dst)
                reads.append(per_edge)  # one read per sampled neighbour
                if weighted:
                    reads.append(per_edge)  # and one per sampled edge weight
                reads.append(b.src_ids[b.num_dst :].numpy())  # in_degree of the new sources
                layer_sums[i] += (b.num_src, b.num_dst, b.indices.numel())
        self.rows = np.concatenate(rows)
        self.reads = np.concatenate(reads)
        self.seeds = seeds / k
        self.input_rows = self.rows.size / k
        self.topology_reads = self.reads.size / k
        self.layers = [_Layer(*(v / k for v in row)) for row in layer_sums.tolist()]
        self.steps_sampled = k
        self._feat_rank: np.ndarray | None = None
        self._topo_rank: np.ndarray | None = None

    def ranked(self, rank_of: np.ndarray) -> None:
        """Use ``rank_of`` (the plan's hot rank of every node) for the shares."""
        self._feat_rank = np.sort(rank_of[self.rows].astype(np.int64))
        self._topo_rank = np.sort(rank_of[self.reads].astype(np.int64))

    @staticmethod
    def _share(sorted_rank: np.ndarray | None, k: float) -> float:
        if sorted_rank is None or sorted_rank.size == 0:
            return 0.0
        return float(np.searchsorted(sorted_rank, k, side="left") / sorted_rank.size)

    def feature_share(self, k: float) -> float:
        """Fraction of input rows whose node has hot rank < ``k``."""
        return self._share(self._feat_rank, k)

    def topology_share(self, k: float) -> float:
        """Fraction of topology reads of nodes with hot rank < ``k``."""
        return self._share(self._topo_rank, k)


# ---------------------------------------------------------------------------------- checks
def _check_int(name: str, value: object, low: int, hint: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ConfigError(f"'{name}' must be an int >= {low} (got {value!r}){hint}")
    return int(value)


def _check_inputs(
    wl: object, hw: object, world: object, device_budget: object, host_budget: object, order: object
) -> int:
    if not isinstance(wl, Workload):
        raise ConfigError(
            f"'wl' must be a fleetgnn.cost.Workload (got {type(wl).__name__}); build one with "
            "workload_from_config"
        )
    if not isinstance(hw, HardwareProfile):
        raise ConfigError(
            f"'hw' must be a HardwareProfile (got {type(hw).__name__}); use "
            "fleetgnn.cost.load_profile(name)"
        )
    world = _check_int("world", world, 1)
    if world > hw.world_size:
        raise ConfigError(
            f"'world' = {world} exceeds hardware profile {hw.name!r} ({hw.num_hosts} host(s) x "
            f"{hw.num_devices} devices); use at most {hw.world_size} ranks"
        )
    for name, v in (("device_budget", device_budget), ("host_budget", host_budget)):
        if v is not None:
            _check_int(name, v, 0, "; give bytes, or None to derive it from the profile")
    if order is not None and order not in ORDERS:
        raise ConfigError(
            f"'order' must be None, 'graph_first' or 'features_first' (got {order!r})"
        )
    _check_int("wl.num_nodes", wl.num_nodes, 1)
    _check_int("wl.num_edges", wl.num_edges, 0)
    _check_int("wl.num_features", wl.num_features, 1, "; the store model places feature rows")
    _check_int(
        "wl.batch_size", wl.batch_size, world, "; the batch is global, one seed per rank at least"
    )
    if not wl.fanouts or any(
        isinstance(f, bool) or not isinstance(f, (int, np.integer)) or (f < 1 and f != -1)
        for f in wl.fanouts
    ):
        raise ConfigError(
            f"'wl.fanouts' must be a non-empty sequence of ints >= 1 or -1 (got {wl.fanouts!r})"
        )
    if len(wl.fanouts) != wl.model.num_layers:
        raise ConfigError(
            f"'wl.fanouts' has {len(wl.fanouts)} hops but the model has "
            f"{wl.model.num_layers} layers; give one fanout per layer"
        )
    return world


# ---------------------------------------------------------------------------------- placement
def _placement(hw: HardwareProfile, world: int) -> PlacementPlan | None:
    """XGNN's placement on the first ``world`` devices' peer matrix.

    ``None`` (one partition per device) when they are fully connected, for one rank, or when
    the ranks span several hosts.
    """
    if world < 2 or world > hw.num_devices or hw.peer is None:
        return None
    sub = np.asarray(hw.peer, dtype=np.float64)[:world, :world]
    off = sub[~np.eye(world, dtype=bool)]
    if (off > 0).all():
        return None  # fully connected: one partition per device
    return solve_placement(sub)


def _sources(placement: PlacementPlan | None, world: int) -> list[list[int]]:
    if placement is None:
        return [list(range(world)) for _ in range(world)]
    return [list(s) for s in placement.sources]


# ---------------------------------------------------------------------------------- workspace
def _layer_shape(m: ModelShape, i: int) -> ModelShape:
    return dataclasses.replace(
        m,
        widths=(m.widths[i], m.widths[i + 1]),
        agg_widths=(m.agg_widths[i],),
        heads=(m.heads[i],),
        grad_through_agg=(m.grad_through_agg[i],),
        cacheable=(m.cacheable[i],),
    )


def _workspace(wl: Workload, demand: _Demand) -> dict[str, int]:
    """Device bytes per rank of one batch besides the store (see :class:`StoreCachePlan`)."""
    m = wl.model
    params = m.params * m.elem
    acts = 0.0
    for i, layer in enumerate(demand.layers):  # input side first
        # outputs and saved tensors live on the destinations; inputs and their dropout masks on
        # every source row
        acts += _layer_shape(m, i).activation_bytes(layer.dst, layer.edges)
        acts += 2.0 * m.widths[i] * max(layer.src - layer.dst, 0.0) * m.elem
    edges = sum(layer.edges for layer in demand.layers)
    id_bytes = 4 if wl.num_nodes < 2**31 else 8
    return {
        "params": int(2 * params),  # weights and gradients
        "optimizer": int(2 * params),  # Adam's two moments
        "inputs": int(demand.input_rows * wl.num_features * m.elem),
        "activations": int(acts),
        "sampler": int(edges * SAMPLER_EDGE_BYTES),
        "rank_table": int(wl.num_nodes * id_bytes),  # hot rank of every node (XGNN's hashtable)
        "reserve": RUNTIME_RESERVE,
    }


# ---------------------------------------------------------------------------------- tiers
@dataclasses.dataclass
class _Tiers:
    """Rows per tier of one order (hot-rank prefixes) and bytes."""

    feat_dev: float
    feat_host: float
    topo_dev: float
    topo_host: float
    device_bytes: dict[str, int]
    host_bytes: dict[str, int]
    disk_bytes: dict[str, int]


def _shape_tiers(
    demand: _ShapeDemand,
    wl: Workload,
    order: str,
    cap_dev: float,
    host: float,
    world: int,
    parts: int,
) -> _Tiers:
    """Emulate :func:`plan_store` on the degree classes: device prefix, host run, rest on disk."""
    n = float(wl.num_nodes)
    row = float(wl.feature_row_bytes())  # stored bytes (store.feature_dtype)
    topo_total = demand.topology_bytes(0.0, n)
    feat_total = n * row
    kinds = ["topology", "features"] if order == "graph_first" else ["features", "topology"]
    dev_left, host_left = cap_dev, host
    got: dict[str, tuple[float, float, float, float]] = {}
    for kind in kinds:  # device pass: each kind takes what the kinds before it left
        if kind == "topology":
            k, b = demand.topology_prefix(dev_left)
        else:
            k = min(n, math.floor(dev_left / row)) if row else n
            b = k * row
        got[kind] = (k, b, 0.0, 0.0)
        dev_left -= b
    for kind in kinds:  # host pass, same order
        k, b, _, _ = got[kind]
        if kind == "topology":
            rest = demand.topology_bytes(k, n)
            if host_left >= rest:
                kh, bh = n - k, rest
            else:
                start = demand.topology_bytes(0.0, k)
                kh = demand.topology_prefix(start + host_left)[0] - k
                bh = host_left
        else:
            kh = min(n - k, math.floor(host_left / row)) if row else n - k
            bh = kh * row
        got[kind] = (k, b, kh, bh)
        host_left -= bh
    tk, tb, tkh, tbh = got["topology"]
    fk, fb, fkh, fbh = got["features"]
    share = parts / world  # the busiest device stores max_parts of the N partitions
    return _Tiers(
        feat_dev=fk,
        feat_host=fkh,
        topo_dev=tk,
        topo_host=tkh,
        device_bytes={"topology": int(tb * share), "features": int(fb * share)},
        host_bytes={"topology": int(tbh), "features": int(fbh)},
        disk_bytes={
            "topology": int(max(topo_total - tb - tbh, 0.0)),
            "features": int(max(feat_total - fb - fbh, 0.0)),
        },
    )


def _exact_tiers(
    wl: Workload,
    order: str,
    budgets: TierBudgets,
    world: int,
    placement: PlacementPlan | None,
    hotness: Any,
) -> tuple[_Tiers, Any]:
    plan = plan_store(
        wl.graph,
        budgets,
        world,
        hotness=hotness,
        order=order,
        placement=placement,
        feature_dtype=wl.feature_dtype,  # the stored rows' bytes, as the engine's store plans
    )
    t, f = plan.topology, plan.features
    assert f is not None  # checked: the dataset has features
    return (
        _Tiers(
            feat_dev=f.num_device,
            feat_host=f.num_host,
            topo_dev=t.num_device,
            topo_host=t.num_host,
            device_bytes={
                "topology": int(t.device_bytes.max()),
                "features": int(f.device_bytes.max()),
            },
            host_bytes={"topology": int(t.host_bytes), "features": int(f.host_bytes)},
            disk_bytes={"topology": int(t.disk_bytes), "features": int(f.disk_bytes)},
        ),
        plan,
    )


# ---------------------------------------------------------------------------------- time
def _device_read_s(
    nbytes: float, hw: HardwareProfile, world: int, sources: list[list[int]]
) -> float:
    """Seconds for the busiest reader to read ``nbytes`` spread evenly over the partitions."""
    if nbytes <= 0:
        return 0.0
    if world == 1:
        return nbytes / float(hw.gather_rate)
    worst = 0.0
    for r in range(world):  # loop over readers and sources (N <= 16)
        per_src: dict[int, int] = {}
        for j in sources[r]:
            per_src[j] = per_src.get(j, 0) + 1
        for j, cnt in per_src.items():
            nd = hw.num_devices
            if j == r:
                bw = float(hw.gather_rate)
            elif r // nd == j // nd:  # the same host: its peer links
                bw = float(hw.peer_bandwidth(r % nd, j % nd))
            else:
                bw = float(hw.bandwidth["net"])
            worst = max(worst, nbytes * cnt / world / bw)
    return worst


def _outcome(
    order: str,
    tiers: _Tiers,
    demand: _Demand,
    wl: Workload,
    hw: HardwareProfile,
    world: int,
    sources: list[list[int]],
) -> OrderOutcome:
    n = wl.num_nodes
    # a feature row as the store holds it (store.feature_dtype, else the dataset's dtype), or
    # as the model computes it
    row = wl.feature_row_bytes()
    f_dev = demand.feature_share(tiers.feat_dev)
    f_host = demand.feature_share(tiers.feat_dev + tiers.feat_host) - f_dev
    t_dev = demand.topology_share(tiers.topo_dev)
    t_host = demand.topology_share(tiers.topo_dev + tiers.topo_host) - t_dev
    rows, reads = demand.input_rows, demand.topology_reads
    sector_row = math.ceil(row / SECTOR_BYTES) * SECTOR_BYTES  # a row moves whole sectors
    h2d = float(hw.bandwidth["h2d"])
    disk = float(hw.bandwidth["disk"])
    gather = (
        _device_read_s(rows * f_dev * sector_row, hw, world, sources)
        + rows * f_host * sector_row / h2d
        + rows * (1.0 - f_dev - f_host) * max(sector_row, DISK_PAGE) / disk
    )
    sample = (
        _device_read_s(reads * t_dev * SECTOR_BYTES, hw, world, sources)
        + reads * t_host * RANDOM_READ_BYTES / h2d
        + reads * (1.0 - t_dev - t_host) * DISK_PAGE / disk
    )
    return OrderOutcome(
        order=order,
        cache_ratio=float(tiers.feat_dev) / n,
        topology_ratio=float(tiers.topo_dev) / n,
        feature_hit=f_dev,
        topology_hit=t_dev,
        device_bytes=tiers.device_bytes,
        host_bytes=tiers.host_bytes,
        disk_bytes=tiers.disk_bytes,
        step_s={"gather": gather, "sample": sample},
    )


def _reason(chosen: OrderOutcome, other: OrderOutcome, given: bool) -> str:
    def pct(x: float) -> str:
        return f"{100 * x:.0f}%"

    def desc(o: OrderOutcome) -> str:
        return (
            f"{o.order}: {o.time_s * 1e3:.3g} ms/step (features {pct(o.cache_ratio)} cached, "
            f"{pct(o.feature_hit)} hits; topology {pct(o.topology_ratio)} of nodes, "
            f"{pct(o.topology_hit)} of reads)"
        )

    if given:
        return f"order {chosen.order} as given; {desc(chosen)} vs {desc(other)}"
    if math.isclose(chosen.time_s, other.time_s, rel_tol=1e-9, abs_tol=1e-12):
        return (
            f"both orders place the same rows ({desc(chosen)}); graph_first, XGNN's default, "
            "is kept"
        )
    if chosen.order == "graph_first":
        why = (
            "topology misses are random 4-byte reads over PCIe (a sector and packet overhead "
            "each), so the adjacency is worth its device bytes"
        )
    else:
        why = (
            "device memory is tight: the hottest feature rows save more PCIe bytes per device "
            "byte than adjacency segments (XGNN Sec. 6.8)"
        )
    return f"{desc(chosen)} beats {desc(other)}: {why}"


# ---------------------------------------------------------------------------------- entry
def plan_feature_cache(
    wl: Workload,
    hw: HardwareProfile,
    world: int,
    *,
    device_budget: int | None = None,
    host_budget: int | None = None,
    order: str | None = None,
    degree_model: DegreeModel | None = None,
    steps: int = 4,
    seed: int = 0,
) -> StoreCachePlan:
    """Decide XGNN's store placement for a mini-batch workload on a hardware profile.

    Each of the ``world`` ranks samples ``wl.batch_size // world`` seeds per step (the batch is
    global, as in :class:`~fleetgnn.cost.models.Workload`) with ``wl.fanouts`` listed from the
    seeds (``fanouts[0]`` per seed, as :class:`~fleetgnn.sampling.NeighborSampler`).

    The planner should use ``cache_ratio`` and ``feature_hit`` to split a step's gathered rows
    between device (``local``/``peer``) and ``h2d`` traffic, ``topology_hit`` to price sampling,
    ``device_bytes`` + ``workspace`` as the device tier's peak per rank, ``host_bytes`` as the
    host tier's, and ``order`` as the store's ``order`` knob (``placement`` is what
    ``store.topology`` resolves to on the profile).

    Args:
        wl: The workload; with ``wl.graph`` the counts are exact (:func:`plan_store` on the
            store's real row bytes and pre-sampled batches), without it they come from
            ``degree_model``.
        hw: The hardware profile (device memory, ``peer`` matrix, bandwidths).
        world: Ranks (devices); the placement solver runs on the first ``world`` devices of one
            host when they are not fully connected.
        device_budget: Store bytes per rank (default: device memory minus the workspace and
            :data:`RUNTIME_RESERVE`).
        host_budget: Host-tier bytes per host (default: the profile's host memory).
        order: Force ``"graph_first"`` or ``"features_first"`` (default: the faster one).
        degree_model: The shape path's degree model (default :class:`DegreeModel`).
        steps: Batches pre-sampled per rank on the exact path.
        seed: Sampling seed of the exact path.

    Returns:
        The :class:`StoreCachePlan`.

    Raises:
        ConfigError: On a bad argument (one line naming it), or a dataset without features or
            training nodes.
    """
    world = _check_inputs(wl, hw, world, device_budget, host_budget, order)
    steps = _check_int("steps", steps, 1)
    seed = _check_int("seed", seed, 0)
    if degree_model is not None and not isinstance(degree_model, DegreeModel):
        raise ConfigError(
            f"'degree_model' must be a DegreeModel or None (got {type(degree_model).__name__})"
        )
    exact = wl.graph is not None
    if exact and wl.graph.x is None:
        raise ConfigError(f"dataset {wl.graph.name!r} has no node features 'x' to place")
    per_rank = max(1, wl.batch_size // world)
    model = None if exact else (degree_model or DegreeModel())
    demand: _Demand = (
        _ExactDemand(wl, per_rank, steps, seed) if exact else _ShapeDemand(wl, per_rank, model)
    )
    workspace = _workspace(wl, demand)
    used = sum(workspace.values())
    fits = used <= int(hw.device_memory)
    budget = (
        int(device_budget) if device_budget is not None else max(int(hw.device_memory) - used, 0)
    )
    host = int(host_budget) if host_budget is not None else int(hw.host_memory)
    placement = _placement(hw, world)
    parts = 1 if placement is None else placement.max_parts
    sources = _sources(placement, world)
    outcomes: dict[str, OrderOutcome] = {}
    if exact:
        hotness = hotness_order(wl.graph)
        assert isinstance(demand, _ExactDemand)
        demand.ranked(hotness.rank_of)
        budgets = TierBudgets(device=budget, host=host)
        for o in ORDERS:
            tiers, _ = _exact_tiers(wl, o, budgets, world, placement, hotness)
            outcomes[o] = _outcome(o, tiers, demand, wl, hw, world, sources)
    else:
        assert isinstance(demand, _ShapeDemand)
        cap = budget * world / parts  # distinct bytes the device tier holds
        for o in ORDERS:
            tiers = _shape_tiers(demand, wl, o, cap, host, world, parts)
            outcomes[o] = _outcome(o, tiers, demand, wl, hw, world, sources)
    if order is None:
        g, f = outcomes["graph_first"], outcomes["features_first"]
        chosen = f if f.time_s < g.time_s and not math.isclose(f.time_s, g.time_s) else g
    else:
        chosen = outcomes[order]
    other = outcomes["features_first" if chosen.order == "graph_first" else "graph_first"]
    reason = _reason(chosen, other, order is not None)
    if not fits and device_budget is None:
        reason = (
            f"the batch workspace ({used / 2**30:.2f} GiB) exceeds the device's "
            f"{int(hw.device_memory) / 2**30:.2f} GiB: nothing is cached; " + reason
        )
    if exact:
        steps_epoch = math.ceil(int(np.asarray(wl.graph.train_mask).sum()) / (per_rank * world))
    else:
        steps_epoch = math.ceil(wl.num_train / (per_rank * world))
    return StoreCachePlan(
        order=chosen.order,
        reason=reason,
        cache_ratio=chosen.cache_ratio,
        feature_hit=chosen.feature_hit,
        topology_ratio=chosen.topology_ratio,
        topology_hit=chosen.topology_hit,
        device_bytes=dict(chosen.device_bytes),
        host_bytes=dict(chosen.host_bytes),
        disk_bytes=dict(chosen.disk_bytes),
        budget=budget,
        workspace=workspace,
        fits=fits,
        placement=placement,
        outcomes=outcomes,
        batch={
            "seeds": float(demand.seeds),
            "input_rows": float(demand.input_rows),
            "edges": float(sum(layer.edges for layer in demand.layers)),
            "topology_reads": float(demand.topology_reads),
        },
        steps=max(steps_epoch, 1),
        exact=exact,
        degree_model=model,
        row_bytes=int(wl.feature_row_bytes()),
        feature_dtype=wl.feature_dtype,
    )
