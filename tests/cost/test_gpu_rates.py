"""The GPU profiles' rates from the committed GPU checks: derivation, package data, the plan."""

import copy
import dataclasses
import importlib.util
import json
import re
from pathlib import Path

import pytest

from fleetgnn.config import load_config
from fleetgnn.cost import PROFILES, make_plan, predict_engine, workload_from_config
from fleetgnn.cost.gpu_rates import (
    DATA_FILE,
    GPU_PROFILES,
    HOST_SAMPLER,
    check_rates,
    derive_rates,
    dumps,
    load_rates,
    measured_rates,
    read_checks,
)
from fleetgnn.cost.hardware import DEFAULT_SAMPLE_RATE
from fleetgnn.cost.planner import BUILTIN_RATES
from fleetgnn.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "gpu"
FULL_CHECK = "gpu-check-h100-stop34.json"  # the newest H100 check whose whole bench step ran
#: a later bench of seven parts, the first to time the fixed costs (part overheads)
BENCH_CHECK = "gpu-check-h100-stop35-bench.json"
#: the newest bench (copy, gather_tiers, sampler, ...): the newest figures for those
GATHER_CHECK = "gpu-check-h100-stop35-sampler.json"


def _figures(name=FULL_CHECK):
    return json.loads((RESULTS / name).read_text())["steps"]["bench"]["figures"]


def test_package_data_equals_what_the_committed_checks_give():
    """gpu_rates.json is derived from benchmarks/results/gpu/*.json, byte for byte, and ships
    in the wheel (the benchmarks folder does not)."""
    derived = derive_rates(read_checks(RESULTS))
    assert derived == load_rates()
    assert dumps(derived) == DATA_FILE.read_text()
    section = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.package-data]")[1]
    assert '"cost/gpu_rates.json"' in section.split("\n[")[0]
    # per field the newest check that measured it: the newest bench's copy, gather and sampler,
    # the one before's fixed costs, the full check's others (the engines-only and pytest-only
    # checks measured nothing)
    h100 = derived["profiles"]["h100"]
    assert set(h100["checks"]) == {FULL_CHECK, BENCH_CHECK, GATHER_CHECK}
    by_check = {f: r["check"] for f, r in h100["rates"].items()}
    assert {f for f, c in by_check.items() if c == GATHER_CHECK} == {
        "local",
        "gather_rate",
        "sample_rate",
        "device_sample_rate",
    }
    assert {f for f, c in by_check.items() if c == BENCH_CHECK} == {
        "layer_overhead",
        "param_overhead",
    }
    assert {f for f, c in by_check.items() if c == FULL_CHECK} == {"h2d", "spmm_rate"}


def test_h100_takes_the_checks_rates_and_says_which_are_assumed():
    figs, gather = _figures(), _figures(GATHER_CHECK)
    p = PROFILES["h100"]
    assert p.bandwidth["local"] == gather["copy_gbps"] * 1e9
    assert p.bandwidth["h2d"] == figs["h2d"]["pinned_gbps"] * 1e9
    # the fastest exact kernel (the one kernels.MEASURED chose), its gathered bytes once
    kernels = gather["gather_tiers"]["kernels"]
    assert p.gather_rate == kernels["triton"]["read_written_gbps"] / 2 * 1e9
    assert p.gather_rate > kernels["index_select"]["read_written_gbps"] / 2 * 1e9
    # the engines sample on the host: the numpy path's rate, not the CUDA sampler's
    sampler = gather["sampler"]["m_edges_per_s"]
    assert p.sample_rate == sampler[HOST_SAMPLER] * 1e6
    assert p.sample_rate < sampler["fleetgnn"] * 1e6 / 10
    # the torch sampler, CSC on the GPU, under its fastest Fisher-Yates kernel (kernels.MEASURED)
    assert gather["sampler"]["fisher_yates"] == "torch"  # the default when the check ran
    fastest = sampler["fleetgnn, fisher_yates=triton"]
    assert fastest > sampler["fleetgnn"] and p.device_sample_rate == fastest * 1e6
    # spmm: 2 E D multiply-adds per forward+backward case (sum, mean) over their medians
    both = [v["median_s"] for k, v in figs["gspmm"].items() if "forward+backward" in k]
    assert len(both) == 2
    size = json.loads((RESULTS / FULL_CHECK).read_text())["sizes"]["gspmm"]
    assert (size["edges"], size["dim"]) == (16_000_000, 64)  # as the cases' names say
    assert p.spmm_rate == pytest.approx(2 * 16e6 * 64 * 2 / sum(both), rel=1e-12)
    assert p.elementwise_rate == p.bandwidth["local"] / 12  # follows the measured local
    # what no check measured keeps its built-in figure, named as assumed
    assert p.bandwidth["d2h"] == 50e9 and p.gemm_rate == 50e12
    fixed = _figures(BENCH_CHECK)["overheads"]  # measured since stop 35
    assert p.layer_overhead == fixed["layer_overhead_s"]
    assert "layer_overhead = 150 us" not in p.source
    assert p.param_overhead == fixed["param_overhead_s"]
    assert re.search(r"d2h = the built-in h2d, 50 GB/s \(assumed", p.source)
    for text in (FULL_CHECK, BENCH_CHECK, GATHER_CHECK, "NVIDIA H100 80GB HBM3", "torch 2.11"):
        assert text in p.rates_from and text in p.source
    # h200: no check ran on it; its rates are the built-in rules, the sampler's assumed
    q = PROFILES["h200"]
    assert measured_rates("h200") is None and q.rates_from == ""
    assert (
        q.sample_rate == DEFAULT_SAMPLE_RATE and "sample_rate = 5e+06 edges/s assumed" in q.source
    )
    assert q.gather_rate == 0.4 * q.bandwidth["local"]


def _check(gpu="NVIDIA H100 80GB HBM3", date="2026-11-27T12:00:00+00:00", figures=None):
    figures = figures or {
        "copy_gbps": 2000.0,
        "h2d": {"pinned_gbps": 40.0, "bytes": 1 << 30},
        "gather_tiers": {"rows": 10, "row_bytes": 400, "device_gbps": 500.0},
        "gspmm": {
            "gspmm sum forward, x": {"median_s": 0.001},
            "gspmm sum forward+backward, x": {"median_s": 0.003},
            "gspmm mean forward+backward, x": {"median_s": 0.005},
        },
        "sampler": {"case": "c", "m_edges_per_s": {"fleetgnn": 90.0, HOST_SAMPLER: 4.0}},
        "overheads": {"layer_overhead_s": 4e-4, "param_overhead_s": 3e-5},
    }
    names = ("copy", "h2d", "gather_tiers", "gspmm", "sampler", "overheads")
    parts = {k: {"status": "passed"} for k in names}
    return {
        "device": "cuda",
        "sizes": {"gspmm": {"edges": 1000, "dim": 8}},
        "host": {"gpu": gpu, "torch": "2.x", "cuda": "13", "date": date, "git_commit": "abc"},
        "steps": {"bench": {"parts": parts, "figures": figures}},
    }


def test_derivation_rules():
    rates = check_rates(_check(), "a.json")
    got = {k: v["value"] for k, v in rates.items()}
    assert got == {
        "local": 2000e9,
        "h2d": 40e9,
        "gather_rate": 500e9,
        "device_sample_rate": 90e6,
        "spmm_rate": 2 * 1000 * 8 * 2 / 0.008,  # the two forward+backward cases only
        "sample_rate": 4e6,
        "layer_overhead": 4e-4,  # the fixed costs of a step, measured on the device
        "param_overhead": 3e-5,
    }
    # a part that failed gives nothing; the newest check wins field by field
    old = _check(date="2026-11-01T00:00:00+00:00")
    new = _check(date="2026-11-30T00:00:00+00:00")
    new["steps"]["bench"]["figures"]["copy_gbps"] = 2500.0
    new["steps"]["bench"]["parts"]["h2d"]["status"] = "failed"
    h100 = derive_rates([("new.json", new), ("old.json", old)])["profiles"]["h100"]
    assert h100["rates"]["local"] == {**rates["local"], "value": 2500e9, "check": "new.json"}
    assert h100["rates"]["h2d"]["check"] == "old.json"
    assert set(h100["checks"]) == {"new.json", "old.json"}
    m = measured_rates("h100", derive_rates([("new.json", new), ("old.json", old)]))
    assert m is not None and m.values["local"] == 2500e9
    assert "new.json (NVIDIA H100 80GB HBM3, torch 2.x, 2026-11-30): local 2.5 TB/s" in m.rates_from
    assert "layer overhead 400 us, param overhead 30 us" in m.rates_from
    assert m.values["layer_overhead"] == 4e-4
    # a check without figures (an engines-only run) contributes nothing
    bare = _check()
    bare["steps"] = {"engines": {}}
    assert derive_rates([("bare.json", bare)])["profiles"] == {}
    # one-line errors: a GPU no profile describes, a CPU dry run
    with pytest.raises(ConfigError, match=r"x\.json: host\.gpu='NVIDIA A10' matches no built-in"):
        derive_rates([("x.json", _check(gpu="NVIDIA A10"))])
    cpu = copy.deepcopy(_check())
    cpu["device"] = "cpu"
    with pytest.raises(ConfigError, match="only a check run with --device cuda"):
        check_rates(cpu, "cpu.json")
    assert set(GPU_PROFILES.values()) <= set(PROFILES)


def test_rates_script_writes_and_checks(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location(
        "gpu_rates_script", RESULTS.parents[1] / "gpu" / "rates.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--check"]) == 0  # the committed package data is current
    out = tmp_path / "rates.json"
    out.write_text("{}\n")
    assert script.main(["--out", str(out), "--check"]) == 1
    assert script.main(["--out", str(out)]) == 0 and out.read_text() == DATA_FILE.read_text()
    (tmp_path / "empty").mkdir()
    assert script.main(["--results", str(tmp_path / "empty"), "--out", str(out)]) == 2
    assert "no GPU check" in capsys.readouterr().err


def test_plan_says_where_the_rates_come_from_and_samples_at_the_profiles_rate():
    shape = {"nodes": 2_000, "edges": 20_000, "features": 32, "classes": 4}
    cfg = load_config(None, ["model.name=sage", "train.mode=minibatch"])
    wl = workload_from_config(cfg, shape=shape)
    sampled = {"mode": "minibatch", "engines": ["minibatch", "split"]}  # no step-peak probe
    plan = make_plan(wl, PROFILES["h100"], 1, **sampled)
    assert f"rates from: {PROFILES['h100'].rates_from}" in plan.table()
    assert plan.to_dict()["rates_from"] == PROFILES["h100"].rates_from
    assert make_plan(wl, PROFILES["h200"], 1, **sampled).rates_from == BUILTIN_RATES
    # sampling time is the sampled edges over the profile's sample_rate
    hw = PROFILES["h100"]
    for engine in ("minibatch", "split"):
        knobs = {"sampling": "host"} if engine == "minibatch" else {}
        one = predict_engine(engine, wl, hw, 1, knobs).breakdown["sample"]
        faster = dataclasses.replace(hw, sample_rate=2 * hw.sample_rate)
        two = predict_engine(engine, wl, faster, 1, knobs)
        assert one > 0 and two.breakdown["sample"] == pytest.approx(one / 2, rel=1e-12)
    # minibatch samples a CSC replica on the GPU when it takes at most half the device budget
    # (store.sampling=auto): at the device sampler's rate, the replica's bytes on the device
    host = predict_engine("minibatch", wl, hw, 1, {"sampling": "host"})
    auto = predict_engine("minibatch", wl, hw, 1)
    replica = (2_000 + 1) * 8 + 20_000 * 8
    assert auto.knobs["sampling"] == "device" and host.knobs["sampling"] == "host"
    ratio = hw.sample_rate / hw.device_sample_rate
    assert auto.breakdown["sample"] == pytest.approx(host.breakdown["sample"] * ratio, rel=1e-12)
    assert auto.memory["device"] == host.memory["device"] + replica
    small = predict_engine("minibatch", wl, hw, 1, {"device_budget": 2 * replica - 1})
    assert small.knobs["sampling"] == "host"  # the replica would take more than half
    with pytest.raises(ConfigError, match="sample_rate=0 is invalid"):
        dataclasses.replace(hw, sample_rate=0)
