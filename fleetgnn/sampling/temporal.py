"""Temporal neighbour sampling: a seed at time ``t`` only ever sees in-edges from before ``t``.

Edges carry integer times (``edge_time``, int64 ``[E]``, aligned with the CSC ``indices``) and
every node's in-edges are sorted by time (non-decreasing within ``indptr[v]:indptr[v+1]``).
Each seed comes with a time ``t``: the seed's own time for node tasks, the positive edge's time
for link prediction (its two endpoints and its negatives are seeds at that time).

Semantics (PyG's for edge-time temporal sampling, ``NeighborLoader(time_attr=...)``):

- **Candidates.** A node reached from a seed at time ``t`` may take the in-edges with
  ``time < t`` (``inclusive=True``: ``time <= t``). Because the segment is sorted, they are its
  first ``c`` in-edges; ``c`` is found by a binary search in the segment (vectorised over all
  nodes of a hop: ``ceil(log2(max degree + 1))`` rounds of one read per node, on the host or
  on the device; segments are ragged, so one ``searchsorted`` over them all does not apply).
  ``c`` is also the node's ``src_degree`` in the block: its in-degree as of ``t`` (the
  whole-graph degree would count future edges).
- **Time is inherited.** Every node of a seed's subtree, at every hop, uses the seed's ``t``
  (not the time of the edge it was reached by).
- **Disjoint subtrees.** Two seeds at different times may reach the same node with different
  candidates, so a node's identity within a batch is ``(seed index, node)``, as PyG forces
  (``disjoint=True``) for temporal sampling. Seeds need not be distinct (the same node at two
  times is two seeds).
- **Strategies.** ``"uniform"``: ``min(k, c)`` distinct candidates uniformly, keyed exactly as
  :class:`~fleetgnn.sampling.NeighborSampler` draws (same key per ``(seed, epoch, step,
  stream, hop)``, row key = the node's global ID, ``N`` = its candidate count ``c``): a node's
  sample is a pure function of ``(key, node, c)``, so with every time after every edge the
  temporal sample of each subtree equals the plain sampler's (and two subtrees that reach a
  node with the same ``c`` in one hop draw the same edges for it). ``"last"``: the ``min(k, c)``
  most recent candidates, i.e. the last ``min(k, c)`` edges of the candidate range; among
  edges with equal times the later in CSC order counts as more recent. Fanout ``-1`` (or
  ``c <= k``) takes every candidate. A block lists a node's edges in CSC (oldest-first) order.

How a disjoint batch fits :class:`~fleetgnn.sampling.Block`: each block's sources are the
distinct ``(seed index, node)`` pairs, destinations first; ``src_ids`` holds their GLOBAL node
IDs, so one node may appear several times (once per subtree that reached it) and the next hop's
destinations are those pairs again. Everything downstream indexes by local position
(``indices``, ``num_dst``, ``x_src[:num_dst]``), and feature gathers and the store take
repeated IDs, so the layers and the aggregator work unchanged. The seed index of every source
is in :attr:`TemporalSample.seed_index`. Keyed model randomness (dropout) is keyed by global ID,
so copies of one node in one batch draw the same mask. ``blocks[-1].dst_ids == seeds``. A
consumer that deduplicates or partitions a block's rows by global ID (an engine's exchange plan)
must keep the copies apart, e.g. by the key ``seed_index * N + src_ids``.

Where the times come from: a :class:`~fleetgnn.graph.Graph`'s ``edge_time`` (the default), an
explicit array or tensor (:class:`EdgeTimeArray`), or any :class:`EdgeTimeSource` (one method,
:meth:`~EdgeTimeSource.count_before`; :func:`bisect_counts` answers it over an array of times).

Backends, as in :mod:`fleetgnn.sampling.neighbor` (identical blocks, tested):

============================  ==============================  ==============================
step                          numpy backend                   torch backend
============================  ==============================  ==============================
candidate counts (bisection)  torch ops on the CPU            torch ops on the device
uniform draws                 ``_sample_offsets`` (numpy)     ``fisher_yates`` on the device
edge reads, ``last`` offsets  the topology's reads (host)     moved to the device
disjoint AppendUnique         ``_append_unique_numpy``        ``_append_unique_torch``
============================  ==============================  ==============================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph.csc import Graph
from fleetgnn.graph.edge_time import check_time_order
from fleetgnn.keyhash import serial
from fleetgnn.sampling.base import NodeSample, Sampler, sample_edges
from fleetgnn.sampling.block import Block
from fleetgnn.sampling.neighbor import (
    Backend,
    EdgeIdSource,
    GraphTopology,
    NeighborSampler,
    TopologySource,
    _as_ids,
    _as_topology,
    _check_key,
    _drop_excluded,
    _read_edges,
    _sample_hop,
    _work_device,
)
from fleetgnn.sampling.unique import _append_unique_numpy, _append_unique_torch

__all__ = [
    "EdgeTimeArray",
    "EdgeTimeSource",
    "TemporalSample",
    "TemporalSampler",
    "bisect_counts",
]

Strategy = Literal["uniform", "last"]
STRATEGIES = ("uniform", "last")


@runtime_checkable
class EdgeTimeSource(Protocol):
    """The one question the sampler asks of edge times (each node's in-edges sorted by time).

    An implementation over an array of times by CSC position can answer it with
    :func:`bisect_counts` (as :class:`EdgeTimeArray` does).
    """

    def count_before(self, ids: Tensor, t: Tensor, inclusive: bool = False) -> Tensor:
        """How many in-edges of each node are before its time: its candidates.

        Returns:
            int64 ``[len(ids)]`` on ``ids``' device: the number of in-edges of ``ids[i]`` with a
            time ``< t[i]`` (``<= t[i]`` when ``inclusive``), its first that many in-edges.
        """
        ...


def bisect_counts(
    read: Callable[[Tensor], Tensor], start: Tensor, deg: Tensor, t: Tensor, inclusive: bool
) -> Tensor:
    """Binary search in every time-sorted segment ``[start[i], start[i] + deg[i])`` at once.

    Branch-free: each round reads one time per segment (``read(positions)``, int64; a finished
    segment reads position 0) and halves every open interval, so ``ceil(log2(max(deg) + 1))``
    rounds, one host sync for that maximum and none in the rounds. Segments are ragged, so
    numpy's or torch's ``searchsorted`` (one sorted sequence, or equal-length rows) do not fit.

    Returns:
        int64 ``[len(start)]`` on ``deg``'s device: the entries of each segment before ``t``.
    """
    lo = torch.zeros_like(deg)
    if not deg.numel():
        return lo
    hi = deg.clone()
    for _ in range(int(deg.max()).bit_length()):
        active = lo < hi
        mid = (lo + hi) >> 1
        tm = read(torch.where(active, start + mid, 0)).to(deg.device)
        before = tm <= t if inclusive else tm < t
        lo = torch.where(active & before, mid + 1, lo)
        hi = torch.where(active & ~before, mid, hi)
    return lo


class EdgeTimeArray:
    """:class:`EdgeTimeSource` over an explicit ``edge_time`` array aligned with a CSC.

    Reads go through the topology's edge positions (:class:`EdgeIdSource`): numpy (or a
    memory map) is read on the host, a tensor on its own device.

    Args:
        topology: The topology the times belong to (a :class:`Graph` is wrapped); it must name
            its edges (``edge_ids_at``: a Graph, a DeviceTopology or a UnifiedStore do).
        edge_time: Integer ``[E]`` times ``>= 0`` aligned with the CSC ``indices``,
            non-decreasing within each node's in-edges (the graph format's ``edge_time``).
        validate: Check that order once, as the graph format does
            (:func:`~fleetgnn.graph.edge_time.check_time_order`: a chunked pass over the times,
            ``O(E + N)``; a device tensor is copied to the host for it); ``False`` trusts the
            source.

    Raises:
        GraphError: If the times are not integers, not ``[E]``, negative, or a segment is
            unsorted.
    """

    def __init__(
        self,
        topology: TopologySource | Graph,
        edge_time: np.ndarray | Tensor,
        *,
        validate: bool = True,
    ) -> None:
        topo = _as_topology(topology)
        if not isinstance(topo, EdgeIdSource):
            raise GraphError(
                f"edge_time needs a topology that names its edges (edge_ids_at); "
                f"{type(topo).__name__} does not: pass a Graph, a DeviceTopology or a UnifiedStore"
            )
        if isinstance(edge_time, Tensor):
            bad = edge_time.is_floating_point() or edge_time.is_complex()
            bad = bad or edge_time.dtype == torch.bool
        else:
            edge_time = edge_time if isinstance(edge_time, np.ndarray) else np.asarray(edge_time)
            bad = not np.issubdtype(edge_time.dtype, np.integer)
        if bad or edge_time.ndim != 1:
            raise GraphError(
                f"'edge_time' must be a 1-D integer array (int64, one time per edge; got "
                f"{edge_time.dtype} with shape {tuple(edge_time.shape)}); convert timestamps "
                f"to integers, e.g. seconds since the epoch"
            )
        num_edges = _num_edges(topo)
        if edge_time.shape[0] != num_edges:
            raise GraphError(
                f"'edge_time' must have one time per edge of the graph, {num_edges} "
                f"(got {edge_time.shape[0]}); align it with the CSC 'indices'"
            )
        self.topology = topo
        self.edge_time = edge_time
        if validate:
            _check_sorted(topo, edge_time)

    def count_before(self, ids: Tensor, t: Tensor, inclusive: bool = False) -> Tensor:
        """:meth:`EdgeTimeSource.count_before` by :func:`bisect_counts`, on ``ids``' device."""
        deg = self.topology.in_degree(ids).to(ids.device)
        start = self.topology.edge_ids_at(ids, torch.zeros_like(ids))  # type: ignore[attr-defined]
        return bisect_counts(self._read, start.to(ids.device), deg, t.to(ids.device), inclusive)

    def _read(self, pos: Tensor) -> Tensor:
        if isinstance(self.edge_time, Tensor):
            return self.edge_time[pos.to(self.edge_time.device)].long()
        return torch.from_numpy(np.asarray(self.edge_time[pos.cpu().numpy()], dtype=np.int64))

    def __repr__(self) -> str:
        return f"EdgeTimeArray(num_edges={self.edge_time.shape[0]}, dtype={self.edge_time.dtype})"


def _num_edges(topo: TopologySource) -> int:
    """``indptr[N]``, read as the position one past the last node's last in-edge."""
    n = topo.num_nodes
    if n == 0:
        return 0
    last = torch.tensor([n - 1])
    return int(topo.edge_ids_at(last, topo.in_degree(last)))  # type: ignore[attr-defined]


def _check_sorted(topo: TopologySource, edge_time: np.ndarray | Tensor) -> None:
    """The graph format's check (:func:`~fleetgnn.graph.edge_time.check_time_order`)."""
    n = topo.num_nodes
    ids = torch.arange(n)
    starts = topo.edge_ids_at(ids, torch.zeros_like(ids)).cpu().numpy()  # type: ignore[attr-defined]
    indptr = np.append(starts, np.int64(edge_time.shape[0]))
    host = edge_time.detach().cpu().numpy() if isinstance(edge_time, Tensor) else edge_time
    check_time_order(indptr, host)


def _as_times(name: str, times: object, length: int, device: torch.device) -> Tensor:
    t = torch.as_tensor(times) if not isinstance(times, Tensor) else times
    if t.dim() != 1 or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise GraphError(
            f"'{name}' must be a 1-D integer tensor, one time per seed (got {t.dtype} with "
            f"shape {tuple(t.shape)}); convert timestamps to int64 like 'edge_time'"
        )
    if t.numel() != length:
        raise GraphError(
            f"'{name}' must hold one time per seed, {length} (got {t.numel()}); link "
            f"prediction gives both endpoints and the negatives of a pair the pair's time"
        )
    return t.to(device, torch.int64)


def _last_offsets(cnt: Tensor, fanout: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(indptr_s, row, offsets)`` of each node's last ``min(cnt, fanout)`` candidates."""
    take = cnt if fanout < 0 else cnt.clamp(max=fanout)
    indptr_s = torch.zeros(cnt.numel() + 1, dtype=torch.int64, device=cnt.device)
    torch.cumsum(take, 0, out=indptr_s[1:])
    total = int(indptr_s[-1])
    seq = torch.arange(cnt.numel(), dtype=torch.int64, device=cnt.device)
    row = torch.repeat_interleave(seq, take, output_size=total)
    pos = torch.arange(total, dtype=torch.int64, device=cnt.device) - indptr_s[row]
    return indptr_s, row, pos + (cnt - take)[row]


@dataclasses.dataclass(frozen=True, eq=False)
class TemporalSample(NodeSample):
    """The blocks of one temporal mini-batch and the subtree every source belongs to.

    Attributes:
        blocks: ``num_layers`` blocks from the input layer to the output layer (as
            :meth:`NeighborSampler.sample_from_nodes` returns them); ``blocks[-1].dst_ids ==
            seeds``.
        seed_index: Per block, int64 ``[num_src]``: the position in ``seeds`` of the seed whose
            subtree each source belongs to (``seed_index[-1][:B] == arange(B)``).
        seed_time: int64 ``[B]``: the seeds' times.
    """

    blocks: tuple[Block, ...]
    seed_index: tuple[Tensor, ...]
    seed_time: Tensor

    def src_time(self, layer: int) -> Tensor:
        """int64 ``[num_src]`` of ``blocks[layer]``: the time every source was sampled at."""
        return self.seed_time[self.seed_index[layer]]

    def __repr__(self) -> str:
        return f"TemporalSample(num_seeds={self.seed_time.numel()}, blocks={list(self.blocks)})"


class TemporalSampler(Sampler):
    """Multi-layer temporal neighbour sampler (module docstring: semantics and backends).

    Fanouts, keys, backends and the block order are :class:`NeighborSampler`'s: hop ``h`` of
    ``sample_from_nodes(seeds, seed_time=t, epoch=e, step=s, stream=k)`` draws with :meth:`key`
    ``(epoch, step, h, k)``, ``blocks[L - 1 - h]`` was sampled with ``fanouts[h]``.

    Args:
        topology: A :class:`TopologySource` or a :class:`Graph`.
        fanouts: Neighbours per node for each hop, ``-1`` = all candidates.
        seed: Base seed (>= 0).
        edge_time: The edges' times: an integer ``[E]`` array or tensor aligned with the CSC
            ``indices`` (wrapped in :class:`EdgeTimeArray`), or an :class:`EdgeTimeSource`;
            ``None`` takes a :class:`Graph`'s ``edge_time`` (trusted: the graph format checks
            its order when a graph is built or written), or reads the times from a topology
            that is an :class:`EdgeTimeSource`. A :class:`DeviceTopology` carries no times:
            pass them as a tensor on its device.
        strategy: ``"uniform"`` or ``"last"``.
        inclusive: Candidates are edges with ``time <= t`` instead of ``time < t``.
        backend: ``"auto"``, ``"numpy"`` or ``"torch"``.
        with_edge_ids: Record every sampled edge's global ID in :attr:`Block.edge_ids`.
        validate: Check a given ``edge_time`` array's per-node order once (``O(E)``).

    Raises:
        GraphError: If no edge times are found, or they are malformed.
        ConfigError: If ``fanouts``, ``seed``, ``strategy`` or ``backend`` is invalid.
    """

    def __init__(
        self,
        topology: TopologySource | Graph,
        fanouts: Sequence[int],
        seed: int = 0,
        *,
        edge_time: np.ndarray | Tensor | EdgeTimeSource | None = None,
        strategy: Strategy = "uniform",
        inclusive: bool = False,
        backend: Backend = "auto",
        with_edge_ids: bool = False,
        validate: bool = True,
    ) -> None:
        # the plain sampler checks fanouts, seed, backend and edge IDs, and owns the key
        self._plain = NeighborSampler(
            topology, fanouts, seed, backend=backend, with_edge_ids=with_edge_ids
        )
        self.topology = self._plain.topology
        self.fanouts, self.seed = self._plain.fanouts, self._plain.seed
        self.backend = self._plain.backend
        self.with_edge_ids = self._plain.with_edge_ids
        self.with_edge_weight = self._plain.with_edge_weight
        if strategy not in STRATEGIES:
            raise ConfigError(
                f"'strategy' must be one of {', '.join(map(repr, STRATEGIES))} (got "
                f"{strategy!r}); 'last' takes the most recent candidates"
            )
        self.strategy: Strategy = strategy
        self.inclusive = bool(inclusive)
        self.times = self._resolve_times(edge_time, validate)

    def _resolve_times(self, edge_time: object, validate: bool) -> EdgeTimeSource:
        if edge_time is None:
            topo = self.topology
            if isinstance(topo, GraphTopology) and topo.graph.edge_time is not None:
                # the graph format guarantees the order (checked when built or written)
                return EdgeTimeArray(topo, topo.graph.edge_time, validate=False)
            if isinstance(topo, EdgeTimeSource):
                return topo
            raise GraphError(
                f"the sampler has no edge times: pass edge_time= (int64 [E], aligned with the "
                f"CSC 'indices', sorted within each node's in-edges), or a topology with "
                f"count_before ({type(self.topology).__name__} has none)"
            )
        if isinstance(edge_time, EdgeTimeSource):
            return edge_time
        return EdgeTimeArray(self.topology, edge_time, validate=validate)  # type: ignore[arg-type]

    @property
    def num_layers(self) -> int:
        """Number of blocks each sample returns."""
        return len(self.fanouts)

    def key(self, epoch: int, step: int, hop: int, stream: int = 0) -> int:
        """The 64-bit key of hop ``hop`` of batch ``(epoch, step, stream)`` (the plain one's)."""
        return self._plain.key(epoch, step, hop, stream)

    def sample_from_nodes(
        self,
        seeds: Tensor,
        *,
        seed_time: Tensor | None = None,
        epoch: int = 0,
        step: int = 0,
        stream: int = 0,
        exclude: Tensor | None = None,
    ) -> TemporalSample:
        """Sample the blocks of one temporal mini-batch.

        Args:
            seeds: int64 ``[B]`` global IDs of the output nodes (repeats allowed: one subtree
                each).
            seed_time: Integer ``[B]``: each seed's time ``t`` (required).
            epoch: Epoch index (>= 0), part of the random key.
            step: Step index within the epoch (>= 0), part of the random key.
            stream: Extra key, e.g. the data-parallel rank (>= 0).
            exclude: Sorted edge keys (:func:`~fleetgnn.sampling.edge_keys`) dropped from every
                hop's sampled edges after sampling, as in
                :meth:`NeighborSampler.sample_from_nodes`; the
                keys name global IDs, so an excluded edge is dropped in every subtree.

        Returns:
            A :class:`TemporalSample`: the blocks and each source's seed index.

        Raises:
            GraphError: If a seed is out of range, or ``seed_time`` is not ``[B]`` integers.
        """
        if seed_time is None:
            raise GraphError(
                "TemporalSampler samples each seed at its time: pass seed_time= (integer [B]) "
                "to sample_from_nodes, or the pairs' time= (integer [P]) to sample_from_edges"
            )
        key = [_check_key(n, v) for n, v in (("epoch", epoch), ("step", step), ("stream", stream))]
        dev = _work_device(self.topology, seeds, self.backend)
        n = self.topology.num_nodes
        node = _as_ids("seeds", seeds, n, dev)
        t = _as_times("seed_time", seed_time, node.numel(), node.device)
        if node.numel() * n >= 1 << 63:
            raise GraphError(
                f"a batch of {node.numel()} seeds over {n} nodes overflows the int64 keys "
                f"(seed index, node) of disjoint sampling; use smaller batches"
            )
        owner = torch.arange(node.numel(), dtype=torch.int64, device=node.device)
        blocks: list[Block] = []
        index: list[Tensor] = []
        with serial(dev or torch.device("cpu")):
            cnt = self.times.count_before(node, t, self.inclusive)
            for hop, fanout in enumerate(self.fanouts):
                k = self.key(key[0], key[1], hop, key[2])
                block, owner, cnt = self._hop(node, owner, cnt, t, fanout, k, dev, exclude)
                blocks.append(block)
                index.append(owner)
                node = block.src_ids
        blocks.reverse()
        index.reverse()
        return TemporalSample(blocks=tuple(blocks), seed_index=tuple(index), seed_time=t)

    #: The link batch's blocks at the pairs' ``time`` (required; :meth:`Sampler.sample_from_edges`):
    #: the seeds are the distinct ``(node, time)`` pairs of the endpoints and negatives.
    sample_from_edges = sample_edges

    def _hop(
        self,
        node: Tensor,
        owner: Tensor,
        cnt: Tensor,
        t: Tensor,
        fanout: int,
        key: int,
        dev: torch.device | None,
        exclude: Tensor | None,
    ) -> tuple[Block, Tensor, Tensor]:
        """One hop from the destinations ``(owner, node)`` with ``cnt`` candidates each."""
        topo, weighted, eids = self.topology, self.with_edge_weight, self.with_edge_ids
        if self.strategy == "uniform":
            indptr_s, nbrs, weight, edge_ids = _sample_hop(
                topo, node, cnt, fanout, key, weighted, dev, eids
            )
        else:
            ptr, row, off = _last_offsets(cnt, fanout)
            if dev is None:
                ptr, row, off = ptr.numpy(), row.numpy(), off.numpy()  # type: ignore[assignment]
            indptr_s, nbrs, weight, edge_ids = _read_edges(
                topo, node, ptr, row, off, weighted, dev, eids
            )
        num_dst = int(node.numel())
        indptr_s, nbrs, weight, edge_ids = _drop_excluded(
            node, topo.num_nodes, indptr_s, nbrs, weight, edge_ids, exclude
        )
        n = max(topo.num_nodes, 1)  # keys (seed index, node) -> seed index * n + node
        counts = indptr_s[1:] - indptr_s[:-1]
        owner_e = torch.repeat_interleave(owner, counts.to(owner.device))
        dst_keys = owner * n + node  # a node's identity in the batch: (seed index, node)
        nbr_keys = owner_e.to(nbrs.device) * n + nbrs
        if dev is None:
            src_keys, local, _ = _append_unique_numpy(dst_keys, nbr_keys)
        else:
            src_keys, local, _ = _append_unique_torch(
                dst_keys,
                nbr_keys,
                num_nodes=int(t.numel()) * n,  # every key lies in [0, B * n)
                distinct_targets=True,
                counts=False,
            )
        src_ids, src_owner = src_keys % n, src_keys // n
        new = src_ids[num_dst:]
        new_cnt = self.times.count_before(new, t[src_owner[num_dst:]], self.inclusive)
        src_cnt = torch.cat([cnt.to(new_cnt.device), new_cnt])
        block = Block(
            indptr=indptr_s,
            indices=local,
            src_ids=src_ids,
            num_dst=num_dst,
            src_degree=src_cnt.to(torch.float32),
            edge_weight=weight,
            edge_ids=edge_ids,
        )
        return block, src_owner, src_cnt

    def __repr__(self) -> str:
        return (
            f"TemporalSampler(fanouts={list(self.fanouts)}, strategy={self.strategy!r}, "
            f"inclusive={self.inclusive}, seed={self.seed}, backend={self.backend!r}, "
            f"num_nodes={self.topology.num_nodes})"
        )
