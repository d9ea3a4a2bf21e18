"""Counter-based randomness keyed by global IDs (stateless, order- and batching-independent).

A random number here is a pure function of its key: ``(seed, step, layer, node ID, column)`` for
node data, ``(seed, step, layer, source ID, destination ID, head)`` for edges. The same key gives
the same number whatever the row order, the batch a row lands in, the rank computing it, or how
often it is recomputed, so every engine draws identical dropout masks.

The generator does one 64-bit mix per row and a cheap 32-bit hash per element:

1. the scalar part ``(salt, seed, step, layer)`` is absorbed in Python integers with the
   SplitMix64 finaliser ``mix`` (Steele, Lea & Flood 2014), each part XORed in and mixed:
   ``k = mix(mix(mix(mix(salt) ^ seed) ^ step) ^ layer)``;
2. per row, a 64-bit row key ``r = mix(k ^ id)`` (edges: ``r = mix(mix(k ^ src) ^ dst)``), split
   into ``a = r mod 2^32`` and an odd multiplier ``m = (r >> 32) | 1``;
3. per column ``f`` (a feature, or a head for edges), the Weyl key ``c_f = f * 0x9E3779B9``;
4. per element, in 32-bit arithmetic (all mod ``2^32``, ``>>`` logical):
   ``y = (a ^ c_f) * m``, ``y = y ^ (y >> 15)``, ``h = y * 0x846CA68B``;
5. the draw is ``v = (h >> 8) ^ 2^23``: the top 24 bits of ``h``, the highest one flipped (so
   that a signed comparison of ``h`` orders the draws), and ``hash_uniform = v / 2^24``, exact in
   float32 and float64, in ``[0, 1)``.

Dropout keeps an element iff ``v >= ceil(float32(p) * 2^24)``, which equals
``hash_uniform(...) >= p`` in float32 exactly (one comparison of ``h`` with a threshold). The
per-row key makes rows independent (their multipliers differ as well as their keys); the Weyl
keys of any two columns below ``2^27`` differ within their low 27 bits, from where the multiply
spreads the difference to every higher bit. ``tests/ops/test_random.py`` checks the keep rate,
bits, correlations between neighbouring rows, columns, steps and layers, and that the mask of a
subset of rows or columns is the matching slice of the full mask.

The integer primitives live in :mod:`fleetgnn.keyhash`, shared with the neighbour sampler.

The element hash runs as six int32 torch ops over cache-sized chunks of rows (reused scratch
buffers; fresh large temporaries cost more in page faults than the arithmetic) and is fused with
the mask application per chunk. Dropout is a custom autograd function that saves the mask as
``uint8`` (a quarter of the float32 mask ``F.dropout`` saves) and applies it in backward; with no
gradient required, no full-size mask is allocated. ``benchmarks/bench_dropout.py`` (1 thread,
2-core EPYC): Cora's input (2708 x 1433) forward+backward 0.2-0.25x ``F.dropout``'s time (forward
alone ~0.17x), a 100k x 256 hidden layer 0.24x forward and 0.36x forward+backward (large outputs
are dominated by page faults). ``F.dropout``'s mask is drawn from a stream and cannot be
reproduced across engines. A ``torch.compile``d fused mask was slower here (and compiles ~20 s).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from fleetgnn import kernels
from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.kernels import dropout_threshold, rows_per_chunk, scratch
from fleetgnn.keyhash import Keys as _Keys
from fleetgnn.keyhash import base_key, mix64_tensor
from fleetgnn.keyhash import hash32 as hash32  # re-exported: the Python reference
from fleetgnn.keyhash import mix64 as mix64  # re-exported: the Python reference
from fleetgnn.keyhash import serial as _serial
from fleetgnn.keyhash import signed as _signed

_SALT_NODE = 0x6E6F6465  # "node"
_SALT_EDGE = 0x65646765  # "edge"


def _base_key(salt: int, seed: int, step: int, layer: int) -> int:
    return base_key(salt, seed, step, layer)


def _ids(name: str, ids: Tensor) -> Tensor:
    if not isinstance(ids, Tensor) or ids.dim() != 1 or ids.is_floating_point():
        raise GraphError(
            f"'{name}' must be a 1-D integer tensor of global IDs (got "
            f"{type(ids).__name__} {getattr(ids, 'dtype', '')} {tuple(getattr(ids, 'shape', ()))})"
        )
    return ids.long()


def _draws(keys: _Keys) -> Tensor:
    """The 24-bit draws ``v`` (int32 ``[N, F]``), see the module docstring."""
    n, width = keys.a.shape[0], keys.c.shape[0]
    out = torch.empty((n, width), dtype=torch.int32, device=keys.a.device)
    if out.numel() == 0:
        return out
    step = rows_per_chunk(n, width, out.device)
    h_buf, t_buf = scratch(step, width, out.device)
    with _serial(out.device):
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            h = keys.hash_(r0, r1, h_buf[: r1 - r0], t_buf[: r1 - r0])
            torch.bitwise_right_shift(h, 8, out=out[r0:r1]).add_(1 << 23)
    return out


def _columns(rows: Tensor, width: int, dtype: torch.dtype) -> Tensor:
    """Uniforms ``[len(rows), width]`` from per-row keys."""
    if dtype not in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
        raise GraphError(f"'dtype' must be a float dtype (got {dtype})")
    keys = _Keys(rows, width)
    u = _draws(keys).to(torch.float64 if dtype == torch.float64 else torch.float32)
    return u.mul_(2.0**-24).to(dtype)


def hash_uniform(
    seed: int,
    step: int,
    layer: int,
    ids: Tensor,
    width: int,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Uniform numbers in ``[0, 1)`` keyed by ``(seed, step, layer, ids[i], column)``.

    Values are the 24-bit draws of the module docstring divided by ``2^24`` (exact in float32 and
    float64); keyed dropout keeps exactly the elements whose float32 value is ``>= p``.

    Shapes:
        - ids: int ``[N]`` global node IDs (any order, duplicates allowed).
        - output: ``[N, width]``; row ``i`` depends only on the key, not on ``i``.

    Args:
        seed: Run seed.
        step: Optimisation step (or any counter).
        layer: Layer index.
        ids: Global IDs of the rows.
        width: Number of columns.
        dtype: Output float dtype; float16/bfloat16 round from float32 and may reach 1.0.
    """
    return _columns(_node_rows(seed, step, layer, ids), width, dtype)


def _node_rows(seed: int, step: int, layer: int, ids: Tensor) -> Tensor:
    """The node rows' 64-bit keys: what keyed dropout's kernels compute from ids and base."""
    return kernels.dropout_rows(_ids("ids", ids), _base_key(_SALT_NODE, seed, step, layer))


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
    with _serial(src.device, src.numel()):
        return mix64_tensor(mix64_tensor(src ^ base) ^ dst)


def _check_p(p: float) -> float:
    if not isinstance(p, (int, float)) or not 0.0 <= float(p) <= 1.0 or math.isnan(p):
        raise ConfigError(f"dropout probability 'p' must lie in [0, 1] (got {p!r})")
    return float(p)


def _mask_scale(x: Tensor, keep: Tensor, scale: float) -> Tensor:
    """``x * keep * scale`` for a ``uint8`` mask ``keep`` of ``x``'s shape, chunk by chunk."""
    n, width = x.shape[0], math.prod(x.shape[1:])
    x2 = x.contiguous().view(n, width)  # [N, F]
    keep2 = keep.view(n, width)
    out = torch.empty_like(x2)
    if out.numel() == 0:
        return out.view(x.shape)
    step = rows_per_chunk(n, width, x.device)
    with _serial(x.device):
        for r0 in range(0, n, step):
            o = out[r0 : r0 + step]
            torch.mul(x2[r0 : r0 + step], scale, out=o).mul_(keep2[r0 : r0 + step])
    return out.view(x.shape)


class _MaskScale(torch.autograd.Function):
    """``x * keep * scale`` with a saved uint8 mask; linear, so its backward is itself."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, keep: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return _mask_scale(x, keep, scale)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        return _MaskScale.apply(grad, keep, ctx.scale), None, None


class _KeyedDropout(torch.autograd.Function):
    """Keyed dropout; saves the uint8 keep mask (never a float mask) for backward."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, ids: Tensor, base: int | None, p: float) -> Tensor:
        out, keep = _drop(x, ids, base, p, save=True)
        ctx.save_for_backward(keep)
        ctx.scale = 1.0 / (1.0 - p)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        (keep,) = ctx.saved_tensors
        return _MaskScale.apply(grad, keep, ctx.scale), None, None, None


def _drop(
    x: Tensor, ids: Tensor, base: int | None, p: float, save: bool
) -> tuple[Tensor, Tensor | None]:
    """Forward of keyed dropout (``0 < p < 1``) by the device's :func:`kernels.keyed_dropout`.

    ``keep`` is the uint8 mask ``[N, *feat]`` when ``save``, else None.
    """
    n, width = x.shape[0], math.prod(x.shape[1:])
    out, keep = kernels.keyed_dropout(x.contiguous().view(n, width), ids, base, p, save)
    return out.view(x.shape), None if keep is None else keep.view(x.shape)


def _apply_dropout(x: Tensor, ids: Tensor, base: int | None, p: float) -> Tensor:
    """Dropout of ``x`` (``[N, *feat]``), row ``i``'s mask keyed by ``mix64(ids[i] ^ base)``.

    Keyed by ``ids[i]`` itself when ``base`` is ``None`` (edge rows, mixed already).
    """
    if dropout_threshold(p) >= 1 << 24:  # float32(p) == 1: everything is dropped
        return x * 0.0
    if x.requires_grad and torch.is_grad_enabled():
        return _KeyedDropout.apply(x, ids, base, p)
    return _drop(x, ids, base, p, save=False)[0]


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

    ``mask = hash_uniform(...) >= p``, kept entries scaled by ``1 / (1 - p)`` (dropped entries
    are multiplied by 0, as in ``F.dropout``). Identity when not ``training`` or ``p == 0``;
    zeros when ``p == 1``. Backward is exact: the gradient is masked and scaled like the input.
    Memory: the uint8 mask (one byte per element) is kept for backward when ``x`` requires grad.

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
    base = _base_key(_SALT_NODE, seed, step, layer)
    return _apply_dropout(x, _ids("ids", ids).to(x.device), base, p)


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

    Used for attention dropout: the mask of edge ``e`` and head ``h`` depends only on its key
    (the same generator as :func:`keyed_dropout`, with the edge's row key).

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
    rows = _edge_rows(seed, step, layer, src_ids.to(w.device), dst_ids.to(w.device))
    return _apply_dropout(w, rows, None, p)
