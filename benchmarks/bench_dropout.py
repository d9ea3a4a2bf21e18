"""Keyed dropout against ``torch.nn.functional.dropout`` and the previous keyed implementation.

The measurement is ``fleetgnn bench``'s keyed-dropout one (:func:`fleetgnn.bench.ops.dropout_rows`:
forward without autograd, as for an input layer, and forward + backward; implementations
interleaved after a warm-up, median of ``--repeat`` rounds) on Cora's input (2708 x 1433) and a
hidden layer (100k x 256), with one more implementation timed alongside:

- ``previous keyed``: the implementation :func:`fleetgnn.ops.keyed_dropout` replaced (a SplitMix64
  over every pair of elements, built from a dozen int64 ops per chunk; ``masked_fill`` + ``mul_``
  under autograd), copied below as :func:`_old_keyed_dropout` so the comparison needs no other
  checkout.

Results are written as ``fleetgnn bench`` writes them (``bench.json`` + ``bench.md`` in ``--out``).

Usage::

    python benchmarks/bench_dropout.py --threads 1 --repeat 7 --out /tmp/dropout
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fleetgnn.bench.machine import machine_info
from fleetgnn.bench.ops import SECTION, dropout_rows
from fleetgnn.bench.suite import script_results
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


#: The cases: name -> (rows, width).
SHAPES = {"Cora input": (2708, 1433), "hidden layer": (100_000, 256)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point; returns the results (``fleetgnn bench``'s format)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--repeat", type=int, default=7, help="interleaved rounds; the median is kept")
    p.add_argument("--p", type=float, default=0.5, help="drop probability")
    p.add_argument("--cases", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    p.add_argument("--out", type=Path, default=None, help="directory for bench.json and bench.md")
    args = p.parse_args(argv)
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    machine = machine_info("cpu")
    rows = dropout_rows(
        {c: SHAPES[c] for c in args.cases},
        args.threads,
        args.repeat,
        print,
        p=args.p,
        peers={
            "previous keyed (SplitMix64)": lambda x, p, ids: _old_keyed_dropout(x, p, 0, 1, 2, ids)
        },
    )
    return script_results(
        "benchmarks/bench_dropout.py",
        argv,
        args,
        rows,
        machine=machine,
        sections=[SECTION],
        started=started,
    )


if __name__ == "__main__":
    main()
