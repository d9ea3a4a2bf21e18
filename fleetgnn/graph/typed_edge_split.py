"""Edge splits of one relation of a typed graph, for link prediction, stored with the dataset.

The typed counterpart of :mod:`fleetgnn.graph.edge_split`: the edges of one *target relation*
``(src_type, name, dst_type)`` are split into train/val/test; every other relation stays whole.
Pairs are directed (a relation's ``(u, v)`` and ``(v, u)`` are different facts, also when both
ends are of one type); self loops (``src_type == dst_type``) and duplicate edges are dropped.
Each pair ``(u, v)`` (type-local IDs) gets a 64-bit draw of the keyed hash,
``h = mix(mix(K ^ u) ^ v)`` with ``K`` keyed by the seed and the relation, and the pairs are
ranked by ``(h, u * N_dst + v)``: the first ``floor(val * M)`` validate, the next
``floor(test * M)`` test, the rest train, so a pair's split depends only on the pair, the
relation, the seed and the counts.

Leakage: the message-passing graph (:attr:`TypedEdgeSplit.train_graph`) is the typed graph with
the validation and test pairs removed from the target relation and, when the graph has the
relation's reverse (``(dst_type, rev_name, src_type)``, as
:func:`~fleetgnn.graph.hetero.add_reverse_relations` adds it, or the relation a ``rev_``
relation reverses), the reversed pairs removed from the reverse relation: held-out edges reach
no aggregation in either direction.

Files, under ``DATASET/edge_splits/<SRC.NAME.DST>-val<v>-test<t>-seed<s>/`` (one ``.npy`` each,
``meta.json`` last; IDs type-local, int64):

- ``{train,val,test}_pos`` ``[2, P]``: the pairs ``(src, dst)`` in CSC order;
- ``{val,test}_neg`` ``[2, P]``: the GAE protocol's negatives (AUC/AP): as many ``(src, dst)``
  pairs of the two types that are no edge of the relation, distinct, disjoint between validation
  and test (keyed candidates ``j = 0, 1, ...``, each ``(u, v)`` drawn from the keyed hash);
- ``{val,test}_neg_dst`` ``[P, K]``: the OGB protocol's negatives (MRR, Hits@K), ``K``
  destinations of the destination type per positive, keyed by the pair;
- ``train_indptr``/``train_indices`` (and ``rev_indptr``/``rev_indices`` with a reverse): the
  relation's (and its reverse's) CSC without the held-out pairs.

Memory: the relation's edges (``O(E_r)`` int64 work arrays); the other relations are not read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from fleetgnn.errors import ConfigError, DatasetError, GraphError
from fleetgnn.graph.dataset import replace_dir, write_json_atomic
from fleetgnn.graph.edge_split import OGB_NEGATIVES, SPLITS, _check_fractions
from fleetgnn.graph.files import temp_prefix
from fleetgnn.graph.hetero import REVERSE_PREFIX, HeteroGraph, Relation
from fleetgnn.keyhash import base_key, bounded_draws_numpy, mix64_numpy

FORMAT = 1
_SALT_SPLIT = 0x7473706C6974  # "tsplit"
_SALT_GAE = 0x74676165  # "tgae"
_SALT_OGB = 0x746F6762  # "togb"
_GAE_CHUNK = 1 << 16


@dataclasses.dataclass(frozen=True)
class TypedEdgeSplit:
    """A typed graph's target relation split for link prediction (see the module docstring).

    Attributes:
        name: The split's directory name under ``edge_splits/``.
        relation: The target relation ``(src_type, name, dst_type)``.
        reverse: Its reverse relation in the graph, or ``None``.
        pos: Split -> pairs int64 ``[2, P]`` of type-local ``(src, dst)`` IDs.
        neg: ``"val"``/``"test"`` -> GAE-protocol negative pairs int64 ``[2, P]``.
        neg_dst: ``"val"``/``"test"`` -> OGB-protocol negative destinations int64 ``[P, K]``.
        train_graph: The message-passing graph: the typed graph without the held-out pairs.
    """

    name: str
    relation: Relation
    reverse: Relation | None
    pos: dict[str, np.ndarray]
    neg: dict[str, np.ndarray]
    neg_dst: dict[str, np.ndarray]
    train_graph: HeteroGraph

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={self.pos[s].shape[1]}" for s in SPLITS)
        return f"TypedEdgeSplit({self.name!r}, relation={self.relation}, {sizes})"


def relation_dir_name(rel: Relation) -> str:
    """``SRC.NAME.DST``: the relation's part of a split's directory name."""
    return ".".join(rel)


def typed_split_name(rel: Relation, val: float, test: float, seed: int) -> str:
    """The directory name of the split of ``rel`` with these fractions and seed."""
    return f"{relation_dir_name(rel)}-val{val:g}-test{test:g}-seed{int(seed)}"


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


def _draws(key: np.uint64, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return mix64_numpy(mix64_numpy(a.astype(np.uint64) ^ key) ^ b.astype(np.uint64))


def _relation_key(seed: int, salt: int, graph: HeteroGraph, rel: Relation) -> int:
    return base_key(salt, seed, graph.schema.relation_index(rel))


def _csc(src: np.ndarray, dst: np.ndarray, n_dst: int, n_src: int) -> tuple[np.ndarray, ...]:
    """CSC ``(indptr, indices)`` of ``src -> dst``, each destination's sources sorted."""
    order = np.lexsort((src, dst))
    indptr = np.zeros(n_dst + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n_dst), out=indptr[1:])
    dt = np.int32 if n_src < 2**31 else np.int64
    return indptr, src[order].astype(dt)


def _gae_negatives(
    key: int, edges: np.ndarray, n_src: int, n_dst: int, counts: dict[str, int], loops: bool
) -> dict[str, np.ndarray]:
    """Val then test GAE negatives: keyed candidate pairs that are no edge, distinct."""
    need = counts["val"] + counts["test"]
    taken: list[np.ndarray] = []
    have = 0
    seen = np.zeros(0, np.int64)
    j = 0
    limit = max(64 * need, 1 << 20)
    while have < need:
        if j >= limit:
            raise DatasetError(
                f"found only {have} of {need} pairs that are not edges of the relation; it is "
                f"too dense for the GAE protocol's negatives"
            )
        cand = np.arange(j, j + _GAE_CHUNK, dtype=np.uint64)
        j += _GAE_CHUNK
        rows = mix64_numpy(cand ^ np.uint64(key))
        uv = bounded_draws_numpy(rows, np.tile(np.array([n_src, n_dst], np.int64), (cand.size, 1)))
        k = uv[:, 0] * n_dst + uv[:, 1]
        ok = ~np.isin(k, edges) & ~np.isin(k, seen)
        if not loops:
            ok &= uv[:, 0] != uv[:, 1]
        _, first = np.unique(k, return_index=True)
        once = np.zeros(k.size, bool)
        once[first] = True
        k = k[ok & once]
        k = k[: need - have]
        taken.append(k)
        seen = np.union1d(seen, k)
        have += k.size
    allk = np.concatenate(taken)
    pairs = np.stack([allk // n_dst, allk % n_dst]).astype(np.int64)
    return {"val": pairs[:, : counts["val"]], "test": pairs[:, counts["val"] :]}


def _split_arrays(
    graph: HeteroGraph, rel: Relation, val: float, test: float, seed: int
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    s = graph.schema
    n_src, n_dst = s.count(rel[0]), s.count(rel[2])
    src, dst = graph.relation_edges(rel)
    keys = np.unique(src * n_dst + dst)  # sorted distinct pairs (dst-major after re-keying)
    u, v = keys // n_dst, keys % n_dst
    if rel[0] == rel[2]:
        keep = u != v
        u, v, keys = u[keep], v[keep], keys[keep]
    m = int(keys.size)
    n_val, n_test = int(np.floor(val * m)), int(np.floor(test * m))
    if n_val < 1 or n_test < 1 or m - n_val - n_test < 1:
        raise DatasetError(
            f"relation {rel} of '{graph.name}' has {m} distinct pairs; val={val:g} and "
            f"test={test:g} leave a split empty; raise the fractions or use a larger graph"
        )
    key = np.uint64(_relation_key(seed, _SALT_SPLIT, graph, rel))
    h = _draws(key, u, v)
    rank = np.empty(m, np.int64)
    rank[np.lexsort((keys, h))] = np.arange(m)
    which = {
        "val": rank < n_val,
        "test": (rank >= n_val) & (rank < n_val + n_test),
        "train": rank >= n_val + n_test,
    }
    counts = {"train": m - n_val - n_test, "val": n_val, "test": n_test}
    out: dict[str, np.ndarray] = {}
    for name, sel in which.items():
        a, b = u[sel], v[sel]
        order = np.lexsort((a, b))  # CSC order: by destination, then source
        out[f"{name}_pos"] = np.stack([a[order], b[order]]).astype(np.int64)
    gae = _gae_negatives(
        _relation_key(seed, _SALT_GAE, graph, rel),
        keys,
        n_src,
        n_dst,
        counts,
        loops=rel[0] != rel[2],
    )
    k = min(OGB_NEGATIVES, max(n_dst - 1, 1))
    for i, name in enumerate(("val", "test")):
        out[f"{name}_neg"] = gae[name]
        pos = out[f"{name}_pos"]
        ogb = np.uint64(_relation_key(seed, _SALT_OGB, graph, rel) ^ i)
        rows = _draws(ogb, pos[0], pos[1])
        out[f"{name}_neg_dst"] = bounded_draws_numpy(rows, np.full((pos.shape[1], k), n_dst))
    held = np.concatenate([out["val_pos"], out["test_pos"]], axis=1)
    tr = out["train_pos"]
    out["train_indptr"], out["train_indices"] = _csc(tr[0], tr[1], n_dst, n_src)
    rev = reverse_of(graph, rel)
    if rev is not None:  # the reverse relation without the held-out pairs' reverses
        r_src, r_dst = graph.relation_edges(rev)  # edges dst-type -> src-type
        gone = np.isin(r_dst * n_dst + r_src, held[0] * n_dst + held[1])
        out["rev_indptr"], out["rev_indices"] = _csc(r_src[~gone], r_dst[~gone], n_src, n_dst)
    return out, counts


def write_typed_edge_split(
    graph: HeteroGraph, out: str | Path, relation: object, val: float, test: float, seed: int
) -> Path:
    """Split ``relation``'s edges of ``graph`` and write the split to the directory ``out``.

    ``out`` is written through a temporary sibling and replaced whole (``meta.json`` last).

    Raises:
        ConfigError: An unknown relation, or fractions outside (0, 1) or summing to 1 or more.
        DatasetError: Too few pairs for a non-empty split each, or too dense for the negatives.
    """
    _check_fractions(val, test)
    rel = resolve_relation(graph, relation)
    arrays, counts = _split_arrays(graph, rel, val, test, int(seed))
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(target.name), dir=target.parent))
    try:
        for name, arr in arrays.items():
            np.save(tmp / f"{name}.npy", arr)
        rev = reverse_of(graph, rel)
        meta = {
            "format": FORMAT,
            "kind": "typed",
            "name": typed_split_name(rel, val, test, seed),
            "relation": list(rel),
            "reverse": None if rev is None else list(rev),
            "counts": counts,
            "num_nodes": list(graph.schema.num_nodes),
        }
        write_json_atomic(tmp / "meta.json", meta)
        replace_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def load_typed_edge_split(graph: HeteroGraph, path: str | Path) -> TypedEdgeSplit:
    """Read a split :func:`write_typed_edge_split` wrote for ``graph`` (arrays memory-mapped).

    Raises:
        DatasetError: A missing or unreadable file, another format, or another graph's split.
    """
    root = Path(path)
    try:
        meta = json.loads((root / "meta.json").read_text())
        if meta.get("format") != FORMAT or meta.get("kind") != "typed":
            raise DatasetError(
                f"the edge split '{root}' is not a typed split of format {FORMAT}; delete it to "
                f"draw it again"
            )
        rel = tuple(meta["relation"])
        rev = None if meta["reverse"] is None else tuple(meta["reverse"])
        names = [f"{s}_pos" for s in SPLITS] + [
            f"{s}_{k}" for s in ("val", "test") for k in ("neg", "neg_dst")
        ]
        names += ["train_indptr", "train_indices"] + (["rev_indptr", "rev_indices"] if rev else [])
        arrays = {a: np.load(root / f"{a}.npy", mmap_mode="c", allow_pickle=False) for a in names}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DatasetError(
            f"cannot read the edge split '{root}' ({e}); delete it to draw it again"
        ) from e
    if meta.get("num_nodes") != list(graph.schema.num_nodes) or rel not in graph.schema.relations:
        raise DatasetError(
            f"edge split '{root}' was drawn for another graph than '{graph.name}'; delete it to "
            f"draw it again"
        )
    csc = dict(graph.csc)
    csc[rel] = (arrays["train_indptr"], arrays["train_indices"])  # type: ignore[index]
    if rev is not None:
        csc[rev] = (arrays["rev_indptr"], arrays["rev_indices"])  # type: ignore[index]
    # the training graph drops edge times (their relation lost edges): typed link prediction
    # trains untimed (train.temporal=off; with times it is refused, fleetgnn.train.setup)
    train_graph = dataclasses.replace(graph, csc=csc, edge_time={}, validate="structure")
    return TypedEdgeSplit(
        str(meta["name"]),
        rel,  # type: ignore[arg-type]
        rev,  # type: ignore[arg-type]
        {s: arrays[f"{s}_pos"] for s in SPLITS},
        {s: arrays[f"{s}_neg"] for s in ("val", "test")},
        {s: arrays[f"{s}_neg_dst"] for s in ("val", "test")},
        train_graph,
    )


def typed_edge_split_for(
    graph: HeteroGraph,
    dataset_dir: str | Path | None,
    relation: object,
    val: float = 0.05,
    test: float = 0.1,
    seed: int = 0,
) -> TypedEdgeSplit:
    """The split of ``(relation, val, test, seed)``: the one saved with the dataset, else drawn.

    A split is written under ``DATASET/edge_splits/`` (when given and writable) and read back
    mapped; otherwise it is drawn in a temporary directory and read into memory.
    """
    _check_fractions(val, test)
    rel = resolve_relation(graph, relation)
    if dataset_dir is not None:
        path = Path(dataset_dir) / "edge_splits" / typed_split_name(rel, val, test, seed)
        with contextlib.suppress(OSError, ValueError):
            meta = json.loads((path / "meta.json").read_text())
            if meta.get("format") == FORMAT and meta.get("kind") == "typed":
                return load_typed_edge_split(graph, path)
        try:
            return load_typed_edge_split(
                graph, write_typed_edge_split(graph, path, rel, val, test, seed)
            )
        except PermissionError:
            pass  # a read-only dataset: the split is drawn in memory, identically
    with tempfile.TemporaryDirectory(prefix=".typed-edge-split-") as tmp:
        where = write_typed_edge_split(graph, Path(tmp) / "split", rel, val, test, seed)
        split = load_typed_edge_split(graph, where)
        return _in_memory(split)


def _in_memory(split: TypedEdgeSplit) -> TypedEdgeSplit:
    """``split`` with its mapped arrays read into memory (its directory goes away)."""
    g = split.train_graph
    mine = [r for r in (split.relation, split.reverse) if r is not None]
    csc = dict(g.csc)
    csc.update({r: (np.array(g.csc[r][0]), np.array(g.csc[r][1])) for r in mine})
    return dataclasses.replace(
        split,
        pos={k: np.array(v) for k, v in split.pos.items()},
        neg={k: np.array(v) for k, v in split.neg.items()},
        neg_dst={k: np.array(v) for k, v in split.neg_dst.items()},
        train_graph=dataclasses.replace(g, csc=csc, validate="structure"),
    )
