"""The unified feature + topology store: one graph's rows spread over device, host and disk tiers.

:meth:`UnifiedStore.build` plans where every row goes (:func:`~fleetgnn.store.tiers.plan_store`:
hottest rows on the devices split by hot rank modulo ``N``, then host, then disk) and places them:

==========  ===========================================  ==========================  ===========
tier        holds                                        read as                     link kind
==========  ===========================================  ==========================  ===========
device      rank ``r``: hot ranks ``k < H_dev``,         :class:`ShardedTensor`      ``local`` /
            ``k mod N == r``, local row ``k div N``      (one-sided or two-sided)    ``peer`` /
            (with a topology: every partition                                        ``net``
            ``p = k mod N`` in ``stores[r]``)
host        hot ranks ``[H_dev, H_dev + H_host)``        :class:`SharedTensor`       ``h2d``
            (at most ``budgets.host`` bytes)             (one copy per host)
disk        the rest                                     the dataset's arrays        ``disk``
                                                         (``np.memmap`` when opened
                                                         with ``open_dataset``)
==========  ===========================================  ==========================  ===========

Features and topology (each node's CSC segment: its in-neighbours and edge weights) are tiered
the same way with their own plans. The disk tier's feature rows are read one of two ways:

- **a** :class:`~fleetgnn.graph.rows.RowReader` when the features are a memory map of a whole
  ``.npy`` file (a dataset opened with ``open_dataset``) larger than
  :data:`~fleetgnn.store.disk_tier.DISK_MAP_FRACTION` of this machine's memory: a graph whose
  features may not stay in the page cache. Per call, rows found in the page cache are copied
  through the reader's mapping and unmapped again, others read with sorted, coalesced
  ``os.preadv`` calls into the process's own buffers. Nothing of the file
  stays resident in the process (its file-backed RSS stays flat whatever the graph's size), and a
  cold gather is several times faster than faulting the rows in through a mapping.
- **a mapping of its own** of the same file, advised ``MADV_RANDOM`` (no readahead; other readers
  of the dataset's mapping keep theirs), for smaller files, whose pages stay cached: a gather
  from a mapping whose pages are already mapped is a plain memory copy, about 5x faster than
  copying the rows out of the page cache again with ``pread`` on every call (a training batch
  or an evaluation chunk reads tens of thousands of scattered rows), at the cost of up to the
  file's size (at most that fraction of memory) of file-backed, reclaimable RSS per process.
  Also the fallback where ``pread`` cannot serve (a view of a map, a non-native dtype, a file
  that can no longer be opened or no longer holds the mapped rows); without ``madvise`` the
  dataset's mapping is used as it is.

Topology reads on the disk tier index the dataset's arrays (a few entries per node).
Reads bucket the requested IDs by tier and owner and read each tier once per call. On a CPU-only
machine the "device" shards live in shared memory and the host tier is the same kind of memory;
the accounting is the same as on GPUs (the link kind says which tier served the bytes), so counts
carry over to the cost model.

Traffic is recorded in :attr:`UnifiedStore.meter` as *bytes of data served per source*: a feature
row is ``F * itemsize`` bytes, an ``indptr`` entry 8 bytes, an index ``indices.itemsize`` bytes,
a weight ``edge_weight.itemsize`` bytes; one message per tier (per owner on the device tier) per
read. The link kind is the source's (:data:`SOURCE_LINKS`): this rank's own shard ``local``, a
shard of another rank on this host ``peer``, a shard of a rank on another host ``net``, the host
tier ``h2d``, the disk ``disk``. So for feature rows, the bytes on each link equal the rows
requested from its source (:meth:`UnifiedStore.requests`) times the row size, per kind as well
(:meth:`UnifiedStore.bytes_served`). This meter is separate from the communicator's, which records
the wire traffic of the underlying gathers.

Hosts (``hosts=`` of :meth:`UnifiedStore.build`, from :meth:`DistContext.hosts
<fleetgnn.distributed.DistContext.hosts>`): the ranks on one host share one host tier, at most
``budgets.host`` bytes per host whatever the number of ranks on it (one copy per machine). Ranks
on several hosts need the two-sided device tier (``one_sided=False``).

Device topology (``topology=`` of :meth:`UnifiedStore.build`, the ``store.topology`` setting):
the hot rows form ``N`` logical partitions (``p = k mod N``). Without a topology, or with the
fully connected ``"uniform"`` one, device ``p`` holds partition ``p``. With an asymmetric one
(e.g. ``"dgx1-v100"``) every rank solves XGNN's placement
(:func:`~fleetgnn.store.device_topology.resolve_placement`, deterministic, no communication): rank
``r``'s shard holds every partition in ``plan.stores[r]`` (replicas are copies), and rank ``r``
reads partition ``p`` from ``plan.sources[r][p]`` (its own shard or a directly linked peer's; in
two-sided mode the request goes to that rank). Replicas cost device budget, so fewer hot rows fit
(see :func:`~fleetgnn.store.tiers.plan_store`). :meth:`UnifiedStore.reads_by_source` counts
the rows and bytes read from each rank's shard, which makes the plan visible.

Two-sided mode (``one_sided=False``, ranks on several hosts) makes every device-tier read a
collective: all ranks must call the same store methods the same number of times.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from fleetgnn.distributed.comm import Communicator
from fleetgnn.distributed.shm import ShardedTensor, SharedTensor
from fleetgnn.distributed.traffic import TrafficMeter
from fleetgnn.distributed.transfer import Transfers
from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph.compact import FeatureCodec, feature_codec
from fleetgnn.graph.compact_rows import (
    CompactRows,
    applied_feature_dtype,
    stored_row_bytes,
    tier_rows,
)
from fleetgnn.graph.csc import Graph, check_edge_ids
from fleetgnn.kernels import gather_rows
from fleetgnn.store.device_read import DeviceIndex, gather_on_device
from fleetgnn.store.device_topology import TopologySpec, resolve_placement
from fleetgnn.store.disk_tier import _advise_random, _file_reader, _map_limit
from fleetgnn.store.hotness import HotnessRanking, hotness_order
from fleetgnn.store.placement import PlacementPlan
from fleetgnn.store.segments import Segments, segment_arange, segments_of
from fleetgnn.store.tiers import (
    DEVICE,
    DISK,
    HOST,
    StorePlan,
    TierBudgets,
    TierOrder,
    feature_row_bytes,
    plan_store,
)
from fleetgnn.types import Closing

__all__ = ["KINDS", "SOURCES", "SOURCE_LINKS", "UnifiedStore"]

SOURCES: tuple[str, ...] = ("local", "peer", "net", "host", "disk")
#: The traffic link kind of each source of rows (see the module docstring).
SOURCE_LINKS: dict[str, str] = {
    "local": "local",
    "peer": "peer",
    "net": "net",
    "host": "h2d",
    "disk": "disk",
}
KINDS: tuple[str, ...] = ("features", "topology")


class _Gatherable(Protocol):
    def gather(self, owner: Tensor, local_index: Tensor, *, checked: bool = False) -> Tensor: ...

    def rows_via(self, via: Tensor, ids: Tensor) -> Tensor: ...

    def close(self) -> None: ...


class _LocalShard:
    """The device tier of a single process (no communicator): one shard, read locally."""

    def __init__(self, tensor: Tensor) -> None:
        self.tensor = tensor

    def gather(self, owner: Tensor, local_index: Tensor, *, checked: bool = False) -> Tensor:
        return gather_rows(self.tensor, local_index)

    def rows_via(self, via: Tensor, ids: Tensor) -> Tensor:
        """``tensor[via[ids]]`` (every row local): one gather through the lookup ``via``."""
        return gather_rows(self.tensor, ids, via=via)

    def close(self) -> None:
        self.tensor = torch.empty(0)


class UnifiedStore(Closing):
    """Features and topology of one graph over device shards, host memory and disk.

    Build with :meth:`build`. Implements the sampling layer's ``TopologySource`` protocol
    (``num_nodes``, ``has_edge_weight``, ``in_degree``, ``neighbors_at``, ``all_neighbors``,
    ``edge_weight_at``) structurally, so samplers read the adjacency through the tiers.

    Attributes:
        graph: The graph (its arrays are the disk tier).
        plan: The :class:`StorePlan` (identical on every rank).
        rank: This rank.
        world_size: Number of ranks ``N``.
        meter: Bytes served per link kind (see the module docstring).
        hosts: Host index of every rank (``hosts[r]``; all 0 on one host).
    """

    def __init__(
        self,
        graph: Graph,
        plan: StorePlan,
        *,
        rank: int,
        world_size: int,
        meter: TrafficMeter,
        feat_device: _Gatherable | None,
        feat_host: Tensor | None,
        topo_device: Segments | None,
        topo_host: Segments | None,
        memory: dict[str, int],
        handles: list[Any],
        hosts: tuple[int, ...] | None = None,
        owned: list[Communicator] | None = None,
        device: torch.device | str | None = None,
        codec: FeatureCodec | None = None,
    ) -> None:
        self.graph = graph
        #: How the device and host tiers store feature rows (``None``: as the dataset does).
        self.codec = codec
        #: The torch dtype of ``graph.x`` (what :meth:`gather` returns; ``None``: no features).
        x = graph.x
        self.x_dtype = None if x is None else torch.from_numpy(np.empty(0, x.dtype)).dtype
        #: Bytes of one feature row on disk (the dataset's row, compact or not).
        self.disk_row_bytes = stored_row_bytes(x, None)  # as the file holds a row
        self.device = torch.device("cpu" if device is None else device)
        # host- and disk-tier rows to a CUDA device: pinned staging, copies on a copy stream
        self._transfers = Transfers(self.device, overlap=self.device.type == "cuda")
        self._index: DeviceIndex | None = None  # the feature plan's lookups on the device
        self.plan = plan
        self.rank = rank
        self.world_size = world_size
        self.meter = meter
        self._feat_device = feat_device
        self._feat_host = feat_host
        self._topo_device = topo_device
        self._topo_host = topo_host
        self._memory = memory
        self._handles = handles
        self.hosts = tuple(hosts) if hosts is not None else (0,) * world_size
        self._host_of = np.asarray(self.hosts, dtype=np.int64)
        self._owned = list(owned or [])  # communicators the store created (host groups)
        self._hits = {k: dict.fromkeys(SOURCES, 0) for k in KINDS}
        self._bytes = {k: dict.fromkeys(SOURCE_LINKS.values(), 0) for k in KINDS}
        # device-tier reads per source rank: row 0 rows (node IDs), row 1 bytes
        self._reads = {k: np.zeros((2, world_size), np.int64) for k in KINDS}
        self._closed = False
        self._topo_disk = Segments(graph.indptr, graph.indices, graph.edge_weight)
        # the disk tier's feature rows, read at random: with pread from the file where x maps a
        # whole .npy too large to stay cached, else through a mapping without readahead (see the
        # module docstring)
        fp = plan.features
        # (a dataset's compact rows are read as stored and decoded in the gather)
        disk_x = x.stored if isinstance(x, CompactRows) else x
        disk_rows = disk_x is not None and fp is not None and fp.num_disk > 0
        big = disk_rows and int(disk_x.nbytes) > _map_limit()
        self._x_reader = _file_reader(disk_x) if big else None
        self._x_disk = disk_x
        if disk_rows and self._x_reader is None:
            self._x_disk = _advise_random(disk_x)

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(
        cls,
        graph: Graph,
        comm: Communicator | None = None,
        budgets: TierBudgets | None = None,
        *,
        placement: str | HotnessRanking = "degree",
        order: TierOrder = "graph_first",
        one_sided: bool = True,
        meter: TrafficMeter | None = None,
        host_comm: Communicator | None = None,
        name: str = "store",
        topology: TopologySpec | PlacementPlan = None,
        hosts: Sequence[int] | None = None,
        device: torch.device | str | None = None,
        plan: StorePlan | None = None,
        feature_dtype: str | None = None,
    ) -> UnifiedStore:
        """Plan and place ``graph``'s features and topology. Collective when ``comm`` is given.

        Every rank computes the same plan from the graph (deterministic), builds only its own
        device shard (features ``[m_r, F]`` and a local CSC of its ``m_r`` segments) and shares it
        with :meth:`ShardedTensor.create`; the owner of each host tier (rank 0 of ``host_comm``)
        builds it and shares it with :meth:`SharedTensor.create`. Communication: a few
        ``all_gather_object`` rounds per shared tensor (up to 3 device + 4 host tensors); the
        placement is solved identically on every rank, without communication.
        Memory per rank: its device budget (in shared memory on CPU); per host: one host tier of
        at most ``budgets.host`` bytes, shared by the host's ranks; disk rows are never copied.

        With a ``topology``, rank ``r``'s device shard holds every logical partition in
        ``plan.stores[r]`` (so a partition stored by several ranks is a copy on each) and rank
        ``r`` reads partition ``p`` from ``plan.sources[r][p]``; the device row count shrinks so
        that every rank's partitions fit its budget (:func:`~fleetgnn.store.tiers.plan_store`).
        Reads stay bit-exact for every topology.

        Args:
            graph: The graph (``x`` optional; arrays may be memory maps).
            comm: Communicator of the ranks sharing the device tier (None: a single rank).
            budgets: Device bytes per rank and host bytes per host (default: nothing on device
                or host, all reads from disk).
            placement: ``"degree"``, or a :class:`HotnessRanking` (e.g. from
                ``hotness_order(graph, "presample", sampler_fn)``; pass the same on every rank).
            order: ``"graph_first"`` (default) or ``"features_first"``: which kind takes the
                device (and then host) budget first.
            one_sided: Peers read device shards directly (one host); False: two-sided exchange
                (every device read becomes a collective; needed when ranks span hosts).
            meter: Where bytes served are recorded (default: a new meter).
            host_comm: Communicator of the ranks of this host (default: ``comm`` when
                ``comm.same_host``; else, when ``hosts`` puts several ranks on a host, a group
                per host that the store creates (collective over the default group) and
                destroys on :meth:`close`; else each rank keeps its own host tier).
            name: Prefix of the shared-memory segment names (``[A-Za-z0-9_.]``, same on every
                rank; make it unique per concurrently built store).
            topology: The device topology (``store.topology``): ``None`` (one partition per
                device, the modulo split), ``"uniform"`` (the same plan, through the solver),
                ``"dgx1-v100"``, an ``N x N`` bandwidth matrix or a JSON/YAML file holding one
                (see :func:`~fleetgnn.store.device_topology.topology_matrix`), or a ready
                :class:`PlacementPlan`. Pass the same on every rank.
            hosts: Host index of every rank of ``comm`` (``hosts[r]``, the same on every rank;
                from :meth:`DistContext.hosts <fleetgnn.distributed.DistContext.hosts>`).
                Device reads from a rank on this host are ``peer``, from another host ``net``.
                Default: one host when ``comm.same_host`` (or without ``comm``), else one host
                per rank.
            device: The engine's device (default the CPU). On a CUDA device the feature device
                shards are device memory (peers' mapped through CUDA IPC) and :meth:`gather`
                takes and returns tensors there (:mod:`~fleetgnn.store.device_read`); topology
                shards stay in host memory, where the sampler reads them. Pass the same device
                type on every rank.
            plan: A plan made elsewhere for ``world_size`` ranks, without a placement (the
                keyed store's per-type tables, :class:`~fleetgnn.store.keyed.KeyedStore`):
                placed as it is; ``budgets``, ``placement``, ``order`` and ``topology`` are then
                not used.
            feature_dtype: How the device and host tiers store feature rows
                (``store.feature_dtype``, :mod:`~fleetgnn.graph.compact`): ``"bfloat16"``,
                ``"float16"``, ``"float8_e4m3"`` or ``"float32"``, converted here; the plan
                counts the stored bytes, so a budget holds 2x (16-bit) or about 4x (float8) the
                rows of float32. :meth:`gather` returns ``graph.x``'s dtype with the values the
                stored rows hold (disk rows are rounded the same way). ``None``: as stored. A
                given ``plan`` must count the stored bytes.

        Returns:
            The store.

        Raises:
            ConfigError: On bad budgets, placement, order, topology (naming ``store.topology``)
                or hosts.
            GraphError: If ``graph`` is not a Graph, or ``indices`` holds an ID outside
                ``[0, N)`` (one min/max over it: the file may have changed since it was
                checked).
        """
        if not isinstance(graph, Graph):
            raise GraphError(
                f"'graph' must be a fleetgnn Graph (got {type(graph).__name__}); build one with "
                "fleetgnn.graph.from_edges or open_dataset"
            )
        check_edge_ids(graph)  # a memory-mapped file may have changed since it was checked
        # a dataset's compact rows: held as stored unless feature_dtype widens them to float32
        applied = applied_feature_dtype(graph.x, feature_dtype)
        codec = feature_codec(applied)
        if codec is None and isinstance(graph.x, CompactRows):
            codec = graph.x.codec
        if codec is not None and graph.x is None:
            codec = None  # nothing to store
        budgets = TierBudgets.check(budgets)
        hot: HotnessRanking | None = None
        if plan is not None:
            pass  # placed as planned
        elif isinstance(placement, HotnessRanking):
            hot = placement
            if hot.order.shape != (graph.num_nodes,):
                raise ConfigError(
                    f"'placement' ranks {hot.order.size} nodes but the graph has "
                    f"{graph.num_nodes}; compute it with hotness_order(graph, ...)"
                )
        elif placement == "degree":
            hot = hotness_order(graph, "degree")
        else:
            raise ConfigError(
                f"'placement' must be 'degree' or a HotnessRanking (got {placement!r}); for "
                "pre-sampling pass hotness_order(graph, 'presample', sampler_fn=...)"
            )
        rank, world = (0, 1) if comm is None else (comm.rank, comm.world_size)
        device = torch.device("cpu" if device is None else device)
        one_host = comm is None or comm.same_host
        if hosts is None:
            hosts = (0,) * world if one_host else tuple(range(world))
        hosts = tuple(int(h) for h in hosts)
        if len(hosts) != world:
            raise ConfigError(
                f"'hosts' must give the host of each of the {world} ranks (got {len(hosts)})"
            )
        owned: list[Communicator] = []
        if host_comm is None and comm is not None:
            if comm.same_host:
                host_comm = comm
            elif len(set(hosts)) < world:  # the same on every rank: a collective decision
                host_comm = comm.host_group(hosts, meter=TrafficMeter())  # one tier per host
                owned.append(host_comm)
        rph = 1 if host_comm is None else host_comm.world_size
        if plan is None:
            placed = None if topology is None else resolve_placement(topology, world)
            plan = plan_store(
                graph,
                budgets,
                world,
                hotness=hot,
                order=order,
                ranks_per_host=rph,
                placement=placed,
                feature_dtype=None if codec is None else codec.name,
            )
        elif codec is not None and not plan.counts_feature_rows_of(
            row := stored_row_bytes(graph.x, codec.name)
        ):
            raise ConfigError(
                f"'plan' counts feature rows of another size than {codec.name} rows "
                f"({row} bytes); make it with the stored row bytes "
                "(plan_store(..., feature_dtype=...))"
            )
        elif (
            plan.topology.world_size != world
            or plan.placement is not None
            or plan.topology.num_rows != graph.num_nodes
        ):
            raise ConfigError(
                f"'plan' must be made for this graph's {graph.num_nodes} rows and {world} ranks "
                f"without a placement (got {plan.topology.num_rows} rows, "
                f"{plan.topology.world_size} ranks)"
            )
        handles: list[Any] = []

        def sharded(local: Tensor, suffix: str) -> _Gatherable:
            if comm is None:
                return _LocalShard(local)
            h = ShardedTensor.create(local, comm, name=f"{name}.{suffix}", one_sided=one_sided)
            handles.append(h)
            return h

        def shared(make: Any, suffix: str) -> Tensor:
            if host_comm is None:
                return make()
            t = make() if host_comm.rank == 0 else None
            h = SharedTensor.create(t, host_comm, name=f"{name}.{suffix}", owner=0)
            handles.append(h)
            return h.tensor

        memory = {"device": 0, "host": 0}
        feat_device = feat_host = None
        fp = plan.features
        if fp is not None and graph.x is not None:
            x = graph.x
            if fp.num_device:
                local = tier_rows(x, fp.shard_rows(rank), codec).to(device)
                feat_device = sharded(local, "feat")
                memory["device"] += local.numel() * local.element_size()
            if fp.num_host:
                feat_host = shared(lambda: tier_rows(x, fp.host_rows(), codec), "feath")
                memory["host"] += fp.host_bytes
        tp = plan.topology
        topo_device = topo_host = None
        if tp.num_device:
            indptr, indices, weight = segments_of(graph, tp.shard_rows(rank))
            topo_device = Segments(
                sharded(indptr, "indptr"),
                sharded(indices, "indices"),
                None if weight is None else sharded(weight, "weight"),
            )
            memory["device"] += sum(
                t.numel() * t.element_size() for t in (indptr, indices, weight) if t is not None
            )
        if tp.num_host:
            builds = host_comm is None or host_comm.rank == 0  # only the owner builds it
            hp, hi, hw = segments_of(graph, tp.host_rows()) if builds else (None, None, None)
            topo_host = Segments(
                shared(lambda: hp, "indptrh"),
                shared(lambda: hi, "indicesh"),
                shared(lambda: hw, "weighth") if graph.edge_weight is not None else None,
            )
            memory["host"] += tp.host_bytes
        return cls(
            graph,
            plan,
            rank=rank,
            world_size=world,
            meter=TrafficMeter() if meter is None else meter,
            feat_device=feat_device,
            feat_host=feat_host,
            topo_device=topo_device,
            topo_host=topo_host,
            memory=memory,
            handles=handles,
            hosts=hosts,
            owned=owned,
            device=device,
            codec=codec,
        )

    # ------------------------------------------------------------------ helpers
    def _check_open(self) -> None:
        if self._closed:
            raise GraphError("this UnifiedStore is closed; build a new one")

    def _ids(self, name: str, ids: object, *, checked: bool = False) -> np.ndarray:
        t = torch.as_tensor(ids) if not isinstance(ids, Tensor) else ids
        if t.dim() != 1 or t.is_floating_point() or t.dtype == torch.bool or t.is_complex():
            raise GraphError(
                f"'{name}' must be a 1-D integer tensor of node IDs (got {t.dtype} with shape "
                f"{tuple(t.shape)})"
            )
        a = t.detach().cpu().numpy().astype(np.int64, copy=False)
        n = self.graph.num_nodes
        if not checked and a.size and (a.min() < 0 or a.max() >= n):
            bad = int(a.min()) if a.min() < 0 else int(a.max())
            raise GraphError(
                f"'{name}' holds node ID {bad}, outside the valid interval [0, {n}); pass "
                "global IDs of this graph"
            )
        return a

    def _sources(self, tier: np.ndarray, owner: np.ndarray) -> dict[str, np.ndarray]:
        """A mask per source: own shard, a shard on this host, on another host, host tier, disk."""
        dev = tier == DEVICE
        mine = dev & (owner == self.rank)
        here = np.zeros(tier.shape, dtype=bool)
        here[dev] = self._host_of[owner[dev]] == self._host_of[self.rank]
        return {
            "local": mine,
            "peer": here & ~mine,
            "net": dev & ~here,
            "host": tier == HOST,
            "disk": tier == DISK,
        }

    def _account(
        self,
        tier: np.ndarray,
        owner: np.ndarray,
        nbytes: int,
        kind: str,
        sources: dict[str, np.ndarray] | None = None,
        *,
        disk_bytes: int | None = None,
    ) -> None:
        """Record ``nbytes`` bytes served per entry, per link kind (one message per owner).

        Device-tier bytes are also added to ``kind``'s reads per source rank. ``sources``:
        :meth:`_sources` of ``(tier, owner)`` when the caller has it already. ``disk_bytes``:
        bytes per disk-tier entry where they differ (compact rows of a float32 dataset).
        """
        dev = tier == DEVICE
        self._reads[kind][1] += np.bincount(owner[dev], minlength=self.world_size) * nbytes
        served = self._bytes[kind]
        for source, mask in (sources or self._sources(tier, owner)).items():
            count = int(mask.sum())
            if count == 0:
                continue
            link = SOURCE_LINKS[source]
            msgs = np.unique(owner[mask]).size if link in ("peer", "net") else 1
            size = disk_bytes if source == "disk" and disk_bytes is not None else nbytes
            self.meter.record(link, count * size, messages=msgs)
            served[link] += count * size

    def _count_hits(
        self,
        tier: np.ndarray,
        owner: np.ndarray,
        kind: str = "topology",
        sources: dict[str, np.ndarray] | None = None,
    ) -> None:
        """Add the requests per source (``local``/``peer``/``net``/``host``/``disk``) to ``kind``.

        Device-tier requests are also added to ``kind``'s rows read per source rank.
        """
        dev = tier == DEVICE
        self._reads[kind][0] += np.bincount(owner[dev], minlength=self.world_size)
        h = self._hits[kind]
        for source, mask in (sources or self._sources(tier, owner)).items():
            h[source] += int(mask.sum())

    def _own_shard_rows(self, idn: np.ndarray) -> np.ndarray | None:
        """Rows of ``idn`` in this process's device shard when every ID is there, else None.

        The fast path of one process (``world_size == 1``, no placement): its shard holds the
        ``num_device`` hottest rows at their hotness rank, so one ``rank_of`` lookup and one
        maximum decide it, instead of :meth:`TierPlan.locate`'s passes over the IDs.
        """
        fp = self.plan.features
        if self.world_size != 1 or fp is None or fp.placement is not None or not idn.size:
            return None
        if self._feat_device is None:
            return None
        k = fp.rank_of[idn]  # hotness rank == row of the one shard
        return k if int(k.max()) < fp.num_device else None

    def _record_own_shard(self, n: int, nbytes: int, kind: str) -> None:
        """:meth:`_account` and :meth:`_count_hits` of ``n`` rows all read from this rank."""
        self._reads[kind][:, self.rank] += (n, n * nbytes)
        self._hits[kind]["local"] += n
        link = SOURCE_LINKS["local"]
        self.meter.record(link, n * nbytes, messages=1)
        self._bytes[kind][link] += n * nbytes

    # ------------------------------------------------------------------ features
    @property
    def num_features(self) -> int:
        """Feature dimension ``F`` (0 without features)."""
        return 0 if self.graph.x is None else int(self.graph.x.shape[1])

    def gather(self, ids: Tensor, *, checked: bool = False, out: Tensor | None = None) -> Tensor:
        """Feature rows of ``ids`` in input order, bit-exact with ``graph.x[ids]``.

        Buckets the IDs by tier (and owner on the device tier) and reads each tier once:
        device shards through one :meth:`ShardedTensor.gather`, the host tier with one
        ``index_select``, disk with sorted, coalesced ``pread`` calls from the file or one
        numpy fancy index of a mapping advised random access (see the module docstring).
        One process whose shard holds every requested row skips the bucketing: one
        ``rank_of`` lookup, then one ``index_select`` (``fleetgnn bench``'s gather section
        compares it with a bare ``index_select``). The output is allocated only when rows come
        from several tiers. Duplicates and empty input are fine. Records
        ``F * itemsize`` bytes per row on ``local``/``peer``/``h2d``/``disk``.
        Two-sided mode: a collective.

        On a store built for a CUDA ``device`` the ids (on any device) are located, counted
        and assembled on that device, device-tier rows never leave it, and host and disk rows
        arrive by async copies from pinned staging (:func:`~fleetgnn.store.device_read.
        gather_on_device`); the rows and counters are the same.

        ``checked=True``: the caller knows every ID lies in ``[0, N)`` (a sampler's, drawn from
        this graph's topology), so the range is not checked: on a GPU that check is a host
        sync, the only one of a read from the device tier of one rank. An ID out of range is
        then undefined behaviour, as for ``index_select``.

        ``out``: the rows are written into it and it is returned (a caller that reuses one
        buffer a step saves the allocation of a fresh ``[n, F]`` output, and its page faults,
        each time). On the CPU, rows that stay on one tier of this process are read and
        decoded straight into it (:meth:`FeatureCodec.gather`); on a CUDA store they are
        gathered, then copied into it.

        Shapes:
            - ids: ``[n]`` int
            - output (and ``out``): ``[n, F]``, dtype of ``graph.x``, on :attr:`device` (the
              CPU by default).

        Raises:
            GraphError: If the graph has no features, an ID is out of range, or ``out`` is not
                an ``[n, F]`` tensor of the store's dtype on its device.
        """
        self._check_open()
        x = self.graph.x
        fp = self.plan.features
        if x is None or fp is None:
            raise GraphError("the graph has no node features 'x'; nothing to gather")
        if out is not None:
            self._check_out(out, int(ids.numel()))
        if self.device.type != "cpu":
            rows = gather_on_device(self, ids, checked=checked)
            return rows if out is None else out.copy_(rows)
        idn = self._ids("ids", ids, checked=checked)
        row_bytes, disk_bytes = self.row_bytes(), self.disk_row_bytes
        dtype = self.x_dtype
        read = self._read_back
        if not idn.size and self._feat_device is None:
            return torch.empty((0, x.shape[1]), dtype=dtype) if out is None else out
        own = self._own_shard_rows(idn)
        if own is not None:  # every row in this process's shard: one gather
            assert self._feat_device is not None
            self._record_own_shard(idn.size, row_bytes, "features")
            index = torch.from_numpy(own.astype(np.int64))
            if isinstance(self._feat_device, _LocalShard):
                return self._tier_rows(self._feat_device.tensor, index, out)
            rows = read(self._feat_device.gather(torch.zeros_like(index), index))
            return rows if out is None else out.copy_(rows)
        tier, owner, local = fp.locate(idn, self.rank)
        sources = self._sources(tier, owner)
        self._account(tier, owner, row_bytes, "features", sources, disk_bytes=disk_bytes)
        self._count_hits(tier, owner, "features", sources)
        given = out  # without it, allocated only when rows come from more than one tier

        def scatter(sel: np.ndarray, rows: Tensor) -> None:
            nonlocal out
            if out is None:
                out = torch.empty((idn.size, x.shape[1]), dtype=dtype)
            out[torch.from_numpy(sel)] = rows.to(out.device)

        def whole(rows: Tensor) -> Tensor:
            return rows if given is None else given.copy_(rows)

        if self._feat_device is not None:  # every rank calls it (two-sided is collective)
            sel = np.flatnonzero(tier == DEVICE)
            rows = read(
                self._feat_device.gather(torch.from_numpy(owner[sel]), torch.from_numpy(local[sel]))
            )
            if sel.size == idn.size:  # all hits: no scatter
                return whole(rows.cpu())
            scatter(sel, rows)
        sel = np.flatnonzero(tier == HOST)
        if sel.size:
            assert self._feat_host is not None  # planned rows exist
            index = torch.from_numpy(local[sel])
            if sel.size == idn.size:  # all from the host tier: no scatter
                return self._tier_rows(self._feat_host, index, given)
            scatter(sel, self._tier_rows(self._feat_host, index))
        sel = np.flatnonzero(tier == DISK)
        if sel.size == idn.size:  # all from disk: no scatter
            return whole(self._disk_rows_read(idn))
        if sel.size:
            scatter(sel, self._disk_rows_read(idn[sel]))
        assert out is not None
        return out

    def _check_out(self, out: Tensor, n: int) -> None:
        """Refuses a :meth:`gather` output other than ``[n, F]`` of the store's dtype and device."""
        want = (n, self.num_features)
        if tuple(out.shape) != want or out.dtype != self.x_dtype or out.device != self.device:
            raise GraphError(
                f"gather's out must be a {list(want)} {self.x_dtype} tensor on {self.device} "
                f"(got {list(out.shape)} {out.dtype} on {out.device})"
            )

    def _tier_rows(self, table: Tensor, index: Tensor, out: Tensor | None = None) -> Tensor:
        """Rows ``index`` of a device- or host-tier tensor of this process, read back."""
        if self.codec is None:
            return gather_rows(table, index, out)
        assert self.x_dtype is not None
        return self.codec.gather(table, index, self.x_dtype, out)

    def _device_index(self) -> DeviceIndex:
        """The feature plan's lookups on :attr:`device` (made on the first device read)."""
        if self._index is None:
            assert self.plan.features is not None
            self._index = DeviceIndex(self.plan.features, self.rank, self.device)
        return self._index

    def row_bytes(self) -> int:
        """Bytes of one feature row as the device and host tiers store it (0 without features)."""
        return feature_row_bytes(self.graph, None if self.codec is None else self.codec.name)

    def _read_back(self, rows: Tensor) -> Tensor:
        """Stored device- or host-tier rows as ``graph.x``'s dtype (a no-op without a codec)."""
        if self.codec is None:
            return rows
        assert self.x_dtype is not None
        return self.codec.decode(rows, self.x_dtype)

    def _disk_rows_read(self, ids: np.ndarray) -> Tensor:
        """Disk-tier rows ``ids`` with the values the stored rows would hold.

        A dataset's compact rows are read as stored and decoded here.
        """
        raw = self._disk_rows(ids)
        x = self.graph.x
        if isinstance(x, CompactRows):
            rows = x.decode_tensor(raw)
            codec = self.codec  # the dataset's own (as stored) or float32 (widened)
            return rows if codec is None or codec is x.codec else codec.round_trip(rows)
        rows = torch.from_numpy(raw)
        return rows if self.codec is None else self.codec.round_trip(rows)

    def _disk_rows(self, ids: np.ndarray) -> np.ndarray:
        """Feature rows ``ids`` (any order, repeats) of the disk tier, as a new array."""
        if self._x_reader is not None:
            return self._x_reader.take(ids)
        return np.asarray(self._x_disk[ids])

    # ------------------------------------------------------------------ topology
    @property
    def num_nodes(self) -> int:
        """Number of nodes ``N``; valid IDs are ``[0, N)``."""
        return self.graph.num_nodes

    @property
    def has_edge_weight(self) -> bool:
        """Whether :meth:`edge_weight_at` returns weights."""
        return self.graph.edge_weight is not None

    def _tier_store(self, t: int) -> Segments | None:
        return (self._topo_device, self._topo_host, self._topo_disk)[t]

    def _bounds(self, idn: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(tier, owner, start, end)``: each node's segment within its tier's store."""
        tier, owner, local = self.plan.topology.locate(idn, self.rank)
        start = np.empty(idn.size, np.int64)
        end = np.empty(idn.size, np.int64)
        if self._topo_device is not None:
            sel = np.flatnonzero(tier == DEVICE)
            o = torch.from_numpy(np.concatenate([owner[sel], owner[sel]]))
            li = torch.from_numpy(np.concatenate([local[sel], local[sel] + 1]))
            both = self._topo_device.indptr.gather(o, li).numpy()
            start[sel], end[sel] = both[: sel.size], both[sel.size :]
        for t in (HOST, DISK):
            sel = np.flatnonzero(tier == t)
            if sel.size:
                ptr = self._tier_store(t).indptr  # type: ignore[union-attr]
                ptr = ptr.numpy() if isinstance(ptr, Tensor) else ptr
                start[sel] = ptr[local[sel]]
                end[sel] = ptr[local[sel] + 1]
        self._account(tier, owner, 16, "topology")  # two indptr entries per node
        return tier, owner, start, end

    def _read(self, what: str, tier: np.ndarray, owner: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Entries ``pos`` of each tier's ``indices`` or ``weight`` store, in input order."""
        if what == "weight":
            dtype = self.graph.edge_weight.dtype  # type: ignore[union-attr]
            itemsize = dtype.itemsize
        else:
            dtype, itemsize = np.dtype(np.int64), self.graph.indices.dtype.itemsize
        out = np.empty(pos.size, dtype=dtype)
        if self._topo_device is not None:
            sel = np.flatnonzero(tier == DEVICE)
            vals = getattr(self._topo_device, what).gather(
                torch.from_numpy(owner[sel]), torch.from_numpy(pos[sel])
            )
            out[sel] = vals.numpy()
        for t in (HOST, DISK):
            sel = np.flatnonzero(tier == t)
            if sel.size:
                arr = getattr(self._tier_store(t), what)
                arr = arr.numpy() if isinstance(arr, Tensor) else arr
                out[sel] = arr[pos[sel]]
        self._account(tier, owner, itemsize, "topology")
        return out

    def in_degree(self, ids: Tensor) -> Tensor:
        """In-degree of each node in ``ids``, int64 ``[len(ids)]`` (16 bytes read per node)."""
        self._check_open()
        idn = self._ids("ids", ids)
        tier, owner, start, end = self._bounds(idn)
        self._count_hits(tier, owner)
        return torch.from_numpy(end - start)

    def _positions(self, ids: Tensor, offsets: Tensor) -> tuple[np.ndarray, ...]:
        idn = self._ids("ids", ids)
        off_t = torch.as_tensor(offsets)
        if off_t.dim() != 1 or off_t.numel() != idn.size or off_t.is_floating_point():
            raise GraphError(
                f"'offsets' must be a 1-D integer tensor aligned with 'ids' ({idn.size} entries; "
                f"got {off_t.dtype} with shape {tuple(off_t.shape)})"
            )
        off = off_t.cpu().numpy().astype(np.int64, copy=False)
        tier, owner, start, end = self._bounds(idn)
        bad = (off < 0) | (off >= end - start)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise GraphError(
                f"'offsets[{i}]' = {int(off[i])} is outside [0, {int(end[i] - start[i])}), the "
                f"in-degree of node {int(idn[i])}; offsets index a node's in-edges"
            )
        self._count_hits(tier, owner)
        return tier, owner, start + off

    def neighbors_at(self, ids: Tensor, offsets: Tensor) -> Tensor:
        """``indices[indptr[ids] + offsets]`` as int64: the ``offsets``-th in-neighbour of each ID.

        Reads two ``indptr`` entries (bounds-checks the offsets) and one index per ID.
        """
        self._check_open()
        tier, owner, pos = self._positions(ids, offsets)
        return torch.from_numpy(self._read("indices", tier, owner, pos))

    def edge_weight_at(self, ids: Tensor, offsets: Tensor) -> Tensor:
        """``edge_weight[indptr[ids] + offsets]``."""
        self._check_open()
        if not self.has_edge_weight:
            raise GraphError("the graph has no 'edge_weight'; check has_edge_weight first")
        tier, owner, pos = self._positions(ids, offsets)
        return torch.from_numpy(self._read("weight", tier, owner, pos))

    def edge_ids_at(self, ids: Tensor, offsets: Tensor) -> Tensor:
        """``indptr[ids] + offsets``: the global ID (graph CSC position) of each in-edge.

        Keys edge features (``Graph.edge_attr``); reads the graph's ``indptr`` entries, which
        the :meth:`neighbors_at` call of the same edges has read already (no tier is charged).
        """
        self._check_open()
        idn = self._ids("ids", ids)
        off = torch.as_tensor(offsets).cpu().numpy().astype(np.int64, copy=False)
        return torch.from_numpy(np.asarray(self.graph.indptr[idn], dtype=np.int64) + off)

    def all_neighbors(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """``(counts [len(ids)], nbrs [counts.sum()])``: all in-neighbours, in ID then CSC order."""
        self._check_open()
        idn = self._ids("ids", ids)
        tier, owner, start, end = self._bounds(idn)
        self._count_hits(tier, owner)
        counts = end - start
        pos = np.repeat(start, counts) + segment_arange(counts)
        nbrs = self._read("indices", np.repeat(tier, counts), np.repeat(owner, counts), pos)
        return torch.from_numpy(counts), torch.from_numpy(nbrs)

    # ------------------------------------------------------------------ stats
    def hit_rates(self, kind: str = "features") -> dict[str, float]:
        """Fraction of requested rows served by each source since build (or :meth:`reset_stats`).

        Args:
            kind: ``"features"`` (rows gathered) or ``"topology"`` (node IDs looked up).

        Returns:
            ``{"local", "peer", "net", "host", "disk"}`` -> fraction (all 0 before any
            request); :data:`SOURCE_LINKS` names each source's link kind in :attr:`traffic`.
        """
        if kind not in self._hits:
            raise ConfigError(f"'kind' must be 'features' or 'topology' (got {kind!r})")
        h = self._hits[kind]
        total = sum(h.values())
        return {k: (v / total if total else 0.0) for k, v in h.items()}

    def requests(self, kind: str = "features") -> dict[str, int]:
        """Requested rows per source (the numerators of :meth:`hit_rates`)."""
        if kind not in self._hits:
            raise ConfigError(f"'kind' must be 'features' or 'topology' (got {kind!r})")
        return dict(self._hits[kind])

    def bytes_served(self, kind: str = "all") -> dict[str, int]:
        """Bytes served per link kind since build (or :meth:`reset_stats`), for one kind of data.

        The meter (:attr:`traffic`) holds the sum over both kinds. For ``"features"``,
        ``bytes_served("features")[SOURCE_LINKS[s]] == requests("features")[s] * F * itemsize``
        for every source ``s``.

        Args:
            kind: ``"features"``, ``"topology"`` (``indptr`` entries, indices and weights) or
                ``"all"`` (the sum).

        Returns:
            ``{"local", "peer", "net", "h2d", "disk"}`` -> bytes.

        Raises:
            ConfigError: On an unknown ``kind``.
        """
        if kind == "all":
            return {
                link: sum(self._bytes[k][link] for k in KINDS) for link in SOURCE_LINKS.values()
            }
        if kind not in self._bytes:
            raise ConfigError(f"'kind' must be 'features', 'topology' or 'all' (got {kind!r})")
        return dict(self._bytes[kind])

    @property
    def placement(self) -> PlacementPlan | None:
        """The partition placement the device tier follows (``None``: one partition per rank)."""
        return self.plan.placement

    def reads_by_source(self, kind: str = "all") -> dict[int, dict[str, int]]:
        """Device-tier reads of this rank per source rank since build (or :meth:`reset_stats`).

        Every device-tier read goes to one rank's shard: the own one (``source == rank``, link
        ``local``) or a peer's (``peer``). With a topology the source of partition ``p`` is
        ``placement.sources[rank][p]``, so these counts show the plan at work. Host and disk
        reads are not included (see :meth:`requests` and :attr:`traffic`).

        Args:
            kind: ``"features"`` (``rows``: feature rows gathered, ``bytes``: ``rows * F *
                itemsize``), ``"topology"`` (``rows``: node IDs whose segment was looked up,
                ``bytes``: ``indptr`` entries, indices and weights read) or ``"all"`` (the sums).

        Returns:
            ``{source_rank: {"rows": r, "bytes": b}}`` for every rank ``0..N-1`` (zeros where
            nothing was read).

        Raises:
            ConfigError: On an unknown ``kind``.
        """
        if kind == "all":
            counts = sum(self._reads[k] for k in KINDS)
        elif kind in self._reads:
            counts = self._reads[kind]
        else:
            raise ConfigError(f"'kind' must be 'features', 'topology' or 'all' (got {kind!r})")
        return {
            src: {"rows": int(counts[0, src]), "bytes": int(counts[1, src])}
            for src in range(self.world_size)
        }

    def reset_stats(self) -> None:
        """Zero the request counters, the bytes served, the reads per source and the meter."""
        for counters in (*self._hits.values(), *self._bytes.values()):
            for k in counters:
                counters[k] = 0
        for r in self._reads.values():
            r[:] = 0
        self.meter.reset()

    @property
    def traffic(self) -> dict[str, dict[str, int]]:
        """Snapshot of :attr:`meter`: link kind -> ``{"bytes", "messages"}``."""
        return self.meter.snapshot()

    def memory(self) -> dict[str, int]:
        """Bytes held per tier by this rank.

        ``device``: this rank's shards (features + topology, within ``budgets.device``);
        ``host``: the host tier of this rank's host (one copy shared by the host's ranks, within
        ``budgets.host``: the budget is per host); ``disk``: bytes left in the dataset's arrays.
        """
        disk = self.plan.topology.disk_bytes
        if self.plan.features is not None:
            disk += self.plan.features.disk_bytes
        return {"device": self._memory["device"], "host": self._memory["host"], "disk": disk}

    def close(self) -> None:
        """Release this rank's mappings of the shared tiers (local; idempotent)."""
        for h in self._handles:
            h.close()
        self._handles = []
        self._transfers.drain()
        self._index = None
        for c in self._owned:  # the host groups build() created
            c.destroy()
        self._owned = []
        self._feat_device = self._feat_host = None
        self._topo_device = self._topo_host = None
        self._x_disk = None  # the disk tier's own mapping goes with its last reference
        if self._x_reader is not None:
            self._x_reader.close()
            self._x_reader = None
        self._closed = True

    def __repr__(self) -> str:
        return (
            f"UnifiedStore(graph={self.graph.name!r}, rank={self.rank}/{self.world_size}, "
            f"memory={self.memory()},\n  {self.plan!r})"
        )
