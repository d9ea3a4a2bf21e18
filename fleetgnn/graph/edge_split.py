"""Edge splits for link prediction: train/val/test edges without leakage, stored with the dataset.

:func:`write_edge_split` streams over the dataset's CSC (memory-mapped or not) in bounded chunks
of destinations and writes ``DATASET/edge_splits/<name>/``; :func:`edge_split_for` loads the
saved split of ``(fractions, seed)`` (memory-mapped) or writes it first; :func:`split_edges`
draws one in memory (written to a temporary directory and read back).

The split. Self loops and duplicate edges are dropped. The graph is undirected when every edge
has its reverse; a pair ``{u, v}`` is then split once, with both of its edges. Every pair (an
unordered pair ``(min, max)`` on an undirected graph, an edge ``(src, dst)`` on a directed one)
gets a 64-bit draw of the keyed hash, ``h = mix(mix(K ^ a) ^ b)`` with ``K`` keyed by the seed
(:mod:`fleetgnn.keyhash`), and the pairs are ranked by ``(h, a * N + b)``: the first
``floor(val * M)`` validate, the next ``floor(test * M)`` test, the rest train. A pair's split
therefore depends only on the pair, the seed and the counts, never on the chunking or the order of
the edges; an edge and its reverse share their unordered key and land together. The two
thresholds are found by a radix selection (a 65,536-bin histogram of the draws' top 16 bits, then
the draws of the two boundary bins, ``~2M / 65536`` of them).

Files (one ``.npy`` per array, written through bounded writes, plus ``meta.json`` last):

- ``{train,val,test}_pos`` int64 ``[2, P]``: the pairs ``(src, dst)`` (``src < dst`` when
  undirected), in CSC order (by destination, then source);
- ``train_indptr`` int64 ``[N + 1]`` and ``train_indices`` ``[E']``: the message-passing graph,
  the input CSC with the validation and test edges (both directions), loops and duplicates
  filtered out, each destination's sources sorted: held-out edges never reach any aggregation;
- ``{val,test}_neg`` int64 ``[2, P]``: the GAE protocol's negatives (Kipf & Welling 2016;
  AUC/AP): as many node pairs that are no edge of the whole graph (either direction) and no self
  loop as positives, distinct, and disjoint between validation and test. Candidate ``j = 0, 1,
  ...`` is a keyed bijection (a 4-round Feistel network) of ``j`` over ``[0, 2^k)^2``
  (``2^k >= N``), so candidates never repeat; a candidate out of range, a loop, (undirected) one
  with ``a > b``, or an edge (a binary search in the sorted CSC segment, both directions) is
  skipped; validation takes the first accepted ones, test the next;
- ``{val,test}_neg_dst`` ``[P, K]`` (the index dtype): the OGB protocol's negatives (MRR,
  Hits@K), ``K`` destinations per positive keyed by the pair ``(src, dst)``.

Undirectedness is decided in the first pass from sums: the multiset of unordered keys of the
edges with ``src < dst`` must equal that of the edges with ``src > dst`` (same count, same sum of
the 64-bit draws mod ``2^64``; a non-symmetric graph passes with probability ~``2^-64``).

Memory: ``O(chunk)`` (a few int64 work arrays of ``chunk`` edges or nodes) plus the 512 KiB
histogram; nothing of size ``N`` or ``E`` is held. A CSC whose segments are not sorted is first
copied, sorted per segment, to a scratch file in the split's directory (removed at the end).
Passes: one to check sortedness, one to count and histogram, one to collect the boundary bins, one
to write.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from fleetgnn.errors import ConfigError, DatasetError
from fleetgnn.graph.csc import Graph, index_dtype
from fleetgnn.graph.dataset import replace_dir, write_json_atomic
from fleetgnn.graph.files import create_npy, temp_prefix
from fleetgnn.keyhash import base_key, bounded_draws_numpy, mix64_numpy

SPLITS: tuple[str, ...] = ("train", "val", "test")
FORMAT = 2
#: OGB-protocol negatives per positive's source (ogbl-citation2 uses 1000; small graphs fewer).
OGB_NEGATIVES = 100
#: Edges (and at most as many destinations) per streamed chunk.
CHUNK_EDGES = 1 << 20
_BITS = 16  # histogram bins of the selection: the draws' top 16 bits
_SALT_SPLIT = 0x73706C6974  # "split"
_SALT_GAE = 0x676165  # "gae"
_SALT_OGB = 0x6F6762  # "ogb"
_FEISTEL_ROUNDS = 4
_FIX = "free some space there, or move the dataset to a larger disk"


@dataclasses.dataclass(frozen=True)
class EdgeSplit:
    """A dataset's edges split for link prediction.

    Attributes:
        name: The split's directory name under ``edge_splits/``.
        undirected: Whether pairs were split with their reverses.
        pos: Split -> positive pairs int64 ``[2, P]`` (``(src, dst)``; one per undirected pair).
        neg: ``"val"``/``"test"`` -> GAE-protocol negative pairs int64 ``[2, P]``.
        neg_dst: ``"val"``/``"test"`` -> OGB-protocol negative destinations ``[P, K]`` (the
            index dtype) of each positive's source.
        train_graph: The message-passing graph: the training edges only (both directions of a
            pair when ``undirected``), with the dataset's node data.

    The arrays are memory maps when the split was loaded from a dataset.
    """

    name: str
    undirected: bool
    pos: dict[str, np.ndarray]
    neg: dict[str, np.ndarray]
    neg_dst: dict[str, np.ndarray]
    train_graph: Graph

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={self.pos[s].shape[1]}" for s in SPLITS)
        return f"EdgeSplit({self.name!r}, undirected={self.undirected}, {sizes})"


def split_name(val: float, test: float, seed: int) -> str:
    """The directory name of the split with these fractions and seed."""
    return f"val{val:g}-test{test:g}-seed{int(seed)}"


def _check_fractions(val: float, test: float) -> None:
    ok = 0.0 < val < 1.0 and 0.0 < test < 1.0 and val + test < 1.0
    if not ok:
        raise ConfigError(
            f"edge split fractions val={val!r}, test={test!r} must each lie in (0, 1) and sum "
            f"to less than 1 (the rest trains), e.g. val=0.05, test=0.1"
        )


def _check_chunk(chunk: int | None) -> int:
    chunk = CHUNK_EDGES if chunk is None else chunk
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ConfigError(f"edge split 'chunk' must be an integer >= 1 (got {chunk!r})")
    return chunk


# ------------------------------------------------------------------------------- streaming
def _ranges(indptr: np.ndarray, chunk: int) -> Iterator[tuple[int, int]]:
    """Destination ranges ``[a, b)``: at most ``chunk`` nodes and edges each (or one node)."""
    n = indptr.shape[0] - 1
    a = 0
    while a < n:
        end = int(np.searchsorted(indptr, int(indptr[a]) + chunk, side="right")) - 1
        b = max(a + 1, min(a + chunk, end, n))
        yield a, b
        a = b


def _chunk_edges(
    indptr: np.ndarray, indices: np.ndarray, a: int, b: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Destinations ``[a, b)``: ``(src, dst, keep, ptr)``; ``keep`` drops loops and duplicates.

    ``ptr``: the range's int64 offsets (``[b - a + 1]``, from ``indptr[a]``).
    """
    ptr = np.asarray(indptr[a : b + 1], dtype=np.int64)
    src = np.asarray(indices[ptr[0] : ptr[-1]], dtype=np.int64)
    dst = np.repeat(np.arange(a, b, dtype=np.int64), np.diff(ptr))
    keep = src != dst
    if src.size > 1:  # sorted segments: a duplicate follows its twin
        keep[1:] &= (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    return src, dst, keep, ptr


def _draws(key: np.uint64, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The pair draws ``mix(mix(K ^ a) ^ b)`` (uint64)."""
    return mix64_numpy(mix64_numpy(a.astype(np.uint64) ^ key) ^ b.astype(np.uint64))


def _segments_sorted(graph: Graph, chunk: int) -> bool:
    for a, b in _ranges(graph.indptr, chunk):
        ptr = np.asarray(graph.indptr[a : b + 1], dtype=np.int64)
        src = np.asarray(graph.indices[ptr[0] : ptr[-1]])
        if src.size < 2:
            continue
        down = src[1:] < src[:-1]
        down[(ptr[1:-1] - ptr[0] - 1)[(ptr[1:-1] > ptr[0]) & (ptr[1:-1] < ptr[-1])]] = False
        if down.any():
            return False
    return True


def _sorted_copy(graph: Graph, path: Path, chunk: int) -> np.ndarray:
    """``graph.indices`` with each segment sorted, as a memory map at ``path``."""
    out = create_npy(path, graph.indices.dtype, (graph.num_edges,), _FIX)
    for a, b in _ranges(graph.indptr, chunk):
        ptr = np.asarray(graph.indptr[a : b + 1], dtype=np.int64)
        src = np.asarray(graph.indices[ptr[0] : ptr[-1]])
        seg = np.repeat(np.arange(b - a), np.diff(ptr))
        out[ptr[0] : ptr[-1]] = src[np.lexsort((src, seg))]
    out.flush()
    return out


def _has_edge(
    indptr: np.ndarray, indices: np.ndarray, src: np.ndarray, dst: np.ndarray
) -> np.ndarray:
    """Whether ``src[i] -> dst[i]`` is an edge: a binary search in each sorted segment."""
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


def _scan(indptr: np.ndarray, indices: np.ndarray, key: np.uint64, chunk: int) -> _Scan:
    s = _Scan()
    shift = np.uint64(64 - _BITS)
    for a, b in _ranges(indptr, chunk):
        src, dst, keep, _ = _chunk_edges(indptr, indices, a, b)
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
    indptr: np.ndarray,
    indices: np.ndarray,
    key: np.uint64,
    chunk: int,
    hist: np.ndarray,
    ranks: tuple[int, int],
    undirected: bool,
) -> list[tuple[int, int]]:
    """The ``(draw, a * N + b)`` of the pairs of rank ``ranks`` (0-based) in the draws' order."""
    n = indptr.shape[0] - 1
    cum = np.cumsum(hist)
    bins = [int(np.searchsorted(cum, r, side="right")) for r in ranks]
    shift = np.uint64(64 - _BITS)
    found: dict[int, list[np.ndarray]] = {b: [] for b in bins}
    for a, b in _ranges(indptr, chunk):
        src, dst, keep, _ = _chunk_edges(indptr, indices, a, b)
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
    indptr: np.ndarray,
    indices: np.ndarray,
    key: np.uint64,
    chunk: int,
    cuts: list[tuple[int, int]],
    counts: dict[str, int],
    undirected: bool,
    out: Path,
) -> None:
    """Pass 3: the positives and the training CSC, chunk by chunk."""
    n = indptr.shape[0] - 1
    pos = {s: _Rows(out / f"{s}_pos.npy", np.dtype(np.int64), (2, counts[s])) for s in SPLITS}
    e_train = counts["train"] * (2 if undirected else 1)
    t_ptr = create_npy(out / "train_indptr.npy", np.int64, (n + 1,), _FIX)
    t_idx = _Rows(out / "train_indices.npy", index_dtype(n), (e_train,))
    t_ptr[0] = 0
    for a, b in _ranges(indptr, chunk):
        src, dst, keep, _ = _chunk_edges(indptr, indices, a, b)
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


def _feistel(key: np.ndarray, j: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """A keyed bijection of ``j`` over ``[0, 4^k)``, as two ``k``-bit halves."""
    mask = np.uint64((1 << k) - 1)
    left, right = (j >> np.uint64(k)) & mask, j & mask
    for r in range(_FEISTEL_ROUNDS):
        left, right = right, left ^ (mix64_numpy(right ^ key[r]) & mask)
    return left.astype(np.int64), right.astype(np.int64)


def _gae_negatives(
    indptr: np.ndarray,
    indices: np.ndarray,
    seed: int,
    counts: dict[str, int],
    undirected: bool,
    chunk: int,
    out: Path,
) -> None:
    """The GAE protocol's negatives of val then test (see the module docstring)."""
    n = indptr.shape[0] - 1
    k = max(1, math.ceil(math.log2(max(n, 2))))
    keys = np.array([base_key(_SALT_GAE, seed, r) for r in range(_FEISTEL_ROUNDS)], np.uint64)
    total = 1 << (2 * k)
    j = 0
    for s in ("val", "test"):
        rows = _Rows(out / f"{s}_neg.npy", np.dtype(np.int64), (2, counts[s]))
        while rows.at < counts[s]:
            if j >= total:
                raise DatasetError(
                    f"found only {rows.at} of {counts[s]} node pairs that are not edges; the "
                    f"graph is too dense for the GAE protocol's negatives"
                )
            cand = np.arange(j, min(total, j + chunk), dtype=np.uint64)
            j += cand.size
            a, b = _feistel(keys, cand, k)
            ok = (a < n) & (b < n) & (a != b)
            if undirected:
                ok &= a < b
            at = np.flatnonzero(ok)
            a, b = a[at], b[at]
            edge = _has_edge(indptr, indices, a, b) | _has_edge(indptr, indices, b, a)
            at, a, b = at[~edge], a[~edge], b[~edge]
            take = min(a.size, counts[s] - rows.at)
            rows.add(a[:take], b[:take])
            if take < a.size:  # the next split resumes right after the last one taken
                j -= cand.size - int(at[take - 1]) - 1
        rows.close()


def _ogb_negatives(
    num_nodes: int, seed: int, counts: dict[str, int], chunk: int, out: Path
) -> None:
    k = min(OGB_NEGATIVES, max(num_nodes - 1, 1))
    per = max(1, chunk // k)
    dt = index_dtype(num_nodes)
    for i, s in enumerate(("val", "test")):
        key = np.uint64(base_key(_SALT_OGB, seed, i))
        pos = np.load(out / f"{s}_pos.npy", mmap_mode="r")
        rows = _Rows(out / f"{s}_neg_dst.npy", dt, (counts[s], k))
        for lo in range(0, counts[s], per):
            hi = min(counts[s], lo + per)
            keyed = _draws(key, np.asarray(pos[0, lo:hi]), np.asarray(pos[1, lo:hi]))
            rows.add(bounded_draws_numpy(keyed, np.full((hi - lo, k), num_nodes)).astype(dt))
        rows.close()
        del pos


# ------------------------------------------------------------------------------- the split
def write_edge_split(
    graph: Graph,
    out: str | Path,
    val: float = 0.05,
    test: float = 0.1,
    seed: int = 0,
    *,
    chunk: int | None = None,
) -> Path:
    """Split ``graph``'s edges, streaming, and write the split to the directory ``out``.

    ``out`` is written through a private temporary sibling and replaced whole at the end (a
    directory without ``meta.json`` is incomplete). Memory and passes: see the module docstring.

    Args:
        graph: The dataset (its arrays may be memory maps larger than memory).
        out: The split's directory (``DATASET/edge_splits/<name>`` for :func:`edge_split_for`).
        val: Fraction of pairs for validation.
        test: Fraction of pairs for testing.
        seed: Seed of the split and its negatives.
        chunk: Edges (and destinations) per streamed step (default :data:`CHUNK_EDGES`); the
            result does not depend on it.

    Raises:
        ConfigError: Fractions outside (0, 1) or summing to 1 or more, or a bad ``chunk``.
        DatasetError: Too few edges for a non-empty split each, too dense for the negatives, or
            a graph with ``edge_time`` (see :func:`refuse_timed`).
    """
    _check_fractions(val, test)
    chunk = _check_chunk(chunk)
    refuse_timed(graph)
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(target.name), dir=target.parent))
    try:
        _write(graph, tmp, val, test, int(seed), chunk)
        replace_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


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


def _write(graph: Graph, out: Path, val: float, test: float, seed: int, chunk: int) -> None:
    indptr, indices = graph.indptr, graph.indices
    scratch = out / "sorted_indices.npy"
    if not _segments_sorted(graph, chunk):
        indices = _sorted_copy(graph, scratch, chunk)
    key = np.uint64(base_key(_SALT_SPLIT, seed))
    scan = _scan(indptr, indices, key, chunk)
    undirected = scan.lower == scan.upper and scan.sum_lower == scan.sum_upper
    hist = scan.hist_undirected if undirected else scan.hist_directed
    m = int(hist.sum())
    n_val, n_test = int(np.floor(val * m)), int(np.floor(test * m))
    if n_val < 1 or n_test < 1 or m - n_val - n_test < 1:
        raise DatasetError(
            f"dataset '{graph.name}' has {m} edge pairs; val={val:g} and test={test:g} leave a "
            f"split empty; raise the fractions or use a larger graph"
        )
    counts = {"train": m - n_val - n_test, "val": n_val, "test": n_test}
    cuts = _thresholds(indptr, indices, key, chunk, hist, (n_val, n_val + n_test), undirected)
    _write_split(indptr, indices, key, chunk, cuts, counts, undirected, out)
    _gae_negatives(indptr, indices, seed, counts, undirected, chunk, out)
    _ogb_negatives(graph.num_nodes, seed, counts, chunk, out)
    if scratch.exists():
        del indices
        scratch.unlink()
    meta = {
        "format": FORMAT,
        "name": split_name(val, test, seed),
        "undirected": undirected,
        "counts": counts,
        "num_nodes": graph.num_nodes,
    }
    write_json_atomic(out / "meta.json", meta)  # last: a split without meta.json is incomplete


_ARRAYS = (
    [f"{s}_pos" for s in SPLITS]
    + [f"{s}_neg" for s in ("val", "test")]
    + [f"{s}_neg_dst" for s in ("val", "test")]
    + ["train_indptr", "train_indices"]
)


def load_edge_split(graph: Graph, path: str | Path, *, mmap: bool = True) -> EdgeSplit:
    """Read a split :func:`write_edge_split` wrote for ``graph``.

    Args:
        graph: The dataset the split belongs to (its node data goes with the train graph).
        path: The split's directory.
        mmap: Map the arrays copy-on-write (pages stay the file's; default), else read them.

    Raises:
        DatasetError: A missing or unreadable file, an older format, or a split of another
            dataset.
    """
    root = Path(path)
    try:
        meta = json.loads((root / "meta.json").read_text())
        if meta.get("format") != FORMAT:
            raise DatasetError(
                f"the edge split '{root}' has format {meta.get('format')!r}, this fleetgnn "
                f"reads format {FORMAT}; delete it to draw it again"
            )
        mode = "c" if mmap else None
        arrays = {
            a: np.load(root / f"{a}.npy", mmap_mode=mode, allow_pickle=False) for a in _ARRAYS
        }
    except (OSError, ValueError, KeyError) as e:
        raise DatasetError(
            f"cannot read the edge split '{root}' ({e}); delete it to draw it again"
        ) from e
    n = graph.num_nodes
    if meta.get("num_nodes") != n or arrays["train_indptr"].shape != (n + 1,):
        raise DatasetError(
            f"edge split '{root}' was drawn for {meta.get('num_nodes')} nodes, the dataset has "
            f"{n}; it belongs to another dataset: delete it to draw it again"
        )
    train_graph = Graph(
        indptr=arrays["train_indptr"],
        indices=arrays["train_indices"],
        num_classes=graph.num_classes,
        name=graph.name,
        validate="structure",
        **graph.node_data(),  # type: ignore[arg-type]
    )
    return EdgeSplit(
        str(meta["name"]),
        bool(meta["undirected"]),
        {s: arrays[f"{s}_pos"] for s in SPLITS},
        {s: arrays[f"{s}_neg"] for s in ("val", "test")},
        {s: arrays[f"{s}_neg_dst"] for s in ("val", "test")},
        train_graph,
    )


def split_edges(
    graph: Graph,
    val: float = 0.05,
    test: float = 0.1,
    seed: int = 0,
    *,
    chunk: int | None = None,
) -> EdgeSplit:
    """Split ``graph``'s edges in memory (written to a temporary directory and read back).

    Same split as :func:`write_edge_split` (see it for the arguments and errors).
    """
    with tempfile.TemporaryDirectory(prefix=".edge-split-") as tmp:
        where = write_edge_split(graph, Path(tmp) / "split", val, test, seed, chunk=chunk)
        return load_edge_split(graph, where, mmap=False)


def save_edge_split(split: EdgeSplit, dataset_dir: str | Path) -> Path:
    """Copy ``split`` (in memory or mapped) to ``DATASET/edge_splits/<name>/``."""
    out = Path(dataset_dir) / "edge_splits" / split.name
    out.mkdir(parents=True, exist_ok=True)
    arrays = {f"{s}_pos": split.pos[s] for s in SPLITS}
    arrays |= {f"{s}_neg": split.neg[s] for s in ("val", "test")}
    arrays |= {f"{s}_neg_dst": split.neg_dst[s] for s in ("val", "test")}
    arrays |= {"train_indptr": split.train_graph.indptr, "train_indices": split.train_graph.indices}
    for name, arr in arrays.items():
        np.save(out / f"{name}.npy", arr)
    meta = {
        "format": FORMAT,
        "name": split.name,
        "undirected": split.undirected,
        "counts": {s: int(split.pos[s].shape[1]) for s in SPLITS},
        "num_nodes": split.train_graph.num_nodes,
    }
    write_json_atomic(out / "meta.json", meta)  # last: a split without meta.json is incomplete
    return out


def edge_split_for(
    graph: Graph,
    dataset_dir: str | Path | None,
    val: float = 0.05,
    test: float = 0.1,
    seed: int = 0,
    *,
    chunk: int | None = None,
) -> EdgeSplit:
    """The split of ``(val, test, seed)``: the one saved with the dataset, else a drawn one.

    A split is written under ``dataset_dir`` (when given and writable) and read back mapped; one
    of an older format there is drawn again. Otherwise it is drawn in memory. A graph with
    ``edge_time`` is refused (:func:`refuse_timed`).
    """
    _check_fractions(val, test)
    refuse_timed(graph)
    if dataset_dir is not None:
        path = Path(dataset_dir) / "edge_splits" / split_name(val, test, seed)
        with contextlib.suppress(OSError, ValueError):
            if json.loads((path / "meta.json").read_text()).get("format") == FORMAT:
                return load_edge_split(graph, path)
        try:
            return load_edge_split(
                graph, write_edge_split(graph, path, val, test, seed, chunk=chunk)
            )
        except PermissionError:
            pass  # a read-only dataset: the split is drawn in memory, identically
    return split_edges(graph, val, test, seed, chunk=chunk)
