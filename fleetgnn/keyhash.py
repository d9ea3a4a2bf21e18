"""The keyed hash under every random draw of fleetgnn: integer primitives shared by layers.

A draw is a pure function of its key, so it is the same on every device, rank and batching. Two
layers draw from it: ``ops.random`` (keyed dropout, see its module docstring for the design and
the statistical tests) and ``sampling`` (the neighbour sampler's Fisher-Yates draws). The pieces:

- :func:`mix64` / :func:`mix64_tensor`: the SplitMix64 finaliser on a Python int / an int64
  tensor (bit pattern read as uint64);
- :func:`base_key`: a scalar key absorbed part by part, ``k = mix(... mix(mix(salt) ^ p0) ...)``;
- :class:`Keys`: per-row 64-bit keys split into ``a = r mod 2^32`` and an odd multiplier
  ``m = (r >> 32) | 1``, per-column Weyl keys ``c_f = f * 0x9E3779B9``, and the 32-bit element
  hash ``y = (a ^ c_f) * m; y ^= y >> 15; h = y * 0x846CA68B`` (all mod ``2^32``), computed in
  int32 torch ops on the rows' device;
- :func:`bounded_draws`: integers uniform in ``[0, n)`` from the element hashes by Lemire's
  multiply-shift, ``(h * n) >> 32``; :func:`mix64_numpy` and :func:`bounded_draws_numpy` are the
  same functions in numpy (bit-identical; numpy never spawns threads, see :func:`serial`).

The module imports only torch and the errors, so every layer may use it
(``tests/test_architecture.py`` lists it with the base modules).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor

from fleetgnn.errors import GraphError

__all__ = [
    "GOLDEN32",
    "MULT32",
    "Keys",
    "base_key",
    "bounded_draws",
    "bounded_draws_numpy",
    "hash32",
    "lsr",
    "mix64",
    "mix64_numpy",
    "mix64_tensor",
    "serial",
    "signed",
    "signed32",
    "to_int32",
]

MASK32 = (1 << 32) - 1
MASK64 = (1 << 64) - 1
C1 = 0xBF58476D1CE4E5B9
C2 = 0x94D049BB133111EB
GOLDEN32 = 0x9E3779B9  # column Weyl key (odd)
MULT32 = 0x846CA68B  # element multiplier (odd; the second constant of Wellons' lowbias32)


def signed(v: int) -> int:
    """A 64-bit pattern as the int64 value torch stores."""
    v &= MASK64
    return v - (1 << 64) if v >= 1 << 63 else v


def signed32(v: int) -> int:
    """A 32-bit pattern as the int32 value torch stores."""
    v &= MASK32
    return v - (1 << 32) if v >= 1 << 31 else v


def mix64(z: int) -> int:
    """SplitMix64 finaliser on a Python int (reference for the tensor version)."""
    z &= MASK64
    z = ((z ^ (z >> 30)) * C1) & MASK64
    z = ((z ^ (z >> 27)) * C2) & MASK64
    return z ^ (z >> 31)


def hash32(row_key: int, column: int) -> int:
    """The 32-bit element hash ``h`` of a 64-bit row key and a column (Python reference)."""
    row_key &= MASK64
    a, m = row_key & MASK32, (row_key >> 32) | 1
    y = ((a ^ ((column * GOLDEN32) & MASK32)) * m) & MASK32
    y ^= y >> 15
    return (y * MULT32) & MASK32


def lsr(z: Tensor, k: int) -> Tensor:
    """Logical right shift of an int64 tensor's bit pattern by ``k`` (``0 < k < 64``)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def mix64_tensor(z: Tensor) -> Tensor:
    """SplitMix64 finaliser applied elementwise to an int64 tensor (bit pattern as uint64)."""
    z = z ^ lsr(z, 30)
    z = z * signed(C1)
    z = z ^ lsr(z, 27)
    z = z * signed(C2)
    return z ^ lsr(z, 31)


def base_key(salt: int, *parts: int) -> int:
    """The scalar key of ``(salt, *parts)``: each part XORed in and mixed, as a uint64 int."""
    k = mix64(salt)
    for part in parts:
        k = mix64(k ^ (int(part) & MASK64))
    return k


def to_int32(z: Tensor) -> Tensor:
    """The low 32 bits of an int64 tensor as int32 (two's complement)."""
    return ((z & MASK32) ^ (1 << 31)).sub_(1 << 31).to(torch.int32)


class Keys:
    """Per-row and per-column keys of one draw: int32 ``a``, ``m`` ``[N]`` and ``c`` ``[F]``."""

    __slots__ = ("a", "c", "m")

    def __init__(self, rows: Tensor, width: int) -> None:
        if width < 0:
            raise GraphError(f"'width' must be >= 0 (got {width})")
        self.a = to_int32(rows)
        self.m = to_int32(lsr(rows, 32) | 1)
        cols = torch.arange(width, dtype=torch.int64, device=rows.device)
        self.c = to_int32(cols * GOLDEN32)

    def hash_(self, r0: int, r1: int, out: Tensor, tmp: Tensor) -> Tensor:
        """Write the element hashes of rows ``[r0, r1)`` into ``out`` (int32 ``[r1 - r0, F]``)."""
        torch.bitwise_xor(self.a[r0:r1, None], self.c[None, :], out=out)
        out.mul_(self.m[r0:r1, None])
        torch.bitwise_right_shift(out, 15, out=tmp)
        out.bitwise_xor_(tmp.bitwise_and_((1 << 17) - 1))
        return out.mul_(signed32(MULT32))


def bounded_draws(rows: Tensor, bounds: Tensor) -> Tensor:
    """``r[s, i] = (hash32(rows[s], i) * bounds[s, i]) >> 32``: uniform in ``[0, bounds[s, i])``.

    Lemire's multiply-shift on the unsigned element hash. Exact integer arithmetic, so the same
    keys give the same draws on every device; a value's probability is within
    ``bounds / 2^32`` (relative) of uniform.

    Shapes:
        - rows: int64 ``[S]`` 64-bit row keys.
        - bounds: int64 ``[S, M]`` exclusive upper bounds in ``[1, 2^31]``.
        - output: int64 ``[S, M]`` on ``rows``' device.
    """
    num_rows, width = bounds.shape
    h = torch.empty((num_rows, width), dtype=torch.int32, device=rows.device)
    if h.numel():
        Keys(rows, width).hash_(0, num_rows, h, torch.empty_like(h))
    return (h.long() & MASK32).mul_(bounds) >> 32


def mix64_numpy(z: np.ndarray) -> np.ndarray:
    """:func:`mix64_tensor` on a uint64 array (numpy's uint64 products wrap mod ``2^64``)."""
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(C1)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(C2)
    return z ^ (z >> np.uint64(31))


def bounded_draws_numpy(rows: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """:func:`bounded_draws` in numpy: ``rows`` uint64 ``[S]``, ``bounds`` int64 ``[S, M]``.

    In place where it can be (fresh large temporaries cost more in page faults than the
    arithmetic).
    """
    width = bounds.shape[1]
    a = (rows & np.uint64(MASK32)).astype(np.uint32)[:, None]  # [S, 1]
    m = ((rows >> np.uint64(32)) | np.uint64(1)).astype(np.uint32)[:, None]
    c = np.arange(width, dtype=np.uint32) * np.uint32(GOLDEN32)  # [M], wraps mod 2^32
    y = a ^ c  # [S, M]
    y *= m
    y ^= y >> np.uint32(15)
    y *= np.uint32(MULT32)
    out = y.astype(np.uint64)
    out *= bounds.astype(np.uint64, copy=False)
    out >>= np.uint64(32)
    return out.view(np.int64)


#: One-off ops over fewer elements than this run on one thread (see :func:`serial`).
SERIAL_ROWS = 1 << 20


@contextlib.contextmanager
def serial(device: torch.device, rows: int = 0) -> Iterator[None]:
    """Run the block on one intra-op thread (CPU), for loops of small element-wise ops.

    Each op of such a loop is a parallel region of ~0.1 ms: with two threads the wake-up and
    barrier of each region cost more than they save, and when another process holds the second
    core each region waits for it to be scheduled (tens of times slower on a loaded 2-core
    machine). ``rows``: the size of a one-off op; at :data:`SERIAL_ROWS` and above it
    keeps every thread. ``torch.set_num_threads`` sets the calling thread's OpenMP team size,
    so other threads' ops are unaffected.
    """
    threads = torch.get_num_threads() if device.type == "cpu" else 1
    if threads == 1 or rows >= SERIAL_ROWS:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
