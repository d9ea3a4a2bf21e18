"""Feature rows written compact: a dataset's ``x.npy`` in a codec's stored form, read as floats.

``fleetgnn prepare --feature-dtype`` (``write_dataset(..., feature_dtype=)``) writes ``x.npy`` as
the stored rows of a :class:`~fleetgnn.graph.compact.FeatureCodec`, so the dataset, and with it
the store's disk tier, holds the compact bytes:

=================  ================================  =================
``feature_dtype``  ``x.npy``                         bytes per row
=================  ================================  =================
``bfloat16``       ``uint16 [N, F]``: the bf16 bits  ``2 F``
``float16``        ``float16 [N, F]``                ``2 F``
``float8_e4m3``    ``uint8 [N, F + 4]``: e4m3 bits,  ``F + 4``
                   then the row's float32 scale
=================  ================================  =================

(numpy has no bfloat16: its bits are stored as ``uint16``.) ``meta.json`` records the codec as
``"feature_dtype"`` and the float the rows are read back as (the dtype they were written from)
as ``"feature_read_dtype"``.

Opening such a dataset gives a :class:`~fleetgnn.graph.csc.Graph` whose ``x`` is a
:class:`CompactRows`: a read-only row array that decodes the rows it is asked for. Why a wrapper
and not a decoded copy or a second field: every reader of ``graph.x`` (engines, export, info,
partition books, the planner) indexes rows and reads ``shape``/``dtype``; those keep working
unchanged and see ``codec.round_trip(original)``, the values a float dataset converted with
``store.feature_dtype`` at load time reads, while nothing ``[N, F]``-sized is decoded up front.
The few places that want the bytes themselves (the store's tiers, which hold exactly these rows,
the disk tier, which maps them, and the planner's row bytes) take :attr:`CompactRows.stored` and
:attr:`CompactRows.codec` instead.

``store.feature_dtype`` on such a dataset (:func:`applied_feature_dtype`): unset or the stored
dtype means the rows as stored (no re-encoding: the tiers hold the file's rows, bit for bit);
``float32`` widens them (decoding is exact); another compact dtype is refused, since rounding
already rounded values again is not what converting the original would give.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fleetgnn.errors import DatasetError, GraphError
from fleetgnn.graph.compact import FeatureCodec, feature_codec
from fleetgnn.graph.row_array import RowArray

#: Stored dtype name -> the numpy dtype of ``x.npy``.
NUMPY_BITS: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "bfloat16": np.dtype(np.uint16),
    "float16": np.dtype(np.float16),
    "float8_e4m3": np.dtype(np.uint8),
}
#: Floats a compact dataset's rows may be read back as (the dtype they were written from).
READ_DTYPES: tuple[str, ...] = ("float16", "float32", "float64")
#: Rows decoded at a time by :meth:`CompactRows.__array__` and the writer's conversion.
_BLOCK_BYTES = 16 << 20


def bits_tensor(raw: np.ndarray, codec: FeatureCodec) -> Tensor:
    """Stored rows read from ``x.npy`` (numpy) as the codec's stored tensor (a view if it can)."""
    raw = np.ascontiguousarray(raw)
    if not raw.flags.writeable:  # a read-only map's view: torch tensors are writable
        raw = raw.copy()
    if codec.name == "bfloat16":
        return torch.from_numpy(raw.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(raw)


def bits_array(rows: Tensor, codec: FeatureCodec) -> np.ndarray:
    """The codec's stored tensor as the numpy array ``x.npy`` holds."""
    rows = rows.contiguous()
    if codec.name == "bfloat16":
        return rows.view(torch.int16).numpy().view(np.uint16)
    return rows.numpy()


def stored_shape(codec: FeatureCodec, num_rows: int, width: int) -> tuple[int, int]:
    """Shape of ``x.npy`` holding ``num_rows`` rows of ``width`` features stored by ``codec``."""
    return int(num_rows), int(width) + (4 if codec.scaled else 0)


def encode_rows(rows: Any, codec: FeatureCodec) -> np.ndarray:
    """Float rows ``[n, F]`` in ``x.npy``'s stored form (:meth:`FeatureCodec.encode`)."""
    return bits_array(codec.encode(np.ascontiguousarray(rows)), codec)


class CompactRows(RowArray):
    """Feature rows stored compact, read as the floats they decode to (see the module docstring).

    Indexing decodes only the rows asked for: ``rows[ids]``, ``rows[a:b]``, ``rows[i]`` and
    ``rows[ids, cols]`` return new float arrays of :attr:`dtype`, ``np.asarray(rows)`` decodes
    all of them (in blocks). Decoding is row-wise, so ``rows[ids] == decode(stored[ids])``.

    Args:
        stored: The stored rows ``[N, W]`` (``x.npy``'s dtype; a memory map or in memory).
        codec: How they are stored.
        dtype: The float they are read back as.

    Attributes:
        stored: The stored rows.
        codec: Their codec.
        dtype: The numpy float dtype of decoded rows.
        shape: ``(N, F)``, the decoded shape.
    """

    def __init__(self, stored: np.ndarray, codec: FeatureCodec, dtype: Any) -> None:
        self.stored = stored
        self.codec = codec
        self.dtype = np.dtype(dtype)
        if self.dtype.name not in READ_DTYPES:
            raise GraphError(
                f"compact feature rows read back as {self.dtype} are not supported; use one of "
                f"{', '.join(READ_DTYPES)}"
            )
        self._torch_dtype = torch.from_numpy(np.empty(0, self.dtype)).dtype
        want = NUMPY_BITS[codec.name]
        extra = 4 if codec.scaled else 0
        if stored.ndim != 2 or stored.dtype != want or stored.shape[1] < extra:
            width = "F + 4" if extra else "F"
            raise GraphError(
                f"{codec.name} feature rows must be stored as {want} [N, {width}] "
                f"(got {stored.dtype} {tuple(stored.shape)})"
            )
        self.shape = (int(stored.shape[0]), int(stored.shape[1]) - extra)

    @property
    def size(self) -> int:
        """Number of decoded values ``N * F``."""
        return self.shape[0] * self.shape[1]

    @property
    def stored_row_bytes(self) -> int:
        """Bytes of one stored row."""
        return self.codec.row_bytes(self.shape[1])

    @property
    def stored_nbytes(self) -> int:
        """Bytes of all stored rows (what ``x.npy`` holds after its header)."""
        return int(self.stored.nbytes)

    def decode(self, raw: np.ndarray) -> np.ndarray:
        """Stored rows ``[n, W]`` (numpy) decoded to :attr:`dtype` ``[n, F]``."""
        return self.decode_tensor(raw).numpy()

    def decode_tensor(self, raw: np.ndarray) -> Tensor:
        """Stored rows ``[n, W]`` (numpy) decoded to a tensor of :attr:`dtype` ``[n, F]``."""
        return self.codec.decode(bits_tensor(raw, self.codec), self._torch_dtype)

    def stored_tensor(self, ids: Any) -> Tensor:
        """The stored rows ``ids`` as the codec's stored tensor (what a store tier holds)."""
        raw = np.asarray(self.stored[ids]).reshape(-1, self.stored.shape[1])
        return bits_tensor(raw, self.codec)

    def take(self, ids: Any) -> CompactRows:
        """Rows ``ids`` as compact rows in memory (e.g. a permutation's)."""
        return CompactRows(np.asarray(self.stored[np.asarray(ids)]), self.codec, self.dtype)

    def __getitem__(self, key: Any) -> np.ndarray:
        cols: Any = None
        if isinstance(key, tuple):
            if len(key) > 2:
                raise IndexError(f"too many indices for a 2-D feature array: {key!r}")
            key, cols = key if len(key) == 2 else (key[0], None)
        raw = np.asarray(self.stored[key])
        one = raw.ndim == 1
        out = self.decode(raw.reshape(-1, self.stored.shape[1]))
        out = out[0] if one else out
        return out if cols is None else out[..., cols]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        n, f = self.shape
        out = np.empty((n, f), dtype=self.dtype if dtype is None else dtype)
        step = max(1, _BLOCK_BYTES // max(1, f * self.dtype.itemsize))
        for a in range(0, n, step):
            out[a : a + step] = self[a : a + step]
        return out

    def __repr__(self) -> str:
        return (
            f"CompactRows({self.codec.name}, shape={self.shape}, reads as {self.dtype}, "
            f"{self.stored_nbytes:,} stored bytes)"
        )


def applied_feature_dtype(x: Any, feature_dtype: str | None) -> str | None:
    """The ``store.feature_dtype`` that rows ``x`` still need applied to their read-back values.

    For plain float rows: ``feature_dtype`` as given. For :class:`CompactRows`: ``None`` when it
    is unset or names the stored dtype (the rows as stored), ``"float32"`` for float32.

    Raises:
        GraphError: ``feature_dtype`` names another compact dtype than ``x`` is stored in, or is
            unknown.
    """
    codec = feature_codec(feature_dtype)
    if not isinstance(x, CompactRows) or codec is None:
        return None if codec is None else codec.name
    if codec.name in (x.codec.name, "float32"):
        return None if codec.name == x.codec.name else codec.name
    raise GraphError(
        f"store.feature_dtype={codec.name} but the dataset stores its features as "
        f"{x.codec.name}, which would round them twice; leave store.feature_dtype unset (or "
        f"{x.codec.name} or float32), or prepare the dataset again with --feature-dtype "
        f"{codec.name}"
    )


def stored_row_bytes(x: Any, feature_dtype: str | None) -> int:
    """Bytes of one feature row of ``x`` as a store with ``store.feature_dtype`` holds it.

    ``F * itemsize`` of plain rows, the compact row's bytes with a ``feature_dtype``, and for
    :class:`CompactRows` their stored bytes unless ``feature_dtype`` widens them (0 for ``None``).
    """
    if x is None:
        return 0
    codec = feature_codec(applied_feature_dtype(x, feature_dtype))
    width = int(x.shape[1])
    if codec is not None:
        return codec.row_bytes(width)
    if isinstance(x, CompactRows):
        return x.stored_row_bytes
    return width * np.dtype(x.dtype).itemsize


def tier_rows(x: Any, rows: np.ndarray, codec: FeatureCodec | None) -> Tensor:
    """Feature rows ``rows`` of ``x`` as a store's tier holds them: the dataset's, or compact.

    Rows a dataset stores compact (:class:`CompactRows`) with ``codec`` their own codec are
    its stored rows, bit for bit (no decoding and encoding again).
    """
    if isinstance(x, CompactRows) and codec is x.codec:
        return x.stored_tensor(rows)
    t = torch.from_numpy(np.ascontiguousarray(x[rows]).reshape(rows.size, x.shape[1]))
    return t if codec is None else codec.encode(t)


def compact_rows(stored: np.ndarray, meta: dict[str, Any]) -> np.ndarray | CompactRows:
    """A dataset's ``x`` from its ``x.npy`` array and ``meta.json``: compact when it says so."""
    name = meta.get("feature_dtype")
    if name is None:
        return stored
    codec = feature_codec(name)
    assert codec is not None  # checked with meta.json
    return CompactRows(stored, codec, np.dtype(meta.get("feature_read_dtype", "float32")))


def write_x(
    values: Any,
    codec: FeatureCodec | None,
    copy_in: Callable[[str, np.ndarray], None],
    create: Callable[[np.dtype, tuple[int, ...]], np.ndarray],
    chunk_bytes: int,
) -> tuple[FeatureCodec, str] | None:
    """Write a dataset's ``x`` stored by ``codec`` (:class:`~fleetgnn.graph.dataset.DatasetWriter`).

    :class:`CompactRows` are copied as stored (``codec`` ``None`` or theirs) or decoded
    (``float32``); float rows are encoded block by block (about ``chunk_bytes`` at a time) into
    the array ``create(dtype, shape)`` makes; ``copy_in("x", array)`` writes a plain array.

    Returns:
        ``(codec, read dtype name)`` of compact rows written (``meta.json``'s
        ``feature_dtype`` and ``feature_read_dtype``), ``None`` for plain rows.

    Raises:
        GraphError: Compact rows asked to be stored by another compact codec (it would round
            them twice), or ``x`` not a 2-D float array.
    """
    if isinstance(values, CompactRows) and (codec is None or codec.name == values.codec.name):
        copy_in("x", values.stored)
        return values.codec, values.dtype.name
    if isinstance(values, CompactRows) and codec is not None and codec.name != "float32":
        raise GraphError(
            f"the features are stored as {values.codec.name}; writing them as {codec.name} "
            f"would round them twice: prepare the dataset again from its source with "
            f"--feature-dtype {codec.name}"
        )
    if codec is None:
        copy_in("x", np.asarray(values))
        return None
    if values.ndim != 2 or not np.issubdtype(values.dtype, np.floating):
        raise GraphError(
            f"'x' must be a 2-D float array to store as {codec.name} "
            f"(got {values.dtype} {tuple(values.shape)})"
        )
    n, f = (int(v) for v in values.shape)
    out = create(NUMPY_BITS[codec.name], stored_shape(codec, n, f))
    step = max(1, chunk_bytes // max(1, f * max(4, np.dtype(values.dtype).itemsize)))
    for lo in range(0, n, step):
        out[lo : lo + step] = encode_rows(values[lo : lo + step], codec)
    return None if codec.name == "float32" else (codec, np.dtype(values.dtype).name)


def writer_codec(feature_dtype: str) -> FeatureCodec:
    """The codec a dataset's ``x`` is written in for ``feature_dtype`` (a name or short name).

    Raises:
        DatasetError: An unknown name (one line naming the valid ones).
    """
    try:
        codec = feature_codec(feature_dtype)
    except GraphError as err:
        raise DatasetError(f"feature_dtype (--feature-dtype): {err}") from None
    assert codec is not None
    return codec


def typed_writer_codecs(
    feature_dtype: str | Mapping[str, str], node_types: Sequence[str]
) -> dict[str, FeatureCodec]:
    """Node type -> the codec its feature table is written in, for a typed dataset.

    ``feature_dtype`` is one dtype for every type (``"bf16"``), or per type as a mapping or the
    text ``"paper=bf16,author=fp8"`` (types not named keep the rows their source holds).

    Raises:
        DatasetError: An unknown dtype or node type, a type named twice, or an empty entry
            (one line naming the valid ones).
    """
    if isinstance(feature_dtype, str) and "=" not in feature_dtype:
        codec = writer_codec(feature_dtype)
        return dict.fromkeys(node_types, codec)
    if isinstance(feature_dtype, str):
        pairs = [p.partition("=") for p in feature_dtype.split(",")]
        if any(not t.strip() or not sep or not d.strip() for t, sep, d in pairs):
            raise DatasetError(
                f"feature_dtype (--feature-dtype) {feature_dtype!r}: expected one dtype or "
                f"TYPE=DTYPE,TYPE=DTYPE (e.g. paper=bf16,author=fp8)"
            )
        items = [(t.strip(), d.strip()) for t, _, d in pairs]
    else:
        items = list(feature_dtype.items())
    out: dict[str, FeatureCodec] = {}
    for t, d in items:
        if t not in node_types:
            raise DatasetError(
                f"feature_dtype (--feature-dtype) names node type {t!r}, which the dataset "
                f"does not have; its node types are {', '.join(node_types)}"
            )
        if t in out:
            raise DatasetError(f"feature_dtype (--feature-dtype) names node type {t!r} twice")
        out[t] = writer_codec(d)
    return out


def typed_compact_rows(stored: np.ndarray, meta: dict[str, Any], ntype: str) -> Any:
    """Node type ``ntype``'s ``x`` of a typed dataset: compact when ``meta.json`` says so."""
    names = meta.get("feature_dtype") or {}
    if ntype not in names:
        return stored
    codec = feature_codec(names[ntype])
    assert codec is not None  # checked with meta.json
    return CompactRows(stored, codec, np.dtype(meta["feature_read_dtype"][ntype]))


def applied_feature_dtypes(
    xs: Mapping[str, Any], feature_dtype: str | None
) -> dict[str, str | None]:
    """:func:`applied_feature_dtype` of every table of a typed graph's ``x`` (node type -> rows).

    ``store.feature_dtype`` is one dtype for every type: a compact table takes it as its
    own table would (unset or its own dtype: as stored; ``float32``: widened), a float table
    converts to it.

    Raises:
        GraphError: It names another compact dtype than a table is stored in (one line
            naming the type).
    """
    out = {}
    for t, x in xs.items():
        try:
            out[t] = applied_feature_dtype(x, feature_dtype)
        except GraphError as err:
            raise GraphError(f"features of node type {t!r}: {err}") from None
    return out
