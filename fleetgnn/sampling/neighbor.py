"""Uniform neighbour sampling without replacement, AppendUnique, and the multi-layer sampler.

Sampling is vectorised over all seeds of a batch at once. For a seed with in-degree ``N`` and
fanout ``M < N`` it draws ``r_i`` uniformly from ``[0, N - 1 - i]`` for ``i < M`` (keyed draws,
below) and turns the draws into ``M`` distinct edge offsets with WholeGraph's Algorithm 1 (after
Rajan et al.): a stable sort of the draws plus a path-doubling pass yields exactly what the
sequential partial Fisher-Yates shuffle produces for the same draws::

    A = [0, 1, ..., N - 1]
    for i in range(M):
        out[i] = A[r[i]]
        A[r[i]] = A[N - 1 - i]

so every ``M``-subset of the ``N`` in-edges is equally likely. A seed with ``N <= M`` (or fanout
``-1``) takes all its in-edges in CSC order. Offsets are edge positions, so a multigraph's parallel
edges can both be sampled (distinct edges, repeated source ID).

The draws are keyed, not streamed: ``r_i = (h_i * (N - i)) >> 32`` with ``h_i`` the 32-bit
element hash of :mod:`fleetgnn.keyhash` (the hash of keyed dropout) for row key
``mix64(k ^ node ID)`` and column ``i``, where ``k`` mixes ``(seed, epoch, step, stream, hop)``.
A seed's sample is a pure function of its key and its node ID, whatever the device, the order of
the seeds or the batch it lands in (a node listed twice in one call gets the same sample twice).
Multiply-shift keeps each value's probability within ``N / 2^32`` (relative) of uniform.

Two implementations give identical blocks (``tests/sampling/test_neighbor.py``): numpy (the CPU
default; its sorts and fancy indexing are the faster ones there) and torch (every step on the
seeds' device; the default for seeds or topology off the CPU, selectable on the CPU with
``backend="torch"``; on the CPU both run on one intra-op thread, see
:func:`fleetgnn.keyhash.serial`):

==================  =========================================  ===============================
step                numpy backend                              torch backend
==================  =========================================  ===============================
draws and           keyed hash in numpy, then                  :func:`~fleetgnn.kernels.
Algorithm 1         ``_offsets_numpy``                         fisher_yates`` on the device:
                                                               torch's ops (keyed hash, then
                                                               ``_offsets_torch``) or one
                                                               Triton kernel (the partial
                                                               shuffle itself, per seed)
neighbour reads     the topology's reads, on the host          the topology's reads, moved to
                                                               the device if they are not there
AppendUnique        ``_append_unique_numpy``                   ``_append_unique_torch``
                    (:mod:`fleetgnn.sampling.unique`)
==================  =========================================  ===============================

Topology is read through the small :class:`TopologySource` protocol, implemented here by
:class:`GraphTopology` for an in-memory or memory-mapped :class:`~fleetgnn.graph.Graph` (numpy
reads on the host) and :class:`DeviceTopology` for CSC tensors on a device (torch reads there);
a distributed store implements the same four reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, cast, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph.csc import Graph, check_edge_ids, check_ids
from fleetgnn.kernels import fisher_yates
from fleetgnn.kernels import offsets_torch as _offsets_torch
from fleetgnn.keyhash import (
    base_key,
    bounded_draws_numpy,
    mix64_numpy,
    serial,
)
from fleetgnn.sampling.base import NodeSample, Sampler, edge_keys, no_time, sample_edges
from fleetgnn.sampling.block import Block
from fleetgnn.sampling.unique import _append_unique_numpy, _append_unique_torch, append_unique

__all__ = [
    "DeviceTopology",
    "GraphTopology",
    "NeighborSampler",
    "TopologySource",
    "append_unique",
    "edge_keys",
    "full_neighbor_block",
    "sample_neighbors",
    "sample_neighbors_from",
]

RandomSource = np.random.Generator | int
Backend = Literal["auto", "numpy", "torch"]
BACKENDS = ("auto", "numpy", "torch")
_SALT_SAMPLE = 0x73616D70  # "samp"


# ---------------------------------------------------------------------------------- topology
@runtime_checkable
class TopologySource(Protocol):
    """Read access to a graph's CSC topology by global node ID.

    All IDs and results are int64 tensors; ``ids`` and ``offsets`` of :meth:`neighbors_at` are
    aligned (one offset per ID, an ID may repeat).
    """

    @property
    def num_nodes(self) -> int:
        """Number of nodes ``N``; valid IDs are ``[0, N)``."""
        ...

    @property
    def has_edge_weight(self) -> bool:
        """Whether :meth:`edge_weight_at` returns weights."""
        ...

    def in_degree(self, ids: Tensor) -> Tensor:
        """In-degree of each node in ``ids``, int64 ``[len(ids)]``."""
        ...

    def neighbors_at(self, ids: Tensor, offsets: Tensor) -> Tensor:
        """``indices[indptr[ids] + offsets]``: the ``offsets``-th in-neighbour of each ID."""
        ...

    def all_neighbors(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """``(counts, nbrs)``: every in-neighbour of each ID, concatenated in ID then CSC order."""
        ...

    def edge_weight_at(self, ids: Tensor, offsets: Tensor) -> Tensor:
        """``edge_weight[indptr[ids] + offsets]`` (only when :attr:`has_edge_weight`)."""
        ...


@runtime_checkable
class EdgeIdSource(Protocol):
    """A topology that also names the global ID of an in-edge (its position in the CSC).

    Edge IDs key per-edge data (``Graph.edge_attr``): a sampler built ``with_edge_ids`` records
    each sampled edge's ID in :attr:`Block.edge_ids`.
    """

    def edge_ids_at(self, ids: Tensor, offsets: Tensor) -> Tensor:
        """``indptr[ids] + offsets`` as int64: the global ID of each ``offsets``-th in-edge."""
        ...


class GraphTopology:
    """:class:`TopologySource` over a :class:`~fleetgnn.graph.Graph`'s numpy arrays.

    Works on memory-mapped arrays: every read is one numpy fancy-index (only the touched pages
    are loaded), converted with ``torch.from_numpy``. Results live on the CPU.

    Args:
        graph: The graph; its ``indptr``/``indices`` (and ``edge_weight``) are read, never copied.
    """

    def __init__(self, graph: Graph) -> None:
        if not isinstance(graph, Graph):
            raise GraphError(
                f"'graph' must be a fleetgnn Graph (got {type(graph).__name__}); build one with "
                f"fleetgnn.graph.from_edges or open_dataset"
            )
        check_edge_ids(graph)  # a memory-mapped file may have changed since it was checked
        self.graph = graph
        self._indptr = graph.indptr
        self._indices = graph.indices
        self._weight = graph.edge_weight

    @classmethod
    def from_csc(
        cls,
        indptr: np.ndarray | Tensor,
        indices: np.ndarray | Tensor,
        edge_weight: np.ndarray | Tensor | None = None,
    ) -> GraphTopology:
        """Wrap raw CSC arrays (shapes and dtypes are checked, values are not)."""

        def as_np(a: np.ndarray | Tensor | None) -> np.ndarray | None:
            if a is None:
                return None
            return a.detach().cpu().numpy() if isinstance(a, Tensor) else np.asarray(a)

        graph = Graph(
            indptr=as_np(indptr),  # type: ignore[arg-type]
            indices=as_np(indices),  # type: ignore[arg-type]
            edge_weight=as_np(edge_weight),
            validate="structure",
        )
        return cls(graph)

    @property
    def num_nodes(self) -> int:
        """Number of nodes ``N``."""
        return self.graph.num_nodes

    @property
    def has_edge_weight(self) -> bool:
        """Whether the graph carries edge weights."""
        return self._weight is not None

    def in_degree(self, ids: Tensor) -> Tensor:
        """In-degree of each node in ``ids``, int64."""
        i = ids.cpu().numpy()
        return torch.from_numpy(np.asarray(self._indptr[i + 1] - self._indptr[i], dtype=np.int64))

    def _positions(self, ids: Tensor, offsets: Tensor) -> np.ndarray:
        return self._indptr[ids.cpu().numpy()] + offsets.cpu().numpy()

    def neighbors_at(self, ids: Tensor, offsets: Tensor) -> Tensor:
        """``indices[indptr[ids] + offsets]`` as int64."""
        pos = self._positions(ids, offsets)
        return torch.from_numpy(self._indices[pos].astype(np.int64, copy=False))

    def all_neighbors(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """Every in-neighbour of each ID: ``(counts [len(ids)], nbrs [counts.sum()])``."""
        counts = self.in_degree(ids)
        offsets = _segment_arange(counts)
        ids_rep = torch.repeat_interleave(ids.cpu(), counts)
        return counts, self.neighbors_at(ids_rep, offsets)

    def edge_weight_at(self, ids: Tensor, offsets: Tensor) -> Tensor:
        """``edge_weight[indptr[ids] + offsets]``."""
        if self._weight is None:
            raise GraphError("the graph has no 'edge_weight'; check has_edge_weight first")
        return torch.from_numpy(np.asarray(self._weight[self._positions(ids, offsets)]))

    def edge_ids_at(self, ids: Tensor, offsets: Tensor) -> Tensor:
        """``indptr[ids] + offsets`` as int64 (:class:`EdgeIdSource`)."""
        return torch.from_numpy(np.asarray(self._positions(ids, offsets), dtype=np.int64))

    def __repr__(self) -> str:
        return f"GraphTopology({self.graph!r})"


class DeviceTopology:
    """:class:`TopologySource` over CSC tensors on one device (the torch sampler's topology).

    Every read is torch indexing on :attr:`device`: IDs from elsewhere are moved there, results
    stay there, so sampling with seeds on the same device never leaves it.

    Args:
        indptr: int64 ``[N + 1]`` CSC offsets.
        indices: int ``[E]`` in-neighbours grouped by destination (int32 or int64).
        edge_weight: Optional ``[E]`` weights.

    Raises:
        GraphError: If the tensors' shapes, dtypes or devices disagree.
    """

    def __init__(self, indptr: Tensor, indices: Tensor, edge_weight: Tensor | None = None) -> None:
        for name, t in (("indptr", indptr), ("indices", indices)):
            if not isinstance(t, Tensor) or t.dim() != 1 or t.is_floating_point():
                raise GraphError(
                    f"'{name}' must be a 1-D integer tensor (got {type(t).__name__} "
                    f"{getattr(t, 'dtype', '')} with shape {tuple(getattr(t, 'shape', ()))})"
                )
        if indptr.dtype != torch.int64 or indptr.numel() < 1:
            raise GraphError(
                f"'indptr' must be int64 with N + 1 >= 1 entries (got {indptr.dtype} "
                f"[{indptr.numel()}])"
            )
        tensors = [indptr, indices] + ([] if edge_weight is None else [edge_weight])
        if len({t.device for t in tensors}) != 1:
            raise GraphError(
                f"'indptr', 'indices' and 'edge_weight' must be on one device (got "
                f"{[str(t.device) for t in tensors]}); move them with .to(device)"
            )
        if int(indptr[-1]) != indices.numel() or (
            edge_weight is not None and edge_weight.shape != indices.shape
        ):
            raise GraphError(
                f"'indptr[-1]' ({int(indptr[-1])}) must equal the number of 'indices' "
                f"({indices.numel()}), and 'edge_weight' must be aligned with them"
            )
        self.indptr = indptr
        self.indices = indices
        self.edge_weight = edge_weight

    @classmethod
    def from_graph(cls, graph: Graph, device: torch.device | str = "cpu") -> DeviceTopology:
        """Copy ``graph``'s CSC arrays (and edge weights) to ``device``."""
        if not isinstance(graph, Graph):
            raise GraphError(f"'graph' must be a fleetgnn Graph (got {type(graph).__name__})")
        check_edge_ids(graph)

        def move(a: np.ndarray | None, step: int = 1 << 24) -> Tensor | None:
            if a is None:  # chunk by chunk: a memory map never becomes one host copy
                return None
            out = torch.empty(len(a), dtype=torch.from_numpy(a[:0].copy()).dtype, device=device)
            for i in range(0, len(a), step):
                out[i : i + step] = torch.from_numpy(np.array(a[i : i + step]))
            return out

        return cls(move(graph.indptr), move(graph.indices), move(graph.edge_weight))  # type: ignore[arg-type]

    @property
    def device(self) -> torch.device:
        """Where the topology lives and every read runs."""
        return self.indptr.device

    @property
    def num_nodes(self) -> int:
        """Number of nodes ``N``."""
        return self.indptr.numel() - 1

    @property
    def has_edge_weight(self) -> bool:
        """Whether edge weights were given."""
        return self.edge_weight is not None

    def in_degree(self, ids: Tensor) -> Tensor:
        """In-degree of each node in ``ids``, int64, on :attr:`device`."""
        i = ids.to(self.device)
        return self.indptr[i + 1] - self.indptr[i]

    def _positions(self, ids: Tensor, offsets: Tensor) -> Tensor:
        return self.indptr[ids.to(self.device)] + offsets.to(self.device)

    def neighbors_at(self, ids: Tensor, offsets: Tensor) -> Tensor:
        """``indices[indptr[ids] + offsets]`` as int64, on :attr:`device`."""
        return self.indices[self._positions(ids, offsets)].long()

    def all_neighbors(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """Every in-neighbour of each ID: ``(counts [len(ids)], nbrs [counts.sum()])``."""
        i = ids.to(self.device)
        counts = self.in_degree(i)
        return counts, self.neighbors_at(
            torch.repeat_interleave(i, counts), _segment_arange(counts)
        )

    def edge_weight_at(self, ids: Tensor, offsets: Tensor) -> Tensor:
        """``edge_weight[indptr[ids] + offsets]``, on :attr:`device`."""
        if self.edge_weight is None:
            raise GraphError("the topology has no 'edge_weight'; check has_edge_weight first")
        return self.edge_weight[self._positions(ids, offsets)]

    def edge_ids_at(self, ids: Tensor, offsets: Tensor) -> Tensor:
        """``indptr[ids] + offsets`` as int64, on :attr:`device` (:class:`EdgeIdSource`)."""
        return self._positions(ids, offsets)

    def __repr__(self) -> str:
        return (
            f"DeviceTopology(num_nodes={self.num_nodes}, num_edges={self.indices.numel()}, "
            f"device={self.device})"
        )


def _as_topology(topology: TopologySource | Graph) -> TopologySource:
    if isinstance(topology, Graph):
        return GraphTopology(topology)
    if not isinstance(topology, TopologySource):
        raise GraphError(
            f"'topology' must be a Graph or implement TopologySource (num_nodes, in_degree, "
            f"neighbors_at, all_neighbors, ...) (got {type(topology).__name__})"
        )
    return topology


# ---------------------------------------------------------------------------------- helpers
def _segment_arange(counts: Tensor) -> Tensor:
    """``cat([arange(c) for c in counts])`` without a Python loop, on ``counts``' device."""
    total = int(counts.sum())
    starts = torch.cumsum(counts, 0) - counts
    dev = counts.device
    return torch.arange(total, dtype=torch.int64, device=dev) - torch.repeat_interleave(
        starts, counts, output_size=total
    )


def _as_ids(name: str, ids: object, num_nodes: int, device: torch.device | None = None) -> Tensor:
    """``ids`` as int64 on ``device`` (the CPU when None), checked to lie in ``[0, N)``."""
    t = torch.as_tensor(ids) if not isinstance(ids, Tensor) else ids
    if t.dim() != 1 or t.is_floating_point() or t.dtype == torch.bool or t.is_complex():
        raise GraphError(
            f"'{name}' must be a 1-D integer tensor of node IDs (got {t.dtype} with shape "
            f"{tuple(t.shape)})"
        )
    t = t.to(device or "cpu", torch.int64)
    if t.device.type == "cpu":
        check_ids(name, t.numpy(), num_nodes, hint="pass global IDs of this graph")
    elif t.numel():
        lo, hi = torch.aminmax(t)  # one synchronisation for both bounds
        check_ids(name, np.array([int(lo), int(hi)]), num_nodes, "pass global IDs of this graph")
    return t


def _check_backend(backend: object) -> str:
    if backend not in BACKENDS:
        raise ConfigError(
            f"'backend' must be one of {', '.join(map(repr, BACKENDS))} (got {backend!r}); "
            f"'auto' samples with torch where the seeds or the topology are off the CPU"
        )
    return str(backend)


def _work_device(topo: TopologySource, seeds: object, backend: str) -> torch.device | None:
    """The device the torch backend samples on, or None for the numpy backend.

    ``auto`` picks torch when the seeds, or else the topology (a :class:`DeviceTopology`), are
    off the CPU; the torch backend then runs there (on the CPU when both are on it).
    """
    dev = seeds.device if isinstance(seeds, Tensor) else torch.device("cpu")
    if dev.type == "cpu":
        dev = getattr(topo, "device", dev)
    if backend == "numpy" or (backend == "auto" and dev.type == "cpu"):
        return None
    return dev


def _check_fanout(name: str, fanout: object) -> int:
    if isinstance(fanout, bool) or not isinstance(fanout, (int, np.integer)) or fanout < -1:
        raise ConfigError(
            f"'{name}' must be an int >= 0, or -1 for all neighbours (got {fanout!r}); "
            f"e.g. fanouts=[15, 10, 5]"
        )
    return int(fanout)


def _as_key(rng: RandomSource) -> int:
    """The 64-bit key of a call's draws: from a seed int, or drawn from a numpy Generator."""
    if isinstance(rng, np.random.Generator):
        return base_key(_SALT_SAMPLE, int(rng.integers(0, 1 << 63)))
    if isinstance(rng, bool) or not isinstance(rng, (int, np.integer)) or rng < 0:
        raise ConfigError(
            f"'rng' must be a numpy Generator or a seed int >= 0 (got {rng!r}); "
            f"e.g. rng=np.random.default_rng(0)"
        )
    return base_key(_SALT_SAMPLE, int(rng))


# ---------------------------------------------------------------------------------- Alg. 1
def _draws_numpy(ids: np.ndarray, deg: np.ndarray, fanout: int, key: int) -> np.ndarray:
    """:func:`~fleetgnn.kernels.keyed_draws` in numpy (bit-identical): int64 ``[S, fanout]``."""
    rows = mix64_numpy(ids.astype(np.int64).view(np.uint64) ^ np.uint64(key))  # [S] row keys
    return bounded_draws_numpy(rows, deg[:, None] - np.arange(fanout, dtype=np.int64))


def _offsets_from_draws(r: Tensor, deg: Tensor) -> Tensor:
    """Distinct offsets from Fisher-Yates draws, vectorised over rows (WholeGraph Alg. 1).

    Row ``s`` equals the sequential partial Fisher-Yates output for array ``arange(deg[s])`` and
    draws ``r[s]`` (``out_i = A[r_i]; A[r_i] = A[N - 1 - i]``). With ``N = deg[s]``, ``M`` the
    row length, ``s, p`` the draws sorted stably (``p`` = original step of each sorted draw) and
    ``q`` the inverse of ``p``:

    - ``chain[j] = k`` when step ``k`` (the last of its run of equal draws) wrote slot
      ``N - 1 - j``, i.e. ``r_k = N - 1 - j``; else ``chain[j] = j``. Path doubling
      (``chain = chain[chain]``, ``ceil(log2 M)`` rounds) resolves each chain to its root ``c``,
      and step ``j`` wrote the value ``last[j] = N - 1 - c`` into slot ``r_j``.
    - Step ``i`` reads ``r_i`` itself if it is the first of its run (no earlier write to slot
      ``r_i``), else the value the previous step of its run wrote: ``last[p[q[i] - 1]]``.

    CPU tensors are computed with numpy, others with torch (same results).

    Args:
        r: int64 ``[S, M]`` draws with ``0 <= r[s, i] <= deg[s] - 1 - i``.
        deg: int64 ``[S]`` degrees, ``deg[s] >= M``.

    Returns:
        int64 ``[S, M]`` offsets; each row holds ``M`` distinct values in ``[0, deg[s])``.
    """
    if r.device.type == "cpu":
        return torch.from_numpy(_offsets_numpy(r.numpy(), deg.cpu().numpy()))
    return _offsets_torch(r, deg.to(r.device))


def _offsets_numpy(r: np.ndarray, deg: np.ndarray) -> np.ndarray:
    num_rows, m = r.shape
    if num_rows == 0 or m == 0:
        return r.copy()
    step = np.arange(m, dtype=np.int64)
    n = deg.astype(np.int64)[:, None]  # [S, 1]
    keys = r * m + step  # unique per row, so sorting keys is a stable sort of r
    keys.sort(axis=1)
    p = keys % m  # [S, M] step at each sorted position
    s = keys // m  # [S, M] sorted draws
    q = np.empty_like(p)
    np.put_along_axis(q, p, np.broadcast_to(step, (num_rows, m)), axis=1)  # q = p^-1
    new_run = np.ones((num_rows, m), dtype=bool)
    np.not_equal(s[:, 1:], s[:, :-1], out=new_run[:, 1:])
    writes = s >= n - m  # the write reaches a slot N-1-j with j < M ...
    writes[:, :-1] &= new_run[:, 1:]  # ... and is the last write to that slot
    chain = np.empty((num_rows, m + 1), dtype=np.int64)  # column m absorbs non-writes
    chain[:, :m] = step
    np.put_along_axis(chain, np.where(writes, n - s - 1, m), p, axis=1)
    chain = chain[:, :m]
    for _ in range((m - 1).bit_length()):  # path doubling: chains have <= M - 1 links
        chain = np.take_along_axis(chain, chain, axis=1)
    first = np.take_along_axis(new_run, q, axis=1)
    prev = np.take_along_axis(p, np.maximum(q - 1, 0), axis=1)  # previous writer of slot r_i
    return np.where(first, r, n - 1 - np.take_along_axis(chain, prev, axis=1))


def _sample_offsets(
    seeds: np.ndarray, deg: np.ndarray, fanout: int, key: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-seed counts, seed row of each sampled edge and its offset within the seed's edges.

    Returns:
        ``(indptr_s [S + 1], row [E_s], offsets [E_s])``; rows are grouped by seed.
    """
    counts = deg if fanout < 0 else np.minimum(deg, fanout)
    indptr_s = np.zeros(deg.size + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr_s[1:])
    row = np.repeat(np.arange(deg.size, dtype=np.int64), counts)
    offsets = np.arange(row.size, dtype=np.int64) - indptr_s[row]  # take-all, CSC order
    if fanout > 0:
        big = np.flatnonzero(deg > fanout)
        if big.size:
            r = _draws_numpy(seeds[big], deg[big], fanout, key)
            chosen = _offsets_numpy(r, deg[big])  # [B, M]
            pos = indptr_s[big][:, None] + np.arange(fanout, dtype=np.int64)
            offsets[pos.ravel()] = chosen.ravel()
    return indptr_s, row, offsets


#: Whether the torch sampler draws for every seed of a hop, by device type (default: yes).
#: Seeds of degree at most the fanout take all their edges and discard their draws, so
#: nothing has to find the seeds that draw (a ``nonzero``: a host sync on a GPU) at the cost of
#: draws nobody reads; on the CPU, where a sync is free, only the seeds that draw do.
DRAW_EVERY_SEED: dict[str, bool] = {"cpu": False}


def _sample_offsets_torch(
    seeds: Tensor, deg: Tensor, fanout: int, key: int
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`_sample_offsets` in torch on ``seeds``' device (identical results).

    Synchronises with the device once for the number of sampled edges, and on the CPU once
    more for the seeds that draw (:data:`DRAW_EVERY_SEED`).
    """
    dev = seeds.device
    counts = deg if fanout < 0 else deg.clamp(max=fanout)
    indptr_s = torch.zeros(deg.numel() + 1, dtype=torch.int64, device=dev)
    torch.cumsum(counts, 0, out=indptr_s[1:])
    total = int(indptr_s[-1])
    seq = torch.arange(deg.numel(), dtype=torch.int64, device=dev)
    row = torch.repeat_interleave(seq, counts, output_size=total)
    offsets = torch.arange(total, dtype=torch.int64, device=dev) - indptr_s[row]
    if fanout > 0 and total and DRAW_EVERY_SEED.get(dev.type, True):
        # draws for every seed; one of degree <= fanout draws from fanout slots (fisher_yates
        # clamps the degrees: valid bounds) and keeps its take-all offsets. A drawing seed's
        # draws depend on its ID, degree and the key only, so they equal the draws of the
        # seeds-that-draw path
        chosen = fisher_yates(seeds, deg, fanout, key)  # [S, fanout]
        drawn = chosen.view(-1)[row * fanout + offsets]  # offsets: position < count <= fanout
        offsets = torch.where(deg[row] > fanout, drawn, offsets)
    elif fanout > 0:
        big = torch.nonzero(deg > fanout).squeeze(1)
        if big.numel():
            chosen = fisher_yates(seeds[big], deg[big], fanout, key)
            step = torch.arange(fanout, dtype=torch.int64, device=dev)
            offsets[(indptr_s[big][:, None] + step).ravel()] = chosen.ravel()
    return indptr_s, row, offsets


def sample_neighbors_from(
    topology: TopologySource | Graph,
    seeds: Tensor,
    fanout: int,
    rng: RandomSource = 0,
    *,
    with_edge_weight: bool = False,
    backend: Backend = "auto",
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Sample ``min(deg, fanout)`` distinct in-edges of every seed, uniformly, all seeds at once.

    Args:
        topology: Where the CSC topology is read from (a :class:`Graph` is wrapped).
        seeds: int64 ``[S]`` global IDs of the nodes whose in-neighbours are sampled; a repeated
            ID gets the same sample each time (the draws are keyed by node ID).
        fanout: Edges per seed; ``-1`` takes all.
        rng: The key of the draws: an int seed, or a numpy Generator (one 63-bit key is drawn
            from it, advancing it).
        with_edge_weight: Also return the sampled edges' weights.
        backend: ``"numpy"``, ``"torch"`` (on the seeds' device) or ``"auto"`` (see the module
            docstring); every backend gives identical results.

    Returns:
        ``(indptr_s, nbr_ids, edge_weight)``: int64 ``[S + 1]`` offsets, int64 ``[E_s]`` global
        IDs of the sampled in-neighbours grouped by seed, and their weights ``[E_s]`` (or None).
        Seeds with ``deg <= fanout`` list all their neighbours in CSC order. On the CPU with
        the numpy backend, else on the torch backend's device.

    Raises:
        GraphError: If a seed ID is out of range.
        ConfigError: If ``fanout``, ``rng`` or ``backend`` is invalid.
    """
    topo = _as_topology(topology)
    dev = _work_device(topo, seeds, _check_backend(backend))
    seeds = _as_ids("seeds", seeds, topo.num_nodes, dev)
    fanout = _check_fanout("fanout", fanout)
    key = _as_key(rng)
    if with_edge_weight and not topo.has_edge_weight:
        raise GraphError("with_edge_weight=True but the graph has no 'edge_weight'")
    with serial(dev or torch.device("cpu")):
        deg = topo.in_degree(seeds)
        return _sample_hop(topo, seeds, deg, fanout, key, with_edge_weight, dev)[:3]


def _sample_hop(
    topo: TopologySource,
    seeds: Tensor,
    deg: Tensor,
    fanout: int,
    key: int,
    with_edge_weight: bool,
    device: torch.device | None,
    with_edge_ids: bool = False,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """One hop's sampled edges: numpy on the host when ``device`` is None, else torch there.

    Returns ``(indptr_s, nbrs, weight, edge_ids)``; the last two ``None`` unless asked for.
    """
    if device is None:
        indptr_s, row, offsets = _sample_offsets(
            seeds.numpy(), deg.cpu().numpy().astype(np.int64, copy=False), fanout, key
        )
    else:
        indptr_s, row, offsets = _sample_offsets_torch(seeds, deg.to(device), fanout, key)
    return _read_edges(topo, seeds, indptr_s, row, offsets, with_edge_weight, device, with_edge_ids)


def _read_edges(
    topo: TopologySource,
    seeds: Tensor,
    indptr_s: np.ndarray | Tensor,
    row: np.ndarray | Tensor,
    offsets: np.ndarray | Tensor,
    with_edge_weight: bool,
    device: torch.device | None,
    with_edge_ids: bool = False,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """Read chosen edges: edge ``e`` is the ``offsets[e]``-th in-edge of ``seeds[row[e]]``.

    ``indptr_s``, ``row`` and ``offsets`` are numpy arrays when ``device`` is None (the host),
    else tensors on ``device``. Returns ``(indptr_s, nbrs, weight, edge_ids)`` as tensors there;
    the last two ``None`` unless asked for.
    """
    if device is None:
        ids = torch.from_numpy(seeds.numpy()[row])  # numpy indexing: faster on CPU
        off = torch.from_numpy(offsets)  # type: ignore[arg-type]
        nbrs = topo.neighbors_at(ids, off)
        weight = topo.edge_weight_at(ids, off) if with_edge_weight else None
        eids = topo.edge_ids_at(ids, off).cpu() if with_edge_ids else None  # type: ignore[attr-defined]
        return torch.from_numpy(indptr_s), nbrs, weight, eids  # type: ignore[arg-type]
    ids, off = seeds[row], cast(Tensor, offsets)
    nbrs = topo.neighbors_at(ids, off).to(device)
    weight = topo.edge_weight_at(ids, off).to(device) if with_edge_weight else None
    eids = topo.edge_ids_at(ids, off).to(device) if with_edge_ids else None  # type: ignore[attr-defined]
    return cast(Tensor, indptr_s), nbrs, weight, eids


def sample_neighbors(
    indptr: np.ndarray | Tensor,
    indices: np.ndarray | Tensor,
    seeds: Tensor,
    fanout: int,
    rng: RandomSource = 0,
    *,
    backend: Backend = "auto",
) -> tuple[Tensor, Tensor]:
    """Sample in-neighbours without replacement from raw CSC arrays.

    Same as :func:`sample_neighbors_from` on ``GraphTopology.from_csc(indptr, indices)``.

    Args:
        indptr: int64 ``[N + 1]`` CSC offsets (numpy, memmap or tensor).
        indices: int ``[E]`` in-neighbours grouped by destination.
        seeds: int64 ``[S]`` node IDs.
        fanout: Edges per seed; ``-1`` takes all.
        rng: An int seed or a numpy Generator (the key of the draws).
        backend: ``"auto"``, ``"numpy"`` or ``"torch"``, as in :func:`sample_neighbors_from`.

    Returns:
        ``(indptr_s [S + 1], nbr_ids [E_s])``, both int64.
    """
    topo = GraphTopology.from_csc(indptr, indices)
    indptr_s, nbrs, _ = sample_neighbors_from(topo, seeds, fanout, rng, backend=backend)
    return indptr_s, nbrs


# ---------------------------------------------------------------------------------- blocks
def _make_block(
    topo: TopologySource,
    dst: Tensor,
    dst_degree: Tensor,
    fanout: int,
    key: int,
    with_edge_weight: bool,
    device: torch.device | None,
    exclude: Tensor | None = None,
    with_edge_ids: bool = False,
    distinct: bool = False,
) -> tuple[Block, Tensor]:
    """One hop: sample, deduplicate, build the block; also returns the sources' int64 degrees.

    numpy on the host when ``device`` is None, else torch on ``device`` (identical blocks).
    ``exclude``: sorted keys (:func:`edge_keys`) of edges dropped from the sampled ones (after
    the draws, so the draws of the other edges do not change). ``distinct``: ``dst`` is known
    to hold distinct IDs (a later hop's: the previous hop's sources), not checked again.
    """
    indptr_s, nbrs, weight, eids = _sample_hop(
        topo, dst, dst_degree, fanout, key, with_edge_weight, device, with_edge_ids
    )
    num_dst = int(dst.numel())
    indptr_s, nbrs, weight, eids = _drop_excluded(
        dst, topo.num_nodes, indptr_s, nbrs, weight, eids, exclude
    )
    if device is None:
        src_ids, local, _ = _append_unique_numpy(dst, nbrs)
        new_degree = topo.in_degree(src_ids[num_dst:]).cpu()
        src_degree = torch.cat([dst_degree.cpu(), new_degree])
    else:
        src_ids, local, _ = _append_unique_torch(
            dst, nbrs, num_nodes=topo.num_nodes, distinct_targets=distinct, counts=False
        )
        new_degree = topo.in_degree(src_ids[num_dst:]).to(device)
        src_degree = torch.cat([dst_degree.to(device), new_degree])
    block = Block(
        indptr=indptr_s,
        indices=local,
        src_ids=src_ids,
        num_dst=num_dst,
        src_degree=src_degree.to(torch.float32),
        edge_weight=weight,
        edge_ids=eids,
    )
    return block, src_degree


def _drop_excluded(
    dst: Tensor,
    num_nodes: int,
    indptr_s: Tensor,
    nbrs: Tensor,
    weight: Tensor | None,
    eids: Tensor | None,
    exclude: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """Drop the sampled edges ``nbrs -> dst`` whose keys (:func:`edge_keys`) are in ``exclude``.

    ``dst`` holds global IDs, one per row of ``indptr_s``; edges stay grouped by destination.
    """
    num_dst = int(dst.numel())
    if exclude is None or not exclude.numel() or not nbrs.numel():
        return indptr_s, nbrs, weight, eids
    counts = indptr_s[1:] - indptr_s[:-1]
    row = torch.repeat_interleave(torch.arange(num_dst, device=nbrs.device), counts)
    keys = dst.to(nbrs.device)[row] * num_nodes + nbrs
    keep = ~_isin_sorted(keys, exclude.to(nbrs.device))
    if not bool(keep.all()):  # drop them; edges stay grouped by destination
        nbrs, row = nbrs[keep], row[keep]
        weight = weight[keep] if weight is not None else None
        eids = eids[keep] if eids is not None else None
        indptr_s = torch.zeros_like(indptr_s)
        indptr_s[1:] = torch.cumsum(torch.bincount(row, minlength=num_dst), 0)
    return indptr_s, nbrs, weight, eids


def _isin_sorted(values: Tensor, sorted_keys: Tensor) -> Tensor:
    """``values[i] in sorted_keys`` for each ``i`` (``sorted_keys`` ascending, non-empty)."""
    pos = torch.searchsorted(sorted_keys, values).clamp_(max=sorted_keys.numel() - 1)
    return sorted_keys[pos] == values


def full_neighbor_block(
    topology: TopologySource | Graph,
    dst_ids: Tensor,
    *,
    backend: Backend = "auto",
    with_edge_ids: bool = False,
) -> Block:
    """The block of all in-edges of ``dst_ids`` (sampling with fanout ``-1``; no randomness).

    Used for layer-wise inference. Edge weights are carried when the graph has them.

    Args:
        topology: The topology (a :class:`Graph` is wrapped).
        dst_ids: int64 ``[D]`` distinct destination IDs.
        backend: ``"auto"``, ``"numpy"`` or ``"torch"``, as in :func:`sample_neighbors_from`.
        with_edge_ids: Record each edge's global ID (:attr:`Block.edge_ids`); the topology must
            be an :class:`EdgeIdSource`.

    Returns:
        A :class:`Block` with ``dst_ids`` as destinations and every in-neighbour as a source.
    """
    topo = _as_topology(topology)
    if with_edge_ids:
        _check_edge_ids(topo)
    dev = _work_device(topo, dst_ids, _check_backend(backend))
    dst = _as_ids("dst_ids", dst_ids, topo.num_nodes, dev)
    with serial(dev or torch.device("cpu")):
        deg = topo.in_degree(dst)
        block, _ = _make_block(  # no draws
            topo, dst, deg, -1, 0, topo.has_edge_weight, dev, with_edge_ids=with_edge_ids
        )
    return block


class NeighborSampler(Sampler):
    """Multi-layer uniform neighbour sampler producing one :class:`Block` per GNN layer.

    ``fanouts`` are listed by hop from the seeds (PyG's ``num_neighbors`` convention):
    ``fanouts[0]`` neighbours are sampled for each seed, then ``fanouts[1]`` for each node of that
    frontier, and so on. The returned blocks run the other way, from the input layer to the output
    layer, so ``blocks[i]`` was sampled with ``fanouts[L - 1 - i]``:

    ======================  ==================  ===========================
    block                   fanout              destinations
    ======================  ==================  ===========================
    ``blocks[L - 1]``       ``fanouts[0]``      the seeds
    ``blocks[L - 2]``       ``fanouts[1]``      ``blocks[L - 1].src_ids``
    ``blocks[0]``           ``fanouts[L - 1]``  gather features of ``blocks[0].src_ids``
    ======================  ==================  ===========================

    Randomness: hop ``h`` of ``sample_from_nodes(seeds, epoch=e, step=s, stream=k)`` draws from
    the keyed hash with the key :meth:`key` ``(e, s, h, k)`` and each node's global ID (module
    docstring); no generator state exists and the global RNGs are never touched, so a batch's
    sample is reproducible, independent of which batches ran before, and the same on every
    device and backend. Data-parallel ranks sampling the same step should pass their rank as
    ``stream``.

    Where it runs (``backend``): ``"auto"`` samples with torch on the seeds' device when they
    are off the CPU (or on a :class:`DeviceTopology`'s device), with numpy on the host
    otherwise; ``"numpy"`` and ``"torch"`` force one. Blocks come back where they were built.

    Args:
        topology: A :class:`TopologySource` or a :class:`Graph` (wrapped in
            :class:`GraphTopology`).
        fanouts: Neighbours per node for each hop, ``-1`` = all.
        seed: Base seed (>= 0).
        backend: ``"auto"``, ``"numpy"`` or ``"torch"``.
        with_edge_ids: Record every sampled edge's global ID in :attr:`Block.edge_ids` (for
            edge features); the topology must be an :class:`EdgeIdSource`.
    """

    def __init__(
        self,
        topology: TopologySource | Graph,
        fanouts: Sequence[int],
        seed: int = 0,
        *,
        backend: Backend = "auto",
        with_edge_ids: bool = False,
    ) -> None:
        self.topology = _as_topology(topology)
        self.with_edge_ids = bool(with_edge_ids)
        if self.with_edge_ids:
            _check_edge_ids(self.topology)
        if isinstance(fanouts, (str, bytes)) or not isinstance(fanouts, Sequence) or not fanouts:
            raise ConfigError(
                f"'fanouts' must be a non-empty sequence of ints, one per layer (got {fanouts!r}); "
                f"e.g. fanouts=[15, 10, 5]"
            )
        self.fanouts = tuple(_check_fanout(f"fanouts[{i}]", f) for i, f in enumerate(fanouts))
        self.seed = _check_key("seed", seed)
        self.backend = _check_backend(backend)
        self.with_edge_weight = self.topology.has_edge_weight

    @property
    def num_layers(self) -> int:
        """Number of blocks each sample returns."""
        return len(self.fanouts)

    def key(self, epoch: int, step: int, hop: int, stream: int = 0) -> int:
        """The 64-bit key hop ``hop`` of batch ``(epoch, step, stream)`` draws with."""
        return base_key(_SALT_SAMPLE, self.seed, epoch, step, stream, hop)

    def sample_from_nodes(
        self,
        seeds: Tensor,
        *,
        seed_time: None = None,
        epoch: int = 0,
        step: int = 0,
        stream: int = 0,
        exclude: Tensor | None = None,
    ) -> NodeSample:
        """Sample the blocks of one mini-batch (:meth:`Sampler.sample_from_nodes`).

        Args:
            seeds: int64 ``[B]`` distinct global IDs of the output nodes.
            seed_time: ``None`` (this sampler has no time: :class:`TemporalSampler` has).
            epoch: Epoch index (>= 0), part of the random key.
            step: Step index within the epoch (>= 0), part of the random key.
            stream: Extra key, e.g. the data-parallel rank (>= 0).
            exclude: Sorted edge keys (:func:`edge_keys`) dropped from every hop's sampled
                edges after sampling (a link batch's target edges; ``None``: none). A hop then
                holds up to ``fanout`` edges per destination; the draws are unchanged.

        Returns:
            A :class:`NodeSample` of ``num_layers`` blocks from the input layer to the output
            layer; ``blocks[-1].dst_ids == seeds`` and ``blocks[i].dst_ids ==
            blocks[i + 1].src_ids``.

        Raises:
            GraphError: If a seed is out of range or repeats, or ``seed_time`` is given.
        """
        no_time(self, seed_time)
        key = [_check_key(n, v) for n, v in (("epoch", epoch), ("step", step), ("stream", stream))]
        dev = _work_device(self.topology, seeds, self.backend)
        dst = _as_ids("seeds", seeds, self.topology.num_nodes, dev)
        blocks: list[Block] = []
        with serial(dev or torch.device("cpu")):  # small ops: one thread on the CPU
            deg = self.topology.in_degree(dst)
            for hop, fanout in enumerate(self.fanouts):
                k = self.key(key[0], key[1], hop, key[2])
                topo, weighted = self.topology, self.with_edge_weight
                block, deg = _make_block(
                    topo, dst, deg, fanout, k, weighted, dev, exclude, self.with_edge_ids, hop > 0
                )
                blocks.append(block)
                dst = block.src_ids
        blocks.reverse()
        return NodeSample(tuple(blocks))

    #: The link batch's blocks (:meth:`Sampler.sample_from_edges`; pairs without ``time``).
    sample_from_edges = sample_edges

    def __repr__(self) -> str:
        return (
            f"NeighborSampler(fanouts={list(self.fanouts)}, seed={self.seed}, "
            f"backend={self.backend!r}, num_nodes={self.topology.num_nodes})"
        )


def _check_edge_ids(topo: TopologySource) -> None:
    if not isinstance(topo, EdgeIdSource):
        raise GraphError(
            f"with_edge_ids=True needs a topology that names its edges (edge_ids_at); "
            f"{type(topo).__name__} does not: sample a Graph, a DeviceTopology or a UnifiedStore"
        )


def _check_key(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ConfigError(f"'{name}' must be an int >= 0 (got {value!r})")
    return int(value)
