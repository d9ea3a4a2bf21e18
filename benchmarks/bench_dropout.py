"""Keyed dropout against ``torch.nn.functional.dropout`` and the previous keyed implementation.

Three implementations of dropout with the same ``p``, timed in the same run on the same tensors:

- ``keyed``: :func:`fleetgnn.ops.keyed_dropout` (one 64-bit mix per row, a 32-bit hash per
  element, fused with the mask application; uint8 mask saved for backward);
- ``torch``: ``torch.nn.functional.dropout`` (a stream-drawn mask that no other process can
  reproduce; the cost target);
- ``old``: the implementation this one replaced (a SplitMix64 over every pair of elements, built
  from a dozen int64 ops per chunk; ``masked_fill`` + ``mul_`` under autograd), copied below as
  :func:`_old_keyed_dropout` so the comparison needs no other checkout.

Cases: Cora's input (2708 x 1433 float32) and a hidden layer (100k x 256 float32). Each case is
timed forward only (no grad, as for an input layer) and forward + backward (``x`` requires grad,
``y.backward(g)``). Implementations are interleaved (keyed, torch, old, keyed, ...) after a
warm-up, and the median of ``--repeat`` rounds is reported with the ratios to ``F.dropout``.

Usage::

    python benchmarks/bench_dropout.py --threads 1 --repeat 7
    python benchmarks/bench_dropout.py --threads 1 --out benchmarks/results/bench_dropout.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from fleetgnn.bench.machine import machine_info
from fleetgnn.ops import keyed_dropout
from fleetgnn.ops.random import _SALT_NODE, _base_key, _signed, mix64_tensor

# ------------------------------------------------------------------ the replaced implementation
_OLD_GOLDEN = 0x9E3779B97F4A7C15
_OLD_C1 = 0xBF58476D1CE4E5B9
_OLD_C2 = 0x94D049BB133111EB
_OLD_CHUNK_CPU = 1 << 16


def _old_mix_(z: Tensor, tmp: Tensor) -> Tensor:
    for shift, mult in ((30, _OLD_C1), (27, _OLD_C2), (31, None)):
        torch.bitwise_right_shift(z, shift, out=tmp)
        tmp.bitwise_and_((1 << (64 - shift)) - 1)
        z.bitwise_xor_(tmp)
        if mult is not None:
            z.mul_(_signed(mult))
    return z


def _old_uniform_bits(rows: Tensor, width: int) -> Tensor:
    n, pairs = rows.shape[0], (width + 1) // 2
    out = torch.empty((n, 2 * pairs), dtype=torch.int32, device=rows.device)
    if n == 0 or pairs == 0:
        return out[:, :width]
    cols = torch.arange(1, pairs + 1, dtype=torch.int64, device=rows.device) * _signed(_OLD_GOLDEN)
    step = max(1, _OLD_CHUNK_CPU // pairs)
    h_buf = torch.empty((min(step, n), pairs), dtype=torch.int64, device=rows.device)
    t_buf = torch.empty_like(h_buf)
    mask24 = (1 << 24) - 1
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        h, tmp = h_buf[: r1 - r0], t_buf[: r1 - r0]
        torch.add(rows[r0:r1, None], cols[None, :], out=h)
        _old_mix_(h, tmp)
        dst = out[r0:r1].view(r1 - r0, pairs, 2)
        torch.bitwise_right_shift(h, 40, out=tmp)
        dst[:, :, 0].copy_(tmp.bitwise_and_(mask24))
        dst[:, :, 1].copy_(h.bitwise_right_shift_(8).bitwise_and_(mask24))
    return out[:, :width]


def _old_keyed_dropout(
    x: Tensor, p: float, seed: int, step: int, layer: int, ids: Tensor
) -> Tensor:
    """The keyed dropout this module replaced (commit ad66540), for ``0 < p < 1``."""
    rows = mix64_tensor(ids.long() ^ _signed(_base_key(_SALT_NODE, seed, step, layer)))
    threshold = int(math.ceil(float(np.float32(p)) * 2**24))
    drop = (_old_uniform_bits(rows, math.prod(x.shape[1:])) < threshold).view(x.shape)
    return x.masked_fill(drop, 0.0).mul_(1.0 / (1.0 - p))


# ------------------------------------------------------------------------------------ timing
def _impls(p: float, ids: Tensor) -> dict[str, Callable[[Tensor], Tensor]]:
    return {
        "keyed": lambda x: keyed_dropout(x, p, 0, 1, 2, ids),
        "torch": lambda x: F.dropout(x, p, training=True),
        "old": lambda x: _old_keyed_dropout(x, p, 0, 1, 2, ids),
    }


def _run(fn: Callable[[Tensor], Tensor], x: Tensor, g: Tensor | None) -> float:
    t0 = time.perf_counter()
    if g is None:
        with torch.no_grad():
            fn(x)
    else:
        x.grad = None
        fn(x).backward(g)
    return time.perf_counter() - t0


def bench_case(name: str, n: int, w: int, args: argparse.Namespace) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, w, generator=gen)
    ids = torch.randperm(10 * n, generator=gen)[:n]
    g = torch.randn(n, w, generator=gen)
    impls = {k: v for k, v in _impls(args.p, ids).items() if k in args.impls}
    row: dict[str, Any] = {"case": name, "rows": n, "width": w, "p": args.p}
    for mode in ("forward", "forward_backward"):
        xm = x.detach().requires_grad_(mode == "forward_backward")
        gm = g if mode == "forward_backward" else None
        times: dict[str, list[float]] = {k: [] for k in impls}
        for fn in impls.values():  # warm-up
            _run(fn, xm, gm)
        for _ in range(args.repeat):
            for k, fn in impls.items():
                times[k].append(_run(fn, xm, gm))
        med = {k: statistics.median(v) for k, v in times.items()}
        row[mode] = {f"{k}_s": v for k, v in med.items()}
        if "torch" in med:
            for k in med:
                if k != "torch":
                    row[mode][f"{k}_over_torch"] = med[k] / med["torch"]
        if "old" in med and "keyed" in med:
            row[mode]["old_over_keyed"] = med["old"] / med["keyed"]
        cells = "  ".join(f"{k} {v * 1e3:8.2f} ms" for k, v in med.items())
        ratios = "  ".join(f"{k} {v:.3f}" for k, v in row[mode].items() if "_over_" in k)
        print(f"  {name:<8} {mode:<17} {cells}  {ratios}")
    keep = (keyed_dropout(torch.ones(n, w), args.p, 0, 1, 2, ids) != 0).double().mean().item()
    row["keyed_keep_rate"] = keep
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--repeat", type=int, default=7, help="interleaved rounds; the median is kept")
    p.add_argument("--p", type=float, default=0.5, help="drop probability")
    p.add_argument("--impls", nargs="+", default=["keyed", "torch", "old"])
    p.add_argument("--cases", nargs="+", default=["cora", "hidden"], choices=["cora", "hidden"])
    p.add_argument("--out", default=None, help="write the JSON results here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    info = machine_info(torch.device("cpu"))  # the same description as every benchmark
    print(f"machine: {info}")
    shapes = {"cora": (2708, 1433), "hidden": (100_000, 256)}
    rows = [bench_case(c, *shapes[c], args) for c in args.cases]
    results = {"machine": info, "config": vars(args), "dropout": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
        print(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
