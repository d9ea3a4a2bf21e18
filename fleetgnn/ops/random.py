"""Counter-based randomness keyed by global IDs (stateless, order- and batching-independent).

A random number here is a pure function of its key: ``(seed, step, layer, node ID, column)`` for
node data, ``(seed, step, layer, source ID, destination ID, head)`` for edges. The same key gives
the same number whatever the row order, the batch a row lands in, the rank computing it, or how
often it is recomputed, so every engine draws identical dropout masks.

The hash is the SplitMix64 finaliser (Steele, Lea & Flood 2014), a bijection on 64-bit words,
applied in torch int64 arithmetic (multiplication wraps modulo 2^64; logical right shifts are
emulated with an arithmetic shift and a mask):

1. the scalar part ``(salt, seed, step, layer)`` is absorbed in Python integers, each part XORed
   in and mixed: ``k = mix(mix(mix(mix(salt) ^ seed) ^ step) ^ layer)``;
2. per row: ``r = mix(k ^ id)`` (edges: ``r = mix(mix(k ^ src) ^ dst)``);
3. per hash ``j``: ``h_j = mix(r + (j + 1) * GOLDEN)`` (the SplitMix64 stream seeded by ``r``);
4. float32 output takes two 24-bit draws per hash, column ``2j`` = bits 40..63 and column
   ``2j + 1`` = bits 8..31 of ``h_j``, divided by 2^24; float64 output uses one hash per column,
   its top 53 bits divided by 2^53. Both are exact, so values lie in ``[0, 1)``.

Dropout compares the 24-bit integers with a threshold, which equals ``hash_uniform(...) >= p``
in float32 exactly. Cost (``benchmarks/bench_ops.py``): about 2-3x ``F.dropout`` on CPU, whose
mask is drawn from a stream and cannot be reproduced across engines.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from fleetgnn.errors import ConfigError, GraphError

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB
_SALT_NODE = 0x6E6F6465  # "node"
_SALT_EDGE = 0x65646765  # "edge"
_CHUNK_CPU = 1 << 16  # hashes per chunk on CPU (two 512 KiB scratch buffers, reused)
_CHUNK_DEVICE = 1 << 26


def _signed(v: int) -> int:
    v &= _MASK64
    return v - (1 << 64) if v >= 1 << 63 else v


def mix64(z: int) -> int:
    """SplitMix64 finaliser on a Python int (reference for the tensor version)."""
    z &= _MASK64
    z = ((z ^ (z >> 30)) * _C1) & _MASK64
    z = ((z ^ (z >> 27)) * _C2) & _MASK64
    return z ^ (z >> 31)


def _lsr(z: Tensor, k: int) -> Tensor:
    return (z >> k) & ((1 << (64 - k)) - 1)


def mix64_tensor(z: Tensor) -> Tensor:
    """SplitMix64 finaliser applied elementwise to an int64 tensor (bit pattern as uint64)."""
    z = z ^ _lsr(z, 30)
    z = z * _signed(_C1)
    z = z ^ _lsr(z, 27)
    z = z * _signed(_C2)
    return z ^ _lsr(z, 31)


def _base_key(salt: int, seed: int, step: int, layer: int) -> int:
    k = mix64(salt)
    for part in (seed, step, layer):
        k = mix64(k ^ (int(part) & _MASK64))
    return k


def _ids(name: str, ids: Tensor) -> Tensor:
    if not isinstance(ids, Tensor) or ids.dim() != 1 or ids.is_floating_point():
        raise GraphError(
            f"'{name}' must be a 1-D integer tensor of global IDs (got "
            f"{type(ids).__name__} {getattr(ids, 'dtype', '')} {tuple(getattr(ids, 'shape', ()))})"
        )
    return ids.long()


def _mix_(z: Tensor, tmp: Tensor) -> Tensor:
    """In-place :func:`mix64_tensor` (``tmp`` is scratch of the same shape)."""
    for shift, mult in ((30, _C1), (27, _C2), (31, None)):
        torch.bitwise_right_shift(z, shift, out=tmp)
        tmp.bitwise_and_((1 << (64 - shift)) - 1)
        z.bitwise_xor_(tmp)
        if mult is not None:
            z.mul_(_signed(mult))
    return z


def _column_hashes(rows: Tensor, num: int) -> Tensor:
    """``mix(rows[i] + (c + 1) * GOLDEN)`` for ``c < num``: int64 ``[len(rows), num]``."""
    cols = torch.arange(1, num + 1, dtype=torch.int64, device=rows.device) * _signed(_GOLDEN)
    h = rows[:, None] + cols[None, :]
    return _mix_(h, torch.empty_like(h))


def _uniform_bits(rows: Tensor, width: int) -> Tensor:
    """24-bit integers (int32) ``[len(rows), width]``, two draws per 64-bit hash.

    Column ``2j`` holds bits 40..63 of hash ``j``, column ``2j + 1`` bits 8..31. On CPU the rows
    are hashed in cache-sized chunks with reused scratch buffers (fresh large temporaries cost
    more in page faults than the arithmetic).
    """
    if width < 0:
        raise GraphError(f"'width' must be >= 0 (got {width})")
    n, pairs = rows.shape[0], (width + 1) // 2
    out = torch.empty((n, 2 * pairs), dtype=torch.int32, device=rows.device)
    if n == 0 or pairs == 0:
        return out[:, :width]
    cols = torch.arange(1, pairs + 1, dtype=torch.int64, device=rows.device) * _signed(_GOLDEN)
    chunk = _CHUNK_CPU if rows.device.type == "cpu" else _CHUNK_DEVICE
    step = max(1, chunk // pairs)
    h_buf = torch.empty((min(step, n), pairs), dtype=torch.int64, device=rows.device)
    t_buf = torch.empty_like(h_buf)
    mask24 = (1 << 24) - 1
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        h, tmp = h_buf[: r1 - r0], t_buf[: r1 - r0]
        torch.add(rows[r0:r1, None], cols[None, :], out=h)
        _mix_(h, tmp)
        dst = out[r0:r1].view(r1 - r0, pairs, 2)
        torch.bitwise_right_shift(h, 40, out=tmp)
        dst[:, :, 0].copy_(tmp.bitwise_and_(mask24))
        dst[:, :, 1].copy_(h.bitwise_right_shift_(8).bitwise_and_(mask24))
    return out[:, :width]


def _columns(rows: Tensor, width: int, dtype: torch.dtype) -> Tensor:
    """Uniforms ``[len(rows), width]`` from per-row keys."""
    if dtype == torch.float64:
        if width < 0:
            raise GraphError(f"'width' must be >= 0 (got {width})")
        return _lsr(_column_hashes(rows, width), 11).to(torch.float64) * (2.0**-53)
    if dtype in (torch.float32, torch.float16, torch.bfloat16):
        return (_uniform_bits(rows, width).to(torch.float32) * (2.0**-24)).to(dtype)
    raise GraphError(f"'dtype' must be a float dtype (got {dtype})")


def _threshold(p: float) -> int:
    """Smallest 24-bit integer ``u`` with ``float32(u / 2^24) >= float32(p)``."""
    return int(math.ceil(float(np.float32(p)) * 2**24))


def hash_uniform(
    seed: int,
    step: int,
    layer: int,
    ids: Tensor,
    width: int,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Uniform numbers in ``[0, 1)`` keyed by ``(seed, step, layer, ids[i], column)``.

    Shapes:
        - ids: int ``[N]`` global node IDs (any order, duplicates allowed).
        - output: ``[N, width]``; row ``i`` depends only on the key, not on ``i``.

    Args:
        seed: Run seed.
        step: Optimisation step (or any counter).
        layer: Layer index.
        ids: Global IDs of the rows.
        width: Number of columns.
        dtype: Output float dtype: float32 (24-bit draws, two per hash), float64 (53-bit, one
            per hash); float16/bfloat16 round from float32 and may reach 1.0.
    """
    return _columns(_node_rows(seed, step, layer, ids), width, dtype)


def _node_rows(seed: int, step: int, layer: int, ids: Tensor) -> Tensor:
    base = _signed(_base_key(_SALT_NODE, seed, step, layer))
    return mix64_tensor(_ids("ids", ids) ^ base)


def hash_uniform_edges(
    seed: int,
    step: int,
    layer: int,
    src_ids: Tensor,
    dst_ids: Tensor,
    width: int,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Uniform numbers in ``[0, 1)`` keyed by ``(seed, step, layer, src_ids[e], dst_ids[e], col)``.

    Shapes:
        - src_ids, dst_ids: int ``[E]`` global IDs of each edge's endpoints.
        - output: ``[E, width]`` (``width`` = number of heads for attention dropout).
    """
    return _columns(_edge_rows(seed, step, layer, src_ids, dst_ids), width, dtype)


def _edge_rows(seed: int, step: int, layer: int, src_ids: Tensor, dst_ids: Tensor) -> Tensor:
    src, dst = _ids("src_ids", src_ids), _ids("dst_ids", dst_ids)
    if src.shape != dst.shape:
        raise GraphError(
            f"'src_ids' and 'dst_ids' must have equal length (got {src.numel()} and {dst.numel()})"
        )
    base = _signed(_base_key(_SALT_EDGE, seed, step, layer))
    return mix64_tensor(mix64_tensor(src ^ base) ^ dst)


def _check_p(p: float) -> float:
    if not isinstance(p, (int, float)) or not 0.0 <= float(p) <= 1.0 or math.isnan(p):
        raise ConfigError(f"dropout probability 'p' must lie in [0, 1] (got {p!r})")
    return float(p)


def _drop_rows(x: Tensor, rows: Tensor, p: float) -> Tensor:
    """Dropout of ``x`` (``[N, *feat]``) with row ``i``'s mask drawn from key ``rows[i]``.

    ``0 < p < 1``; kept entries are scaled by ``1 / (1 - p)``.
    """
    drop = (_uniform_bits(rows, math.prod(x.shape[1:])) < _threshold(p)).view(x.shape)
    return x.masked_fill(drop, 0.0).mul_(1.0 / (1.0 - p))


def keyed_dropout(
    x: Tensor,
    p: float,
    seed: int,
    step: int,
    layer: int,
    ids: Tensor,
    training: bool = True,
) -> Tensor:
    """Dropout whose mask element ``(i, f)`` is keyed by ``(seed, step, layer, ids[i], f)``.

    ``mask = hash_uniform(...) >= p``, kept entries scaled by ``1 / (1 - p)``. Identity when not
    ``training`` or ``p == 0``; zeros when ``p == 1``.

    Shapes:
        - x: ``[N, *feat]`` (the features are flattened to ``F`` columns for the key).
        - ids: int ``[N]`` global IDs of the rows.
        - output: like ``x``.

    Raises:
        ConfigError: If ``p`` is outside ``[0, 1]``.
        GraphError: If ``ids`` does not have one entry per row.
    """
    p = _check_p(p)
    if not training or p == 0.0:
        return x
    if ids.shape[:1] != x.shape[:1]:
        raise GraphError(
            f"'ids' must have one global ID per row of x, {x.shape[0]} (got {tuple(ids.shape)})"
        )
    if p == 1.0:
        return x * 0.0
    return _drop_rows(x, _node_rows(seed, step, layer, ids.to(x.device)), p)


def keyed_edge_dropout(
    w: Tensor,
    p: float,
    seed: int,
    step: int,
    layer: int,
    src_ids: Tensor,
    dst_ids: Tensor,
    training: bool = True,
) -> Tensor:
    """Dropout on edge values keyed by ``(seed, step, layer, src ID, dst ID, head)``.

    Used for attention dropout: the mask of edge ``e`` and head ``h`` depends only on its key.

    Shapes:
        - w: ``[E]`` or ``[E, H]``.
        - src_ids, dst_ids: int ``[E]`` global IDs.
        - output: like ``w``.
    """
    p = _check_p(p)
    if not training or p == 0.0:
        return w
    if src_ids.shape[:1] != w.shape[:1]:
        raise GraphError(
            f"'src_ids' must have one global ID per edge, {w.shape[0]} (got {tuple(src_ids.shape)})"
        )
    if p == 1.0:
        return w * 0.0
    return _drop_rows(
        w, _edge_rows(seed, step, layer, src_ids.to(w.device), dst_ids.to(w.device)), p
    )
