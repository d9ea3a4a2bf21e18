"""Cora's accuracy figures of the docs, measured with the commands the docs show.

Node classification (docs/benchmarks.md's table, README's 82.6%): GCN, GAT and GraphSAGE on the
bundled Cora, one ``fleetgnn train`` per seed with the hyper-parameters of the original papers,
as docs/benchmarks.md's loop runs them. Link prediction (docs/link-prediction.md): the graph
auto-encoder, ``fleetgnn train --task link --dataset data/cora --model gcn --mode full``, per seed.
Each run's figure is its ``summary.json``'s (the epoch of best validation accuracy, or AUC);
the JSON holds every seed's, their mean and their (sample) standard deviation, and each
command as written in the docs (``$s``: the seed). tests/test_docs_numbers.py compares the
docs' figures with it.

Usage (in an empty directory: the commands write ``data/cora`` and ``runs/`` there)::

    OMP_NUM_THREADS=1 python benchmarks/quality_cora.py --out benchmarks/results/quality_cora.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: name -> (the docs' command, with $s for the seed; the summary keys it reports)
WORKLOADS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gcn": (
        "fleetgnn train --dataset data/cora --model gcn --mode full --epochs 200 --seed $s "
        "--set data.feature_norm=row --set optim.lr=0.01 --set optim.weight_decay=5e-4",
        ("test_acc",),
    ),
    "gat": (
        "fleetgnn train --dataset data/cora --model gat --mode full --epochs 200 --seed $s "
        "--set data.feature_norm=row --set optim.lr=0.005 --set optim.weight_decay=5e-4",
        ("test_acc",),
    ),
    "sage": (
        "fleetgnn train --dataset data/cora --model sage --mode minibatch --epochs 50 --seed $s "
        "--set data.feature_norm=row --set train.fanouts=[10,10] --set train.batch_size=32",
        ("test_acc",),
    ),
    "gae": (
        "fleetgnn train --task link --dataset data/cora --model gcn --mode full --seed $s",
        ("test_auc", "test_ap"),
    ),
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--only", nargs="+", choices=sorted(WORKLOADS), default=sorted(WORKLOADS))
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    fleet = [sys.executable, "-m", "fleetgnn"]
    work = Path(tempfile.mkdtemp(prefix="fleetgnn-quality-cora-"))
    prep = [*fleet, "prepare", "planetoid", "--name", "cora", "--out", "data/cora"]
    subprocess.run(prep, check=True, capture_output=True, cwd=work)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    results: dict[str, Any] = {}
    t0 = time.time()
    for name in args.only:
        command, keys = WORKLOADS[name]
        per_seed: dict[str, list[float]] = {k: [] for k in keys}
        for seed in args.seeds:
            run = f"runs/{name}-{seed}"
            cmd = [*fleet, *shlex.split(command.replace("$s", str(seed)))[1:]]
            done = subprocess.run(
                [*cmd, "--run-dir", run, "--quiet"],
                capture_output=True,
                text=True,
                env=env,
                cwd=work,
            )
            if done.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
            summary = json.loads((work / run / "summary.json").read_text())
            for k in keys:
                per_seed[k].append(summary[k])
            print(name, seed, {k: summary[k] for k in keys}, flush=True)
        results[name] = {
            "command": command,
            **{
                k: {"per_seed": v, "mean": statistics.fmean(v), "std": statistics.stdev(v)}
                for k, v in per_seed.items()
            },
        }
    out = {
        "what": "Cora test accuracy (node) and test AUC/AP (link) per seed, the docs' commands",
        "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.platform()}",
        "seeds": args.seeds,
        "wall_s": round(time.time() - t0, 1),
        "workloads": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
