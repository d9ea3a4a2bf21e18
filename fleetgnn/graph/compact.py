"""Compact feature rows: how a feature table is stored (``store.feature_dtype``) and read back.

A :class:`FeatureCodec` turns feature rows into their stored form and back:

=================  ===============================  ==================  =======================
stored dtype       stored row ``[W]``               bytes per row       read back as
=================  ===============================  ==================  =======================
``float32``        the row rounded to float32       ``4 F``             ``stored``
``bfloat16``       the row in bfloat16 (``[F]``)    ``2 F``             ``float(stored)``
``float16``        the row in float16 (``[F]``)     ``2 F``             ``float(stored)``
``float8_e4m3``    e4m3 bits, then the row's        ``F + 4``           ``float(bits) * scale``
                   float32 scale's 4 bytes
                   (``uint8 [F + 4]``)
=================  ===============================  ==================  =======================

A stored row is one row of a plain tensor (the narrow float; for float8 its bits and its scale
in one ``uint8`` row), so every tier moves it as it moves any row: shared memory, CUDA IPC,
pinned copies, collectives, ``index_select``. Reading back ("decoding") is row-wise and
elementwise, so decoding gathered rows equals gathering decoded rows, bit for bit; every reader
of the store returns the same values, ``round_trip(x)``.

float8 (e4m3, the ``float8_e4m3fn`` of torch: no infinities, largest finite 448) has a scale per
row: ``scale = max |x_row| / 448`` (1 for an all-zero row), the row is stored as
``fp8(x_row / scale)``, and read back as ``float(stored) * scale``. Each row keeps its full
e4m3 range whatever the magnitudes of the other rows; a row of equal values (a binary bag of
words after row normalisation) is read back exactly.

Encoding rounds to nearest even (torch's casts), computed in float32 from the given rows.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import Tensor

from fleetgnn.config.knobs import FEATURE_DTYPE_ALIASES, FEATURE_DTYPES
from fleetgnn.errors import GraphError
from fleetgnn.kernels import gather_rows

#: The largest finite float8 e4m3 value (``torch.finfo(torch.float8_e4m3fn).max``).
FP8_MAX = 448.0

#: Stored bytes a CPU :meth:`FeatureCodec.gather` reads per pass: one pass's rows, and the
#: float8 decode's int16 temporaries, stay in the core's cache between their gather and their
#: decode, and no ``[n, W]`` copy of the stored rows is allocated (an L2's worth).
GATHER_CHUNK_BYTES = 1 << 18

#: Stored dtype name -> (the float it rounds to, the dtype of the stored tensor: the float itself
#: for 16 bits (gloo has no int16 collectives), bytes for float8 and its scale).
_FORMATS: dict[str, tuple[torch.dtype, torch.dtype]] = {
    "float32": (torch.float32, torch.float32),
    "bfloat16": (torch.bfloat16, torch.bfloat16),
    "float16": (torch.float16, torch.float16),
    "float8_e4m3": (torch.float8_e4m3fn, torch.uint8),
}


@dataclasses.dataclass(frozen=True)
class FeatureCodec:
    """One stored dtype (see the module docstring).

    Attributes:
        name: One of :data:`~fleetgnn.config.knobs.FEATURE_DTYPES`.
        float_dtype: The float the rows are rounded to.
        bits: The dtype of the stored tensor (the float itself; ``uint8`` for float8).
        scaled: Whether each row has a float32 scale (float8).
    """

    name: str
    float_dtype: torch.dtype
    bits: torch.dtype
    scaled: bool

    def row_bytes(self, width: int) -> int:
        """Stored bytes of one row of ``width`` features."""
        itemsize = torch.empty((), dtype=self.bits).element_size()
        return int(width) * itemsize + (4 if self.scaled else 0)

    def encode(self, x: Tensor | np.ndarray) -> Tensor:
        """The stored rows ``[n, W]`` of rows ``x`` ``[n, F]`` (any float dtype)."""
        t = torch.as_tensor(np.asarray(x) if not isinstance(x, Tensor) else x)
        if not t.is_floating_point() or t.dim() != 2:
            raise GraphError(
                f"feature rows to store as {self.name} must be a 2-D float array "
                f"(got {tuple(t.shape)} {t.dtype})"
            )
        if self.name == "float32":
            return t.to(torch.float32).contiguous()
        t32 = t.to(torch.float32)
        if not self.scaled:
            return t32.to(self.float_dtype).view(self.bits).contiguous()
        n = t32.shape[0]
        amax = t32.abs().amax(dim=1) if t32.shape[1] else t32.new_zeros(n)
        scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
        data = (t32 / scale[:, None]).to(self.float_dtype).view(self.bits)
        return torch.cat([data, scale[:, None].contiguous().view(torch.uint8)], dim=1)

    def decode(self, rows: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
        """Stored rows ``[n, W]`` read back as ``dtype`` ``[n, F]`` (row-wise, elementwise)."""
        self._check_bits(rows)
        if self.name == "float32":
            return rows.to(dtype)
        out = rows.new_empty((rows.shape[0], self.width(rows.shape[1])), dtype=dtype)
        self._decode_into(rows, out)
        return out

    def gather(
        self,
        table: Tensor,
        ids: Tensor,
        dtype: torch.dtype = torch.float32,
        out: Tensor | None = None,
    ) -> Tensor:
        """``decode(table[ids], dtype)``: stored rows of a tier tensor read back, into ``out``.

        On the CPU the rows pass through a cache-sized scratch (:data:`GATHER_CHUNK_BYTES` of
        stored rows at a time): each chunk is gathered, then decoded into its rows of the
        output while it is still in the cache, so the output is the only ``[n, F]`` tensor
        allocated and the stored rows are read from memory once. On other devices the gather,
        then the decode. Bit for bit ``decode(gather_rows(table, ids), dtype)`` either way.

        Shapes:
            - table: ``[N, W]`` stored rows (``bits``); ids: ``[n]`` int64 on its device
            - out (optional) and output: ``[n, F]`` ``dtype`` on the table's device
        """
        self._check_bits(table)
        n, f = int(ids.numel()), self.width(int(table.shape[1]))
        if out is None:
            out = torch.empty((n, f), dtype=dtype, device=table.device)
        elif tuple(out.shape) != (n, f) or out.dtype != dtype or out.device != table.device:
            raise GraphError(
                f"the output of a gather of {n} rows must be [{n}, {f}] {dtype} on "
                f"{table.device} (got {list(out.shape)} {out.dtype} on {out.device})"
            )
        if table.device.type != "cpu":
            return out.copy_(self.decode(gather_rows(table, ids), dtype))
        chunk = max(1, GATHER_CHUNK_BYTES // max(1, int(table.shape[1]) * table.element_size()))
        scratch = table.new_empty((min(chunk, n), int(table.shape[1])))
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            self._decode_into(gather_rows(table, ids[s:e], scratch[: e - s]), out[s:e])
        return out

    def _check_bits(self, rows: Tensor) -> None:
        if rows.dtype != self.bits:
            raise GraphError(
                f"stored {self.name} rows must be {self.bits} (got {rows.dtype}); a tier holds "
                "rows of another feature dtype"
            )

    def width(self, stored_width: int) -> int:
        """Features per row of stored rows ``stored_width`` wide."""
        return stored_width - 4 if self.scaled else stored_width

    def _decode_into(self, rows: Tensor, out: Tensor) -> None:
        """:meth:`decode` of ``rows`` written into ``out`` (its dtype), the same ops in place."""
        if not self.scaled:
            out.copy_(rows if self.name == "float32" else rows.view(self.float_dtype))
            return
        f = rows.shape[1] - 4
        # a copy: a view's offset (one row of width F % 4 != 0) may not be float-aligned
        scale = rows[:, f:].clone(memory_format=torch.contiguous_format).view(torch.float32)
        out.copy_(_e4m3_as_half(rows[:, :f]))
        out.mul_(scale.mul(_E4M3_HALF_SCALE).to(out.dtype))  # in place: no second [n, F] output

    def round_trip(self, x: Tensor | np.ndarray, dtype: torch.dtype | None = None) -> Tensor:
        """``decode(encode(x))`` in ``dtype`` (default: ``x``'s): the values a store holds."""
        t = torch.as_tensor(np.asarray(x) if not isinstance(x, Tensor) else x)
        return self.decode(self.encode(t), t.dtype if dtype is None else dtype)


#: :func:`_e4m3_as_half`'s values times this are the e4m3 values (a power of two: exact).
_E4M3_HALF_SCALE = 256.0
#: The half bits :func:`_e4m3_as_half` gives e4m3's NaN (``S.1111.111``) before it marks it.
_E4M3_NAN_AS_HALF = 0x3F80


def _e4m3_as_half(bits: Tensor) -> Tensor:
    """float16 ``[n, F]`` whose values times :data:`_E4M3_HALF_SCALE` are the e4m3 ``bits``.

    e4m3 (exponent bias 7, 3 mantissa bits) widens into float16 (bias 15, 10 bits) by moving
    its exponent and mantissa bits up by 7 and its sign to bit 15: the half then holds the
    e4m3 value times ``2**-8``, exactly, subnormals included (both formats' subnormals scale
    alike); e4m3's NaN lands on a finite half and is made the NaN torch's cast gives, sign
    kept. A few vectorised int16 passes, faster on the CPU than torch's float8 cast.
    """
    h = bits.to(torch.int16)
    sign = (h & 0x80).bitwise_left_shift_(8)
    h.bitwise_and_(0x7F).bitwise_left_shift_(7).bitwise_or_(sign)
    nan = ((h & 0x7FFF) == _E4M3_NAN_AS_HALF).to(torch.int16)  # 1 where e4m3 held NaN
    h.bitwise_or_(nan * 0x7E00)  # there: all exponent bits set, the mantissa kept (torch's NaN)
    return h.view(torch.float16)


def feature_codec(name: str | None) -> FeatureCodec | None:
    """The codec of ``store.feature_dtype`` ``name`` or its short name (``None``: as stored).

    Raises:
        GraphError: An unknown name.
    """
    if name is None:
        return None
    name = FEATURE_DTYPE_ALIASES.get(str(name).lower(), name)
    if name not in _FORMATS:
        raise GraphError(
            f"unknown feature dtype {name!r}; choose one of {', '.join(FEATURE_DTYPES)}"
        )
    float_dtype, bits = _FORMATS[name]
    return FeatureCodec(name, float_dtype, bits, scaled=name == "float8_e4m3")
