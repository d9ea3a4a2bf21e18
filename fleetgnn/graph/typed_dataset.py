"""Typed (heterogeneous) datasets on disk: one CSC per relation, per-type features, memory-mapped.

Layout (``meta.json`` format version 1, ``"kind": "typed"``)::

    DIR/meta.json                     {"format_version": 1, "kind": "typed", "name",
                                       "schema": {"node_types", "num_nodes", "relations",
                                       "target"}, "num_nodes", "num_edges", "num_classes",
                                       "arrays": {name: {"dtype", "shape"}}, ...}
    DIR/rel/SRC.NAME.DST/indptr.npy   int64 [N_DST + 1]   CSC of relation (SRC, NAME, DST)
    DIR/rel/SRC.NAME.DST/indices.npy  int32/int64 [E_r]   sources, *type-local* IDs of SRC
    DIR/x/TYPE.npy                    float [N_TYPE, F_TYPE]  features (absent: featureless type)
    DIR/y.npy                         int64 [N_target]    labels of the target type (-1: none)
    DIR/{train,val,test}_mask.npy     bool [N_target]     splits of the target type
    DIR/rel/SRC.NAME.DST/edge_time.npy  int64 [E_r]       (optional, every relation or none) edge
                                                          times >= 0, sorted within each
                                                          destination's in-edges
    DIR/node_time/TYPE.npy            int64 [N_TYPE]      (optional, any node types) node times
    DIR/verified.json                 as a homogeneous dataset's

With times, ``meta.json`` also records ``"has_edge_time": true`` and ``"edge_time_range"``
(``[min, max]`` over every relation, ``null`` without edges), and ``"has_node_time": true`` and
``"node_time_range"`` over every timed type, as a homogeneous dataset does; a typed dataset
without times has none of these keys, and opens as before.

With ``"feature_dtype"`` (``prepare --feature-dtype``: one dtype for every featured type, or
``TYPE=DTYPE,...`` per type), an object ``{TYPE: codec}``, ``x/TYPE.npy`` of each type it names
holds that codec's stored rows (``uint16 [N_TYPE, F]`` bf16 bits, ``float16 [N_TYPE, F]``,
``uint8 [N_TYPE, F + 4]``), and ``"feature_read_dtype"`` ``{TYPE: float}`` the float they read
back as; the types it does not name hold plain floats. Opened, such a type's ``x`` is a
:class:`~fleetgnn.graph.compact_rows.CompactRows`. A reader without the keys refuses such a
table in one line (``expected a float dtype``), except a float16 one, which it reads as the
same values: the format version is unchanged.

Type and relation names are letters, digits, ``_`` and ``-`` (:class:`HeteroSchema`), so the
dotted ``SRC.NAME.DST`` names one relation unambiguously. ``num_nodes`` / ``num_edges`` are the
totals over types and relations (the homogeneous view's ``N`` and ``E``).

Everything else follows :mod:`fleetgnn.graph.dataset`: :class:`TypedDatasetWriter` creates the
arrays as memory maps in a temporary sibling directory with their space reserved, checks every
value once in bounded memory (:func:`~fleetgnn.graph.verify.check_typed_values`) and records the
files' fingerprints in ``verified.json``, writes ``meta.json`` last and renames the directory
into place. :func:`open_typed_dataset` maps every array read-only and returns a
:class:`~fleetgnn.graph.hetero.HeteroGraph` (``validate="structure"``), checking the values again
only when the files no longer match their fingerprints.

A homogeneous reader (:func:`~fleetgnn.graph.dataset.open_dataset`, ``read_meta``) refuses a
typed directory in one line naming the commands that read typed data.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from fleetgnn.errors import DatasetError, FleetgnnError, GraphError
from fleetgnn.graph.csc import SPLITS, Graph, Validation
from fleetgnn.graph.dataset import (
    _FULL_CHECK_LIMIT,
    FORMAT_VERSION,
    MAX_EDGES,
    MAX_NODES,
    META,
    STAMP,
    TIMES,
    TYPED_KIND,
    DatasetWriter,
    Progress,
    _check_spec_dtype,
    _check_time_meta,
    _fingerprints,
    _load_array,
    _meta_error,
    _meta_int,
    _stamp,
    dataset_fingerprint,
    dataset_kind,
    dataset_kind_of,
    files_fingerprint,
    open_dataset,
    open_meta,
    require_meta_keys,
    stamp_problem,
    write_json_atomic,
)
from fleetgnn.graph.edge_time import time_range
from fleetgnn.graph.files import create_npy
from fleetgnn.graph.hetero import HeteroGraph, HeteroSchema, Relation
from fleetgnn.graph.row_array import RowArray, typed_compact_meta_problem
from fleetgnn.graph.verify import check_typed_values

#: Most node types and relations a typed ``meta.json`` may declare.
MAX_TYPES = 4096
MAX_RELATIONS = 4096
_TARGET_ARRAYS = ("y", *SPLITS)
_COPY_CHUNK_BYTES = 64 << 20


def relation_key(rel: Relation) -> str:
    """``"src.name.dst"``: a relation's directory name under ``rel/``."""
    return ".".join(rel)


def array_names(schema: HeteroSchema) -> dict[str, str]:
    """Every array name a typed dataset of ``schema`` may hold -> what it is (for messages)."""
    names: dict[str, str] = {}
    for rel in schema.relations:
        names[f"rel/{relation_key(rel)}/indptr"] = f"relation {rel} indptr"
        names[f"rel/{relation_key(rel)}/indices"] = f"relation {rel} indices"
        names[f"rel/{relation_key(rel)}/edge_time"] = f"relation {rel} edge times"
    for t in schema.node_types:
        names[f"x/{t}"] = f"features of {t!r}"
        names[f"node_time/{t}"] = f"node times of {t!r}"
    if schema.target is not None:
        for k in _TARGET_ARRAYS:
            names[k] = f"{k} of {schema.target!r}"
    return names


class TypedDatasetWriter(DatasetWriter):
    """Writes a typed dataset directory atomically, array by array, in bounded memory.

    Used like :class:`~fleetgnn.graph.dataset.DatasetWriter`; array names are those of the
    module's layout (:func:`array_names`)::

        with TypedDatasetWriter(out, schema, name="mag") as w:
            w.put_relation(("paper", "cites", "paper"), indptr, indices)
            x = w.create("x/paper", np.float32, (n_paper, 128))   # filled in chunks
            w.put("y", y)
            w.commit(num_classes=349)

    Args:
        out: Target directory; must not exist unless ``overwrite``.
        schema: The node types, relations and target type.
        name: Dataset name stored in ``meta.json``.
        overwrite: Replace an existing dataset at ``out`` (only after the new one is complete).
        feature_dtype: Write feature tables compact (:mod:`fleetgnn.graph.compact_rows`): one
            dtype for every type (``"bf16"``) or per type (``{"paper": "bf16"}`` or
            ``"paper=bf16,author=fp8"``; types not named as given). ``x/TYPE`` put whole is
            encoded block by block; made with :meth:`create` it is filled as floats and
            converted by :meth:`commit`. ``None``: every table as given.

    Raises:
        DatasetError: An unknown ``feature_dtype`` or node type in it (before anything is
            written).
    """

    def __init__(
        self,
        out: str | os.PathLike[str],
        schema: HeteroSchema,
        name: str,
        overwrite: bool = False,
        feature_dtype: str | dict[str, str] | None = None,
    ) -> None:
        codecs: dict[str, Any] = {}
        if feature_dtype is not None:
            from fleetgnn.graph.compact_rows import typed_writer_codecs

            codecs = typed_writer_codecs(feature_dtype, schema.node_types)
        super().__init__(out, name=name, overwrite=overwrite)
        self.schema = schema
        self._names = array_names(schema)
        #: Node type -> the codec its features are written in.
        self.codecs = codecs
        self._float_xs: dict[str, np.ndarray] = {}  # x/TYPE as created, converted by commit
        self._xs_stored: dict[str, tuple[Any, str]] = {}  # compact x/TYPE: (codec, read as)

    def create(self, name: str, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """Create array ``name`` as a writable ``.npy`` memory map (space reserved first).

        Raises:
            DatasetError: ``name`` is not an array of this schema's layout.
            DiskFullError: Not enough space for the array.
        """
        if name not in self._names:
            raise DatasetError(
                f"unknown typed dataset array {name!r}; valid names: {', '.join(self._names)}"
            )
        dt = np.dtype(dtype)
        if dt.byteorder not in ("=", "|"):
            dt = dt.newbyteorder("=")
        ntype = name[2:] if name.startswith("x/") else None
        if ntype in self.codecs:  # floats, converted by commit
            (self.tmp / "x").mkdir(exist_ok=True)
            self._float_xs[ntype] = self.scratch(f"x/{ntype}.float.npy", dt, tuple(shape))
            return self._float_xs[ntype]
        return self._create_file(name, dt, tuple(shape))

    def _create_file(self, name: str, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """Array ``name``'s ``.npy`` memory map in the temporary directory (space reserved)."""
        path = self.tmp / f"{name}.npy"
        path.parent.mkdir(parents=True, exist_ok=True)
        arr = create_npy(path, dtype, tuple(shape), self.DISK_FULL_FIX)
        self._arrays[name] = arr
        return arr

    def put(self, name: str, values: np.ndarray | RowArray) -> None:
        """Write a whole array in chunks of bounded size (``x/TYPE``: :meth:`_put_typed_x`)."""
        ntype = name[2:] if name.startswith("x/") else None
        if ntype is not None and (ntype in self.codecs or isinstance(values, RowArray)):
            self._put_typed_x(ntype, values)
        else:
            super().put(name, values)

    def _put_typed_x(self, ntype: str, values: np.ndarray | RowArray) -> None:
        """Write ``x/ntype`` by its codec, or as ``values`` store it (:func:`.write_x`)."""
        from fleetgnn.graph.compact_rows import write_x

        name = f"x/{ntype}"

        def create(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
            return self._create_file(name, dtype, shape)

        def copy_in(_: str, rows: np.ndarray) -> None:
            out = self._create_file(name, rows.dtype.newbyteorder("="), rows.shape)
            step = max(1, _COPY_CHUNK_BYTES // max(1, rows.itemsize * int(np.prod(rows.shape[1:]))))
            for lo in range(0, rows.shape[0], step):
                out[lo : lo + step] = rows[lo : lo + step]

        try:
            stored = write_x(values, self.codecs.get(ntype), copy_in, create, _COPY_CHUNK_BYTES)
        except GraphError as err:
            raise DatasetError(f"features of node type {ntype!r}: {err}") from None
        self._xs_stored.pop(ntype, None)
        if stored is not None:
            self._xs_stored[ntype] = stored

    def put_relation(
        self,
        rel: Relation,
        indptr: np.ndarray,
        indices: np.ndarray,
        edge_time: np.ndarray | None = None,
    ) -> None:
        """Write one relation's CSC (``indices``: type-local source IDs), copied in chunks.

        ``edge_time``: int64 ``[E_r]`` aligned with ``indices``, sorted within each
        destination's segment (checked at :meth:`commit`).
        """
        key = relation_key(tuple(rel))  # type: ignore[arg-type]
        self.put(f"rel/{key}/indptr", indptr)
        self.put(f"rel/{key}/indices", indices)
        if edge_time is not None:
            self.put(f"rel/{key}/edge_time", edge_time)

    def commit(self, num_classes: int | None = None, **extra: Any) -> Path:
        """Flush arrays, check every value, write ``meta.json`` and move the directory in place.

        Raises:
            DatasetError: A relation's arrays are missing, a shape disagrees with the schema,
                or a value is invalid (a source ID outside its type's range, a label outside
                ``[-1, num_classes)``, a NaN feature, overlapping splits, ...).
        """
        s = self.schema
        for t in list(self._float_xs):  # created as floats: converted to their stored form
            self._put_typed_x(t, self._float_xs.pop(t))
            (self.tmp / f"x/{t}.float.npy").unlink()
        arrays = self._flush()
        self._arrays.clear()
        if self._xs_stored:  # compact tables: their codecs and the floats they read back as
            stored = {t: self._xs_stored[t] for t in s.node_types if t in self._xs_stored}
            extra = {
                "feature_dtype": {t: c.name for t, (c, _) in stored.items()},
                "feature_read_dtype": {t: read for t, (_, read) in stored.items()},
                **extra,
            }
        meta = {
            "format_version": FORMAT_VERSION,
            "kind": TYPED_KIND,
            "name": self.name,
            "schema": s.to_dict(),
            "num_nodes": s.total_nodes,
            "num_edges": sum(
                arrays.get(f"rel/{relation_key(r)}/indices", {"shape": [0]})["shape"][0]
                for r in s.relations
            ),
            "num_classes": int(num_classes) if num_classes is not None else None,
            "arrays": arrays,
            **extra,
        }
        meta.update(_time_meta(self.tmp, s, list(arrays), ranges=False))
        where = self.out / META
        try:
            _check_layout(meta, s, where)
            t0 = time.perf_counter()
            _check_values(self.tmp, s, list(arrays), meta["num_classes"], compact=meta)
        except (DatasetError, GraphError) as err:
            raise DatasetError(f"the dataset written to '{self.out}' is invalid: {err}") from err
        meta.update(_time_meta(self.tmp, s, list(arrays), ranges=True))  # values checked
        return self._publish(meta, arrays, time.perf_counter() - t0)


def _time_meta(
    root: Path, schema: HeteroSchema, names: list[str], *, ranges: bool
) -> dict[str, Any]:
    """``has_{edge,node}_time`` of the time arrays in ``names`` (and ``*_time_range``).

    With ``ranges`` the ``[min, max]`` over every timed relation (or node type) is read from the
    files under ``root`` (``null`` when they hold no times).
    """
    files = {
        "edge": [f"rel/{relation_key(r)}/edge_time" for r in schema.relations],
        "node": [f"node_time/{t}" for t in schema.node_types],
    }
    meta: dict[str, Any] = {}
    for kind in TIMES:
        present = [n for n in files[kind] if n in names]
        if not present:
            continue
        meta[f"has_{kind}_time"] = True
        if not ranges:
            continue
        spans = []
        for name in present:
            times = np.load(root / f"{name}.npy", mmap_mode="r", allow_pickle=False)
            spans.append(time_range(times))
            del times
        spans = [v for v in spans if v is not None]
        meta[f"{kind}_time_range"] = (
            [min(v[0] for v in spans), max(v[1] for v in spans)] if spans else None
        )
    return meta


def write_typed_dataset(
    graph: HeteroGraph,
    out: str | os.PathLike[str],
    overwrite: bool = False,
    feature_dtype: str | dict[str, str] | None = None,
    **extra: Any,
) -> Path:
    """Write ``graph`` as a typed dataset directory (atomically, chunked).

    Args:
        graph: The typed graph (its arrays may themselves be memory maps; compact feature
            tables are written as stored).
        out: Target directory.
        overwrite: Replace an existing directory once the new one is complete.
        feature_dtype: Store the feature tables compact (:class:`TypedDatasetWriter`'s).
        **extra: Additional JSON-serialisable fields for ``meta.json`` (e.g. ``source``).

    Returns:
        The dataset directory.
    """
    with TypedDatasetWriter(
        out, graph.schema, name=graph.name, overwrite=overwrite, feature_dtype=feature_dtype
    ) as w:
        for rel in graph.schema.relations:
            indptr, indices = graph.csc[rel]
            w.put_relation(rel, indptr, indices, graph.edge_time.get(rel))
        for t in graph.schema.node_types:
            if t in graph.x:
                w.put(f"x/{t}", graph.x[t])
            if t in graph.node_time:
                w.put(f"node_time/{t}", graph.node_time[t])
        for k in _TARGET_ARRAYS:
            v = getattr(graph, k)
            if v is not None:
                w.put(k, v)
        return w.commit(num_classes=graph.num_classes, **extra)


def read_typed_meta(path: str | os.PathLike[str]) -> tuple[dict[str, Any], HeteroSchema]:
    """Read and check ``meta.json`` of a typed dataset directory; returns it and its schema.

    Raises:
        DatasetError: No dataset at ``path``, a homogeneous one, or a malformed ``meta.json``
            (each one line naming the key and the fix).
    """
    root, meta_path, meta = open_meta(path)
    if dataset_kind_of(meta, meta_path) != TYPED_KIND:
        raise DatasetError(
            f"'{root}' holds a homogeneous dataset (one node type); open it with open_dataset"
        )
    require_meta_keys(meta, meta_path, ("schema", "num_nodes", "num_edges", "arrays"))
    schema = _check_schema(meta["schema"], meta_path)
    _meta_int(meta, "num_nodes", meta_path, 0, MAX_NODES)
    _meta_int(meta, "num_edges", meta_path, 0, MAX_EDGES)
    _check_layout(meta, schema, meta_path)
    return meta, schema


def _check_schema(raw: Any, where: Path) -> HeteroSchema:
    if not isinstance(raw, dict):
        raise _meta_error(where, "schema", raw, "expected an object {node_types, ...}")
    for key, most in (("node_types", MAX_TYPES), ("num_nodes", MAX_TYPES)):
        v = raw.get(key)
        if not isinstance(v, list) or len(v) > most:
            raise _meta_error(where, f"schema.{key}", v, f"expected a list of at most {most}")
    if any(isinstance(c, bool) or not isinstance(c, int) for c in raw["num_nodes"]) or any(
        not 0 <= c <= MAX_NODES for c in raw["num_nodes"]
    ):
        raise _meta_error(
            where, "schema.num_nodes", raw["num_nodes"], f"expected integers in [0, {MAX_NODES}]"
        )
    rels = raw.get("relations")
    if not isinstance(rels, list) or len(rels) > MAX_RELATIONS:
        raise _meta_error(
            where, "schema.relations", rels, f"expected a list of at most {MAX_RELATIONS}"
        )
    if any(not isinstance(r, list) or any(not isinstance(p, str) for p in r) for r in rels):
        raise _meta_error(where, "schema.relations", rels, "expected [src, name, dst] strings")
    try:
        return HeteroSchema.from_dict(raw)
    except GraphError as err:
        raise DatasetError(f"'{where}': schema is invalid: {err}; re-create the dataset") from err


def _check_layout(meta: dict[str, Any], schema: HeteroSchema, where: Path) -> None:
    """The arrays ``meta.json`` lists against the schema: names, dtypes and shapes."""
    if meta.get("num_classes") is not None:
        _meta_int(meta, "num_classes", where, 1, 1 << 20)
    name = meta.get("name", "")
    if not isinstance(name, str) or len(name) > 1000:
        raise _meta_error(where, "name", name, "expected a string of <= 1000 chars")
    arrays = meta["arrays"]
    if not isinstance(arrays, dict):
        raise _meta_error(where, "arrays", arrays, "expected an object {name: {dtype, shape}}")
    counts = dict(zip(schema.node_types, schema.num_nodes, strict=True))
    problem = typed_compact_meta_problem(meta, counts)  # feature_dtype, arrays.x/TYPE
    if problem is not None:
        raise _meta_error(where, *problem)
    compact = {f"x/{t}" for t in meta.get("feature_dtype") or {}}
    known = array_names(schema)
    for name, spec in arrays.items():
        if name not in known:
            raise _meta_error(
                where,
                "arrays",
                name,
                "not an array of this schema (rel/SRC.NAME.DST/indptr, "
                "rel/SRC.NAME.DST/indices, rel/SRC.NAME.DST/edge_time, x/TYPE, node_time/TYPE, "
                "y, *_mask)",
            )
        if not isinstance(spec, dict) or not {"dtype", "shape"} <= set(spec):
            raise _meta_error(where, f"arrays.{name}", spec, 'expected {"dtype", "shape"}')
        dt = _check_spec_dtype(spec["dtype"], where, f"arrays.{name}")
        shape = spec["shape"]
        if not isinstance(shape, list) or any(
            isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= MAX_EDGES for d in shape
        ):
            raise _meta_error(where, f"arrays.{name}.shape", shape, "expected a list of integers")
        want, kind = _expected(schema, name, shape)
        if tuple(shape) != want[: len(shape)] or len(shape) != len(want):
            raise _meta_error(where, f"arrays.{name}.shape", shape, f"expected {list(want)}")
        if dt.kind not in kind and name not in compact:
            raise _meta_error(where, f"arrays.{name}.dtype", spec["dtype"], _KINDS[kind])
    total = 0
    for rel in schema.relations:
        for part in ("indptr", "indices"):
            if f"rel/{relation_key(rel)}/{part}" not in arrays:
                raise DatasetError(
                    f"'{where}' lists no {part} of relation {rel}; every relation needs its CSC "
                    f"(indptr and indices), re-create the dataset"
                )
        total += arrays[f"rel/{relation_key(rel)}/indices"]["shape"][0]
    _check_time_layout(meta, schema, where)
    if meta.get("num_edges") != total:
        raise _meta_error(where, "num_edges", meta.get("num_edges"), f"expected {total}")
    if meta.get("num_nodes") != schema.total_nodes:
        raise _meta_error(
            where,
            "num_nodes",
            meta.get("num_nodes"),
            f"expected {schema.total_nodes}, the sum of schema.num_nodes",
        )


def _check_time_layout(meta: dict[str, Any], schema: HeteroSchema, where: Path) -> None:
    """Edge times of every relation or none, each ``[E_r]``; the ``has_*``/``*_range`` keys."""
    arrays = meta["arrays"]
    timed = [r for r in schema.relations if f"rel/{relation_key(r)}/edge_time" in arrays]
    if timed and len(timed) != len(schema.relations):
        missing = [r for r in schema.relations if r not in timed]
        raise DatasetError(
            f"'{where}' lists edge times of some relations but not of {missing}; edge times "
            f"are given for every relation or none, re-create the dataset"
        )
    for rel in timed:
        key = relation_key(rel)
        e = arrays[f"rel/{key}/indices"]["shape"][0]
        if arrays[f"rel/{key}/edge_time"]["shape"] != [e]:
            raise _meta_error(
                where,
                f"arrays.rel/{key}/edge_time.shape",
                arrays[f"rel/{key}/edge_time"]["shape"],
                f"expected [{e}], one time per edge of relation {rel}",
            )
    listed = {
        "edge": bool(timed),
        "node": any(f"node_time/{t}" in arrays for t in schema.node_types),
    }
    _check_time_meta(meta, where, listed)


_KINDS = {
    "iu": "expected an integer dtype",
    "i": "expected a signed integer dtype",
    "f": "expected a float dtype",
    "b": "expected bool",
}


def _expected(schema: HeteroSchema, name: str, shape: list[int]) -> tuple[tuple[int, ...], str]:
    """The shape (``-1``: any) and dtype kinds array ``name`` must have."""
    if name.startswith("rel/"):
        key, part = name[4:].rsplit("/", 1)
        rel = next(r for r in schema.relations if relation_key(r) == key)
        if part == "indptr":
            return (schema.count(rel[2]) + 1,), "i"
        if part == "edge_time":
            return (shape[0] if shape else -1,), "i"
        return (shape[0] if shape else -1,), "iu"
    if name.startswith("node_time/"):
        return (schema.count(name[len("node_time/") :]),), "i"
    if name.startswith("x/"):
        n = schema.count(name[2:])
        return (n, shape[1] if len(shape) == 2 else -1), "f"
    n = schema.count(schema.target)  # type: ignore[arg-type]
    return (n,), ("i" if name == "y" else "b")


def _check_values(
    root: Path,
    schema: HeteroSchema,
    names: list[str],
    num_classes: int | None,
    progress: Progress | None = None,
    compact: dict[str, Any] | None = None,
) -> None:
    """Check every value of the arrays ``names`` under ``root``.

    ``compact``: the dataset's ``meta.json``; its ``feature_dtype`` tables are checked as they
    read back.
    """
    rels = {
        str(rel): (
            root / f"rel/{relation_key(rel)}/indptr.npy",
            root / f"rel/{relation_key(rel)}/indices.npy",
            schema.count(rel[0]),
        )
        for rel in schema.relations
    }
    feats = {t: root / f"x/{t}.npy" for t in schema.node_types if f"x/{t}" in names}
    target = {k: root / f"{k}.npy" for k in _TARGET_ARRAYS if k in names}
    edge_times = {
        str(rel): root / f"rel/{relation_key(rel)}/edge_time.npy"
        for rel in schema.relations
        if f"rel/{relation_key(rel)}/edge_time" in names
    }
    node_times = {
        t: root / f"node_time/{t}.npy" for t in schema.node_types if f"node_time/{t}" in names
    }
    check_typed_values(
        rels,
        feats,
        target,
        num_classes=num_classes,
        progress=progress,
        edge_times=edge_times,
        node_times=node_times,
        feature_dtypes=(compact or {}).get("feature_dtype"),
    )


def open_typed_dataset(
    path: str | os.PathLike[str],
    mmap: bool = True,
    validate: Validation | None = None,
    progress: Progress | None = None,
) -> HeteroGraph:
    """Open a typed dataset directory as a :class:`HeteroGraph` of read-only memory maps.

    Values are checked as :func:`~fleetgnn.graph.dataset.open_dataset` checks them: once, when
    the dataset was written, and again only when the files no longer match ``verified.json``
    (an edit, a truncated copy), recording the stamp again where the directory is writable.

    Args:
        path: The dataset directory.
        mmap: Map arrays (constant-time open, paged on demand); ``False`` reads them into RAM.
        validate: ``None`` (default) as above; ``"full"`` checks every value (and records the
            stamp), ``"structure"`` only files, dtypes, shapes and ``indptr``'s ends.
        progress: Called as ``progress(done_bytes, total_bytes)`` while values are checked.

    Raises:
        DatasetError: Missing, truncated or inconsistent files, or invalid contents (one line).
    """
    root = Path(path)
    meta, schema = read_typed_meta(root)
    specs = meta["arrays"]
    arrays = {name: _load_array(root, name, spec, mmap) for name, spec in specs.items()}
    record, quiet = validate == "full", False
    if validate is None:
        problem = stamp_problem(root, list(specs))
        size = sum(int(np.prod(spec["shape"])) for spec in specs.values())
        validate = "structure" if problem is None else "full"
        record = problem is not None
        quiet = size <= _FULL_CHECK_LIMIT
        if problem is not None and not quiet:
            warnings.warn(
                f"checking every value of typed dataset '{root}' once, because {problem}; "
                f"later opens skip this until a file changes",
                stacklevel=2,
            )
    if validate == "full":
        prints = _fingerprints(root, list(specs)) if record else None
        t0 = time.perf_counter()
        try:
            _check_values(
                root, schema, list(specs), meta.get("num_classes"), progress, compact=meta
            )
        except GraphError as err:
            raise DatasetError(f"dataset '{root}' is invalid: {err}") from err
        if prints is not None:
            try:
                write_json_atomic(root / STAMP, _stamp(prints, time.perf_counter() - t0))
            except (OSError, FleetgnnError) as e:
                if not quiet:
                    warnings.warn(
                        f"every value of '{root}' is valid, but this cannot be recorded in "
                        f"'{root / STAMP}' ({getattr(e, 'strerror', None) or e}); the next "
                        f"open checks every value again",
                        stacklevel=2,
                    )
    csc = {
        rel: (arrays[f"rel/{relation_key(rel)}/indptr"], arrays[f"rel/{relation_key(rel)}/indices"])
        for rel in schema.relations
    }
    x = {t: arrays[f"x/{t}"] for t in schema.node_types if f"x/{t}" in arrays}
    if meta.get("feature_dtype"):  # compact tables, read back as floats
        from fleetgnn.graph.compact_rows import typed_compact_rows

        x = {t: typed_compact_rows(rows, meta, t) for t, rows in x.items()}
    try:
        return HeteroGraph(
            schema=schema,
            csc=csc,
            x=x,
            y=arrays.get("y"),
            train_mask=arrays.get("train_mask"),
            val_mask=arrays.get("val_mask"),
            test_mask=arrays.get("test_mask"),
            num_classes=meta.get("num_classes"),
            name=str(meta.get("name", root.name)),
            edge_time={
                rel: arrays[f"rel/{relation_key(rel)}/edge_time"]
                for rel in schema.relations
                if f"rel/{relation_key(rel)}/edge_time" in arrays
            },
            node_time={
                t: arrays[f"node_time/{t}"] for t in schema.node_types if f"node_time/{t}" in arrays
            },
            validate="structure",
        )
    except GraphError as err:
        raise DatasetError(f"dataset '{root}' is invalid: {err}") from err


def typed_dataset_fingerprint(path: str | os.PathLike[str]) -> str:
    """One hash of a typed dataset's files, as ``dataset_fingerprint`` hashes a graph's."""
    root = Path(path)
    meta, _ = read_typed_meta(root)
    return files_fingerprint(root, meta["arrays"])


def open_any_dataset(
    path: str | os.PathLike[str],
    mmap: bool = True,
    validate: Validation | None = None,
    progress: Progress | None = None,
) -> Graph | HeteroGraph:
    """Open a dataset directory of either kind: a :class:`Graph` or a :class:`HeteroGraph`.

    What the commands that train typed and homogeneous data alike (``fleetgnn train``,
    ``fleetgnn plan``) open; the arguments are :func:`open_typed_dataset`'s.

    Raises:
        DatasetError: As :func:`~fleetgnn.graph.dataset.open_dataset` or
            :func:`open_typed_dataset`.
    """
    if dataset_kind(path) == TYPED_KIND:
        return open_typed_dataset(path, mmap=mmap, validate=validate, progress=progress)
    return open_dataset(path, mmap=mmap, validate=validate, progress=progress)


def any_dataset_fingerprint(path: str | os.PathLike[str]) -> str:
    """:func:`~fleetgnn.graph.dataset.dataset_fingerprint` of a dataset of either kind."""
    if dataset_kind(path) == TYPED_KIND:
        return typed_dataset_fingerprint(path)
    return dataset_fingerprint(path)
