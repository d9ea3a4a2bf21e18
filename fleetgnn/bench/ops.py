"""Section ``ops``: sparse aggregation (``gspmm``) and keyed dropout against their peers.

- ``gspmm`` sum and mean, forward and forward + backward, on a uniform random graph, against a
  plain torch ``index_add`` and PyG's ``SimpleConv`` (when it imports), and against the memcpy
  limit: the seconds a ``copy_`` at the bandwidth measured in the same run needs for the bytes of
  one pass (indices and edge values 12 B/edge, one source row read per edge and one destination
  row written: ``4 * D * (E + M)`` bytes).
- keyed dropout (the mask a pure function of seed, step, layer, node ID and column, so every
  engine draws the same one) against ``torch.nn.functional.dropout``, forward and forward +
  backward, on Cora's input shape and on a hidden layer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from fleetgnn.bench.data import CORA_SHAPE, random_adjacency
from fleetgnn.bench.peers import NO_PYG, pyg_gspmm, torch_gspmm
from fleetgnn.bench.report import measurement, progress_line
from fleetgnn.bench.timing import interleaved, median_time
from fleetgnn.ops import Adjacency, gspmm, keyed_dropout, structure

SECTION = "ops"


def memcpy_gbps(nbytes: int, repeat: int, device: torch.device | str = "cpu") -> float:
    """Streaming copy bandwidth: bytes read + written per second (GB/s) of ``copy_``.

    On a CUDA ``device`` both buffers live there: the device-to-device copy.
    """
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    t = median_time(lambda: dst.copy_(src), repeat, device)
    return 2 * src.numel() * 4 / t / 1e9


def h2d_gbps(nbytes: int, repeat: int, device: torch.device | str, pinned: bool) -> float:
    """Host-to-device copy bandwidth (GB/s moved) into a CUDA ``device``.

    ``pinned``: from page-locked host memory (``non_blocking``, the DMA engine's rate); else from
    ordinary pageable memory (the driver stages it through its own pinned buffers).
    """
    src = torch.empty(nbytes // 4, dtype=torch.float32).uniform_()
    if pinned:
        src = src.pin_memory()
    dst = torch.empty(src.shape, dtype=src.dtype, device=device)
    t = median_time(lambda: dst.copy_(src, non_blocking=pinned), repeat, device)
    return src.numel() * 4 / t / 1e9


def _sizes(quick: bool) -> dict[str, int]:
    if quick:
        return {"nodes": 20_000, "edges": 200_000, "dim": 32, "rows": 20_000, "width": 64}
    return {"nodes": 100_000, "edges": 2_000_000, "dim": 64, "rows": 100_000, "width": 256}


def _count(n: int) -> str:
    return f"{n / 1e6:g}M" if n >= 1_000_000 else f"{n / 1e3:g}k"


def run(opts: Any, threads: int, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Every ``ops`` measurement at the current thread count."""
    size = _sizes(opts.quick)
    rows: list[dict[str, Any]] = []
    bw = memcpy_gbps((32 if opts.quick else 256) << 20, opts.repeat)
    log(f"memcpy (copy_) {bw:.1f} GB/s")
    rows += gspmm_rows(size, threads, opts.repeat, bw, log)
    rows += dropout_rows(dropout_shapes(size), threads, opts.repeat, log)
    return rows


def gspmm_rows(
    size: dict[str, int],
    threads: int,
    repeat: int,
    bw: float,
    log: Callable[[str], None],
    device: torch.device | str = "cpu",
    *,
    with_peers: bool = True,
    chunk: int = 1 << 20,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """``gspmm`` sum and mean, forward and forward + backward, against its peers and the limit.

    Args:
        size: ``nodes``, ``edges`` and ``dim`` of the random graph and its features.
        threads: torch threads in use (recorded).
        repeat: Timed repetitions.
        bw: Copy bandwidth (GB/s read + written) on ``device``: the limit.
        log: Progress lines.
        device: Where the graph, the features and every implementation run.
        with_peers: False: fleetgnn and the limit only (PyG's ``SimpleConv`` materialises the
            ``[E, D]`` messages, more memory than a large graph leaves).
        chunk: Edges per ``index_add_`` chunk of the torch peer.
        seed: Of the random graph.
    """
    adj = random_adjacency(size["nodes"], size["edges"], seed)
    adj = Adjacency(adj.indptr.to(device), adj.indices.to(device), adj.num_src)
    structure(adj).transposed()  # the cached transpose, built outside the timed region
    peers: dict[str, Callable[[torch.Tensor, str], torch.Tensor]] = {}
    skipped = {}
    if with_peers:
        peers["torch index_add"] = torch_gspmm(adj, chunk)
        pyg = pyg_gspmm(adj)
        if pyg is None:
            skipped["PyG SimpleConv"] = NO_PYG
        else:
            peers["PyG SimpleConv"] = pyg
    d, e, m = size["dim"], adj.num_edges, adj.num_dst
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(adj.num_src, d, generator=gen).to(device)
    grad = torch.randn(m, d, generator=gen).to(device)
    nbytes = 12 * e + 4 * d * (e + m)
    shape = f"{_count(adj.num_src)} nodes / {_count(e)} edges, D={d}"
    rows = []
    for reduce in ("sum", "mean"):
        impls = {"fleetgnn": lambda x, reduce: gspmm(adj, x, reduce), **peers}
        for direction, make in (("forward", _forward), ("forward+backward", _forward_backward)):
            calls = {k: make(fn, x, grad, reduce) for k, fn in impls.items()}
            times = interleaved(calls, repeat, device)
            limit = nbytes / (bw * 1e9) * (1 if direction == "forward" else 2)
            row = measurement(
                SECTION,
                f"gspmm {reduce} {direction}, {shape}",
                threads,
                times,
                limits={"memcpy of the same bytes": limit},
                skipped=skipped,
                extra={"bytes_per_pass": nbytes, "memcpy_gbps": bw, "device": str(device)},
            )
            rows.append(row)
            log(progress_line(row))
    return rows


def dropout_shapes(size: dict[str, int]) -> dict[str, tuple[int, int]]:
    """The suite's keyed-dropout inputs: Cora's input and a hidden layer of ``size``."""
    return {
        "Cora input": (CORA_SHAPE["num_nodes"], CORA_SHAPE["num_features"]),
        "hidden layer": (size["rows"], size["width"]),
    }


def dropout_rows(
    shapes: dict[str, tuple[int, int]],
    threads: int,
    repeat: int,
    log: Callable[[str], None],
    device: torch.device | str = "cpu",
    *,
    p: float = 0.5,
    peers: dict[str, Callable[[torch.Tensor, float, torch.Tensor], torch.Tensor]] | None = None,
) -> list[dict[str, Any]]:
    """Keyed dropout against ``F.dropout``, forward and forward + backward, on each shape.

    Args:
        shapes: Name in the table -> (rows, width) of the input.
        threads: torch threads in use (recorded).
        repeat: Timed repetitions.
        log: Progress lines.
        device: Where the inputs live.
        p: Drop probability.
        peers: More implementations to time, name -> ``fn(x, p, node_ids)``.
    """
    rows = []
    gen = torch.Generator().manual_seed(0)
    for name, (n, w) in shapes.items():
        x = torch.randn(n, w, generator=gen).to(device)
        g = torch.randn(n, w, generator=gen).to(device)
        ids = torch.randperm(10 * n, generator=gen)[:n].to(device)
        impls: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
            "fleetgnn": lambda x, ids=ids: keyed_dropout(x, p, 0, 1, 2, ids),
            "F.dropout": lambda x: F.dropout(x, p, training=True),
        }
        for peer, fn in (peers or {}).items():
            impls[peer] = lambda x, fn=fn, ids=ids: fn(x, p, ids)
        keep = float((keyed_dropout(torch.ones_like(x), p, 0, 1, 2, ids) != 0).float().mean())
        for direction, make in (("forward", _forward), ("forward+backward", _forward_backward)):
            times = interleaved({k: make(fn, x, g) for k, fn in impls.items()}, repeat, device)
            row = measurement(
                SECTION,
                f"keyed dropout {direction}, {name} {n}x{w}, p={p:g}",
                threads,
                times,
                extra={"rows": n, "width": w, "device": str(device), "keep_rate": keep},
            )
            rows.append(row)
            log(progress_line(row))
    return rows


def _forward(
    fn: Callable[..., torch.Tensor], x: torch.Tensor, grad: torch.Tensor, *args: Any
) -> Callable[[], None]:
    """A call of ``fn(x, *args)`` without autograd (``grad`` unused)."""

    def call() -> None:
        with torch.no_grad():
            fn(x, *args)

    return call


def _forward_backward(
    fn: Callable[..., torch.Tensor], x: torch.Tensor, grad: torch.Tensor, *args: Any
) -> Callable[[], None]:
    """A call of ``fn(x, *args).backward(grad)`` (``x`` requires grad; its grad is reset)."""
    xg = x.detach().requires_grad_(True)

    def call() -> None:
        xg.grad = None
        fn(xg, *args).backward(grad)

    return call
