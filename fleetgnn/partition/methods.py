"""Partitioners: ``range``, ``hash``, ``random``, ``metis``, ``ldg``, behind one :func:`partition`.

========  ===========================================  ====================================
method    assignment of original node ``v``            balances
========  ===========================================  ====================================
range     contiguous ID ranges (MGG, Alg. 1)            in-edges (default), nodes, train
hash      ``v mod P``                                   nodes (up to 1)
random    seeded permutation cut into P equal pieces    nodes (up to 1)
metis     METIS k-way on the symmetrised graph          nodes (default), train, edges
ldg       streaming greedy over the CSC (:mod:`.stream`)  nodes (default), train, edges
========  ===========================================  ====================================

Every partitioner returns a :class:`~fleetgnn.partition.book.PartitionBook`; parts may be empty
when ``P > N``. All work is vectorised (numpy); METIS runs in pymetis, with its own diagnostics
(``***Cannot bisect a graph with 0 vertices and 0 edges`` for every empty part, ...) captured and
shown only in the error when METIS fails.

Memory: ``range``, ``hash`` and ``random`` need ``O(N)``; ``ldg`` streams the graph and holds one
int32 per node; ``metis`` needs the whole graph in memory, about :func:`metis_memory` bytes
(~110 per edge), and refuses in one line, before building anything, a graph that needs more than
``max_memory`` (default: the memory available).
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from fleetgnn.errors import PartitionError
from fleetgnn.graph.csc import Graph, check_edge_ids
from fleetgnn.graph.loaders._io import memory_available
from fleetgnn.partition.book import PartitionBook, _check_num_parts
from fleetgnn.partition.stream import ldg_partition

METHODS: tuple[str, ...] = ("range", "hash", "random", "metis", "ldg")
BALANCE_CRITERIA: tuple[str, ...] = ("nodes", "train", "edges")
_DEFAULT_BALANCE: dict[str, tuple[str, ...]] = {
    "range": ("edges",),
    "hash": ("nodes",),
    "random": ("nodes",),
    "metis": ("nodes",),
    "ldg": ("nodes",),
}
_METIS_WEIGHT_SCALE = 64  # integer resolution of the combined METIS vertex weight
_MAX_METIS_NODES = 3_037_000_499  # keys u * N + v must fit int64
_ADJ_CHUNK = 1 << 20  # edges per step of metis_adjacency (its working arrays: ~60 bytes each)


def partition(
    graph: Graph,
    method: str,
    num_parts: int,
    *,
    seed: int = 0,
    balance: Sequence[str] | None = None,
    max_memory: int | None = None,
) -> PartitionBook:
    """Partition ``graph`` into ``num_parts`` parts.

    Args:
        graph: The graph, in its original node IDs.
        method: One of ``range``, ``hash``, ``random``, ``metis`` (see the module table).
        num_parts: Number of parts ``P >= 1`` (parts may be empty when ``P > N``).
        seed: Seed of ``random`` and ``metis``; the result is deterministic per seed.
        balance: Criteria to balance, a subset of ``('nodes', 'train', 'edges')`` where
            ``edges`` counts the in-edges of owned nodes and ``train`` the nodes in
            ``graph.train_mask``. Default: ``('edges',)`` for ``range``, ``('nodes',)``
            otherwise. ``hash`` and ``random`` only balance nodes.
        max_memory: Bytes ``metis`` may use (default: the memory available now); a graph
            whose estimated need (:func:`metis_memory`) exceeds it is refused before METIS runs.

    Returns:
        The partition book; ``book.params`` records ``seed`` and ``balance``.

    Raises:
        PartitionError: Unknown method or criterion, ``num_parts < 1``, a criterion the graph
            cannot provide (``train`` without a train mask), or ``metis`` needing more memory
            than ``max_memory``.
    """
    if method not in METHODS:
        raise PartitionError(
            f"unknown partition method {method!r}; valid methods: {', '.join(METHODS)}"
        )
    num_parts = _check_num_parts(num_parts)
    crit = _check_balance(method, balance, graph)
    check_edge_ids(graph)  # a memory-mapped file may have changed since it was checked
    if method == "range":
        return range_partition(graph, num_parts, balance=crit)
    if method == "hash":
        return hash_partition(graph, num_parts)
    if method == "random":
        return random_partition(graph, num_parts, seed=seed)
    if method == "ldg":
        return ldg_partition(graph, num_parts, balance=crit)
    return metis_partition(graph, num_parts, seed=seed, balance=crit, max_memory=max_memory)


def _check_balance(method: str, balance: Sequence[str] | None, graph: Graph) -> tuple[str, ...]:
    if balance is None:
        return _DEFAULT_BALANCE[method]
    if isinstance(balance, str):
        balance = (balance,)
    crit = tuple(dict.fromkeys(balance))  # ordered, without duplicates
    unknown = [c for c in crit if c not in BALANCE_CRITERIA]
    if unknown or not crit:
        raise PartitionError(
            f"'balance' must be a non-empty subset of {BALANCE_CRITERIA} (got {tuple(balance)!r})"
        )
    if method in ("hash", "random") and crit != ("nodes",):
        raise PartitionError(
            f"method {method!r} balances nodes only (got balance={crit!r}); use 'metis' or "
            f"'range' to balance {', '.join(c for c in crit if c != 'nodes')}"
        )
    if "train" in crit and graph.train_mask is None:
        raise PartitionError(
            "balance includes 'train' but the graph has no train_mask; add a train split or "
            "drop 'train' from balance"
        )
    return crit


# ---------------------------------------------------------------------- contiguous splits
def balanced_boundaries(
    cum: np.ndarray, starts: np.ndarray, stops: np.ndarray, pieces: int
) -> np.ndarray:
    """Cut each ID range ``[starts[r], stops[r])`` into ``pieces`` weight-balanced subranges.

    ``cum`` is the cumulative weight (``cum[v]`` = weight of nodes ``< v``; ``indptr`` for
    in-edges). With ``T`` the range's total weight, the split points are
    ``searchsorted(cum, cum[start] + floor(j * T / pieces), side='left')`` for ``j = 0..pieces``,
    clipped to the range (MGG Alg. 1 with exact targets). A piece's weight then differs from
    ``T / pieces`` by less than the largest single-node weight. Ranges of zero weight are split
    by node count instead.

    Shapes:
        cum: ``[N + 1]`` non-decreasing, ``cum[0] == 0`` (integer or float).
        starts, stops: ``[R]``.
        returns: int64 ``[R, pieces + 1]``, row ``r`` non-decreasing from ``starts[r]`` to
        ``stops[r]``.
    """
    starts = np.asarray(starts, dtype=np.int64)
    stops = np.asarray(stops, dtype=np.int64)
    j = np.arange(pieces + 1, dtype=np.int64)
    base = cum[starts]  # [R]
    total = cum[stops] - base  # [R]
    if np.issubdtype(cum.dtype, np.integer):
        targets = base[:, None] + (j[None, :] * total[:, None]) // pieces  # [R, pieces + 1]
    else:
        targets = base[:, None] + total[:, None] * (j[None, :] / pieces)
    split = np.searchsorted(cum, targets, side="left").astype(np.int64)
    split = np.clip(split, starts[:, None], stops[:, None])
    by_count = starts[:, None] + (j[None, :] * (stops - starts)[:, None]) // pieces
    split = np.where((total > 0)[:, None], split, by_count)
    split[:, 0] = starts
    split[:, -1] = stops
    return np.maximum.accumulate(split, axis=1)


def _node_weights(graph: Graph, crit: Sequence[str]) -> np.ndarray:
    """Sum over criteria of the weight normalised to mean 1 (float64 ``[N]``)."""
    return _weight_block(graph, crit, _weight_totals(graph, crit), 0, graph.num_nodes)


#: Nodes per block of the streamed weight passes of :func:`range_partition`.
_WEIGHT_BLOCK = 1 << 20


def _weight_totals(graph: Graph, crit: Sequence[str]) -> list[float]:
    """Each criterion's total weight (exact: integer counts), read in blocks."""
    n, totals = graph.num_nodes, []
    for c in crit:
        if c == "nodes":
            totals.append(float(n))
        elif c == "train":
            mask = graph.train_mask
            totals.append(
                float(
                    sum(
                        int(np.count_nonzero(mask[lo : lo + _WEIGHT_BLOCK]))
                        for lo in range(0, n, _WEIGHT_BLOCK)
                    )
                )
            )
        else:
            totals.append(float(graph.num_edges))
    return totals


def _weight_block(
    graph: Graph, crit: Sequence[str], totals: Sequence[float], lo: int, hi: int
) -> np.ndarray:
    """Nodes ``[lo, hi)``'s weights: each criterion's normalised to mean 1, summed (float64)."""
    n = graph.num_nodes
    w = np.zeros(hi - lo, dtype=np.float64)
    for c, total in zip(crit, totals, strict=True):
        if total <= 0:
            continue
        if c == "nodes":
            part = np.ones(hi - lo, dtype=np.float64)
        elif c == "train":
            part = np.asarray(graph.train_mask[lo:hi], dtype=np.float64)
        else:
            part = np.diff(np.asarray(graph.indptr[lo : hi + 1], dtype=np.int64)).astype(np.float64)
        w += part * (n / total)
    return w


def _weight_cum(
    graph: Graph, crit: Sequence[str], totals: Sequence[float], lo: int, hi: int, start: float
) -> np.ndarray:
    """``cum[lo..hi]`` of :func:`_node_weights`' cumulative sum, from ``cum[lo] = start``.

    The same values, summed in the same order, as one ``np.cumsum`` over all nodes.
    """
    return np.cumsum(np.concatenate(([start], _weight_block(graph, crit, totals, lo, hi))))


def _streamed_boundaries(graph: Graph, crit: Sequence[str], pieces: int) -> np.ndarray:
    """:func:`balanced_boundaries` of the whole ID range under weights ``crit``, streamed.

    Two passes over blocks of :data:`_WEIGHT_BLOCK` nodes (the total, then the split points)
    instead of an ``[N + 1]`` float64 cumulative sum and its ``[N]`` weight arrays (24-32 bytes
    a node); the result is identical.
    """
    n = graph.num_nodes
    totals = _weight_totals(graph, crit)
    total = 0.0
    for lo in range(0, n, _WEIGHT_BLOCK):
        total = float(_weight_cum(graph, crit, totals, lo, min(n, lo + _WEIGHT_BLOCK), total)[-1])
    j = np.arange(pieces + 1, dtype=np.int64)
    if total <= 0:  # no weight: split by node count
        return (j * n) // pieces
    targets = total * (j / pieces)
    split = np.full(pieces + 1, n, dtype=np.int64)
    done = int(np.searchsorted(targets, 0.0, side="right"))  # targets <= cum[0] = 0
    split[:done] = 0
    start = 0.0
    for lo in range(0, n, _WEIGHT_BLOCK):
        if done > pieces:
            break
        hi = min(n, lo + _WEIGHT_BLOCK)
        cum = _weight_cum(graph, crit, totals, lo, hi, start)  # cum[lo..hi]
        reached = int(np.searchsorted(targets, cum[-1], side="right"))
        if reached > done:  # the first node reaching each target lies in this block
            split[done:reached] = lo + np.searchsorted(cum, targets[done:reached], side="left")
            done = reached
        start = float(cum[-1])
    split[0], split[-1] = 0, n
    return np.maximum.accumulate(np.clip(split, 0, n))


def range_partition(
    graph: Graph, num_parts: int, *, balance: Sequence[str] = ("edges",)
) -> PartitionBook:
    """Contiguous ID ranges with balanced weight (MGG's edge-balanced node split, Alg. 1).

    With ``balance=('edges',)`` part ``k`` starts at
    ``searchsorted(indptr, floor(k * E / P), side='left')``: every part holds ``E / P`` in-edges
    up to less than the maximum in-degree. (The paper's ``k * ceil(E / P)`` targets can starve
    the last part by up to ``P - 1`` edges beyond that bound, so exact targets are used.) Without
    edges (``E == 0``) the ranges are node-balanced. Other criteria split the cumulative sum of
    the normalised weights. The permutation is the identity.

    Args:
        graph: The graph.
        num_parts: Number of parts ``P >= 1``.
        balance: Criteria (see :func:`partition`).
    """
    num_parts = _check_num_parts(num_parts)
    crit = tuple(balance)
    n = graph.num_nodes
    if crit == ("edges",):
        cum = np.asarray(graph.indptr, dtype=np.int64)
    elif crit == ("nodes",):
        cum = np.arange(n + 1, dtype=np.int64)
    else:  # streamed: no [N] weight arrays
        offsets = _streamed_boundaries(graph, crit, num_parts)
        return PartitionBook.from_offsets(offsets, "range", params={"balance": list(crit)})
    offsets = balanced_boundaries(cum, np.array([0]), np.array([n]), num_parts)[0]
    return PartitionBook.from_offsets(offsets, "range", params={"balance": list(crit)})


def hash_partition(graph: Graph, num_parts: int) -> PartitionBook:
    """Node ``v`` goes to part ``v mod P``."""
    num_parts = _check_num_parts(num_parts)
    part_of = (np.arange(graph.num_nodes, dtype=np.int64) % num_parts).astype(np.int32)
    return PartitionBook.from_part_of(part_of, num_parts, "hash", params={"balance": ["nodes"]})


def random_partition(graph: Graph, num_parts: int, *, seed: int = 0) -> PartitionBook:
    """Seeded uniform random assignment with part sizes differing by at most one.

    A seeded permutation of the nodes is cut into ``P`` equal pieces; node ``order[i]`` goes to
    part ``floor(i * P / N)``.
    """
    num_parts = _check_num_parts(num_parts)
    n = graph.num_nodes
    order = np.random.default_rng(seed).permutation(n)
    part_of = np.empty(n, dtype=np.int32)
    part_of[order] = (np.arange(n, dtype=np.int64) * num_parts) // max(n, 1)
    return PartitionBook.from_part_of(
        part_of, num_parts, "random", params={"seed": int(seed), "balance": ["nodes"]}
    )


# ---------------------------------------------------------------------- METIS
def _dst_chunks(indptr: np.ndarray, step: int) -> Iterator[tuple[int, int]]:
    """Destination ranges ``[lo, hi)`` holding about ``step`` edges each (at least one node)."""
    n = indptr.size - 1
    lo = 0
    while lo < n:
        hi = int(np.searchsorted(indptr, int(indptr[lo]) + step, side="right")) - 1
        hi = min(n, max(hi, lo + 1))
        yield lo, hi
        lo = hi


def metis_adjacency(
    graph: Graph, *, chunk_edges: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The symmetrised adjacency METIS expects, without self loops, as CSR.

    Equivalent to ``graph.to_undirected()`` minus self loops, plus a multiplicity per undirected
    edge: ``eweights[e]`` counts the directed edges of ``graph`` between its two endpoints (in
    either direction), so METIS's weighted cut equals the directed edge cut.

    Built in three passes over the CSC in chunks of ``chunk_edges`` edges: count each node's
    neighbours in both directions; place them in one int32 array (int64 for ``N >= 2^31``)
    at per-node cursors; sort and deduplicate each node's list, writing the result straight into
    the int64 array METIS reads (no further copy). Memory: ``(4 + 8 + 4) * 2E`` bytes at most
    (the placed lists, the output, the multiplicities), about ``20 E`` for a graph stored with
    both directions of every edge (the output and multiplicities pages of a list shortened by
    deduplication are never touched), plus ``40 N`` and the chunk's working arrays.

    Shapes:
        returns: ``xadj`` int64 ``[N + 1]``, ``adjncy`` int64 ``[2M]``, ``eweights`` int32
        ``[2M]`` for ``M`` undirected edges; the neighbours of ``u`` are
        ``adjncy[xadj[u]:xadj[u + 1]]``, sorted.
    """
    n = graph.num_nodes
    if n > _MAX_METIS_NODES:
        raise PartitionError(
            f"metis supports graphs of up to {_MAX_METIS_NODES} nodes here (got {n}); use the "
            f"'ldg' method for larger graphs"
        )
    indptr = np.asarray(graph.indptr, dtype=np.int64)
    indices = graph.indices
    step = int(chunk_edges) if chunk_edges else _ADJ_CHUNK
    idt = np.int32 if n < 2**31 else np.int64

    def chunk(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Sources and destinations of the edges into ``[lo, hi)``, self loops dropped."""
        src = np.asarray(indices[indptr[lo] : indptr[hi]])
        dst = np.repeat(np.arange(lo, hi, dtype=idt), np.diff(indptr[lo : hi + 1]))
        keep = src != dst
        return src[keep], dst[keep]

    # pass 1: in-neighbours (without loops) and out-neighbours of every node
    count_in = np.zeros(n, dtype=np.int64)
    count = np.zeros(n, dtype=np.int64)
    for lo, hi in _dst_chunks(indptr, step):
        src, dst = chunk(lo, hi)
        count_in[lo:hi] = np.bincount(dst - lo, minlength=hi - lo)
        ids, times = np.unique(src, return_counts=True)
        count[ids] += times  # ids are distinct: no lost updates
    count += count_in
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(count, out=ptr[1:])
    del count
    total = int(ptr[-1])
    raw = np.empty(total, dtype=idt)

    # pass 2: node v's list is its in-neighbours, then its out-neighbours
    cursor = ptr[:-1] + count_in  # where each node's next out-neighbour goes
    for lo, hi in _dst_chunks(indptr, step):
        src, dst = chunk(lo, hi)
        first_in = np.zeros(hi - lo + 1, dtype=np.int64)
        np.cumsum(count_in[lo:hi], out=first_in[1:])
        rank = np.arange(src.size, dtype=np.int64) - first_in[dst - lo]
        raw[ptr[dst] + rank] = src  # in-neighbours, in CSC order
        order = np.argsort(src, kind="stable")
        s, d = src[order], dst[order]
        del order, rank
        starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1]))) if s.size else s
        sizes = np.diff(np.append(starts, s.size))
        rank = np.arange(s.size, dtype=np.int64) - np.repeat(starts, sizes)
        raw[cursor[s] + rank] = d  # out-neighbours
        cursor[s[starts]] += sizes
        del s, d, starts, sizes, rank
    del cursor, count_in

    # pass 3: sort and deduplicate each list straight into METIS's arrays
    adjncy = np.empty(total, dtype=np.int64)  # pages past the deduplicated length stay untouched
    eweights = np.empty(total, dtype=np.int32)
    xadj = np.zeros(n + 1, dtype=np.int64)
    written = 0
    for lo, hi in _dst_chunks(ptr, step):
        a, b = int(ptr[lo]), int(ptr[hi])
        key = np.repeat(np.arange(hi - lo, dtype=np.int64), np.diff(ptr[lo : hi + 1]))
        key *= n
        key += raw[a:b]
        key.sort()
        first = np.ones(key.size, dtype=bool)
        first[1:] = key[1:] != key[:-1]
        starts = np.flatnonzero(first)
        del first
        m = starts.size
        local, nbr = np.divmod(key[starts], n) if n else (key[starts], key[starts])
        adjncy[written : written + m] = nbr
        eweights[written : written + m] = np.diff(np.append(starts, key.size))
        np.cumsum(np.bincount(local, minlength=hi - lo), out=xadj[lo + 1 : hi + 1])
        xadj[lo + 1 : hi + 1] += written
        written += m
        del key, starts, local, nbr
    return xadj, adjncy[:written], eweights[:written]


#: Peak resident bytes of :func:`metis_partition` per adjacency entry (each undirected edge
#: counts twice), per node, and fixed: a bound fitted (+10%) to the peaks measured with
#: ``benchmarks/bench_partition_memory.py`` on products-like 0.05 / 0.2 and papers-like 0.003 /
#: 0.01 (2.9M to 15.9M edges: ~100 bytes per entry + ~660 per node). METIS itself holds most of
#: it (its coarsened copies of the graph and per-vertex work arrays, 64-bit IDs).
METIS_ENTRY_BYTES = 110
METIS_NODE_BYTES = 700
METIS_FIXED_BYTES = 64 << 20


def metis_memory(num_nodes: int, num_entries: int) -> int:
    """Bytes :func:`metis_partition` needs for ``N`` nodes and ``num_entries`` adjacency entries.

    ``num_entries`` is ``2M`` for ``M`` undirected edges without self loops: the number of
    directed edges for a graph stored with both directions of each edge, up to twice that for one
    stored one way.
    """
    return (
        METIS_ENTRY_BYTES * int(num_entries) + METIS_NODE_BYTES * int(num_nodes) + METIS_FIXED_BYTES
    )


def _check_metis_memory(n: int, entries: int, max_memory: int | None, *, exact: bool) -> None:
    from fleetgnn.graph.loaders._io import human_bytes

    if max_memory is not None and (
        isinstance(max_memory, bool) or not isinstance(max_memory, (int, np.integer))
    ):
        raise PartitionError(f"'max_memory' must be a byte count (got {max_memory!r})")
    limit, what = (
        (int(max_memory), "--max-memory")
        if max_memory is not None
        else (
            memory_available(),
            "memory available (MemAvailable; --max-memory sets another limit)",
        )
    )
    need = metis_memory(n, entries)
    if limit is None or need <= limit:
        return
    size = f"{n} nodes and {entries} adjacency entries" if exact else f"{n} nodes, {entries} edges"
    raise PartitionError(
        f"metis would need about {human_bytes(need)} for this graph ({size}; METIS holds the "
        f"whole graph: ~{METIS_ENTRY_BYTES} bytes per edge, {METIS_NODE_BYTES} per node), more "
        f"than the {human_bytes(limit)} {what}; use the ldg method (fleetgnn partition --method "
        f"ldg), which streams the graph from disk and holds one int32 per node, or range (in an "
        f"engine's settings: partition=range)"
    )


def _flush_c_stdio() -> None:
    """Flush the C library's stdio buffers (what METIS ``printf``s), where libc is reachable."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # pragma: no cover - no libc symbols here
        pass


@contextlib.contextmanager
def captured_fds() -> Iterator[Callable[[], str]]:
    """Send everything written to the file descriptors 1 and 2 during the block to a temp file.

    C libraries (METIS) write to the process's stdout/stderr directly, past ``sys.stdout``; this
    redirects the descriptors themselves (``os.dup``/``os.dup2``) and puts them back afterwards,
    also on an exception. Python's and the C library's buffers are flushed on both sides, so
    nothing written inside leaks out later. Yields a function returning what was captured so far.
    Process-wide: output of other threads during the block is captured too.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.flush()
    _flush_c_stdio()
    with tempfile.TemporaryFile() as tmp:
        saved = [os.dup(1), os.dup(2)]

        def read() -> str:
            _flush_c_stdio()
            tmp.seek(0)
            return tmp.read().decode("utf-8", "replace")

        try:
            os.dup2(tmp.fileno(), 1)
            os.dup2(tmp.fileno(), 2)
            yield read
        finally:
            _flush_c_stdio()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _metis_failure(error: BaseException, output: str) -> PartitionError:
    """A one-line PartitionError with pymetis's error and the end of METIS's own output."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    said = " | ".join(lines[-5:])
    if len(said) > 1000:
        said = "..." + said[-1000:]
    return PartitionError(
        f"METIS failed: {type(error).__name__}: {error}"
        + (f"; METIS said: {said}" if said else "")
        + "; try another --seed, fewer parts, or the 'range' method"
    )


def metis_partition(
    graph: Graph,
    num_parts: int,
    *,
    seed: int = 0,
    balance: Sequence[str] = ("nodes",),
    recursive: bool = False,
    max_memory: int | None = None,
) -> PartitionBook:
    """METIS k-way partition of the symmetrised graph minimising the directed edge cut.

    Vertex weights: the installed pymetis always calls METIS with one balancing constraint
    (``ncon == 1``), so multi-criteria balance is approximated by ONE weight per node, the sum of
    the requested criteria each normalised to mean 1: ``w(v) = sum_c w_c(v) * N / sum_u w_c(u)``
    with ``w_nodes = 1``, ``w_train = train_mask``, ``w_edges = in-degree``. Each part then gets
    about ``1/P`` of the combined load, not of every criterion separately. Weights are scaled to
    integers. ``P == 1`` (or a graph without edges between distinct nodes) skips METIS.
    METIS's own output is captured (:func:`captured_fds`) and shown only if it fails.

    Args:
        graph: The graph.
        num_parts: Number of parts ``P >= 1``.
        seed: METIS random seed.
        balance: Criteria (see :func:`partition`).
        recursive: Recursive bisection instead of k-way: parts with consecutive IDs are
            siblings in the bisection tree, so merging runs of consecutive parts gives a coarser
            partition with locality inside each part (the ``offload`` engine's two levels).
        max_memory: Bytes this may use (default: ``MemAvailable`` now). METIS needs the whole
            graph in memory, about :func:`metis_memory` bytes: checked from ``N`` and ``E``
            before anything is built, and again with the exact adjacency size before METIS runs.

    Raises:
        PartitionError: METIS failed (the message holds its error and the end of its output),
            or it would need more memory than ``max_memory`` (the message names the estimate).
    """
    import pymetis

    num_parts = _check_num_parts(num_parts)
    crit = tuple(balance)
    params: dict[str, Any] = {"seed": int(seed), "balance": list(crit)}
    if recursive:
        params["recursive"] = True
    n = graph.num_nodes
    if num_parts == 1 or n == 0:
        return PartitionBook.from_part_of(np.zeros(n, np.int32), num_parts, "metis", params)
    # a graph stored with both directions of each edge has one adjacency entry per edge
    _check_metis_memory(n, graph.num_edges, max_memory, exact=False)
    xadj, adjncy, eweights = metis_adjacency(graph)
    _check_metis_memory(n, adjncy.size, max_memory, exact=True)
    weights = _node_weights(graph, crit)
    if adjncy.size == 0:  # nothing to cut: balance the weights over contiguous ranges
        cum = np.zeros(n + 1, dtype=np.float64)
        np.cumsum(weights, out=cum[1:])
        offsets = balanced_boundaries(cum, np.array([0]), np.array([n]), num_parts)[0]
        part_of = np.repeat(np.arange(num_parts, dtype=np.int32), np.diff(offsets))
        return PartitionBook.from_part_of(part_of, num_parts, "metis", params)
    vweights = None
    if crit != ("nodes",):
        vweights = np.rint(weights * (_METIS_WEIGHT_SCALE / len(crit))).astype(np.int64)
    dt = np.dtype(pymetis.zero_copy_dtype()) if hasattr(pymetis, "zero_copy_dtype") else None
    dt = dt or np.dtype(np.int64)
    # one int64 copy of the multiplicities only when METIS needs them; xadj and adjncy are
    # handed over as they are (already int64 and contiguous: no copy)
    ew = None if int(eweights.min()) == int(eweights.max()) else eweights.astype(dt)
    del eweights
    xadj, adjncy = np.ascontiguousarray(xadj, dtype=dt), np.ascontiguousarray(adjncy, dtype=dt)
    vw = None if vweights is None else vweights.astype(dt)
    options = pymetis.Options(seed=int(seed))
    adjacency = None
    with captured_fds() as output:
        try:
            if hasattr(pymetis, "CSRAdjacency"):
                adjacency = pymetis.CSRAdjacency(adj_starts=xadj, adjacent=adjncy)
                result = pymetis.part_graph(
                    num_parts,
                    adjacency=adjacency,
                    vweights=vw,
                    eweights=ew,
                    recursive=bool(recursive),
                    options=options,
                )
            else:  # pragma: no cover - pymetis < 2025.2
                result = pymetis.part_graph(
                    num_parts,
                    xadj=xadj,
                    adjncy=adjncy,
                    vweights=vw,
                    eweights=ew,
                    recursive=bool(recursive),
                    options=options,
                )
        except Exception as e:  # noqa: BLE001 - pymetis raises plain RuntimeErrors
            error, said = e, output()
        else:
            error, said = None, ""
    if error is not None:
        raise _metis_failure(error, said) from error
    del adjacency, xadj, adjncy, ew, vw
    parts = result.vertex_part
    if isinstance(parts, array.array) and parts.itemsize == 8:
        part_of = np.frombuffer(parts, dtype=np.int64).astype(np.int32)  # no list of ints
    else:
        part_of = np.asarray(parts, dtype=np.int64).astype(np.int32)
    del parts, result
    return PartitionBook.from_part_of(part_of, num_parts, "metis", params)
