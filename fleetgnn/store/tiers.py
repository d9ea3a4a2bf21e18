"""Tier plans: which rows of a graph's topology and features live on device, host or disk.

:func:`plan_tiers` walks the hot order (:mod:`fleetgnn.store.hotness`): the hottest rows fill the
device tier, split across the ``N`` ranks by hot rank modulo ``N`` (XGNN / WholeGraph), the next
rows fill the host tier, the rest stay on disk (the dataset's memory-mapped arrays).
:func:`plan_store` plans both kinds, which compete for the device budget; ``order`` says which is
served first. The cuts are found by walking the hot order in blocks with running byte sums, up to
the end of the host tier; nothing per node is materialised. Hot rank ``k < num_device`` lives on

==================  =====================  ======================
hot rank ``k``      owner rank             local row on the owner
==================  =====================  ======================
``0, N, 2N, ...``   ``0``                  ``0, 1, 2, ...``
``1, N+1, ...``     ``1``                  ``0, 1, ...``
``k``               ``k mod N``            ``k div N``
==================  =====================  ======================

so shard sizes differ by at most one row and no mapping table is needed beyond the hot rank. On
an asymmetric device topology a :class:`~fleetgnn.store.placement.PlacementPlan` (XGNN's solver)
says which partitions each device's shard holds instead: device ``d``'s shard holds every
partition in ``plan.stores[d]`` and device ``d`` reads partition ``p`` from
``plan.sources[d][p]``. The uniform topology gives one partition per device, exactly the modulo
split.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from fleetgnn.config.topology import check_world
from fleetgnn.config.units import parse_bytes
from fleetgnn.errors import ConfigError
from fleetgnn.graph.compact_rows import stored_row_bytes
from fleetgnn.graph.csc import Graph
from fleetgnn.store.hotness import HotnessRanking, hotness_order, id_dtype, inverse_order
from fleetgnn.store.placement import PlacementPlan, check_placement

TierOrder = Literal["graph_first", "features_first"]
TIERS: tuple[str, ...] = ("device", "host", "disk")
DEVICE, HOST, DISK = 0, 1, 2
#: Hot ranks handled per step by the tier walks: their temporaries are a few block-sized int64
#: arrays (1 MiB each), whatever the graph's size.
_PLAN_BLOCK = 1 << 17


@dataclasses.dataclass(frozen=True)
class TierBudgets:
    """Memory budgets per tier, in bytes (disk is unlimited).

    Attributes:
        device: Bytes of device memory each rank gives to its shard (features + topology): per
            rank.
        host: Bytes of host memory for the host tier: per host. The host tier is one copy per
            machine, shared by all the ranks on it, and holds at most ``host`` bytes however many
            ranks the machine runs (``store.host_budget``).
    """

    device: int = 0
    host: int = 0

    def __post_init__(self) -> None:
        for f in ("device", "host"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ConfigError(
                    f"TierBudgets.{f} must be an int number of bytes >= 0 (got {v!r}); "
                    f"use TierBudgets.parse(device='64MB', host='1GiB') for strings"
                )
            object.__setattr__(self, f, int(v))

    @classmethod
    def parse(cls, device: str | int | float = 0, host: str | int | float = 0) -> TierBudgets:
        """Build budgets from strings like ``"64MB"`` or ``"1.5GiB"`` (see :func:`parse_bytes`)."""
        return cls(parse_bytes(device, "device"), parse_bytes(host, "host"))

    @classmethod
    def check(cls, budgets: object, *, none_is_default: bool = True) -> TierBudgets:
        """``budgets``, checked to be a :class:`TierBudgets`.

        ``None`` is the default, nothing on device or host, when ``none_is_default``.

        Raises:
            ConfigError: If it is anything else.
        """
        if budgets is None and none_is_default:
            return cls()
        if not isinstance(budgets, TierBudgets):
            raise ConfigError(
                f"'budgets' must be a TierBudgets (got {type(budgets).__name__}); e.g. "
                "TierBudgets.parse(device='64MB', host='1GiB')"
            )
        return budgets

    def __repr__(self) -> str:
        return f"TierBudgets(device={_fmt_bytes(self.device)}, host={_fmt_bytes(self.host)})"


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n}"  # pragma: no cover


def resolve_sampling(choice: str, device_type: str, need: int, budget: int) -> str | None:
    """Where ``store.sampling`` samples, for the engine and its cost model alike.

    ``"device"`` (a CSC replica of ``need`` bytes within the device budget ``budget``) or
    ``"host"``; ``None``: ``device`` was asked and does not fit. ``auto`` takes the device on a
    GPU (``device_type`` ``"cuda"``) when the replica is at most half the budget.
    """
    if choice == "device":
        return "device" if need <= budget else None
    if choice == "auto":
        return "device" if device_type == "cuda" and need <= budget // 2 else "host"
    return "host"


def feature_row_bytes(graph: Graph, feature_dtype: str | None = None) -> int:
    """Bytes of one feature row as stored (0 without features).

    ``F * itemsize`` of the dataset, or with ``feature_dtype`` (``store.feature_dtype``) the
    compact row's, :meth:`FeatureCodec.row_bytes <fleetgnn.graph.compact.FeatureCodec.row_bytes>`;
    a dataset written compact counts its stored row
    (:func:`~fleetgnn.graph.compact_rows.stored_row_bytes`).
    """
    return stored_row_bytes(graph.x, feature_dtype)


def topology_row_bytes(graph: Graph) -> np.ndarray:
    """Bytes of each node's CSC segment: ``8 + deg * (index bytes [+ weight bytes])``, int64 [N].

    The 8 bytes are the node's ``indptr`` entry; an int32 index is 4 bytes per in-edge.
    """
    per_edge = graph.indices.dtype.itemsize
    if graph.edge_weight is not None:
        per_edge += graph.edge_weight.dtype.itemsize
    return 8 + graph.in_degrees().astype(np.int64) * per_edge


@dataclasses.dataclass(frozen=True, eq=False)
class TierPlan:
    """Where each row of one kind (features or topology) lives.

    Hot ranks ``[0, num_device)`` are on devices, ``[num_device, num_device + num_host)`` on the
    host (local row ``k - num_device``), the rest on disk (addressed by node ID). On the device
    tier hot rank ``k`` belongs to logical partition ``p = k mod N`` as row ``k div N`` of it.
    Without a :class:`PlacementPlan` device ``p`` stores partition ``p`` (local row ``k div N``).
    With one, device ``d``'s shard is the concatenation of the partitions ``placement.stores[d]``
    (ascending), and a reader ``r`` reads partition ``p`` from ``placement.sources[r][p]``. E.g.
    4 ranks on a ring (links 0-1 and 2-3 at 50, 1-2 and 3-0 at 25; 0-2 and 1-3 unlinked) store
    ``{0, 2}, {1, 3}, {0, 2}, {1, 3}``:

    ====  =====================  ==============================================
    rank  shard (local rows)     reads partitions 0, 1, 2, 3 from
    ====  =====================  ==============================================
    0     part 0, then part 2    0, 1, 0, 1
    1     part 1, then part 3    0, 1, 0, 1
    2     part 0, then part 2    2, 1, 2, 3
    3     part 1, then part 3    0, 3, 2, 3
    ====  =====================  ==============================================

    Attributes:
        kind: ``"features"`` or ``"topology"``.
        order: ``[V]`` node of each hot rank (int32 or int64, see :class:`HotnessRanking`).
        rank_of: ``[V]`` hot rank of each node (``order``'s dtype).
        world_size: Number of device ranks ``N``.
        num_device: Rows on the device tier (distinct rows, all ranks together; replicas of a
            partition are not counted twice).
        num_host: Rows on the host tier.
        device_bytes: int64 ``[N]`` bytes each rank's shard holds (replicas included).
        host_bytes: Bytes of the host tier (one copy per host).
        disk_bytes: Bytes left on disk.
        placement: The partition placement, or ``None`` for one partition per device.
        device_starts: int64 ``[N + 1]``, the block layout of a partition-aware plan
            (:func:`~fleetgnn.store.partitioned.plan_partitioned`): rank ``r``'s shard holds the
            hot ranks ``[device_starts[r], device_starts[r + 1])``, local row ``k -
            device_starts[r]``, shards of any sizes; ``None``: the modulo split above.
    """

    kind: str
    order: np.ndarray
    rank_of: np.ndarray
    world_size: int
    num_device: int
    num_host: int
    device_bytes: np.ndarray
    host_bytes: int
    disk_bytes: int
    placement: PlacementPlan | None = None
    device_starts: np.ndarray | None = None

    @property
    def num_rows(self) -> int:
        """Total rows ``V``."""
        return int(self.order.size)

    @property
    def num_disk(self) -> int:
        """Rows left on disk."""
        return self.num_rows - self.num_device - self.num_host

    def stores(self, rank: int) -> tuple[int, ...]:
        """Logical partitions ``rank``'s device shard holds, in shard order."""
        return (rank,) if self.placement is None else self.placement.stores[rank]

    def partition_sizes(self) -> np.ndarray:
        """Rows of each logical partition on the device tier, int64 ``[N]`` (differ by <= 1).

        With :attr:`device_starts` (the block layout) partition ``r`` is rank ``r``'s block, of
        any size.
        """
        if self.device_starts is not None:
            return np.diff(self.device_starts).astype(np.int64, copy=False)
        n = self.world_size
        p = np.arange(n, dtype=np.int64)
        return np.maximum(self.num_device - p + n - 1, 0) // n

    def partition_rows(self, part: int) -> np.ndarray:
        """Node IDs of logical partition ``part`` (hot ranks ``k mod N == part``), in row order."""
        if self.device_starts is not None:
            return self.order[int(self.device_starts[part]) : int(self.device_starts[part + 1])]
        return self.order[part : self.num_device : self.world_size]

    def shard_rows(self, rank: int) -> np.ndarray:
        """Node IDs stored by ``rank``'s device shard, in local-row order."""
        if self.device_starts is not None:
            return self.partition_rows(rank)
        if self.placement is None:
            return self.order[rank : self.num_device : self.world_size]
        return np.concatenate(
            [self.partition_rows(p) for p in self.placement.stores[rank]]  # loop over partitions
        )

    def host_rows(self) -> np.ndarray:
        """Node IDs of the host tier, in local-row order."""
        return self.order[self.num_device : self.num_device + self.num_host]

    def _routes(self, reader: int | None) -> tuple[np.ndarray, np.ndarray] | None:
        """``(source [N], offset [N])``: where ``reader`` reads each partition, at which row."""
        if self.placement is None:
            return None
        if reader is None or not 0 <= int(reader) < self.world_size:
            raise ConfigError(
                f"'reader' must be the reading rank in [0, {self.world_size}) when the plan has "
                f"a placement (got {reader!r}); pass reader=store.rank"
            )
        sizes = self.partition_sizes()
        source = np.asarray(self.placement.sources[int(reader)], dtype=np.int64)
        offset = np.empty(self.world_size, dtype=np.int64)
        for p in range(self.world_size):  # loop over partitions: p's first row in its source
            held = self.placement.stores[int(source[p])]
            offset[p] = int(sizes[list(held[: held.index(p)])].sum())
        return source, offset

    def locate(
        self, ids: np.ndarray, reader: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(tier, owner, local)`` of each node: tier 0/1/2 = device/host/disk.

        ``owner`` is the device rank ``reader`` reads the row from (``-1`` off-device): the
        partition's home ``k mod N`` without a placement, ``placement.sources[reader][k mod N]``
        with one, the rank whose block holds ``k`` with :attr:`device_starts`; ``local`` is the
        row within that rank's shard, the host tier, or the node ID on disk.

        Args:
            ids: int64 ``[n]`` node IDs.
            reader: The reading rank (required with a placement; ignored without).

        Returns:
            ``(tier int8 [n], owner int64 [n], local int64 [n])``.

        Raises:
            ConfigError: If the plan has a placement and ``reader`` is not a rank.
        """
        k = self.rank_of[ids].astype(np.int64, copy=False)
        tier = np.where(
            k < self.num_device, DEVICE, np.where(k < self.num_device + self.num_host, HOST, DISK)
        ).astype(np.int8)
        dev = tier == DEVICE
        if self.device_starts is not None:  # the block layout: rank r holds its own block
            part = np.searchsorted(self.device_starts, k, side="right") - 1
            part = np.minimum(part, self.world_size - 1)
            row = k - self.device_starts[part]
        else:
            row, part = np.divmod(k, self.world_size)  # partition k mod N, its row k div N
        routes = self._routes(reader)
        if routes is None:
            owner, dev_local = part, row
        else:
            source, offset = routes
            owner, dev_local = source[part], offset[part] + row
        owner = np.where(dev, owner, -1).astype(np.int64, copy=False)
        local = np.where(dev, dev_local, np.where(tier == HOST, k - self.num_device, ids))
        return tier, owner, local.astype(np.int64, copy=False)

    def __repr__(self) -> str:
        dev = ", ".join(_fmt_bytes(b) for b in self.device_bytes.tolist())
        parts = "" if self.placement is None else f", max_parts={self.placement.max_parts}"
        return (
            f"TierPlan({self.kind}: rows device={self.num_device} host={self.num_host} "
            f"disk={self.num_disk}; bytes per rank [{dev}], host={_fmt_bytes(self.host_bytes)}, "
            f"disk={_fmt_bytes(self.disk_bytes)}{parts})"
        )


def _blocks(start: int, stop: int, step: int | None = None) -> range:
    return range(start, stop, _PLAN_BLOCK if step is None else step)


#: Bytes of hot ranks ``[a, b)`` (int64 ``[b - a]``): how the tier walks read a kind's row sizes.
RowBytes = Callable[[int, int], np.ndarray]


def _fixed_rows(row_bytes: int) -> RowBytes:
    return lambda a, b: np.full(b - a, row_bytes, dtype=np.int64)


def _ordered_rows(row_bytes: np.ndarray, order: np.ndarray) -> RowBytes:
    return lambda a, b: row_bytes[order[a:b]].astype(np.int64, copy=False)


def _segment_rows(graph: Graph, order: np.ndarray) -> RowBytes:
    """Bytes of the CSC segments by hot rank (:func:`topology_row_bytes`, gathered per block)."""
    per_edge = graph.indices.dtype.itemsize
    if graph.edge_weight is not None:
        per_edge += graph.edge_weight.dtype.itemsize
    indptr = graph.indptr

    def rows(a: int, b: int) -> np.ndarray:
        nodes = order[a:b].astype(np.int64)
        deg = indptr[nodes + 1].astype(np.int64, copy=False)
        deg -= indptr[nodes]
        deg *= per_edge
        deg += 8
        return deg

    return rows


def _device_prefix(
    row_bytes: RowBytes,
    num_rows: int,
    budget: np.ndarray,
    world_size: int,
    stores: Sequence[Sequence[int]],
) -> tuple[int, np.ndarray]:
    """Longest hot prefix ``H`` whose partitions fit every device storing them, and its bytes.

    Device ``d`` pays for the rows ``k < H`` of every partition in ``stores[d]``
    (``k mod N in stores[d]``); ``H`` is the first hot rank at which some device's running sum
    passes ``budget[d]`` (``stores[d] == (d,)``: the modulo split). Walks the hot ranks in
    blocks and stops at that rank.

    Returns:
        ``(H, part_bytes)``: int64 ``[N]`` bytes of each logical partition's rows ``k < H``.
    """
    held = np.zeros((world_size, world_size), dtype=bool)  # held[d, p]: device d stores p
    for d, parts in enumerate(stores):
        held[d, list(parts)] = True
    paid = np.zeros(world_size, np.int64)  # each device's bytes of the rows before the block
    part_bytes = np.zeros(world_size, np.int64)
    for a in _blocks(0, num_rows):
        hb = row_bytes(a, min(num_rows, a + _PLAN_BLOCK))
        part = np.arange(a, a + hb.size, dtype=np.int64) % world_size
        fit = hb.size
        for d in range(world_size):  # loop over devices; rows are vectorised
            cum = np.cumsum(np.where(held[d][part], hb, 0))
            cum += paid[d]
            fit = min(fit, int(np.searchsorted(cum, budget[d], side="right")))
        for p in range(world_size):  # loop over partitions: p's rows among the fitting ones
            part_bytes[p] += int(hb[(p - a) % world_size : fit : world_size].sum())
        if fit < hb.size:
            return a + fit, part_bytes
        paid = held.astype(np.int64) @ part_bytes
    return num_rows, part_bytes


def _run_prefix(row_bytes: RowBytes, start: int, num_rows: int, cap: int) -> tuple[int, int]:
    """Longest run of hot ranks from ``start`` whose bytes fit ``cap``: ``(rows, bytes)``."""
    total = 0
    for a in _blocks(start, num_rows):
        hb = row_bytes(a, min(num_rows, a + _PLAN_BLOCK))
        cum = np.cumsum(hb)
        cum += total
        fit = int(np.searchsorted(cum, cap, side="right"))
        if fit < hb.size:
            return a + fit - start, int(cum[fit - 1]) if fit else total
        total = int(cum[-1])
    return num_rows - start, total


def _tier_plan(
    kind: str,
    row_bytes: RowBytes,
    total_bytes: int,
    order: np.ndarray,
    rank_of: np.ndarray,
    world_size: int,
    device_budget: np.ndarray,
    host_cap: int,
    fixed: int,
    placement: PlacementPlan | None = None,
) -> TierPlan:
    """Device pass, then host pass over the hot ranks' ``row_bytes``; the rest is disk.

    ``fixed`` bytes per rank (host) are paid when the tier holds any rows. Walks the hot ranks
    only up to the end of the host run (plus a block); the disk bytes are ``total_bytes`` (all
    rows) minus the device and host rows.
    """
    n = int(order.size)
    stores: Sequence[Sequence[int]] = (
        [(r,) for r in range(world_size)] if placement is None else placement.stores
    )
    n_dev, per_rank = 0, np.zeros(world_size, np.int64)
    dev_rows_bytes = 0
    if not (fixed and (device_budget < fixed).any()):
        n_dev, part_bytes = _device_prefix(row_bytes, n, device_budget - fixed, world_size, stores)
        if n_dev:
            dev_rows_bytes = int(part_bytes.sum())
            per_rank = np.array(
                [int(part_bytes[list(stores[r])].sum()) + fixed for r in range(world_size)],
                dtype=np.int64,
            )
    n_host, host_rows_bytes = 0, 0
    if host_cap >= fixed:
        n_host, host_rows_bytes = _run_prefix(row_bytes, n_dev, n, host_cap - fixed)
    return TierPlan(
        kind=kind,
        order=order,
        rank_of=rank_of,
        world_size=world_size,
        num_device=n_dev,
        num_host=n_host,
        device_bytes=per_rank,
        host_bytes=host_rows_bytes + fixed if n_host else 0,
        disk_bytes=total_bytes - dev_rows_bytes - (host_rows_bytes if n_host else 0),
        placement=placement,
    )


def plan_tiers(
    num_rows: int,
    row_bytes: int | np.ndarray,
    budgets: TierBudgets,
    world_size: int,
    *,
    order: np.ndarray | None = None,
    device_used: np.ndarray | None = None,
    host_used: int = 0,
    ranks_per_host: int | None = None,
    fixed_bytes: int = 0,
    kind: str = "features",
    placement: PlacementPlan | None = None,
) -> TierPlan:
    """Plan one kind of rows over device (modulo split) / host / disk.

    Device: the longest hot prefix whose rows, dealt to logical partitions by hot rank mod
    ``world_size``, fit every rank's remaining device budget (``budgets.device -
    device_used[r]``) for all the partitions that rank stores (partition ``r`` alone without a
    ``placement``; every partition in ``placement.stores[r]`` with one). Host: the longest
    following run that fits ``budgets.host - host_used`` (the budget is per host). The rest is
    disk. Use :func:`plan_store` to plan topology and features together.

    Args:
        num_rows: Number of rows ``V``.
        row_bytes: Bytes per row (an int, or int64 ``[V]`` per node ID).
        budgets: Device bytes per rank, host bytes per host.
        world_size: Number of device ranks ``N``.
        order: int32 or int64 ``[V]`` hot order (default: identity).
        device_used: int64 ``[N]`` device bytes already taken per rank.
        host_used: Host bytes already taken on each host.
        ranks_per_host: Ranks sharing one host copy (default ``world_size``; checked, it does
            not change the host budget, which is per host).
        fixed_bytes: Bytes a tier pays once per shard when it holds any rows (the 8-byte
            ``indptr`` terminator of a CSC segment store).
        kind: Label of the plan.
        placement: Which partitions each device stores (see :func:`plan_store`); ``None``: one
            partition per device.

    Returns:
        The :class:`TierPlan`.

    Raises:
        ConfigError: On a bad world size, inconsistent shapes or a placement for another number
            of devices.
    """
    world_size, _ = check_world(world_size, ranks_per_host)
    check_placement(placement, world_size)
    if order is None:
        order = np.arange(num_rows, dtype=id_dtype(num_rows))
    order = np.asarray(order)
    if order.dtype not in (np.int32, np.int64):
        order = order.astype(np.int64)
    if order.shape != (num_rows,):
        raise ConfigError(f"'order' must have shape ({num_rows},) (got {order.shape})")
    if np.size(row_bytes) == 1:  # one size for every row
        fixed_row = int(np.asarray(row_bytes).reshape(()))
        if fixed_row < 0:
            raise ConfigError("'row_bytes' must be >= 0")
        rows, total = _fixed_rows(fixed_row), fixed_row * num_rows
    else:
        rb = np.asarray(row_bytes, dtype=np.int64)
        if rb.shape != (num_rows,):
            raise ConfigError(f"'row_bytes' must be an int or shape ({num_rows},) (got {rb.shape})")
        if rb.size and rb.min() < 0:
            raise ConfigError("'row_bytes' must be >= 0")
        rows, total = _ordered_rows(rb, order), int(rb.sum())
    used = np.zeros(world_size, np.int64) if device_used is None else np.asarray(device_used)
    dev_budget = np.maximum(budgets.device - used.astype(np.int64), 0)
    host_cap = max(budgets.host - int(host_used), 0)  # per host, however many ranks share it
    return _tier_plan(
        kind,
        rows,
        total,
        order,
        inverse_order(order),
        world_size,
        dev_budget,
        host_cap,
        fixed_bytes,
        placement,
    )


@dataclasses.dataclass(frozen=True, eq=False)
class StorePlan:
    """The tier plans of one graph's topology and features.

    Attributes:
        topology: Plan of the CSC segments.
        features: Plan of the feature rows (``None`` without features).
        budgets: The budgets planned against (device per rank, host per host).
        order: Which kind got each tier's budget first.
        ranks_per_host: Ranks sharing one host copy.
        placement: The partition placement both kinds follow (``None``: one partition per
            device).
    """

    topology: TierPlan
    features: TierPlan | None
    budgets: TierBudgets
    order: str
    ranks_per_host: int
    placement: PlacementPlan | None = None

    def device_bytes(self) -> np.ndarray:
        """Device bytes per rank (topology + features), int64 ``[N]``."""
        out = self.topology.device_bytes.copy()
        if self.features is not None:
            out += self.features.device_bytes
        return out

    def host_bytes(self) -> int:
        """Bytes of the host tier (one copy per host)."""
        return self.topology.host_bytes + (self.features.host_bytes if self.features else 0)

    def counts_feature_rows_of(self, row_bytes: int) -> bool:
        """Whether the feature tiers count ``row_bytes`` per row (no replicas: a given plan)."""
        fp = self.features
        if fp is None:
            return True
        held = int(np.asarray(fp.device_bytes).sum()) + int(fp.host_bytes)
        return held == (fp.num_device + fp.num_host) * row_bytes

    def __repr__(self) -> str:
        return (
            f"StorePlan(order={self.order!r}, {self.budgets!r},\n  {self.topology!r},\n  "
            f"{self.features!r}"
            + ("" if self.placement is None else f",\n  {self.placement!r}")
            + ")"
        )


def plan_store(
    graph: Graph,
    budgets: TierBudgets,
    world_size: int,
    *,
    hotness: HotnessRanking | None = None,
    order: TierOrder = "graph_first",
    ranks_per_host: int | None = None,
    placement: PlacementPlan | None = None,
    feature_dtype: str | None = None,
) -> StorePlan:
    """Plan topology and features of ``graph`` over the tiers, deterministically.

    Both kinds use the same hot order. With ``order="graph_first"`` (XGNN default: random 4-byte
    adjacency reads over PCIe are the worst access) topology takes the device budget first and
    features get what is left; then the same order applies to the host tier.
    ``"features_first"`` swaps the two (better when memory is tight, XGNN Sec. 6.8).

    With a ``placement`` (from :func:`solve_placement` / :func:`resolve_placement`), device
    ``d`` stores every logical partition in ``placement.stores[d]``, so replicas cost budget: the
    device row count ``H`` is the longest hot prefix with, for every device ``d``,
    ``sum over p in stores[d] of bytes(rows k < H, k mod N == p) <= budget[d]``. For fixed-size
    rows (features) and equal budgets ``B`` that is, with ``q = B // (max_parts * row_bytes)``,
    ``N * q <= H < N * (q + 1)``: about ``max_parts * rows_per_partition * row_bytes <= B``, so
    the device tier holds about ``1 / max_parts`` of the rows one partition per device would.
    No rank's ``device_bytes`` ever exceeds its budget.

    Args:
        graph: The graph.
        budgets: Device bytes per rank, host bytes per host.
        world_size: Number of device ranks.
        hotness: The ranking (default: :func:`hotness_order` by degree).
        order: ``"graph_first"`` or ``"features_first"``.
        ranks_per_host: Ranks sharing one host copy (default ``world_size``; recorded in the
            plan, it does not change the host budget, which is per host).
        placement: Which partitions each device stores and where it reads each from
            (``None``: partition ``p`` on device ``p`` only, the modulo split).
        feature_dtype: How feature rows are stored (``store.feature_dtype``): the plan counts
            their stored bytes (:func:`feature_row_bytes`); ``None``: the dataset's.

    Returns:
        The :class:`StorePlan`.

    Raises:
        ConfigError: On a bad ``order`` or world size, or a placement for another number of
            devices.
    """
    if order not in ("graph_first", "features_first"):
        raise ConfigError(f"'order' must be 'graph_first' or 'features_first' (got {order!r})")
    world_size, rph = check_world(world_size, ranks_per_host)
    check_placement(placement, world_size)
    rank = hotness_order(graph) if hotness is None else hotness
    n = graph.num_nodes
    per_edge = graph.indices.dtype.itemsize
    if graph.edge_weight is not None:
        per_edge += graph.edge_weight.dtype.itemsize
    edges = int(graph.indptr[n]) - int(graph.indptr[0])
    # (kind, bytes by hot rank, bytes of all rows, fixed bytes per tier): nothing [N]-sized
    kinds: list[tuple[str, RowBytes, int, int]] = [
        # + the segment store's indptr terminator
        ("topology", _segment_rows(graph, rank.order), 8 * n + per_edge * edges, 8)
    ]
    if graph.x is not None:
        rb = feature_row_bytes(graph, feature_dtype)
        kinds.append(("features", _fixed_rows(rb), rb * n, 0))
    if order == "features_first":
        kinds.reverse()
    # each kind takes what the kinds before it left, on the device and then on the host tier
    plans: dict[str, TierPlan] = {}
    used = np.zeros(world_size, np.int64)
    host_used = 0
    for kind, rows, total, fixed in kinds:
        plan = _tier_plan(
            kind,
            rows,
            total,
            rank.order,
            rank.rank_of,
            world_size,
            np.maximum(budgets.device - used, 0),
            max(budgets.host - host_used, 0),  # per host
            fixed,
            placement,
        )
        plans[kind] = plan
        used = used + plan.device_bytes
        host_used += plan.host_bytes
    return StorePlan(
        topology=plans["topology"],
        features=plans.get("features"),
        budgets=budgets,
        order=order,
        ranks_per_host=rph,
        placement=placement,
    )
