"""Planetoid citation graphs (Cora, CiteSeer, PubMed) from the original ``ind.<name>.*`` files.

The files are Python 2 pickles. They are read with :class:`SafeUnpickler`, which resolves only the
handful of numpy / scipy / builtin names those files reference and refuses every other global, so
a hostile file cannot run code: the classic ``os.system`` payload fails before anything is called.
Even scipy's ``csr_matrix`` is never instantiated from the pickle: a stand-in records its pickled
attributes, which are then checked and turned into a dense array here.

Sizes are checked before anything of that size is allocated (``max_bytes``, ``prepare
--max-memory``): an array the pickle asks numpy to create (``_reconstruct``) from its declared
shape and dtype, while unpickling; a feature matrix from its declared shape, before it is made
dense; the nodes from ``test.index``; the edges from the sum of the adjacency lists' lengths (a
list shared by many keys counted once per key), before any edge array is built.
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
from fleetgnn.graph.loaders._io import (
    EDGE_BYTES,
    NODE_BYTES,
    MemoryBudget,
    Table,
    iter_line_chunks,
    nbytes_of,
    require_file,
    resolve_max_bytes,
    too_big,
)

PARTS: tuple[str, ...] = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
NUM_VAL = 500  # the standard split's validation nodes: the 500 rows after the training rows
#: The customary feature transform of these bag-of-words features (the GCN/GAT papers'
#: preprocessing): ``fleetgnn prepare planetoid`` records it in ``meta.json`` as ``feature_norm``.
FEATURE_NORM = "row"


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


class _NdarrayRef:
    """Stand-in for ``numpy.ndarray`` while unpickling: an argument of ``_reconstruct`` only.

    Calling ``ndarray(shape, dtype)`` from a pickle would allocate whatever shape it declares, so
    the class itself is never handed out.
    """

    def __new__(cls, *args: object, **kwargs: object) -> _NdarrayRef:
        raise pickle.UnpicklingError("numpy.ndarray may only be restored through _reconstruct")


_SCALAR = np.float64(0).__reduce__()[0]  # numpy.(_)core.multiarray.scalar

_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): _NdarrayRef,
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

    ``numpy.ndarray`` is handed out only as an inert reference for ``_reconstruct``, which checks
    the shape and dtype it is asked for against ``max_bytes`` before numpy allocates anything
    (the array's data, restored later by ``__setstate__``, must then be in the file itself).

    Args:
        file: The pickle stream.
        max_bytes: Largest array ``_reconstruct`` may create (``None``: no limit).
        **kwargs: Passed to :class:`pickle.Unpickler` (``encoding=...``).
    """

    def __init__(self, file: Any, *, max_bytes: int | None = None, **kwargs: Any) -> None:
        super().__init__(file, **kwargs)
        self.max_bytes = max_bytes

    def _reconstruct(self, subtype: object, shape: object, dtype: object) -> np.ndarray:
        """The ``_reconstruct`` of numpy, for ``ndarray`` only and within ``max_bytes``."""
        if subtype is not _NdarrayRef:
            raise pickle.UnpicklingError("_reconstruct may only restore a numpy.ndarray")
        dims = shape if isinstance(shape, tuple) else (shape,)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
            raise pickle.UnpicklingError(f"_reconstruct: invalid shape {shape!r}")
        try:
            dt = np.dtype(dtype)  # type: ignore[call-overload]
        except (TypeError, ValueError) as e:
            raise pickle.UnpicklingError(f"_reconstruct: invalid dtype {dtype!r} ({e})") from e
        need = nbytes_of(dims, dt.itemsize)
        if self.max_bytes is not None and need > self.max_bytes:
            raise _TooBig(dims, dt, need)
        return _RECONSTRUCT(np.ndarray, dims, dt)

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102 - documented on the class
        try:
            found = _ALLOWED[(module, name)]
            return self._reconstruct if found is _RECONSTRUCT else found
        except KeyError:
            raise pickle.UnpicklingError(
                f"refused global '{module}.{name}': only numpy arrays, scipy CSR matrices and "
                f"dicts of lists may appear in a Planetoid file"
            ) from None


class _TooBig(pickle.UnpicklingError):
    """A pickled array declares more bytes than ``max_bytes`` (raised before allocating it)."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, nbytes: int) -> None:
        super().__init__(f"array of shape {shape} {dtype}")
        self.shape, self.dtype, self.nbytes = shape, dtype, nbytes


def safe_load(path: Path, max_bytes: int | None = None) -> Any:
    """Unpickle ``path`` with :class:`SafeUnpickler` (``encoding='latin1'``).

    Args:
        path: The file.
        max_bytes: Refuse any array the pickle declares larger than this, before allocating it
            (``None``: no limit).

    Raises:
        DatasetError: If the file is missing, truncated, corrupt, references a refused global or
            declares an array over ``max_bytes``.
    """
    data = require_file(path, "Planetoid file").read_bytes()
    try:
        return SafeUnpickler(io.BytesIO(data), max_bytes=max_bytes, encoding="latin1").load()
    except FleetgnnError:
        raise
    except _TooBig as e:
        dims = " x ".join(map(str, e.shape))
        what = f"'{path}' declares a {dims} {e.dtype} array"
        raise too_big(what, e.nbytes, max_bytes or 0) from None
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


def _dense(obj: object, path: Path, budget: MemoryBudget) -> np.ndarray:
    """A feature matrix (pickled CSR matrix or 2-D array) as dense float32 ``[rows, F]``.

    The dense size is checked (and taken from ``budget``) from the declared shape before
    anything of that size is allocated; a CSR matrix is written straight into a zeroed float32
    array, so the peak is that array plus the CSR arrays already in memory.
    """
    if isinstance(obj, np.ndarray):
        arr = _numeric(obj, path, "the feature matrix")
        if arr.ndim != 2:
            raise DatasetError(f"'{path}': features must be 2-D (got shape {arr.shape})")
        if arr.dtype != np.float32 or not arr.flags.c_contiguous:
            budget.take(
                f"'{path}' declares {arr.shape[0]} x {arr.shape[1]} features (float32)",
                nbytes_of(arr.shape, 4),
            )
        return np.ascontiguousarray(arr, dtype=np.float32)
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
    budget.take(
        f"'{path}' declares {rows} x {cols} features (float32, dense)", nbytes_of((rows, cols), 4)
    )
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
    out = np.zeros((rows, cols), dtype=np.float32)
    mat = sp.csr_matrix(
        (data.astype(np.float32), indices.astype(np.int64), indptr.astype(np.int64)),
        shape=(rows, cols),
    )
    mat.toarray(out=out)  # adds into out (duplicate entries are summed, as scipy does)
    return out


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


def _graph_edges(
    obj: object, path: Path, n: int, budget: MemoryBudget
) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` from the adjacency dict ``{node: [neighbours]}``, IDs checked.

    The edges the dict declares (the sum of its lists' lengths: a list shared by several keys
    counts once per key) are taken from ``budget`` before any edge array is built; the
    neighbour IDs are then read straight into one int64 array.
    """
    if not isinstance(obj, dict):
        raise DatasetError(f"'{path}' must hold a dict of adjacency lists (got {type(obj)})")
    vals = list(obj.values())
    if not all(isinstance(v, (list, tuple)) for v in vals):
        raise DatasetError(f"'{path}': every value of the graph dict must be a list of node IDs")
    lens = np.fromiter(map(len, vals), dtype=np.int64, count=len(vals))
    num_edges = int(lens.sum(dtype=np.int64))
    budget.take(
        f"'{path}' declares {num_edges} edges ({len(vals)} adjacency lists, "
        f"{len({id(v) for v in vals})} distinct)",
        num_edges * EDGE_BYTES,
    )
    keys = _int_array(list(obj.keys()), path, "graph dict keys")
    checked: set[int] = set()
    for v in vals:  # each distinct list once, however many keys share it
        if id(v) not in checked:
            checked.add(id(v))
            bad = next((e for e in v if not _is_int(e)), _NONE)
            if bad is not _NONE:
                raise DatasetError(
                    f"'{path}': adjacency list entries must be integer node IDs (got "
                    f"{type(bad).__name__} {bad!r}); the graph dict must map node IDs to lists "
                    f"of node IDs"
                )
    try:
        nbrs = np.fromiter(itertools.chain.from_iterable(vals), dtype=np.int64, count=num_edges)
    except (OverflowError, ValueError, TypeError) as e:
        raise DatasetError(f"'{path}': adjacency list entries must be int64 node IDs ({e})") from e
    src = np.repeat(keys, lens)
    for what, ids in (("graph dict key", keys), ("adjacency list entry", nbrs)):
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
            bad_id = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise DatasetError(
                f"'{path}': {what} {bad_id} is outside the valid node IDs [0, {n}) given by the "
                f"feature files; the files belong to different datasets or are corrupt"
            )
    return src, nbrs


_NONE = object()


def _is_int(value: object) -> bool:
    """Whether ``value`` is a Python or numpy integer (not a bool)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


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
    max_bytes: int | None = None,
    max_dense_bytes: int | None = None,
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

    Memory: every size is checked against ``max_bytes`` from what the files declare, before it
    is allocated (arrays inside the pickles, the dense feature matrices, the nodes, the edges at
    :data:`~fleetgnn.graph.loaders._io.EDGE_BYTES` each); the arrays held at once are counted
    together, so the peak stays near ``max_bytes`` at most, whatever the files' size.

    Args:
        root: Directory holding the ``ind.<name>.*`` files.
        name: Dataset name as in the file names, e.g. ``"cora"``, ``"citeseer"``, ``"pubmed"``
            (tried as given, then lower-case).
        max_bytes: The memory the loader may use (``prepare --max-memory``; default: half of
            this machine's memory). An input declaring more is refused with one line naming
            ``--max-memory``, before anything of that size is allocated.
        max_dense_bytes: The former name of ``max_bytes`` (used when ``max_bytes`` is not
            given).

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
    limit = resolve_max_bytes(max_bytes, max_dense_bytes)
    budget = MemoryBudget(limit)
    x = _dense(safe_load(files["x"], limit), files["x"], budget)
    tx = _dense(safe_load(files["tx"], limit), files["tx"], budget)
    allx = _dense(safe_load(files["allx"], limit), files["allx"], budget)
    y = _labels(safe_load(files["y"], limit), files["y"])
    ty = _labels(safe_load(files["ty"], limit), files["ty"])
    ally = _labels(safe_load(files["ally"], limit), files["ally"])
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
    budget.take(
        f"Planetoid {name!r} declares {n} nodes (test.index runs to {n - 1}) with {f} features "
        f"and {c} classes",
        nbytes_of((n, f), 4) + nbytes_of((n, c), 8) + n * NODE_BYTES,
    )
    feats = np.zeros((n, f), dtype=np.float32)
    feats[:n_all] = allx
    feats[test_idx] = tx
    held = sum(a.nbytes for a in (x, tx, allx))
    del x, tx, allx
    budget.release(held)
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

    src, dst = _graph_edges(safe_load(files["graph"], limit), files["graph"], n, budget)
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
