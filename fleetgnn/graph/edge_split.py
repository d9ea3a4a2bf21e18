"""Edge splits for link prediction: train/val/test edges without leakage, stored with the dataset.

:func:`split_edges` draws a split from fractions and a seed. On an undirected graph (every edge
has its reverse) an edge and its reverse are one pair and go to the same split. The
message-passing graph (:attr:`EdgeSplit.train_graph`) holds only the training edges (both
directions of each training pair on an undirected graph): validation and test edges never reach
any aggregation. Evaluation negatives are fixed once per split, with the split:

- the GAE protocol (Kipf & Welling 2016; AUC/AP): as many random node pairs that are not edges of
  the whole graph (either direction, no self loops) as positives, ``{split}_neg`` ``[2, P]``;
- the OGB protocol (MRR, Hits@K): a fixed set of ``K`` random destinations per positive's
  source, ``{split}_neg_dst`` ``[P, K]``.

:func:`save_edge_split` writes it as ``DATASET/edge_splits/<name>/`` (``meta.json`` plus one
``.npy`` per array, the dataset's own layout); :func:`edge_split_for` loads the saved one for
``(fractions, seed)`` or draws and saves it. Memory: the edge list as int64 pairs, in memory
(a streaming split for graphs larger than memory is not implemented).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from fleetgnn.errors import ConfigError, DatasetError
from fleetgnn.graph.csc import Graph
from fleetgnn.graph.dataset import write_json_atomic

SPLITS: tuple[str, ...] = ("train", "val", "test")
FORMAT = 1
#: OGB-protocol negatives per positive's source (ogbl-citation2 uses 1000; small graphs fewer).
OGB_NEGATIVES = 100


@dataclasses.dataclass(frozen=True)
class EdgeSplit:
    """A dataset's edges split for link prediction.

    Attributes:
        name: The split's directory name under ``edge_splits/``.
        undirected: Whether pairs were split with their reverses.
        pos: Split -> positive pairs int64 ``[2, P]`` (``(src, dst)``; one per undirected pair).
        neg: ``"val"``/``"test"`` -> GAE-protocol negative pairs ``[2, P]``.
        neg_dst: ``"val"``/``"test"`` -> OGB-protocol negative destinations ``[P, K]`` of
            each positive's source.
        train_graph: The message-passing graph: the training edges only (both directions of a
            pair when ``undirected``), with the dataset's node data.
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


def _pairs(graph: Graph) -> tuple[np.ndarray, np.ndarray, bool]:
    """Distinct non-loop edges as ``(src, dst)`` and whether the graph is undirected.

    Undirected: every edge has its reverse; the pairs are then those with ``src < dst``.
    """
    src, dst = (a.astype(np.int64) for a in graph.edges())
    keep = src != dst
    src, dst = src[keep], dst[keep]
    n = graph.num_nodes
    key = np.unique(src * n + dst)
    src, dst = key // n, key % n
    undirected = bool(np.array_equal(np.sort(dst * n + src), key))
    if undirected:
        lower = src < dst
        src, dst = src[lower], dst[lower]
    return src, dst, undirected


def split_edges(graph: Graph, val: float = 0.05, test: float = 0.1, seed: int = 0) -> EdgeSplit:
    """Split ``graph``'s edges into train/val/test pairs and draw the evaluation negatives.

    Self loops and duplicate edges are dropped. Every split draws from one
    ``numpy.random.default_rng(seed)``, so the same graph, fractions and seed give the same
    split everywhere.

    Args:
        graph: The dataset.
        val: Fraction of pairs for validation.
        test: Fraction of pairs for testing.
        seed: Seed of the split and its negatives.

    Raises:
        ConfigError: Fractions outside (0, 1) or summing to 1 or more.
        DatasetError: Too few edges for a non-empty split each.
    """
    _check_fractions(val, test)
    src, dst, undirected = _pairs(graph)
    m = src.size
    n_val, n_test = int(np.floor(val * m)), int(np.floor(test * m))
    if n_val < 1 or n_test < 1 or m - n_val - n_test < 1:
        raise DatasetError(
            f"dataset '{graph.name}' has {m} edge pairs; val={val:g} and test={test:g} leave a "
            f"split empty; raise the fractions or use a larger graph"
        )
    rng = np.random.default_rng(int(seed))
    perm = rng.permutation(m)
    parts = {
        "val": perm[:n_val],
        "test": perm[n_val : n_val + n_test],
        "train": perm[n_val + n_test :],
    }
    pos = {s: np.stack([src[np.sort(p)], dst[np.sort(p)]]) for s, p in parts.items()}
    n = graph.num_nodes
    edge_keys = np.concatenate([src * n + dst, dst * n + src])  # either direction is an edge
    edge_keys.sort()
    neg = {s: _non_edges(rng, pos[s].shape[1], n, edge_keys, undirected) for s in ("val", "test")}
    k = min(OGB_NEGATIVES, max(n - 1, 1))
    neg_dst = {s: rng.integers(0, n, size=(pos[s].shape[1], k)) for s in ("val", "test")}
    t_src, t_dst = pos["train"]
    if undirected:
        t_src, t_dst = np.concatenate([t_src, t_dst]), np.concatenate([t_dst, t_src])
    train_graph = graph._with_edges(t_src, t_dst, None)
    return EdgeSplit(split_name(val, test, seed), undirected, pos, neg, neg_dst, train_graph)


def _non_edges(
    rng: np.random.Generator, count: int, n: int, edge_keys: np.ndarray, undirected: bool
) -> np.ndarray:
    """``count`` distinct random pairs that are no edge (either direction) and no self loop."""
    found = np.empty(0, dtype=np.int64)
    for _ in range(100):
        need = count - found.size
        if need <= 0:
            break
        a = rng.integers(0, n, size=2 * need + 16)
        b = rng.integers(0, n, size=2 * need + 16)
        if undirected:
            a, b = np.minimum(a, b), np.maximum(a, b)
        key = a * n + b
        pos = np.searchsorted(edge_keys, key).clip(max=max(edge_keys.size - 1, 0))
        ok = (a != b) & ~(edge_keys[pos] == key if edge_keys.size else np.zeros_like(a, bool))
        _, first = np.unique(key[ok], return_index=True)
        new = np.setdiff1d(key[ok][np.sort(first)], found, assume_unique=True)
        found = np.concatenate([found, new[:need]])
    if found.size < count:
        raise DatasetError(
            f"found only {found.size} of {count} node pairs that are not edges; the graph is "
            f"too dense for the GAE protocol's negatives"
        )
    return np.stack([found // n, found % n])


_ARRAYS = ([f"{s}_pos" for s in SPLITS] + [f"{s}_neg" for s in ("val", "test")]) + [
    f"{s}_neg_dst" for s in ("val", "test")
]


def save_edge_split(split: EdgeSplit, dataset_dir: str | Path) -> Path:
    """Write ``split`` to ``DATASET/edge_splits/<name>/`` (the train graph is rebuilt on load)."""
    out = Path(dataset_dir) / "edge_splits" / split.name
    out.mkdir(parents=True, exist_ok=True)
    for s in SPLITS:
        np.save(out / f"{s}_pos.npy", split.pos[s])
    for s in ("val", "test"):
        np.save(out / f"{s}_neg.npy", split.neg[s])
        np.save(out / f"{s}_neg_dst.npy", split.neg_dst[s])
    meta = {"format": FORMAT, "name": split.name, "undirected": split.undirected}
    meta["counts"] = {s: int(split.pos[s].shape[1]) for s in SPLITS}
    write_json_atomic(out / "meta.json", meta)  # last: a split without meta.json is incomplete
    return out


def load_edge_split(graph: Graph, path: str | Path) -> EdgeSplit:
    """Read a split :func:`save_edge_split` wrote for ``graph``.

    Raises:
        DatasetError: A missing or unreadable file, or pairs outside the graph's nodes.
    """
    root = Path(path)
    try:
        meta = json.loads((root / "meta.json").read_text())
        arrays = {a: np.load(root / f"{a}.npy", allow_pickle=False) for a in _ARRAYS}
    except (OSError, ValueError) as e:
        raise DatasetError(
            f"cannot read the edge split '{root}' ({e}); delete it to draw it again"
        ) from e
    n = graph.num_nodes
    for a, arr in arrays.items():
        if arr.size and (arr.min() < 0 or arr.max() >= n):
            raise DatasetError(
                f"edge split '{root}': '{a}' holds node IDs outside [0, {n}); it belongs to "
                f"another dataset: delete it to draw it again"
            )
    pos = {s: arrays[f"{s}_pos"].astype(np.int64) for s in SPLITS}
    undirected = bool(meta["undirected"])
    t_src, t_dst = pos["train"]
    if undirected:
        t_src, t_dst = np.concatenate([t_src, t_dst]), np.concatenate([t_dst, t_src])
    return EdgeSplit(
        str(meta["name"]),
        undirected,
        pos,
        {s: arrays[f"{s}_neg"].astype(np.int64) for s in ("val", "test")},
        {s: arrays[f"{s}_neg_dst"].astype(np.int64) for s in ("val", "test")},
        graph._with_edges(t_src, t_dst, None),
    )


def edge_split_for(
    graph: Graph,
    dataset_dir: str | Path | None,
    val: float = 0.05,
    test: float = 0.1,
    seed: int = 0,
) -> EdgeSplit:
    """The split of ``(val, test, seed)``: the one saved with the dataset, else a drawn one.

    A drawn split is saved under ``dataset_dir`` when it is given and writable.
    """
    _check_fractions(val, test)
    if dataset_dir is not None:
        path = Path(dataset_dir) / "edge_splits" / split_name(val, test, seed)
        if (path / "meta.json").exists():
            return load_edge_split(graph, path)
    split = split_edges(graph, val, test, seed)
    if dataset_dir is not None:
        try:
            save_edge_split(split, dataset_dir)
        except OSError:
            pass  # a read-only dataset: the split is drawn again next time, identically
    return split
