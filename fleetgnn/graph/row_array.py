"""The base of node-feature arrays that are not plain numpy arrays (without importing torch).

A :class:`~fleetgnn.graph.csc.Graph`'s ``x`` is a numpy float array ``[N, F]`` or a
:class:`RowArray`: a read-only array of rows whose ``__getitem__`` returns numpy rows, e.g.
:class:`~fleetgnn.graph.compact_rows.CompactRows` (rows stored compact, decoded when read).
The graph layer checks against this base, so it need not import the codecs (and torch).
"""

from __future__ import annotations

from typing import Any

import numpy as np


class RowArray:
    """A read-only ``[N, F]`` row array: ``shape``, ``dtype``, ``ndim``, indexing, ``__array__``.

    Subclasses implement :meth:`__getitem__` (numpy rows of :attr:`dtype`), :meth:`__array__`,
    :meth:`take` and :meth:`decode`, and hold :attr:`stored`: rows ``i`` of ``stored`` decode to
    row ``i``, so a reader of ``stored``'s file (:class:`~fleetgnn.graph.rows.RowReader`) gives
    the rows by decoding what it read.
    """

    ndim = 2
    shape: tuple[int, int]
    dtype: np.dtype
    stored: np.ndarray

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        raise NotImplementedError

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise NotImplementedError

    def take(self, ids: Any) -> RowArray:
        """Rows ``ids`` as a row array of the same kind (e.g. a permutation's)."""
        raise NotImplementedError

    def decode(self, raw: np.ndarray) -> np.ndarray:
        """Rows ``[n, ...]`` of :attr:`stored` as the rows they read as ``[n, F]``."""
        raise NotImplementedError


#: ``meta.json``'s ``feature_dtype`` (compact feature rows) -> ``x.npy``'s dtype, extra columns.
COMPACT_X: dict[str, tuple[str, int]] = {
    "bfloat16": ("<u2", 0),
    "float16": ("<f2", 0),
    "float8_e4m3": ("|u1", 4),
}


def compact_meta_problem(meta: dict[str, Any]) -> tuple[str, Any, str] | None:
    """``(key, value, what was expected)`` of a bad compact-feature entry of ``meta.json``.

    ``feature_dtype`` (absent: plain rows) must name a compact codec, ``feature_read_dtype`` a
    float, and ``arrays.x`` that codec's stored rows ``[num_nodes, num_features (+ 4)]``.
    ``None``: nothing wrong.
    """
    name = meta.get("feature_dtype")
    if name is None:
        return None
    if name not in COMPACT_X:
        return "feature_dtype", name, f"expected one of {', '.join(COMPACT_X)}"
    read = meta.get("feature_read_dtype")
    if read not in ("float16", "float32", "float64"):
        return "feature_read_dtype", read, "expected 'float16', 'float32' or 'float64'"
    arrays = meta.get("arrays")
    spec = arrays.get("x") if isinstance(arrays, dict) else None
    dtype, extra = COMPACT_X[name]
    want = [meta["num_nodes"], meta["num_features"] + extra]
    if (
        not isinstance(spec, dict)
        or spec.get("dtype") != np.dtype(dtype).str
        or (spec.get("shape") != want)
    ):
        return "arrays.x", spec, f"{name} rows: {dtype} of shape {want}"
    return None


def typed_compact_meta_problem(
    meta: dict[str, Any], counts: dict[str, int]
) -> tuple[str, Any, str] | None:
    """``(key, value, what was expected)`` of a bad compact-feature entry of a typed ``meta.json``.

    ``feature_dtype`` (absent: every table plain) maps node types to compact codecs and
    ``feature_read_dtype`` the same types to floats; ``arrays["x/TYPE"]`` of each such type
    must be that codec's stored rows ``[N_TYPE, F (+ 4)]``. ``counts``: node type -> ``N_TYPE``.
    ``None``: nothing wrong.
    """
    names = meta.get("feature_dtype")
    if names is None:
        return None
    if not isinstance(names, dict) or any(t not in counts for t in names):
        return "feature_dtype", names, "expected an object {node type: compact dtype}"
    read = meta.get("feature_read_dtype")
    if not isinstance(read, dict) or set(read) != set(names):
        return "feature_read_dtype", read, f"expected an object with the types {sorted(names)}"
    arrays = meta.get("arrays")
    for t, name in names.items():
        if name not in COMPACT_X:
            return f"feature_dtype.{t}", name, f"expected one of {', '.join(COMPACT_X)}"
        if read[t] not in ("float16", "float32", "float64"):
            return (
                f"feature_read_dtype.{t}",
                read[t],
                "expected 'float16', 'float32' or 'float64'",
            )
        spec = arrays.get(f"x/{t}") if isinstance(arrays, dict) else None
        dtype, extra = COMPACT_X[name]
        shape = spec.get("shape") if isinstance(spec, dict) else None
        if (
            not isinstance(spec, dict)
            or spec.get("dtype") != np.dtype(dtype).str
            or not isinstance(shape, list)
            or len(shape) != 2
            or shape[0] != counts[t]
            or not isinstance(shape[1], int)
            or shape[1] < extra
        ):
            width = "F + 4" if extra else "F"
            return f"arrays.x/{t}", spec, f"{name} rows: {dtype} of shape [{counts[t]}, {width}]"
    return None
