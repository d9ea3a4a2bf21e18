"""Partitioners: ``range``, ``hash``, ``random`` and ``metis``, behind one :func:`partition` call.

========  ===========================================  ====================================
method    assignment of original node ``v``            balances
========  ===========================================  ====================================
range     contiguous ID ranges (MGG, Alg. 1)            in-edges (default), nodes, train
hash      ``v mod P``                                   nodes (up to 1)
random    seeded permutation cut into P equal pieces    nodes (up to 1)
metis     METIS k-way on the symmetrised graph          nodes (default), train, edges
========  ===========================================  ====================================

Every partitioner returns a :class:`~fleetgnn.partition.book.PartitionBook`; parts may be empty
when ``P > N``. All work is vectorised (numpy); METIS runs in pymetis, with its own diagnostics
(``***Cannot bisect a graph with 0 vertices and 0 edges`` for every empty part, ...) captured and
shown only in the error when METIS fails.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from fleetgnn.errors import PartitionError
from fleetgnn.graph.csc import Graph
from fleetgnn.partition.book import PartitionBook, _check_num_parts

METHODS: tuple[str, ...] = ("range", "hash", "random", "metis")
BALANCE_CRITERIA: tuple[str, ...] = ("nodes", "train", "edges")
_DEFAULT_BALANCE: dict[str, tuple[str, ...]] = {
    "range": ("edges",),
    "hash": ("nodes",),
    "random": ("nodes",),
    "metis": ("nodes",),
}
_METIS_WEIGHT_SCALE = 64  # integer resolution of the combined METIS vertex weight
_MAX_METIS_NODES = 3_037_000_499  # keys u * N + v must fit int64


def partition(
    graph: Graph,
    method: str,
    num_parts: int,
    *,
    seed: int = 0,
    balance: Sequence[str] | None = None,
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

    Returns:
        The partition book; ``book.params`` records ``seed`` and ``balance``.

    Raises:
        PartitionError: Unknown method or criterion, ``num_parts < 1``, or a criterion the graph
            cannot provide (``train`` without a train mask).
    """
    if method not in METHODS:
        raise PartitionError(
            f"unknown partition method {method!r}; valid methods: {', '.join(METHODS)}"
        )
    num_parts = _check_num_parts(num_parts)
    crit = _check_balance(method, balance, graph)
    if method == "range":
        return range_partition(graph, num_parts, balance=crit)
    if method == "hash":
        return hash_partition(graph, num_parts)
    if method == "random":
        return random_partition(graph, num_parts, seed=seed)
    return metis_partition(graph, num_parts, seed=seed, balance=crit)


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
    n = graph.num_nodes
    w = np.zeros(n, dtype=np.float64)
    for c in crit:
        if c == "nodes":
            part = np.ones(n, dtype=np.float64)
        elif c == "train":
            part = np.asarray(graph.train_mask, dtype=np.float64)
        else:
            part = graph.in_degrees().astype(np.float64)
        total = part.sum()
        if total > 0:
            w += part * (n / total)
    return w


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
    else:
        cum = np.zeros(n + 1, dtype=np.float64)
        np.cumsum(_node_weights(graph, crit), out=cum[1:])
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
def metis_adjacency(graph: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The symmetrised adjacency METIS expects, without self loops, as CSR.

    Equivalent to ``graph.to_undirected()`` minus self loops, plus a multiplicity per undirected
    edge: ``eweights[e]`` counts the directed edges of ``graph`` between its two endpoints (in
    either direction), so METIS's weighted cut equals the directed edge cut.

    Shapes:
        returns: ``xadj`` int64 ``[N + 1]``, ``adjncy`` int64 ``[2M]``, ``eweights`` int64
        ``[2M]`` for ``M`` undirected edges; the neighbours of ``u`` are
        ``adjncy[xadj[u]:xadj[u + 1]]``, sorted.
    """
    n = graph.num_nodes
    if n > _MAX_METIS_NODES:
        raise PartitionError(
            f"metis supports graphs of up to {_MAX_METIS_NODES} nodes here (got {n}); use the "
            f"'range' method for larger graphs"
        )
    src, dst = graph.edges()
    src = src.astype(np.int64)
    dst = dst.astype(np.int64)
    keep = src != dst
    u = np.concatenate([src[keep], dst[keep]])
    v = np.concatenate([dst[keep], src[keep]])
    keys, counts = np.unique(u * n + v, return_counts=True)
    u, adjncy = np.divmod(keys, n) if n else (keys, keys)
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(u, minlength=n), out=xadj[1:])
    return xadj, adjncy.astype(np.int64), counts.astype(np.int64)


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

    Raises:
        PartitionError: METIS failed; the message holds its error and the end of its output.
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
    xadj, adjncy, eweights = metis_adjacency(graph)
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
    ew = None if (eweights == eweights[0]).all() else eweights.astype(dt)
    vw = None if vweights is None else vweights.astype(dt)
    options = pymetis.Options(seed=int(seed))
    with captured_fds() as output:
        try:
            if hasattr(pymetis, "CSRAdjacency"):
                adjacency = pymetis.CSRAdjacency(
                    adj_starts=xadj.astype(dt), adjacent=adjncy.astype(dt)
                )
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
                    xadj=xadj.astype(dt),
                    adjncy=adjncy.astype(dt),
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
    part_of = np.asarray(result.vertex_part, dtype=np.int64).astype(np.int32)
    return PartitionBook.from_part_of(part_of, num_parts, "metis", params)
