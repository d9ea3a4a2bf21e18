"""Datasets on disk: a directory of ``.npy`` arrays plus ``meta.json``, opened as memory maps.

Layout (format version 1)::

    DIR/meta.json        {"format_version": 1, "name", "num_nodes", "num_edges", "num_features",
                          "num_classes", "arrays": {name: {"dtype", "shape"}}, ...}
    DIR/indptr.npy       int64 [N + 1]   CSC offsets
    DIR/indices.npy      int32/int64 [E] in-neighbours, grouped by destination
    DIR/x.npy            float [N, F]    (optional; or compact: see below)
    DIR/y.npy            int64 [N]       (optional, -1 = unlabelled)
    DIR/{train,val,test}_mask.npy  bool [N]  (optional)
    DIR/node_time.npy    int64 [N]       (optional) node times >= 0 (when each label is asked)
    DIR/edge_weight.npy  float [E]       (optional)
    DIR/edge_attr.npy    float [E, D]    (optional) edge features, row e for edge e
    DIR/edge_time.npy    int64 [E]       (optional) edge times >= 0, sorted within each node's
                                         in-edges (see fleetgnn.graph.edge_time)
    DIR/verified.json    {"check_version", "files": {file: {"bytes", "mtime_ns", "sample"}}}

``meta.json`` may also say ``"feature_norm"``: the transform the dataset's features customarily
get before training (``"row"`` for Planetoid's and gnn-benchmark's bag-of-words features, as in
the GCN paper's preprocessing), which ``fleetgnn train`` applies unless ``data.feature_norm`` says
otherwise. The key is optional: a dataset without it (any written before it existed) means
``"none"``, so the format version is unchanged. Likewise ``"has_edge_time"`` (``true`` when
``edge_time.npy`` is there) and ``"edge_time_range"`` (``[min, max]``, ``null`` without edges),
written with every dataset that has edge times, and ``"has_node_time"`` / ``"node_time_range"``
(``null`` without nodes) with every dataset that has node times; a dataset without them has none.

With ``"feature_dtype"`` (``prepare --feature-dtype``) ``x.npy`` holds compact rows and
``"feature_read_dtype"`` the float they read back as (:mod:`fleetgnn.graph.compact_rows`). A
reader without the key refuses such a ``x.npy`` in one line (``'x' must be a float array``),
except a float16 one, which it reads as the same values: the format version is unchanged.

Writing goes through :class:`DatasetWriter`: arrays are created as ``.npy`` memory maps in a
temporary sibling directory (``.NAME.tmp-<pid>-<tag>-<random>``, so that a later run can sweep it
once its owner is gone: :mod:`fleetgnn.graph.files`), with their space reserved on disk first (a
full disk is a one-line :class:`~fleetgnn.errors.DiskFullError`, never a SIGBUS), and filled in
chunks; ``meta.json`` is written last, and the directory gets the user's umask and is renamed into
place, so an interrupted write never leaves a directory that looks complete.
Opening maps every array with ``np.load(mmap_mode='r')`` (constant time, paged on demand) after
checking that files, dtypes and shapes agree with ``meta.json``. Values are checked once, by
:meth:`DatasetWriter.commit` (streaming, :mod:`fleetgnn.graph.verify`), which records the files'
fingerprints in ``verified.json``; :func:`open_dataset` compares them and checks the values again
only for files that changed since (or a dataset without the record).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fleetgnn.config.knobs import FEATURE_NORMS
from fleetgnn.config.textfile import parse_json, path_kind, read_bytes
from fleetgnn.durable import atomic_write_text, fsync_dir, refresh_free
from fleetgnn.errors import DatasetError, FleetgnnError, GraphError
from fleetgnn.graph.csc import SPLITS, Graph, Validation
from fleetgnn.graph.edge_time import time_range
from fleetgnn.graph.files import (
    apply_umask,
    create_npy,
    exchange_dirs,
    npy_error,
    swap_in_progress,
    temp_prefix,
)
from fleetgnn.graph.row_array import RowArray, compact_meta_problem
from fleetgnn.graph.verify import CHECK_VERSION, check_values, fingerprint

FORMAT_VERSION = 1
META = "meta.json"
#: Ranges ``meta.json`` is checked against (:func:`check_meta`).
MAX_NODES = 1 << 40
MAX_EDGES = 1 << 48
MAX_FEATURES = 1 << 24
MAX_CLASSES = 1 << 20
MAX_NAME_CHARS = 1000
#: Largest and deepest metadata file read (``meta.json``, a partition book's ``book.json``).
MAX_META_BYTES = 16 << 20
MAX_META_DEPTH = 16
#: Opens of a dataset replaced while it was read, before giving up (see :func:`open_dataset`).
_OPEN_TRIES = 3
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
#: The optional time arrays, ``{kind}_time.npy``, recorded in ``meta.json`` as
#: ``has_{kind}_time`` and ``{kind}_time_range``.
TIMES: tuple[str, ...] = ("edge", "node")
_COPY_CHUNK_BYTES = 64 << 20  # bounded memory when copying arrays into a dataset
#: Elements (``E + N * max(1, F)``) up to which ``open_dataset`` checks every value of a dataset
#: without a valid verification stamp at each open; above, it checks once and records a stamp.
_FULL_CHECK_LIMIT = 200_000_000
#: The verification stamp: the fingerprints of the files whose values were all checked.
STAMP = "verified.json"
STAMP_VERSION = 1
Progress = Callable[[int, int], None]


class DatasetWriter:
    """Writes a dataset directory atomically, array by array, in bounded memory.

    Use as a context manager; on an exception the temporary directory is removed and nothing
    appears at ``out``::

        with DatasetWriter(out, name="cora") as w:
            w.put("indptr", indptr)
            x = w.create("x", np.float32, (n, f))   # a writable .npy memory map
            for lo in range(0, n, chunk): x[lo:lo + chunk] = ...
            w.commit(num_classes=7)

    Args:
        out: Target directory; must not exist unless ``overwrite``.
        name: Dataset name stored in ``meta.json``.
        overwrite: Replace an existing dataset at ``out`` (only after the new one is complete).
        feature_dtype: Write ``x`` compact (:mod:`fleetgnn.graph.compact_rows`): encoded block
            by block by :meth:`put`, or, made with :meth:`create`, filled as floats and
            converted by :meth:`commit`. ``float32``: plain float32 rows. ``None``: as given.

    Raises:
        DatasetError: An unknown ``feature_dtype`` (before anything is written).
    """

    def __init__(
        self,
        out: str | os.PathLike[str],
        name: str,
        overwrite: bool = False,
        feature_dtype: str | None = None,
    ) -> None:
        self.codec = None
        if feature_dtype is not None:
            from fleetgnn.graph.compact_rows import writer_codec

            self.codec = writer_codec(feature_dtype)
        self.out = Path(out)
        self.name = name
        self.overwrite = overwrite
        if self.out.exists() and not overwrite:
            raise DatasetError(
                f"output directory '{self.out}' already exists; choose another --out or pass "
                f"--overwrite"
            )
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(self.out.name), dir=self.out.parent))
        self._arrays: dict[str, np.ndarray] = {}
        self._float_x: np.ndarray | None = None  # x as created, before commit converts it
        self._x_stored: tuple[Any, str] | None = None  # compact x: (its codec, read as)
        self._done = False

    #: The end of a disk-full message about a dataset being written.
    DISK_FULL_FIX = "free some space there, or write the dataset to another file system (--out)"

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if not self._done:
            self.abort()
            if exc is not None:
                refresh_free(exc)  # a DiskFullError shows the space free once the partial is gone

    def abort(self) -> None:
        """Remove the temporary directory; nothing is left at ``out``."""
        self._arrays.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)
        self._done = True

    def create(self, name: str, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """Create array ``name`` as a writable ``.npy`` memory map to be filled by the caller.

        The file's space is reserved first and the dtype made native-endian (a big-endian input
        is converted as it is copied in).

        Raises:
            DatasetError: Unknown array name.
            DiskFullError: Not enough space for the array.
        """
        if name not in ARRAYS:
            raise DatasetError(f"unknown dataset array {name!r}; valid names: {', '.join(ARRAYS)}")
        dt = np.dtype(dtype)
        if dt.byteorder not in ("=", "|"):
            dt = dt.newbyteorder("=")
        if name == "x" and self.codec is not None:  # floats, converted by commit
            self._float_x = self.scratch("x.float.npy", dt, tuple(shape))
            return self._float_x
        arr = create_npy(self.tmp / f"{name}.npy", dt, tuple(shape), self.DISK_FULL_FIX)
        self._arrays[name] = arr
        return arr

    def scratch(self, filename: str, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """A writable ``.npy`` memory map in the temporary directory, not part of the dataset.

        Its space is reserved like :meth:`create`'s; delete the file before :meth:`commit`.
        """
        return create_npy(self.tmp / filename, dtype, tuple(shape), self.DISK_FULL_FIX)

    def put(self, name: str, values: np.ndarray | RowArray) -> None:
        """Write a whole array in chunks of bounded size (``x``: :func:`.compact_rows.write_x`)."""
        if name == "x" and (self.codec is not None or isinstance(values, RowArray)):
            self._put_x(values)
        else:
            self._copy_in(name, values if isinstance(values, np.ndarray) else np.asarray(values))

    def _copy_in(self, name: str, values: np.ndarray) -> None:
        out = self.create(name, values.dtype, values.shape)
        row_bytes = max(1, values.itemsize * int(np.prod(values.shape[1:], dtype=np.int64)))
        step = max(1, _COPY_CHUNK_BYTES // row_bytes)
        for lo in range(0, values.shape[0], step):
            out[lo : lo + step] = values[lo : lo + step]

    def commit(self, num_classes: int | None = None, **extra: Any) -> Path:
        """Flush arrays, check every value, write ``meta.json`` and move the directory into place.

        The values are checked in bounded memory (:func:`~fleetgnn.graph.verify.check_values`)
        and the files' fingerprints recorded in ``verified.json`` (see :func:`open_dataset`).

        Raises:
            DatasetError: A required array is missing, a value is invalid (an ID out of range,
                a label outside ``[-1, num_classes)``, a NaN, ...), or ``feature_norm`` (in
                ``extra``) is not one of ``"none"``, ``"row"``.
        """
        if "feature_norm" in extra:
            _check_feature_norm(extra["feature_norm"], "feature_norm")
        for req in REQUIRED:
            if req not in self._arrays:
                raise DatasetError(f"dataset is missing required array {req!r}")
        if self._float_x is not None:
            self._put_x(self._float_x)
            self._float_x = None
            (self.tmp / "x.float.npy").unlink()
        arrays = self._flush()
        indptr = self._arrays["indptr"]
        x = self._arrays.get("x")
        if x is not None and self._x_stored is not None:  # compact rows: F, how to read them
            codec, read = self._x_stored
            extra = {"feature_dtype": codec.name, "feature_read_dtype": read, **extra}
            x = x[:, : x.shape[1] - (4 if codec.scaled else 0)]
        meta = {
            "format_version": FORMAT_VERSION,
            "name": self.name,
            "num_nodes": int(indptr.shape[0] - 1),
            "num_edges": int(self._arrays["indices"].shape[0]),
            "num_features": int(x.shape[1]) if x is not None else 0,
            "num_classes": int(num_classes) if num_classes is not None else None,
            "arrays": arrays,
            **extra,
        }
        self._arrays.clear()
        # every value is checked once, here, and the files' fingerprints recorded (verified.json),
        # so that opening the dataset later needs to compare fingerprints only
        t0 = time.perf_counter()
        try:
            check_values(
                {name: self.tmp / f"{name}.npy" for name in arrays},
                num_classes=meta["num_classes"],
                feature_dtype=meta.get("feature_dtype"),
            )
        except GraphError as err:
            raise DatasetError(f"the dataset written to '{self.out}' is invalid: {err}") from err
        for kind in TIMES:  # checked above: int64, one per edge (sorted per segment) or node
            if f"{kind}_time" not in arrays:
                continue
            times = np.load(self.tmp / f"{kind}_time.npy", mmap_mode="r", allow_pickle=False)
            span = time_range(times)
            del times
            meta[f"has_{kind}_time"] = True
            meta[f"{kind}_time_range"] = None if span is None else list(span)
        return self._publish(meta, arrays, time.perf_counter() - t0)

    def _put_x(self, values: np.ndarray | RowArray) -> None:
        """Write ``x`` in the stored form of :attr:`codec` (or as ``values`` store it)."""
        from fleetgnn.graph.compact_rows import write_x

        def create(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
            arr = create_npy(self.tmp / "x.npy", dtype, shape, self.DISK_FULL_FIX)
            self._arrays["x"] = arr
            return arr

        try:
            self._x_stored = write_x(values, self.codec, self._copy_in, create, _COPY_CHUNK_BYTES)
        except GraphError as err:
            raise DatasetError(str(err)) from None

    def _flush(self) -> dict[str, dict[str, Any]]:
        """Flush every array written; their ``{"dtype", "shape"}`` specs by name."""
        arrays = {}
        for name, arr in self._arrays.items():
            arr.flush()
            arrays[name] = {"dtype": arr.dtype.str, "shape": list(arr.shape)}
        return arrays

    def _publish(self, meta: dict[str, Any], arrays: dict[str, Any], seconds: float) -> Path:
        """Write the checked dataset's ``meta.json`` and stamp, and move it in place.

        ``seconds``: how long checking its values took (recorded in the stamp). Every directory
        of the dataset is made durable before the move.
        """
        write_json_atomic(self.tmp / META, meta)
        write_json_atomic(self.tmp / STAMP, _stamp(_fingerprints(self.tmp, arrays), seconds))
        for d in sorted(p for p in self.tmp.rglob("*") if p.is_dir()):
            fsync_dir(d)
        fsync_dir(self.tmp)
        if self.out.exists() and not self.overwrite:
            self.abort()
            raise DatasetError(f"output directory '{self.out}' appeared while writing")
        replace_dir(self.tmp, self.out)
        self._done = True
        return self.out


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (see :func:`atomic_write_text`)."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True))


def replace_dir(tmp: Path, out: Path, step: Callable[[str], None] | None = None) -> None:
    """Move the finished directory ``tmp`` to ``out``, replacing a directory already there.

    ``tmp`` (private, as ``tempfile.mkdtemp`` makes it) first gets the user's umask. ``out``
    stays a plain directory (users copy, archive and remove it as one). Replacing one is a single
    exchange of the two directories where the file system allows it (Linux ``renameat2``,
    :func:`~fleetgnn.graph.files.exchange_dirs`): ``out`` is never missing. Elsewhere the old
    directory is moved aside first (``.NAME.old-<pid>-<tag>-<random>/old``), a moment without
    ``out`` that :func:`open_dataset` covers by reading the old directory there
    (:func:`~fleetgnn.graph.files.swap_in_progress`). A reader holding the old directory's
    files keeps them (they are removed from the names, not from its maps); one that read a
    part of each notices and reads again (see :func:`open_dataset`).

    ``step`` (tests) is called with ``"aside"`` (only without the exchange: the old directory
    moved aside, ``out`` missing), then ``"swapped"`` (the new directory at ``out``, the old one
    not yet removed).
    """
    apply_umask(tmp)
    if not out.exists():
        os.replace(tmp, out)
    elif exchange_dirs(tmp, out):
        if step is not None:
            step("swapped")
        shutil.rmtree(tmp, ignore_errors=True)  # the old directory, now under tmp's name
    else:
        trash = Path(tempfile.mkdtemp(prefix=temp_prefix(out.name, "old"), dir=out.parent))
        os.replace(out, trash / "old")
        if step is not None:
            step("aside")
        try:
            os.replace(tmp, out)
        except BaseException:
            os.replace(trash / "old", out)  # the old one back: a failed write changes nothing
            shutil.rmtree(trash, ignore_errors=True)
            raise
        if step is not None:
            step("swapped")
        shutil.rmtree(trash, ignore_errors=True)
    fsync_dir(out.parent)


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


def write_dataset(
    graph: Graph,
    out: str | os.PathLike[str],
    overwrite: bool = False,
    feature_dtype: str | None = None,
    **extra: Any,
) -> Path:
    """Write ``graph`` as a dataset directory (atomically, chunked).

    Args:
        graph: The graph to write (its arrays may themselves be memory maps).
        out: Target directory.
        overwrite: Replace an existing directory once the new one is complete.
        feature_dtype: Store the feature rows compact (``"bfloat16"``, ``"float16"``,
            ``"float8_e4m3"`` or their short names; ``"float32"``: plain float32 rows); ``None``:
            as ``graph.x`` holds them (see :class:`DatasetWriter`).
        **extra: Additional JSON-serialisable fields for ``meta.json`` (e.g. ``source``).

    Returns:
        The dataset directory.
    """
    with DatasetWriter(out, name=graph.name, overwrite=overwrite, feature_dtype=feature_dtype) as w:
        w.put("indptr", graph.indptr)
        w.put("indices", graph.indices)
        for name, arr in graph.node_data().items():
            w.put(name, arr)
        for name, arr in graph.edge_data().items():
            w.put(name, arr)
        return w.commit(num_classes=graph.num_classes, **extra)


_META_FIX = "re-create the dataset with 'fleetgnn prepare'"


def open_meta(path: str | os.PathLike[str]) -> tuple[Path, Path, dict[str, Any]]:
    """``(root, meta.json path, meta)`` of a dataset directory of either kind.

    Checks only that the directory and its ``meta.json`` exist and that the file is a JSON
    object of this format version; :func:`read_meta` and
    :func:`~fleetgnn.graph.typed_dataset.read_typed_meta` check the rest.

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


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check ``meta.json`` of a dataset directory."""
    root, meta_path, meta = open_meta(path)
    if dataset_kind_of(meta, meta_path) == TYPED_KIND:
        raise DatasetError(typed_refusal(root, meta))
    require_meta_keys(meta, meta_path, ("num_nodes", "num_edges", "num_features", "arrays"))
    check_meta(meta, meta_path)
    return meta


def dataset_kind_of(meta: dict[str, Any], where: Path) -> str:
    """``meta.json``'s ``kind``: ``"graph"`` or ``"typed"`` (:mod:`~fleetgnn.graph.typed_dataset`).

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
        f"{', '.join(TYPED_COMMANDS)} (and fleetgnn.graph.open_typed_dataset in Python)"
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
    """Check a dataset's ``meta.json`` against its schema before any field is used.

    Types and ranges: ``num_nodes`` in [0, :data:`MAX_NODES`], ``num_edges`` in [0,
    :data:`MAX_EDGES`], ``num_features`` in [0, :data:`MAX_FEATURES`], ``num_classes`` ``null``
    or in [1, :data:`MAX_CLASSES`] (all integers, not floats or strings), ``name`` a string of
    at most :data:`MAX_NAME_CHARS` characters, ``feature_norm`` a known transform, and
    ``arrays`` an object mapping known array names to ``{"dtype", "shape"}``: a dtype string of
    a bool, integer or float type in native (or no) byte order, a shape of one or two integers.

    Raises:
        DatasetError: The first violation, naming the key, the value and the valid range.
    """
    _meta_int(meta, "num_nodes", where, 0, MAX_NODES)
    _meta_int(meta, "num_edges", where, 0, MAX_EDGES)
    _meta_int(meta, "num_features", where, 0, MAX_FEATURES)
    if meta.get("num_classes") is not None:
        _meta_int(meta, "num_classes", where, 1, MAX_CLASSES)
    name = meta.get("name", "")
    if not isinstance(name, str) or len(name) > MAX_NAME_CHARS:
        raise _meta_error(where, "name", name, f"expected a string of <= {MAX_NAME_CHARS} chars")
    if "feature_norm" in meta:
        _check_feature_norm(meta["feature_norm"], f"'{where}': feature_norm")
    _check_time_meta(meta, where)
    problem = compact_meta_problem(meta)  # feature_dtype, feature_read_dtype, arrays.x
    if problem is not None:
        raise _meta_error(where, *problem)
    arrays = meta["arrays"]
    if not isinstance(arrays, dict):
        raise _meta_error(where, "arrays", arrays, "expected an object {name: {dtype, shape}}")
    for name, spec in arrays.items():
        key = f"arrays.{name}"
        if name not in ARRAYS:
            raise _meta_error(where, "arrays", name, f"unknown array; valid: {', '.join(ARRAYS)}")
        if not isinstance(spec, dict) or not {"dtype", "shape"} <= set(spec):
            raise _meta_error(where, key, spec, 'expected {"dtype": ..., "shape": [...]}')
        _check_spec_dtype(spec["dtype"], where, key)
        shape = spec["shape"]
        if (
            not isinstance(shape, list)
            or not 1 <= len(shape) <= 2
            or any(isinstance(d, bool) or not isinstance(d, int) for d in shape)
            or any(not 0 <= d <= MAX_EDGES for d in shape)
        ):
            raise _meta_error(
                where, f"{key}.shape", shape, f"expected 1 or 2 integers in [0, {MAX_EDGES}]"
            )


def _check_time_meta(
    meta: dict[str, Any], where: Path, listed: dict[str, bool] | None = None
) -> None:
    """``has_{edge,node}_time`` agreeing with ``arrays``; ``*_time_range`` null or [lo, hi].

    ``listed``: whether each kind's times are among the arrays (default: ``{kind}_time`` in
    ``meta["arrays"]``, a homogeneous dataset's; a typed dataset lists them per relation and
    node type).
    """
    for kind in TIMES:
        name = f"{kind}_time"
        arrays = meta.get("arrays")
        there = (isinstance(arrays, dict) and name in arrays) if listed is None else listed[kind]
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
    root = Path(path)
    if dataset_kind(root) == TYPED_KIND:  # a typed dataset records it in the same key
        fix = "re-create the dataset with 'fleetgnn prepare'"
        meta = read_json_meta(
            root / META, version=FORMAT_VERSION, keys=(), error=DatasetError, fix=fix
        )
    else:
        meta = read_meta(root)
    return _check_feature_norm(
        meta.get("feature_norm", "none"), f"'{Path(path) / META}': feature_norm"
    )


def _load_array(root: Path, name: str, spec: dict[str, Any], mmap: bool) -> np.ndarray:
    path = root / f"{name}.npy"
    if not path.is_file():
        kind = path_kind(path)
        if kind == "missing":
            raise DatasetError(f"'{path}' is listed in {META} but missing; re-create the dataset")
        raise DatasetError(
            f"'{path}' is {kind}, not a regular .npy file; the dataset's arrays are files "
            f"'fleetgnn prepare' writes: re-create the dataset"
        )
    try:
        arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise DatasetError(
            f"'{path}' cannot be read ({npy_error(e)}); the file is truncated or corrupt, or not "
            f"the one 'fleetgnn prepare' wrote: re-create the dataset"
        ) from e
    want_dtype, want_shape = np.dtype(spec["dtype"]), tuple(spec["shape"])
    if arr.dtype != want_dtype or arr.shape != want_shape:
        raise DatasetError(
            f"'{path}' holds {arr.dtype} {arr.shape} but {META} says {want_dtype} {want_shape}; "
            f"the directory is inconsistent, re-create the dataset"
        )
    return arr


def open_dataset(
    path: str | os.PathLike[str],
    mmap: bool = True,
    validate: Validation | None = None,
    progress: Progress | None = None,
) -> Graph:
    """Open a dataset directory as a :class:`Graph` backed by read-only memory maps.

    Every value of a dataset is checked once: by ``fleetgnn prepare`` (:class:`DatasetWriter`),
    which records each file's size, modification time and sampled-content hash in
    ``verified.json``. Opening compares those fingerprints (about a millisecond) and, while they
    match, checks the layout only. A dataset whose files changed since (an edited ``y.npy``, a
    truncated copy, a copy that did not keep modification times), or that has no
    ``verified.json`` (written by an older fleetgnn or by hand), is checked in full (with
    ``progress``), and the stamp recorded where the directory is writable, so that this happens
    once. Above ~2e8 elements (``E + N * F``) the check is announced by a one-line warning, and
    so is a stamp that cannot be recorded (the next open then checks again).

    Args:
        path: The dataset directory.
        mmap: Map arrays (constant-time open, paged on demand); ``False`` reads them into RAM.
        validate: ``None`` (default) as above; ``"full"`` checks every value (and records the
            stamp), ``"structure"`` only files, dtypes, shapes and ``indptr``'s ends.
        progress: Called as ``progress(done_bytes, total_bytes)`` while values are checked.

    A dataset replaced while it is opened (``fleetgnn prepare --overwrite``,
    :func:`replace_dir`) is read whole, the old one or the new one: the directory's identity
    (device, inode) is compared before and after, and the open starts again when it changed;
    while the old directory is moved aside, it is read there.

    Raises:
        DatasetError: Missing, truncated or inconsistent files, or invalid contents.
    """
    root = Path(path)
    for _ in range(_OPEN_TRIES):
        where = root if root.exists() else (swap_in_progress(root) or root)
        before = _identity(where)
        try:
            graph = _open_dataset(where, mmap, validate, progress)
        except (DatasetError, OSError):
            if before is None or _identity(where) == before:
                raise  # not replaced meanwhile: the error is the dataset's
            continue
        if _identity(where) == before:
            return graph
    raise DatasetError(
        f"dataset '{root}' was replaced {_OPEN_TRIES} times while it was being opened; "
        f"open it again once 'fleetgnn prepare' has finished"
    )


def _identity(path: Path) -> tuple[int, int] | None:
    """``(device, inode)`` of the directory at ``path``, or ``None`` when nothing is there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _open_dataset(
    root: Path, mmap: bool, validate: Validation | None, progress: Progress | None
) -> Graph:
    """:func:`open_dataset` of the directory ``root`` as it is now (no retry)."""
    meta = read_meta(root)  # checked against the schema: every field below is well-typed
    specs = meta["arrays"]
    for req in REQUIRED:
        if req not in specs:
            raise DatasetError(f"{root / META} lists no {req!r} array; re-create the dataset")
    arrays: dict[str, Any] = {
        name: _load_array(root, name, spec, mmap) for name, spec in specs.items()
    }
    n, e = int(meta["num_nodes"]), int(meta["num_edges"])
    if arrays["indptr"].shape != (n + 1,) or arrays["indices"].shape != (e,):
        raise DatasetError(
            f"{root / META} says {n} nodes / {e} edges but indptr has shape "
            f"{arrays['indptr'].shape} and indices {arrays['indices'].shape}; re-create the dataset"
        )
    record, quiet = validate == "full", False
    if validate is None:
        problem = stamp_problem(root, list(specs))
        size = e + n * max(1, int(meta.get("num_features") or 0))
        validate = "structure" if problem is None else "full"
        record = problem is not None
        quiet = size <= _FULL_CHECK_LIMIT  # small: checked at each open unless recorded
        if problem is not None and not quiet:
            nbytes = sum(a.nbytes for a in arrays.values())
            shown = f"{nbytes / 1e9:.1f} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:.1f} MB"
            warnings.warn(
                f"checking every value of dataset '{root}' ({shown}) once, "
                f"because {problem}; later opens skip this until a file changes",
                stacklevel=3,
            )
    if validate == "full":
        verify_dataset(
            root,
            list(specs),
            meta.get("num_classes"),
            progress,
            record=record,
            quiet=quiet,
            feature_dtype=meta.get("feature_dtype"),
        )
        validate = "structure"
    if meta.get("feature_dtype") is not None:  # compact rows, read back as floats
        from fleetgnn.graph.compact_rows import compact_rows

        arrays["x"] = compact_rows(arrays["x"], meta)
    try:
        return Graph(
            num_classes=meta.get("num_classes"),
            name=str(meta.get("name", root.name)),
            validate=validate,
            **arrays,  # type: ignore[arg-type]
        )
    except GraphError as err:
        raise DatasetError(f"dataset '{root}' is invalid: {err}") from err


def verify_dataset(
    root: Path,
    names: Iterable[str],
    num_classes: int | None,
    progress: Progress | None = None,
    *,
    record: bool = True,
    quiet: bool = False,
    feature_dtype: str | None = None,
) -> float:
    """Check every value of a dataset directory's arrays; record the stamp if asked.

    The fingerprints are taken before the check, so a file changed while it was being checked
    does not match the stamp. A stamp that cannot be written (a read-only directory, a full disk)
    is a one-line warning: the next open checks again.

    Args:
        root: The dataset directory (its layout already checked).
        names: The arrays listed in ``meta.json``.
        num_classes: ``meta.json``'s ``num_classes``.
        progress: Called as ``progress(done_bytes, total_bytes)``.
        record: Write ``verified.json`` once the check passes.
        quiet: No warning when the stamp cannot be written.
        feature_dtype: ``meta.json``'s ``feature_dtype``: ``x`` is checked as the values its
            compact rows read back.

    Returns:
        The seconds the check took.

    Raises:
        DatasetError: A value is invalid (the message names the array, position and range).
    """
    names = list(names)
    prints = _fingerprints(root, names) if record else None
    t0 = time.perf_counter()
    try:
        check_values(
            {name: root / f"{name}.npy" for name in names},
            num_classes=num_classes,
            progress=progress,
            feature_dtype=feature_dtype,
        )
    except GraphError as err:
        raise DatasetError(f"dataset '{root}' is invalid: {err}") from err
    seconds = time.perf_counter() - t0
    if prints is not None:
        try:
            write_json_atomic(root / STAMP, _stamp(prints, seconds))
        except (OSError, FleetgnnError) as e:
            if quiet:
                return seconds
            reason = getattr(e, "strerror", None) or str(e)
            warnings.warn(
                f"every value of '{root}' is valid, but this cannot be recorded in "
                f"'{root / STAMP}' ({reason}); the next open checks every value again (run "
                f"'fleetgnn info {root} --verify' where the directory is writable)",
                stacklevel=3,
            )
    return seconds


def _fingerprints(root: Path, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    files = [META, *(f"{name}.npy" for name in names)]
    try:
        return {f: fingerprint(root / f) for f in files}
    except OSError as e:
        raise DatasetError(f"'{root}' cannot be read ({e.strerror or e}); check the files") from e


def _stamp(prints: dict[str, dict[str, Any]], seconds: float) -> dict[str, Any]:
    return {
        "format_version": STAMP_VERSION,
        "check_version": CHECK_VERSION,
        "files": prints,
        "check_seconds": round(float(seconds), 3),
    }


def dataset_fingerprint(path: str | os.PathLike[str]) -> str:
    """One hash of a dataset directory's files: their sizes and sampled contents.

    Built from :func:`fleetgnn.graph.verify.fingerprint` of ``meta.json`` and every array it
    lists (18 reads of 4 KiB per large file), without modification times, so a copy made with
    ``cp`` keeps it while ``prepare --overwrite`` with another seed, or an edit, changes it.

    Raises:
        DatasetError: ``meta.json`` or an array cannot be read.
    """
    root = Path(path)
    return files_fingerprint(root, read_meta(root)["arrays"])


def files_fingerprint(root: Path, names: Iterable[str]) -> str:
    """One hash of the sizes and sampled contents of ``meta.json`` and arrays ``names``."""
    prints = _fingerprints(root, sorted(names))
    h = hashlib.sha256()
    for f in sorted(prints):
        h.update(f"{f}:{prints[f]['bytes']}:{prints[f]['sample']};".encode())
    return h.hexdigest()[:32]


def stamp_problem(root: Path, names: Iterable[str]) -> str | None:
    """Why a dataset's ``verified.json`` does not vouch for its files; ``None`` if it does.

    Compares, for ``meta.json`` and every array listed in it, the recorded size and
    modification time (one ``stat``), then the sampled-content hash (18 reads of 4 KiB, or the
    whole file when it is at most 1 MiB) with the files on disk.
    """
    path = root / STAMP
    if not path.is_file():
        return f"it has no {STAMP} (it was written by an older fleetgnn or by hand)"
    try:
        stamp = read_json_meta(
            path, version=STAMP_VERSION, keys=("check_version", "files"), error=DatasetError, fix=""
        )
    except DatasetError:
        return f"its {STAMP} is unreadable"
    if stamp["check_version"] != CHECK_VERSION:
        return (
            f"its values were checked by a fleetgnn that checked less (check version "
            f"{stamp['check_version']!r})"
        )
    recorded = stamp["files"]
    files = [META, *(f"{name}.npy" for name in names)]
    if not isinstance(recorded, dict) or set(recorded) != set(files):
        return f"its arrays are not those its {STAMP} lists"
    for f in files:
        rec = recorded[f]
        if not isinstance(rec, dict) or not {"bytes", "mtime_ns", "sample"} <= set(rec):
            return f"its {STAMP} is unreadable"
        try:
            st = (root / f).stat()
        except OSError:
            return f"{f} cannot be read"
        if st.st_size != rec["bytes"]:
            return f"{f} changed size since its values were checked"
        if st.st_mtime_ns != rec["mtime_ns"]:
            return (
                f"{f} was modified since its values were checked (or copied without its times; "
                f"cp -a and rsync -a keep them)"
            )
    for f in files:
        try:
            sample = fingerprint(root / f)["sample"]
        except OSError:
            return f"{f} cannot be read"
        if sample != recorded[f]["sample"]:
            return f"the contents of {f} differ from those checked"
    return None


def iter_chunks(n: int, step: int) -> Iterator[tuple[int, int]]:
    """Yield ``(lo, hi)`` ranges covering ``[0, n)`` in steps of ``step``."""
    for lo in range(0, n, step):
        yield lo, min(n, lo + step)
