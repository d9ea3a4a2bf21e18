"""Ops with several implementations per device type, each chosen by measurement.

Three ops: the feature store's row gathers (:func:`gather_rows`, below), the sampler's
Fisher-Yates offsets (:func:`fisher_yates`: torch's ops, or on CUDA one Triton kernel that runs
each seed's partial shuffle) and keyed dropout's mask and scale (:func:`keyed_dropout`: torch's
int32 ops chunk by chunk, or on CUDA one Triton kernel that hashes, compares and scales in one
pass). Each op's implementations are bit-identical, so the choice changes speed only. A fourth,
the sparse product of a sampled block (:func:`csr_mm`: torch's sparse product, or on CUDA one
Triton kernel without cuSPARSE's per-call setup), agrees within rounding.

The feature store's reads are row gathers (a shard's rows by local index; WholeGraph's gather
kernels). :func:`gather_rows` runs the implementation :data:`KERNELS` selects for the table's
device type:

- ``index_select``: torch's kernel. The default everywhere until a measurement says otherwise.
- ``wide``: torch's kernel over the rows viewed as the widest integer element (16, 8, 4 or 2
  bytes) that divides the row's bytes and the table's alignment: the same bytes moved by fewer,
  wider element copies (bit-exact; nothing is computed on the values). On the CPU it is as fast
  as ``index_select`` (rows are copied whole there); on a GPU, where torch's kernel moves one
  element per thread, it may be faster.
- ``triton``: a Triton kernel (where ``triton`` imports; CUDA, or the CPU under
  ``TRITON_INTERPRET=1`` for tests) moving a block of rows by a block of columns per program.

The prepared GPU check (``benchmarks/gpu/check.py``, part ``gather_tiers``) times every
implementation that runs on the device against a device-to-device copy. A non-default choice
goes into :data:`MEASURED` with the check's result file as its source, so that the default
changes only with a committed figure; :func:`use` (or ``FLEETGNN_KERNELS=gather_rows:cuda=wide``)
overrides it for a run.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fleetgnn.keyhash import (
    C1,
    C2,
    GOLDEN32,
    MASK32,
    MULT32,
    Keys,
    bounded_draws,
    mix64_tensor,
    serial,
    signed,
)

#: An implementation: gather_rows (table, ids, out=None, *, via=None) -> rows; fisher_yates
#: (seeds, deg, fanout, key) -> offsets [S, fanout]; keyed_dropout (x, ids, base, p, save) ->
#: (out, keep or None)
KernelFn = Callable[..., Any]

#: Integer dtypes by element bytes, widest first (complex128 moves 16 bytes as one element).
_WIDE = ((16, torch.complex128), (8, torch.int64), (4, torch.int32), (2, torch.int16))

#: Non-default choices backed by a committed measurement: ``(op, device type) -> (name,
#: source)``. On an H100 (torch 2.11, 490k random rows of 400 B) the Triton kernel moved 2,203
#: GB/s read + written, 0.75 of a device-to-device copy (2,950 GB/s), where ``index_select``
#: moved 1,142 (0.39) and ``wide`` 1,119 (0.38).
#: For the sampler's Fisher-Yates offsets (3 hops, fanouts 15,10,5, batch 1024, products-like
#: 0.2, one H100, the source below): 212 M edges/s with the Triton kernel, 106 with torch's ops (the
#: host's numpy sampler: 5.27), the batch's aten ops 1,052 -> 473 and launches 368 -> 150.
MEASURED: dict[tuple[str, str], tuple[str, str]] = {
    ("gather_rows", "cuda"): ("triton", "benchmarks/results/gpu/gpu-check-h100-stop34-gather.json"),
    ("fisher_yates", "cuda"): (
        "triton",
        "benchmarks/results/gpu/gpu-check-h100-stop35-sampler.json",
    ),
}


def _index_select(
    table: Tensor, ids: Tensor, out: Tensor | None = None, *, via: Tensor | None = None
) -> Tensor:
    if via is not None:
        ids = via.index_select(0, ids)
    if out is None:
        return table.index_select(0, ids)
    return torch.index_select(table, 0, ids, out=out)


def _wide_dtype(t: Tensor) -> torch.dtype | None:
    """The widest element that views ``t``'s rows exactly (``None``: none wider than its own)."""
    if t.dim() != 2 or not t.is_contiguous() or t.shape[1] == 0:
        return None
    row = t.shape[1] * t.element_size()
    ptr = t.data_ptr()
    for size, dtype in _WIDE:
        if size <= t.element_size():
            return None
        if row % size == 0 and ptr % size == 0:
            return dtype
    return None


def _wide(
    table: Tensor, ids: Tensor, out: Tensor | None = None, *, via: Tensor | None = None
) -> Tensor:
    if via is not None:
        ids = via.index_select(0, ids)
    dtype = _wide_dtype(table)
    if dtype is None or (out is not None and _wide_dtype(out) is None):
        return _index_select(table, ids, out)
    wide = table.view(dtype)
    if out is None:
        return wide.index_select(0, ids).view(table.dtype)
    torch.index_select(wide, 0, ids, out=out.view(dtype))
    return out


@functools.cache
def _triton_kernel() -> Any:
    """The Triton row-gather kernel (compiled per row width, strides and block shape).

    The strides are compile-time constants: Triton then knows a row's start is a multiple of
    the stride's factors and moves up to 16 bytes per load and store (a float32 row of 100
    values: 4-value vectors). Passed as plain integers, a stride that is not a multiple of 16
    left it one 4-byte element per access. With ``VIA`` each row's index is read through
    ``via`` first (``table[via[ids]]``: the store's node ID -> shard row lookup in the same
    pass).
    """
    import triton
    import triton.language as tl

    @triton.jit
    def gather_kernel(  # pragma: no cover - runs under Triton
        table,
        ids,
        via,
        out,
        n,
        STRIDE_T: tl.constexpr,
        STRIDE_O: tl.constexpr,
        WIDTH: tl.constexpr,
        BLOCK_R: tl.constexpr,
        BLOCK_C: tl.constexpr,
        VIA: tl.constexpr,
    ):
        pid = tl.program_id(0)
        rows = pid * BLOCK_R + tl.arange(0, BLOCK_R)
        live = rows < n
        idx = tl.load(ids + rows, mask=live, other=0)
        if VIA:
            idx = tl.load(via + idx, mask=live, other=0)
        src = idx.to(tl.int64) * STRIDE_T
        dst = rows.to(tl.int64) * STRIDE_O
        for c0 in tl.static_range(0, WIDTH, BLOCK_C):
            cols = c0 + tl.arange(0, BLOCK_C)
            m = live[:, None] & (cols[None, :] < WIDTH)
            v = tl.load(table + src[:, None] + cols[None, :], mask=m)
            tl.store(out + dst[:, None] + cols[None, :], v, mask=m)

    return triton, gather_kernel


@functools.cache
def triton_available() -> bool:
    """Whether ``triton`` imports here."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


#: The Triton gather's launch shape: ``block_cols`` values of a row per inner step (``None``:
#: the row's width rounded up to a power of two, at most 128), ``block_values`` values per
#: program (its rows: ``block_values // block_cols``) and ``num_warps``. The GPU check times
#: the alternatives in :data:`TRITON_SWEEP` (``gather_tiers.triton_sweep``).
TRITON_CONFIG: dict[str, Any] = {"block_cols": None, "block_values": 4096, "num_warps": 4}
#: Launch shapes the GPU check compares (each a change of :data:`TRITON_CONFIG`).
TRITON_SWEEP: tuple[dict[str, Any], ...] = (
    {},
    {"block_values": 2048},
    {"block_values": 8192, "num_warps": 8},
    {"block_values": 4096, "num_warps": 8},
    {"block_cols": 32},
    {"block_cols": 32, "block_values": 2048},
    {"block_values": 1024, "num_warps": 2},
)


def _triton(
    table: Tensor,
    ids: Tensor,
    out: Tensor | None = None,
    *,
    via: Tensor | None = None,
    **config: Any,
) -> Tensor:
    """``table[ids]`` (``table[via[ids]]``) by the Triton kernel.

    ``config``: changes of :data:`TRITON_CONFIG`.
    """
    if (
        table.dim() != 2
        or table.stride(1) != 1
        or table.shape[1] == 0
        or table.dtype == torch.bool
        or table.is_complex()
        or (out is not None and (out.stride(1) != 1 or out.dtype != table.dtype))
    ):
        return _index_select(table, ids, out, via=via)
    ids = ids.contiguous()
    via = None if via is None else via.contiguous()
    n, width = int(ids.numel()), int(table.shape[1])
    if out is None:
        out = torch.empty((n, width), dtype=table.dtype, device=table.device)
    if n == 0:
        return out
    cfg = {**TRITON_CONFIG, **config}
    triton, kernel = _triton_kernel()
    block_c = cfg["block_cols"] or min(triton.next_power_of_2(width), 128)
    block_r = max(1, cfg["block_values"] // block_c)
    grid = (triton.cdiv(n, block_r),)
    with _on_device(table):
        kernel[grid](
            table,
            ids,
            ids if via is None else via,
            out,
            n,
            STRIDE_T=table.stride(0),
            STRIDE_O=out.stride(0),
            WIDTH=width,
            BLOCK_R=block_r,
            BLOCK_C=block_c,
            VIA=via is not None,
            num_warps=cfg["num_warps"],
        )
    return out


def _on_device(t: Tensor) -> Any:
    """Where a Triton kernel on ``t`` launches: ``t``'s GPU.

    Triton launches on the current device (the interpreter: the CPU); a no-op context when
    ``t``'s is already current.
    """
    if t.is_cuda and t.device.index != torch.cuda.current_device():
        return torch.cuda.device(t.device)
    return contextlib.nullcontext()


# ------------------------------------------------------------ the sampler's Fisher-Yates offsets
def keyed_draws(ids: Tensor, deg: Tensor, fanout: int, key: int) -> Tensor:
    """``r[s, i]`` uniform in ``[0, deg[s] - 1 - i]``, keyed by ``(key, ids[s], i)``.

    int64 ``[len(ids), fanout]`` on ``ids``' device; the same keys give the same draws on every
    device (exact integer arithmetic, see :mod:`fleetgnn.sampling.neighbor`). Degrees must be at
    most ``2^31``.
    """
    rows = mix64_tensor(ids.long() ^ signed(key))  # [S] row keys
    step = torch.arange(fanout, dtype=torch.int64, device=ids.device)
    return bounded_draws(rows, deg.to(ids.device)[:, None] - step)  # [S, M]


def offsets_torch(r: Tensor, deg: Tensor) -> Tensor:
    """Distinct offsets from Fisher-Yates draws in torch, vectorised over rows.

    WholeGraph's Algorithm 1; the derivation is
    :func:`fleetgnn.sampling.neighbor._offsets_from_draws`'s.
    """
    num_rows, m = r.shape
    if num_rows == 0 or m == 0:
        return r.clone()
    step = torch.arange(m, dtype=torch.int64, device=r.device)
    steps = step.expand(num_rows, m)
    n = deg.long()[:, None]
    keys, p = torch.sort(r * m + step, dim=1)
    s = torch.div(keys, m, rounding_mode="floor")
    q = torch.empty_like(p).scatter_(1, p, steps)
    new_run = torch.ones_like(s, dtype=torch.bool)
    torch.ne(s[:, 1:], s[:, :-1], out=new_run[:, 1:])
    writes = s >= n - m
    writes[:, :-1] &= new_run[:, 1:]
    chain = torch.empty((num_rows, m + 1), dtype=torch.int64, device=r.device)
    chain[:, :m] = step
    chain.scatter_(1, torch.where(writes, n - s - 1, m), p)
    chain = chain[:, :m]
    for _ in range((m - 1).bit_length()):
        chain = chain.gather(1, chain)
    first = new_run.gather(1, q)
    prev = p.gather(1, (q - 1).clamp_(min=0))
    return torch.where(first, r, n - 1 - chain.gather(1, prev))


def _fisher_yates_torch(seeds: Tensor, deg: Tensor, fanout: int, key: int) -> Tensor:
    n = deg.to(seeds.device).long().clamp(min=fanout)
    return offsets_torch(keyed_draws(seeds, n, fanout, key), n)


#: The keyed hash's constants as the Triton kernels take them (int64 arguments, so Triton's
#: literal typing plays no part): SplitMix64's multipliers, the masks of its logical shifts by
#: 30, 27 and 31 bits, the 32-bit mask, the column Weyl key and the element multiplier.
_HASH_ARGS = (
    signed(C1),
    signed(C2),
    (1 << 34) - 1,
    (1 << 37) - 1,
    (1 << 33) - 1,
    MASK32,
    GOLDEN32,
    MULT32,
)


@functools.cache
def _triton_fy_kernel() -> Any:
    """The Triton Fisher-Yates kernel: a block of seeds a program, one lane a sampled edge.

    Each seed runs the sequential partial shuffle (``out_i = A[r_i]; A[r_i] = A[N - 1 - i]``)
    over a table of the slots written so far (at most ``fanout``, one per lane: the
    swap-table form of WholeGraph's sampling without replacement), its draws computed in the
    same pass from the keyed hash. All arithmetic is int64 with explicit masks (the hash's
    constants come in as int64 arguments), as the torch ops compute it, so the offsets are
    bit-identical.
    """
    import triton
    import triton.language as tl

    @triton.jit
    def fy_kernel(
        seeds,
        deg,
        out,
        num_seeds,
        fanout,
        key,
        c1,
        c2,
        m30,
        m27,
        m31,
        m32,
        golden,
        mult,
        BLOCK_S: tl.constexpr,
        BLOCK_M: tl.constexpr,
    ):
        pid = tl.program_id(0)
        s = pid * BLOCK_S + tl.arange(0, BLOCK_S)
        live = s < num_seeds
        z = tl.load(seeds + s, mask=live, other=0).to(tl.int64) ^ key
        n = tl.maximum(tl.load(deg + s, mask=live, other=0).to(tl.int64), fanout)
        z = z ^ ((z >> 30) & m30)  # SplitMix64's finaliser (logical shifts by masks)
        z = z * c1
        z = z ^ ((z >> 27) & m27)
        z = z * c2
        z = z ^ ((z >> 31) & m31)
        a = z & m32  # the row's element-hash keys (keyhash.Keys)
        m = ((z >> 32) & m32) | 1
        lanes = tl.arange(0, BLOCK_M)[None, :]
        slots = tl.full((BLOCK_S, BLOCK_M), -1, tl.int64)  # the written slots of A ...
        vals = tl.zeros((BLOCK_S, BLOCK_M), tl.int64)  # ... and their values
        base = s.to(tl.int64) * fanout
        for i in range(0, fanout):
            step = tl.zeros((BLOCK_S,), tl.int64) + i
            y = ((a ^ ((step * golden) & m32)) * m) & m32
            y = y ^ (y >> 15)
            r = (((y * mult) & m32) * (n - step)) >> 32  # Lemire's multiply-shift
            hit = slots == r[:, None]
            found = tl.max(hit.to(tl.int32), axis=1) > 0
            got = tl.where(found, tl.sum(tl.where(hit, vals, 0), axis=1), r)  # A[r_i]
            last = n - 1 - step
            hit_last = slots == last[:, None]
            in_table = tl.max(hit_last.to(tl.int32), axis=1) > 0
            moved = tl.where(in_table, tl.sum(tl.where(hit_last, vals, 0), axis=1), last)
            fresh = (lanes == i) & ~found[:, None]  # A[r_i] = A[N - 1 - i]
            slots = tl.where(fresh, r[:, None], slots)
            vals = tl.where(fresh | hit, moved[:, None], vals)
            tl.store(out + base + i, got, mask=live)

    return triton, fy_kernel


#: The Triton Fisher-Yates kernel's launch shape: seeds per program and warps. Fanouts over
#: ``max_fanout`` (one lane a sampled edge, the table in registers) go to torch's ops.
FY_CONFIG: dict[str, Any] = {"block_seeds": 64, "num_warps": 4, "max_fanout": 128}


def _fisher_yates_triton(
    seeds: Tensor, deg: Tensor, fanout: int, key: int, **config: Any
) -> Tensor:
    cfg = {**FY_CONFIG, **config}
    num_seeds = int(seeds.numel())
    if fanout > cfg["max_fanout"] or num_seeds == 0 or fanout <= 0:
        return _fisher_yates_torch(seeds, deg, fanout, key)
    seeds = seeds.contiguous()
    deg = deg.to(seeds.device).contiguous()
    out = torch.empty((num_seeds, fanout), dtype=torch.int64, device=seeds.device)
    triton, kernel = _triton_fy_kernel()
    block_s = cfg["block_seeds"]
    with _on_device(seeds):
        kernel[(triton.cdiv(num_seeds, block_s),)](
            seeds,
            deg,
            out,
            num_seeds,
            fanout,
            signed(key),
            *_HASH_ARGS,
            BLOCK_S=block_s,
            BLOCK_M=max(2, triton.next_power_of_2(fanout)),
            num_warps=cfg["num_warps"],
        )
    return out


def fisher_yates(seeds: Tensor, deg: Tensor, fanout: int, key: int) -> Tensor:
    """Each seed's ``fanout`` distinct edge offsets by keyed partial Fisher-Yates draws.

    Row ``s`` holds ``fanout`` distinct values in ``[0, max(deg[s], fanout))``, the partial
    shuffle of that range under the draws of :func:`keyed_draws` (row key ``seeds[s]``, ``key``),
    bit-identical whichever implementation :data:`KERNELS` chose for the seeds' device type (the
    sampler keeps them only for seeds of degree above ``fanout``).

    Shapes:
        - seeds, deg: int64 ``[S]`` (degrees at most ``2^31``).
        - output: int64 ``[S, fanout]`` on ``seeds``' device.
    """
    return KERNELS("fisher_yates", seeds.device.type)(seeds, deg, fanout, key)


# ------------------------------------------------------------------------- keyed dropout
_CHUNK_CPU = 1 << 18  # elements per chunk on CPU (int32 scratch of 1 MiB, reused)
_CHUNK_DEVICE = 1 << 26


def rows_per_chunk(n: int, width: int, device: torch.device) -> int:
    """Rows of a ``[n, width]`` element-wise pass per chunk (cache-sized on the CPU)."""
    chunk = _CHUNK_CPU if device.type == "cpu" else _CHUNK_DEVICE
    return max(1, min(n, chunk // max(width, 1)))


def scratch(rows: int, width: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Two int32 ``[rows, width]`` buffers for the element hash (reused chunk to chunk)."""
    h = torch.empty((rows, width), dtype=torch.int32, device=device)
    return h, torch.empty_like(h)


def dropout_threshold(p: float) -> int:
    """Smallest 24-bit integer ``u`` with ``float32(u / 2^24) >= float32(p)``."""
    return int(math.ceil(float(np.float32(p)) * 2**24))


def dropout_rows(ids: Tensor, base: int | None) -> Tensor:
    """The 64-bit row keys of a keyed draw: ``mix64(ids ^ base)``.

    ``ids`` themselves when ``base`` is ``None`` (keys mixed already, e.g. an edge's from both
    endpoints).
    """
    if base is None:
        return ids.long()
    with serial(ids.device, ids.numel()):
        return mix64_tensor(ids.long() ^ signed(base))


_NARROW = (torch.bfloat16, torch.float16)


def _keyed_dropout_torch(
    x: Tensor, ids: Tensor, base: int | None, p: float, save: bool
) -> tuple[Tensor, Tensor | None]:
    n, width, scale = x.shape[0], x.shape[1], 1.0 / (1.0 - p)
    out = torch.empty_like(x)
    keep = torch.empty(x.shape, dtype=torch.uint8, device=x.device) if save else None
    if out.numel() == 0:
        return out, keep
    keys = Keys(dropout_rows(ids, base), width)
    # keep iff v >= t, i.e. h >= (t << 8) - 2^31 as signed int32 (t < 2^24 here)
    thresh = (dropout_threshold(p) << 8) - (1 << 31)
    step = rows_per_chunk(n, width, x.device)
    h_buf, t_buf = scratch(step, width, x.device)
    k_buf = None if save else torch.empty(h_buf.shape, dtype=torch.uint8, device=x.device)
    # a narrow float is scaled in float32, then rounded (as CUDA's kernels compute a product
    # with a scalar; the CPU's would round the scale to the narrow type first)
    wide = x.dtype in _NARROW
    f_buf = torch.empty(h_buf.shape, dtype=torch.float32, device=x.device) if wide else None
    with serial(x.device):
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            h = keys.hash_(r0, r1, h_buf[: r1 - r0], t_buf[: r1 - r0])
            k = keep[r0:r1] if keep is not None else k_buf[: r1 - r0]  # type: ignore[index]
            torch.ge(h, thresh, out=k)
            if f_buf is None:
                torch.mul(x[r0:r1], scale, out=out[r0:r1]).mul_(k)
            else:
                f = f_buf[: r1 - r0].copy_(x[r0:r1]).mul_(scale)  # in float32
                out[r0:r1].copy_(f).mul_(k)
    return out, keep


@functools.cache
def _triton_dropout_kernel() -> Any:
    """The Triton keyed-dropout kernel: a block of rows by a block of columns a program.

    Per row the 64-bit key (``mix64(id ^ base)`` in the kernel when ``MIX``), per element the
    32-bit hash of :class:`~fleetgnn.keyhash.Keys`, the comparison with the threshold and the
    scaled product, in one pass; int64 arithmetic with explicit masks, as the torch ops compute
    it (the hash's constants come in as int64 arguments), so the masks are bit-identical.
    """
    import triton
    import triton.language as tl

    @triton.jit
    def dropout_kernel(  # pragma: no cover - runs under Triton
        x,
        ids,
        out,
        keep,
        n,
        base,
        thresh,
        scale,
        c1,
        c2,
        m30,
        m27,
        m31,
        m32,
        golden,
        mult,
        WIDTH: tl.constexpr,
        BLOCK_R: tl.constexpr,
        BLOCK_C: tl.constexpr,
        MIX: tl.constexpr,
        SAVE: tl.constexpr,
        BF16: tl.constexpr,
    ):
        pid = tl.program_id(0)
        rows = pid * BLOCK_R + tl.arange(0, BLOCK_R)
        live = rows < n
        z = tl.load(ids + rows, mask=live, other=0).to(tl.int64)
        if MIX:
            z = z ^ base
            z = z ^ ((z >> 30) & m30)  # SplitMix64's finaliser (logical shifts by masks)
            z = z * c1
            z = z ^ ((z >> 27) & m27)
            z = z * c2
            z = z ^ ((z >> 31) & m31)
        a = (z & m32)[:, None]
        m = (((z >> 32) & m32) | 1)[:, None]
        off = rows.to(tl.int64)[:, None] * WIDTH
        for c0 in tl.static_range(0, WIDTH, BLOCK_C):
            cols = c0 + tl.arange(0, BLOCK_C)
            live2 = live[:, None] & (cols[None, :] < WIDTH)
            c = ((cols.to(tl.int64) * golden) & m32)[None, :]
            y = ((a ^ c) * m) & m32
            y = y ^ (y >> 15)
            h = (y * mult) & m32
            kept = (h ^ 2147483648) >= thresh  # the signed comparison of the torch ops
            v = tl.load(x + off + cols[None, :], mask=live2, other=0.0)
            ty = out.dtype.element_ty
            f = v.to(tl.float32) * scale
            if BF16:  # round to nearest even by the bits (torch's rounding; NaN stays NaN)
                bits = f.to(tl.int32, bitcast=True).to(tl.int64) & m32
                b16 = ((bits + 32767 + ((bits >> 16) & 1)) >> 16) & 65535
                b16 = tl.where(f != f, 32704, b16)
                r = b16.to(tl.int16).to(tl.bfloat16, bitcast=True)
            else:
                r = f.to(ty)
            tl.store(out + off + cols[None, :], r * kept.to(ty), mask=live2)
            if SAVE:
                tl.store(keep + off + cols[None, :], kept.to(tl.uint8), mask=live2)

    return triton, dropout_kernel


#: The Triton dropout kernel's launch shape: values per program, columns per inner step (at
#: most; the row's width rounded up to a power of two below it) and warps.
DROPOUT_CONFIG: dict[str, Any] = {"block_values": 4096, "block_cols": 128, "num_warps": 4}


def _keyed_dropout_triton(
    x: Tensor, ids: Tensor, base: int | None, p: float, save: bool, **config: Any
) -> tuple[Tensor, Tensor | None]:
    # float32 and narrower compute in float32 as torch's kernels do; float64 stays with torch's
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16) or not x.is_contiguous():
        return _keyed_dropout_torch(x, ids, base, p, save)
    n, width = x.shape
    out = torch.empty_like(x)
    keep = torch.empty(x.shape, dtype=torch.uint8, device=x.device) if save else None
    if out.numel() == 0:
        return out, keep
    cfg = {**DROPOUT_CONFIG, **config}
    triton, kernel = _triton_dropout_kernel()
    block_c = min(triton.next_power_of_2(width), cfg["block_cols"])
    block_r = max(1, cfg["block_values"] // block_c)
    with _on_device(x):
        kernel[(triton.cdiv(n, block_r),)](
            x,
            ids.contiguous(),
            out,
            out if keep is None else keep,
            n,
            0 if base is None else signed(base),
            dropout_threshold(p) << 8,
            1.0 / (1.0 - p),
            *_HASH_ARGS,
            WIDTH=width,
            BLOCK_R=block_r,
            BLOCK_C=block_c,
            MIX=base is not None,
            SAVE=keep is not None,
            BF16=x.dtype == torch.bfloat16,
            num_warps=cfg["num_warps"],
        )
    return out, keep


def keyed_dropout(
    x: Tensor, ids: Tensor, base: int | None, p: float, save: bool
) -> tuple[Tensor, Tensor | None]:
    """Keyed dropout's forward: ``(x * keep / (1 - p), keep)`` for ``0 < p < 1``.

    Element ``(i, f)`` is kept iff its 24-bit draw (row key ``mix64(ids[i] ^ base)``, or
    ``ids[i]`` itself when ``base`` is ``None``; column ``f``; see :mod:`fleetgnn.ops.random`)
    is at least :func:`dropout_threshold` of ``p``. Bit-identical whichever implementation
    :data:`KERNELS` chose for ``x``'s device type.

    Shapes:
        - x: float ``[N, F]`` (contiguous rows).
        - ids: int64 ``[N]`` on ``x``'s device.
        - output: ``x``'s shape and dtype; ``keep``: uint8 ``[N, F]`` when ``save``, else
          ``None``.
    """
    return KERNELS("keyed_dropout", x.device.type)(x, ids, base, p, save)


# ------------------------------------------------------------- the sparse product of a block
def sparse_csr(indptr: Tensor, indices: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    """Torch's sparse CSR matrix (its invariants not checked: the callers built them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(indptr, indices, values, shape, check_invariants=False)


def overfull(mat: Tensor) -> bool:
    """More stored entries than the matrix has (repeated edges in a small block).

    cuSPARSE refuses such a CSR ("nnz > matrix size", an invalid-value CUDA error; seen on an
    H100 in offload's chunks of a multigraph); the CPU kernels sum the repeats.
    """
    return mat._nnz() > mat.shape[0] * mat.shape[1]


def dense(mat: Tensor) -> Tensor:
    """A CSR matrix as a dense one, repeated entries summed.

    For an :func:`overfull` ``mat`` that is fewer elements than its entries.
    """
    crow, col, vals = mat.crow_indices(), mat.col_indices(), mat.values()
    rows, cols = mat.shape
    row = torch.repeat_interleave(torch.arange(rows, device=crow.device), crow[1:] - crow[:-1])
    flat = vals.new_zeros(rows * cols).index_put_((row * cols + col,), vals, accumulate=True)
    return flat.view(rows, cols)


def _csr_mm_torch(
    indptr: Tensor, indices: Tensor, vals: Tensor | None, x: Tensor, num_rows: int
) -> Tensor:
    vals = x.new_ones(indices.numel()) if vals is None else vals
    mat = sparse_csr(indptr, indices, vals, (num_rows, x.shape[0]))
    if x.device.type == "cpu":
        # addmm_ into an uninitialised output (beta=0): mat @ x would zero a result and copy
        # it once more (measured: 122k x 100 float32, 150 ms against 122)
        return x.new_empty((num_rows, x.shape[1])).addmm_(mat, x, beta=0.0)
    return dense(mat) @ x if overfull(mat) else mat @ x


@functools.cache
def _triton_csr_mm_kernel() -> Any:
    """The Triton CSR product: one output row and a block of columns a program.

    The row's edges are read ``BLOCK_E`` at a time: their source rows gathered as a
    ``[BLOCK_E, BLOCK_C]`` tile, weighted and summed into a float32 accumulator (float64 for
    float64 inputs). One launch, no per-call setup; a row's sum runs in its edges' order in
    blocks, so results equal torch's within rounding, not bit for bit.
    """
    import triton
    import triton.language as tl

    @triton.jit
    def csr_mm_kernel(  # pragma: no cover - runs under Triton
        indptr,
        indices,
        vals,
        x,
        out,
        WIDTH: tl.constexpr,
        BLOCK_E: tl.constexpr,
        BLOCK_C: tl.constexpr,
        HAS_W: tl.constexpr,
        F64: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        live_c = cols < WIDTH
        start = tl.load(indptr + row).to(tl.int64)
        end = tl.load(indptr + row + 1).to(tl.int64)
        if F64:
            acc = tl.zeros((BLOCK_C,), tl.float64)
        else:
            acc = tl.zeros((BLOCK_C,), tl.float32)
        for e0 in range(start, end, BLOCK_E):
            e = e0 + tl.arange(0, BLOCK_E)
            live_e = e < end
            src = tl.load(indices + e, mask=live_e, other=0).to(tl.int64)
            m = live_e[:, None] & live_c[None, :]
            v = tl.load(x + src[:, None] * WIDTH + cols[None, :], mask=m, other=0.0)
            v = v.to(acc.dtype)
            if HAS_W:
                w = tl.load(vals + e, mask=live_e, other=0.0).to(acc.dtype)
                v = v * w[:, None]
            acc += tl.sum(v, axis=0)
        tl.store(out + row * WIDTH + cols, acc.to(out.dtype.element_ty), mask=live_c)

    return triton, csr_mm_kernel


#: The Triton CSR product's launch shape: edges per inner step, columns per program (at most;
#: the width rounded up to a power of two below it) and warps.
CSR_MM_CONFIG: dict[str, Any] = {"block_edges": 16, "block_cols": 128, "num_warps": 4}


def _csr_mm_triton(
    indptr: Tensor,
    indices: Tensor,
    vals: Tensor | None,
    x: Tensor,
    num_rows: int,
    **config: Any,
) -> Tensor:
    if x.dim() != 2 or x.is_complex() or not x.dtype.is_floating_point:
        return _csr_mm_torch(indptr, indices, vals, x, num_rows)
    x = x.contiguous()
    width = int(x.shape[1])
    out = torch.empty((num_rows, width), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    cfg = {**CSR_MM_CONFIG, **config}
    triton, kernel = _triton_csr_mm_kernel()
    block_c = min(triton.next_power_of_2(width), cfg["block_cols"])
    with _on_device(x):
        kernel[(num_rows, triton.cdiv(width, block_c))](
            indptr.contiguous(),
            indices.contiguous(),
            x if vals is None else vals.contiguous(),
            x,
            out,
            WIDTH=width,
            BLOCK_E=cfg["block_edges"],
            BLOCK_C=block_c,
            HAS_W=vals is not None,
            F64=x.dtype == torch.float64,
            num_warps=cfg["num_warps"],
        )
    return out


def csr_mm(
    indptr: Tensor, indices: Tensor, vals: Tensor | None, x: Tensor, num_rows: int
) -> Tensor:
    """``A @ x`` for the CSR ``A`` ``[num_rows, len(x)]`` of ``(indptr, indices, vals)``.

    ``vals`` ``None``: every entry is 1. Repeated entries in a row are summed. By the
    implementation :data:`KERNELS` chose for ``x``'s device type: torch's sparse product
    (cuSPARSE on CUDA, with its per-call setup on the host), or on CUDA one Triton kernel;
    they agree within rounding (the order of a row's sum differs).

    Shapes:
        - indptr: int ``[num_rows + 1]``; indices: int ``[E]``; vals: ``[E]`` or ``None``.
        - x: ``[S, D]``; output: ``[num_rows, D]`` in ``x``'s dtype.
    """
    return KERNELS("csr_mm", x.device.type)(indptr, indices, vals, x, num_rows)


class KernelRegistry:
    """Implementations per op and device type, and the one each uses.

    The default of an ``(op, device type)`` is torch's kernel unless :data:`MEASURED` names a
    measured faster one; :meth:`use` overrides it for this process.
    """

    def __init__(self) -> None:
        self._impls: dict[str, dict[str, KernelFn]] = {}
        self._devices: dict[tuple[str, str], tuple[str, ...]] = {}
        self._chosen: dict[tuple[str, str], str] = {}

    def register(self, op: str, name: str, fn: KernelFn, device_types: tuple[str, ...]) -> None:
        """Register ``fn`` as implementation ``name`` of ``op`` on ``device_types``."""
        self._impls.setdefault(op, {})[name] = fn
        for d in device_types:
            key = (op, d)
            self._devices[key] = (*self._devices.get(key, ()), name)

    def ops(self) -> tuple[str, ...]:
        """The registered ops."""
        return tuple(self._impls)

    def names(self, op: str, device_type: str) -> tuple[str, ...]:
        """The implementations of ``op`` that run on ``device_type`` (torch's first)."""
        return self._devices.get((op, device_type), ())

    def available(self, op: str, device_type: str) -> tuple[str, ...]:
        """:meth:`names` less those that cannot run here (``triton`` where it does not import)."""
        names = self.names(op, device_type)
        return names if triton_available() else tuple(n for n in names if n != "triton")

    def chosen(self, op: str, device_type: str) -> str:
        """The implementation ``op`` uses on ``device_type``."""
        key = (op, device_type)
        if key in self._chosen:
            return self._chosen[key]
        measured = MEASURED.get(key)
        if measured is not None and measured[0] in self.available(op, device_type):
            return measured[0]  # (a measured Triton kernel where triton is missing: the default)
        return self.names(op, device_type)[0]

    def use(self, op: str, device_type: str, name: str | None) -> None:
        """Make ``op`` use ``name`` on ``device_type`` (``None``: back to the default).

        Raises:
            ValueError: ``name`` is not an implementation of ``op`` on ``device_type``.
        """
        key = (op, device_type)
        if name is None:
            self._chosen.pop(key, None)
            return
        names = self.names(op, device_type)
        if name not in names:
            raise ValueError(
                f"{op} has no implementation {name!r} on {device_type}; choose one of "
                f"{', '.join(names) or '(none)'}"
            )
        if name == "triton" and not triton_available():
            raise ValueError(f"{op}={name} needs the triton package, which does not import here")
        self._chosen[key] = name

    @contextlib.contextmanager
    def using(self, op: str, device_type: str, name: str) -> Iterator[None]:
        """:meth:`use` ``name`` inside the block, the previous choice after it."""
        key = (op, device_type)
        before = self._chosen.get(key)
        self.use(op, device_type, name)
        try:
            yield
        finally:
            if before is None:
                self._chosen.pop(key, None)
            else:
                self._chosen[key] = before

    def impl(self, op: str, name: str) -> KernelFn:
        """Implementation ``name`` of ``op``."""
        return self._impls[op][name]

    def __call__(self, op: str, device_type: str) -> KernelFn:
        """The implementation ``op`` uses on ``device_type``."""
        return self._impls[op][self.chosen(op, device_type)]


KERNELS = KernelRegistry()
KERNELS.register("gather_rows", "index_select", _index_select, ("cpu", "cuda"))
KERNELS.register("gather_rows", "wide", _wide, ("cpu", "cuda"))
KERNELS.register("gather_rows", "triton", _triton, ("cuda",))
KERNELS.register("fisher_yates", "torch", _fisher_yates_torch, ("cpu", "cuda"))
KERNELS.register("fisher_yates", "triton", _fisher_yates_triton, ("cuda",))
KERNELS.register("keyed_dropout", "torch", _keyed_dropout_torch, ("cpu", "cuda"))
KERNELS.register("keyed_dropout", "triton", _keyed_dropout_triton, ("cuda",))
KERNELS.register("csr_mm", "torch", _csr_mm_torch, ("cpu", "cuda"))
KERNELS.register("csr_mm", "triton", _csr_mm_triton, ("cuda",))


#: Set in the workers of ``fleetgnn train --nproc`` (``fleetgnn.distributed.launch``'s
#: ``READY_DIR_ENV``): their launcher read the same environment and has reported it already.
_LAUNCHED_WORKER_ENV = "FLEETGNN_READY_DIR"


def _reports_env() -> bool:
    """Whether this process reports a bad ``FLEETGNN_KERNELS`` entry: one process per run.

    Every process of a run reads the variable at import. A worker of ``fleetgnn train --nproc``
    stays quiet (its launcher said it), and under ``torchrun`` only rank 0 speaks.
    """
    return not os.environ.get(_LAUNCHED_WORKER_ENV) and os.environ.get("RANK", "0") == "0"


def _apply_env(spec: str) -> None:
    """``FLEETGNN_KERNELS="op:device=name,..."``: per-process choices.

    A bad entry is ignored with a one-line warning (it is read at import, before any command can
    report an error), once per run whatever the world size (:func:`_reports_env`).
    """
    for item in filter(None, (s.strip() for s in spec.split(","))):
        try:
            left, name = item.split("=")
            op, device_type = left.split(":")
            if op not in KERNELS.ops():
                raise ValueError(f"unknown op {op!r}; ops: {', '.join(KERNELS.ops())}")
            KERNELS.use(op, device_type, name)
        except ValueError as e:
            if not _reports_env():
                continue
            hint = str(e) if "=" in item and ":" in item else "write op:device=name"
            warnings.warn(
                f"FLEETGNN_KERNELS entry {item!r} ignored: {hint} (e.g. gather_rows:cuda=wide)",
                stacklevel=2,
            )


_apply_env(os.environ.get("FLEETGNN_KERNELS", ""))


def gather_rows(
    table: Tensor, ids: Tensor, out: Tensor | None = None, *, via: Tensor | None = None
) -> Tensor:
    """``table[ids]``: rows of a 2-D ``table`` by int64 ``ids`` on its device.

    With ``via`` (an integer lookup on the same device), ``table[via[ids]]``: the Triton
    kernel reads the lookup in the same pass, the others first index ``via``. Into ``out`` if
    given, by the implementation :data:`KERNELS` chose for the table's device type.
    """
    return KERNELS("gather_rows", table.device.type)(table, ids, out, via=via)
