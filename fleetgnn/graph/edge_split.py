"""Edge splits for link prediction: train/val/test edges without leakage, stored with the dataset.

One split for every graph: a homogeneous graph's edges, or the edges of one *target relation*
``(src_type, name, dst_type)`` of a typed graph (:class:`~fleetgnn.graph.hetero.HeteroGraph`,
``relation=``; every other relation stays whole). :func:`write_edge_split` streams over the
CSC being split (memory-mapped or not) in bounded chunks of destinations and writes
``DATASET/edge_splits/<name>/``; :func:`edge_split_for` loads the saved split of ``(relation,
fractions, seed)`` (memory-mapped) or writes it first; :func:`split_edges` draws one in memory
(written to a temporary directory and read back).

One core, two callers. The core splits the pairs of one CSC, an ``indptr`` over destinations
and an ``indices`` over sources (:class:`_Pairs`): a homogeneous graph is that CSC with one ID
space for both ends, a typed graph's relation is that CSC with the two types' type-local IDs.
The typed split therefore calls the core on its relation's CSC and adds only what is typed:
resolving the relation, keeping its reverse relation free of held-out pairs, and its own keys.
The other way round (the homogeneous split as a typed graph of one relation) would wrap every
graph in a schema for nothing and still need the undirected pairs, which only a graph whose two
ends are one ID space has.

The split. Self loops (where both ends are one ID space) and duplicate edges are dropped. A
homogeneous graph is undirected when every edge has its reverse; a pair ``{u, v}`` is then
split once, with both of its edges; a relation is directed (its ``(u, v)`` and ``(v, u)`` are
different facts, also when both ends are of one type). Every pair (an unordered pair ``(min,
max)`` on an undirected graph, an edge ``(src, dst)`` otherwise) gets a 64-bit draw of the
keyed hash, ``h = mix(mix(K ^ a) ^ b)`` with ``K`` keyed by the seed (and the relation's index)
(:mod:`fleetgnn.keyhash`), and the pairs are ranked by ``(h, a * N_dst + b)``: the first
``floor(val * M)`` validate, the next ``floor(test * M)`` test, the rest train. A pair's split
therefore depends only on the pair, the seed, the relation and the counts, never on the
chunking or the order of the edges; an edge and its reverse share their unordered key and land
together. The two thresholds are found by a radix selection (a 65,536-bin histogram of the
draws' top 16 bits, then the draws of the two boundary bins, ``~2M / 65536`` of them).

Files (one ``.npy`` per array, written through bounded writes, plus ``meta.json`` last; a
relation's IDs are type-local):

- ``{train,val,test}_pos`` int64 ``[2, P]``: the pairs ``(src, dst)`` (``src < dst`` when
  undirected), in CSC order (by destination, then source);
- ``train_indptr`` int64 ``[N_dst + 1]`` and ``train_indices`` ``[E']``: the message-passing
  CSC, the input CSC with the validation and test edges (both directions when undirected),
  loops and duplicates filtered out, each destination's sources sorted: held-out edges never
  reach any aggregation;
- ``rev_indptr``/``rev_indices`` (a relation whose reverse relation is in the graph,
  ``(dst_type, rev_name, src_type)`` as :func:`~fleetgnn.graph.hetero.add_reverse_relations`
  adds it, or the relation a ``rev_`` relation reverses): the reverse relation without the
  held-out pairs' reverses, so held-out edges reach no aggregation in either direction;
- ``{val,test}_neg`` int64 ``[2, P]``: the GAE protocol's negatives (Kipf & Welling 2016;
  AUC/AP): as many pairs that are no edge and no self loop as positives, distinct, and
  disjoint between validation and test: keyed candidates ``j = 0, 1, ...`` in order, a
  candidate out of range, a loop, (undirected) one with ``a > b``, or an edge (a binary search
  in the sorted CSC segment; of a homogeneous graph in either direction) skipped; validation
  takes the first accepted ones, test the next. A graph's candidates are a keyed bijection (a
  4-round Feistel network) of ``j`` over ``[0, 2^k)^2`` (``2^k >= N``), so they never repeat; a
  relation's are keyed draws of ``(u, v)`` in the two types' ranges, a repeat skipped;
- ``{val,test}_neg_dst`` ``[P, K]`` (a graph's index dtype, a relation's int64): the OGB
  protocol's negatives (MRR, Hits@K), ``K`` destinations per positive keyed by the pair.

Undirectedness is decided in the first pass from sums: the multiset of unordered keys of the
edges with ``src < dst`` must equal that of the edges with ``src > dst`` (same count, same sum of
the 64-bit draws mod ``2^64``; a non-symmetric graph passes with probability ~``2^-64``).

Memory: ``O(chunk)`` (a few int64 work arrays of ``chunk`` edges or nodes) plus the 512 KiB
histogram; nothing of size ``N`` or ``E`` is held, but for a relation the pairs its GAE
negatives took (``O(P)``, to skip repeats) and its reverse relation's edges (``O(E_rev)``). A
CSC whose segments are not sorted is first copied, sorted per segment, to a scratch file in the
split's directory (removed at the end). Passes: one to check sortedness, one to count and
histogram, one to collect the boundary bins, one to write.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from fleetgnn.errors import ConfigError, DatasetError, GraphError
from fleetgnn.graph.csc import Graph, index_dtype
from fleetgnn.graph.dataset import replace_dir, write_json_atomic
from fleetgnn.graph.files import create_npy, temp_prefix
from fleetgnn.graph.hetero import REVERSE_PREFIX, HeteroGraph, Relation
from fleetgnn.keyhash import base_key, bounded_draws_numpy, mix64_numpy

SPLITS: tuple[str, ...] = ("train", "val", "test")
#: ``meta.json``'s format of a homogeneous graph's split, and of a relation's (``kind: typed``).
FORMAT = 2
TYPED_FORMAT = 1
#: OGB-protocol negatives per positive's source (ogbl-citation2 uses 1000; small graphs fewer).
OGB_NEGATIVES = 100
#: Edges (and at most as many destinations) per streamed chunk.
CHUNK_EDGES = 1 << 20
_BITS = 16  # histogram bins of the selection: the draws' top 16 bits
_SALT_SPLIT = 0x73706C6974  # "split"
_SALT_GAE = 0x676165  # "gae"
_SALT_OGB = 0x6F6762  # "ogb"
_SALT_TYPED_SPLIT = 0x7473706C6974  # "tsplit"
_SALT_TYPED_GAE = 0x74676165  # "tgae"
_SALT_TYPED_OGB = 0x746F6762  # "togb"
_FEISTEL_ROUNDS = 4
_FIX = "free some space there, or move the dataset to a larger disk"


@dataclasses.dataclass(frozen=True)
class EdgeSplit:
    """A graph's edges (or a typed graph's relation's) split for link prediction.

    Attributes:
        name: The split's directory name under ``edge_splits/``.
        undirected: Whether pairs were split with their reverses (never for a relation).
        pos: Split -> positive pairs int64 ``[2, P]`` (``(src, dst)``; one per undirected pair).
        neg: ``"val"``/``"test"`` -> GAE-protocol negative pairs int64 ``[2, P]``.
        neg_dst: ``"val"``/``"test"`` -> OGB-protocol negative destinations ``[P, K]`` of each
            positive's source.
        train_graph: The message-passing graph: the training edges only (both directions of a
            pair when ``undirected``), with the dataset's node data; of a typed graph, the graph
            without the held-out pairs (and their reverses), edge times dropped.
        relation: The split relation ``(src_type, name, dst_type)`` of a typed graph, else
            ``None``; the pairs are then type-local IDs.
        reverse: The relation's reverse relation in the graph, or ``None``.

    The arrays are memory maps when the split was loaded from a dataset.
    """

    name: str
    undirected: bool
    pos: dict[str, np.ndarray]
    neg: dict[str, np.ndarray]
    neg_dst: dict[str, np.ndarray]
    train_graph: Graph | HeteroGraph
    relation: Relation | None = None
    reverse: Relation | None = None

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={self.pos[s].shape[1]}" for s in SPLITS)
        what = f"undirected={self.undirected}" if self.relation is None else self.relation
        return f"EdgeSplit({self.name!r}, {what}, {sizes})"


def split_name(val: float, test: float, seed: int, relation: Relation | None = None) -> str:
    """The directory name of the split with these fractions and seed (``SRC.NAME.DST-`` first)."""
    name = f"val{val:g}-test{test:g}-seed{int(seed)}"
    return name if relation is None else f"{'.'.join(relation)}-{name}"


def check_fractions(
    val: float, test: float, what: str = "edge split", rest: str = "the rest trains"
) -> None:
    """Refuse split fractions outside (0, 1) or summing to 1 or more (``what`` names the split).

    Raises:
        ConfigError: Bad fractions.
    """
    if not (0.0 < val < 1.0 and 0.0 < test < 1.0 and val + test < 1.0):
        raise ConfigError(
            f"{what} fractions val={val!r}, test={test!r} must each lie in (0, 1) and sum to "
            f"less than 1 ({rest}), e.g. val=0.05, test=0.1"
        )


def _check_chunk(chunk: int | None) -> int:
    chunk = CHUNK_EDGES if chunk is None else chunk
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ConfigError(f"edge split 'chunk' must be an integer >= 1 (got {chunk!r})")
    return chunk


# ------------------------------------------------------------------------------- relations
def resolve_relation(graph: HeteroGraph, relation: object) -> Relation:
    """The relation triple ``relation`` names: a triple, ``"src,name,dst"`` or a unique name.

    Raises:
        ConfigError: No such relation (the message lists the graph's relations).
    """
    s = graph.schema
    rels = ", ".join(",".join(r) for r in s.relations)
    if isinstance(relation, str):
        parts = [p.strip() for p in relation.split(",")]
        key: object = tuple(parts) if len(parts) == 3 else parts[0] if len(parts) == 1 else None
    elif isinstance(relation, (tuple, list)) and len(relation) == 3:
        key = tuple(str(p) for p in relation)
    else:
        key = None
    if key is None:
        raise ConfigError(
            f"link relation {relation!r} must be 'src,name,dst' or a relation name; the graph "
            f"'{graph.name}' has: {rels}"
        )
    try:
        return s.relations[s.relation_index(key)]  # type: ignore[arg-type]
    except GraphError:
        raise ConfigError(
            f"link relation {relation!r} is not a relation of '{graph.name}'; it has: {rels}"
        ) from None


def reverse_of(graph: HeteroGraph, rel: Relation) -> Relation | None:
    """The reverse relation of ``rel`` in ``graph`` (``rev_name``, or what ``rel`` reverses)."""
    src, name, dst = rel
    if name.startswith(REVERSE_PREFIX):
        cand = (dst, name[len(REVERSE_PREFIX) :], src)
    else:
        cand = (dst, REVERSE_PREFIX + name, src)
    return cand if cand in graph.schema.relations and cand != rel else None


def _target(graph: Graph | HeteroGraph, relation: object) -> Relation | None:
    """The relation to split (``None``: a homogeneous graph's edges), checked against ``graph``."""
    if isinstance(graph, HeteroGraph):
        if relation is None:
            rels = ", ".join(",".join(r) for r in graph.schema.relations)
            raise ConfigError(
                f"the typed graph '{graph.name}' needs the relation whose edges to split "
                f"(relation=, train.link_relation): one of {rels}"
            )
        return resolve_relation(graph, relation)
    if relation is not None:
        raise ConfigError(
            f"relation={relation!r} is for typed graphs; '{graph.name}' has one relation: leave "
            f"it unset"
        )
    refuse_timed(graph)
    return None


def refuse_timed(graph: Graph) -> None:
    """Refuse a graph with edge times: this split is random and its training graph untimed.

    The split ranks pairs by a keyed hash, not by time, merges duplicate edges (a pair seen at
    several times) and writes a training CSC without ``edge_time``: held-out edges could precede
    training ones and the times would be dropped. A timed graph is split by time
    (:func:`fleetgnn.graph.time_split.split_by_time`); splitting at random on purpose (ignoring
    the times) is ``write_edge_split(graph.replace(edge_time=None), ...)``.

    Raises:
        DatasetError: ``graph.edge_time`` is set.
    """
    if graph.edge_time is not None:
        raise DatasetError(
            f"graph '{graph.name}' has edge times (edge_time), which the random edge split would "
            f"drop (it merges an edge's occurrences and may hold out edges older than training "
            f"ones); split it by time with fleetgnn.graph.time_split.split_by_time (train."
            f"temporal=auto or on), or pass graph.replace(edge_time=None) to split at random "
            f"ignoring the times (train.temporal=off)"
        )


# ------------------------------------------------------------------------------- streaming
@dataclasses.dataclass(frozen=True)
class _Pairs:
    """The CSC whose edges are split: a homogeneous graph's, or one relation's.

    ``one_space``: sources and destinations are one ID space (a graph, or a relation between
    nodes of one type), so ``src == dst`` is a self loop, dropped.
    """

    indptr: np.ndarray
    indices: np.ndarray
    num_src: int
    one_space: bool

    @property
    def num_dst(self) -> int:
        return int(self.indptr.shape[0]) - 1

    def ranges(self, chunk: int) -> Iterator[tuple[int, int]]:
        """Destination ranges ``[a, b)``: at most ``chunk`` nodes and edges each (or one node)."""
        indptr, n = self.indptr, self.num_dst
        a = 0
        while a < n:
            end = int(np.searchsorted(indptr, int(indptr[a]) + chunk, side="right")) - 1
            b = max(a + 1, min(a + chunk, end, n))
            yield a, b
            a = b

    def edges(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Destinations ``[a, b)``: ``(src, dst, keep, ptr)``; ``keep`` drops loops and repeats.

        ``ptr``: the range's int64 offsets (``[b - a + 1]``, from ``indptr[a]``).
        """
        ptr = np.asarray(self.indptr[a : b + 1], dtype=np.int64)
        src = np.asarray(self.indices[ptr[0] : ptr[-1]], dtype=np.int64)
        dst = np.repeat(np.arange(a, b, dtype=np.int64), np.diff(ptr))
        keep = src != dst if self.one_space else np.ones(src.size, dtype=bool)
        if src.size > 1:  # sorted segments: a duplicate follows its twin
            keep[1:] &= (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
        return src, dst, keep, ptr


def _draws(key: np.uint64, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The pair draws ``mix(mix(K ^ a) ^ b)`` (uint64)."""
    return mix64_numpy(mix64_numpy(a.astype(np.uint64) ^ key) ^ b.astype(np.uint64))


def _segments_sorted(pairs: _Pairs, chunk: int) -> bool:
    for a, b in pairs.ranges(chunk):
        ptr = np.asarray(pairs.indptr[a : b + 1], dtype=np.int64)
        src = np.asarray(pairs.indices[ptr[0] : ptr[-1]])
        if src.size < 2:
            continue
        down = src[1:] < src[:-1]
        down[(ptr[1:-1] - ptr[0] - 1)[(ptr[1:-1] > ptr[0]) & (ptr[1:-1] < ptr[-1])]] = False
        if down.any():
            return False
    return True


def _sorted_copy(pairs: _Pairs, path: Path, chunk: int) -> _Pairs:
    """``pairs`` with each segment of its indices sorted, mapped from ``path``."""
    out = create_npy(path, pairs.indices.dtype, (int(pairs.indices.shape[0]),), _FIX)
    for a, b in pairs.ranges(chunk):
        ptr = np.asarray(pairs.indptr[a : b + 1], dtype=np.int64)
        src = np.asarray(pairs.indices[ptr[0] : ptr[-1]])
        seg = np.repeat(np.arange(b - a), np.diff(ptr))
        out[ptr[0] : ptr[-1]] = src[np.lexsort((src, seg))]
    out.flush()
    return dataclasses.replace(pairs, indices=out)


def _has_edge(pairs: _Pairs, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Whether ``src[i] -> dst[i]`` is an edge: a binary search in each sorted segment."""
    indptr, indices = pairs.indptr, pairs.indices
    lo = np.asarray(indptr[dst], dtype=np.int64)
    end = np.asarray(indptr[dst + 1], dtype=np.int64)
    hi = end.copy()
    while True:
        live = lo < hi
        if not live.any():
            break
        mid = (lo + hi) // 2
        at = np.where(live, mid, 0)
        go = live & (np.asarray(indices[at]) < src) if indices.size else live
        lo = np.where(go, mid + 1, lo)
        hi = np.where(live & ~go, mid, hi)
    hit = lo < end
    out = np.zeros(src.shape, dtype=bool)
    out[hit] = np.asarray(indices[lo[hit]]) == src[hit]
    return out


@dataclasses.dataclass
class _Scan:
    """Pass 1's totals: counts, symmetry sums and histograms of the draws' top bits."""

    lower: int = 0
    upper: int = 0
    sum_lower: int = 0
    sum_upper: int = 0
    hist_undirected: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros(1 << _BITS, np.int64)
    )
    hist_directed: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros(1 << _BITS, np.int64)
    )


def _canonical(src: np.ndarray, dst: np.ndarray, undirected: bool) -> tuple[np.ndarray, np.ndarray]:
    return (np.minimum(src, dst), np.maximum(src, dst)) if undirected else (src, dst)


def _scan(pairs: _Pairs, key: np.uint64, chunk: int) -> _Scan:
    s = _Scan()
    shift = np.uint64(64 - _BITS)
    for a, b in pairs.ranges(chunk):
        src, dst, keep, _ = pairs.edges(a, b)
        src, dst = src[keep], dst[keep]
        lo_, hi_ = _canonical(src, dst, True)
        h = _draws(key, lo_, hi_)  # the unordered pair's draw
        low = src < dst
        s.lower += int(low.sum())
        s.upper += int((~low).sum())
        s.sum_lower = (s.sum_lower + int(h[low].sum(dtype=np.uint64))) % (1 << 64)
        s.sum_upper = (s.sum_upper + int(h[~low].sum(dtype=np.uint64))) % (1 << 64)
        s.hist_undirected += np.bincount((h[low] >> shift).astype(np.int64), minlength=1 << _BITS)
        h_dir = h.copy()  # directed: an edge's own draw, ordered
        h_dir[~low] = _draws(key, src[~low], dst[~low])
        s.hist_directed += np.bincount((h_dir >> shift).astype(np.int64), minlength=1 << _BITS)
    return s


def _thresholds(
    pairs: _Pairs,
    key: np.uint64,
    chunk: int,
    hist: np.ndarray,
    ranks: tuple[int, int],
    undirected: bool,
) -> list[tuple[int, int]]:
    """The ``(draw, a * N_dst + b)`` of the pairs of rank ``ranks`` (0-based) in draw order."""
    n = pairs.num_dst
    cum = np.cumsum(hist)
    bins = [int(np.searchsorted(cum, r, side="right")) for r in ranks]
    shift = np.uint64(64 - _BITS)
    found: dict[int, list[np.ndarray]] = {b: [] for b in bins}
    for a, b in pairs.ranges(chunk):
        src, dst, keep, _ = pairs.edges(a, b)
        if undirected:
            keep &= src < dst
        src, dst = src[keep], dst[keep]
        h = _draws(key, src, dst)
        top = (h >> shift).astype(np.int64)
        for bin_ in found:
            sel = top == bin_
            if sel.any():
                found[bin_].append(np.stack([h[sel].view(np.int64), src[sel] * n + dst[sel]]))
    out = []
    for r, bin_ in zip(ranks, bins, strict=True):
        items = np.concatenate(found[bin_], axis=1) if found[bin_] else np.zeros((2, 0), np.int64)
        order = np.lexsort((items[1], items[0].view(np.uint64)))
        below = int(cum[bin_ - 1]) if bin_ > 0 else 0
        j = order[r - below]
        out.append((int(items[0, j].view(np.uint64)), int(items[1, j])))
    return out


def _before(h: np.ndarray, k: np.ndarray, t: tuple[int, int]) -> np.ndarray:
    """``(h, k) < t`` elementwise (``h`` uint64, ``k`` int64)."""
    th, tk = np.uint64(t[0]), t[1]
    return (h < th) | ((h == th) & (k < tk))


class _Rows:
    """Bounded appends to a mapped ``[2, P]`` (or ``[P]``) ``.npy`` file."""

    def __init__(self, path: Path, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        self.arr = create_npy(path, dtype, shape, _FIX)
        self.at = 0

    def add(self, *cols: np.ndarray) -> None:
        k = cols[0].shape[0]
        if len(cols) == 1:
            self.arr[self.at : self.at + k] = cols[0]
        else:
            for i, c in enumerate(cols):
                self.arr[i, self.at : self.at + k] = c
        self.at += k

    def close(self) -> None:
        self.arr.flush()
        del self.arr


def _write_split(
    pairs: _Pairs,
    key: np.uint64,
    chunk: int,
    cuts: list[tuple[int, int]],
    counts: dict[str, int],
    undirected: bool,
    out: Path,
) -> None:
    """Pass 3: the positives and the training CSC, chunk by chunk."""
    indptr, n = pairs.indptr, pairs.num_dst
    pos = {s: _Rows(out / f"{s}_pos.npy", np.dtype(np.int64), (2, counts[s])) for s in SPLITS}
    e_train = counts["train"] * (2 if undirected else 1)
    t_ptr = create_npy(out / "train_indptr.npy", np.int64, (n + 1,), _FIX)
    t_idx = _Rows(out / "train_indices.npy", index_dtype(pairs.num_src), (e_train,))
    t_ptr[0] = 0
    for a, b in pairs.ranges(chunk):
        src, dst, keep, _ = pairs.edges(a, b)
        lo_, hi_ = _canonical(src, dst, undirected)
        h = _draws(key, lo_, hi_)
        k = lo_ * n + hi_
        val, below_test = _before(h, k, cuts[0]), _before(h, k, cuts[1])
        which = {"val": keep & val, "test": keep & ~val & below_test, "train": keep & ~below_test}
        once = src < dst if undirected else np.ones_like(keep)
        for s, m in which.items():
            m = m & once
            pos[s].add(src[m], dst[m])
        t = which["train"]
        t_idx.add(src[t].astype(t_idx.arr.dtype, copy=False))
        counted = np.cumsum(t, dtype=np.int64)
        seg_end = np.asarray(indptr[a + 1 : b + 1], dtype=np.int64) - int(indptr[a])
        done = np.concatenate([[0], counted])[seg_end]
        t_ptr[a + 1 : b + 1] = int(t_ptr[a]) + done
    for s in SPLITS:
        if pos[s].at != counts[s]:  # pragma: no cover - the passes disagree: a changing file
            raise DatasetError(f"the edge split's {s} pairs changed while it was written")
        pos[s].close()
    t_idx.close()
    t_ptr.flush()
    del t_ptr


# ------------------------------------------------------------------------------- negatives
@dataclasses.dataclass(frozen=True)
class _Candidates:
    """The keyed candidates ``j = 0, 1, ...`` of the GAE negatives (see the module docstring).

    ``draw(j)`` gives the int64 pairs ``(a, b)`` of the uint64 ``j``; ``total`` candidates are
    tried; ``distinct``: the stream never repeats a pair (else a repeat is skipped).
    """

    draw: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
    total: int
    distinct: bool


def _feistel(key: np.ndarray, j: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """A keyed bijection of ``j`` over ``[0, 4^k)``, as two ``k``-bit halves."""
    mask = np.uint64((1 << k) - 1)
    left, right = (j >> np.uint64(k)) & mask, j & mask
    for r in range(_FEISTEL_ROUNDS):
        left, right = right, left ^ (mix64_numpy(right ^ key[r]) & mask)
    return left.astype(np.int64), right.astype(np.int64)


def _feistel_candidates(seed: int, n: int) -> _Candidates:
    """A graph's candidates: a keyed bijection over ``[0, 2^k)^2`` with ``2^k >= n``."""
    k = max(1, math.ceil(math.log2(max(n, 2))))
    keys = np.array([base_key(_SALT_GAE, seed, r) for r in range(_FEISTEL_ROUNDS)], np.uint64)
    return _Candidates(lambda j: _feistel(keys, j, k), 1 << (2 * k), distinct=True)


def _keyed_candidates(key: int, n_src: int, n_dst: int, need: int) -> _Candidates:
    """A relation's candidates: keyed draws of ``(u, v)`` in ``[0, n_src) x [0, n_dst)``."""

    def draw(j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        bounds = np.tile(np.array([n_src, n_dst], np.int64), (j.size, 1))
        uv = bounded_draws_numpy(mix64_numpy(j ^ np.uint64(key)), bounds)
        return uv[:, 0], uv[:, 1]

    return _Candidates(draw, max(64 * need, 1 << 20), distinct=False)


def _gae_negatives(
    pairs: _Pairs,
    cands: _Candidates,
    counts: dict[str, int],
    undirected: bool,
    either_way: bool,
    chunk: int,
    out: Path,
) -> None:
    """The GAE protocol's negatives of val then test (see the module docstring).

    ``either_way``: a candidate that is an edge in either direction is skipped.
    """
    n_src, n_dst = pairs.num_src, pairs.num_dst
    rows = {s: _Rows(out / f"{s}_neg.npy", np.dtype(np.int64), (2, counts[s])) for s in SPLITS[1:]}
    need, have, j = counts["val"] + counts["test"], 0, 0
    taken = np.zeros(0, np.int64)  # keys of the pairs taken, when the stream may repeat one
    while have < need:
        if j >= cands.total:
            raise DatasetError(
                f"found only {have} of {need} node pairs that are not edges; the graph is too "
                f"dense for the GAE protocol's negatives"
            )
        cand = np.arange(j, min(cands.total, j + chunk), dtype=np.uint64)
        j += cand.size
        a, b = cands.draw(cand)
        ok = (a < n_src) & (b < n_dst)
        if pairs.one_space:
            ok &= a != b
        if undirected:
            ok &= a < b
        a, b = a[ok], b[ok]
        edge = _has_edge(pairs, a, b)
        if either_way:
            edge |= _has_edge(pairs, b, a)
        a, b = a[~edge], b[~edge]
        if not cands.distinct:  # each pair's first candidate, unless taken before
            k = a * n_dst + b
            first = np.sort(np.unique(k, return_index=True)[1])
            first = first[~np.isin(k[first], taken)]
            a, b = a[first], b[first]
        take = min(a.size, need - have)
        a, b = a[:take], b[:take]
        if not cands.distinct:
            taken = np.union1d(taken, a * n_dst + b)
        to_val = max(0, min(take, counts["val"] - have))
        rows["val"].add(a[:to_val], b[:to_val])
        rows["test"].add(a[to_val:], b[to_val:])
        have += take
    for r in rows.values():
        r.close()


def _ogb_negatives(
    num_dst: int,
    keys: tuple[int, int],
    dtype: np.dtype,
    counts: dict[str, int],
    chunk: int,
    out: Path,
) -> None:
    """The OGB protocol's ``K`` destinations per val and test positive, keyed by the pair."""
    k = min(OGB_NEGATIVES, max(num_dst - 1, 1))
    per = max(1, chunk // k)
    for s, key in zip(SPLITS[1:], keys, strict=True):
        pos = np.load(out / f"{s}_pos.npy", mmap_mode="r")
        rows = _Rows(out / f"{s}_neg_dst.npy", dtype, (counts[s], k))
        for lo in range(0, counts[s], per):
            hi = min(counts[s], lo + per)
            keyed = _draws(np.uint64(key), np.asarray(pos[0, lo:hi]), np.asarray(pos[1, lo:hi]))
            rows.add(bounded_draws_numpy(keyed, np.full((hi - lo, k), num_dst)).astype(dtype))
        rows.close()
        del pos


# ------------------------------------------------------------------------------- the core
@dataclasses.dataclass(frozen=True)
class _Keys:
    """What a graph's split and a relation's tell apart: keys, candidates, dtypes, messages.

    Attributes:
        split: The pairs' draw key.
        ogb: The OGB negatives' keys of val and test.
        neg_dst: The OGB negatives' dtype.
        candidates: The GAE candidates for ``need`` negatives.
        directed: Pairs are edges even where every edge has its reverse (a relation).
        either_way: A GAE candidate must be no edge in either direction (a graph).
        what: The split's subject in messages.
    """

    split: np.uint64
    ogb: tuple[int, int]
    neg_dst: np.dtype
    candidates: Callable[[int], _Candidates]
    directed: bool
    either_way: bool
    what: str


def _graph_keys(graph: Graph, seed: int) -> _Keys:
    n = graph.num_nodes
    return _Keys(
        split=np.uint64(base_key(_SALT_SPLIT, seed)),
        ogb=(base_key(_SALT_OGB, seed, 0), base_key(_SALT_OGB, seed, 1)),
        neg_dst=index_dtype(n),
        candidates=lambda need: _feistel_candidates(seed, n),
        directed=False,
        either_way=True,
        what=f"dataset '{graph.name}'",
    )


def _relation_keys(graph: HeteroGraph, rel: Relation, seed: int) -> _Keys:
    s = graph.schema
    rid, n_src, n_dst = s.relation_index(rel), s.count(rel[0]), s.count(rel[2])
    gae, ogb = base_key(_SALT_TYPED_GAE, seed, rid), base_key(_SALT_TYPED_OGB, seed, rid)
    return _Keys(
        split=np.uint64(base_key(_SALT_TYPED_SPLIT, seed, rid)),
        ogb=(ogb ^ 0, ogb ^ 1),
        neg_dst=np.dtype(np.int64),
        candidates=lambda need: _keyed_candidates(gae, n_src, n_dst, need),
        directed=True,
        either_way=False,
        what=f"relation {rel} of '{graph.name}'",
    )


def _split_pairs(
    pairs: _Pairs, keys: _Keys, val: float, test: float, chunk: int, out: Path
) -> tuple[bool, dict[str, int]]:
    """Write the split of ``pairs``'s edges into ``out``: ``(undirected, counts)``."""
    scratch = out / "sorted_indices.npy"
    if not _segments_sorted(pairs, chunk):
        pairs = _sorted_copy(pairs, scratch, chunk)
    scan = _scan(pairs, keys.split, chunk)
    undirected = not keys.directed and (scan.lower, scan.sum_lower) == (scan.upper, scan.sum_upper)
    hist = scan.hist_undirected if undirected else scan.hist_directed
    m = int(hist.sum())
    n_val, n_test = int(np.floor(val * m)), int(np.floor(test * m))
    if n_val < 1 or n_test < 1 or m - n_val - n_test < 1:
        raise DatasetError(
            f"{keys.what} has {m} distinct edge pairs; val={val:g} and test={test:g} leave a "
            f"split empty; raise the fractions or use a larger graph"
        )
    counts = {"train": m - n_val - n_test, "val": n_val, "test": n_test}
    cuts = _thresholds(pairs, keys.split, chunk, hist, (n_val, n_val + n_test), undirected)
    _write_split(pairs, keys.split, chunk, cuts, counts, undirected, out)
    cands = keys.candidates(n_val + n_test)
    _gae_negatives(pairs, cands, counts, undirected, keys.either_way, chunk, out)
    _ogb_negatives(pairs.num_dst, keys.ogb, keys.neg_dst, counts, chunk, out)
    if scratch.exists():
        del pairs
        scratch.unlink()
    return undirected, counts


# ------------------------------------------------------------------------------- the split
def write_edge_split(
    graph: Graph | HeteroGraph,
    out: str | Path,
    val: float = 0.05,
    test: float = 0.1,
    seed: int = 0,
    *,
    relation: object = None,
    chunk: int | None = None,
) -> Path:
    """Split ``graph``'s edges (a typed graph's: ``relation``'s), streaming, into ``out``.

    ``out`` is written through a private temporary sibling and replaced whole at the end (a
    directory without ``meta.json`` is incomplete). Memory and passes: see the module docstring.

    Args:
        graph: The dataset (its arrays may be memory maps larger than memory).
        out: The split's directory (``DATASET/edge_splits/<name>`` for :func:`edge_split_for`).
        val: Fraction of pairs for validation.
        test: Fraction of pairs for testing.
        seed: Seed of the split and its negatives.
        relation: A typed graph's relation to split (a triple, ``"src,name,dst"`` or a unique
            name); ``None`` for a homogeneous graph.
        chunk: Edges (and destinations) per streamed step (default :data:`CHUNK_EDGES`); the
            result does not depend on it.

    Raises:
        ConfigError: Fractions outside (0, 1) or summing to 1 or more, a bad ``chunk``, or a
            missing, unknown or needless ``relation``.
        DatasetError: Too few edges for a non-empty split each, too dense for the negatives, or
            a homogeneous graph with ``edge_time`` (see :func:`refuse_timed`).
    """
    check_fractions(val, test)
    chunk = _check_chunk(chunk)
    rel = _target(graph, relation)
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(target.name), dir=target.parent))
    try:
        if rel is None:
            _write_graph(graph, tmp, val, test, int(seed), chunk)  # type: ignore[arg-type]
        else:
            _write_relation(graph, rel, tmp, val, test, int(seed), chunk)  # type: ignore[arg-type]
        replace_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _write_graph(graph: Graph, out: Path, val: float, test: float, seed: int, chunk: int) -> None:
    pairs = _Pairs(graph.indptr, graph.indices, graph.num_nodes, one_space=True)
    undirected, counts = _split_pairs(pairs, _graph_keys(graph, seed), val, test, chunk, out)
    meta = _meta(split_name(val, test, seed), undirected, counts, graph)
    write_json_atomic(out / "meta.json", meta)  # last: a split without meta.json is incomplete


def _write_relation(
    graph: HeteroGraph, rel: Relation, out: Path, val: float, test: float, seed: int, chunk: int
) -> None:
    s = graph.schema
    n_src, n_dst = s.count(rel[0]), s.count(rel[2])
    indptr, indices = graph.csc[rel]
    pairs = _Pairs(indptr, indices, n_src, one_space=rel[0] == rel[2])
    _, counts = _split_pairs(pairs, _relation_keys(graph, rel, seed), val, test, chunk, out)
    rev = reverse_of(graph, rel)
    if rev is not None:  # the reverse relation without the held-out pairs' reverses
        held = np.concatenate([np.load(out / f"{s}_pos.npy") for s in SPLITS[1:]], axis=1)
        r_src, r_dst = graph.relation_edges(rev)  # edges dst-type -> src-type
        gone = np.isin(r_dst * n_dst + r_src, held[0] * n_dst + held[1])
        r_src, r_dst = r_src[~gone], r_dst[~gone]
        rev_ptr = np.zeros(n_src + 1, np.int64)
        np.cumsum(np.bincount(r_dst, minlength=n_src), out=rev_ptr[1:])
        rev_idx = r_src[np.lexsort((r_src, r_dst))].astype(index_dtype(n_dst))
        np.save(out / "rev_indptr.npy", rev_ptr)
        np.save(out / "rev_indices.npy", rev_idx)
    meta = _meta(split_name(val, test, seed, rel), False, counts, graph, rel, rev)
    write_json_atomic(out / "meta.json", meta)  # last: a split without meta.json is incomplete


def _meta(
    name: str,
    undirected: bool,
    counts: dict[str, int],
    graph: Graph | HeteroGraph,
    rel: Relation | None = None,
    rev: Relation | None = None,
) -> dict[str, object]:
    """A split's ``meta.json``: a graph's (format 2) or a relation's (format 1, ``kind: typed``)."""
    if rel is None:
        return {
            "format": FORMAT,
            "name": name,
            "undirected": undirected,
            "counts": counts,
            "num_nodes": graph.num_nodes,
        }
    return {
        "format": TYPED_FORMAT,
        "kind": "typed",
        "name": name,
        "relation": list(rel),
        "reverse": None if rev is None else list(rev),
        "counts": counts,
        "num_nodes": list(graph.schema.num_nodes),  # type: ignore[union-attr]
    }


def _is_current(meta: dict[str, object], typed: bool) -> bool:
    """Whether ``meta`` is of a split this fleetgnn reads (of a relation when ``typed``)."""
    if typed:
        return meta.get("format") == TYPED_FORMAT and meta.get("kind") == "typed"
    return meta.get("format") == FORMAT and "kind" not in meta


def load_edge_split(
    graph: Graph | HeteroGraph, path: str | Path, *, mmap: bool = True
) -> EdgeSplit:
    """Read a split :func:`write_edge_split` wrote for ``graph``.

    Args:
        graph: The dataset the split belongs to (its node data goes with the train graph).
        path: The split's directory.
        mmap: Map the arrays copy-on-write (pages stay the file's; default), else read them.

    Raises:
        DatasetError: A missing or unreadable file, another format, or a split of another
            dataset.
    """
    root = Path(path)
    typed = isinstance(graph, HeteroGraph)
    try:
        meta = json.loads((root / "meta.json").read_text())
        if not _is_current(meta, typed):
            kind = f"a typed split of format {TYPED_FORMAT}" if typed else f"format {FORMAT}"
            raise DatasetError(
                f"the edge split '{root}' has format {meta.get('format')!r} (kind "
                f"{meta.get('kind', 'homogeneous')!r}); this fleetgnn reads {kind} for "
                f"'{graph.name}'; delete it to draw it again"
            )
        rel = tuple(meta["relation"]) if typed else None
        rev = tuple(meta["reverse"]) if typed and meta["reverse"] is not None else None
        names = [f"{s}_pos" for s in SPLITS] + ["train_indptr", "train_indices"]
        names += [f"{s}_{k}" for s in SPLITS[1:] for k in ("neg", "neg_dst")]
        names += ["rev_indptr", "rev_indices"] if rev is not None else []
        mode = "c" if mmap else None
        arrays = {a: np.load(root / f"{a}.npy", mmap_mode=mode, allow_pickle=False) for a in names}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DatasetError(
            f"cannot read the edge split '{root}' ({e}); delete it to draw it again"
        ) from e
    if typed:
        train = _typed_train_graph(graph, meta, arrays, rel, rev, root)  # type: ignore[arg-type]
    else:
        train = _train_graph(graph, meta, arrays, root)  # type: ignore[arg-type]
    return EdgeSplit(
        str(meta["name"]),
        bool(meta.get("undirected", False)),
        {s: arrays[f"{s}_pos"] for s in SPLITS},
        {s: arrays[f"{s}_neg"] for s in SPLITS[1:]},
        {s: arrays[f"{s}_neg_dst"] for s in SPLITS[1:]},
        train,
        rel,  # type: ignore[arg-type]
        rev,  # type: ignore[arg-type]
    )


def _train_graph(graph: Graph, meta: dict, arrays: dict[str, np.ndarray], root: Path) -> Graph:
    n = graph.num_nodes
    if meta.get("num_nodes") != n or arrays["train_indptr"].shape != (n + 1,):
        raise DatasetError(
            f"edge split '{root}' was drawn for {meta.get('num_nodes')} nodes, the dataset has "
            f"{n}; it belongs to another dataset: delete it to draw it again"
        )
    return Graph(
        indptr=arrays["train_indptr"],
        indices=arrays["train_indices"],
        num_classes=graph.num_classes,
        name=graph.name,
        validate="structure",
        **graph.node_data(),  # type: ignore[arg-type]
    )


def _typed_train_graph(
    graph: HeteroGraph,
    meta: dict,
    arrays: dict[str, np.ndarray],
    rel: Relation,
    rev: Relation | None,
    root: Path,
) -> HeteroGraph:
    if meta.get("num_nodes") != list(graph.schema.num_nodes) or rel not in graph.schema.relations:
        raise DatasetError(
            f"edge split '{root}' was drawn for another graph than '{graph.name}'; delete it to "
            f"draw it again"
        )
    csc = dict(graph.csc)
    csc[rel] = (arrays["train_indptr"], arrays["train_indices"])
    if rev is not None:
        csc[rev] = (arrays["rev_indptr"], arrays["rev_indices"])
    # the training graph drops edge times (their relation lost edges): typed link prediction
    # trains untimed (train.temporal=off; with times it is refused, fleetgnn.train.setup)
    return dataclasses.replace(graph, csc=csc, edge_time={}, validate="structure")


def split_edges(
    graph: Graph | HeteroGraph,
    val: float = 0.05,
    test: float = 0.1,
    seed: int = 0,
    *,
    relation: object = None,
    chunk: int | None = None,
) -> EdgeSplit:
    """Split ``graph``'s edges in memory (written to a temporary directory and read back).

    Same split as :func:`write_edge_split` (see it for the arguments and errors).
    """
    with tempfile.TemporaryDirectory(prefix=".edge-split-") as tmp:
        where = write_edge_split(
            graph, Path(tmp) / "split", val, test, seed, relation=relation, chunk=chunk
        )
        return load_edge_split(graph, where, mmap=False)


def save_edge_split(split: EdgeSplit, dataset_dir: str | Path) -> Path:
    """Copy ``split`` (in memory or mapped) to ``DATASET/edge_splits/<name>/``."""
    out = Path(dataset_dir) / "edge_splits" / split.name
    out.mkdir(parents=True, exist_ok=True)
    g = split.train_graph
    arrays = {f"{s}_pos": split.pos[s] for s in SPLITS}
    arrays |= {f"{s}_neg": split.neg[s] for s in SPLITS[1:]}
    arrays |= {f"{s}_neg_dst": split.neg_dst[s] for s in SPLITS[1:]}
    if split.relation is None:
        arrays |= {"train_indptr": g.indptr, "train_indices": g.indices}  # type: ignore[union-attr]
    else:
        csc = g.csc  # type: ignore[union-attr]
        arrays |= dict(zip(("train_indptr", "train_indices"), csc[split.relation], strict=True))
        if split.reverse is not None:
            arrays |= dict(zip(("rev_indptr", "rev_indices"), csc[split.reverse], strict=True))
    for name, arr in arrays.items():
        np.save(out / f"{name}.npy", arr)
    counts = {s: int(split.pos[s].shape[1]) for s in SPLITS}
    meta = _meta(split.name, split.undirected, counts, g, split.relation, split.reverse)
    write_json_atomic(out / "meta.json", meta)  # last: a split without meta.json is incomplete
    return out


def edge_split_for(
    graph: Graph | HeteroGraph,
    dataset_dir: str | Path | None,
    val: float = 0.05,
    test: float = 0.1,
    seed: int = 0,
    *,
    relation: object = None,
    chunk: int | None = None,
) -> EdgeSplit:
    """The split of ``(relation, val, test, seed)``: the one saved with the dataset, else drawn.

    A split is written under ``dataset_dir`` (when given and writable) and read back mapped; one
    of an older format there is drawn again. Otherwise it is drawn in memory. A homogeneous graph
    with ``edge_time`` is refused (:func:`refuse_timed`); a typed graph needs ``relation``.
    """
    check_fractions(val, test)
    rel = _target(graph, relation)
    if dataset_dir is not None:
        path = Path(dataset_dir) / "edge_splits" / split_name(val, test, seed, rel)
        with contextlib.suppress(OSError, ValueError):
            if _is_current(json.loads((path / "meta.json").read_text()), rel is not None):
                return load_edge_split(graph, path)
        try:
            where = write_edge_split(graph, path, val, test, seed, relation=rel, chunk=chunk)
            return load_edge_split(graph, where)
        except PermissionError:
            pass  # a read-only dataset: the split is drawn in memory, identically
    return split_edges(graph, val, test, seed, relation=rel, chunk=chunk)
