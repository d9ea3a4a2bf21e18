"""Hotness: nodes ranked hottest first, the order the store fills its tiers in.

:func:`hotness_order` ranks nodes by degree or by how often pre-sampled mini-batches touched them,
ties broken by node ID. The ranking's two per-node arrays (``order`` and ``rank_of``, int32: 8
bytes per node) are the store's only ``N``-sized state; from :data:`RANKING_FILE_BYTES` on they
live in a shared mapping of an unlinked temporary file (page cache the kernel can write back and
reclaim), not in anonymous memory. Building them takes one more such array, the uint32 score, and
otherwise block-sized work arrays: degrees counted block by block, a counting sort instead of an
argsort. The tier plans (:mod:`fleetgnn.store.tiers`) walk this order.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import tempfile
from collections.abc import Callable
from typing import Literal

import numpy as np
import torch

from fleetgnn.errors import ConfigError, FleetgnnError, GraphError
from fleetgnn.graph.csc import Graph
from fleetgnn.graph.files import free_bytes, reserve, temp_prefix

#: How nodes are scored: in-degree, or access counts of pre-sampled mini-batches.
HotnessPolicy = Literal["degree", "presample"]


@dataclasses.dataclass(frozen=True, eq=False)
class HotnessRanking:
    """Nodes ranked hottest first.

    Attributes:
        order: ``[N]`` ``order[k]`` is the node of hot rank ``k`` (int32 when ``N < 2**31``,
            else int64: these arrays are per node, so they are kept as small as IDs allow; from
            :data:`RANKING_FILE_BYTES` on, a mapping of an unlinked temporary file, see
            :func:`ranking_array`).
        rank_of: ``[N]`` inverse of ``order`` (``rank_of[order[k]] == k``), ``order``'s dtype,
            kept like ``order``.
        score: ``[N]`` hotness per node, the exact count the order was computed from (degree
            or access count): uint32 while every count fits, else int64; kept like ``order``.
        policy: How the score was computed.
    """

    order: np.ndarray
    rank_of: np.ndarray
    score: np.ndarray
    policy: str

    def __repr__(self) -> str:
        head = self.order[:5].tolist()
        return f"HotnessRanking(policy={self.policy!r}, num_nodes={self.order.size}, top={head})"


def id_dtype(n: int) -> np.dtype:
    """int32 for ``n < 2**31`` rows, else int64 (per-node arrays of IDs or ranks)."""
    return np.dtype(np.int32 if n < 2**31 else np.int64)


#: A ranking array of at least this many bytes (``N`` int32 IDs: 4M nodes) is a file mapping.
RANKING_FILE_BYTES = 16 << 20
#: Rows (nodes, or hot ranks) handled per step by the ranking: its
#: temporaries are a few block-sized int64 arrays (1 MiB each), whatever the graph's size.
_PLAN_BLOCK = 1 << 17
#: Edges counted per step for the out-degrees (a slice of ``indices``, no copy).
_EDGE_BLOCK = 1 << 23
#: Largest score for which the histogram is a dense table (no longer than a block, so a block's
#: counts cost ``O(block)``); above it the distinct scores are collected block by block (at most
#: about ``2 sqrt(E)`` degrees differ).
_DENSE_SCORES = 1 << 17


def ranking_array(n: int, dtype: np.dtype) -> np.ndarray:
    """An uninitialised ``[n]`` array of ``dtype`` for a per-node ranking array.

    Below :data:`RANKING_FILE_BYTES` an ordinary array. From there on a shared, writable mapping
    of a temporary file in the system's temporary directory (``TMPDIR``), unlinked as soon as it
    is mapped (nothing is left behind, even by a killed process) with its space reserved first
    (no ``SIGBUS`` on a full disk): its pages are file-backed page cache, which the kernel writes
    back and reclaims under memory pressure, instead of anonymous memory that counts against
    the process until it exits (on a ``tmpfs`` ``TMPDIR`` they are shared memory: no gain, no
    loss). Where the directory has less than twice the bytes free or the file cannot be made,
    an ordinary array (the ranking is the same either way).
    """
    dtype = np.dtype(dtype)
    nbytes = int(n) * dtype.itemsize
    if nbytes < RANKING_FILE_BYTES:
        return np.empty(n, dtype=dtype)
    where = tempfile.gettempdir()
    if free_bytes(where) < 2 * nbytes:
        return np.empty(n, dtype=dtype)
    try:
        fd, path = tempfile.mkstemp(prefix=temp_prefix("ranking"), dir=where)
        try:
            os.unlink(path)
            reserve(fd, nbytes, path, "")
            mm = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
    except (OSError, FleetgnnError):
        return np.empty(n, dtype=dtype)
    return np.frombuffer(mm, dtype=dtype, count=n)  # the array keeps the mapping alive


def inverse_order(order: np.ndarray) -> np.ndarray:
    """``rank_of`` with ``rank_of[order[k]] == k`` (``order``'s dtype), filled in blocks."""
    rank_of = ranking_array(order.size, order.dtype)
    for a in range(0, order.size, _PLAN_BLOCK):
        b = min(order.size, a + _PLAN_BLOCK)
        rank_of[order[a:b]] = np.arange(a, b, dtype=order.dtype)
    return rank_of


def _count_dtype(bound: int) -> np.dtype:
    """uint32 for counts that stay below ``2**32`` (``bound`` is their largest possible value)."""
    return np.dtype(np.uint32 if bound < 2**32 else np.int64)


def _blocks(start: int, stop: int, step: int | None = None) -> range:
    return range(start, stop, _PLAN_BLOCK if step is None else step)


def _histogram(score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(values, counts)``: the distinct scores ascending (int64) and how many nodes have each.

    Block-wise: a dense table of ``max + 1`` counts where the largest score is at most
    :data:`_DENSE_SCORES`, else the union of each block's distinct scores.
    """
    n = score.size
    top = max((int(score[a : a + _PLAN_BLOCK].max()) for a in _blocks(0, n)), default=-1)
    if top < 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if top <= _DENSE_SCORES:
        table = np.zeros(top + 1, np.int64)
        for a in _blocks(0, n):
            table += np.bincount(score[a : a + _PLAN_BLOCK], minlength=top + 1)
        values = np.flatnonzero(table)
        return values, table[values]
    values, counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
    for a in _blocks(0, n):
        v, c = np.unique(score[a : a + _PLAN_BLOCK], return_counts=True)
        merged = np.union1d(values, v.astype(np.int64))
        acc = np.zeros(merged.size, np.int64)
        acc[np.searchsorted(merged, values)] += counts
        acc[np.searchsorted(merged, v)] += c
        values, counts = merged, acc
    return values, counts


def _ranking(score: np.ndarray, policy: str) -> HotnessRanking:
    """Rank by descending ``score`` (exact non-negative counts), ties by node ID.

    A counting sort: the histogram of the scores gives each score's first hot rank (the number
    of nodes with a larger score); the nodes are then dealt out in ID order, block by block,
    each block sorted by (descending score, ID) and written at its scores' next free ranks. Only
    ``order`` and ``rank_of`` are ``[N]``; the rest is a block or a histogram (distinct scores).
    ``score`` is kept as the ranking's ``score``.
    """
    n = score.size
    order = ranking_array(n, id_dtype(n))
    rank_of = ranking_array(n, order.dtype)
    values, counts = _histogram(score)
    if values.size:
        top = int(values[-1])
        above = np.cumsum(counts[::-1])[::-1] - counts  # nodes with a larger score
        nxt = above.copy()  # next free hot rank of each distinct score
        for a in _blocks(0, n):
            s = score[a : a + _PLAN_BLOCK].astype(np.int64)
            m = s.size
            key = (top - s) * _PLAN_BLOCK  # unique keys: descending score, then ID
            key += np.arange(m, dtype=np.int64)
            key.sort()
            gap, local = np.divmod(key, _PLAN_BLOCK)  # gap = top - score
            first = np.flatnonzero(np.r_[True, gap[1:] != gap[:-1]])
            runs = np.diff(np.r_[first, m])
            vi = np.searchsorted(values, top - gap[first])
            pos = np.repeat(nxt[vi] - first, runs)
            pos += np.arange(m, dtype=np.int64)
            order[pos] = local + a
            rank_of[local + a] = pos
            nxt[vi] += runs
    return HotnessRanking(order=order, rank_of=rank_of, score=score, policy=policy)


def _degree_scores(graph: Graph) -> np.ndarray:
    """In-degree + out-degree of every node, uint32 (int64 from ``2 E >= 2**32``) ``[N]``.

    The in-degrees are ``indptr``'s differences, block by block; the out-degrees are added in
    blocks of ``indices`` (``np.add.at`` with a same-dtype increment, NumPy's fast path, which
    neither copies the block nor makes another ``[N]`` array). The result is a
    :func:`ranking_array` (a file mapping from :data:`RANKING_FILE_BYTES` on).
    """
    n, e = graph.num_nodes, graph.num_edges
    dtype = _count_dtype(2 * e)  # a node's in- plus out-degree is at most 2 E
    score = ranking_array(n, dtype)
    for a in _blocks(0, n):
        b = min(n, a + _PLAN_BLOCK)
        score[a:b] = np.diff(graph.indptr[a : b + 1])
    one = dtype.type(1)
    for a in _blocks(0, e, _EDGE_BLOCK):
        np.add.at(score, graph.indices[a : a + _EDGE_BLOCK], one)
    return score


def hotness_order(
    graph: Graph,
    policy: HotnessPolicy = "degree",
    sampler_fn: Callable[[int], object] | None = None,
    k: int = 8,
) -> HotnessRanking:
    """Rank nodes by hotness, hottest first, ties broken by smaller node ID.

    - ``"degree"``: score = in-degree + out-degree. The out-degree counts how often a node is
      drawn as someone's neighbour (its feature row and adjacency are read then), the in-degree
      how large its adjacency segment is and how often it is expanded as a seed; on the common
      undirected graphs the sum is twice the degree, the order the XGNN default.
    - ``"presample"``: score = how often the node appears in ``k`` pre-sampled batches
      (GNNLab / XGNN pre-sampling); ``sampler_fn(i)`` returns the node IDs batch ``i`` touches
      (a tensor or array of any shape; repeats count).

    Memory: the ``[N]`` score (4 bytes per node while counts fit uint32), ``order`` and
    ``rank_of``, each a :func:`ranking_array`, plus a block-sized constant (a counting sort, see
    :func:`_ranking`); no ``[N]`` int64 or float temporaries.

    Args:
        graph: The graph.
        policy: ``"degree"`` or ``"presample"``.
        sampler_fn: Required for ``"presample"``: batch index -> sampled node IDs.
        k: Number of pre-sampled batches (>= 1).

    Returns:
        A :class:`HotnessRanking` with ``order`` and ``rank_of``.

    Raises:
        ConfigError: If the policy, ``k`` or ``sampler_fn`` is invalid.
        GraphError: If a sampled ID is out of range.
    """
    n = graph.num_nodes
    if policy == "degree":
        return _ranking(_degree_scores(graph), policy)
    if policy != "presample":
        raise ConfigError(
            f"'policy' must be 'degree' or 'presample' (got {policy!r}); 'presample' also needs "
            f"sampler_fn"
        )
    if sampler_fn is None or not callable(sampler_fn):
        raise ConfigError(
            "policy='presample' needs 'sampler_fn', a callable batch_index -> sampled node IDs "
            f"(got {sampler_fn!r})"
        )
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ConfigError(f"'k' (pre-sampled batches) must be an int >= 1 (got {k!r})")
    counts = ranking_array(n, np.uint32)
    counts[:] = 0
    sampled = 0  # IDs counted so far: a bound on every count
    for i in range(int(k)):  # loop over batches, not nodes
        got = sampler_fn(i)
        ids = got.detach().cpu().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
        ids = ids.reshape(-1)
        if ids.size and (not np.issubdtype(ids.dtype, np.integer)):
            raise GraphError(f"sampler_fn({i}) must return integer node IDs (got {ids.dtype})")
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
            raise GraphError(
                f"sampler_fn({i}) returned node ID {bad}, outside the valid interval [0, {n})"
            )
        sampled += ids.size
        if counts.dtype != _count_dtype(sampled):  # a count could pass 2**32 - 1
            wide = ranking_array(n, np.int64)
            for a in _blocks(0, n):
                wide[a : a + _PLAN_BLOCK] = counts[a : a + _PLAN_BLOCK]
            counts = wide
        np.add.at(counts, ids, counts.dtype.type(1))
    return _ranking(counts, policy)
