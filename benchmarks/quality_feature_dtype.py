"""Test accuracy per stored feature dtype (``store.feature_dtype``) against the dataset's float32.

Issue 40's accuracy check, through ``fleetgnn train`` as a user runs it: for every stored dtype
and seed, one run of each workload; the reported accuracy is the summary's ``test_acc`` (the
epoch of best validation accuracy). The minibatch workload also records the store's device
bytes and the device tier's feature rows (``metrics.jsonl``'s memory, the plan's rows) at one
``store.device_budget``.

Workloads:

- ``cora``: the bundled Cora, ``--model gcn --mode full --epochs 200`` (the reference engine).
- ``products``: products-like at ``--scale``, ``--model sage --engine minibatch``, a device
  budget smaller than the float32 features.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/quality_feature_dtype.py --out \\
        benchmarks/results/quality_feature_dtype.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DTYPES = ("float32", "bfloat16", "float16", "float8_e4m3")


def _run(cmd: list[str], run_dir: Path) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    cmd = [*cmd, "--run-dir", str(run_dir)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    lines = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines() if ln]
    memory = next((ln["memory"] for ln in reversed(lines) if "memory" in ln), None)
    return {"test_acc": summary["test_acc"], "val_acc": summary["val_acc"], "memory": memory}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--scale", type=float, default=0.05, help="products-like scale")
    p.add_argument("--epochs", type=int, default=10, help="products-like epochs")
    p.add_argument("--device-budget", default="8MB", help="products-like store.device_budget")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    fleet = [sys.executable, "-m", "fleetgnn"]
    work = Path(tempfile.mkdtemp(prefix="fleetgnn-quality-dtype-"))
    cora, prod = work / "cora", work / "products"
    subprocess.run([*fleet, "prepare", "planetoid", "--name", "cora", "--out", str(cora)],
                   check=True, capture_output=True)  # fmt: skip
    subprocess.run(
        [*fleet, "prepare", "synthetic", "--preset", "products-like", "--scale",
         str(args.scale), "--out", str(prod)],
        check=True, capture_output=True,
    )  # fmt: skip
    workloads = {
        "cora": [*fleet, "train", "--dataset", str(cora), "--model", "gcn", "--mode", "full",
                 "--epochs", "200"],
        "products": [*fleet, "train", "--dataset", str(prod), "--model", "sage", "--engine",
                     "minibatch", "--epochs", str(args.epochs), "--set",
                     f"store.device_budget={args.device_budget}"],
    }  # fmt: skip
    results: dict[str, Any] = {}
    t0 = time.time()
    for name, cmd in workloads.items():
        per: dict[str, Any] = {}
        for dtype in DTYPES:
            runs = []
            for seed in args.seeds:
                stored = [] if dtype == "float32" else ["--set", f"store.feature_dtype={dtype}"]
                run_dir = work / f"{name}-{dtype}-{seed}"
                runs.append(_run([*cmd, *stored, "--set", f"train.seed={seed}"], run_dir))
                print(name, dtype, seed, runs[-1]["test_acc"], flush=True)
            accs = [r["test_acc"] for r in runs]
            per[dtype] = {
                "test_acc": accs,
                "mean_test_acc": statistics.fmean(accs),
                "memory": runs[0]["memory"],
            }
        base = per["float32"]["mean_test_acc"]
        for dtype in DTYPES:
            per[dtype]["points_vs_float32"] = 100 * (per[dtype]["mean_test_acc"] - base)
        results[name] = {"command": " ".join(cmd[2:]), "by_dtype": per}
    out = {
        "what": "test accuracy per store.feature_dtype (float32: the dataset's rows)",
        "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.platform()}",
        "seeds": args.seeds,
        "products_scale": args.scale,
        "wall_s": round(time.time() - t0, 1),
        "workloads": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: {d: round(v["points_vs_float32"], 2) for d, v in w["by_dtype"].items()}
                      for k, w in results.items()}))  # fmt: skip


if __name__ == "__main__":
    main()
