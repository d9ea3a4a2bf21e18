"""The prepared GPU check (benchmarks/gpu/check.sh) as CPU dry runs of its two tiers, end to end
through the shell script: every step of the tier is recorded with its fields and passes on the
CPU, and the speed tier writes the products figure (at the dry run's scale), so the script
cannot rot before a GPU machine runs it."""

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetgnn.bench.speed import finite

REPO = Path(__file__).resolve().parents[2]
STEPS = ("env", "pytest", "data", "engines", "bench", "plan")


def _dry_run(out: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    argv = ["bash", str(REPO / "benchmarks/gpu/check.sh"), str(out), "--device", "cpu", *args]
    argv += ["--cache-dir", str(out / "cache")]
    return subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.fixture(scope="module")
def parity_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check-parity")
    # the pytest step over two modules with gpu-marked tests (collecting tests/ops and
    # tests/store took 7.7 s here, these 3.4; the whole suite ~10 s more); split only at W = 2,
    # the others at W = 1: every engine and the check's W = 2 path without every engine's
    # two-rank start-up (~10 s each here)
    proc = _dry_run(
        out,
        "--tier",
        "parity",
        "--pytest-args",
        "tests/test_keyhash.py tests/test_kernels.py",
        "--engines",
        "minibatch,fullgraph,offload",
        "--multi-engines",
        "split",
    )
    return proc, out


#: The older bench parts whose figures the speed tier's dry run checks too (the ones whose
#: labels or arms changed: pinned-blocking offload, budgets with the sampler kept on the device,
#: profiles warmed and labelled, distinct sampler batches, explicit gather units).
OLD_PARTS = (
    "gather_tiers",
    "sampler",
    "offload_overlap",
    "minibatch_budgets",
    "minibatch_profile",
    "sampler_profile",
)


@pytest.fixture(scope="module")
def speed_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check-speed")
    parts = ",".join(("copy", "products", "products_peers", "products_full", "products_offload"))
    proc = _dry_run(out, "--tier", "speed", "--bench-parts", f"{parts},{','.join(OLD_PARTS)}")
    return proc, out


def _result(run, tier: str, tier_steps: tuple[str, ...]) -> dict:
    """The dry run's JSON, checked: it finished as ``tier``, its ``tier_steps`` (and env)
    passed and every other step was skipped."""
    proc, out = run
    assert (out / "gpu-check.json").is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads((out / "gpu-check.json").read_text())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (out / "gpu-check.log").stat().st_size > 0
    assert res["device"] == "cpu" and res["finished"] and res["duration_s"] > 0
    assert set(res["steps"]) == set(STEPS) and set(res["summary"]) == set(STEPS)
    assert res["tier"] == tier
    for name in STEPS:
        step = res["steps"][name]
        if name in ("env", *tier_steps):
            assert step["status"] == "passed" and step["error"] is None, (name, step.get("error"))
            assert isinstance(step["seconds"], (int, float)), name
        else:  # not in the tier
            assert step["status"] == "skipped" and step["error"] == "not in --steps", name
    return res


@pytest.mark.slow
def test_parity_tier_dry_run_passes_every_step(parity_run):
    res = _result(parity_run, "parity", ("pytest", "data", "engines"))

    host = res["host"]
    for key in ("gpu", "torch", "cuda", "python", "cpu_model", "pymetis", "nvidia_smi"):
        assert key in host, key
    assert host["fleetgnn_from"] == str(REPO / "fleetgnn")
    # the sources that ran, as this checkout's `check.py --source-digest` prints them
    digest = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/gpu/check.py"), "--source-digest"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert host["source_digest"] == digest and len(digest) == 64

    # pytest -m gpu ran: every selected test skips on the CPU, none failed
    counts = res["steps"]["pytest"]["counts"]
    assert counts["failures"] == 0 and counts["errors"] == 0
    assert counts["skipped"] == counts["tests"] >= 1
    assert res["steps"]["pytest"]["returncode"] == 0

    # every engine ran (split at W = 2) and its losses equal its baseline's
    engines = res["steps"]["engines"]
    assert "not speed figures" in engines["timings_are"]
    runs = {r["name"]: r for r in engines["runs"]}
    for name in ("minibatch-w1", "fullgraph-w1", "offload-w1", "split-w2"):
        run = runs[f"cpu:{name}"]
        assert run["status"] == "passed", run.get("error")
        assert len(run["losses"]) == 2 and len(run["epoch_time_s"]) == 2
        assert run["baseline"].startswith("cpu:reference-")
        assert run["max_abs_loss_diff"] <= 1e-6
        assert run["recorded"]["device"] == "cpu" and run["recorded"]["dtype"] == "float64"
    assert runs["cpu:split-w2"]["recorded"]["nproc"] == 2
    assert {"cpu:reference-minibatch", "cpu:reference-full"} <= set(runs)
    assert len(runs) == 6


@pytest.mark.slow
def test_speed_tier_dry_run_writes_the_products_figure(speed_run):
    res = _result(speed_run, "speed", ("data", "bench", "plan"))
    assert res["host"]["source_digest"] and len(res["host"]["source_digest"]) == 64
    bench = res["steps"]["bench"]
    assert all(p["status"] == "passed" for p in bench["parts"].values()), bench["parts"]
    figs = bench["figures"]
    prod = figs["products"]
    assert prod["scale"] == 0.01 and prod["device"] == "cpu"
    assert "not a GPU's" in prod["figures_of"]
    for key in ("epoch_s", "step_s"):
        assert finite(prod[key]) and prod[key] > 0, key
    assert prod["steps"] >= 2
    assert prod["kernel_s_per_step"] is None  # device time from the profiler: CUDA only
    # every Fisher-Yates kernel that runs on the CPU: torch's
    assert set(prod["fisher_yates"]) == {"torch"}
    assert all(finite(v) and v > 0 for v in prod["fisher_yates"].values())
    assert set(prod["phases_s"]) == {"sample", "gather", "forward", "backward", "optimizer"}
    assert all(finite(v) and v >= 0 for v in prod["phases_s"].values())
    assert prod["epoch_extra"]["sampling"] == "device"  # the Fisher-Yates kernels ran
    assert "not a speed figure" in prod["profile"]["profiled_step_s_note"]
    # the peers: fleetgnn and PyG's SAGEConv in two formats on the same batches (PyG is a dev
    # extra); SparseTensor and NeighborLoader need torch-sparse / pyg-lib: skipped with why
    peers = prod["peers"]
    assert all(finite(v) and v > 0 for v in peers.values()), peers
    assert {"fleetgnn", "PyG SAGEConv, CSR adj_t (torch.sparse_csr)"} <= set(peers)
    assert "PyG SAGEConv, edge_index" in peers
    layers = prod["peers_layers_s_per_step"]
    assert set(layers) == set(peers) and all(finite(v) for v in layers.values())
    assert all(isinstance(why, str) and why for why in prod["peers_skipped"].values())
    # full-graph GCN and SAGE: both engines and PyG's two formats, the same function
    for model, conv in (("gcn", "GCNConv"), ("sage", "SAGEConv")):
        full = prod["full_graph"][model]
        for arm in ("fleetgnn reference", "fleetgnn fullgraph", f"PyG {conv}, CSR adj_t"):
            assert finite(full[arm]["epoch_s"]), (model, arm, full)
        assert finite(full["fullgraph_over_pyg_csr"])
        assert all(d < 1e-4 for d in full["logit_diff"].values())
    # offload in fixed chunks: three arms, overlap and pinned-blocking the same losses
    off = prod["offload"]
    assert off["chunks_given"] == 4 and off["overlap"]["chunks"] == 4
    assert off["overlap"]["peak_device_bytes"] is None  # measured on CUDA
    for arm in ("overlap", "pinned_blocking", "pageable_blocking"):
        assert finite(off[arm]["epoch_s"]) and off[arm]["epoch_s"] > 0, arm
    assert off["same_losses_overlap_pinned_blocking"]
    assert off["overlap"]["losses"] == off["pageable_blocking"]["losses"]
    assert finite(off["overlap_over_in_device"])
    # the plan of this dataset against what was measured
    compared = {(c["config"], c["engine"]): c for c in res["steps"]["plan"]["compared"]}
    assert set(compared) == {
        ("sage-minibatch", "minibatch"),
        ("gcn-full", "reference"),
        ("gcn-full", "fullgraph"),
        ("gcn-full", "offload"),
    }
    assert all(finite(c["predicted_over_measured"]) for c in compared.values())
    assert compared["sage-minibatch", "minibatch"]["measured_epoch_s"] == prod["epoch_s"]
    assert prod["plan"] == res["steps"]["plan"]["compared"]

    # the older parts with labels or arms fixed (issue 37's misleading figures)
    tiers = figs["gather_tiers"]  # one record, its units said
    assert "read_written" in " ".join(tiers["units"]) and tiers["device_gbps"] > 0
    assert tiers["device_read_written_gbps"] == 2 * tiers["device_gbps"]
    assert all(
        tiers["kernels"][k]["equal"] and tiers["kernels"][k]["queued_read_written_gbps"] > 0
        for k in ("index_select", "wide")
    )
    off = figs["offload_overlap"]  # overlap against blocking from pinned and pageable memory
    assert set(off["arms"]) == {"blocking", "overlap", "pinned_blocking"}
    assert off["same_losses"] and off["max_rel_loss_diff"] == 0  # the CPU path: bit-identical
    assert off["pinned_blocking"]["losses"] == off["overlap"]["losses"]
    assert off["speedup_what"] == "pinned_blocking epoch / overlap epoch"
    mb = figs["minibatch_budgets"]  # only the rows' placement changes: sampling on the device
    assert mb["same_losses"] and all(mb[k]["sampling"] == "device" for k in ("0", "half", "all"))
    assert mb["0"]["hit_rates"]["local"] == 0 and mb["all"]["hit_rates"]["local"] == 1
    assert mb["0"]["rows_device_bytes"] == 0 < mb["all"]["rows_device_bytes"]
    prof = figs["minibatch_profile"]  # the profiled time said as such, the step time not
    assert prof["step_s"] > 0 and prof["profiled_step_s"] > 0
    assert "not a speed figure" in prof["profiled_step_s_what"]
    assert prof["aten_ops_per_step"] > 100 and len(prof["top_host_ops"]) >= 5
    sp = figs["sampler_profile"]
    assert sp["steps"] == 4 and sp["edges_per_batch"] > 0 and "warmed" in sp
    rates = figs["sampler"]["m_edges_per_s"]  # on the CPU: numpy, and the torch backend there
    assert set(rates) == {"fleetgnn", "fleetgnn torch (CPU)"} and all(r > 0 for r in rates.values())


def _load_check():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks/gpu/check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_parts_are_checked(tmp_path, capsys):
    mod = _load_check()
    args = mod.parse_args([str(tmp_path), "--bench-parts", "gather_tiers,rgat_orders"])
    assert args.bench_parts == ["gather_tiers", "rgat_orders"]
    assert mod.parse_args([str(tmp_path)]).bench_parts == []  # every part
    assert args.tier == "all"  # targeted reruns keep the old check's steps and parts
    with pytest.raises(SystemExit):
        mod.parse_args([str(tmp_path), "--bench-parts", "gather,tiers"])
    assert "unknown bench part(s) ['tiers']" in capsys.readouterr().err


def test_tiers_and_their_defaults(tmp_path):
    mod = _load_check()
    out = str(tmp_path)
    parity = mod.parse_args([out])  # the default: the tier that fits a call, on CUDA
    assert parity.tier == "parity" and parity.steps == ["pytest", "data", "engines"]
    assert parity.budget_s == 400 and parity.worlds == [1, 2]
    assert parity.pytest_timeout == 400  # beside the engines: the whole budget
    speed = mod.parse_args([out, "--tier", "speed"])
    assert speed.steps == ["data", "bench", "plan"] and speed.budget_s == 400
    assert speed.bench_timeout == 400  # the bench step's share caps it, not the old 150 s
    assert parity.run_timeout == 180  # engine runs share the machine with the test shards
    assert mod.sizes("cuda", False, "speed")["bench_data"] == ("products-like", 1.0)
    assert mod.sizes("cpu", False, "speed")["bench_data"] == ("products-like", 0.01)
    assert mod.TIER_PARTS["speed"] == mod.SPEED_PARTS
    old = mod.parse_args([out, "--quick", "--device", "cpu"])  # the old quick dry run
    assert old.tier == "all" and old.steps == list(mod.STEPS[1:]) and old.budget_s == 240
    assert old.bench_timeout == 150 and old.pytest_timeout == 150
    assert mod.parse_args([out, "--steps", "bench"]).tier == "all"
    # each tier's shares leave the steps after a step their time (none above the whole)
    for tier, shares in mod.TIER_SHARES.items():
        assert sum(shares.values()) <= 1.0 + 1e-9, tier


def test_pytest_shards_cover_every_module_once():
    mod = _load_check()
    shards = mod._pytest_shards(mod.PYTEST_PATHS, 2, ["tests/cost/test_gpu_rates.py"])
    modules = [m for sh in shards for m in sh]
    assert len(modules) == len(set(modules)) and "tests/cost/test_gpu_rates.py" not in modules
    assert "tests/engines/test_minibatch.py" in modules and "tests/test_keyhash.py" in modules
    assert "tests/test_kernels.py" in modules  # every module with gpu-marked tests
    heavy = [sum(m.startswith(("tests/engines", "tests/cost")) for m in sh) for sh in shards]
    assert len(shards) == 2 and abs(heavy[0] - heavy[1]) <= 1  # the slow tests split evenly
    assert mod._pytest_shards(("tests/test_keyhash.py",), 3, []) == [["tests/test_keyhash.py"]]
    got = mod._sum_counts(
        [
            {"tests": 3, "failures": 0, "summary_line": {"passed": 3}},
            {"tests": 2, "failures": 1, "summary_line": {"passed": 1, "failed": 1}},
        ]
    )
    assert got == {"tests": 5, "failures": 1, "summary_line": {"passed": 4, "failed": 1}}


def test_parity_tier_runs_at_once_and_compares_every_run(tmp_path, monkeypatch):
    """The parity tier on CUDA (faked runs): every run at once, each against its baseline."""
    check = _load_check()
    argv = [str(tmp_path / "out"), "--device", "cuda", "--cache-dir", str(tmp_path / "c")]
    c = check.Check(check.parse_args(argv))  # 3 runs at once by default
    c.result["steps"]["data"] = {
        "status": "passed",
        "datasets": {"engine_data": {"path": str(tmp_path / "d")}},
    }
    threads = []

    def fake_run(run, data, tmp, timeout, threads_each=None):
        threads.append(threads_each)
        time.sleep(0.05 if run["device"] == "cpu" else 0.0)  # baselines finish last
        loss = 1.0 + (run["engine"] == "minibatch" and run["world_size"] > 1)
        run.update(status="passed", losses=[loss, loss / 2], epoch_time_s=[1.0, 0.5])

    monkeypatch.setattr(c, "_engine_run", fake_run)
    rec = {"status": "running"}
    c.engines(rec)
    runs = {r["name"]: r for r in rec["runs"]}
    assert len(runs) == 13 and rec["passed"] == 13 and rec["status"] == "running"
    assert all(r["status"] == "passed" for r in runs.values())
    assert runs["cuda:minibatch-w2"]["max_abs_loss_diff"] == 0  # compared after its baseline
    assert "3 run(s) at once beside the pytest step" in rec["timings_are"]
    assert all(t is not None and t >= 1 for t in threads)  # the cores shared among the runs
    c.log_f.close()


def test_cuda_runs_and_their_baselines(tmp_path, monkeypatch):
    """On CUDA (no GPU needed: the runs are faked): which runs, against which CPU baseline."""
    check = _load_check()
    argv = [str(tmp_path / "out"), "--device", "cuda", "--cache-dir", str(tmp_path / "c")]
    c = check.Check(check.parse_args([*argv, "--tier", "all"]))  # one run at a time
    c.result["steps"]["data"] = {
        "status": "passed",
        "datasets": {"engine_data": {"path": str(tmp_path / "d")}},
    }
    ran = []

    def fake_run(run, data, tmp, timeout, threads=None):
        ran.append(run["name"])
        # minibatch at W > 1 trains on W batches per step: other losses than the reference's
        loss = 1.0 + (run["engine"] == "minibatch" and run["world_size"] > 1)
        if run["name"] == "cuda:offload-w2":
            loss += 1e-3  # a device that disagrees with the CPU
        run.update(status="passed", losses=[loss, loss / 2], epoch_time_s=[1.0, 0.5])

    monkeypatch.setattr(c, "_engine_run", fake_run)
    rec = {"status": "running"}
    c.engines(rec)
    assert ran[:4] == [
        "cpu:reference-minibatch",
        "cpu:reference-full",
        "cuda:reference-minibatch",
        "cuda:reference-full",
    ]
    assert ran.index("cpu:minibatch-w2") < ran.index("cuda:minibatch-w2")
    # at W = 2 the runs whose baseline already ran come first, minibatch and its CPU run last
    assert ran[-5:] == [
        "cuda:split-w2",
        "cuda:fullgraph-w2",
        "cuda:offload-w2",
        "cpu:minibatch-w2",
        "cuda:minibatch-w2",
    ]
    assert len(ran) == 13  # 3 CPU baselines, the reference in 2 modes, 4 engines x W = 1, 2
    runs = {r["name"]: r for r in rec["runs"]}
    assert runs["cuda:split-w2"]["baseline"] == "cpu:reference-minibatch"
    assert runs["cuda:fullgraph-w1"]["baseline"] == "cpu:reference-full"
    assert runs["cuda:minibatch-w2"]["baseline"] == "cpu:minibatch-w2"
    assert runs["cuda:minibatch-w1"]["baseline"] == "cpu:reference-minibatch"
    assert runs["cuda:reference-full"]["max_abs_loss_diff"] == 0
    assert runs["cuda:offload-w2"]["status"] == "failed"
    assert rec["status"] == "failed" and rec["failed"] == ["cuda:offload-w2"]

    # the planner's epochs meet the device's W = 1 runs of the same engine and mode
    c.result["steps"]["engines"] = rec
    engines = {e: {"fits": True, "mode": m, "epoch_s": 0.25} for e, m in check.MODES.items()}
    engines["reference"] = {"fits": True, "mode": "full", "epoch_s": 0.1}
    out = "log line\n" + json.dumps({"choice": "reference", "engines": engines})
    argvs = []

    def fake_plan(argv, timeout, label, env=None):
        argvs.append(argv)
        return {"command": argv, "returncode": 0, "timed_out": False, "seconds": 1.0, "output": out}

    monkeypatch.setattr(c, "run", fake_plan)
    plan = {"status": "running"}
    c.plan(plan)
    assert len(argvs) == 1 and argvs[0][argvs[0].index("--hardware") + 1] == "h100"
    assert argvs[0][argvs[0].index("--nproc") + 1] == "1"
    compared = {p["run"]: p for p in plan["compared"]}
    assert set(compared) == {
        "cuda:reference-full",
        "cuda:minibatch-w1",
        "cuda:split-w1",
        "cuda:fullgraph-w1",
        "cuda:offload-w1",
    }
    assert compared["cuda:split-w1"]["predicted_over_measured"] == 0.5
    c.log_f.close()


def test_a_stuck_step_is_killed_and_late_steps_are_skipped(tmp_path):
    check = _load_check()
    c = check.Check(check.parse_args([str(tmp_path / "out"), "--device", "cpu", "--budget-s", "1"]))
    stuck = [sys.executable, "-c", "import time; time.sleep(60)"]
    res = c.run(stuck, timeout=1, label="stuck")
    assert res["timed_out"] and res["seconds"] < 15
    time.sleep(1)  # past the deadline
    c.step("plan", c.plan)
    c.log_f.close()
    plan = json.loads((tmp_path / "out" / "gpu-check.json").read_text())["steps"]["plan"]
    assert plan["status"] == "skipped" and "--budget-s" in plan["error"]
