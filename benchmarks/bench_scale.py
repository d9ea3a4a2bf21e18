"""The scale ladder: papers-like graphs end to end from disk, with memory bounded at every rung.

Each rung is ``papers-like`` at one scale (1.0 = 111M nodes, 1.6B edges, 128 features), taken
through what a user types, each stage its own process tree:

``prepare synthetic`` -> ``info`` -> ``partition --method range`` (and ``metis``, which refuses in
one line where its estimate exceeds the machine's memory) -> ``train --engine minibatch --nproc 2``
(device and host budgets well below the data, a fixed number of steps, one evaluation over the
labelled nodes) -> ``embed`` (layer-wise full-neighbour inference of layer 1, streamed to a memmap).

Per stage it records wall time, a throughput, the peak resident memory of every process of the
stage's tree split into anonymous and file-backed pages (sampled from ``/proc/PID/status`` every
``--poll`` seconds), and the bytes the tree read from disk (``read_bytes`` of ``/proc/self/io``,
which accumulates reaped children). For ``train`` it also reads the time split
(sample / gather / forward+backward) and per-link bytes from ``metrics.jsonl``.

The claim to check in the table: peak anonymous RSS per process stays flat (or follows the
budgets) while the data grows; file-backed pages are the page cache of the memory-mapped dataset,
which the kernel reclaims under pressure.

Usage::

    python benchmarks/bench_scale.py --scales 0.02 0.1 --out benchmarks/results/bench_scale.json
    python benchmarks/bench_scale.py --scales 0.002 --steps 5          # a quick look

Datasets go to ``--root`` (default ``$XDG_CACHE_HOME/fleetgnn/scale``) and are kept for reruns
(``--fresh`` regenerates). A rung whose dataset would not fit the free disk is skipped with the
reason recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fleetgnn.bench.machine import machine_info
from fleetgnn.graph.synthetic import generator_version

# papers-like at scale 1.0 (see `fleetgnn plan --shape` / the preset table)
FULL_NODES = 111_059_956
FULL_EDGES = 1_615_685_872
FEATURES = 128


def _status(pid: int) -> dict[str, int] | None:
    """RssAnon / RssFile / RssShmem (bytes) of one process, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile", "RssShmem", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def _children() -> dict[int, list[int]]:
    """ppid -> child pids over the whole machine."""
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _tree(root: int) -> list[int]:
    kids = _children()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def _read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    return 0


def run_stage(cmd: list[str], poll: float, env: dict[str, str]) -> dict[str, Any]:
    """Run one command; wall time, per-process peak RSS (anon / file) and bytes read from disk."""
    peaks: dict[int, dict[str, int]] = {}
    names: dict[int, str] = {}
    io0 = _read_bytes()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for pid in _tree(proc.pid):
                st = _status(pid)
                if st is None:
                    continue
                if pid not in names:
                    try:
                        names[pid] = (
                            Path(f"/proc/{pid}/cmdline").read_bytes()[:200].decode(errors="replace")
                        )
                    except OSError:
                        names[pid] = "?"
                best = peaks.setdefault(pid, {})
                for k, v in st.items():
                    best[k] = max(best.get(k, 0), v)
            done.wait(poll)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    out, err = proc.communicate()
    done.set()
    thread.join()
    wall = time.perf_counter() - t0
    # every process of the tree (the command, the launcher's workers), largest first; the
    # multiprocessing resource tracker is left out
    procs = [
        {"pid": pid, "cmd": names.get(pid, "?").replace("\0", " ").strip(), **peak}
        for pid, peak in peaks.items()
        if "resource_tracker" not in names.get(pid, "")
    ]
    procs.sort(key=lambda p: -p.get("RssAnon", 0))
    return {
        "cmd": " ".join(cmd),
        "rc": proc.returncode,
        "wall_s": wall,
        "read_bytes": _read_bytes() - io0,
        "processes": procs,
        "peak_anon": max((p.get("RssAnon", 0) for p in procs), default=0),
        "peak_file": max((p.get("RssFile", 0) for p in procs), default=0),
        "peak_hwm": max((p.get("VmHWM", 0) for p in procs), default=0),
        "stdout_tail": out[-2000:],
        "stderr_tail": err[-3000:],
    }


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def rung(args: argparse.Namespace, scale: float, env: dict[str, str]) -> dict[str, Any]:
    """Every stage of one scale; stops at the first failing stage (recorded)."""
    fleet = [sys.executable, "-m", "fleetgnn"]
    data = Path(args.root) / f"papers-like-scale{scale:g}-v{generator_version('papers-like')}"
    work = Path(args.root) / f"runs-scale{scale:g}"
    nodes, edges = int(FULL_NODES * scale), int(FULL_EDGES * scale)
    need = nodes * (FEATURES * 4 + 8 + 4) + edges * 4
    res: dict[str, Any] = {"scale": scale, "nodes": nodes, "edges": edges, "stages": {}}
    free = shutil.disk_usage(Path(args.root)).free
    if not (data / "meta.json").is_file() and need * 1.1 > free:
        res["skipped"] = f"needs ~{need / 2**30:.1f} GiB of disk, {free / 2**30:.1f} GiB free"
        return res
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    stages = res["stages"]

    def stage(name: str, cmd: list[str], amount: float | None = None, unit: str = "") -> bool:
        if args.stages and name != "prepare" and name.split("_")[0] not in args.stages:
            return True
        print(f"[scale {scale:g}] {name}: {' '.join(cmd[2:])}", flush=True)
        r = run_stage(cmd, args.poll, env)
        if amount is not None and r["wall_s"] > 0:
            r["throughput"] = f"{amount / r['wall_s'] / 1e6:.2f} M{unit}/s"
        stages[name] = r
        print(
            f"    rc {r['rc']}  {r['wall_s']:.1f} s  anon {r['peak_anon'] / 2**20:.0f} MiB"
            f"  file {r['peak_file'] / 2**20:.0f} MiB  read {r['read_bytes'] / 2**20:.0f} MiB",
            flush=True,
        )
        if r["rc"] != 0:
            print(r["stderr_tail"][-1500:], flush=True)
        return r["rc"] == 0

    if args.fresh or not (data / "meta.json").is_file():
        cmd = [*fleet, "prepare", "synthetic", "--preset", "papers-like", "--scale", f"{scale:g}"]
        cmd += ["--out", str(data), "--overwrite"]
        if not stage("prepare", cmd, edges, "edges"):
            return res
    res["dataset_bytes"] = dir_bytes(data)
    meta = json.loads((data / "meta.json").read_text())
    res["nodes"], res["edges"] = int(meta["num_nodes"]), int(meta["num_edges"])
    edges = res["edges"]
    if not stage("info", [*fleet, "info", str(data)]):
        return res
    stage(
        "partition_range",
        [*fleet, "partition", str(data), "--method", "range", "--parts", str(args.nproc)],
        edges,
        "edges",
    )
    if not args.skip_metis:
        # a refusal (exit 2, one line naming the memory it would need) is a result, not a failure
        stage(
            "partition_metis",
            [*fleet, "partition", str(data), "--method", "metis", "--parts", str(args.nproc)],
            edges,
            "edges",
        )
    run_dir = work / "train"
    cmd = [*fleet, "train", "--engine", "minibatch", "--nproc", str(args.nproc)]
    cmd += ["--dataset", str(data), "--model", "sage", "--epochs", "1", "--no-progress"]
    cmd += ["--run-dir", str(run_dir)]
    for s in (
        f"model.hidden={args.hidden}",
        f"model.num_layers={len(args.fanouts)}",
        f"train.fanouts=[{','.join(map(str, args.fanouts))}]",
        f"train.batch_size={args.batch_size}",
        f"train.max_steps={args.steps}",
        f"store.device_budget={args.device_budget}",
        f"store.host_budget={args.host_budget}",
        "train.eval_nodes=labelled",
    ):
        cmd += ["--set", s]
    if not stage("train", cmd) or not (run_dir / "metrics.jsonl").is_file():
        return res  # failed, or not among --stages (then embed has no run to read either)
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    recs = [r for r in recs if "epoch" in r]
    if recs:
        last = recs[-1]
        res["train_metrics"] = {
            k: last.get(k) for k in ("times", "traffic", "memory", "test_acc", "val_acc")
        }
    emb = work / "embed"
    cmd = [*fleet, "embed", str(run_dir), "--layer", "1", "--out", str(emb)]
    cmd += ["--nproc", str(args.nproc)]
    stage("embed", cmd, res["nodes"], "nodes")
    if emb.exists():
        shutil.rmtree(emb)
    return res


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| scale | nodes | edges | data GiB | stage | rc | wall s | throughput | "
        "peak anon MiB / proc | peak file MiB / proc | read GiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        head = (
            f"| {r['scale']:g} | {r['nodes'] / 1e6:.1f}M | {r['edges'] / 1e6:.0f}M | "
            f"{r.get('dataset_bytes', 0) / 2**30:.1f} |"
        )
        if "skipped" in r:
            rows.append(f"{head} (skipped: {r['skipped']}) | | | | | | | |")
            continue
        for name, s in r["stages"].items():
            rows.append(
                f"{head} {name} | {s['rc']} | {s['wall_s']:.1f} | {s.get('throughput', '')} | "
                f"{s['peak_anon'] / 2**20:.0f} | {s['peak_file'] / 2**20:.0f} | "
                f"{s['read_bytes'] / 2**30:.2f} |"
            )
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--scales", type=float, nargs="+", default=[0.02, 0.1, 0.3])
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fleetgnn" / "scale"
    p.add_argument("--root", default=str(cache), help="where datasets and runs go")
    p.add_argument("--fresh", action="store_true", help="regenerate datasets that exist")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=20, help="training steps (train.max_steps)")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--fanouts", type=int, nargs="+", default=[10, 5])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--device-budget", default="64MB", help="store.device_budget per rank")
    p.add_argument("--host-budget", default="256MB", help="store.host_budget per host")
    p.add_argument("--skip-metis", action="store_true")
    p.add_argument(
        "--stages",
        nargs="+",
        choices=["prepare", "info", "partition", "train", "embed"],
        help="run only these stages (default: all; prepare runs anyway when the data is absent)",
    )
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS per process")
    p.add_argument("--poll", type=float, default=0.2, help="RSS sampling period, seconds")
    p.add_argument("--out", default=None, help="JSON output")
    args = p.parse_args()
    Path(args.root).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    results = []
    for scale in args.scales:
        results.append(rung(args, scale, env))
        print(table(results), flush=True)
    doc = {
        "benchmark": "scale_ladder",
        "machine": machine_info("cpu"),
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "results": results,
        "table": table(results),
    }
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(doc["table"])


if __name__ == "__main__":
    main()
