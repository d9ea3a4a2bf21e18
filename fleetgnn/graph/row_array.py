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
