"""Time splits for link prediction on graphs with edge times: train on the past, judge the future.

:func:`split_by_time` cuts a graph's timed edges (``edge_time``) into training, validation and
test edges by time, the protocol of temporal link prediction (PyG's ``LinkNeighborLoader`` with
``time_attr``, TGB): every training edge is older than every validation edge, and every
validation edge older than every test edge.

Events. Self loops are dropped; duplicate edges are kept (a pair that interacts at several times
is several events). The graph is undirected when its edges, as ``(min, max, time)`` triples,
are the same multiset among the edges with ``src < dst`` as among those with ``src > dst``
(both directions of every event at the event's time, as the ``temporal-like`` preset stores
them); an event is then the edge with ``src < dst`` and moves with its reverse.

Cuts. Two times ``val_from < test_from``: an event with ``time < val_from`` trains, one with
``val_from <= time < test_from`` validates, one with ``time >= test_from`` tests. Given as
fractions (the default), they are the times of the events at ranks ``M - n_val - n_test`` and
``M - n_test`` of the ``M`` events in time order (``n = floor(fraction * M)``): events sharing
a time stay in one split, so the split sizes are the fractions up to ties.

What comes out (:class:`TimeSplit`):

- ``train_graph``: the training events (both directions when undirected) with their times, the
  dataset's node data and nothing else: each destination's in-edges keep the input CSC's order,
  so they stay sorted by time (the ``edge_time`` invariant). Validation and test edges are in no
  message-passing structure.
- ``pos[s]`` int64 ``[2, P]`` and ``pos_time[s]`` int64 ``[P]``: each split's events in time
  order (then by destination and source), a training positive included.
- ``neg[s]`` int64 ``[2, P]`` (val, test): one negative pair per positive ``(src, w)`` for AUC
  and AP, and ``neg_dst[s]`` ``[P, K]``: ``K`` negative destinations per positive for MRR and
  Hits@K; both are scored **at the positive's time** (``pos_time``). The destinations are
  uniform over the nodes, keyed by ``(seed, split, src, dst, time)`` (two events of one pair at
  two times get different negatives), and not filtered against true edges, as the training
  negatives are not (:class:`~fleetgnn.tasks.NegativeSampler`).

Memory: ``O(E)`` (the sources, destinations and times of the edges, read into memory once); the
split is not saved with the dataset, it is recomputed when asked (one sort of the times).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fleetgnn.errors import ConfigError, DatasetError
from fleetgnn.graph.csc import Graph, index_dtype
from fleetgnn.graph.edge_split import SPLITS, check_fractions
from fleetgnn.keyhash import base_key, bounded_draws_numpy, mix64_numpy

#: Negative destinations per evaluation positive (MRR, Hits@K): each is a temporal subtree to
#: sample at the positive's time, so fewer than the static split's 100.
RANKING_NEGATIVES = 20
_SALT_NEG = 0x746E6567  # "tneg"
_SALT_RANK = 0x7472616E6B  # "trank"


@dataclasses.dataclass(frozen=True)
class TimeSplit:
    """A timed graph's edges split by time (see the module docstring).

    Attributes:
        name: A short name of the split (its fractions or cut times).
        undirected: Whether events were split with their reverses.
        cuts: ``(val_from, test_from)``: validation starts at ``val_from``, test at
            ``test_from``.
        pos: Split -> positive pairs int64 ``[2, P]`` in time order.
        pos_time: Split -> int64 ``[P]``: each positive's time.
        neg: ``"val"``/``"test"`` -> negative pairs int64 ``[2, P]`` (``neg[s][0] ==
            pos[s][0]``), each scored at its positive's time.
        neg_dst: ``"val"``/``"test"`` -> negative destinations ``[P, K]`` of each positive's
            source, scored at its time.
        train_graph: The message-passing graph: the training edges with their ``edge_time``.
    """

    name: str
    undirected: bool
    cuts: tuple[int, int]
    pos: dict[str, np.ndarray]
    pos_time: dict[str, np.ndarray]
    neg: dict[str, np.ndarray]
    neg_dst: dict[str, np.ndarray]
    train_graph: Graph

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={self.pos[s].shape[1]}" for s in SPLITS)
        return (
            f"TimeSplit({self.name!r}, undirected={self.undirected}, val_from={self.cuts[0]}, "
            f"test_from={self.cuts[1]}, {sizes})"
        )


def _check_cuts(cuts: object) -> tuple[int, int]:
    ok = isinstance(cuts, (tuple, list)) and len(cuts) == 2
    ok = ok and all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) for c in cuts)  # type: ignore[union-attr]
    if not ok or not int(cuts[0]) < int(cuts[1]):  # type: ignore[index]
        raise ConfigError(
            f"time split 'cuts' must be two integer times (val_from, test_from) with val_from < "
            f"test_from (got {cuts!r}); e.g. cuts=(800, 900) on times in [0, 1000)"
        )
    return int(cuts[0]), int(cuts[1])  # type: ignore[index]


def _edges(graph: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(src, dst, time)`` int64 ``[E]`` of every edge, in CSC order."""
    indptr = np.asarray(graph.indptr, dtype=np.int64)
    src = np.asarray(graph.indices, dtype=np.int64)
    dst = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), np.diff(indptr))
    return src, dst, np.asarray(graph.edge_time, dtype=np.int64)


def _is_undirected(src: np.ndarray, dst: np.ndarray, time: np.ndarray) -> bool:
    """Whether the ``(min, max, time)`` triples of both orientations are one multiset."""
    lower, upper = src < dst, src > dst
    if int(lower.sum()) != int(upper.sum()):
        return False

    def triples(m: np.ndarray) -> np.ndarray:
        a, b, t = np.minimum(src[m], dst[m]), np.maximum(src[m], dst[m]), time[m]
        order = np.lexsort((t, b, a))
        return np.stack([a[order], b[order], t[order]])

    return bool(np.array_equal(triples(lower), triples(upper)))


def _draws(key: int, src: np.ndarray, dst: np.ndarray, time: np.ndarray) -> np.ndarray:
    """uint64 ``mix(mix(mix(K ^ src) ^ dst) ^ time)`` per event."""
    h = mix64_numpy(src.astype(np.uint64) ^ np.uint64(key))
    h = mix64_numpy(h ^ dst.astype(np.uint64))
    return mix64_numpy(h ^ time.astype(np.uint64))


def split_by_time(
    graph: Graph,
    val: float = 0.05,
    test: float = 0.1,
    seed: int = 0,
    *,
    cuts: tuple[int, int] | None = None,
    ranking_negatives: int = RANKING_NEGATIVES,
) -> TimeSplit:
    """Split ``graph``'s timed edges by time (see the module docstring).

    Args:
        graph: A graph with ``edge_time``.
        val: Fraction of the events (the latest but the test's) that validate.
        test: Fraction of the events (the latest) that test.
        seed: Seed of the evaluation negatives.
        cuts: ``(val_from, test_from)`` times instead of the fractions.
        ranking_negatives: ``K``, negative destinations per evaluation positive (MRR, Hits@K).

    Raises:
        ConfigError: Bad fractions, cuts or ``ranking_negatives``.
        DatasetError: The graph has no ``edge_time``, or a split would be empty.
    """
    if graph.edge_time is None:
        raise DatasetError(
            f"graph '{graph.name}' has no edge times (edge_time) to split by; use the random "
            f"edge split (fleetgnn.graph.edge_split.split_edges, train.temporal=off)"
        )
    if cuts is None:
        check_fractions(val, test, "time split", "the earliest rest trains")
    else:
        cuts = _check_cuts(cuts)
    k = ranking_negatives
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"'ranking_negatives' must be an int >= 1 (got {k!r})")
    by_fraction = cuts is None
    src, dst, time = _edges(graph)
    undirected = _is_undirected(src, dst, time)
    event = src < dst if undirected else src != dst
    ev_time = time[event]
    m = int(ev_time.size)
    if by_fraction:
        n_val, n_test = int(np.floor(val * m)), int(np.floor(test * m))
        if n_val < 1 or n_test < 1 or m - n_val - n_test < 1:
            raise DatasetError(
                f"graph '{graph.name}' has {m} timed edge events; val={val:g} and test={test:g} "
                f"leave a split empty; raise the fractions or use a larger graph"
            )
        ordered = np.sort(ev_time)
        cuts = (int(ordered[m - n_val - n_test]), int(ordered[m - n_test]))
        name = f"time-val{val:g}-test{test:g}"
    else:
        name = f"time-from{cuts[0]}-{cuts[1]}"
    val_from, test_from = cuts
    which = {
        "train": ev_time < val_from,
        "val": (ev_time >= val_from) & (ev_time < test_from),
        "test": ev_time >= test_from,
    }
    sizes = {s: int(w.sum()) for s, w in which.items()}
    if min(sizes.values()) == 0:
        fix = (
            "many events share a time: pick cut times (cuts=) between the events' times"
            if by_fraction
            else "pick cut times between the events' times"
        )
        raise DatasetError(
            f"the time split of graph '{graph.name}' at val_from={val_from}, "
            f"test_from={test_from} leaves a split empty ({sizes['train']} train, "
            f"{sizes['val']} val, {sizes['test']} test events; times "
            f"{int(ev_time.min()) if m else 0}..{int(ev_time.max()) if m else 0}); {fix}"
        )
    e_src, e_dst = src[event], dst[event]
    pos, pos_time, neg, neg_dst = {}, {}, {}, {}
    n = graph.num_nodes
    for i, (s, w) in enumerate(which.items()):
        a, b, t = e_src[w], e_dst[w], ev_time[w]
        order = np.lexsort((a, b, t))  # by time, then destination, then source
        a, b, t = a[order], b[order], t[order]
        pos[s], pos_time[s] = np.stack([a, b]), t
        if s == "train":
            continue
        one = bounded_draws_numpy(
            _draws(base_key(_SALT_NEG, seed, i), a, b, t), np.full((a.size, 1), n)
        )
        neg[s] = np.stack([a, one[:, 0].astype(np.int64)])
        many = bounded_draws_numpy(
            _draws(base_key(_SALT_RANK, seed, i), a, b, t), np.full((a.size, min(k, n)), n)
        )
        neg_dst[s] = many.astype(index_dtype(n))
    keep = (time < val_from) & (src != dst)  # both directions of the training events
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst[keep], minlength=n), out=indptr[1:])
    train_graph = Graph(
        indptr=indptr,
        indices=src[keep].astype(index_dtype(n)),
        edge_time=time[keep],  # CSC order kept: sorted by time within each destination
        num_classes=graph.num_classes,
        name=graph.name,
        validate="structure",
        **graph.node_data(),  # type: ignore[arg-type]
    )
    return TimeSplit(
        name, undirected, (int(val_from), int(test_from)), pos, pos_time, neg, neg_dst, train_graph
    )
