"""Temporal link prediction with and without time on a ``temporal-like`` graph (issue 41).

The same ``fleetgnn train --task link`` run twice: with ``train.temporal=auto`` (the graph's edge
times: a time split, neighbourhoods sampled before each positive's time) and with
``train.temporal=off`` (times ignored: the random edge split and the plain sampler, whose
message passing sees edges of the future). The reported numbers are the summary's (the epoch of
best validation AUC). The two runs do not score the same held-out edges (future edges against
negatives at their time, or random edges against random pairs), so the gap is the two setups',
not leakage measured alone.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/quality_temporal_leakage.py \\
        --out benchmarks/results/quality_temporal_leakage.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

KEYS = ("val_auc", "test_auc", "val_ap", "test_ap", "val_mrr", "test_mrr")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=0.01)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--engine", default="minibatch")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--eval-edges", type=int, default=2000)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    fleet = [sys.executable, "-m", "fleetgnn"]
    work = Path(tempfile.mkdtemp(prefix="fleetgnn-temporal-leakage-"))
    data = work / "tl"
    prep = [*fleet, "prepare", "synthetic", "--preset", "temporal-like", "--scale"]
    subprocess.run([*prep, str(args.scale), "--out", str(data)], check=True, capture_output=True)
    cmd = [*fleet, "train", "--dataset", str(data), "--task", "link", "--engine", args.engine]
    cmd += ["--epochs", str(args.epochs), "--set", f"train.eval_edges={args.eval_edges}"]
    if args.nproc > 1:
        cmd += ["--nproc", str(args.nproc)]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    runs: dict[str, Any] = {}
    t0 = time.time()
    for temporal in ("auto", "off"):
        run_dir = work / f"run-{temporal}"
        argv = [*cmd, "--set", f"train.temporal={temporal}", "--run-dir", str(run_dir)]
        done = subprocess.run(argv, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-2000:]}")
        summary = json.loads((run_dir / "summary.json").read_text())
        runs[temporal] = {
            "command": " ".join(argv[2:-2]),
            **{k: summary.get(k) for k in KEYS},
            "best_epoch": summary.get("best_epoch"),
        }
        print(temporal, {k: runs[temporal][k] for k in KEYS}, flush=True)
    out = {
        "what": "temporal link prediction with edge times (auto) and without (off)",
        "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.platform()}",
        "scale": args.scale,
        "wall_s": round(time.time() - t0, 1),
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
