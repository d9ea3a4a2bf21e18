"""gnn-benchmark ``.npz`` graphs (Shchur et al., "Pitfalls of GNN evaluation"; PyG CitationFull).

Layout: the adjacency ``A[src, dst]`` as CSR arrays ``adj_data`` / ``adj_indices`` / ``adj_indptr``
/ ``adj_shape``; features as CSR ``attr_data`` / ``attr_indices`` / ``attr_indptr`` /
``attr_shape`` or a dense ``attr_matrix``; ``labels`` ``[N]``. Other keys (``idx_to_node``,
``class_names``, ``node_names``, ...) are ignored.

Memory (``max_bytes``, ``prepare --max-memory``): the shape and dtype in the header of every
array the loader reads are checked before the array is read (a few KB of compressed zeros can
declare gigabytes), then the edges and the dense feature matrix from the declared shapes and
counts. The features are written straight into their final float32 array: sparse ones a block of
rows at a time, a dense ``attr_matrix`` streamed from the archive a block of rows at a time. The
peak is about the dense feature matrix, plus the CSR arrays of the file, plus the edge arrays.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from fleetgnn.errors import DatasetError, FleetgnnError
from fleetgnn.graph.csc import Graph, from_edges
from fleetgnn.graph.loaders._io import (
    EDGE_BYTES,
    NODE_BYTES,
    READ_ERRORS,
    MemoryBudget,
    class_ids,
    nbytes_of,
    npy_header,
    num_classes_of,
    require_file,
    resolve_max_bytes,
)
from fleetgnn.graph.loaders.splits import check_split_args, split_masks, user_split

ADJ_KEYS: tuple[str, ...] = ("adj_data", "adj_indices", "adj_indptr", "adj_shape")
ATTR_KEYS: tuple[str, ...] = ("attr_data", "attr_indices", "attr_indptr", "attr_shape")
_BLOCK_BYTES = 16 << 20  # bytes of features converted per block of rows
#: The customary feature transform of the gnn-benchmark bag-of-words features (row
#: normalisation): ``fleetgnn prepare npz`` records it in ``meta.json`` as ``feature_norm``.
FEATURE_NORM = "row"
_LABELS_HINT = "labels (a 'labels' array in the .npz file)"


Header = tuple[tuple[int, ...], bool, np.dtype]


def _header(zf: zipfile.ZipFile, member: str) -> Header:
    """``(shape, fortran_order, dtype)`` from the ``.npy`` header of ``member``, data unread."""
    return npy_header(zf, member)


def _member(z: np.lib.npyio.NpzFile, key: str) -> str:
    return key + ".npy" if key + ".npy" in z.zip.namelist() else key


def _read(path: Path, budget: MemoryBudget) -> tuple[dict[str, np.ndarray], Header | None]:
    """Every array the loader may use, read eagerly with pickle disabled, sizes checked first.

    The header of each array is read and its size taken from ``budget`` before its data is
    read. A dense ``attr_matrix`` is not read here (see :func:`_stream_rows`): its header is
    returned instead.
    """
    wanted = (*ADJ_KEYS, *ATTR_KEYS, "attr_matrix", "labels")
    try:
        z = np.load(path, allow_pickle=False)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise DatasetError(
                f"'{path}' is a single .npy array, not an .npz archive of the gnn-benchmark layout"
            )
        with z:
            # sizes first, from the headers alone: a CRC check inflates every member in full
            present = [k for k in wanted if k in z.files]
            headers = {k: _header(z.zip, _member(z, k)) for k in present}
            for k, (shape, _fortran, dtype) in headers.items():
                if k != "attr_matrix":
                    dims = " x ".join(map(str, shape)) or "scalar"
                    budget.take(
                        f"'{path}': array '{k}' declares {dims} {dtype}",
                        nbytes_of(shape, dtype.itemsize),
                    )
            if "attr_matrix" in headers:
                shape, _fortran, dtype = headers["attr_matrix"]
                budget.check(
                    f"'{path}': attr_matrix declares {' x '.join(map(str, shape))} features "
                    f"(float32)",
                    nbytes_of(shape, 4),
                )
            bad = z.zip.testzip()  # CRC of every member, and names that match their headers
            if bad is not None:
                raise DatasetError(
                    f"'{path}': member {bad!r} fails its CRC or header check; the file is "
                    f"corrupt, obtain it again"
                )
            arrays = {k: z[k] for k in present if k != "attr_matrix"}
            return arrays, headers.get("attr_matrix")
    except FleetgnnError:
        raise
    except ValueError as e:
        raise DatasetError(
            f"'{path}' cannot be loaded ({e}); it is truncated or corrupt, or holds Python "
            f"objects (refused: pickle is disabled for safety); re-save it with numeric arrays"
        ) from e
    except (*READ_ERRORS, KeyError, NotImplementedError, zipfile.LargeZipFile) as e:
        raise DatasetError(
            f"'{path}' cannot be read ({type(e).__name__}: {e}); the file is truncated or "
            f"corrupt, obtain it again"
        ) from e


def _stream_rows(path: Path, out: np.ndarray) -> None:
    """Read the dense ``attr_matrix`` of ``path`` into ``out`` (float32), a block of rows at a time.

    Its header was checked by :func:`_read`; the data are decompressed and converted one block
    of about 16 MB at a time, so no full-size copy of the stored array is ever made.
    """
    rows, cols = out.shape
    try:
        with np.load(path, allow_pickle=False) as z, z.zip.open(_member(z, "attr_matrix")) as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                shape, fortran, dtype = np.lib.format._read_array_header(f, version)
            if tuple(shape) != (rows, cols) or dtype.hasobject:
                raise DatasetError(f"'{path}': attr_matrix changed while it was read")
            row_bytes = cols * dtype.itemsize
            if fortran and rows > 1 and cols > 1:  # column-major: column blocks, same bound
                step = max(1, _BLOCK_BYTES // max(1, rows * dtype.itemsize))
                for lo in range(0, cols, step):
                    hi = min(cols, lo + step)
                    block = _exact(f, (hi - lo) * rows * dtype.itemsize, path)
                    out[:, lo:hi] = np.frombuffer(block, dtype).reshape(hi - lo, rows).T
                return
            step = max(1, _BLOCK_BYTES // max(1, row_bytes))
            for lo in range(0, rows if row_bytes else 0, step):
                hi = min(rows, lo + step)
                block = _exact(f, (hi - lo) * row_bytes, path)
                out[lo:hi] = np.frombuffer(block, dtype).reshape(hi - lo, cols)
    except FleetgnnError:
        raise
    except (*READ_ERRORS, ValueError, KeyError, zipfile.LargeZipFile) as e:
        raise DatasetError(
            f"'{path}': attr_matrix cannot be read ({type(e).__name__}: {e}); the file is "
            f"truncated or corrupt, obtain it again"
        ) from e


def _exact(f: Any, size: int, path: Path) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise DatasetError(
            f"'{path}': attr_matrix holds fewer values than its header declares; the file is "
            f"truncated or corrupt"
        )
    return data


def _csr_into(out: np.ndarray, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray) -> None:
    """Add the checked CSR matrix ``(data, indices, indptr)`` into ``out``, block by block."""
    rows, cols = out.shape
    lo = 0
    per_block = max(1, _BLOCK_BYTES // 16)  # stored values per block (float32 + int64 + ...)
    while lo < rows:
        hi = int(np.searchsorted(indptr, indptr[lo] + per_block, side="right")) - 1
        hi = min(rows, max(hi, lo + 1))
        # a block of rows of about per_block values, and at most _BLOCK_BYTES of output
        hi = min(hi, lo + max(1, _BLOCK_BYTES // max(1, 4 * cols)))
        a, b = int(indptr[lo]), int(indptr[hi])
        block = sp.csr_matrix(
            (data[a:b].astype(np.float32), indices[a:b], indptr[lo : hi + 1] - a),
            shape=(hi - lo, cols),
        )
        block.toarray(out=out[lo:hi])  # adds into out: duplicates are summed, as scipy does
        lo = hi


def _shape(arrays: dict[str, np.ndarray], key: str, path: Path) -> tuple[int, int]:
    s = arrays[key]
    if s.shape != (2,) or s.dtype.kind not in "iu" or int(s.min()) < 0:
        raise DatasetError(
            f"'{path}': '{key}' must be two non-negative integers (rows, cols) (got {s.dtype} "
            f"{s.tolist() if s.size <= 4 else s.shape})"
        )
    return int(s[0]), int(s[1])


def _csr(
    arrays: dict[str, np.ndarray], prefix: str, path: Path
) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int]]:
    """Checked ``(data, indices, indptr, shape)`` of the CSR matrix stored under ``prefix``."""
    rows, cols = _shape(arrays, f"{prefix}_shape", path)
    data, indices, indptr = (arrays[f"{prefix}_{k}"] for k in ("data", "indices", "indptr"))
    where = f"'{path}': {prefix}_*"
    if data.ndim != 1 or indices.ndim != 1 or indptr.ndim != 1:
        raise DatasetError(
            f"{where} arrays must be 1-D (got {data.shape}, {indices.shape}, {indptr.shape})"
        )
    if indices.dtype.kind not in "iu" or indptr.dtype.kind not in "iu":
        raise DatasetError(
            f"{where}: indices and indptr must be integers ({indices.dtype}, {indptr.dtype})"
        )
    if data.dtype.kind not in "biuf":
        raise DatasetError(f"{where}: '{prefix}_data' must be numeric (got {data.dtype})")
    if indptr.size != rows + 1:
        raise DatasetError(
            f"{where}: '{prefix}_indptr' has {indptr.size} entries but {prefix}_shape says "
            f"{rows} rows (needs rows + 1 = {rows + 1}); the arrays do not belong together"
        )
    if data.size != indices.size or int(indptr[0]) != 0 or int(indptr[-1]) != indices.size:
        raise DatasetError(
            f"{where}: indptr must run from 0 to len(indices) = {indices.size} (got "
            f"{int(indptr[0])}..{int(indptr[-1])}) and data must match indices ({data.size} vs "
            f"{indices.size}); the file is corrupt"
        )
    if rows and bool(np.any(np.diff(indptr.astype(np.int64)) < 0)):
        raise DatasetError(f"{where}: '{prefix}_indptr' must be non-decreasing")
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= cols):
        bad = int(indices.min()) if int(indices.min()) < 0 else int(indices.max())
        raise DatasetError(
            f"{where}: column index {bad} is outside [0, {cols}) given by {prefix}_shape"
        )
    return data, indices.astype(np.int64), indptr.astype(np.int64), (rows, cols)


def load_npz(
    file: str | os.PathLike[str],
    *,
    undirected: bool = True,
    num_train_per_class: int | None = None,
    num_val: int | None = None,
    num_test: int | None = None,
    split_seed: int | None = None,
    train_mask: str | os.PathLike[str] | None = None,
    val_mask: str | os.PathLike[str] | None = None,
    test_mask: str | os.PathLike[str] | None = None,
    split: str | os.PathLike[str] | None = None,
    name: str | None = None,
    max_bytes: int | None = None,
    max_dense_bytes: int | None = None,
) -> Graph:
    """Load a gnn-benchmark ``.npz`` graph with a deterministic random split or your own.

    The file is read with ``np.load(allow_pickle=False)`` after a CRC check of every member: an
    archive whose needed arrays require pickling (object arrays) is refused (pickled metadata
    under ignored keys, such as ``idx_to_node`` in some releases, is never unpickled).

    The adjacency ``A[src, dst]`` gives an edge ``src -> dst`` per stored entry (explicit zeros
    are dropped). With ``undirected=True`` (default; the published graphs are undirected but
    mostly stored one way: ``cora.npz`` holds 5429 entries for its 10556 directed edges) every
    missing reverse edge is added, duplicates are merged and self loops dropped, as GNN
    baselines expect; ``undirected=False`` keeps the stored entries as they are. Values other
    than 1 in ``adj_data`` become ``edge_weight``.

    No split ships with these files. Either it comes from your own files: ``.npy`` masks
    (``train_mask`` and optionally ``val_mask`` / ``test_mask``, as
    :func:`~fleetgnn.graph.loaders.splits.load_mask_files` reads them) or one ``split`` file
    holding all three (:func:`~fleetgnn.graph.loaders.splits.load_split_file`); or one is drawn
    by :func:`random_split`: ``split_seed`` shuffles the labelled nodes, the first
    ``num_train_per_class`` of each class train, the next ``num_val`` validate, the next
    ``num_test`` test (defaults: the Planetoid-style 20 / 500 / 1000, seed 0). The ways do not
    mix. Without ``labels`` there is no ``y`` and no split (and a split given is refused).

    Features (CSR ``attr_*`` or dense ``attr_matrix``) are dense float32, ``N * F * 4`` bytes.

    Memory: every size is checked against ``max_bytes`` from what the file declares (the
    headers of its arrays, the shapes, the number of stored edges at
    :data:`~fleetgnn.graph.loaders._io.EDGE_BYTES` each) before it is allocated. The features
    are built in place, so the peak is about the dense matrix plus the file's arrays and the
    edge arrays: at most ``max_bytes`` as counted, about twice the feature matrix for a typical
    bag-of-words file.

    Args:
        file: The ``.npz`` file.
        undirected: Symmetrise, deduplicate and drop self loops.
        num_train_per_class: Training nodes per class of the random split (default 20).
        num_val: Validation nodes of the random split (default 500).
        num_test: Test nodes of the random split (default 1000).
        split_seed: Seed of the random split (default 0).
        train_mask: ``.npy`` bool or 0/1 ``[N]``: the training nodes (your own split).
        val_mask: ``.npy`` bool or 0/1 ``[N]``: the validation nodes (with ``train_mask``).
        test_mask: ``.npy`` bool or 0/1 ``[N]``: the test nodes (with ``train_mask``).
        split: One ``.npz`` / ``.json`` file holding the train, val and test sets.
        name: Graph name (default: the file name without ``.npz``).
        max_bytes: The memory the loader may use (``prepare --max-memory``; default: half of
            this machine's memory). A file declaring more is refused with one line naming
            ``--max-memory``, before anything of that size is allocated.
        max_dense_bytes: The former name of ``max_bytes`` (used when ``max_bytes`` is not
            given).

    Returns:
        The validated graph.

    Raises:
        DatasetError: A missing, corrupt or inconsistent file, too few labelled nodes, or a
            split given that is invalid or mixed with the random split's arguments.
    """
    given = {
        k: v
        for k, v in (("train_mask", train_mask), ("val_mask", val_mask), ("test_mask", test_mask))
        if v is not None
    }
    knobs = {
        "num_train_per_class": num_train_per_class,
        "num_val": num_val,
        "num_test": num_test,
        "split_seed": split_seed,
    }
    check_split_args(given, knobs, split_file=split)  # before anything is read
    path = require_file(Path(file), "npz file")
    budget = MemoryBudget(resolve_max_bytes(max_bytes, max_dense_bytes))
    arrays, dense_header = _read(path, budget)
    missing = [k for k in ADJ_KEYS if k not in arrays]
    if missing:
        raise DatasetError(
            f"'{path}' lacks {', '.join(missing)}; a gnn-benchmark .npz stores the adjacency as "
            f"{', '.join(ADJ_KEYS)}"
        )
    data, indices, indptr, (n, n2) = _csr(arrays, "adj", path)
    if n != n2:
        raise DatasetError(f"'{path}': adj_shape must be square [N, N] (got [{n}, {n2}])")
    if data.size and not np.isfinite(data).all():
        raise DatasetError(f"'{path}': adj_data holds non-finite values")
    budget.take(
        f"'{path}' declares {n} nodes and {data.size} stored edges",
        n * NODE_BYTES + data.size * EDGE_BYTES,
    )
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    nonzero = data != 0
    src, dst, w = src[nonzero], indices[nonzero], data[nonzero]
    weight = None if bool(np.all(w == 1)) else w.astype(np.float32)

    node_data: dict[str, np.ndarray] = {}
    if dense_header is not None:
        shape, _fortran, dtype = dense_header
        if len(shape) != 2 or dtype.kind not in "biuf" or shape[0] != n:
            raise DatasetError(
                f"'{path}': attr_matrix must be a numeric [N={n}, F] array (got {dtype} "
                f"{tuple(shape)})"
            )
        budget.take(
            f"'{path}': attr_matrix declares {shape[0]} x {shape[1]} features (float32)",
            nbytes_of(shape, 4),
        )
        x = np.zeros(shape, dtype=np.float32)
        _stream_rows(path, x)
        node_data["x"] = x
    elif any(k in arrays for k in ATTR_KEYS):
        missing = [k for k in ATTR_KEYS if k not in arrays]
        if missing:
            raise DatasetError(f"'{path}' has sparse features but lacks {', '.join(missing)}")
        a_data, a_idx, a_ptr, (rows, f) = _csr(arrays, "attr", path)
        if rows != n:
            raise DatasetError(f"'{path}': attr_shape has {rows} rows but the graph {n} nodes")
        budget.take(f"'{path}' declares {n} x {f} features (float32, dense)", nbytes_of((n, f), 4))
        x = np.zeros((n, f), dtype=np.float32)
        _csr_into(x, a_data, a_idx, a_ptr)
        node_data["x"] = x
    num_classes = None
    if "labels" in arrays:
        y = arrays["labels"]
        if y.shape != (n,) or y.dtype.kind not in "iu":
            raise DatasetError(
                f"'{path}': labels must be an integer array of shape ({n},) (got {y.dtype} "
                f"{y.shape}); multi-label (sparse labels_*) files are not supported"
            )
        y = class_ids(y, f"'{path}': labels")
        node_data["y"] = y
        num_classes = num_classes_of(y)
        node_data.update(
            split_masks(
                y,
                given,
                split,
                num_train_per_class,
                num_val,
                num_test,
                split_seed,
                labels_hint=_LABELS_HINT,
            )
        )
    else:
        user_split(None, given, split, labels_hint=_LABELS_HINT)  # refuses a split given

    if undirected:
        loops = src == dst
        src, dst = src[~loops], dst[~loops]
        weight = None if weight is None else weight[~loops]
    try:
        g = from_edges(
            src,
            dst,
            n,
            edge_weight=weight,
            node_data=node_data,
            num_classes=num_classes,
            name=name if name is not None else path.name.removesuffix(".npz"),
        )
        return g.to_undirected() if undirected else g
    except FleetgnnError as e:
        raise DatasetError(f"'{path}' holds an invalid graph: {e}") from e
