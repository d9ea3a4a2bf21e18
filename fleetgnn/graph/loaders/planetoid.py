"""Planetoid citation graphs (Cora, CiteSeer, PubMed) from the original ``ind.<name>.*`` files.

The files are Python 2 pickles. They are read with :class:`SafeUnpickler`, which resolves only the
handful of numpy / scipy / builtin names those files reference and refuses every other global, so
a hostile file cannot run code: the classic ``os.system`` payload fails before anything is called.
Even scipy's ``csr_matrix`` is never instantiated from the pickle: a stand-in records its pickled
attributes, which are then checked and turned into a dense array here.
"""

from __future__ import annotations

import collections
import io
import itertools
import os
import pickle
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from fleetgnn.errors import DatasetError, FleetgnnError
from fleetgnn.graph.csc import Graph, from_edges
from fleetgnn.graph.loaders._io import Table, check_dense_size, iter_line_chunks, require_file

PARTS: tuple[str, ...] = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
NUM_VAL = 500  # the standard split's validation nodes: the 500 rows after the training rows
#: The customary feature transform of these bag-of-words features (the GCN/GAT papers'
#: preprocessing): ``fleetgnn prepare planetoid`` records it in ``meta.json`` as ``feature_norm``.
FEATURE_NORM = "row"
_MAX_DENSE_BYTES = 8 << 30


class _CsrState:
    """Stand-in for scipy's ``csr_matrix`` while unpickling: keeps the pickled attribute dict."""

    __slots__ = ("state",)

    def __init__(self, *args: object, **kwargs: object) -> None:  # a REDUCE call, never NEWOBJ
        raise pickle.UnpicklingError("csr_matrix may only be restored from its attribute dict")

    def __setstate__(self, state: object) -> None:
        self.state = state


def _latin1_encode(obj: object, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode`` as protocol-2 pickles use it for ``bytes``: latin-1 strings only."""
    if not isinstance(obj, str) or encoding.lower().replace("-", "").replace("_", "") not in (
        "latin1",
        "iso88591",
    ):
        raise pickle.UnpicklingError(f"refused _codecs.encode({type(obj).__name__}, {encoding!r})")
    return obj.encode("latin-1")


def _empty_bytes(*args: object) -> bytes:
    """``bytes()`` as protocol-2 pickles use it for ``b""``; any argument is refused."""
    if args:
        raise pickle.UnpicklingError("refused bytes(...) with arguments")
    return b""


_RECONSTRUCT = np.ndarray((0,)).__reduce__()[0]  # numpy.(_)core.multiarray._reconstruct
_SCALAR = np.float64(0).__reduce__()[0]  # numpy.(_)core.multiarray.scalar

_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy.core.multiarray", "scalar"): _SCALAR,
    ("numpy._core.multiarray", "scalar"): _SCALAR,
    ("scipy.sparse.csr", "csr_matrix"): _CsrState,
    ("scipy.sparse._csr", "csr_matrix"): _CsrState,
    ("scipy.sparse", "csr_matrix"): _CsrState,
    ("collections", "defaultdict"): collections.defaultdict,
    ("__builtin__", "list"): list,
    ("builtins", "list"): list,
    ("_codecs", "encode"): _latin1_encode,
    ("__builtin__", "bytes"): _empty_bytes,
    ("builtins", "bytes"): _empty_bytes,
}


class SafeUnpickler(pickle.Unpickler):
    """An unpickler that admits only the globals Planetoid files need.

    Allowed: numpy ``ndarray`` / ``dtype`` / ``_reconstruct`` / ``scalar``, scipy ``csr_matrix``
    (restored as an inert attribute record, never as a live scipy object), ``collections.
    defaultdict`` with ``list`` (the graph dict), and ``_codecs.encode`` restricted to latin-1
    strings and ``bytes()`` without arguments (how protocol 2 stores bytes). Any other global
    raises :class:`pickle.UnpicklingError` before it is imported or called; persistent IDs are
    refused too.
    """

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102 - documented on the class
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refused global '{module}.{name}': only numpy arrays, scipy CSR matrices and "
                f"dicts of lists may appear in a Planetoid file"
            ) from None


def safe_load(path: Path) -> Any:
    """Unpickle ``path`` with :class:`SafeUnpickler` (``encoding='latin1'``).

    Raises:
        DatasetError: If the file is missing, truncated, corrupt or references a refused global.
    """
    data = require_file(path, "Planetoid file").read_bytes()
    try:
        return SafeUnpickler(io.BytesIO(data), encoding="latin1").load()
    except FleetgnnError:
        raise
    except Exception as e:  # any failure while parsing untrusted bytes is a bad file
        raise DatasetError(
            f"'{path}' is not a valid Planetoid pickle ({type(e).__name__}: {e}); the file is "
            f"truncated, corrupt or not trusted; obtain it again from the Planetoid release"
        ) from e


def _numeric(arr: object, path: Path, what: str) -> np.ndarray:
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "biuf":
        desc = f"{arr.dtype} array" if isinstance(arr, np.ndarray) else type(arr).__name__
        raise DatasetError(f"'{path}': {what} must be a numeric numpy array (got {desc})")
    return arr


def _dense(obj: object, path: Path, limit: int) -> np.ndarray:
    """A feature matrix (pickled CSR matrix or 2-D array) as dense float32 ``[rows, F]``."""
    if isinstance(obj, np.ndarray):
        arr = _numeric(obj, path, "the feature matrix")
        if arr.ndim != 2:
            raise DatasetError(f"'{path}': features must be 2-D (got shape {arr.shape})")
        return arr.astype(np.float32)
    if not isinstance(obj, _CsrState) or not isinstance(getattr(obj, "state", None), dict):
        raise DatasetError(
            f"'{path}' must hold a scipy CSR matrix or a 2-D array (got {type(obj).__name__})"
        )
    st = obj.state
    shape = st.get("_shape", st.get("shape"))
    if (
        not isinstance(shape, tuple)
        or len(shape) != 2
        or not all(isinstance(s, (int, np.integer)) and s >= 0 for s in shape)
    ):
        raise DatasetError(f"'{path}': the CSR matrix has an invalid shape {shape!r}")
    rows, cols = int(shape[0]), int(shape[1])
    data = _numeric(st.get("data"), path, "the CSR 'data'")
    indices = _numeric(st.get("indices"), path, "the CSR 'indices'")
    indptr = _numeric(st.get("indptr"), path, "the CSR 'indptr'")
    ok = (
        data.ndim == indices.ndim == indptr.ndim == 1
        and indices.dtype.kind in "iu"
        and indptr.dtype.kind in "iu"
        and indptr.size == rows + 1
        and data.size == indices.size
        and int(indptr[0]) == 0
        and int(indptr[-1]) == indices.size
        and bool(np.all(np.diff(indptr) >= 0))
        and (indices.size == 0 or (int(indices.min()) >= 0 and int(indices.max()) < cols))
    )
    if not ok:
        raise DatasetError(
            f"'{path}': the CSR matrix of shape {shape} is inconsistent (indptr of length "
            f"{indptr.size}, {indices.size} indices, {data.size} values); the file is corrupt"
        )
    check_dense_size((rows, cols), 4, limit, f"'{path}' features")
    mat = sp.csr_matrix(
        (data.astype(np.float32), indices.astype(np.int64), indptr.astype(np.int64)),
        shape=(rows, cols),
    )
    return mat.toarray()


def _labels(obj: object, path: Path) -> np.ndarray:
    arr = _numeric(obj, path, "the label matrix")
    if arr.ndim != 2:
        raise DatasetError(f"'{path}': labels must be a 2-D one-hot matrix (got {arr.shape})")
    if arr.size and (not np.isfinite(arr).all() or arr.min() < 0):
        raise DatasetError(f"'{path}': labels must be finite and >= 0 (one-hot rows)")
    return arr


def _int_array(values: list[Any], path: Path, what: str) -> np.ndarray:
    if not values:
        return np.zeros(0, dtype=np.int64)
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError, OverflowError) as e:
        raise DatasetError(f"'{path}': {what} must be integers ({e})") from e
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise DatasetError(
            f"'{path}': {what} must be integer node IDs (got {arr.dtype} values of shape "
            f"{arr.shape}); the graph dict must map node IDs to lists of node IDs"
        )
    return arr.astype(np.int64)


def _graph_edges(obj: object, path: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` from the adjacency dict ``{node: [neighbours]}``, IDs checked."""
    if not isinstance(obj, dict):
        raise DatasetError(f"'{path}' must hold a dict of adjacency lists (got {type(obj)})")
    vals = list(obj.values())
    if not all(isinstance(v, (list, tuple)) for v in vals):
        raise DatasetError(f"'{path}': every value of the graph dict must be a list of node IDs")
    keys = _int_array(list(obj.keys()), path, "graph dict keys")
    nbrs = _int_array(list(itertools.chain.from_iterable(vals)), path, "adjacency list entries")
    lens = np.fromiter(map(len, vals), dtype=np.int64, count=len(vals))
    src = np.repeat(keys, lens)
    for what, ids in (("graph dict key", keys), ("adjacency list entry", nbrs)):
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise DatasetError(
                f"'{path}': {what} {bad} is outside the valid node IDs [0, {n}) given by the "
                f"feature files; the files belong to different datasets or are corrupt"
            )
    return src, nbrs


def _test_index(path: Path) -> np.ndarray:
    table = Table(path, np.dtype(np.int64), 1, None, None, "one test node ID")
    parts = [table.parse(lines, first)[:, 0] for first, lines in iter_line_chunks(path, 1 << 20)]
    idx = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    if idx.size == 0:
        raise DatasetError(f"'{path}' lists no test nodes; the file is empty or truncated")
    if int(idx.min()) < 0:
        raise DatasetError(f"'{path}' holds a negative node ID {int(idx.min())}")
    if np.unique(idx).size != idx.size:
        raise DatasetError(f"'{path}' lists a node ID twice; each test node must appear once")
    return idx


def load_planetoid(
    root: str | os.PathLike[str],
    name: str,
    *,
    max_dense_bytes: int = _MAX_DENSE_BYTES,
) -> Graph:
    """Load a Planetoid dataset with its standard split (Kipf & Welling's ``gcn`` / PyG layout).

    Reads ``root/ind.<name>.{x,tx,allx,y,ty,ally,graph,test.index}``:

    * features ``x`` = ``vstack(allx, tx)`` with row ``j`` of ``tx`` placed at node
      ``test.index[j]``; labels ``y = argmax`` of ``vstack(ally, ty)`` placed the same way;
    * train = the ``len(ind.<name>.y)`` first nodes (140 for Cora), val = the next 500 nodes,
      test = the nodes listed in ``test.index`` (1000);
    * when ``test.index`` has gaps (CiteSeer), the whole range ``min..max`` of ``test.index``
      becomes nodes; the missing ones get zero features, no label (``y = -1``) and no split. Any
      node whose label row is all zeros is unlabelled (``y = -1``; the reference code gives it
      class 0) and is left out of the splits with a warning;
    * edges from the adjacency dict, self loops dropped, symmetrised and deduplicated
      (:meth:`Graph.to_undirected`). Cora: 2708 nodes, 10556 directed edges, 1433 features,
      7 classes, 140 / 500 / 1000 train / val / test.

    Features are dense float32, ``N * F * 4`` bytes (Cora 15.5 MB, PubMed 39 MB).

    Args:
        root: Directory holding the ``ind.<name>.*`` files.
        name: Dataset name as in the file names, e.g. ``"cora"``, ``"citeseer"``, ``"pubmed"``
            (tried as given, then lower-case).
        max_dense_bytes: Refuse feature matrices whose dense form would exceed this size (a
            guard against corrupt shapes).

    Returns:
        The validated graph, named ``name``.

    Raises:
        DatasetError: Missing, corrupt, inconsistent or refused (unsafe) files.
    """
    base = Path(root)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        raise DatasetError(
            f"'name' must be a plain dataset name such as 'cora' (got {name!r}); it is used in "
            f"the file names ind.<name>.x etc."
        )
    if not base.is_dir():
        raise DatasetError(f"Planetoid directory '{base}' does not exist; check 'root'")
    stem = name
    if not (base / f"ind.{stem}.x").is_file() and (base / f"ind.{stem.lower()}.x").is_file():
        stem = stem.lower()
    files = {part: base / f"ind.{stem}.{part}" for part in PARTS}
    missing = [str(p.name) for p in files.values() if not p.is_file()]
    if missing:
        raise DatasetError(
            f"Planetoid dataset {name!r} in '{base}' lacks {', '.join(missing)}; each of "
            f"ind.{stem}.{{{','.join(PARTS)}}} is needed"
        )
    x = _dense(safe_load(files["x"]), files["x"], max_dense_bytes)
    tx = _dense(safe_load(files["tx"]), files["tx"], max_dense_bytes)
    allx = _dense(safe_load(files["allx"]), files["allx"], max_dense_bytes)
    y = _labels(safe_load(files["y"]), files["y"])
    ty = _labels(safe_load(files["ty"]), files["ty"])
    ally = _labels(safe_load(files["ally"]), files["ally"])
    test_idx = _test_index(files["test.index"])

    def mismatch(msg: str) -> DatasetError:
        return DatasetError(f"Planetoid dataset {name!r} in '{base}' is inconsistent: {msg}")

    n_train, n_all, n_test = x.shape[0], allx.shape[0], test_idx.size
    f, c = allx.shape[1], ally.shape[1]
    if x.shape[1] != f or tx.shape[1] != f:
        raise mismatch(f"feature widths differ (x {x.shape}, tx {tx.shape}, allx {allx.shape})")
    if y.shape[1] != c or ty.shape[1] != c:
        raise mismatch(f"label widths differ (y {y.shape}, ty {ty.shape}, ally {ally.shape})")
    if y.shape[0] != n_train or ally.shape[0] != n_all:
        raise mismatch(
            f"rows differ: x {n_train} vs y {y.shape[0]}, allx {n_all} vs ally {ally.shape[0]}"
        )
    if tx.shape[0] != n_test or ty.shape[0] != n_test:
        raise mismatch(
            f"test.index lists {n_test} nodes but tx has {tx.shape[0]} and ty {ty.shape[0]} rows"
        )
    if int(test_idx.min()) != n_all:
        raise mismatch(
            f"the test nodes must follow the {n_all} rows of allx, but test.index starts at "
            f"{int(test_idx.min())}"
        )
    if n_train + NUM_VAL > n_all:
        raise mismatch(
            f"the standard split needs {n_train} train + {NUM_VAL} val rows in allx (has {n_all})"
        )
    n = int(test_idx.max()) + 1
    check_dense_size((n, f), 4, max_dense_bytes, f"Planetoid {name!r} features")
    feats = np.zeros((n, f), dtype=np.float32)
    feats[:n_all] = allx
    feats[test_idx] = tx
    onehot = np.zeros((n, c), dtype=np.float64)
    onehot[:n_all] = ally
    onehot[test_idx] = ty
    labels = np.argmax(onehot, axis=1).astype(np.int64) if c else np.zeros(n, np.int64)
    labels[onehot.max(axis=1, initial=0.0) <= 0] = -1

    masks = {k: np.zeros(n, dtype=bool) for k in ("train_mask", "val_mask", "test_mask")}
    masks["train_mask"][:n_train] = True
    masks["val_mask"][n_train : n_train + NUM_VAL] = True
    masks["test_mask"][test_idx] = True
    dropped = sum(int(np.count_nonzero(m & (labels < 0))) for m in masks.values())
    if dropped:
        warnings.warn(
            f"Planetoid {name!r}: {dropped} split nodes have an all-zero label row; they are "
            f"left out of the splits (y = -1)",
            stacklevel=2,
        )
        for m in masks.values():
            m &= labels >= 0

    src, dst = _graph_edges(safe_load(files["graph"]), files["graph"], n)
    keep = src != dst
    try:
        g = from_edges(
            src[keep],
            dst[keep],
            n,
            node_data={"x": feats, "y": labels, **masks},
            num_classes=max(c, 1),
            name=name,
        )
        return g.to_undirected()
    except FleetgnnError as e:
        raise DatasetError(f"Planetoid dataset {name!r} in '{base}' is invalid: {e}") from e
