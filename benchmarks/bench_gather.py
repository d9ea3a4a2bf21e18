"""Global gather throughput: one-sided (shared memory) vs two-sided (all-to-all) vs local indexing.

WholeGraph Fig. 8/10 analogues on one host: every rank owns an equal shard of a float32 table in
a :class:`fleetgnn.distributed.ShardedTensor` and gathers random rows of the whole table.

- ``one_sided``: reads the mapped peer shards directly (no collective).
- ``two_sided``: counts, ids and rows exchanged with ``all_to_all`` (the distributed-memory
  baseline).
- ``index_select``: ``torch.index_select`` on a plain local tensor holding the whole table (the
  single-process peer).
- ``memcpy``: ``copy_`` of a large buffer (bytes read + written per second; the machine limit).

Throughput is gathered bytes per second per rank (AlgoBW). One-sided gathers and local indexing
are timed one rank at a time (they need no peer); the two-sided gather, a collective, runs on all
ranks at once. Also reports the traffic the meter
recorded per gather (messages and bytes per link kind). Ranks are processes on the CPU; on a
2-core machine more ranks than cores time-share, so compare ratios, not absolute numbers.

Not the ``gather`` section of ``fleetgnn bench`` (:mod:`fleetgnn.bench.gather`: one process
reading rows through the unified store's tiers); the timing and the memcpy limit are
:mod:`fleetgnn.bench`'s.

Examples:
    python benchmarks/bench_gather.py                          # 2 and 4 ranks, 64 B..4 KB rows
    python benchmarks/bench_gather.py --ranks 2 --table-mb 16 --ids 20000 --out r.json
"""

from __future__ import annotations

import argparse
import json
import uuid
from typing import Any

import torch

from fleetgnn.bench.machine import machine_info
from fleetgnn.bench.ops import memcpy_gbps
from fleetgnn.bench.timing import median_time
from fleetgnn.distributed import ShardedTensor
from fleetgnn.distributed.testing import run_world


def _rank_bench(comm, row_bytes_list: list[int], table_mb: float, n_ids: int, repeat: int) -> dict:
    torch.manual_seed(1234 + comm.rank)
    ws, rank = comm.world_size, comm.rank
    out: dict[str, Any] = {"rows": []}
    for row_bytes in row_bytes_list:
        cols = row_bytes // 4
        total_rows = max(ws, int(table_mb * 2**20) // row_bytes)
        per = total_rows // ws
        total_rows = per * ws
        g = torch.Generator().manual_seed(row_bytes)
        table = torch.randn(total_rows, cols, generator=g)  # every rank builds the same table
        local = table[rank * per : (rank + 1) * per].clone()
        name = f"bench{uuid.uuid4().hex[:6]}" if rank == 0 else ""
        name = comm.broadcast_object(name, src=0)
        one = ShardedTensor.create(local, comm, name=name + "a")
        two = ShardedTensor.create(local, comm, name=name + "b", one_sided=False)
        ids = torch.randint(0, total_rows, (n_ids,))
        assert torch.equal(one.gather_global(ids), table[ids])
        assert torch.equal(two.gather_global(ids), table[ids])
        gathered = n_ids * row_bytes
        res: dict[str, Any] = {"row_bytes": row_bytes, "table_rows": total_rows, "ids": n_ids}
        comm.meter.reset()
        one.gather_global(ids)
        res["one_sided_traffic"] = comm.meter.snapshot()
        comm.meter.reset()
        two.gather_global(ids)
        res["two_sided_traffic"] = comm.meter.snapshot()
        # one-sided and local reads need no peer: ranks take turns (no time-sharing of cores)
        for r in range(ws):
            comm.barrier()
            if r == rank:
                t_one = median_time(lambda: one.gather_global(ids), repeat)  # noqa: B023
                t_loc = median_time(lambda: torch.index_select(table, 0, ids), repeat)  # noqa: B023
        comm.barrier()  # two-sided is a collective: all ranks at once
        t_two = median_time(lambda: two.gather_global(ids), repeat)  # noqa: B023
        res.update(
            one_sided_s=t_one,
            two_sided_s=t_two,
            index_select_s=t_loc,
            one_sided_gbps=gathered / t_one / 1e9,
            two_sided_gbps=gathered / t_two / 1e9,
            index_select_gbps=gathered / t_loc / 1e9,
        )
        res["one_vs_two"] = t_two / t_one
        out["rows"].append(res)
        one.close()
        two.close()
        comm.barrier()
    out["memcpy_gbps"] = memcpy_gbps(64 * 2**20, repeat)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--row-bytes", type=int, nargs="+", default=[64, 256, 1024, 4096])
    ap.add_argument("--table-mb", type=float, default=32.0, help="whole table size in MiB")
    ap.add_argument("--ids", type=int, default=50_000, help="rows gathered per call per rank")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=None, help="write JSON results here")
    args = ap.parse_args()

    results: dict[str, Any] = {
        "machine": {**machine_info("cpu"), "ranks": "processes; shared memory in /dev/shm"},
        "config": vars(args),
        "runs": [],
    }
    for ws in args.ranks:
        per_rank = run_world(
            _rank_bench, ws, args.row_bytes, args.table_mb, args.ids, args.repeat, timeout_s=600
        )
        r0 = per_rank[0]
        results["runs"].append({"world_size": ws, "per_rank": per_rank})
        print(f"\n== {ws} ranks (rank 0; memcpy {r0['memcpy_gbps']:.2f} GB/s) ==")
        print(
            f"{'row B':>6} {'one-sided':>10} {'two-sided':>10} {'idx_select':>10} {'1s/2s':>6}"
            f" {'peer msgs 1s':>12} {'peer msgs 2s':>12} {'peer MB 2s':>10}  (GB/s)"
        )
        for row in r0["rows"]:
            t1, t2 = row["one_sided_traffic"], row["two_sided_traffic"]
            print(
                f"{row['row_bytes']:>6} {row['one_sided_gbps']:>10.2f} "
                f"{row['two_sided_gbps']:>10.2f} {row['index_select_gbps']:>10.2f} "
                f"{row['one_vs_two']:>6.2f} {t1['peer']['messages']:>12} "
                f"{t2['peer']['messages']:>12} {t2['peer']['bytes'] / 1e6:>10.2f}"
            )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
