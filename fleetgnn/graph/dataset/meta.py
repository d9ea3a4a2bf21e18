"""A dataset's ``meta.json``: the format's constants, its reading and its checks, both layouts.

See :mod:`fleetgnn.graph.dataset` for the layouts it describes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from fleetgnn.config.knobs import FEATURE_NORMS
from fleetgnn.config.textfile import parse_json, path_kind, read_bytes
from fleetgnn.durable import atomic_write_text
from fleetgnn.errors import DatasetError, FleetgnnError, GraphError
from fleetgnn.graph.csc import SPLITS
from fleetgnn.graph.hetero import HeteroSchema, Relation
from fleetgnn.graph.row_array import compact_meta_problem, typed_compact_meta_problem

FORMAT_VERSION = 1
META = "meta.json"
#: Ranges ``meta.json`` is checked against (:func:`check_meta`).
MAX_NODES = 1 << 40
MAX_EDGES = 1 << 48
MAX_FEATURES = 1 << 24
MAX_CLASSES = 1 << 20
MAX_NAME_CHARS = 1000
#: Most node types and relations a typed ``meta.json`` may declare.
MAX_TYPES = 4096
MAX_RELATIONS = 4096
#: Largest and deepest metadata file read (``meta.json``, a partition book's ``book.json``).
MAX_META_BYTES = 16 << 20
MAX_META_DEPTH = 16
_NATIVE = "<" if np.little_endian else ">"
#: ``meta.json``'s ``kind`` of a homogeneous dataset (also when absent) and of a typed one.
GRAPH_KIND = "graph"
TYPED_KIND = "typed"
#: The commands that read typed datasets (named when another command refuses one).
TYPED_COMMANDS: tuple[str, ...] = ("'fleetgnn info'", "'fleetgnn train'", "'fleetgnn plan'")
ARRAYS: tuple[str, ...] = (
    "indptr",
    "indices",
    "x",
    "y",
    *SPLITS,
    "node_time",
    "edge_weight",
    "edge_attr",
    "edge_time",
)
REQUIRED: tuple[str, ...] = ("indptr", "indices")
#: The arrays of a typed dataset's target type.
_TARGET_ARRAYS = ("y", *SPLITS)
#: The optional time arrays, ``{kind}_time.npy``, recorded in ``meta.json`` as
#: ``has_{kind}_time`` and ``{kind}_time_range``.
TIMES: tuple[str, ...] = ("edge", "node")
#: The verification stamp: the fingerprints of the files whose values were all checked.
STAMP = "verified.json"
STAMP_VERSION = 1
Progress = Callable[[int, int], None]


def relation_key(rel: Relation) -> str:
    """``"src.name.dst"``: a relation's directory name under ``rel/``."""
    return ".".join(rel)


def array_names(schema: HeteroSchema | None) -> dict[str, str]:
    """Every array name a dataset of ``schema`` may hold -> what it is (for messages).

    ``None``: a homogeneous dataset's (:data:`ARRAYS`).
    """
    if schema is None:
        return {name: name for name in ARRAYS}
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


def time_arrays(schema: HeteroSchema | None) -> dict[str, list[str]]:
    """Each time kind (:data:`TIMES`) -> the arrays that hold such times in ``schema``'s layout.

    A homogeneous dataset (``None``) has one of each (``edge_time``, ``node_time``); a typed one
    an ``edge_time`` per relation and a ``node_time`` per node type.
    """
    if schema is None:
        return {kind: [f"{kind}_time"] for kind in TIMES}
    return {
        "edge": [f"rel/{relation_key(r)}/edge_time" for r in schema.relations],
        "node": [f"node_time/{t}" for t in schema.node_types],
    }


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (see :func:`atomic_write_text`)."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True))


def read_json_meta(
    path: Path,
    *,
    version: int,
    keys: Iterable[str],
    error: type[FleetgnnError],
    fix: str,
) -> dict[str, Any]:
    """Read a JSON metadata file: an object with ``format_version == version`` and ``keys``.

    Raises:
        error: The file is not valid JSON, not an object, of another version, or lacks a key;
            each message ends with ``fix``.
    """
    # bounded: a regular file (never a FIFO or device) of at most MAX_META_BYTES, UTF-8
    data = read_bytes(path, "", max_bytes=MAX_META_BYTES, error=error, fix=fix)
    meta = parse_json(data, f"'{path}'", error=error, fix=fix)
    if not isinstance(meta, dict):
        raise error(f"'{path}' must hold a JSON object; {fix}")
    depth = _json_depth(meta)
    if depth > MAX_META_DEPTH:
        raise error(
            f"'{path}' nests {depth} levels deep, more than the {MAX_META_DEPTH} a metadata file "
            f"may have; {fix}"
        )
    if meta.get("format_version") != version:
        raise error(
            f"'{path}' has format_version {meta.get('format_version')!r}; this fleetgnn reads "
            f"version {version}; {fix}"
        )
    for key in keys:
        if key not in meta:
            raise error(f"'{path}' lacks the key {key!r}; {fix}")
    return meta


def _json_depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (iterative: no recursion on hostile input)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in item)
    return deepest


_META_FIX = "re-create the dataset with 'fleetgnn prepare'"


def open_meta(path: str | os.PathLike[str]) -> tuple[Path, Path, dict[str, Any]]:
    """``(root, meta.json path, meta)`` of a dataset directory of either kind.

    Checks only that the directory and its ``meta.json`` exist and that the file is a JSON
    object of this format version; :func:`read_meta` checks the rest.

    Raises:
        DatasetError: No directory at ``path``, no ``meta.json`` in it, or an unreadable one.
    """
    root = Path(path)
    if not root.is_dir():
        kind = path_kind(root)
        if kind != "missing":
            raise DatasetError(
                f"dataset directory '{root}' is {kind}, not a directory; give the directory "
                f"'fleetgnn prepare' wrote"
            )
        raise DatasetError(
            f"dataset directory '{root}' does not exist; create one with 'fleetgnn prepare'"
        )
    meta_path = root / META
    if not meta_path.is_file():
        raise DatasetError(
            f"'{root}' has no {META}: it is not a fleetgnn dataset, or its write was interrupted; "
            f"run 'fleetgnn prepare' again"
        )
    meta = read_json_meta(
        meta_path, version=FORMAT_VERSION, keys=(), error=DatasetError, fix=_META_FIX
    )
    return root, meta_path, meta


def require_meta_keys(meta: dict[str, Any], meta_path: Path, keys: Iterable[str]) -> None:
    """Refuse, in one line, a ``meta.json`` that lacks one of ``keys``."""
    for key in keys:
        if key not in meta:
            raise DatasetError(f"'{meta_path}' lacks the key {key!r}; {_META_FIX}")


def read_meta(path: str | os.PathLike[str], *, kind: str | None = None) -> dict[str, Any]:
    """Read and check ``meta.json`` of a dataset directory (:func:`check_meta`).

    Args:
        path: The dataset directory.
        kind: ``None``: either kind of dataset; ``"graph"``: refuse a typed one in one line
            naming the commands that read typed data; ``"typed"``: refuse a homogeneous one.

    Raises:
        DatasetError: No dataset at ``path``, one of the other kind, or a malformed
            ``meta.json`` (each one line naming the key and the fix).
    """
    return _read_meta(path, kind)[0]


def _read_meta(
    path: str | os.PathLike[str], kind: str | None
) -> tuple[dict[str, Any], HeteroSchema | None]:
    """:func:`read_meta` and the schema of a typed dataset (``None``: a homogeneous one)."""
    if kind not in (None, GRAPH_KIND, TYPED_KIND):
        raise DatasetError(f"kind = {kind!r} is invalid: expected None, 'graph' or 'typed'")
    root, meta_path, meta = open_meta(path)
    found = dataset_kind_of(meta, meta_path)
    if kind == GRAPH_KIND and found == TYPED_KIND:
        raise DatasetError(typed_refusal(root, meta))
    if kind == TYPED_KIND and found == GRAPH_KIND:
        raise DatasetError(
            f"'{root}' holds a homogeneous dataset (one node type), not a typed one; open it "
            f"with open_dataset(path) or kind='graph'"
        )
    if found == GRAPH_KIND:
        require_meta_keys(meta, meta_path, ("num_nodes", "num_edges", "num_features", "arrays"))
        check_meta(meta, meta_path)
        return meta, None
    require_meta_keys(meta, meta_path, ("schema", "num_nodes", "num_edges", "arrays"))
    schema = _check_schema(meta["schema"], meta_path)
    _meta_int(meta, "num_nodes", meta_path, 0, MAX_NODES)
    _meta_int(meta, "num_edges", meta_path, 0, MAX_EDGES)
    _check_typed_layout(meta, schema, meta_path)
    return meta, schema


def dataset_kind_of(meta: dict[str, Any], where: Path) -> str:
    """``meta.json``'s ``kind``: ``"graph"`` or ``"typed"`` (see the layouts above).

    A ``meta.json`` without the key (every dataset written before typed ones existed) is a graph.
    """
    kind = meta.get("kind", GRAPH_KIND)
    if kind not in (GRAPH_KIND, TYPED_KIND):
        raise _meta_error(where, "kind", kind, f"expected {GRAPH_KIND!r} or {TYPED_KIND!r}")
    return str(kind)


def dataset_kind(path: str | os.PathLike[str]) -> str:
    """``"graph"`` or ``"typed"``: which opener reads the dataset directory ``path``.

    Raises:
        DatasetError: ``path`` is not a dataset directory or its ``meta.json`` is unreadable.
    """
    _, meta_path, meta = open_meta(path)
    return dataset_kind_of(meta, meta_path)


def typed_refusal(root: Path, meta: dict[str, Any]) -> str:
    """The one line a homogeneous-only reader gives for a typed dataset."""
    schema = meta.get("schema")
    shown = ""
    if isinstance(schema, dict):
        types, rels = schema.get("node_types"), schema.get("relations")
        if isinstance(types, list) and isinstance(rels, list):
            shown = f" ({len(types)} node types, {len(rels)} relations)"
    return (
        f"'{root}' holds a typed (heterogeneous) dataset{shown}, which this command does not "
        f"read (it takes one node type and one relation); typed datasets are read by "
        f"{', '.join(TYPED_COMMANDS)} (and fleetgnn.graph.open_dataset in Python)"
    )


def _meta_error(where: Path, key: str, value: Any, want: str) -> DatasetError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:60] + "..."
    return DatasetError(
        f"'{where}': {key} = {shown} is invalid: {want}; the file is corrupt or was not written "
        f"by fleetgnn, re-create the dataset with 'fleetgnn prepare'"
    )


def _meta_int(meta: dict[str, Any], key: str, where: Path, low: int, high: int) -> None:
    value = meta[key]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _meta_error(where, key, value, f"expected an integer in [{low}, {high}]")


def check_meta(meta: dict[str, Any], where: Path) -> None:
    """Check a homogeneous dataset's ``meta.json`` against its schema before any field is used.

    Types and ranges: ``num_nodes`` in [0, :data:`MAX_NODES`], ``num_edges`` in [0,
    :data:`MAX_EDGES`], ``num_features`` in [0, :data:`MAX_FEATURES`], ``num_classes`` ``null``
    or in [1, :data:`MAX_CLASSES`] (all integers, not floats or strings), ``name`` a string of
    at most :data:`MAX_NAME_CHARS` characters, ``feature_norm`` a known transform, and
    ``arrays`` an object mapping known array names to ``{"dtype", "shape"}``: a dtype string of
    a bool, integer or float type in native (or no) byte order, a shape of one or two integers.
    A typed dataset's is checked against its schema (:func:`read_meta`).

    Raises:
        DatasetError: The first violation, naming the key, the value and the valid range.
    """
    _meta_int(meta, "num_nodes", where, 0, MAX_NODES)
    _meta_int(meta, "num_edges", where, 0, MAX_EDGES)
    _meta_int(meta, "num_features", where, 0, MAX_FEATURES)
    _check_named(meta, where)
    _check_time_meta(meta, where)
    problem = compact_meta_problem(meta)  # feature_dtype, feature_read_dtype, arrays.x
    if problem is not None:
        raise _meta_error(where, *problem)
    for name, spec in _specs(meta, where).items():
        if name not in ARRAYS:
            raise _meta_error(where, "arrays", name, f"unknown array; valid: {', '.join(ARRAYS)}")
        _check_spec(spec, where, name, (1, 2), f"expected 1 or 2 integers in [0, {MAX_EDGES}]")


def _check_named(meta: dict[str, Any], where: Path) -> None:
    """``num_classes`` null or in range, ``name`` a short string, ``feature_norm`` known."""
    if meta.get("num_classes") is not None:
        _meta_int(meta, "num_classes", where, 1, MAX_CLASSES)
    name = meta.get("name", "")
    if not isinstance(name, str) or len(name) > MAX_NAME_CHARS:
        raise _meta_error(where, "name", name, f"expected a string of <= {MAX_NAME_CHARS} chars")
    if "feature_norm" in meta:
        _check_feature_norm(meta["feature_norm"], f"'{where}': feature_norm")


def _specs(meta: dict[str, Any], where: Path) -> dict[str, Any]:
    """``meta.json``'s ``arrays``, an object."""
    arrays = meta["arrays"]
    if not isinstance(arrays, dict):
        raise _meta_error(where, "arrays", arrays, "expected an object {name: {dtype, shape}}")
    return arrays


def _check_spec(
    spec: Any, where: Path, name: str, dims: tuple[int, ...] | None, want: str
) -> tuple[np.dtype, list[int]]:
    """Array ``name``'s ``{"dtype", "shape"}``: its dtype, and its shape (``dims`` long).

    The shape is a list of integers in ``[0, MAX_EDGES]`` (``want`` says what is expected).
    """
    key = f"arrays.{name}"
    if not isinstance(spec, dict) or not {"dtype", "shape"} <= set(spec):
        raise _meta_error(where, key, spec, 'expected {"dtype": ..., "shape": [...]}')
    dt = _check_spec_dtype(spec["dtype"], where, key)
    shape = spec["shape"]
    if (
        not isinstance(shape, list)
        or (dims is not None and len(shape) not in dims)
        or any(isinstance(d, bool) or not isinstance(d, int) for d in shape)
        or any(not 0 <= d <= MAX_EDGES for d in shape)
    ):
        raise _meta_error(where, f"{key}.shape", shape, want)
    return dt, shape


def _check_schema(raw: Any, where: Path) -> HeteroSchema:
    """A typed ``meta.json``'s ``schema``: its node types, their counts and its relations."""
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


def _check_typed_layout(meta: dict[str, Any], schema: HeteroSchema, where: Path) -> None:
    """The arrays a typed ``meta.json`` lists against the schema: names, dtypes and shapes."""
    _check_named(meta, where)
    arrays = _specs(meta, where)
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
        dt, shape = _check_spec(spec, where, name, None, "expected a list of integers")
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
    _check_time_meta(meta, where, schema)
    if meta.get("num_edges") != total:
        raise _meta_error(where, "num_edges", meta.get("num_edges"), f"expected {total}")
    if meta.get("num_nodes") != schema.total_nodes:
        raise _meta_error(
            where,
            "num_nodes",
            meta.get("num_nodes"),
            f"expected {schema.total_nodes}, the sum of schema.num_nodes",
        )


_KINDS = {
    "iu": "expected an integer dtype",
    "i": "expected a signed integer dtype",
    "f": "expected a float dtype",
    "b": "expected bool",
}


def _expected(schema: HeteroSchema, name: str, shape: list[int]) -> tuple[tuple[int, ...], str]:
    """The shape (``-1``: any) and dtype kinds typed array ``name`` must have."""
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


def _check_time_meta(meta: dict[str, Any], where: Path, schema: HeteroSchema | None = None) -> None:
    """``has_{edge,node}_time`` agreeing with ``arrays``; ``*_time_range`` null or [lo, hi].

    Whether each kind's times are among the arrays is read from the layout of ``schema``
    (:func:`time_arrays`; ``None``: a homogeneous dataset).
    """
    arrays = meta.get("arrays")
    listed = arrays if isinstance(arrays, dict) else {}
    files = time_arrays(schema)
    for kind in TIMES:
        name = f"{kind}_time"
        there = any(f in listed for f in files[kind])
        has = meta.get(f"has_{name}", False)
        if not isinstance(has, bool) or has != there:
            raise _meta_error(
                where,
                f"has_{name}",
                has,
                f"expected {str(there).lower()} ({kind} times are "
                f"{'' if there else 'not '}listed in arrays)",
            )
        span = meta.get(f"{name}_range")
        if span is not None and not (
            isinstance(span, list)
            and len(span) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in span)
            and span[0] <= span[1]
        ):
            raise _meta_error(
                where, f"{name}_range", span, "expected null or [min, max], 0 <= min <= max"
            )


def _check_spec_dtype(value: Any, where: Path, key: str) -> np.dtype:
    want = "a dtype string of a bool, integer or float type, e.g. '<f4'"
    if not isinstance(value, str) or len(value) > 16:
        raise _meta_error(where, f"{key}.dtype", value, want)
    try:
        dt = np.dtype(value)
    except (TypeError, ValueError, SyntaxError):
        raise _meta_error(where, f"{key}.dtype", value, want) from None
    if dt.kind not in "biuf" or dt.fields is not None or dt.subdtype is not None:
        raise _meta_error(where, f"{key}.dtype", value, want)
    if dt.byteorder not in ("=", "|") and dt.byteorder != _NATIVE:
        raise _meta_error(
            where,
            f"{key}.dtype",
            value,
            "the array is stored big-endian, which fleetgnn does not map; convert it to native "
            "byte order (np.save(f, a.astype(a.dtype.newbyteorder('='))))",
        )
    return dt


def _check_feature_norm(value: Any, where: str) -> str:
    if value not in FEATURE_NORMS:
        raise DatasetError(
            f"{where} = {value!r} is not a feature transform fleetgnn knows; use one of "
            f"{', '.join(FEATURE_NORMS)}"
        )
    return str(value)


def dataset_feature_norm(path: str | os.PathLike[str]) -> str:
    """The feature transform a dataset directory's ``meta.json`` records (``"none"`` if absent).

    ``"row"`` (each feature row scaled to sum 1) is what ``fleetgnn prepare planetoid`` and
    ``prepare npz`` record: the customary preprocessing of those bag-of-words features.

    Raises:
        DatasetError: The directory is not a dataset, or the recorded value is unknown.
    """
    return str(read_meta(path).get("feature_norm", "none"))  # checked by read_meta
