"""The prepared GPU check: one command that proves fleetgnn on a machine with one GPU.

Run it through ``check.sh`` (which installs pymetis from a carried wheel first); see README.md::

    bash benchmarks/gpu/check.sh OUT_DIR [--device cuda|cpu] [--tier parity|speed|all]

Tiers, each sized to one call of the device tool (<= 420 s on an H100 with its data):
``parity`` (the default: env, pytest in shards beside data and engines at W = 1, 2), ``speed``
(env, data, bench, plan at products-like 1.0: ``steps.bench.figures.products``) and ``all``
(every step and the older bench parts; what ``--steps``/``--bench-parts``/``--quick`` select from
when no tier is given).

Steps, each isolated (a subprocess with its own timeout; a failure is recorded with its output
tail and the next step runs):

- ``env``: GPU, torch / CUDA versions, host (in this process; no CUDA kernels).
- ``pytest``: ``pytest -m gpu`` (the GPU tests; on a CPU dry run they skip) and its counts.
- ``data``: ``fleetgnn prepare synthetic`` for the engine runs and the benchmarks (cached).
- ``engines``: every engine for 2 epochs in float64 on the device at W = 1 and W = 2 (the ranks
  share the one GPU), each run's per-epoch losses against the CPU run that must equal them (the
  reference engine in the same mode; for ``minibatch`` at W > 1, whose batches depend on W, the
  same engine on the CPU).
- ``bench``: full-graph GCN / SAGE epochs against PyG (edge_index, CSR adj_t), gspmm and feature
  gather GB/s as fractions of a device-to-device copy, host-to-device GB/s (pinned, pageable),
  sampled edges/s of the torch sampler on the device (under each Fisher-Yates kernel of
  :mod:`fleetgnn.kernels`) against the CPU path (numpy), R-GAT steps
  in both orders of a relation's work, all with :mod:`fleetgnn.bench` in one child process on
  the device.
- ``plan``: ``fleetgnn plan --hardware h100`` (one device: W = 1), its predicted epoch of every
  engine against the epoch measured in ``engines``.

Writes ``OUT_DIR/gpu-check.json`` (rewritten after every step and run, so a killed check still
leaves what it measured), ``OUT_DIR/gpu-check.log`` (everything every subprocess printed) and
``OUT_DIR/gpu-check-pytest.xml`` (pytest's JUnit report). A global deadline (``--budget-s``)
cuts what is left: steps that cannot start in time are recorded as ``skipped``; each step keeps
a share of the budget that the steps before it cannot take. Exit status 0 when every step passed.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FORMAT = 1
JSON_NAME, LOG_NAME, JUNIT_NAME = "gpu-check.json", "gpu-check.log", "gpu-check-pytest.xml"
STEPS = ("env", "pytest", "data", "engines", "bench", "plan")
#: Share of the budget each step keeps for itself (the steps before it cannot use it).
#: Each step's share of the budget (stop 34's H100 run, 460 s: pytest needed ~170 s and got 128,
#: the W = 1 engine runs ~160 s, the bench 81 s before it gained the profiles and overheads).
SHARES = {"env": 0.0, "pytest": 0.36, "data": 0.02, "engines": 0.34, "bench": 0.23, "plan": 0.05}
#: Calls queued behind each other (one sync after them) for the gathers' throughput figures.
PIPELINE_CALLS = 10
#: Steps the bench step's minibatch-by-device-budget part times per budget (the epoch's last).
MINIBATCH_STEPS = 20
#: The pytest step's test paths, cheapest first: the op, layer, sampler and store tests take
#: milliseconds each, the engine and memory tests spawn processes (10-15 s each on a GPU).
PYTEST_PATHS = (
    "tests/ops",
    "tests/nn",
    "tests/sampling",
    "tests/store",
    "tests/test_keyhash.py",
    "tests/test_kernels.py",  # the Triton kernels against torch's (9 gpu tests)
    "tests/distributed",
    "tests/engines",
    "tests/cost",
)
#: Losses equal when ``|a - b| <= LOSS_RTOL * max(1, |b|)`` (float64 runs).
LOSS_RTOL = 1e-6
EPOCHS = 2
ENGINES = ("minibatch", "split", "fullgraph", "offload")
#: The bench step's parts, in the order they run (``--bench-parts`` picks some).
BENCH_PARTS = (
    "copy",
    "h2d",
    "gather_tiers",
    "gspmm",
    "gather",
    "sampler",
    "epochs",
    "offload_overlap",
    "minibatch_budgets",
    "rgat_orders",
    "minibatch_profile",
    "sampler_profile",
    "overheads",
)
#: The speed tier's bench parts (products-like 1.0 on CUDA): ``copy`` (the unit of fractions),
#: the minibatch epoch under each Fisher-Yates kernel, its PyG peers on the same blocks, the
#: full-graph epochs against PyG, and offload's arms; each writes under ``figures.products``.
SPEED_PARTS = ("copy", "products", "products_peers", "products_full", "products_offload")
#: Every part ``--bench-parts`` accepts.
ALL_PARTS = BENCH_PARTS + SPEED_PARTS[1:]
#: The check's tiers, each sized to one call of the device tool (<= 420 s on an H100 with its
#: data generation): ``parity`` (the gpu-marked tests beside every engine's device run against
#: its CPU run at W = 1 and 2), ``speed`` (products-like 1.0: the figures), ``all`` (every step
#: and the older bench parts: ~950 s on an H100, for targeted reruns with --steps/--bench-parts).
TIERS = ("parity", "speed", "all")
TIER_STEPS = {"parity": ("pytest", "data", "engines"), "speed": ("data", "bench", "plan")}
TIER_STEPS["all"] = STEPS[1:]
TIER_PARTS = {"parity": (), "speed": SPEED_PARTS, "all": BENCH_PARTS}
#: Each tier's shares of the budget (see SHARES). In ``parity`` the pytest step runs beside the
#: data and engines steps (its own processes, the same deadline), so it takes no share.
TIER_SHARES = {
    "all": SHARES,
    "parity": {"env": 0.0, "pytest": 0.0, "data": 0.15, "engines": 0.85, "bench": 0.0, "plan": 0.0},
    "speed": {"env": 0.0, "pytest": 0.0, "data": 0.2, "engines": 0.0, "bench": 0.7, "plan": 0.1},
}
#: The parity tier's pytest shards run at once on CUDA (processes of their own; the engine and
#: memory tests spawn ranks and take 10-15 s each, the op tests milliseconds).
PYTEST_JOBS = 3
MODES = {"minibatch": "minibatch", "split": "minibatch", "fullgraph": "full", "offload": "full"}
TAIL = 4000
#: What a subprocess printed is kept in the log up to this many characters (head and tail).
LOG_CAP = 400_000


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _tail(text: str, n: int = TAIL) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def _atomic_json(path: Path, obj: Any) -> None:
    from fleetgnn.bench.report import _finite as finite_json  # NaN/inf -> null

    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(finite_json(obj), indent=1) + "\n")
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------ sizes


def sizes(device: str, quick: bool, tier: str = "all") -> dict[str, Any]:
    """Datasets and benchmark sizes: the real ones on CUDA, much smaller ones on a CPU dry run.

    ``products``: the products parts' sizes; ``tier`` ``speed`` runs the bench on products-like
    1.0 (0.01 on a dry run); ``parity`` a smaller engine dataset on a dry run (``tiny``).
    """
    size = _base_sizes(device, quick)
    cuda = device != "cpu"
    if tier == "parity" and not cuda:
        size["engine_data"] = ("tiny", 1.0)
    # the products parts' sizes (any tier: `--tier all --bench-parts products` runs them on the
    # bench dataset, whose scale the figure records)
    size["products"] = {
        # the products epoch: SAGE 3 x 256, fanouts 15,10,5, batch 1024, float32
        # (a dry run: hidden 64, batch 512, for 4 steps on its small graph)
        "hidden": 256 if cuda else 64,
        "fanouts": [15, 10, 5],
        "batch": 1024 if cuda else 512,
        "profile_steps": 10 if cuda else 2,
        "layer_steps": 20 if cuda else 2,
        "repeat": 3 if cuda else 1,
        # full-graph GCN / SAGE and offload's GCN: 2 layers, hidden 128 (the earlier checks'
        # full-graph model, at products-like 0.2)
        "full_hidden": 128 if cuda else 32,
        "full_layers": 2,
        # offload in fixed chunks (no offload.device_budget: its chunk choice for half the
        # graph's bytes took 113 s at products-like 0.2 here), its peak measured
        "offload_chunks": 16 if cuda else 4,
    }
    if tier == "speed":
        size["bench_data"] = ("products-like", 1.0 if cuda else 0.01)
        if not cuda:
            size["copy_mb"] = 16
    return size


def _base_sizes(device: str, quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "engine_data": ("tiny", 1.0),
            "bench_data": ("small", 1.0),
            "hidden": 64,
            "repeat": 1 if device == "cpu" else 3,
            "copy_mb": 32,
            "gspmm": {"nodes": 20_000, "edges": 200_000, "dim": 32},
            "tier_rows": 20_000,
            "offload_chunks": 4,
            "typed_scale": 0.005,
            "rgat_steps": 2,
        }
    if device == "cpu":
        return {
            "engine_data": ("products-like", 0.005),
            "bench_data": ("products-like", 0.01),
            "hidden": 64,
            "repeat": 1,
            "copy_mb": 64,
            "gspmm": {"nodes": 50_000, "edges": 500_000, "dim": 32},
            "tier_rows": 100_000,
            "offload_chunks": 4,
            "typed_scale": 0.02,
            "rgat_steps": 3,
        }
    return {
        "engine_data": ("products-like", 0.05),
        "bench_data": ("products-like", 0.2),
        "hidden": 128,
        "repeat": 5,
        "copy_mb": 1024,
        "gspmm": {"nodes": 1_000_000, "edges": 16_000_000, "dim": 64},
        "tier_rows": 1_000_000,
        "offload_chunks": 8,
        "typed_scale": 0.1,  # the CPU benchmark's graph: 412k edges, 6 steps an epoch
        "rgat_steps": 6,
    }


# ------------------------------------------------------------------------------------ driver


class Check:
    """The run: its options, the JSON it keeps up to date, the log and the clock."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.t0 = time.monotonic()
        self.deadline = self.t0 + args.budget_s
        self.py = sys.executable
        self.tier = args.tier
        self.shares = TIER_SHARES[args.tier]
        self.size = sizes(args.device, args.quick, args.tier)
        self.lock = threading.RLock()  # the parity tier's pytest step runs in a thread
        if args.engine_scale is not None:
            self.size["engine_data"] = (self.size["engine_data"][0], args.engine_scale)
        if args.bench_scale is not None:
            self.size["bench_data"] = (self.size["bench_data"][0], args.bench_scale)
        self.cache = Path(args.cache_dir or tempfile.gettempdir() + "/fleetgnn-gpu-check")
        self.log_f = open(self.out / LOG_NAME, "w", buffering=1)  # noqa: SIM115 - closed in main
        self.result: dict[str, Any] = {
            "format": FORMAT,
            "command": [sys.argv[0], *sys.argv[1:]],
            "device": args.device,
            "quick": args.quick,
            "tier": args.tier,
            "budget_s": args.budget_s,
            "worlds": args.worlds,
            "started": _now(),
            "finished": None,
            "duration_s": None,
            "sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in self.size.items()},
            "host": {},
            "steps": {s: {"status": "pending"} for s in STEPS},
            "summary": {},
        }
        self.save()

    # -- bookkeeping

    def log(self, msg: str) -> None:
        """A timestamped line to the log and to stdout."""
        line = f"[{time.monotonic() - self.t0:7.1f}s] {msg}"
        with self.lock:
            print(line, flush=True)
            self.log_f.write(line + "\n")

    def save(self) -> None:
        """Rewrite the JSON (atomically) with everything recorded so far."""
        with self.lock:
            self.result["summary"] = {
                s: {"status": r.get("status"), "seconds": r.get("seconds")}
                for s, r in self.result["steps"].items()
            }
            self.result["duration_s"] = round(time.monotonic() - self.t0, 2)
            # a step in another thread (the parity tier's pytest step, engine runs at once) may
            # add a key to a record meanwhile ("dictionary changed size during iteration"):
            # retry; the JSON is rewritten after every step and run anyway
            for _ in range(50):
                try:
                    _atomic_json(self.out / JSON_NAME, self.result)
                    return
                except RuntimeError:
                    time.sleep(0.02)
            print("gpu check: the JSON changed during every write; written later", flush=True)

    def left(self) -> float:
        """Seconds until the global deadline."""
        return self.deadline - time.monotonic()

    def step_deadline(self, name: str) -> float:
        """The global deadline less the shares of the steps after ``name``.

        The parity tier's pytest step runs beside the others: the global deadline is its own.
        """
        if self.parallel_pytest and name == "pytest":
            return self.deadline
        later = [s for s in STEPS[STEPS.index(name) + 1 :] if s in self.args.steps]
        return self.deadline - self.args.budget_s * sum(self.shares[s] for s in later)

    @property
    def parallel_pytest(self) -> bool:
        """Whether the pytest step runs beside the data and engines steps (the parity tier)."""
        return self.tier == "parity" and {"pytest", "engines"} <= set(self.args.steps)

    def run(
        self, argv: list[str], timeout: float, label: str, env: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Run ``argv`` in its own process group; kill the whole group at ``timeout``."""
        timeout = max(1.0, timeout)
        self.log(f"$ {' '.join(argv)}  (timeout {timeout:.0f} s)")
        t0 = time.monotonic()
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        timed_out = False
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            output = _kill_group(proc)
        seconds = time.monotonic() - t0
        logged = output
        if len(logged) > LOG_CAP:
            cut = len(logged) - LOG_CAP
            logged = (
                f"{logged[: LOG_CAP // 4]}\n[... {cut} characters cut ...]\n"
                + logged[-(LOG_CAP - LOG_CAP // 4) :]
            )
        with self.lock:
            self.log_f.write(f"----- {label}: output -----\n{logged}")
            self.log_f.write(
                f"----- {label}: rc {proc.returncode}, {seconds:.1f} s"
                f"{', TIMED OUT' if timed_out else ''} -----\n"
            )
        return {
            "command": argv,
            "returncode": proc.returncode,
            "timed_out": timed_out,
            "seconds": round(seconds, 2),
            "output": output,
        }

    def step(
        self, name: str, fn: Callable[[dict[str, Any]], None], skip: str | None = None
    ) -> None:
        """Run one step: ``fn(record)`` fills the record; an exception fails only this step."""
        rec: dict[str, Any] = {"status": "running", "error": None}
        self.result["steps"][name] = rec
        if skip is None and self.left() < 5:
            skip = f"the global deadline (--budget-s {self.args.budget_s:g}) has passed"
        if skip is not None:
            rec.update(status="skipped", error=skip, seconds=0.0)
            self.log(f"== {name}: skipped ({skip})")
            self.save()
            return
        self.log(f"== {name} ...")
        t0 = time.monotonic()
        try:
            fn(rec)
            if rec["status"] == "running":
                rec["status"] = "passed"
        except Exception as e:  # noqa: BLE001 - a failing step is recorded, the next one runs
            rec["status"] = "failed"
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["traceback"] = _tail(traceback.format_exc())
        rec["seconds"] = round(time.monotonic() - t0, 2)
        self.log(
            f"== {name}: {rec['status']} in {rec['seconds']:.1f} s"
            + (f" ({rec['error'][:300]})" if rec.get("error") else "")
        )
        self.save()

    # -- steps

    def env(self, rec: dict[str, Any]) -> None:
        """The machine and its software (GPU name, torch and CUDA versions, memory, pymetis)."""
        import torch

        from fleetgnn.bench.machine import machine_info

        host = machine_info(self.args.device)
        host["hostname"] = platform.node()
        host["cuda"] = torch.version.cuda
        host["cuda_available"] = torch.cuda.is_available()
        host["cuda_device_count"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if torch.cuda.is_available():
            try:  # details only: none of them may fail the check
                p = torch.cuda.get_device_properties(0)
                host["gpu_memory_bytes"] = p.total_memory
                host["gpu_capability"] = f"{p.major}.{p.minor}"
                host["gpu_multiprocessors"] = p.multi_processor_count
                host["cudnn"] = torch.backends.cudnn.version()
                nccl = torch.cuda.nccl.version()
                host["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
            except Exception as e:  # noqa: BLE001
                host["cuda_details_error"] = f"{type(e).__name__}: {e}"
        host["nvidia_smi"] = _nvidia_smi()
        host["pymetis"] = _version("pymetis")
        host["pymetis_install"] = os.environ.get("FLEETGNN_CHECK_PYMETIS")
        host["hypothesis"] = _version("hypothesis")
        for where in ("/dev/shm", tempfile.gettempdir(), str(self.out)):
            try:
                du = shutil.disk_usage(where)
                host[f"disk_free_bytes:{where}"] = du.free
            except OSError:
                pass
        host["env"] = {
            k: os.environ.get(k)
            for k in ("PYTHONPATH", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "NCCL_DEBUG")
        }
        # the working tree travels to a device machine without its history: git_commit names
        # what that copy's .git says (stop 35's checks named the session's first commit), the
        # digest the sources that ran (`check.py --source-digest` prints a checkout's)
        host["git_commit"] = _git_commit()
        host["source_digest"] = source_digest()
        host["fleetgnn_from"] = str(Path(__import__("fleetgnn").__file__).parent)
        self.result["host"] = host
        rec["gpu"] = host.get("gpu")
        rec["torch"] = host["torch"]
        rec["cuda"] = host["cuda"]
        if self.args.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("--device cuda, but torch.cuda.is_available() is False")
        if host["pymetis"] is None:
            rec["warning"] = "pymetis does not import: split and offload (METIS) runs will fail"

    def pytest(self, rec: dict[str, Any]) -> None:
        """``pytest -m gpu``; its counts from the JUnit report(s).

        The parity tier on CUDA runs the test modules in :data:`PYTEST_JOBS` shards at once
        (each its own process and JUnit report; the counts are summed): the engine and memory
        tests spawn ranks, and one after another they need more than a call (stop 34: the
        gpu-marked tests never finished in 128 s).
        """
        ignored = [] if _version("hypothesis") else _hypothesis_modules(REPO / "tests")
        rec["ignored_modules"] = ignored
        if ignored:
            rec["ignored_why"] = "hypothesis does not import here (property tests, none marked gpu)"
        paths = shlex.split(self.args.pytest_args)
        jobs = self.args.pytest_jobs
        if jobs is None:
            jobs = PYTEST_JOBS if self.tier == "parity" and self.args.device == "cuda" else 1
        shards = [paths] if paths or jobs <= 1 else _pytest_shards(PYTEST_PATHS, jobs, ignored)
        rec["shards"] = len(shards)
        timeout = min(self.args.pytest_timeout, self.step_deadline("pytest") - _now_m())

        def one(k: int) -> dict[str, Any]:
            junit = self.out / (JUNIT_NAME if len(shards) == 1 else f"gpu-check-pytest-{k}.xml")
            argv = [
                self.py,
                "-m",
                "pytest",
                "-m",
                "gpu",
                "-v",
                "-rfEs",
                "-p",
                "no:cacheprovider",
                f"--maxfail={self.args.pytest_maxfail}",
                f"--junitxml={junit}",
                *(shards[k] or PYTEST_PATHS),
            ]
            argv += [f"--ignore={p}" for p in ignored]
            label = "pytest" if len(shards) == 1 else f"pytest shard {k}"
            res = self.run(argv, timeout, label)
            return {
                "res": res,
                "counts": _pytest_counts(res["output"], junit),
                "failures": _junit_failures(junit),
            }

        with ThreadPoolExecutor(len(shards)) as pool:
            got = list(pool.map(one, range(len(shards))))
        if len(shards) == 1:
            rec.update(_brief(got[0]["res"]))
            rec["counts"] = got[0]["counts"]
        else:
            rec["shard_runs"] = [
                {**_brief(g["res"]), "counts": g["counts"], "paths": shards[k]}
                for k, g in enumerate(got)
            ]
            rec["counts"] = _sum_counts([g["counts"] for g in got])
            rec["returncode"] = max(g["res"]["returncode"] or 0 for g in got)
        rec["failures"] = [f for g in got for f in g["failures"]]
        for g in got:
            res = g["res"]
            if res["timed_out"]:
                raise RuntimeError(f"pytest timed out after {res['seconds']:.0f} s")
            if res["returncode"] not in (0, 5):  # 5: no test selected
                raise RuntimeError(f"pytest exited {res['returncode']}: {rec['counts']}")

    def data(self, rec: dict[str, Any]) -> None:
        """Prepare (or reuse) the synthetic datasets with ``fleetgnn prepare synthetic``."""
        from fleetgnn.bench.data import dataset_dir

        rec["datasets"] = {}
        roles = {"parity": ("engine_data",), "speed": ("bench_data",)}.get(
            self.tier, ("engine_data", "bench_data")
        )
        for role in roles:
            preset, scale = self.size[role]
            path = dataset_dir(self.cache, preset, scale)
            entry: dict[str, Any] = {"preset": preset, "scale": scale, "path": str(path)}
            rec["datasets"][role] = entry
            if (path / "meta.json").is_file():
                entry["cached"] = True
            else:
                argv = [
                    self.py,
                    "-m",
                    "fleetgnn",
                    "prepare",
                    "synthetic",
                    "--preset",
                    preset,
                    "--scale",
                    f"{scale:g}",
                    "--out",
                    str(path),
                    "--overwrite",
                ]
                res = self.run(argv, self.step_deadline("data") - _now_m(), f"prepare {role}")
                entry.update(_brief(res))
                if res["returncode"] != 0:
                    raise RuntimeError(f"fleetgnn prepare ({preset} {scale:g}) failed")
            meta = json.loads((path / "meta.json").read_text())
            entry["nodes"], entry["edges"] = meta.get("num_nodes"), meta.get("num_edges")

    def _data_path(self, role: str) -> Path:
        d = self.result["steps"]["data"]
        if d.get("status") != "passed":
            raise RuntimeError("no dataset: the data step did not pass")
        return Path(d["datasets"][role]["path"])

    def train_sets(self) -> list[str]:
        """The config every engine run shares (float64: losses comparable to 1e-6)."""
        return ["train.dtype=float64", f"train.eval_every={EPOCHS}", "train.seed=0"]

    def engines(self, rec: dict[str, Any]) -> None:
        """Every engine on the device at each world size, losses against their CPU baseline."""
        data = self._data_path("engine_data")
        dev = self.args.device
        runs: list[dict[str, Any]] = []
        rec["runs"] = runs
        rec["tolerance"] = f"|loss - baseline| <= {LOSS_RTOL:g} * max(1, |baseline|) per epoch"
        jobs = self.args.jobs if dev == "cpu" or self.tier == "parity" else 1
        rec["timings_are"] = (
            f"parity runs: {EPOCHS} float64 epochs of {self.size['engine_data'][0]} "
            f"{self.size['engine_data'][1]:g} (the first one warming up), {jobs} run(s) at once"
            + (" beside the pytest step" if self.parallel_pytest else "")
            + ": the losses are the figures, the epoch times are not speed figures (the speed "
            "tier's are)"
        )
        engines = self.args.engines
        multi = engines if self.args.multi_engines is None else self.args.multi_engines
        wanted = set(engines) | (set(multi) if max(self.args.worlds) > 1 else set())
        modes = [m for m in ("minibatch", "full") if m in {MODES[e] for e in wanted}]
        plan: list[tuple[str, str, str, int, str | None]] = [  # name, engine, mode, W, device
            (f"cpu:reference-{m}", "reference", m, 1, "cpu") for m in modes
        ]
        if dev != "cpu":
            plan += [(f"{dev}:reference-{m}", "reference", m, 1, dev) for m in modes]
        for w in self.args.worlds:
            # at W > 1 minibatch needs a CPU run of its own as baseline (its batches depend on
            # W; the others compare with the reference already run), so it runs last: stop 35's
            # checks spent the step's remaining time on that baseline and reached no W = 2 run
            order = sorted(engines if w == 1 else multi, key=lambda e: w > 1 and e == "minibatch")
            for e in order:
                if e == "minibatch" and w > 1 and dev != "cpu":
                    plan.append((f"cpu:minibatch-w{w}", e, MODES[e], w, "cpu"))
                plan.append((f"{dev}:{e}-w{w}", e, MODES[e], w, dev))
        deadline = self.step_deadline("engines")
        self.cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="runs-", dir=self.cache))
        for name, engine, mode, w, device in plan:
            runs.append(
                {
                    "name": name,
                    "engine": engine,
                    "mode": mode,
                    "world_size": w,
                    "device": device,
                    "baseline": _baseline(engine, mode, w, device),
                }
            )

        by_name = {r["name"]: r for r in runs}
        done = {r["name"]: threading.Event() for r in runs}

        def one(run: dict[str, Any]) -> None:
            try:
                # at once with others: a device run waits for its CPU baseline (which runs
                # first in the plan) only to report; it runs meanwhile
                left = deadline - _now_m()
                if left < 5:
                    run.update(status="skipped", error="out of the engines step's time budget")
                    return
                self._engine_run(run, data, tmp, min(self.args.run_timeout, left), threads)
            finally:
                done[run["name"]].set()

        def report(run: dict[str, Any]) -> None:
            self._compare(run, {r["name"]: r for r in runs})
            diff = run.get("max_abs_loss_diff")
            self.log(
                f"   {run['name']}: {run['status']}"
                + (f", max |dloss| {diff:.3g}" if diff is not None else "")
                + (f" ({run['error'][:200]})" if run.get("error") else "")
            )
            self.save()

        # runs at once share the machine's cores (the parity tier's pytest shards too)
        cores = os.cpu_count() or 1
        others = PYTEST_JOBS if self.parallel_pytest and dev != "cpu" else 0
        threads = max(1, cores // (jobs + others)) if jobs > 1 else None

        def one_and_report(run: dict[str, Any]) -> None:
            one(run)
            base = by_name.get(run["baseline"] or "")
            if base is not None and base is not run:
                done[base["name"]].wait()
            with self.lock:
                report(run)

        try:
            if jobs > 1:  # parity runs: their times are not figures (rec["timings_are"])
                with ThreadPoolExecutor(jobs) as pool:
                    list(pool.map(one_and_report, runs))
            else:  # one at a time
                for run in runs:
                    one(run)
                    report(run)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        statuses = {r["status"] for r in runs}
        rec["passed"] = sum(r["status"] == "passed" for r in runs)
        rec["failed"] = [r["name"] for r in runs if r["status"] == "failed"]
        rec["skipped"] = [r["name"] for r in runs if r["status"] == "skipped"]
        if "failed" in statuses:
            rec["status"] = "failed"
            rec["error"] = f"{len(rec['failed'])} run(s) failed: {', '.join(rec['failed'])}"
        elif "skipped" in statuses:
            rec["status"] = "partial"
            rec["error"] = f"{len(rec['skipped'])} run(s) skipped for time"

    def _engine_run(
        self,
        run: dict[str, Any],
        data: Path,
        tmp: Path,
        timeout: float,
        threads: int | None = None,
    ) -> None:
        run_dir = tmp / run["name"].replace(":", "-")
        sets = [*self.train_sets(), f"train.device={run['device']}"]
        if run["device"] != "cpu":
            sets += self.args.engine_set
        argv = [
            self.py,
            "-m",
            "fleetgnn",
            "train",
            "--dataset",
            str(data),
            "--engine",
            run["engine"],
            "--mode",
            run["mode"],
            "--nproc",
            str(run["world_size"]),
            "--epochs",
            str(EPOCHS),
            "--run-dir",
            str(run_dir),
            "--overwrite",
            "--no-progress",
        ]
        for s in sets:
            argv += ["--set", s]
        env = {"OMP_NUM_THREADS": str(threads)} if threads else None
        res = self.run(argv, timeout, run["name"], env=env)
        run.update(_brief(res))
        epochs = _epochs(run_dir / "metrics.jsonl")
        run["losses"] = [r.get("loss") for r in epochs]
        run["epoch_time_s"] = [r.get("epoch_time_s") for r in epochs]
        run["memory"] = [r.get("memory") for r in epochs]
        run["recorded"] = _recorded_config(run_dir / "config.yaml")
        if res["timed_out"]:
            run.update(status="failed", error=f"timed out after {res['seconds']:.0f} s")
        elif res["returncode"] != 0:
            run.update(status="failed", error=_last_line(res["output"]) or "nonzero exit")
        elif len(run["losses"]) != EPOCHS or not all(_finite_num(v) for v in run["losses"]):
            run.update(status="failed", error=f"losses {run['losses']} (want {EPOCHS} finite)")
        else:
            run["status"] = "passed"

    def _compare(self, run: dict[str, Any], by_name: dict[str, dict[str, Any]]) -> None:
        if run["status"] != "passed":
            return
        base_name = run["baseline"]
        if base_name is None or base_name == run["name"]:
            run["max_abs_loss_diff"] = None
            run["note"] = "its own baseline (a CPU run: no device to compare against)"
            return
        base = by_name.get(base_name)
        if base is None or base.get("status") != "passed":
            run.update(status="failed", error=f"baseline {base_name} did not pass")
            return
        diffs = [abs(a - b) for a, b in zip(run["losses"], base["losses"], strict=True)]
        scaled = [d / max(1.0, abs(b)) for d, b in zip(diffs, base["losses"], strict=True)]
        run["max_abs_loss_diff"] = max(diffs)
        run["max_rel_loss_diff"] = max(scaled)
        if max(scaled) > LOSS_RTOL:
            run.update(
                status="failed",
                error=f"losses {run['losses']} != {base_name}'s "
                f"{base['losses']} (max |diff| {max(diffs):.3g})",
            )

    def bench(self, rec: dict[str, Any]) -> None:
        """The device benchmarks, in one child process (:func:`bench_child`)."""
        data = self._data_path("bench_data")
        child = self.out / "gpu-check-bench.json"
        argv = [
            self.py,
            str(Path(__file__).resolve()),
            "--bench-child",
            str(child),
            "--dataset",
            str(data),
            "--device",
            self.args.device,
        ]
        if self.args.quick:
            argv.append("--quick")
        argv += ["--tier", self.tier]
        if self.args.bench_parts:
            argv += ["--bench-parts", ",".join(self.args.bench_parts)]
        timeout = min(self.args.bench_timeout, self.step_deadline("bench") - _now_m())
        argv += ["--bench-budget-s", f"{max(1.0, timeout - 10):.0f}"]  # its parts' deadline
        res = self.run(argv, timeout, "bench")
        rec.update(_brief(res))
        if child.is_file():
            got = json.loads(child.read_text())
            child.unlink()
            rec.update(parts=got["parts"], figures=got["figures"], rows=got["rows"])
            failed = [k for k, v in got["parts"].items() if v["status"] == "failed"]
            if failed:
                rec["status"] = "failed"
                rec["error"] = "; ".join(f"{k}: {got['parts'][k]['error']}" for k in failed)
        if res["timed_out"]:
            raise RuntimeError(f"timed out after {res['seconds']:.0f} s (partial figures kept)")
        if res["returncode"] != 0 and rec["status"] != "failed":
            raise RuntimeError(_last_line(res["output"]) or f"exit {res['returncode']}")

    def plan(self, rec: dict[str, Any]) -> None:
        """``fleetgnn plan --hardware h100`` against the epochs measured in ``engines``.

        The speed tier: against the products figures of its bench step (:meth:`_plan_speed`).
        """
        if self.tier == "speed":
            self._plan_speed(rec)
            return
        data = self._data_path("engine_data")
        runs = self.result["steps"]["engines"].get("runs", [])
        rec["hardware"] = self.args.hardware
        rec["note"] = (
            "planned for W = 1 only: the profile has one device per host, and W = 2 on this "
            "machine puts both ranks on its one GPU"
            if self.args.device == "cuda"
            else "a CPU dry run: the measured epochs are CPU epochs, not the profile's"
        )
        rec["compared"] = []
        rec["plans"] = {}
        w = 1  # W = 2 is not planned (rec["note"])
        argv = [
            self.py,
            "-m",
            "fleetgnn",
            "plan",
            "--dataset",
            str(data),
            "--hardware",
            self.args.hardware,
            "--nproc",
            str(w),
            "--json",
        ]
        for s in self.train_sets():
            argv += ["--set", s]
        res = self.run(argv, self.step_deadline("plan") - _now_m(), f"plan W={w}")
        if res["returncode"] != 0:
            rec.update(_brief(res))
            raise RuntimeError(f"fleetgnn plan --nproc {w}: {_last_line(res['output'])}")
        plan = json.loads(res["output"][res["output"].index("{") :])
        rec["plans"][str(w)] = {
            "choice": plan.get("choice"),
            "reason": plan.get("reason"),
            "rates_from": plan.get("rates_from"),
            "engines": {
                e: {k: v.get(k) for k in ("fits", "mode", "epoch_s", "breakdown", "reasons")}
                for e, v in plan.get("engines", {}).items()
            },
        }
        for e, pred in plan.get("engines", {}).items():
            for r in runs:
                if (r["engine"], r["world_size"], r["mode"], r["device"]) != (
                    e,
                    w,
                    pred.get("mode"),
                    self.args.device,
                ):
                    continue
                measured = (r.get("epoch_time_s") or [None])[-1]
                ratio = None
                if _finite_num(measured) and _finite_num(pred.get("epoch_s")) and measured:
                    ratio = pred["epoch_s"] / measured
                rec["compared"].append(
                    {
                        "run": r["name"],
                        "engine": e,
                        "world_size": w,
                        "mode": r["mode"],
                        "fits": pred.get("fits"),
                        "predicted_epoch_s": pred.get("epoch_s"),
                        "measured_epoch_s": measured,
                        "predicted_over_measured": ratio,
                    }
                )
                self.log(
                    f"   plan {e} W={w}: predicted {pred.get('epoch_s')} s, measured {measured} s"
                )

    def _plan_speed(self, rec: dict[str, Any]) -> None:
        """The plan of the products dataset (one device) against the speed tier's epochs.

        Two plans: the minibatch epoch's config (SAGE) against ``products.epoch_s``, and the
        full-graph GCN's against the reference and ``fullgraph`` epochs and offload's overlapped
        epoch (its device budget set as the bench set it on CUDA).
        """
        data = self._data_path("bench_data")
        prod = self.result["steps"]["bench"].get("figures", {}).get("products", {})
        ps = self.size["products"]
        rec["hardware"] = self.args.hardware
        rec["note"] = (
            "W = 1 on the profile's one device"
            if self.args.device == "cuda"
            else "a CPU dry run: the measured epochs are CPU epochs, not the profile's"
        )
        rec["compared"] = []
        rec["plans"] = {}
        full = prod.get("full_graph", {}).get("gcn", {})
        off = prod.get("offload", {})
        configs = {
            "sage-minibatch": (
                [
                    "model.name=sage",
                    f"model.hidden={ps['hidden']}",
                    f"model.num_layers={len(ps['fanouts'])}",
                    f"train.fanouts=[{','.join(map(str, ps['fanouts']))}]",
                    f"train.batch_size={ps['batch']}",
                    "store.sampling=device",
                ],
                {"minibatch": prod.get("epoch_s")},
            ),
            "gcn-full": (
                [
                    "model.name=gcn",
                    f"model.hidden={ps['full_hidden']}",
                    f"model.num_layers={ps['full_layers']}",
                    "train.mode=full",
                ]
                + [f"offload.chunks={ps['offload_chunks']}"],
                {
                    "reference": _epoch_of(full.get("fleetgnn reference")),
                    "fullgraph": _epoch_of(full.get("fleetgnn fullgraph")),
                    "offload": _epoch_of(off.get("overlap")),
                },
            ),
        }

        # the plan of the dataset's counts (--shape: uniform random neighbours): the exact plan
        # (--dataset) of products-like 1.0 took ~3 min on one core here, its counts sampled
        import numpy as np

        from fleetgnn.graph import open_dataset

        g = open_dataset(data)
        meta = json.loads((data / "meta.json").read_text())
        shape = (
            f"nodes={g.num_nodes},edges={g.num_edges},features={meta['num_features']},"
            f"classes={meta['num_classes']},train={int(np.count_nonzero(np.asarray(g.train_mask)))}"
        )
        rec["counts"] = f"--shape {shape} (uniform random neighbours assumed)"

        def planned(label: str) -> dict[str, Any]:
            argv = [self.py, "-m", "fleetgnn", "plan", "--shape", shape]
            argv += ["--hardware", self.args.hardware, "--nproc", "1", "--json"]
            for kv in ["train.dtype=float32", "train.seed=0", *configs[label][0]]:
                argv += ["--set", kv]
            return self.run(argv, self.step_deadline("plan") - _now_m(), f"plan {label}")

        with ThreadPoolExecutor(len(configs)) as pool:  # both at once: two start-ups
            results = dict(zip(configs, pool.map(planned, configs), strict=True))
        for label, (sets, measured) in configs.items():
            res = results[label]
            if res["returncode"] != 0:
                rec.update(_brief(res))
                raise RuntimeError(f"fleetgnn plan ({label}): {_last_line(res['output'])}")
            plan = json.loads(res["output"][res["output"].index("{") :])
            engines = plan.get("engines", {})
            rec["plans"][label] = {
                "sets": sets,
                "choice": plan.get("choice"),
                "rates_from": plan.get("rates_from"),
                "engines": {
                    e: {k: v.get(k) for k in ("fits", "mode", "epoch_s", "breakdown", "reasons")}
                    for e, v in engines.items()
                },
            }
            for e, got in measured.items():
                pred = engines.get(e, {})
                ratio = None
                if _finite_num(got) and _finite_num(pred.get("epoch_s")) and got:
                    ratio = pred["epoch_s"] / got
                rec["compared"].append(
                    {
                        "config": label,
                        "engine": e,
                        "fits": pred.get("fits"),
                        "predicted_epoch_s": pred.get("epoch_s"),
                        "measured_epoch_s": got,
                        "predicted_over_measured": ratio,
                    }
                )
                self.log(
                    f"   plan {label} {e}: predicted {pred.get('epoch_s')} s, measured {got} s"
                )
        if prod:
            prod["plan"] = rec["compared"]


def _epoch_of(v: Any) -> float | None:
    """An arm's epoch seconds (None for an arm that did not run or ran out of memory)."""
    return v.get("epoch_s") if isinstance(v, dict) else None


def _now_m() -> float:
    return time.monotonic()


def _baseline(engine: str, mode: str, w: int, device: str) -> str | None:
    """The CPU run whose losses this run must equal."""
    if engine == "reference":
        return f"cpu:reference-{mode}" if device != "cpu" else None
    if engine == "minibatch" and w > 1:  # W seed batches per step: the same engine on the CPU
        return f"cpu:minibatch-w{w}"
    return f"cpu:reference-{mode}"


def _kill_group(proc: subprocess.Popen[str]) -> str:
    """Stop ``proc``'s process group and return what it printed.

    SIGINT first (pytest then still writes its summary and JUnit report; ``fleetgnn train``
    stops cleanly), then TERM, then KILL.
    """
    for sig, wait in ((signal.SIGINT, 8), (signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            out, _ = proc.communicate(timeout=wait)
            return out or ""
        except subprocess.TimeoutExpired:
            continue
    return ""


def _brief(res: dict[str, Any]) -> dict[str, Any]:
    return {
        "command": " ".join(res["command"]),
        "returncode": res["returncode"],
        "timed_out": res["timed_out"],
        "run_seconds": res["seconds"],
        "tail": _tail(res["output"]),
    }


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:500] if lines else ""


def _finite_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _epochs(path: Path) -> list[dict[str, Any]]:
    """The per-epoch records of a run's ``metrics.jsonl`` (none when it does not exist)."""
    from fleetgnn.train.metrics import read_metrics

    return read_metrics(path)


def _recorded_config(path: Path) -> dict[str, Any] | None:
    """What ``config.yaml`` says ran (device, dtype, nproc, engine)."""
    if not path.is_file():
        return None
    import yaml

    cfg = yaml.safe_load(path.read_text()) or {}
    train = cfg.get("train", {})
    return {k: train.get(k) for k in ("engine", "mode", "device", "dtype", "nproc", "threads")}


def _version(module: str) -> str | None:
    """The installed version of ``module`` when it imports, else None."""
    import importlib.metadata

    try:
        mod = __import__(module)
    except Exception:  # noqa: BLE001 - any failure to import means "absent"
        return None
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return str(getattr(mod, "__version__", "?"))


def _nvidia_smi() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,memory.total,driver_version,pcie.link.gen.current,"
                "pcie.link.width.current,clocks.max.sm",
                "--format=csv",
            ],
            capture_output=True,
            text=True,
            timeout=15,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{type(e).__name__}: {e}"
    return (out.stdout or out.stderr).strip()


#: What :func:`source_digest` reads: the package and the check, the code a check's figures
#: come from.
DIGEST_GLOBS = (
    "fleetgnn/**/*.py",
    "fleetgnn/**/*.json",
    "benchmarks/gpu/*.py",
    "benchmarks/gpu/*.sh",
)


def source_digest(root: Path = REPO) -> str:
    """SHA-256 of the sources under ``root`` that a check runs, over their paths and bytes."""
    h = hashlib.sha256()
    files = sorted({p for g in DIGEST_GLOBS for p in root.glob(g) if p.is_file()})
    for path in files:
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _hypothesis_modules(tests: Path) -> list[str]:
    """Test modules that import hypothesis at the top (collection fails without it)."""
    pat = re.compile(r"^(import|from) hypothesis\b", re.M)
    return sorted(
        str(p.relative_to(REPO)) for p in tests.rglob("*.py") if pat.search(p.read_text())
    )


def _pytest_counts(output: str, junit: Path) -> dict[str, Any]:
    counts: dict[str, Any] = {}
    if junit.is_file():
        try:
            root = ET.parse(junit).getroot()
            suite = root if root.tag == "testsuite" else root.find("testsuite")
            if suite is not None:
                for k in ("tests", "failures", "errors", "skipped"):
                    counts[k] = int(suite.get(k, 0))
                counts["passed"] = (
                    counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
                )
        except (ET.ParseError, ValueError):
            pass
    m = re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)", output)
    counts["summary_line"] = {k: int(v) for v, k in m[-8:]}
    return counts


def _pytest_shards(paths: tuple[str, ...], jobs: int, ignored: list[str]) -> list[list[str]]:
    """The test modules under ``paths`` in ``jobs`` shards of about equal time.

    A module under ``tests/engines``, ``tests/cost`` or ``tests/distributed`` (processes of
    their own, 10-15 s a test on a GPU) weighs 10, another 1; each module goes to the lightest
    shard, heaviest first (conftest files are found by pytest from the module paths).
    """
    modules: list[str] = []
    for p in paths:
        path = REPO / p
        found = [path] if path.is_file() else sorted(path.rglob("test_*.py"))
        modules += [str(m.relative_to(REPO)) for m in found]
    modules = [m for m in modules if m not in set(ignored)]
    heavy = ("tests/engines", "tests/cost", "tests/distributed")

    def weight(m: str) -> int:
        return 10 if m.startswith(heavy) else 1

    shards: list[list[str]] = [[] for _ in range(max(1, jobs))]
    loads = [0] * len(shards)
    for m in sorted(modules, key=lambda m: (-weight(m), m)):
        k = loads.index(min(loads))
        shards[k].append(m)
        loads[k] += weight(m)
    return [sh for sh in shards if sh]


def _sum_counts(counts: list[dict[str, Any]]) -> dict[str, Any]:
    """The shards' pytest counts added up (``summary_line`` per kind too)."""
    out: dict[str, Any] = {"summary_line": {}}
    for c in counts:
        for k, v in c.items():
            if k == "summary_line":
                for kk, vv in v.items():
                    out["summary_line"][kk] = out["summary_line"].get(kk, 0) + vv
            elif isinstance(v, int):
                out[k] = out.get(k, 0) + v
    return out


def _junit_failures(junit: Path) -> list[dict[str, str]]:
    if not junit.is_file():
        return []
    try:
        root = ET.parse(junit).getroot()
    except ET.ParseError:
        return []
    out = []
    for case in root.iter("testcase"):
        for kind in ("failure", "error"):
            el = case.find(kind)
            if el is not None:
                out.append(
                    {
                        "test": f"{case.get('classname')}::{case.get('name')}",
                        "kind": kind,
                        "message": (el.get("message") or "")[:1000],
                    }
                )
    return out


# ------------------------------------------------------------------------------------ bench child


def _profile_figures(events: Any, steps: int, wall: float) -> dict[str, Any]:
    """A profiled run of ``steps`` steps in ``wall`` seconds, per step: aten ops, kernel
    launches, host syncs (stream synchronisations, and tensor-to-Python reads, which each wait
    for the device), copies, the kernels' device time and the 15 ops taking the most host
    time."""
    from fleetgnn.bench.speed import device_us

    n = max(steps, 1)

    def count(*names: str) -> float:
        return sum(e.count for e in events if e.key in names) / n

    top = sorted(events, key=lambda e: -e.cpu_time_total)[:15]
    return {
        "steps": steps,
        # the wall time under the profiler, which inflates it (stop 35: 15.5-18.3 ms a step
        # profiled, 10-13 ms not): what a step costs is the unprofiled figures' step_s
        "profiled_step_s": wall / n,
        "profiled_step_s_what": "wall seconds a step under torch.profiler (inflated by it): "
        "not a speed figure",
        "aten_ops_per_step": sum(e.count for e in events if e.key.startswith("aten::")) / n,
        "kernel_launches_per_step": count(
            "cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"
        ),
        "stream_syncs_per_step": count("cudaStreamSynchronize", "cudaDeviceSynchronize"),
        "scalar_reads_per_step": count("aten::_local_scalar_dense"),
        "memcpy_per_step": count("cudaMemcpyAsync", "cudaMemcpy"),
        # the device's own events (kernels, copies), as torch's table totals them: the checks
        # to stop 35 summed every event's, a CPU op's too (the kernels it launched: twice)
        "device_kernel_us_per_step": device_us(events) / n,
        "top_host_ops": [
            {"op": e.key, "per_step": e.count / n, "host_us_per_step": e.cpu_time_total / n}
            for e in top
        ],
    }


def bench_child(
    path: Path,
    dataset: Path,
    device_name: str,
    quick: bool,
    parts: list[str] | None = None,
    tier: str = "all",
    budget_s: float | None = None,
) -> int:
    """Step ``bench`` in its own process: every figure into ``path`` as soon as it is measured.

    ``parts``: only these parts (and ``copy``, the unit of the fractions); ``None``: the tier's
    (:data:`TIER_PARTS`). ``budget_s``: seconds the parts have (a part that can leave out an arm
    for time, offload's pageable one, does).
    """
    import copy as copy_module
    import gc
    import types
    import warnings

    import torch

    from fleetgnn.bench import epoch, gather, ops, sampler
    from fleetgnn.bench.report import progress_line
    from fleetgnn.engines.base import resolve_steps
    from fleetgnn.graph import open_dataset
    from fleetgnn.kernels import KERNELS

    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")
    device = torch.device(device_name)
    size = sizes(device.type, quick, tier)
    deadline = time.monotonic() + (budget_s if budget_s is not None else 1e9)
    if parts is None:
        parts = list(TIER_PARTS[tier])
    opts = types.SimpleNamespace(repeat=size["repeat"], quick=quick)
    threads = torch.get_num_threads()
    out: dict[str, Any] = {"parts": {}, "figures": {"device": str(device)}, "rows": []}
    figs = out["figures"]
    graph = open_dataset(dataset)
    name = graph.name if hasattr(graph, "name") else dataset.name

    def log(msg: str) -> None:
        print(msg, flush=True)

    def part(key: str, fn: Callable[[], None]) -> None:
        if key not in parts and key != "copy":  # copy: the unit
            return
        t0 = time.monotonic()
        log(f"-- {key} ...")
        try:
            fn()
            out["parts"][key] = {"status": "passed", "error": None}
        except Exception as e:  # noqa: BLE001 - recorded; the next part runs
            traceback.print_exc()
            out["parts"][key] = {
                "status": "failed",
                "error": f"{type(e).__name__}: {e}"[:2000],
                "traceback": _tail(traceback.format_exc()),
            }
        out["parts"][key]["seconds"] = round(time.monotonic() - t0, 2)
        log(f"-- {key}: {out['parts'][key]['status']} in {out['parts'][key]['seconds']} s")
        _atomic_json(path, out)

    copy_bytes = size["copy_mb"] << 20

    def copy() -> None:
        figs["copy_gbps"] = ops.memcpy_gbps(copy_bytes, opts.repeat, device)
        figs["copy_what"] = f"copy_ of {size['copy_mb']} MiB on {device}, read + written GB/s"
        log(f"copy on {device}: {figs['copy_gbps']:.1f} GB/s")

    def h2d() -> None:
        if device.type != "cuda":
            figs["h2d"] = {"skipped": "not a CUDA device"}
            return
        figs["h2d"] = {
            "pinned_gbps": ops.h2d_gbps(copy_bytes, opts.repeat, device, pinned=True),
            "pageable_gbps": ops.h2d_gbps(copy_bytes, opts.repeat, device, pinned=False),
            "bytes": copy_bytes,
        }
        log(f"h2d: {figs['h2d']}")

    def gspmm() -> None:
        bw = figs.get("copy_gbps") or ops.memcpy_gbps(copy_bytes, opts.repeat, device)
        rows = ops.gspmm_rows(size["gspmm"], threads, opts.repeat, bw, log, device)
        out["rows"] += rows
        figs["gspmm"] = {}
        for r in rows:
            f = r["impls"]["fleetgnn"]
            passes = 2 if "backward" in r["case"] else 1
            gbps = r["extra"]["bytes_per_pass"] * passes / f["median_s"] / 1e9
            figs["gspmm"][r["case"]] = {
                "median_s": f["median_s"],
                "gbps": gbps,
                "fraction_of_copy": r["speedup"].get("memcpy of the same bytes"),
                "speedup": r["speedup"],
                "skipped": r["skipped"],
            }

    def feature_gather() -> None:
        rows = gather.run(opts, threads, log, graph, name, device)
        out["rows"] += rows
        figs["gather"] = {}
        figs["gather"]["units"] = "gbps: gathered bytes (once) a second; fraction_of_copy: of "
        figs["gather"]["units"] += "half the copy's read + written rate (a gathered byte is both)"
        for r in rows:
            limit_rate = r["extra"]["memcpy_gbps"] / 2  # the gathered bytes are read + written
            figs["gather"][r["case"]] = {
                impl: {"gbps": v.get("rate"), "fraction_of_copy": v["rate"] / limit_rate}
                for impl, v in r["impls"].items()
                if v.get("kind") != "limit" and v.get("rate")
            }

    def sampling() -> None:
        # fanouts 15,10,5, batch 1024: the torch sampler on the device (topology copied there)
        # against this code's CPU path (numpy), and the torch backend on the CPU
        (row,) = sampler.run(
            opts, threads, log, graph, name, batches_per_call=2, device=device, peers=False
        )
        out["rows"].append(row)
        rates = {k: v.get("rate") for k, v in row["impls"].items()}
        figs["sampler"] = {
            "case": row["case"],
            "m_edges_per_s": rates,
            "speedup": row["speedup"],
            "fisher_yates": KERNELS.chosen("fisher_yates", device.type),
        }
        host = rates.get("fleetgnn numpy (CPU)")
        if _finite_num(host) and host > 0:  # every device variant against the host's numpy
            figs["sampler"]["over_host_numpy"] = {
                k: v / host
                for k, v in rates.items()
                if _finite_num(v) and (k == "fleetgnn" or k.startswith("fleetgnn, "))
            }

    def epochs() -> None:
        figs["epochs"] = {}
        for model in ("gcn", "sage"):
            row = epoch.full_epoch(
                opts, threads, graph, name, size["hidden"], 1, model=model, device=device
            )
            out["rows"].append(row)
            log(progress_line(row))
            figs["epochs"][row["case"]] = {
                "median_s": {k: v["median_s"] for k, v in row["impls"].items()},
                "speedup": row["speedup"],
                "max_abs_logit_diff": row["extra"]["max_abs_logit_diff"],
                "bf16_over_float32": row["extra"]["bf16_over_float32"],
                "skipped": row["skipped"],
            }
            _atomic_json(path, out)

    def tiers() -> None:
        # a feature gather from each tier into the device (issue 26, item 7): a device-resident
        # table (index_select there), pinned host (the gather into a pinned buffer and an async
        # copy, as the offload engine's overlapped loads run) and pageable host (index_select
        # and a blocking .to(device), as its blocking loads run)
        from fleetgnn.distributed.transfer import Transfers

        x = torch.as_tensor(graph.x[:], dtype=torch.float32)
        n = int(x.shape[0])
        ids = torch.randint(
            0, n, (min(n, size["tier_rows"]),), generator=torch.Generator().manual_seed(0)
        )
        nbytes = int(ids.numel()) * int(x.shape[1]) * 4
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

        def rate(fn: Callable[[], Any], calls: int = 1) -> float:
            # the best of opts.repeat timings of `calls` calls and one sync: with calls=1 the
            # call's launch and sync latencies are in it (the copy part's 1 GiB hides them), with
            # more the calls queue behind each other (a training step's reads: throughput)
            fn()
            sync()
            best = float("inf")
            for _ in range(opts.repeat):
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                sync()
                best = min(best, (time.perf_counter() - t0) / calls)
            return nbytes / best / 1e9

        xd, idsd = x.to(device), ids.to(device)
        res: dict[str, Any] = {"rows": int(ids.numel()), "row_bytes": int(x.shape[1]) * 4}
        # one record, two units (the stop-35 record mixed them without saying): a key ending in
        # read_written_gbps counts every gathered byte twice (read and written: the copy's
        # unit, for fractions of it); every other *_gbps counts each gathered byte once
        res["units"] = {
            "*read_written_gbps": "gathered bytes x 2 (read + written) a second, the unit of "
            "copy_gbps; fraction_of_copy = this / copy_gbps",
            "device_gbps, pageable_host_gbps, pinned_host_gbps": "gathered bytes (once) a "
            "second; the host tiers' bytes cross the host-to-device link once",
        }
        res["device_gbps"] = rate(lambda: xd.index_select(0, idsd))
        res["device_read_written_gbps"] = 2 * res["device_gbps"]
        # every gather kernel that runs here, in the copy's unit (bytes read + written) and as
        # a fraction of the copy (issue 26: >= 0.7 of it from the device tier)
        kernels: dict[str, Any] = {}
        for name in KERNELS.names("gather_rows", device.type):
            fn = KERNELS.impl("gather_rows", name)
            try:
                same = torch.equal(fn(xd, idsd, None), xd.index_select(0, idsd))
                gbps = 2 * rate(lambda fn=fn: fn(xd, idsd, None))
            except Exception as e:  # e.g. triton absent or failing to compile: say which
                kernels[name] = {"skipped": f"{type(e).__name__}: {str(e)[:200]}"}
                continue
            queued = 2 * rate(lambda fn=fn: fn(xd, idsd, None), PIPELINE_CALLS)
            kernels[name] = {
                "read_written_gbps": gbps,
                "queued_read_written_gbps": queued,
                "equal": same,
            }
            if _finite_num(figs.get("copy_gbps")):
                kernels[name]["fraction_of_copy"] = gbps / figs["copy_gbps"]
                kernels[name]["queued_fraction_of_copy"] = queued / figs["copy_gbps"]
        kernels["chosen"] = KERNELS.chosen("gather_rows", device.type)
        res["kernels"] = kernels
        if "triton" in KERNELS.names("gather_rows", device.type) and "skipped" not in kernels.get(
            "triton", {"skipped": 1}
        ):  # the Triton kernel's launch shapes (kernels.TRITON_SWEEP), to choose its default
            from fleetgnn.kernels import TRITON_CONFIG, TRITON_SWEEP

            fn = KERNELS.impl("gather_rows", "triton")
            sweep = []
            for cfg in TRITON_SWEEP:
                got = {**TRITON_CONFIG, **cfg}
                try:
                    got["equal"] = torch.equal(fn(xd, idsd, None, **cfg), xd.index_select(0, idsd))
                    got["read_written_gbps"] = 2 * rate(lambda c=cfg: fn(xd, idsd, None, **c))
                except Exception as e:  # noqa: BLE001 - one shape failing to compile
                    got["skipped"] = f"{type(e).__name__}: {str(e)[:200]}"
                if _finite_num(figs.get("copy_gbps")) and "read_written_gbps" in got:
                    got["fraction_of_copy"] = got["read_written_gbps"] / figs["copy_gbps"]
                sweep.append(got)
            res["triton_sweep"] = sweep
        if device.type == "cuda":  # the store itself, built on the device, every row there
            from fleetgnn.store import TierBudgets, UnifiedStore

            # a device budget over the whole graph: the default (0) puts every row on the host
            # tier, which the stop-34 check measured by mistake (4.5 GB/s: host gather + copy)
            store = UnifiedStore.build(graph, budgets=TierBudgets(device=1 << 50), device=device)
            try:
                st: dict[str, Any] = {
                    # a user's read (the range checked: one sync) and an engine's (checked=True:
                    # a sampler's IDs), each alone and queued 10 deep
                    "read_written_gbps": 2 * rate(lambda: store.gather(idsd)),
                    "checked_ids_read_written_gbps": 2
                    * rate(lambda: store.gather(idsd, checked=True)),
                    "queued_read_written_gbps": 2
                    * rate(lambda: store.gather(idsd), PIPELINE_CALLS),
                    "checked_ids_queued_read_written_gbps": 2
                    * rate(lambda: store.gather(idsd, checked=True), PIPELINE_CALLS),
                    "hit_rates": store.hit_rates("features"),
                    "kernel": KERNELS.chosen("gather_rows", device.type),
                }
                if _finite_num(figs.get("copy_gbps")):
                    st["fraction_of_copy"] = st["read_written_gbps"] / figs["copy_gbps"]
                    st["fractions_of_copy"] = {
                        k[: -len("_read_written_gbps")] or "read": v / figs["copy_gbps"]
                        for k, v in st.items()
                        if k.endswith("_gbps")
                    }
                res["store_device_tier"] = st
            finally:
                store.close()
        res["pageable_host_gbps"] = rate(lambda: x.index_select(0, ids).to(device))
        if device.type == "cuda":
            xfer = Transfers(device, True)
            res["pinned_host_gbps"] = rate(lambda: xfer.load(x, ids, key="tier").wait())
            res["pinned_vs_pageable"] = res["pinned_host_gbps"] / res["pageable_host_gbps"]
        else:
            res["pinned_host_gbps"] = {"skipped": "not a CUDA device"}
        figs["gather_tiers"] = res
        log(f"gather tiers: {res}")

    def offload_overlap() -> None:
        # offload's epoch with overlapped (pinned, copy stream, double-buffered chunks) and
        # blocking copies, in this process; the same losses either way
        from fleetgnn.bench.speed import offload_engine, pinned_blocking
        from fleetgnn.config import load_config

        cfg = load_config(
            None,
            [
                "train.engine=offload",
                "train.mode=full",
                f"train.device={device}",
                "model.name=gcn",
                f"model.hidden={size['hidden']}",
            ],
        )
        res: dict[str, Any] = {"chunks": size["offload_chunks"], "partition": "range"}
        res["arms"] = {
            "blocking": "offload.overlap_transfers=false: pageable host data, blocking copies",
            "overlap": "pinned host data, copies on a side stream overlapping the chunks",
            "pinned_blocking": "the overlap arm's engine (pinned host data) in the blocking "
            "order with blocking copies from pinned memory: overlap's gain over it is the "
            "overlap alone (pinning alone cut the stop-34 transfer time 0.573 -> 0.074 s)",
        }

        def epochs(eng: Any) -> tuple[list[float], list[float]]:
            times, losses = [], []
            for ep in range(1 + max(1, min(opts.repeat, 3))):  # the first warms up
                sync_t0 = time.perf_counter()
                got = eng.run_epoch(ep)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                times.append(time.perf_counter() - sync_t0)
                (st,) = resolve_steps(got)
                losses.append(float(st.loss_sum))
            return times, losses

        def record(eng: Any, times: list[float], losses: list[float]) -> dict[str, Any]:
            extra = eng.epoch_extra()
            return {
                "epoch_s": min(times[1:]),
                "losses": losses,
                "pinned": extra["pinned"],
                "transfer_s": extra["transfer_s"],
                "transfer_wait_s": extra["transfer_wait_s"],
                "hidden_fraction": extra["hidden_fraction"],
            }

        for overlap in (False, True):
            eng = offload_engine(cfg, graph, size["offload_chunks"], overlap)
            try:
                state = copy_module.deepcopy(eng.state_dict())
                res["overlap" if overlap else "blocking"] = record(eng, *epochs(eng))
                if overlap:  # the same engine from the same state, blocking from pinned memory
                    eng.load_state_dict(state)
                    pinned_blocking(eng)
                    res["pinned_blocking"] = record(eng, *epochs(eng))
            finally:
                eng.close()
        # overlap against blocking copies from the same (pinned) memory: the overlap's gain
        res["speedup"] = res["pinned_blocking"]["epoch_s"] / res["overlap"]["epoch_s"]
        res["speedup_what"] = "pinned_blocking epoch / overlap epoch"
        res["speedup_over_pageable_blocking"] = (
            res["blocking"]["epoch_s"] / res["overlap"]["epoch_s"]
        )
        res["pinning_speedup"] = res["blocking"]["epoch_s"] / res["pinned_blocking"]["epoch_s"]
        res["same_losses"] = res["blocking"]["losses"] == res["overlap"]["losses"]
        # CUDA's float32 scatter-adds are atomics in no fixed order: the two paths may differ
        # in the last bits there (the H100 run: 9e-9 relative by the fourth epoch)
        res["max_rel_loss_diff"] = max(
            abs(a - b) / max(abs(b), 1e-30)
            for a, b in zip(res["overlap"]["losses"], res["blocking"]["losses"], strict=True)
        )
        figs["offload_overlap"] = res
        log(f"offload overlap: {res}")

    def sage_minibatch(device_budget: int | None, sampling: str = "auto") -> Any:
        """The minibatch parts' engine: SAGE, fanouts 10,10, batch 1024 (``None``: no limit).

        ``sampling``: ``store.sampling`` (``device`` keeps the sampler on the device at every
        budget: the budgets part changes only where the rows are).
        """
        from fleetgnn.config import load_config
        from fleetgnn.train import engine_from_config

        budget = "null" if device_budget is None else device_budget
        sets = ["train.engine=minibatch", "train.mode=minibatch", f"train.device={device}"]
        sets += ["model.name=sage", f"model.hidden={size['hidden']}", "train.batch_size=1024"]
        sets += [f"store.device_budget={budget}", "store.host_budget=null"]
        sets += [f"store.sampling={sampling}"]
        return engine_from_config(load_config(None, sets), graph, None)

    def minibatch_budgets() -> None:
        # a minibatch SAGE epoch on the device with the store's device tier at several budgets
        # (issue 26, item 7): 0 (every feature row from the pinned host tier), about half the
        # graph's bytes, and everything on the device; epoch seconds and the rows' sources.
        # The sampler stays on the device in every arm (store.sampling=device, its CSC replica
        # on top of the budget): with sampling=auto the budget-0 arm also moved the sampling
        # to the host (stop 34/35), so its step time was not the rows' placement alone
        from fleetgnn.engines.minibatch import replica_bytes
        from fleetgnn.store import feature_row_bytes, topology_row_bytes

        total = int(topology_row_bytes(graph).sum()) + graph.num_nodes * feature_row_bytes(graph)
        replica = replica_bytes(graph)
        res: dict[str, Any] = {"graph_bytes": total, "fanouts": [10, 10], "batch_size": 1024}
        res["sampling"] = "device"
        res["replica_bytes"] = replica
        res["what"] = (
            "device_budget = the sampler's CSC replica + 0, half the graph's row bytes, or no "
            "limit (null): only where the feature and topology rows live changes"
        )
        losses = {}
        for label, budget in (("0", replica), ("half", replica + total // 2), ("all", None)):
            eng = sage_minibatch(budget, sampling="device")
            try:
                times, run = [], []
                # the last MINIBATCH_STEPS steps of each epoch: the part's time stays bounded
                # on a large graph (the host sampler's epoch on products-like 0.2 took > 30 s)
                start = max(0, eng.steps_per_epoch() - MINIBATCH_STEPS)
                for ep in range(2):  # the first warms up
                    t0 = time.perf_counter()
                    steps = eng.run_epoch(ep, start)
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                    times.append(time.perf_counter() - t0)
                    steps = resolve_steps(steps)
                    run.append(sum(float(st.loss_sum) for st in steps))
                extra = eng.epoch_extra()
                memory = eng.peak_memory()
                sampled_on = extra.get("sampling")
            finally:
                eng.close()
            losses[label] = run
            res[label] = {
                "device_budget": budget,
                "steps": len(steps),
                "step_s": times[-1] / max(len(steps), 1),
                "hit_rates": extra["hit_rates"],
                "prefetch_hidden_s": extra["prefetch_hidden_s"],
                "prefetch_wait_s": extra["prefetch_wait_s"],
                "store_memory": memory,
                "rows_device_bytes": memory["device"] - replica,
                "sampling": sampled_on,
            }
        res["same_losses"] = len({tuple(v) for v in losses.values()}) == 1
        figs["minibatch_budgets"] = res
        log(f"minibatch SAGE by device budget: {res}")

    def rgat_orders() -> None:
        # R-GAT's two orders of a relation's work (RGATConv.aggregates_first) on the device:
        # the training steps of a typed batch with every relation projecting first, every one
        # aggregating first, and the rule; the rule's costs are fitted on a CPU, so this says
        # whether they hold here (and the losses agree across orders)
        from fleetgnn.bench.data import cached_typed_dataset
        from fleetgnn.bench.epoch import reference_engine

        typed, _ = cached_typed_dataset(dataset.parent, "igbh-like", size["typed_scale"], 0)
        eng, _ = reference_engine(
            typed,
            [
                "model.name=rgat",
                "train.mode=minibatch",
                "model.num_layers=3",
                "model.heads=4",
                "model.hidden=64",
                "model.dropout=0.0",
                "train.fanouts=[15,10,5]",
                "train.batch_size=1024",
                f"train.device={device}",
            ],
        )
        steps = min(eng.steps_per_epoch(), size["rgat_steps"])
        res: dict[str, Any] = {"scale": size["typed_scale"], "steps": steps}
        state = copy_module.deepcopy(eng.state_dict())  # the model's and the optimizer's
        for order in ("project", "aggregate", "auto", "project", "aggregate", "auto"):
            # every order from the same parameters and the same fresh Adam moments (the
            # stop-34 check restored only the parameters: each order's losses after the first
            # step then followed the moments of the order before it, not its own)
            eng.load_state_dict(copy_module.deepcopy(state))
            for conv in eng.module.convs:
                conv.order = order
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            losses = [eng.train_step(0, k).loss_sum for k in range(steps)]
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            dt = (time.perf_counter() - t0) / steps
            got = res.setdefault(order, {"step_s": dt, "losses": losses})
            got["step_s"] = min(got["step_s"], dt)  # the second round: warm
        first = res["project"]["losses"][0]
        res["max_rel_first_loss_diff"] = max(
            abs(res[o]["losses"][0] - first) / max(abs(first), 1e-30) for o in ("aggregate", "auto")
        )
        res["max_rel_loss_diff"] = max(  # every step: the orders train the same model
            abs(a - b) / max(abs(b), 1e-30)
            for o in ("aggregate", "auto")
            for a, b in zip(res[o]["losses"], res["project"]["losses"], strict=True)
        )
        figs["rgat_orders"] = res
        log(f"R-GAT orders: { {o: res[o]['step_s'] for o in ('project', 'aggregate', 'auto')} }")

    def profiled(fn: Callable[[], Any]) -> tuple[Any, float, Any]:
        """``fn()`` under torch.profiler (the device's kernels too): its ops, seconds, result."""
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities) as prof:
            t0 = time.perf_counter()
            got = fn()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            wall = time.perf_counter() - t0
        return prof.key_averages(), wall, got

    def minibatch_profile() -> None:
        # where a minibatch step's time goes on the device (stop 34 measured 10-13 ms a step,
        # the plan 1.8 ms): MINIBATCH_STEPS steps of SAGE (fanouts 10,10, batch 1024, every row
        # on the device) under torch.profiler: kernels launched, host syncs and copies per step,
        # the host's time against the kernels', and the ops taking the most host time
        eng = sage_minibatch(None)
        try:
            start = max(0, eng.steps_per_epoch() - MINIBATCH_STEPS)
            # warm up on the very steps profiled (their batches: a Triton kernel compiles once
            # per specialisation of its integer arguments, and the profile must not time that),
            # then the same steps unprofiled: the step time the profile is read against
            eng.run_epoch(1, start)
            t0 = time.perf_counter()
            plain = eng.run_epoch(1, start)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            plain_s = (time.perf_counter() - t0) / max(len(plain), 1)
            events, wall, steps = profiled(lambda: eng.run_epoch(1, start))
        finally:
            eng.close()
        figs["minibatch_profile"] = _profile_figures(events, len(steps), wall)
        figs["minibatch_profile"]["step_s"] = plain_s
        figs["minibatch_profile"]["step_s_what"] = "the same steps, warmed up, not profiled"
        log(
            f"minibatch profile: {plain_s * 1e3:.1f} ms a step (profiled: "
            f"{figs['minibatch_profile']['profiled_step_s'] * 1e3:.1f})"
        )

    def sampler_profile() -> None:
        # where a batch of the device sampler goes (fanouts 15,10,5, batch 1024: the sampler
        # part's case), under each Fisher-Yates kernel
        from fleetgnn.sampling import DeviceTopology, NeighborSampler

        topo = DeviceTopology.from_graph(graph, device)
        s = NeighborSampler(topo, [15, 10, 5], seed=0)
        gen = torch.Generator().manual_seed(0)
        batches = [torch.randperm(graph.num_nodes, generator=gen)[:1024] for _ in range(4)]
        batches = [b.to(device) for b in batches]

        def one(impl: str) -> dict[str, Any]:
            with KERNELS.using("fisher_yates", device.type, impl):
                # warm up every batch first: a Triton kernel compiles once per specialisation
                # of its integer arguments (stop 35's profile of the Triton sampler warmed one
                # batch up and took 103 ms a batch against 9.9 for torch's: compiles)
                for k, sd in enumerate(batches):
                    s.sample_from_nodes(sd, step=k)
                events, wall, edges = profiled(
                    lambda: sum(
                        b.num_edges
                        for k, sd in enumerate(batches)
                        for b in s.sample_from_nodes(sd, step=k).blocks
                    )
                )
            res = _profile_figures(events, len(batches), wall)
            res["edges_per_batch"] = edges / len(batches)
            res["warmed"] = "every profiled batch ran once before (compiles not in the profile)"
            log(
                f"sampler profile (fisher_yates={impl}): "
                f"{res['profiled_step_s'] * 1e3:.1f} ms a batch profiled"
            )
            return res

        chosen = KERNELS.chosen("fisher_yates", device.type)
        figs["sampler_profile"] = {**one(chosen), "fisher_yates": chosen}
        others = [n for n in KERNELS.available("fisher_yates", device.type) if n != chosen]
        figs["sampler_profile"]["others"] = {n: one(n) for n in others}

    def overheads() -> None:
        # the fixed costs the planner adds to every step (layer_overhead per layer,
        # param_overhead per parameter tensor), measured on the device as fleetgnn calibrate
        # measures them on a CPU; the GPU profile takes them from here (cost/gpu_rates.py)
        from fleetgnn.cost.calibration import measure_overheads

        got = measure_overheads(opts.repeat, device)
        figs["overheads"] = {
            "layer_overhead_s": got["layer_overhead"],
            "param_overhead_s": got["param_overhead"],
            "keyed_dropout_elements_per_s": got["keyed_dropout"],
        }
        log(f"overheads: {figs['overheads']}")

    # ---- the speed tier: products-like 1.0 (figures.products)
    prod: dict[str, Any] = {}  # the minibatch engine the products parts share, and its config
    psize = size.get("products", {})

    def products_record() -> dict[str, Any]:
        rec = figs.setdefault("products", {})
        if not rec:
            rec.update(
                scale=float(size["bench_data"][1]),
                dataset=name,
                device=str(device),
                num_nodes=graph.num_nodes,
                num_edges=graph.num_edges,
                what=f"SAGE {len(psize['fanouts'])} x {psize['hidden']}, fanouts "
                f"{','.join(map(str, psize['fanouts']))}, batch {psize['batch']}, float32, "
                f"every row and the sampler's CSC on {device} (store.sampling=device)",
                figures_of=f"{device.type}: the figures of this device"
                + ("" if device.type == "cuda" else " (a dry run), not a GPU's"),
            )
        return rec

    def products_engine() -> tuple[Any, Any]:
        if "eng" not in prod:
            from fleetgnn.bench.speed import sage_engine

            t0 = time.perf_counter()
            prod["eng"], prod["cfg"] = sage_engine(graph, device, psize)
            products_record()["engine_build_s"] = time.perf_counter() - t0
        return prod["eng"], prod["cfg"]

    def products_close() -> None:
        if "eng" in prod:
            prod.pop("eng").close()
            prod.clear()
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()

    def products() -> None:
        # one whole minibatch epoch after a warm-up epoch, under each Fisher-Yates kernel
        from fleetgnn.bench.speed import minibatch_epoch

        rec = products_record()
        eng, _ = products_engine()
        got = minibatch_epoch(eng, device, psize["profile_steps"], log)
        rec.update(got)
        rec["peers"] = {"fleetgnn": got["epoch_s"]}
        log(f"products epoch: {got['epoch_s']:.3f} s, {got['steps']} steps")

    def products_peers() -> None:
        # PyG's SAGEConv on the engine's own batches (each format), the same optimizer, and
        # PyG's own pipeline where it samples here
        from fleetgnn.bench.speed import peers_on_blocks

        rec = products_record()
        try:
            eng, cfg = products_engine()
            if "epoch_s" not in rec:  # this part alone (--bench-parts): fleetgnn's epoch too
                from fleetgnn.bench.speed import minibatch_epoch

                rec.update(minibatch_epoch(eng, device, psize["profile_steps"], log))
            got = peers_on_blocks(eng, cfg, device, psize["layer_steps"], log)
        finally:
            products_close()
        peers = rec.setdefault("peers", {})
        peers["fleetgnn"] = rec.get("epoch_s")
        peers.update(got["epochs"])
        rec["peers_what"] = (
            "epoch seconds; the PyG SAGEConv peers train on the batches fleetgnn's sampler and "
            "store prepare (inline, while fleetgnn's epoch prefetches them in a thread), with "
            "the engines' optimizer (fused Adam on CUDA); layers_s_per_step: forward, backward "
            "and optimizer alone on the same prepared batches"
        )
        rec["peers_layers_s_per_step"] = got["layers_s_per_step"]
        rec["peers_skipped"] = got["skipped"]

    def products_full() -> None:
        from fleetgnn.bench.speed import full_graph

        products_close()
        rec = products_record()
        rec["full_graph"] = full_graph(graph, device, psize, psize["repeat"], log)
        rec["full_graph_what"] = (
            f"full-graph epochs (forward, backward, the engines' optimizer: fused Adam on CUDA "
            f"on both sides), {psize['full_layers']} layers, hidden {psize['full_hidden']}, "
            f"median of {psize['repeat']} after a warm-up; 'oom': out of device memory"
        )

    def products_offload() -> None:
        from fleetgnn.bench.speed import offload_arms

        products_close()
        rec = products_record()
        gcn = rec.get("full_graph", {}).get("gcn", {}).get("fleetgnn fullgraph")
        in_device = gcn.get("epoch_s") if isinstance(gcn, dict) else None
        rec["offload"] = offload_arms(
            graph, device, psize, psize["repeat"], log, deadline, in_device
        )

    fns = {
        "copy": copy,
        "h2d": h2d,
        "gather_tiers": tiers,
        "gspmm": gspmm,
        "gather": feature_gather,
        "sampler": sampling,
        "epochs": epochs,
        "offload_overlap": offload_overlap,
        "minibatch_budgets": minibatch_budgets,
        "rgat_orders": rgat_orders,
        "minibatch_profile": minibatch_profile,
        "sampler_profile": sampler_profile,
        "overheads": overheads,
        "products": products,
        "products_peers": products_peers,
        "products_full": products_full,
        "products_offload": products_offload,
    }
    assert tuple(fns) == ALL_PARTS  # the names --bench-parts accepts, in their order
    for key, fn in fns.items():
        part(key, fn)
    products_close()
    if device.type == "cuda":
        figs["max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
    _atomic_json(path, out)
    return 0


# ------------------------------------------------------------------------------------ main


def _print_summary(check: Check) -> None:
    r = check.result
    print(
        f"\nGPU check ({r['device']}{', quick' if r['quick'] else ''}): "
        f"{r['duration_s']:.0f} s; GPU {r['host'].get('gpu')}; torch {r['host'].get('torch')}, "
        f"CUDA {r['host'].get('cuda')}"
    )
    for name, s in r["steps"].items():
        err = s.get("error")
        print(
            f"  {name:8s} {s.get('status', '?'):8s} {s.get('seconds') or 0:6.1f} s"
            + (f"  {err[:120]}" if err else "")
        )
    for run in r["steps"]["engines"].get("runs", []):
        d = run.get("max_abs_loss_diff")
        print(
            f"    {run['name']:26s} {run['status']:8s} {run.get('run_seconds') or 0:6.1f} s"
            + (f"  max|dloss| {d:.2g}" if d is not None else "")
        )
    print(f"  -> {check.out / JSON_NAME}, {check.out / LOG_NAME}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (``--bench-child`` is the internal mode of step ``bench``)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="?", help="output folder (gpu-check.json, gpu-check.log)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument(
        "--tier",
        choices=TIERS,
        default=None,
        help="parity (gpu tests + engine parity at W = 1, 2), speed (products-like 1.0 "
        "figures) or all (every step, the older bench parts: more than one call); default "
        "parity, or all where --steps, --bench-parts or --quick is given",
    )
    p.add_argument("--quick", action="store_true", help="tiny datasets and sizes (CI dry run)")
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="global deadline; steps left after it are skipped (default: parity and speed "
        "400 on cuda, 170 on a cpu; all: cuda 480, cpu 170, --quick 240)",
    )
    p.add_argument(
        "--worlds", default=None, help="comma-separated world sizes (default 1,2; --quick: 1)"
    )
    p.add_argument("--hardware", default="h100", help="fleetgnn plan profile (default h100)")
    p.add_argument(
        "--cache-dir", default=None, help="datasets (default $TMPDIR/fleetgnn-gpu-check)"
    )
    p.add_argument("--engine-scale", type=float, default=None, help="override the engine dataset")
    p.add_argument("--bench-scale", type=float, default=None, help="override the bench dataset")
    p.add_argument(
        "--engine-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra --set for the device's engine runs (repeatable)",
    )
    p.add_argument(
        "--multi-engines",
        default=None,
        help="the engines the engines step runs at W > 1 (default: --engines; CI's parity dry "
        "run: split at W = 2, the others at W = 1: every engine and the check's W = 2 path "
        "without every engine's two-rank start-up)",
    )
    p.add_argument("--pytest-maxfail", type=int, default=10)
    p.add_argument(
        "--pytest-args",
        default="",
        help="pytest arguments, one string (test paths, -k EXPR) for a targeted rerun "
        "(default: every test directory, cheapest first)",
    )
    p.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help=f"engines the engines step runs (default {','.join(ENGINES)})",
    )
    p.add_argument(
        "--pytest-timeout",
        type=float,
        default=None,
        help="seconds for the pytest step (default: all 150; parity and speed: the budget)",
    )
    p.add_argument(
        "--pytest-jobs",
        type=int,
        default=None,
        help=f"pytest shards at once (default: {PYTEST_JOBS} in the parity tier on cuda, else 1)",
    )
    p.add_argument(
        "--run-timeout",
        type=float,
        default=None,
        help="seconds per engine run (default: cuda 90, 180 in the parity tier where runs share "
        "the machine; cpu 120)",
    )
    p.add_argument(
        "--bench-timeout",
        type=float,
        default=None,
        help="seconds for the bench step (default: all 150; parity and speed: the budget)",
    )
    p.add_argument(
        "--bench-parts",
        default="",
        help="the bench step's parts to run, comma-separated (default all: "
        f"{','.join(BENCH_PARTS)})",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="engine runs at once (default: 3 in the parity tier on CUDA, 2 on a CPU dry run; "
        "the all tier on CUDA: one at a time)",
    )
    p.add_argument(
        "--steps",
        default=None,
        help=f"steps to run (env always runs): {','.join(STEPS[1:])} (default: the tier's)",
    )
    p.add_argument(
        "--source-digest",
        action="store_true",
        help="print this checkout's source digest (a check's host.source_digest) and exit",
    )
    p.add_argument("--bench-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--dataset", default=None, help=argparse.SUPPRESS)
    p.add_argument("--bench-budget-s", type=float, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.source_digest:
        print(source_digest())
        raise SystemExit(0)
    if args.bench_child is None and args.out is None:
        p.error("OUT_DIR is required")
    if args.tier is None:  # the old invocations (targeted reruns, the quick dry run) as before
        args.tier = "all" if (args.steps or args.bench_parts or args.quick) else "parity"
    if args.budget_s is None:
        if args.tier != "all":
            args.budget_s = 400.0 if args.device == "cuda" else 170.0
        else:
            args.budget_s = 240.0 if args.quick else (480.0 if args.device == "cuda" else 170.0)
    if args.pytest_timeout is None:
        args.pytest_timeout = 150.0 if args.tier == "all" else args.budget_s
    if args.worlds is None:
        args.worlds = "1" if args.quick else "1,2"
    args.worlds = [int(w) for w in str(args.worlds).split(",") if w]
    if args.run_timeout is None:
        args.run_timeout = (
            120.0 if args.device != "cuda" else 180.0 if args.tier == "parity" else 90.0
        )
    if args.jobs is None:
        args.jobs = 3 if args.tier == "parity" and args.device == "cuda" else 2
    if args.bench_timeout is None:
        args.bench_timeout = 150.0 if args.tier == "all" else args.budget_s
    args.steps = (
        [s for s in args.steps.split(",") if s] if args.steps else list(TIER_STEPS[args.tier])
    )
    args.bench_parts = [s for s in args.bench_parts.split(",") if s]
    if set(args.bench_parts) - set(ALL_PARTS):
        p.error(
            f"unknown bench part(s) {sorted(set(args.bench_parts) - set(ALL_PARTS))}; choose "
            f"from {','.join(ALL_PARTS)}"
        )
    args.engines = [e for e in args.engines.split(",") if e]
    if args.multi_engines is not None:
        args.multi_engines = [e for e in args.multi_engines.split(",") if e]
        if set(args.multi_engines) - set(ENGINES):
            p.error(f"unknown engine(s) {sorted(set(args.multi_engines) - set(ENGINES))}")
    if set(args.engines) - set(ENGINES):
        p.error(f"unknown engine(s) {sorted(set(args.engines) - set(ENGINES))}")
    unknown = set(args.steps) - set(STEPS)
    if unknown:
        p.error(f"unknown step(s) {sorted(unknown)}; choose from {','.join(STEPS[1:])}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the check (or, with ``--bench-child``, step ``bench`` in this process)."""
    args = parse_args(argv)
    if args.bench_child is not None:
        return bench_child(
            Path(args.bench_child),
            Path(args.dataset),
            args.device,
            args.quick,
            args.bench_parts or None,
            args.tier,
            args.bench_budget_s,
        )
    check = Check(args)
    try:
        check.log(
            f"GPU check: tier {args.tier}, device {args.device}, quick {args.quick}, budget "
            f"{args.budget_s:g} s, worlds {args.worlds}, steps {args.steps}, out {check.out}"
        )
        check.step("env", check.env)
        no_env = None
        if check.result["steps"]["env"]["status"] != "passed":
            no_env = f"env failed: {check.result['steps']['env']['error']}"
        beside = None  # the parity tier: pytest in a thread beside the data and engines steps
        for name in STEPS[1:]:
            skip = no_env or (None if name in args.steps else "not in --steps")
            if name == "pytest" and check.parallel_pytest and skip is None:
                beside = threading.Thread(target=check.step, args=(name, check.pytest))
                beside.start()
                continue
            check.step(name, getattr(check, name), skip=skip)
        if beside is not None:
            beside.join()
    finally:
        check.result["finished"] = _now()
        check.save()
        check.log_f.close()
    _print_summary(check)
    wanted = [s for s in STEPS if s == "env" or s in args.steps]
    return 0 if all(check.result["steps"][s]["status"] == "passed" for s in wanted) else 1


if __name__ == "__main__":
    sys.exit(main())
