"""Benchmark fleetgnn.ops.gspmm (sum/mean, forward + backward) against peers in the same run.

Peers: a plain torch reference (chunked gather + ``index_add_``, autograd backward) and PyG's
message passing (``SimpleConv``) when ``torch_geometric`` is importable. The machine limit is the
memcpy bandwidth measured in the same run (``clone`` of a large tensor: bytes read + written).

Achieved bandwidth uses the gather model of one pass: indices and edge values (12 B/edge), one
gathered source row per edge and one written destination row (``4 * D * (E + M)`` bytes). Rows
served from cache count too, so small graphs can exceed 100% of the memcpy limit.

Also measures keyed dropout (counter-based hash masks) against ``nn.Linear`` of the same width
and against ``torch.nn.functional.dropout``.

Examples:
    python benchmarks/bench_ops.py                                   # 1M nodes, 20M edges
    python benchmarks/bench_ops.py --nodes 100000 --edges 2000000 --dims 64 --out r.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import torch

from fleetgnn.bench.data import random_adjacency
from fleetgnn.bench.machine import machine_info
from fleetgnn.bench.peers import pyg_gspmm, torch_gspmm
from fleetgnn.bench.timing import median_time
from fleetgnn.ops import Adjacency, gspmm, keyed_dropout, structure


def timeit(fn: Callable[[], Any], device: torch.device, repeat: int) -> float:
    """Median seconds of ``repeat`` runs after two warm-up runs."""
    return median_time(fn, repeat, device, warmup=2)


def memcpy_gbps(device: torch.device, nbytes: int, repeat: int) -> dict[str, float]:
    """Copy bandwidth (bytes read + written per second, GB/s) of a large float32 tensor.

    ``clone`` allocates its output on every call (page faults included, as in real ops that
    allocate); ``copy_`` writes into a preallocated buffer (the machine's streaming limit).
    """
    buf = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    out = torch.empty_like(buf)
    moved = 2 * buf.numel() * 4
    t_clone = timeit(lambda: buf.clone(), device, repeat)
    t_copy = timeit(lambda: out.copy_(buf), device, repeat)
    return {"clone_gbps": moved / t_clone / 1e9, "copy_gbps": moved / t_copy / 1e9}


def random_graph(nodes: int, edges: int, seed: int, device: torch.device) -> Adjacency:
    """A uniform random graph (:func:`fleetgnn.bench.data.random_adjacency`) on ``device``."""
    adj = random_adjacency(nodes, edges, seed)
    return Adjacency(adj.indptr.to(device), adj.indices.to(device), nodes)


def bench_gspmm(args: argparse.Namespace, device: torch.device, bw: float) -> list[dict[str, Any]]:
    adj = random_graph(args.nodes, args.edges, args.seed, device)
    structure(adj).transposed()  # build the cached transpose outside the timed region
    peers: dict[str, Callable[..., torch.Tensor] | None] = {
        "fleetgnn": lambda x, r: gspmm(adj, x, r),
        "torch_index_add": torch_gspmm(adj, args.chunk),
        "pyg": pyg_gspmm(adj),
    }
    rows = []
    e, m = adj.num_edges, adj.num_dst
    for d in args.dims:
        x = torch.randn(adj.num_src, d, device=device, requires_grad=True)
        grad = torch.randn(m, d, device=device)
        nbytes = 12 * e + 4 * d * (e + m)
        for reduce in ("sum", "mean"):
            for name, fn in peers.items():
                if fn is None or (name != "fleetgnn" and args.skip_peers):
                    continue

                def fwd(
                    fn: Callable[..., torch.Tensor] = fn, x: torch.Tensor = x, r: str = reduce
                ) -> torch.Tensor:
                    with torch.no_grad():
                        return fn(x, r)

                def fwd_bwd(
                    fn: Callable[..., torch.Tensor] = fn,
                    x: torch.Tensor = x,
                    r: str = reduce,
                    g: torch.Tensor = grad,
                ) -> None:
                    x.grad = None
                    fn(x, r).backward(g)

                t_f = timeit(fwd, device, args.repeat)
                t_fb = timeit(fwd_bwd, device, args.repeat)
                row = {
                    "op": f"gspmm_{reduce}",
                    "impl": name,
                    "dim": d,
                    "nodes": adj.num_src,
                    "edges": e,
                    "forward_s": t_f,
                    "forward_backward_s": t_fb,
                    "forward_gbps": nbytes / t_f / 1e9,
                    "forward_frac_of_memcpy": nbytes / t_f / 1e9 / bw,
                }
                rows.append(row)
                print(
                    f"  {row['op']:<11} {name:<16} D={d:<4} fwd {t_f * 1e3:9.1f} ms  "
                    f"fwd+bwd {t_fb * 1e3:9.1f} ms  {row['forward_gbps']:6.2f} GB/s "
                    f"({100 * row['forward_frac_of_memcpy']:.0f}% of memcpy)"
                )
    by = {(r["op"], r["dim"], r["impl"]): r for r in rows}
    for r in rows:
        ref = by.get((r["op"], r["dim"], "fleetgnn"))
        if ref is not None and r["impl"] != "fleetgnn":
            r["fleetgnn_speedup_forward"] = r["forward_s"] / ref["forward_s"]
            r["fleetgnn_speedup_forward_backward"] = (
                r["forward_backward_s"] / ref["forward_backward_s"]
            )
    return rows


def bench_dropout(args: argparse.Namespace, device: torch.device) -> list[dict[str, Any]]:
    rows = []
    n = args.dropout_rows
    ids = torch.randperm(10 * n, device=device)[:n]
    for w in args.dims:
        x = torch.randn(n, w, device=device)
        lin = torch.nn.Linear(w, w).to(device)
        with torch.no_grad():
            t_lin = timeit(lambda lin=lin, x=x: lin(x), device, args.repeat)
            t_hash = timeit(lambda x=x: keyed_dropout(x, 0.5, 0, 1, 2, ids), device, args.repeat)
            t_torch = timeit(lambda x=x: torch.nn.functional.dropout(x, 0.5), device, args.repeat)
        rows.append(
            {
                "op": "keyed_dropout",
                "rows": n,
                "width": w,
                "keyed_dropout_s": t_hash,
                "linear_s": t_lin,
                "torch_dropout_s": t_torch,
                "keyed_over_linear": t_hash / t_lin,
                "keyed_over_torch_dropout": t_hash / t_torch,
            }
        )
        print(
            f"  keyed_dropout  rows={n} W={w:<4} {t_hash * 1e3:8.1f} ms  "
            f"Linear {t_lin * 1e3:8.1f} ms (x{t_hash / t_lin:.2f})  "
            f"F.dropout {t_torch * 1e3:8.1f} ms (x{t_hash / t_torch:.2f})"
        )
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--edges", type=int, default=20_000_000)
    p.add_argument("--dims", type=int, nargs="+", default=[64, 256])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunk", type=int, default=1 << 20, help="edges per index_add_ chunk (peer)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--skip-peers", action="store_true", help="time fleetgnn only")
    p.add_argument("--dropout-rows", type=int, default=200_000)
    p.add_argument("--memcpy-mb", type=int, default=512)
    p.add_argument("--out", default=None, help="write the JSON results here")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    info = machine_info(device)
    mem = memcpy_gbps(device, args.memcpy_mb << 20, args.repeat)
    bw = max(mem.values())
    print(
        f"machine: {info}\nmemcpy: clone {mem['clone_gbps']:.2f} GB/s, "
        f"copy_ {mem['copy_gbps']:.2f} GB/s (limit used: {bw:.2f})"
    )
    print(f"gspmm on {args.nodes} nodes, {args.edges} edges:")
    results = {
        "machine": info,
        "memcpy": mem,
        "memcpy_gbps": bw,
        "config": vars(args),
        "gspmm": bench_gspmm(args, device, bw),
        "keyed_dropout": bench_dropout(args, device),
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
        print(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
