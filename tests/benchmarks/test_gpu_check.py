"""The prepared GPU check (benchmarks/gpu/check.sh) as a CPU dry run, end to end through the shell
script: every step is recorded with its fields and passes on the CPU, so the script cannot rot
before a GPU machine runs it."""

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STEPS = ("env", "pytest", "data", "engines", "bench", "plan")


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check")
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    argv = ["bash", str(REPO / "benchmarks/gpu/check.sh"), str(out), "--device", "cpu", "--quick"]
    argv += ["--cache-dir", str(out / "cache")]
    # the pytest step over two modules with gpu-marked tests (collecting tests/ops and
    # tests/store took 7.7 s here, these 3.4; the whole suite ~10 s more)
    argv += ["--pytest-args", "tests/test_keyhash.py tests/test_kernels.py"]
    proc = subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    return proc, out


@pytest.mark.slow
def test_quick_cpu_dry_run_passes_every_step(dry_run):
    proc, out = dry_run
    assert (out / "gpu-check.json").is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads((out / "gpu-check.json").read_text())
    failed = {s: r.get("error") for s, r in res["steps"].items() if r["status"] != "passed"}
    assert not failed, (failed, proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (out / "gpu-check.log").stat().st_size > 0
    assert res["device"] == "cpu" and res["quick"] is True
    assert res["finished"] and res["duration_s"] > 0
    assert set(res["steps"]) == set(STEPS) and set(res["summary"]) == set(STEPS)
    for name in STEPS:
        step = res["steps"][name]
        assert step["status"] == "passed" and step["error"] is None, name
        assert isinstance(step["seconds"], (int, float)), name

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

    # every engine ran and its losses equal its baseline's
    runs = {r["name"]: r for r in res["steps"]["engines"]["runs"]}
    for engine in ("minibatch", "split", "fullgraph", "offload"):
        run = runs[f"cpu:{engine}-w1"]
        assert run["status"] == "passed", run.get("error")
        assert len(run["losses"]) == 2 and len(run["epoch_time_s"]) == 2
        assert run["baseline"].startswith("cpu:reference-")
        assert run["max_abs_loss_diff"] <= 1e-6
        assert run["recorded"]["device"] == "cpu" and run["recorded"]["dtype"] == "float64"
    assert {"cpu:reference-minibatch", "cpu:reference-full"} <= set(runs)

    # benchmarks: every part ran, every figure is there
    bench = res["steps"]["bench"]
    assert all(p["status"] == "passed" for p in bench["parts"].values()), bench["parts"]
    figs = bench["figures"]
    assert figs["copy_gbps"] > 0
    assert "skipped" in figs["h2d"]  # no CUDA device
    assert len(figs["gspmm"]) == 4
    assert all(0 < g["fraction_of_copy"] for g in figs["gspmm"].values())
    assert len(figs["gather"]) == 2
    tiers = figs["gather_tiers"]  # device and pageable host; pinned needs CUDA
    assert tiers["device_gbps"] > 0 and tiers["pageable_host_gbps"] > 0
    assert "skipped" in tiers["pinned_host_gbps"]
    kernels = tiers["kernels"]  # every gather kernel of the CPU, equal to index_select
    assert kernels["chosen"] == "index_select"
    assert all(
        kernels[k]["equal"] and kernels[k]["read_written_gbps"] > 0
        for k in ("index_select", "wide")
    )
    off = figs["offload_overlap"]  # offload's epoch, overlapped and blocking: the same losses
    assert off["same_losses"] and off["max_rel_loss_diff"] == 0  # the CPU path: bit-identical
    assert len(off["overlap"]["losses"]) >= 2
    assert off["overlap"]["epoch_s"] > 0 and off["blocking"]["epoch_s"] > 0
    assert off["blocking"]["hidden_fraction"] == 0.0 and not off["overlap"]["pinned"]
    mb = figs["minibatch_budgets"]  # a minibatch SAGE epoch per device budget: the same losses
    assert mb["same_losses"] and all(mb[k]["step_s"] > 0 for k in ("0", "half", "all"))
    assert all(mb[k]["steps"] >= 1 for k in ("0", "half", "all"))
    assert mb["0"]["hit_rates"]["local"] == 0 and mb["all"]["hit_rates"]["local"] == 1
    assert mb["0"]["store_memory"]["device"] == 0 < mb["all"]["store_memory"]["device"]
    rg = figs["rgat_orders"]  # R-GAT's two orders and the rule: step times, the same loss
    assert all(
        rg[o]["step_s"] > 0 and len(rg[o]["losses"]) == rg["steps"]
        for o in ("project", "aggregate", "auto")
    )
    assert rg["max_rel_first_loss_diff"] < 1e-5  # float32: the orders sum in other orders
    assert rg["max_rel_loss_diff"] < 1e-4  # every step: each order from the same Adam state
    prof = figs["minibatch_profile"]  # a minibatch step's work under the profiler
    assert prof["steps"] >= 1 and prof["step_s"] > 0 and prof["aten_ops_per_step"] > 100
    assert prof["scalar_reads_per_step"] >= 1 and len(prof["top_host_ops"]) >= 5
    sp = figs["sampler_profile"]  # a batch of the sampler on the device, profiled
    assert sp["steps"] == 4 and sp["step_s"] > 0 and sp["edges_per_batch"] > 0
    fixed = figs["overheads"]  # the planner's fixed costs, measured where the check runs
    assert 0 < fixed["layer_overhead_s"] < 1 and 0 < fixed["param_overhead_s"] < 1
    rates = figs["sampler"]["m_edges_per_s"]  # on the CPU: numpy, and the torch backend there
    assert set(rates) == {"fleetgnn", "fleetgnn torch (CPU)"} and all(r > 0 for r in rates.values())
    cases = list(figs["epochs"])
    assert len(cases) == 2 and cases[0].startswith("GCN") and cases[1].startswith("SAGE")
    pyg = res["host"]["torch_geometric"] is not None
    for case in figs["epochs"].values():
        # fleetgnn in float32 and in bf16 autocast, and PyG in its two formats where it runs
        assert len(case["median_s"]) == (4 if pyg else 2), case
        assert all(d < 1e-4 for d in case["max_abs_logit_diff"].values())  # PyG: same function
        assert case["bf16_over_float32"] > 0  # bf16 autocast's epoch against float32's

    # the planner's epochs against the measured ones
    compared = res["steps"]["plan"]["compared"]
    assert {c["engine"] for c in compared} >= {"minibatch", "split", "fullgraph", "offload"}
    assert all(c["predicted_epoch_s"] > 0 and c["measured_epoch_s"] > 0 for c in compared)


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
    with pytest.raises(SystemExit):
        mod.parse_args([str(tmp_path), "--bench-parts", "gather,tiers"])
    assert "unknown bench part(s) ['tiers']" in capsys.readouterr().err


def test_cuda_runs_and_their_baselines(tmp_path, monkeypatch):
    """On CUDA (no GPU needed: the runs are faked): which runs, against which CPU baseline."""
    check = _load_check()
    argv = [str(tmp_path / "out"), "--device", "cuda", "--cache-dir", str(tmp_path / "c")]
    c = check.Check(check.parse_args(argv))
    c.result["steps"]["data"] = {
        "status": "passed",
        "datasets": {"engine_data": {"path": str(tmp_path / "d")}},
    }
    ran = []

    def fake_run(run, data, tmp, timeout):
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
