"""Opening a dataset directory of either kind, and the value check and stamp it relies on.

See :mod:`fleetgnn.graph.dataset` for the layouts and when values are checked.
"""

from __future__ import annotations

import hashlib
import os
import time
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fleetgnn.config.textfile import path_kind
from fleetgnn.errors import DatasetError, FleetgnnError, GraphError
from fleetgnn.graph.csc import Graph, Validation
from fleetgnn.graph.dataset.meta import (
    _TARGET_ARRAYS,
    META,
    REQUIRED,
    STAMP,
    STAMP_VERSION,
    TYPED_KIND,
    Progress,
    _read_meta,
    read_json_meta,
    read_meta,
    relation_key,
    time_arrays,
    write_json_atomic,
)
from fleetgnn.graph.files import (
    npy_error,
    swap_in_progress,
)
from fleetgnn.graph.hetero import HeteroGraph, HeteroSchema
from fleetgnn.graph.verify import CHECK_VERSION, check_typed_values, check_values, fingerprint

#: Opens of a dataset replaced while it was read, before giving up (see :func:`open_dataset`).
_OPEN_TRIES = 3
#: Elements (``E + N * max(1, F)``, a typed dataset's arrays' elements) up to which
#: ``open_dataset`` checks every value of a dataset without a valid verification stamp at each
#: open; above, it checks once and records a stamp.
_FULL_CHECK_LIMIT = 200_000_000


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
    *,
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
