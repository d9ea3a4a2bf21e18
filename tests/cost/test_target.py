"""Time to a target accuracy: ``fleetgnn plan --target-acc`` with given, recorded and probed
epochs-to-target, the ranking by time to target, and its errors."""

import json
import math
import re
import shutil

import pytest

from fleetgnn.cli.main import main
from fleetgnn.config import load_config
from fleetgnn.cost import PROFILES, EpochsToTarget, make_plan, workload_from_config
from fleetgnn.cost.planner import SHARES_WORK
from fleetgnn.errors import ConfigError
from fleetgnn.train import read_metrics

PRODUCTS = "nodes=2449029,edges=61859140,features=100,classes=47"
TARGET = 0.7


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny synthetic dataset and two real reference runs on it: full-graph and mini-batch."""
    from fleetgnn.graph.synthetic import prepare_synthetic

    root = tmp_path_factory.mktemp("target")
    data = prepare_synthetic(root / "tiny", preset="tiny")
    base = ["train", "--dataset", str(data), "--model", "gcn", "--quiet"]
    full, mb = root / "full", root / "mb"
    assert main([*base, "--mode", "full", "--epochs", "6", "--run-dir", str(full)]) == 0
    mb_args = ["--mode", "minibatch", "--epochs", "2", "--set", "train.batch_size=64"]
    assert main([*base, *mb_args, "--run-dir", str(mb)]) == 0
    return data, full, mb


def _first_reaching(run_dir, target):
    """Epochs to ``target`` read straight from the run's metrics (independent of the planner)."""
    for rec in read_metrics(run_dir / "metrics.jsonl"):
        if rec["val_acc"] is not None and rec["val_acc"] >= target:
            return rec["epoch"] + 1
    return None


def _plan(capsys, argv):
    code = main(["plan", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _plan_json(capsys, argv):
    code, out, err = _plan(capsys, [*argv, "--json"])
    assert code == 0, err
    return json.loads(out)


def _one_rank_order(names, key):
    """``names`` by ``key``, as one rank ranks them: engines that only divide work last."""
    return sorted((n for n in names if n not in SHARES_WORK), key=key) + sorted(
        (n for n in names if n in SHARES_WORK), key=key
    )


def _dataset_args(data):
    return ["--dataset", str(data), "--model", "gcn", "--hardware", "h100"]


def test_history_of_real_runs_gives_epochs_to_target_per_mode(runs, capsys):
    data, full, mb = runs
    want_full, want_mb = _first_reaching(full, TARGET), _first_reaching(mb, TARGET)
    assert want_full is not None and want_mb is not None  # the runs reach the target
    argv = [*_dataset_args(data), "--set", "train.batch_size=64", "--target-acc", str(TARGET)]
    out = _plan_json(capsys, [*argv, "--history", str(full), str(mb)])
    assert out["target_acc"] == TARGET and out["ranked_by"] == "time_to_target"
    est = out["epochs_to_target"]
    assert (est["full"]["epochs"], est["full"]["reached"]) == (want_full, True)
    assert (est["minibatch"]["epochs"], est["minibatch"]["reached"]) == (want_mb, True)
    assert str(full) in est["full"]["source"] and "reference" in est["full"]["source"]
    want = {"full": want_full, "minibatch": want_mb}
    for name, e in out["engines"].items():
        assert e["epochs_to_target"] == want[e["mode"]], name
        assert e["time_to_target_s"] == pytest.approx(want[e["mode"]] * e["epoch_s"])
    assert out["ranking"] == _one_rank_order(
        out["ranking"], lambda n: out["engines"][n]["time_to_target_s"]
    )
    assert out["choice"] == out["ranking"][0]
    assert "Ranked by time to validation accuracy 0.7" in out["reason"]

    # a target no run reached: lower bounds ("> K", K = epochs run), ranked by epoch time
    code, text, _ = _plan(capsys, [*argv[:-1], "0.999", "--history", str(full), str(mb)])
    assert code == 0
    assert "> 6" in text and "> 2" in text and "Ranked by epoch time" in text
    out = _plan_json(capsys, [*argv[:-1], "0.999", "--history", str(full), str(mb)])
    assert out["ranked_by"] == "epoch_s"
    assert out["epochs_to_target"]["full"] == {**out["epochs_to_target"]["full"], "epochs": 6}
    assert not out["epochs_to_target"]["full"]["reached"]
    assert all(e["epochs_to_target"] is None for e in out["engines"].values())


def test_history_maps_any_engine_to_its_mode(runs, tmp_path, capsys):
    """A ``fullgraph`` run (mode left null) counts for the full-graph mode; a config that
    differs from the plan's is named in the estimate's source."""
    data, full, _ = runs
    other = tmp_path / "fg"
    shutil.copytree(full, other)
    text = (other / "config.yaml").read_text()
    assert "engine: reference" in text and "mode: full" in text
    text = text.replace("engine: reference", "engine: fullgraph").replace(
        "mode: full", "mode: null"
    )
    (other / "config.yaml").write_text(text.replace("hidden: 16", "hidden: 32"))
    argv = [*_dataset_args(data), "--target-acc", str(TARGET), "--history", str(other)]
    out = _plan_json(capsys, [*argv, "--mode", "full"])
    est = out["epochs_to_target"]["full"]
    assert est["epochs"] == _first_reaching(full, TARGET)
    assert "fullgraph, full" in est["source"] and "model.hidden=32 (plan: 16)" in est["source"]


def test_probe_measures_what_a_full_run_records(runs, capsys):
    """``--probe-epochs``: a short reference run per mode finds the epoch the real run
    recorded, stops there, and states its cost."""
    data, full, mb = runs
    argv = [*_dataset_args(data), "--set", "train.batch_size=64", "--target-acc", str(TARGET)]
    out = _plan_json(capsys, [*argv, "--probe-epochs", "6"])
    est = out["epochs_to_target"]
    assert est["full"]["epochs"] == _first_reaching(full, TARGET) and est["full"]["reached"]
    assert est["minibatch"]["epochs"] == _first_reaching(mb, TARGET)
    for e in est.values():
        assert e["source"].startswith("probe: reference") and e["cost_s"] > 0
    assert "probe: reference full" in out["reason"] and out["ranked_by"] == "time_to_target"
    # an exact number given wins; only the other mode is probed
    out = _plan_json(capsys, [*argv, "--probe-epochs", "6", "--epochs-to-target", "full=40"])
    assert out["epochs_to_target"]["full"]["source"] == "given"
    assert out["epochs_to_target"]["minibatch"]["source"].startswith("probe")


def test_time_to_target_ranking_differs_from_epoch_time(capsys):
    shape = ["--shape", PRODUCTS, "--hardware", "h100", "--model", "sage"]
    plain = _plan_json(capsys, shape)
    assert plain["ranked_by"] == "epoch_s" and plain["target_acc"] is None
    assert all(e["time_to_target_s"] is None for e in plain["engines"].values())
    first = plain["engines"][plain["choice"]]
    slow_mode = first["mode"]
    fast_mode = "minibatch" if slow_mode == "full" else "full"
    rival = min(
        (
            n
            for n, e in plain["engines"].items()
            if e["fits"] and e["mode"] == fast_mode and n not in SHARES_WORK  # one rank
        ),
        key=lambda n: plain["engines"][n]["epoch_s"],
    )
    # the epoch-time winner's mode needs enough epochs to lose to the other mode's best
    many = math.ceil(3 * plain["engines"][rival]["epoch_s"] / first["epoch_s"]) + 1
    given = f"{slow_mode}={many},{fast_mode}=1"
    argv = [*shape, "--target-acc", "0.9", "--epochs-to-target", given]
    out = _plan_json(capsys, argv)
    assert out["choice"] == rival != plain["choice"] and out["ranked_by"] == "time_to_target"
    assert out["engines"][rival]["time_to_target_s"] == pytest.approx(
        out["engines"][rival]["epoch_s"]
    )
    code, text, _ = _plan(capsys, argv)
    assert code == 0 and "to target" in text.splitlines()[0] and "target s" in text
    assert f"choice: {rival}" in text and f"By epoch time alone {plain['choice']}" in text


def test_engines_without_an_estimate_are_ranked_after(capsys):
    shape = ["--shape", PRODUCTS, "--hardware", "h100", "--model", "sage"]
    out = _plan_json(capsys, [*shape, "--target-acc", "0.9", "--epochs-to-target", "full=500"])
    fitting = [n for n, e in out["engines"].items() if e["fits"]]
    known = [n for n in fitting if out["engines"][n]["mode"] == "full"]
    assert known and len(known) < len(fitting)
    assert out["ranking"][: len(known)] == _one_rank_order(
        known, lambda n: out["engines"][n]["time_to_target_s"]
    )
    for n in out["ranking"][len(known) :]:
        assert out["engines"][n]["epochs_to_target"] is None
        assert out["engines"][n]["time_to_target_s"] is None
    assert "no estimate of epochs to target for their mode" in out["reason"]
    code, text, _ = _plan(capsys, [*shape, "--target-acc", "0.9", "--epochs-to-target", "full=500"])
    assert code == 0
    rows = {line.split()[0]: line.split() for line in text.splitlines()[2:7]}
    assert rows["minibatch"][3:5] == ["?", "?"] and rows["reference"][3] == "500"


def test_make_plan_python_api():
    cfg = load_config(None, ["model.name=gcn"])
    wl = workload_from_config(
        cfg, shape={"nodes": 10**5, "edges": 10**6, "features": 64, "classes": 8}
    )
    hw = PROFILES["h100"]
    plain = make_plan(wl, hw, 1)
    assert plain.ranked_by == "epoch_s" and plain.to_dict()["target_acc"] is None
    bound = EpochsToTarget("minibatch", 4, reached=False, source="a short run")
    plan = make_plan(wl, hw, 1, target_acc=0.8, epochs_to_target={"full": 3, "minibatch": bound})
    assert plan.ranked_by == "time_to_target" and plan.modes[plan.choice] == "full"
    assert plan.time_to_target(plan.choice) == pytest.approx(
        3 * plan.predictions[plan.choice].epoch_s
    )
    assert "> 4 epochs" in plan.reason
    with pytest.raises(ConfigError, match="target-acc"):
        make_plan(wl, hw, 1, epochs_to_target={"full": 3})
    with pytest.raises(ConfigError, match="mode 'gpu'"):
        make_plan(wl, hw, 1, target_acc=0.8, epochs_to_target={"gpu": 3})
    with pytest.raises(ConfigError, match=r"\(0, 1\]"):
        make_plan(wl, hw, 1, target_acc=1.2)


def test_train_engine_auto_ranks_by_time_to_target(runs, tmp_path):
    data, _, _ = runs
    run = tmp_path / "auto"
    argv = ["train", "--engine", "auto", "--dataset", str(data), "--model", "gcn", "--epochs", "1"]
    argv += ["--run-dir", str(run), "--quiet", "--hardware", "h100"]
    argv += ["--target-acc", "0.7", "--epochs-to-target", "full=1,minibatch=1000"]
    assert main(argv) == 0
    plan = json.loads((run / "plan.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    assert plan["target_acc"] == 0.7 and plan["ranked_by"] == "time_to_target"
    assert plan["epochs_to_target"]["minibatch"]["epochs"] == 1000
    assert plan["mode"] == "full" and summary["engine"] == plan["choice"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--target-acc", "0"], r"--target-acc 0 must be a validation accuracy in \(0, 1\]"),
        (["--target-acc", "1.01"], r"in \(0, 1\]"),
        (["--target-acc", "80"], "for 80% write 0.8"),
        (["--target-acc", "high"], "'high' is not a number"),
        (["--target-acc", "0.8", "--epochs-to-target", "full:3"], "expected MODE=K"),
        (["--target-acc", "0.8", "--epochs-to-target", "gpu=3"], "MODE one of full, minibatch"),
        (["--target-acc", "0.8", "--epochs-to-target", "full=2.5"], "whole number of epochs"),
        (["--target-acc", "0.8", "--epochs-to-target", "full=3,full=4"], "twice"),
        (["--epochs-to-target", "full=3"], "add --target-acc"),
        (["--target-acc", "0.8", "--probe-epochs", "0"], "--probe-epochs must be a whole"),
        (["--target-acc", "0.8", "--probe-epochs", "3"], "--probe-epochs trains on the dataset"),
        (["--target-acc", "0.8", "--history", "HERE"], "no metrics.jsonl there"),
        (["--target-acc", "0.8", "--history", "HERE/nowhere"], "not a directory"),
    ],
)
def test_bad_requests_are_one_line_errors(extra, message, tmp_path, capsys):
    extra = [a.replace("HERE", str(tmp_path)) for a in extra]
    code, out, err = _plan(capsys, ["--shape", PRODUCTS, "--hardware", "h100", *extra])
    assert code == 2 and out == ""
    assert err.startswith("fleetgnn plan: error: ") and err.count("\n") == 1, err
    assert re.search(message, err), err


def test_history_run_without_an_evaluated_epoch_is_refused(runs, tmp_path, capsys):
    _, full, _ = runs
    broken = tmp_path / "broken"
    shutil.copytree(full, broken)
    lines = (broken / "metrics.jsonl").read_text().splitlines()
    recs = [json.loads(line) | {"val_acc": None} for line in lines]
    (broken / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    argv = ["--shape", PRODUCTS, "--hardware", "h100", "--target-acc", "0.8"]
    code, _, err = _plan(capsys, [*argv, "--history", str(broken)])
    assert code == 2 and "no evaluated epoch" in err and err.count("\n") == 1
