"""``fleetgnn train`` on a dataset with times: a full-graph engine is refused in one line before
anything starts (no run directory left), and ``--engine auto`` plans over the engines that sample
the task in time instead of picking a full-graph run that would then be refused."""

import json

import pytest

from fleetgnn.cli.main import main
from fleetgnn.engines.link import TEMPORAL_ENGINES, TEMPORAL_NODE_ENGINES


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("temporal_cli") / "tl"
    argv = ["prepare", "synthetic", "--preset", "temporal-like", "--scale", "0.001"]
    assert main([*argv, "--out", str(out)]) == 0
    return out


SMALL = ["--set", "train.fanouts=[4,3]", "--set", "train.batch_size=128"]


@pytest.mark.parametrize("task", ["node", "link"])
@pytest.mark.parametrize("engine", ["fullgraph", "offload", "reference"])
def test_a_full_graph_run_of_a_temporal_task_is_refused_before_it_starts(
    data, tmp_path, capsys, task, engine
):
    run = tmp_path / "run"
    argv = ["train", "--dataset", str(data), "--task", task, "--engine", engine, "--mode", "full"]
    assert main([*argv, "--epochs", "1", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "worker failed" not in err
    assert f"the {engine} engine (mode=full) does not train temporal" in err
    assert "train.temporal=off" in err
    assert not run.exists()  # refused before the run directory was made


@pytest.mark.parametrize(
    "task, pairs, extra",
    [
        ("node", TEMPORAL_NODE_ENGINES, []),
        ("link", TEMPORAL_ENGINES, ["--set", "train.eval_edges=200"]),
    ],
)
def test_engine_auto_plans_over_the_engines_that_sample_in_time(
    data, tmp_path, capsys, task, pairs, extra
):
    run = tmp_path / "run"
    argv = ["train", "--dataset", str(data), "--task", task, "--engine", "auto", "--epochs", "1"]
    assert main([*argv, *SMALL, *extra, "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"temporal {task} task: planned over" in out
    plan = json.loads((run / "plan.json").read_text())
    assert (plan["choice"], plan["mode"]) in pairs
    summary = json.loads((run / "summary.json").read_text())
    assert summary["engine"] == plan["choice"]
