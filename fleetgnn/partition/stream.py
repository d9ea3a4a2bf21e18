"""Streaming partitioning for graphs larger than memory: Linear Deterministic Greedy (LDG).

LDG (Stanton & Kliot, KDD 2012) reads the nodes once, in ID order, each with its in-neighbours
(one sequential pass over the CSC's ``indptr`` and ``indices``, memory-mapped or not), and puts
node ``v`` into the part ``i`` maximising

    score(v, i) = |N(v) ∩ P_i| * (1 - w(P_i) / C)

where ``N(v)`` are the in-neighbours of ``v`` already placed, ``w(P_i)`` the weight placed in
part ``i`` so far and ``C`` the capacity of a part: parts that ``v`` would push past ``C`` are
excluded, ties go to the least loaded part. Restreaming (Nishimura & Ugander, KDD 2013) repeats
the pass: in pass ``t > 1`` a neighbour not yet placed in this pass counts with the part it had in
the previous one, which improves the cut markedly at the price of one more read of the graph.

Nodes are placed in batches of ``batch`` consecutive IDs: a batch sees the parts of every node
before it (and, when restreaming, the previous pass's parts of the rest), loads as of the batch's
start, and the capacity is enforced exactly inside the batch. Nodes whose placed neighbours give
no preference are spread over the least loaded parts in turn.

Balance: each node weighs ``w(v) = sum over criteria c of w_c(v) * N / W_c`` (``nodes``: 1,
``edges``: in-degree, ``train``: in ``train_mask``; ``W_c`` the criterion's total), as for
METIS's vertex weights, and ``C = max((1 + slack) * W / P, W / P + max_v w(v))``: every part ends
with at most ``C`` (the second term guarantees that every node fits somewhere).

Memory: the int32 assignment ``part_of`` is the only array with one entry per node; everything
else is per batch (``O(batch * (P + degree))``) or per part (the book built from the assignment
then adds its permutation arrays). Time: ``O(passes * (E + N * P))`` numpy work in
``ceil(N / batch)`` vectorised steps per pass (papers-like 0.062, 6.9M nodes and 99M edges, 8
parts: 20 s on one core).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fleetgnn.errors import PartitionError
from fleetgnn.graph.csc import Graph
from fleetgnn.partition.book import PartitionBook, _check_num_parts

_SCAN = 1 << 20  # nodes read per step by the streamed totals
_CRITERIA = ("nodes", "train", "edges")
_MAX_SCORE_CELLS = 1 << 22  # batch * P: the per-batch score matrix stays below ~32 MB


def ldg_partition(
    graph: Graph,
    num_parts: int,
    *,
    balance: Sequence[str] = ("nodes",),
    passes: int = 3,
    slack: float = 0.05,
    batch: int | None = None,
) -> PartitionBook:
    """Linear Deterministic Greedy streaming partition (see the module docstring).

    Args:
        graph: The graph (its arrays may be memory maps larger than RAM; they are read in order).
        num_parts: Number of parts ``P >= 1``.
        balance: Criteria weighting each node, a subset of ``('nodes', 'train', 'edges')``.
        passes: Streaming passes (1 = plain LDG; more restream with the previous pass's parts).
        slack: Capacity above the even share, ``C >= (1 + slack) * W / P``.
        batch: Nodes placed per vectorised step (default: ``min(4096, N / (32 P))`` and at most
            ``2^22 / P``, at least 1); affects speed and slightly the result, never the balance.

    Returns:
        The book (``method="ldg"``); deterministic for the same graph and arguments.

    Raises:
        PartitionError: ``passes < 1``, ``slack < 0``, ``batch < 1``, or ``train`` without a
            train mask.
    """
    p = _check_num_parts(num_parts)
    if isinstance(passes, bool) or not isinstance(passes, (int, np.integer)) or passes < 1:
        raise PartitionError(f"'passes' must be an integer >= 1 (got {passes!r})")
    if not isinstance(slack, (int, float)) or not slack >= 0:
        raise PartitionError(f"'slack' must be a number >= 0 (got {slack!r})")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise PartitionError(f"'batch' must be an integer >= 1 (got {batch!r})")
    crit = tuple(dict.fromkeys((balance,) if isinstance(balance, str) else balance))
    if not crit or any(c not in _CRITERIA for c in crit):
        raise PartitionError(
            f"'balance' must be a non-empty subset of {_CRITERIA} (got {tuple(balance)!r})"
        )
    if "train" in crit and graph.train_mask is None:
        raise PartitionError(
            "balance includes 'train' but the graph has no train_mask; add a train split or "
            "drop 'train' from balance"
        )
    n = graph.num_nodes
    params = {"balance": list(crit), "passes": int(passes), "slack": float(slack)}
    if p == 1 or n == 0:
        return PartitionBook.from_part_of(np.zeros(n, np.int32), p, "ldg", params)
    part_of = ldg_assign(graph, p, crit, passes=int(passes), slack=float(slack), batch=batch)
    return PartitionBook.from_part_of(part_of, p, "ldg", params)


def ldg_assign(
    graph: Graph,
    num_parts: int,
    crit: Sequence[str],
    *,
    passes: int,
    slack: float,
    batch: int | None,
) -> np.ndarray:
    """The LDG assignment (int32 ``[N]``) of :func:`ldg_partition`, arguments already checked.

    Memory: the returned array, plus per-batch and per-part arrays only.
    """
    n, p = graph.num_nodes, int(num_parts)
    scale, wmax = _weight_totals(graph, crit)
    total = float(n * len(crit))
    capacity = max((1.0 + slack) * total / p, total / p + wmax)
    step = batch or max(1, min(4096, n // (32 * p)))
    step = max(1, min(step, _MAX_SCORE_CELLS // p))
    part_of = np.full(n, -1, dtype=np.int32)
    for _ in range(passes):
        load = np.zeros(p, dtype=np.float64)
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            w = _weights(graph, crit, scale, lo, hi)
            choice = _place(graph, part_of, lo, hi, w, load, capacity, p)
            part_of[lo:hi] = choice
            load += np.bincount(choice, weights=w, minlength=p)
    return part_of


def _weight_totals(graph: Graph, crit: Sequence[str]) -> tuple[dict[str, float], float]:
    """Per-criterion normalisation ``N / W_c`` and the largest node weight, in streamed passes."""
    n = graph.num_nodes
    indptr = graph.indptr
    e = int(indptr[-1])
    scale: dict[str, float] = {}
    if "nodes" in crit:
        scale["nodes"] = 1.0
    if "edges" in crit:
        scale["edges"] = n / e if e else 0.0
    if "train" in crit:
        count = 0
        for lo in range(0, n, _SCAN):
            count += int(np.count_nonzero(graph.train_mask[lo : lo + _SCAN]))
        scale["train"] = n / count if count else 0.0
    if tuple(crit) == ("nodes",):
        return scale, 1.0
    wmax = 0.0
    for lo in range(0, n, _SCAN):
        hi = min(n, lo + _SCAN)
        wmax = max(wmax, float(_weights(graph, crit, scale, lo, hi).max()))
    return scale, wmax


def _weights(
    graph: Graph, crit: Sequence[str], scale: dict[str, float], lo: int, hi: int
) -> np.ndarray:
    """Combined weight of nodes ``[lo, hi)`` (float64)."""
    w = np.zeros(hi - lo, dtype=np.float64)
    if "nodes" in crit:
        w += 1.0
    if "edges" in crit and scale["edges"]:
        w += np.diff(np.asarray(graph.indptr[lo : hi + 1])) * scale["edges"]
    if "train" in crit and scale["train"]:
        w += np.asarray(graph.train_mask[lo:hi], dtype=np.float64) * scale["train"]
    return w


def _place(
    graph: Graph,
    part_of: np.ndarray,
    lo: int,
    hi: int,
    w: np.ndarray,
    load: np.ndarray,
    capacity: float,
    p: int,
) -> np.ndarray:
    """Parts of nodes ``[lo, hi)``: LDG scores on their placed in-neighbours, capacity kept."""
    b = hi - lo
    ptr = np.asarray(graph.indptr[lo : hi + 1], dtype=np.int64)
    src = np.asarray(graph.indices[ptr[0] : ptr[-1]])
    deg = np.diff(ptr)
    dst = np.repeat(np.arange(b, dtype=np.int64), deg)
    nb = part_of[src]
    known = (nb >= 0) & (src != dst + lo)  # placed neighbours, self loops aside
    counts = np.bincount(dst[known] * p + nb[known], minlength=b * p).reshape(b, p)
    del src, dst, nb, known
    choice = np.empty(b, dtype=np.int32)
    todo = np.arange(b)
    committed = load.copy()
    while todo.size:
        fits = committed[None, :] + w[todo, None] <= capacity  # [k, P]
        score = counts[todo] * (1.0 - committed / capacity)[None, :]
        score = np.where(fits, score, -np.inf)
        best = score.max(axis=1)
        pick = np.where(score == best[:, None], committed[None, :], np.inf).argmin(axis=1)
        # no preference (no placed neighbour in any part that fits): the least loaded parts in turn
        blind = best <= 0
        if blind.any():
            order = np.argsort(committed, kind="stable")
            room = order[fits[blind][:, order].any(axis=0)]
            if room.size:
                pick[blind] = room[np.arange(int(blind.sum())) % room.size]
        choice[todo] = pick
        # keep the capacity exactly: in node order, a node that would overflow its part waits
        order = np.argsort(pick, kind="stable")
        part, members = pick[order], todo[order]
        cum = np.cumsum(w[members])
        first = np.ones(part.size, dtype=bool)
        first[1:] = part[1:] != part[:-1]
        base = (cum - w[members])[first]  # weight before each part's first member
        cum -= np.repeat(base, np.diff(np.append(np.flatnonzero(first), part.size)))
        ok = committed[part] + cum <= capacity  # a prefix of each part's members
        np.maximum.at(committed, part[ok], committed[part[ok]] + cum[ok])
        committed[part[~ok]] = capacity  # full for this batch's waiting nodes
        todo = members[~ok]
    return choice
