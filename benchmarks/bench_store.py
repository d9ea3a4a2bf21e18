"""UnifiedStore gather throughput per tier vs raw index_select and memcpy bandwidth.

For row sizes 64 B .. 4 KiB (float32 rows), a feature table of ``--table-mb`` MB is placed entirely
in one tier and ``--batch`` random rows are gathered through :meth:`UnifiedStore.gather`:

- ``local``: this rank's device shard (a single process, everything on the device tier);
- ``peer``: rows of another rank's shard read one-sided from shared memory (2 spawned gloo ranks,
  rank 0 gathers rows owned by rank 1);
- ``host``: the host tier;
- ``disk``: the dataset's ``np.memmap`` (written to a temp dir; after the first pass the pages are
  in the OS page cache, so this measures memmap fancy indexing, not the drive).

Peers measured in the same run: ``torch.index_select`` on a local tensor (the plain gather) and
memcpy bandwidth (``Tensor.copy_`` of the whole table; bytes = table size). Throughput = gathered
bytes / median time. Writes JSON with the machine description.

Usage::

    python benchmarks/bench_store.py --table-mb 64 --batch 65536 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from fleetgnn.distributed.testing import run_world
from fleetgnn.graph.csc import Graph
from fleetgnn.graph.dataset import open_dataset, write_dataset
from fleetgnn.store import TierBudgets, UnifiedStore

ROW_BYTES = (64, 256, 1024, 4096)


def table_graph(rows: int, row_bytes: int, seed: int = 0) -> Graph:
    """An edgeless graph whose features are a random float32 table [rows, row_bytes / 4]."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, row_bytes // 4), dtype=np.float32)
    indptr = np.zeros(rows + 1, dtype=np.int64)
    return Graph(indptr=indptr, indices=np.zeros(0, np.int32), x=x, validate="structure")


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _peer_world(comm, rows: int, row_bytes: int, batch: int, repeats: int) -> float | None:
    g = table_graph(rows, row_bytes)
    big = TierBudgets(device=rows * (row_bytes + 8) + (1 << 20))
    store = UnifiedStore.build(g, comm, big, name="benchpeer")
    comm.barrier()
    result = None
    if comm.rank == 0:  # hot ranks k with k mod 2 == 1 live on rank 1
        peer_nodes = store.plan.features.shard_rows(1)
        rng = np.random.default_rng(1)
        ids = torch.from_numpy(peer_nodes[rng.integers(0, peer_nodes.size, batch)])
        result = timed(lambda: store.gather(ids), repeats)
        assert store.requests()["peer"] > 0 and store.requests()["local"] == 0
    comm.barrier()
    store.close()
    return result


def bench(table_mb: float, batch: int, repeats: int, peer: bool) -> list[dict]:
    out = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-store-"))
    for rb in ROW_BYTES:
        rows = max(int(table_mb * 1e6) // rb, 1)
        g = table_graph(rows, rb)
        rng = np.random.default_rng(0)
        ids = torch.from_numpy(rng.integers(0, rows, batch))
        gbytes = batch * rb / 1e9
        x = torch.from_numpy(g.x)
        res: dict = {"row_bytes": rb, "rows": rows, "batch": batch}
        res["index_select"] = gbytes / timed(lambda x=x, i=ids: x.index_select(0, i), repeats)
        dst = torch.empty_like(x)
        res["memcpy"] = x.numel() * 4 / 1e9 / timed(lambda d=dst, x=x: d.copy_(x), repeats)
        full = rows * (rb + 8) + (1 << 20)  # + the (edgeless) topology
        for tier, budgets, graph in (
            ("local", TierBudgets(device=full), g),
            ("host", TierBudgets(host=full), g),
            ("disk", TierBudgets(), None),
        ):
            if graph is None:
                write_dataset(g, tmp / f"t{rb}", overwrite=True)
                graph = open_dataset(tmp / f"t{rb}")
            store = UnifiedStore.build(graph, None, budgets)
            assert torch.equal(store.gather(ids[:100]), x[ids[:100]])
            res[tier] = gbytes / timed(lambda s=store, i=ids: s.gather(i), repeats)
            assert store.hit_rates()[tier] == 1.0
            store.close()
        if peer:
            t = run_world(_peer_world, 2, rows, rb, batch, repeats)[0]
            res["peer"] = gbytes / t
        out.append(res)
        print(
            f"row {rb:5d} B: "
            + "  ".join(f"{k}={v:.2f}" for k, v in res.items() if isinstance(v, float))
            + " GB/s"
        )
    return out


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table-mb", type=float, default=64.0)
    ap.add_argument("--batch", type=int, default=65536)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-peer", action="store_true", help="skip the 2-rank peer measurement")
    ap.add_argument("--out", default="benchmarks/results/bench_store.json")
    args = ap.parse_args()
    results = bench(args.table_mb, args.batch, args.repeats, not args.no_peer)
    doc = {
        "benchmark": "store_gather",
        "unit": "GB/s (gathered bytes / median time; memcpy: table bytes / time)",
        "args": vars(args),
        "machine": machine(),
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
