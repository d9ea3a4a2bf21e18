"""Writing a dataset directory of either kind: atomically, array by array, in bounded memory.

See :mod:`fleetgnn.graph.dataset` for the layouts and how a write is made durable.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from fleetgnn.durable import fsync_dir, refresh_free
from fleetgnn.errors import DatasetError, GraphError
from fleetgnn.graph.csc import Graph
from fleetgnn.graph.dataset.meta import (
    _TARGET_ARRAYS,
    FORMAT_VERSION,
    META,
    REQUIRED,
    STAMP,
    TIMES,
    TYPED_KIND,
    _check_feature_norm,
    _check_typed_layout,
    array_names,
    relation_key,
    time_arrays,
    write_json_atomic,
)
from fleetgnn.graph.dataset.reader import (
    _check_values,
    _fingerprints,
    _stamp,
)
from fleetgnn.graph.edge_time import time_range
from fleetgnn.graph.files import (
    apply_umask,
    create_npy,
    exchange_dirs,
    temp_prefix,
)
from fleetgnn.graph.hetero import HeteroGraph, HeteroSchema, Relation
from fleetgnn.graph.row_array import RowArray

_COPY_CHUNK_BYTES = 64 << 20  # bounded memory when copying arrays into a dataset


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
