"""Datasets on disk: a directory of ``.npy`` arrays plus ``meta.json``, opened as memory maps.

One module for both kinds of dataset: a homogeneous graph (one node type, one relation) and a
typed (heterogeneous) one share the writer, the ``meta.json`` checks, the value checks and their
stamp, the compact feature rows, the times and the opener; the typed layout adds only its array
names, its schema and the checks of one CSC per relation. ``meta.json``'s ``kind`` says which
layout a directory holds, and :func:`open_dataset` returns a :class:`~fleetgnn.graph.csc.Graph`
or a :class:`~fleetgnn.graph.hetero.HeteroGraph` from it.

Homogeneous layout (format version 1; ``kind`` absent or ``"graph"``)::

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

Typed layout (format version 1, ``"kind": "typed"``)::

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

Type and relation names are letters, digits, ``_`` and ``-``
(:class:`~fleetgnn.graph.hetero.HeteroSchema`), so the dotted ``SRC.NAME.DST`` names one
relation unambiguously. A typed ``num_nodes`` / ``num_edges`` are the totals over types and
relations (the homogeneous view's ``N`` and ``E``).

``meta.json`` may also say ``"feature_norm"``: the transform the dataset's features customarily
get before training (``"row"`` for Planetoid's and gnn-benchmark's bag-of-words features, as in
the GCN paper's preprocessing), which ``fleetgnn train`` applies unless ``data.feature_norm`` says
otherwise. The key is optional: a dataset without it (any written before it existed) means
``"none"``, so the format version is unchanged. Likewise ``"has_edge_time"`` (``true`` when
edge times are there) and ``"edge_time_range"`` (``[min, max]``, over every relation of a typed
dataset, ``null`` without edges), written with every dataset that has edge times, and
``"has_node_time"`` / ``"node_time_range"`` (over every timed node type; ``null`` without
nodes) with every dataset that has node times; a dataset without them has none.

With ``"feature_dtype"`` (``prepare --feature-dtype``) ``x.npy`` holds compact rows and
``"feature_read_dtype"`` the float they read back as (:mod:`fleetgnn.graph.compact_rows`); a
typed dataset records both per type (``{TYPE: codec}``, ``{TYPE: float}``: one dtype for every
featured type, or ``TYPE=DTYPE,...``), and the types they do not name hold plain floats. The
stored rows are ``uint16 [N, F]`` bf16 bits, ``float16 [N, F]`` or ``uint8 [N, F + 4]``. A
reader without the keys refuses such a table in one line (``'x' must be a float array``,
``expected a float dtype``), except a float16 one, which it reads as the same values: the format
version is unchanged.

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
from fleetgnn.graph.hetero import HeteroGraph, HeteroSchema, Relation
from fleetgnn.graph.row_array import RowArray, compact_meta_problem, typed_compact_meta_problem
from fleetgnn.graph.verify import CHECK_VERSION, check_typed_values, check_values, fingerprint

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
#: The arrays of a typed dataset's target type.
_TARGET_ARRAYS = ("y", *SPLITS)
#: The optional time arrays, ``{kind}_time.npy``, recorded in ``meta.json`` as
#: ``has_{kind}_time`` and ``{kind}_time_range``.
TIMES: tuple[str, ...] = ("edge", "node")
_COPY_CHUNK_BYTES = 64 << 20  # bounded memory when copying arrays into a dataset
#: Elements (``E + N * max(1, F)``, a typed dataset's arrays' elements) up to which
#: ``open_dataset`` checks every value of a dataset without a valid verification stamp at each
#: open; above, it checks once and records a stamp.
_FULL_CHECK_LIMIT = 200_000_000
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


def _native(dtype: Any) -> np.dtype:
    """``dtype`` in native byte order (a big-endian input is converted as it is copied in)."""
    dt = np.dtype(dtype)
    return dt.newbyteorder("=") if dt.byteorder not in ("=", "|") else dt


def _is_x(name: str) -> bool:
    """Whether array ``name`` is a feature table (``x``, a typed dataset's ``x/TYPE``)."""
    return name == "x" or name.startswith("x/")


class DatasetWriter:
    """Writes a dataset directory atomically, array by array, in bounded memory.

    Use as a context manager; on an exception the temporary directory is removed and nothing
    appears at ``out``::

        with DatasetWriter(out, name="cora") as w:
            w.put("indptr", indptr)
            x = w.create("x", np.float32, (n, f))   # a writable .npy memory map
            for lo in range(0, n, chunk): x[lo:lo + chunk] = ...
            w.commit(num_classes=7)

    A typed dataset names its schema; its array names are those of the typed layout
    (:func:`array_names`), and :meth:`put_relation` writes one relation's CSC::

        with DatasetWriter(out, name="mag", schema=schema) as w:
            w.put_relation(("paper", "cites", "paper"), indptr, indices)
            x = w.create("x/paper", np.float32, (n_paper, 128))   # filled in chunks
            w.put("y", y)
            w.commit(num_classes=349)

    Args:
        out: Target directory; must not exist unless ``overwrite``.
        name: Dataset name stored in ``meta.json``.
        overwrite: Replace an existing dataset at ``out`` (only after the new one is complete).
        feature_dtype: Write the feature rows compact (:mod:`fleetgnn.graph.compact_rows`):
            encoded block by block by :meth:`put`, or, made with :meth:`create`, filled as
            floats and converted by :meth:`commit`. ``float32``: plain float32 rows. ``None``:
            as given. A typed dataset: one dtype for every type (``"bf16"``) or per type
            (``{"paper": "bf16"}`` or ``"paper=bf16,author=fp8"``; types not named as given).
        schema: The node types, relations and target type of a typed dataset; ``None``: a
            homogeneous one.

    Raises:
        DatasetError: An unknown ``feature_dtype`` or node type in it (before anything is
            written).
    """

    def __init__(
        self,
        out: str | os.PathLike[str],
        name: str,
        overwrite: bool = False,
        feature_dtype: str | dict[str, str] | None = None,
        schema: HeteroSchema | None = None,
    ) -> None:
        #: Feature table (``x``, ``x/TYPE``) -> the codec it is written in.
        self.codecs: dict[str, Any] = {}
        if feature_dtype is not None:
            from fleetgnn.graph.compact_rows import typed_writer_codecs, writer_codec

            if schema is None:
                self.codecs = {"x": writer_codec(str(feature_dtype))}
            else:
                codecs = typed_writer_codecs(feature_dtype, schema.node_types)
                self.codecs = {f"x/{t}": c for t, c in codecs.items()}
        self.schema = schema
        self._names = array_names(schema)
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
        self._float_xs: dict[str, np.ndarray] = {}  # tables as created, converted by commit
        self._xs_stored: dict[str, tuple[Any, str]] = {}  # compact tables: (codec, read as)
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
        self._float_xs.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)
        self._done = True

    def create(self, name: str, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """Create array ``name`` as a writable ``.npy`` memory map to be filled by the caller.

        The file's space is reserved first and the dtype made native-endian (a big-endian input
        is converted as it is copied in).

        Raises:
            DatasetError: An array name not of this dataset's layout.
            DiskFullError: Not enough space for the array.
        """
        self._check_name(name)
        if name in self.codecs:  # floats, converted by commit
            self._float_xs[name] = self.scratch(f"{name}.float.npy", _native(dtype), shape)
            return self._float_xs[name]
        return self._create_file(name, dtype, shape)

    def _check_name(self, name: str) -> None:
        if name not in self._names:
            kind = "dataset" if self.schema is None else "typed dataset"
            raise DatasetError(
                f"unknown {kind} array {name!r}; valid names: {', '.join(self._names)}"
            )

    def _create_file(self, name: str, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """Array ``name``'s native-endian ``.npy`` memory map in the temporary directory."""
        arr = self.scratch(f"{name}.npy", _native(dtype), shape)
        self._arrays[name] = arr
        return arr

    def scratch(self, filename: str, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """A writable ``.npy`` memory map in the temporary directory, not part of the dataset.

        Its space is reserved like :meth:`create`'s; delete the file before :meth:`commit`.
        """
        path = self.tmp / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        return create_npy(path, dtype, tuple(shape), self.DISK_FULL_FIX)

    def put(self, name: str, values: np.ndarray | RowArray) -> None:
        """Write a whole array in chunks of bounded size (features: :func:`.write_x`)."""
        self._check_name(name)
        if name in self.codecs or (_is_x(name) and isinstance(values, RowArray)):
            self._put_x(name, values)
        else:
            self._copy_in(name, values if isinstance(values, np.ndarray) else np.asarray(values))

    def put_relation(
        self,
        rel: Relation,
        indptr: np.ndarray,
        indices: np.ndarray,
        edge_time: np.ndarray | None = None,
    ) -> None:
        """Write one relation's CSC of a typed dataset (``indices``: type-local source IDs).

        ``edge_time``: int64 ``[E_r]`` aligned with ``indices``, sorted within each
        destination's segment (checked at :meth:`commit`).
        """
        key = relation_key(tuple(rel))  # type: ignore[arg-type]
        self.put(f"rel/{key}/indptr", indptr)
        self.put(f"rel/{key}/indices", indices)
        if edge_time is not None:
            self.put(f"rel/{key}/edge_time", edge_time)

    def _copy_in(self, name: str, values: np.ndarray) -> None:
        out = self._create_file(name, values.dtype, values.shape)
        row_bytes = max(1, values.itemsize * int(np.prod(values.shape[1:], dtype=np.int64)))
        step = max(1, _COPY_CHUNK_BYTES // row_bytes)
        for lo in range(0, values.shape[0], step):
            out[lo : lo + step] = values[lo : lo + step]

    def _put_x(self, name: str, values: np.ndarray | RowArray) -> None:
        """Write feature table ``name`` by its codec (or as ``values`` store it)."""
        from fleetgnn.graph.compact_rows import write_x

        def create(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
            return self._create_file(name, dtype, shape)

        def copy_in(_: str, rows: np.ndarray) -> None:
            self._copy_in(name, rows)

        try:
            stored = write_x(values, self.codecs.get(name), copy_in, create, _COPY_CHUNK_BYTES)
        except GraphError as err:
            where = "" if self.schema is None else f"features of node type {name[2:]!r}: "
            raise DatasetError(f"{where}{err}") from None
        self._xs_stored.pop(name, None)
        if stored is not None:
            self._xs_stored[name] = stored

    def commit(self, num_classes: int | None = None, **extra: Any) -> Path:
        """Flush arrays, check every value, write ``meta.json`` and move the directory into place.

        The values are checked in bounded memory (:mod:`fleetgnn.graph.verify`) and the files'
        fingerprints recorded in ``verified.json`` (see :func:`open_dataset`).

        Raises:
            DatasetError: A required array (a relation's CSC) is missing, a shape disagrees
                with the schema, a value is invalid (an ID out of its type's range, a label
                outside ``[-1, num_classes)``, a NaN, overlapping splits, ...), or
                ``feature_norm`` (in ``extra``) is not one of ``"none"``, ``"row"``.
        """
        if "feature_norm" in extra:
            _check_feature_norm(extra["feature_norm"], "feature_norm")
        for req in REQUIRED if self.schema is None else ():
            if req not in self._arrays:
                raise DatasetError(f"dataset is missing required array {req!r}")
        for name in list(self._float_xs):  # created as floats: converted to their stored form
            self._put_x(name, self._float_xs.pop(name))
            (self.tmp / f"{name}.float.npy").unlink()
        arrays = self._flush()
        meta = {
            "format_version": FORMAT_VERSION,
            "name": self.name,
            **self._counts(arrays),
            "num_classes": int(num_classes) if num_classes is not None else None,
            "arrays": arrays,
            **self._compact_meta(),
            **extra,
        }
        self._arrays.clear()
        times = time_arrays(self.schema)
        meta.update(_time_meta(self.tmp, times, arrays, ranges=False))
        # every value is checked once, here, and the files' fingerprints recorded (verified.json),
        # so that opening the dataset later needs to compare fingerprints only
        t0 = time.perf_counter()
        try:
            if self.schema is not None:
                _check_typed_layout(meta, self.schema, self.out / META)
            _check_values(self.tmp, meta, self.schema, list(arrays))
        except (DatasetError, GraphError) as err:
            raise DatasetError(f"the dataset written to '{self.out}' is invalid: {err}") from err
        meta.update(_time_meta(self.tmp, times, arrays, ranges=True))  # values checked
        return self._publish(meta, arrays, time.perf_counter() - t0)

    def _counts(self, arrays: dict[str, Any]) -> dict[str, Any]:
        """``meta.json``'s kind, schema and counts of the arrays written."""
        s = self.schema
        if s is None:
            x = self._arrays.get("x")
            stored = self._xs_stored.get("x")
            width = 0 if x is None else x.shape[1] - (4 if stored and stored[0].scaled else 0)
            return {
                "num_nodes": int(self._arrays["indptr"].shape[0] - 1),
                "num_edges": int(self._arrays["indices"].shape[0]),
                "num_features": int(width),
            }
        edges = [arrays.get(f"rel/{relation_key(r)}/indices") for r in s.relations]
        return {
            "kind": TYPED_KIND,
            "schema": s.to_dict(),
            "num_nodes": s.total_nodes,
            "num_edges": sum(spec["shape"][0] for spec in edges if spec is not None),
        }

    def _compact_meta(self) -> dict[str, Any]:
        """``feature_dtype`` and ``feature_read_dtype`` of the compact tables written."""
        stored = self._xs_stored
        if not stored:
            return {}
        if self.schema is None:
            codec, read = stored["x"]
            return {"feature_dtype": codec.name, "feature_read_dtype": read}
        types = [t for t in self.schema.node_types if f"x/{t}" in stored]
        return {
            "feature_dtype": {t: stored[f"x/{t}"][0].name for t in types},
            "feature_read_dtype": {t: stored[f"x/{t}"][1] for t in types},
        }

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
    graph: Graph | HeteroGraph,
    out: str | os.PathLike[str],
    overwrite: bool = False,
    feature_dtype: str | dict[str, str] | None = None,
    **extra: Any,
) -> Path:
    """Write ``graph`` as a dataset directory (atomically, chunked).

    Args:
        graph: The graph to write, homogeneous or typed (its arrays may themselves be memory
            maps; compact feature rows are written as stored).
        out: Target directory.
        overwrite: Replace an existing directory once the new one is complete.
        feature_dtype: Store the feature rows compact (``"bfloat16"``, ``"float16"``,
            ``"float8_e4m3"`` or their short names; ``"float32"``: plain float32 rows; a typed
            graph: also per type); ``None``: as ``graph.x`` holds them (see
            :class:`DatasetWriter`).
        **extra: Additional JSON-serialisable fields for ``meta.json`` (e.g. ``source``).

    Returns:
        The dataset directory.
    """
    typed = isinstance(graph, HeteroGraph)
    with DatasetWriter(
        out,
        name=graph.name,
        overwrite=overwrite,
        feature_dtype=feature_dtype,
        schema=graph.schema if typed else None,
    ) as w:
        if isinstance(graph, HeteroGraph):
            for rel in graph.schema.relations:
                w.put_relation(rel, *graph.csc[rel], graph.edge_time.get(rel))
            data = {f"x/{t}": x for t, x in graph.x.items()}
            data.update({f"node_time/{t}": v for t, v in graph.node_time.items()})
            data.update({k: getattr(graph, k) for k in _TARGET_ARRAYS})
        else:
            data = {"indptr": graph.indptr, "indices": graph.indices}
            data.update({**graph.node_data(), **graph.edge_data()})
        for name, arr in data.items():
            if arr is not None:
                w.put(name, arr)
        return w.commit(num_classes=graph.num_classes, **extra)


def _time_meta(
    root: Path, times: dict[str, list[str]], names: Iterable[str], *, ranges: bool
) -> dict[str, Any]:
    """``has_{edge,node}_time`` of the time arrays (:func:`time_arrays`) among ``names``.

    With ``ranges`` also ``{kind}_time_range``: the ``[min, max]`` over every such array, read
    from the files under ``root`` (``null`` when they hold no times).
    """
    meta: dict[str, Any] = {}
    for kind in TIMES:
        present = [n for n in times[kind] if n in names]
        if not present:
            continue
        meta[f"has_{kind}_time"] = True
        if not ranges:
            continue
        spans = []
        for name in present:
            values = np.load(root / f"{name}.npy", mmap_mode="r", allow_pickle=False)
            spans.append(time_range(values))
            del values
        spans = [v for v in spans if v is not None]
        meta[f"{kind}_time_range"] = (
            [min(v[0] for v in spans), max(v[1] for v in spans)] if spans else None
        )
    return meta


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


def read_meta(path: str | os.PathLike[str], kind: str | None = None) -> dict[str, Any]:
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
    kind: str | None = None,
) -> Graph | HeteroGraph:
    """Open a dataset directory as a :class:`Graph` or :class:`HeteroGraph` of read-only maps.

    ``meta.json`` says which: a homogeneous dataset opens as a
    :class:`~fleetgnn.graph.csc.Graph`, a typed one as a
    :class:`~fleetgnn.graph.hetero.HeteroGraph`.

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
        kind: ``None``: either kind; ``"graph"``: a homogeneous dataset only, refusing a typed
            one in one line that names the commands reading typed data (what a command that
            takes one node type and one relation asks for); ``"typed"``: a typed one only.

    A dataset replaced while it is opened (``fleetgnn prepare --overwrite``,
    :func:`replace_dir`) is read whole, the old one or the new one: the directory's identity
    (device, inode) is compared before and after, and the open starts again when it changed;
    while the old directory is moved aside, it is read there.

    Raises:
        DatasetError: Missing, truncated or inconsistent files, invalid contents, or a dataset
            of the other ``kind``.
    """
    root = Path(path)
    for _ in range(_OPEN_TRIES):
        where = root if root.exists() else (swap_in_progress(root) or root)
        before = _identity(where)
        try:
            graph = _open_dataset(where, mmap, validate, progress, kind)
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
    root: Path,
    mmap: bool,
    validate: Validation | None,
    progress: Progress | None,
    kind: str | None,
) -> Graph | HeteroGraph:
    """:func:`open_dataset` of the directory ``root`` as it is now (no retry)."""
    meta, schema = _read_meta(root, kind)  # checked: every field below is well-typed
    specs = meta["arrays"]
    for req in REQUIRED if schema is None else ():
        if req not in specs:
            raise DatasetError(f"{root / META} lists no {req!r} array; re-create the dataset")
    arrays: dict[str, Any] = {
        name: _load_array(root, name, spec, mmap) for name, spec in specs.items()
    }
    if schema is None:
        n, e = int(meta["num_nodes"]), int(meta["num_edges"])
        if arrays["indptr"].shape != (n + 1,) or arrays["indices"].shape != (e,):
            raise DatasetError(
                f"{root / META} says {n} nodes / {e} edges but indptr has shape "
                f"{arrays['indptr'].shape} and indices {arrays['indices'].shape}; re-create the "
                f"dataset"
            )
        size = e + n * max(1, int(meta.get("num_features") or 0))
    else:
        size = sum(int(np.prod(spec["shape"])) for spec in specs.values())
    record, quiet = validate == "full", False
    if validate is None:
        problem = stamp_problem(root, list(specs))
        validate = "structure" if problem is None else "full"
        record = problem is not None
        quiet = size <= _FULL_CHECK_LIMIT  # small: checked at each open unless recorded
        if problem is not None and not quiet:
            nbytes = sum(a.nbytes for a in arrays.values())
            shown = f"{nbytes / 1e9:.1f} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:.1f} MB"
            warnings.warn(
                f"checking every value of {'dataset' if schema is None else 'typed dataset'} "
                f"'{root}' ({shown}) once, because {problem}; later opens skip this until a "
                f"file changes",
                stacklevel=3,
            )
    if validate == "full":
        verify_dataset(root, meta, progress, record=record, quiet=quiet)
        validate = "structure"
    if schema is not None:
        return _typed_graph(root, meta, schema, arrays)
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


def _typed_graph(
    root: Path, meta: dict[str, Any], schema: HeteroSchema, arrays: dict[str, Any]
) -> HeteroGraph:
    """The :class:`HeteroGraph` of a typed dataset's arrays (their values checked)."""
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


def verify_dataset(
    root: Path,
    meta: dict[str, Any],
    progress: Progress | None = None,
    *,
    record: bool = True,
    quiet: bool = False,
) -> float:
    """Check every value of a dataset directory's arrays; record the stamp if asked.

    The fingerprints are taken before the check, so a file changed while it was being checked
    does not match the stamp. A stamp that cannot be written (a read-only directory, a full disk)
    is a one-line warning: the next open checks again.

    Args:
        root: The dataset directory (its layout already checked).
        meta: Its ``meta.json`` (checked by :func:`read_meta`): the arrays it lists are checked,
            compact feature rows as the values they read back.
        progress: Called as ``progress(done_bytes, total_bytes)``.
        record: Write ``verified.json`` once the check passes.
        quiet: No warning when the stamp cannot be written.

    Returns:
        The seconds the check took.

    Raises:
        DatasetError: A value is invalid (the message names the array, position and range).
    """
    names = list(meta["arrays"])
    typed = meta.get("kind") == TYPED_KIND
    schema = HeteroSchema.from_dict(meta["schema"]) if typed else None
    prints = _fingerprints(root, names) if record else None
    t0 = time.perf_counter()
    try:
        _check_values(root, meta, schema, names, progress)
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


def _check_values(
    root: Path,
    meta: dict[str, Any],
    schema: HeteroSchema | None,
    names: list[str],
    progress: Progress | None = None,
) -> None:
    """Check every value of the arrays ``names`` under ``root`` of a dataset of ``schema``.

    ``meta``: the dataset's ``meta.json``; its ``feature_dtype`` tables are checked as they read
    back.
    """
    num_classes, compact = meta.get("num_classes"), meta.get("feature_dtype")
    if schema is None:
        paths = {name: root / f"{name}.npy" for name in names}
        check_values(paths, num_classes=num_classes, progress=progress, feature_dtype=compact)
        return
    rels = {
        str(rel): (
            root / f"rel/{relation_key(rel)}/indptr.npy",
            root / f"rel/{relation_key(rel)}/indices.npy",
            schema.count(rel[0]),
        )
        for rel in schema.relations
    }
    times = time_arrays(schema)
    check_typed_values(
        rels,
        {t: root / f"x/{t}.npy" for t in schema.node_types if f"x/{t}" in names},
        {k: root / f"{k}.npy" for k in _TARGET_ARRAYS if k in names},
        num_classes=num_classes,
        progress=progress,
        edge_times={
            str(rel): root / f"{name}.npy"
            for rel, name in zip(schema.relations, times["edge"], strict=True)
            if name in names
        },
        node_times={
            t: root / f"{name}.npy"
            for t, name in zip(schema.node_types, times["node"], strict=True)
            if name in names
        },
        feature_dtypes=compact,
    )


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
