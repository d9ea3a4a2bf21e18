"""Typed (heterogeneous) graphs: node types, relations, per-type features, labels on one type.

A :class:`HeteroGraph` is the typed counterpart of :class:`~fleetgnn.graph.Graph`:

=====================  ==========================  ===========================================
part                   dtype / shape               meaning
=====================  ==========================  ===========================================
``schema``             :class:`HeteroSchema`       node types (with counts), relations, target
``csc[r]``             ``(indptr, indices)``       relation ``r = (src, name, dst)`` in CSC over
                                                   its destination type: ``indptr`` int64
                                                   ``[N_dst + 1]``, ``indices`` ``[E_r]`` the
                                                   sources' *type-local* IDs
``x[t]``               float ``[N_t, F_t]``        features of node type ``t`` (a type without
                                                   features is absent: models give it a
                                                   learnable embedding table); or compact rows
                                                   read as floats (a typed dataset written
                                                   compact: ``CompactRows``)
``y``                  int64 ``[N_target]``        labels of the target type, ``-1`` unlabelled
``*_mask``             bool ``[N_target]``         splits of the target type
``edge_time[r]``       int64 ``[E_r]``             optional, every relation or none: times
                                                   ``>= 0`` aligned with ``csc[r]``'s
                                                   ``indices``, non-decreasing within each
                                                   destination's segment (the homogeneous
                                                   ``edge_time`` invariant, per relation)
``node_time[t]``       int64 ``[N_t]``             optional, per node type (any subset): times
                                                   ``>= 0`` at which a node is asked about
=====================  ==========================  ===========================================

Global IDs: node types own contiguous ranges in schema order (type ``t`` owns
``[offset(t), offset(t) + N_t)``), so a typed graph has one homogeneous view
(:meth:`HeteroGraph.to_homogeneous`: every relation's edges over global IDs, the relation of each
edge in ``edge_type``) that the store, the partitioner and the homogeneous baselines address.
Arrays may be numpy memory maps; nothing here copies a relation's edges except the conversions
that say so. Times follow :mod:`fleetgnn.graph.edge_time` relation by relation, so "the in-edges
of ``v`` in relation ``r`` before ``t``" is a prefix of ``v``'s segment of ``csc[r]``
(:class:`~fleetgnn.sampling.TypedTemporalSampler` samples that way); the homogeneous view
(:meth:`HeteroGraph.to_homogeneous`) carries no times.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fleetgnn.errors import GraphError
from fleetgnn.graph.csc import SPLITS, Graph, coo_to_csc, csc_order, index_dtype
from fleetgnn.graph.edge_time import (
    TIME_DTYPE,
    as_edge_time,
    as_node_time,
    check_node_time,
    check_time_order,
)
from fleetgnn.graph.row_array import RowArray

#: A relation: ``(source type, relation name, destination type)``, as PyG and OGB name them.
Relation = tuple[str, str, str]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")
#: Prefix of the reverse relations :func:`add_reverse_relations` adds (``rev_writes``).
REVERSE_PREFIX = "rev_"


def _check_name(kind: str, name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise GraphError(
            f"{kind} name {name!r} is not valid: use 1-64 letters, digits, '_' or '-', starting "
            f"with a letter or '_'"
        )
    return name


@dataclasses.dataclass(frozen=True)
class HeteroSchema:
    """Node types with their counts, the relations between them, and the labelled type.

    Attributes:
        node_types: Type names; their order fixes the global ID ranges.
        num_nodes: Nodes per type, aligned with ``node_types``.
        relations: ``(src_type, name, dst_type)`` triples; a relation's index is its ID
            (``edge_type`` of the homogeneous view). Triples are unique; a name may repeat
            between different type pairs.
        target: The type that carries labels and splits (``None``: unlabelled graph).
    """

    node_types: tuple[str, ...]
    num_nodes: tuple[int, ...]
    relations: tuple[Relation, ...]
    target: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_types", tuple(self.node_types))
        object.__setattr__(self, "num_nodes", tuple(int(n) for n in self.num_nodes))
        object.__setattr__(self, "relations", tuple(tuple(r) for r in self.relations))
        if not self.node_types:
            raise GraphError("a typed graph needs at least one node type")
        for t in self.node_types:
            _check_name("node type", t)
        if len(set(self.node_types)) != len(self.node_types):
            raise GraphError(f"node types must be unique (got {list(self.node_types)})")
        if len(self.num_nodes) != len(self.node_types):
            raise GraphError(
                f"num_nodes has {len(self.num_nodes)} counts for {len(self.node_types)} node types"
            )
        for t, n in zip(self.node_types, self.num_nodes, strict=True):
            if n < 0:
                raise GraphError(f"node type {t!r} has a negative count ({n})")
        if not self.relations:
            raise GraphError("a typed graph needs at least one relation")
        known = set(self.node_types)
        for rel in self.relations:
            if len(rel) != 3:
                raise GraphError(f"a relation is (src_type, name, dst_type) (got {rel!r})")
            src, name, dst = rel
            _check_name("relation", name)
            for end in (src, dst):
                if end not in known:
                    raise GraphError(
                        f"relation {rel!r} names node type {end!r}, which is not one of "
                        f"{list(self.node_types)}"
                    )
        if len(set(self.relations)) != len(self.relations):
            raise GraphError("relations must be unique (src_type, name, dst_type) triples")
        if self.target is not None and self.target not in known:
            raise GraphError(f"target type {self.target!r} is not one of {list(self.node_types)}")

    # ------------------------------------------------------------------ ID ranges
    @property
    def total_nodes(self) -> int:
        """Nodes of every type together (the homogeneous view's ``N``)."""
        return int(sum(self.num_nodes))

    @property
    def offsets(self) -> tuple[int, ...]:
        """Global ID offsets: type ``i`` owns ``[offsets[i], offsets[i + 1])``."""
        return tuple(int(v) for v in np.concatenate([[0], np.cumsum(self.num_nodes)]))

    def type_index(self, ntype: str) -> int:
        """The position of ``ntype`` in :attr:`node_types`."""
        try:
            return self.node_types.index(ntype)
        except ValueError:
            raise GraphError(
                f"unknown node type {ntype!r}; the graph has {list(self.node_types)}"
            ) from None

    def count(self, ntype: str) -> int:
        """Nodes of type ``ntype``."""
        return self.num_nodes[self.type_index(ntype)]

    def type_range(self, ntype: str) -> tuple[int, int]:
        """``[start, stop)`` of ``ntype``'s global IDs."""
        i = self.type_index(ntype)
        off = self.offsets
        return off[i], off[i + 1]

    def relation_index(self, rel: Relation | str) -> int:
        """The ID of a relation, given as its triple or as a name unique in the schema."""
        if isinstance(rel, str):
            hits = [i for i, r in enumerate(self.relations) if r[1] == rel]
            if len(hits) != 1:
                raise GraphError(
                    f"relation name {rel!r} matches {len(hits)} relations; give the "
                    f"(src_type, name, dst_type) triple (relations: {list(self.relations)})"
                )
            return hits[0]
        rel = tuple(rel)  # type: ignore[assignment]
        try:
            return self.relations.index(rel)  # type: ignore[arg-type]
        except ValueError:
            raise GraphError(
                f"unknown relation {rel!r}; the graph has {list(self.relations)}"
            ) from None

    def type_of(self, global_ids: np.ndarray) -> np.ndarray:
        """The type index of each global ID (``int64``)."""
        ids = np.asarray(global_ids)
        return np.searchsorted(np.asarray(self.offsets[1:]), ids, side="right").astype(np.int64)

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (the dataset's ``meta.json`` ``schema`` entry)."""
        return {
            "node_types": list(self.node_types),
            "num_nodes": list(self.num_nodes),
            "relations": [list(r) for r in self.relations],
            "target": self.target,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HeteroSchema:
        """The inverse of :meth:`to_dict` (bad input raises :class:`GraphError` in one line)."""
        try:
            return cls(
                node_types=tuple(data["node_types"]),
                num_nodes=tuple(data["num_nodes"]),
                relations=tuple(tuple(r) for r in data["relations"]),
                target=data.get("target"),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise GraphError(f"malformed typed-graph schema ({type(e).__name__}: {e})") from None


@dataclasses.dataclass(frozen=True, eq=False)
class HeteroGraph:
    """A typed graph: one CSC per relation, per-type features, labels on the target type.

    Construction validates shapes, dtypes and ID ranges (every value unless
    ``validate="structure"``); a failure raises :class:`GraphError` naming the part.

    Args:
        schema: The node types, relations and target type.
        csc: Per relation (every relation of the schema), ``(indptr, indices)`` over its
            destination type, ``indices`` the sources' type-local IDs.
        x: Features per node type (types without features omitted).
        y: Labels of the target type ``[N_target]`` (``-1``: unlabelled).
        train_mask: Split of the target type ``[N_target]`` (and ``val_mask``, ``test_mask``).
        num_classes: Class count (inferred from ``y`` when omitted).
        name: A short name for reports.
        edge_time: Per relation, int64 ``[E_r]`` edge times ``>= 0`` aligned with its
            ``indices``, non-decreasing within each destination's segment; every relation or
            none (build with :func:`from_typed_edges` to get that order).
        node_time: Per node type (any subset), int64 ``[N_t]`` node times ``>= 0``.
        validate: ``"full"`` (default) or ``"structure"`` (shapes, dtypes and ``indptr``'s
            ends only, for memory-mapped data validated when it was written).
    """

    schema: HeteroSchema
    csc: Mapping[Relation, tuple[np.ndarray, np.ndarray]]
    x: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)
    y: np.ndarray | None = None
    train_mask: np.ndarray | None = None
    val_mask: np.ndarray | None = None
    test_mask: np.ndarray | None = None
    num_classes: int | None = None
    name: str = "typed graph"
    edge_time: Mapping[Relation, np.ndarray] = dataclasses.field(default_factory=dict)
    node_time: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)
    validate: dataclasses.InitVar[str] = "full"

    def __post_init__(self, validate: str) -> None:
        if validate not in ("full", "structure"):
            raise GraphError(f"'validate' must be 'full' or 'structure' (got {validate!r})")
        s = self.schema
        object.__setattr__(self, "csc", {tuple(k): v for k, v in self.csc.items()})
        object.__setattr__(self, "x", dict(self.x))
        missing = [r for r in s.relations if r not in self.csc]
        extra = [r for r in self.csc if r not in s.relations]
        if missing or extra:
            raise GraphError(
                f"csc must hold exactly the schema's relations (missing {missing}, not in the "
                f"schema {extra})"
            )
        for rel in s.relations:
            self._check_relation(rel, full=validate == "full")
        for t, feats in self.x.items():
            n = s.count(t)
            plain = isinstance(feats, (np.ndarray, RowArray))  # RowArray: compact rows
            if not plain or feats.ndim != 2 or feats.shape[0] != n:
                raise GraphError(
                    f"x[{t!r}] must be a [{n}, F] array (got shape {getattr(feats, 'shape', None)})"
                )
            if not np.issubdtype(feats.dtype, np.floating):
                raise GraphError(f"x[{t!r}] must be floating point (got {feats.dtype})")
        self._check_target(full=validate == "full")
        self._check_times(full=validate == "full")

    def _check_times(self, *, full: bool) -> None:
        """Edge times of every relation or none (order checked when ``full``); node times."""
        s = self.schema
        object.__setattr__(self, "edge_time", {tuple(k): v for k, v in self.edge_time.items()})
        object.__setattr__(self, "node_time", dict(self.node_time))
        if self.edge_time:
            missing = [r for r in s.relations if r not in self.edge_time]
            extra = [r for r in self.edge_time if r not in s.relations]
            if missing or extra:
                raise GraphError(
                    f"edge_time must give the times of every relation or of none (missing "
                    f"{missing}, not in the schema {extra})"
                )
        for rel, t in self.edge_time.items():
            indptr, indices = self.csc[rel]
            e = int(indices.shape[0])
            if not isinstance(t, np.ndarray) or t.shape != (e,) or t.dtype != TIME_DTYPE:
                raise GraphError(
                    f"relation {rel}: edge_time must be int64 with one time per edge, shape "
                    f"({e},) (got {getattr(t, 'dtype', None)} {getattr(t, 'shape', None)}); "
                    f"build the graph with from_typed_edges(..., edge_time=...)"
                )
            if full:
                try:
                    check_time_order(indptr, t)
                except GraphError as err:  # the fix names the typed constructor
                    fix = str(err).replace("from_edges(", "from_typed_edges(")
                    raise GraphError(f"relation {rel}: {fix}") from None
        for ntype, t in self.node_time.items():
            n = s.count(ntype)
            try:
                check_node_time(t, n, values=full)
            except GraphError as err:
                raise GraphError(f"node type {ntype!r}: {err}") from None

    @property
    def has_edge_time(self) -> bool:
        """Whether the relations carry edge times (all of them do, or none)."""
        return bool(self.edge_time)

    def _check_relation(self, rel: Relation, *, full: bool) -> None:
        s = self.schema
        indptr, indices = self.csc[rel]
        n_src, n_dst = s.count(rel[0]), s.count(rel[2])
        if not isinstance(indptr, np.ndarray) or indptr.shape != (n_dst + 1,):
            raise GraphError(
                f"relation {rel}: indptr must have shape [{n_dst + 1}] (got "
                f"{getattr(indptr, 'shape', None)})"
            )
        if indptr.dtype != np.int64:
            raise GraphError(f"relation {rel}: indptr must be int64 (got {indptr.dtype})")
        if not isinstance(indices, np.ndarray) or indices.ndim != 1:
            raise GraphError(f"relation {rel}: indices must be a 1-D array")
        if not np.issubdtype(indices.dtype, np.integer):
            raise GraphError(f"relation {rel}: indices must be integers (got {indices.dtype})")
        if int(indptr[0]) != 0 or int(indptr[-1]) != indices.shape[0]:
            raise GraphError(
                f"relation {rel}: indptr must run from 0 to len(indices)={indices.shape[0]} "
                f"(got {int(indptr[0])}..{int(indptr[-1])})"
            )
        if full:
            if indptr.size > 1 and (np.diff(indptr) < 0).any():
                raise GraphError(f"relation {rel}: indptr must be non-decreasing")
            if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= n_src):
                bad = int(indices.min()) if int(indices.min()) < 0 else int(indices.max())
                raise GraphError(
                    f"relation {rel}: source ID {bad} is outside [0, {n_src}) of type {rel[0]!r}"
                )

    def _check_target(self, *, full: bool) -> None:
        s = self.schema
        parts = {"y": self.y, **{m: getattr(self, m) for m in SPLITS}}
        given = [k for k, v in parts.items() if v is not None]
        if s.target is None:
            if given:
                raise GraphError(f"{given} given but the schema names no target type")
            return
        n = s.count(s.target)
        for k in given:
            v = parts[k]
            if not isinstance(v, np.ndarray) or v.shape != (n,):
                raise GraphError(
                    f"{k} must have shape [{n}] (the target type {s.target!r}) (got "
                    f"{getattr(v, 'shape', None)})"
                )
            if k != "y" and v.dtype != np.bool_:
                raise GraphError(f"{k} must be bool (got {v.dtype})")
        if self.y is not None:
            if not np.issubdtype(self.y.dtype, np.integer):
                raise GraphError(f"y must be integer labels (got {self.y.dtype})")
            if self.num_classes is None and self.y.size:
                object.__setattr__(self, "num_classes", int(self.y.max()) + 1)
            if full and self.y.size:
                lo, hi = int(self.y.min()), int(self.y.max())
                if lo < -1 or (self.num_classes is not None and hi >= self.num_classes):
                    raise GraphError(
                        f"y must lie in [0, {self.num_classes}) or be -1 (got {lo}..{hi})"
                    )
        if full:
            masks = [getattr(self, m) for m in SPLITS if getattr(self, m) is not None]
            for i, a in enumerate(masks):
                for b in masks[i + 1 :]:
                    if (a & b).any():
                        raise GraphError("train/val/test masks must be disjoint")

    # ------------------------------------------------------------------ views
    @property
    def num_nodes(self) -> int:
        """Nodes of every type together."""
        return self.schema.total_nodes

    @property
    def num_edges(self) -> int:
        """Edges of every relation together."""
        return int(sum(int(self.csc[r][1].shape[0]) for r in self.schema.relations))

    def num_relation_edges(self, rel: Relation | str) -> int:
        """Edges of one relation."""
        return int(self.csc[self.schema.relations[self.schema.relation_index(rel)]][1].shape[0])

    def feature_width(self, ntype: str) -> int | None:
        """``F_t`` of ``ntype``, or ``None`` for a featureless type."""
        self.schema.type_index(ntype)
        f = self.x.get(ntype)
        return None if f is None else int(f.shape[1])

    def relation_edges(self, rel: Relation | str) -> tuple[np.ndarray, np.ndarray]:
        """``(src, dst)`` type-local IDs of one relation's edges, in CSC order (copies)."""
        r = self.schema.relations[self.schema.relation_index(rel)]
        indptr, indices = self.csc[r]
        dst = np.repeat(np.arange(indptr.shape[0] - 1, dtype=np.int64), np.diff(indptr))
        return np.asarray(indices, dtype=np.int64), dst

    def to_homogeneous(self, *, x: np.ndarray | None = None) -> tuple[Graph, np.ndarray]:
        """The graph over global IDs with every relation's edges, and each edge's relation.

        Labels and splits are those of the target type at its global range (``-1`` / ``False``
        elsewhere). Features: ``x`` if given (``[N, F]`` over global IDs), else the per-type
        tables concatenated when every type has features of one width, else none.

        Returns:
            ``(graph, edge_type)``: ``edge_type[e]`` is the relation ID of ``graph``'s edge
            ``e`` (aligned with ``graph.indices``; int16).
        """
        s = self.schema
        srcs, dsts, types = [], [], []
        for rid, rel in enumerate(s.relations):
            src, dst = self.relation_edges(rel)
            srcs.append(src + s.type_range(rel[0])[0])
            dsts.append(dst + s.type_range(rel[2])[0])
            types.append(np.full(src.shape[0], rid, dtype=np.int16))
        src, dst, etype = np.concatenate(srcs), np.concatenate(dsts), np.concatenate(types)
        n = s.total_nodes
        order = np.lexsort((etype, src, dst))  # by destination, then source, then relation
        # already grouped by destination, and coo_to_csc keeps a destination's input order
        indptr, indices, _ = coo_to_csc(src[order], dst[order], n)
        edge_type = etype[order]
        data: dict[str, np.ndarray] = {}
        if x is None and len(self.x) == len(s.node_types):
            widths = {int(f.shape[1]) for f in self.x.values()}
            if len(widths) == 1:
                x = np.concatenate([np.asarray(self.x[t]) for t in s.node_types])
        if x is not None:
            data["x"] = x
        if s.target is not None:
            start, stop = s.type_range(s.target)
            if self.y is not None:
                y = np.full(n, -1, dtype=np.int64)
                y[start:stop] = self.y
                data["y"] = y
            for m in SPLITS:
                v = getattr(self, m)
                if v is not None:
                    full = np.zeros(n, dtype=bool)
                    full[start:stop] = v
                    data[m] = full
        g = Graph(
            indptr=indptr,
            indices=indices.astype(index_dtype(n), copy=False),
            num_classes=self.num_classes,
            name=f"{self.name} (homogeneous)",
            **data,  # type: ignore[arg-type]
        )
        return g, edge_type


def from_typed_edges(
    schema: HeteroSchema,
    edges: Mapping[Relation, tuple[Sequence[int] | np.ndarray, Sequence[int] | np.ndarray]],
    *,
    x: Mapping[str, np.ndarray] | None = None,
    y: np.ndarray | None = None,
    train_mask: np.ndarray | None = None,
    val_mask: np.ndarray | None = None,
    test_mask: np.ndarray | None = None,
    num_classes: int | None = None,
    name: str = "typed graph",
    edge_time: Mapping[Relation, Sequence[int] | np.ndarray] | None = None,
    node_time: Mapping[str, Sequence[int] | np.ndarray] | None = None,
) -> HeteroGraph:
    """Build a validated :class:`HeteroGraph` from per-relation edge lists of type-local IDs.

    Each destination's in-edges of a relation keep the edge list's order, or, with
    ``edge_time``, are sorted by time (equal times in list order), the times moving with them.

    Args:
        schema: Node types, relations, target.
        edges: Per relation, ``(src, dst)`` type-local IDs (``src[i] -> dst[i]``).
        x: Features per node type (featureless types omitted).
        y: Labels of the target type (``-1``: unlabelled).
        train_mask: Split of the target type.
        val_mask: Split of the target type.
        test_mask: Split of the target type.
        num_classes: Class count (inferred from ``y`` when omitted).
        name: Graph name.
        edge_time: Per relation (every relation, or ``None``), one time per edge of
            ``edges[rel]``: integers ``>= 0`` (or integral floats), checked as
            :func:`~fleetgnn.graph.edge_time.as_edge_time` checks them.
        node_time: Per node type (any subset), one time per node of that type.
    """
    csc: dict[Relation, tuple[np.ndarray, np.ndarray]] = {}
    times: dict[Relation, np.ndarray] = {}
    for rel in schema.relations:
        if rel not in edges:
            raise GraphError(f"no edges given for relation {rel}")
        src, dst = (np.asarray(a, dtype=np.int64) for a in edges[rel])
        if src.shape != dst.shape or src.ndim != 1:
            raise GraphError(f"relation {rel}: src and dst must be 1-D of one length")
        n_src, n_dst = schema.count(rel[0]), schema.count(rel[2])
        for what, ids, n in (("source", src, n_src), ("destination", dst, n_dst)):
            if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
                raise GraphError(
                    f"relation {rel}: {what} IDs must lie in [0, {n}) (got "
                    f"{int(ids.min())}..{int(ids.max())})"
                )
        time = None
        if edge_time is not None and rel in edge_time:
            try:
                time = as_edge_time(edge_time[rel], src.size, f"edge_time[{rel}]")
            except GraphError as err:
                raise GraphError(f"relation {rel}: {err}") from None
            times[rel] = time[csc_order(dst, time)]
        # coo_to_csc checks both ends against one count: use the larger, keep N_dst segments
        indptr, indices, _ = coo_to_csc(src, dst, max(n_src, n_dst), edge_time=time)
        indptr = np.ascontiguousarray(indptr[: n_dst + 1])
        csc[rel] = (indptr, indices.astype(index_dtype(max(n_src, 1)), copy=False))
    unknown = [r for r in edges if tuple(r) not in schema.relations]
    if unknown:
        raise GraphError(f"edges given for relations not in the schema: {unknown}")
    nodes = {}
    for ntype, t in (node_time or {}).items():
        try:
            nodes[ntype] = as_node_time(t, schema.count(ntype), f"node_time[{ntype!r}]")
        except GraphError as err:
            raise GraphError(f"node type {ntype!r}: {err}") from None
    return HeteroGraph(
        schema=schema,
        csc=csc,
        x=dict(x or {}),
        y=y,
        train_mask=train_mask,
        val_mask=val_mask,
        test_mask=test_mask,
        num_classes=num_classes,
        name=name,
        edge_time=times if edge_time is not None else {},
        node_time=nodes,
    )


def add_reverse_relations(graph: HeteroGraph) -> HeteroGraph:
    """``graph`` with, for each relation ``(s, r, d)`` whose reverse is absent, ``(d, rev_r, s)``.

    Relations between one type (``s == d``) get a reverse too unless their name already starts
    with :data:`REVERSE_PREFIX`; the new relations follow the old ones in the schema. A reverse
    edge has its edge's time; node times are kept.
    """
    s = graph.schema
    new: list[Relation] = []
    edges: dict[Relation, tuple[np.ndarray, np.ndarray]] = {}
    times: dict[Relation, np.ndarray] = {}
    for rel in s.relations:
        src, dst = graph.relation_edges(rel)
        edges[rel] = (src, dst)
        if graph.edge_time:
            times[rel] = np.asarray(graph.edge_time[rel])
        if rel[1].startswith(REVERSE_PREFIX):
            continue
        rev = (rel[2], REVERSE_PREFIX + rel[1], rel[0])
        if rev in s.relations:
            continue
        new.append(rev)
        edges[rev] = (dst, src)
        if graph.edge_time:
            times[rev] = times[rel]
    schema = dataclasses.replace(s, relations=s.relations + tuple(new))
    return from_typed_edges(
        schema,
        edges,
        x=graph.x,
        y=graph.y,
        train_mask=graph.train_mask,
        val_mask=graph.val_mask,
        test_mask=graph.test_mask,
        num_classes=graph.num_classes,
        name=graph.name,
        edge_time=times if graph.edge_time else None,
        node_time=graph.node_time,
    )
