"""Row gathers ``table[ids]``: one op, an implementation per device type, chosen by measurement.

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
import os
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

GatherFn = Callable[..., Tensor]  # (table, ids, out=None, *, via=None) -> rows

#: Integer dtypes by element bytes, widest first (complex128 moves 16 bytes as one element).
_WIDE = ((16, torch.complex128), (8, torch.int64), (4, torch.int32), (2, torch.int16))

#: Non-default choices backed by a committed measurement: ``(op, device type) -> (name,
#: source)``. On an H100 (torch 2.11, 490k random rows of 400 B) the Triton kernel moved 2,203
#: GB/s read + written, 0.75 of a device-to-device copy (2,950 GB/s), where ``index_select``
#: moved 1,142 (0.39) and ``wide`` 1,119 (0.38).
MEASURED: dict[tuple[str, str], tuple[str, str]] = {
    ("gather_rows", "cuda"): ("triton", "benchmarks/results/gpu/gpu-check-h100-stop34-gather.json")
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
    # Triton launches on the current device: the table's (the interpreter: the CPU)
    with torch.cuda.device(table.device) if table.is_cuda else contextlib.nullcontext():
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


class KernelRegistry:
    """Implementations per op and device type, and the one each uses.

    The default of an ``(op, device type)`` is torch's kernel unless :data:`MEASURED` names a
    measured faster one; :meth:`use` overrides it for this process.
    """

    def __init__(self) -> None:
        self._impls: dict[str, dict[str, GatherFn]] = {}
        self._devices: dict[tuple[str, str], tuple[str, ...]] = {}
        self._chosen: dict[tuple[str, str], str] = {}

    def register(self, op: str, name: str, fn: GatherFn, device_types: tuple[str, ...]) -> None:
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

    def chosen(self, op: str, device_type: str) -> str:
        """The implementation ``op`` uses on ``device_type``."""
        key = (op, device_type)
        if key in self._chosen:
            return self._chosen[key]
        measured = MEASURED.get(key)
        if measured is not None and (measured[0] != "triton" or triton_available()):
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

    def impl(self, op: str, name: str) -> GatherFn:
        """Implementation ``name`` of ``op``."""
        return self._impls[op][name]

    def __call__(self, op: str, device_type: str) -> GatherFn:
        """The implementation ``op`` uses on ``device_type``."""
        return self._impls[op][self.chosen(op, device_type)]


KERNELS = KernelRegistry()
KERNELS.register("gather_rows", "index_select", _index_select, ("cpu", "cuda"))
KERNELS.register("gather_rows", "wide", _wide, ("cpu", "cuda"))
KERNELS.register("gather_rows", "triton", _triton, ("cuda",))


def _apply_env(spec: str) -> None:
    """``FLEETGNN_KERNELS="op:device=name,..."``: per-process choices.

    A bad entry is ignored with a one-line warning (it is read at import, before any command can
    report an error).
    """
    for item in filter(None, (s.strip() for s in spec.split(","))):
        try:
            left, name = item.split("=")
            op, device_type = left.split(":")
            if op not in KERNELS.ops():
                raise ValueError(f"unknown op {op!r}; ops: {', '.join(KERNELS.ops())}")
            KERNELS.use(op, device_type, name)
        except ValueError as e:
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
