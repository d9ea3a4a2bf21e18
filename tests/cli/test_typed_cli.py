"""Typed datasets on the command line: ``prepare ogb`` on OGB's typed layout, ``info``."""

import json

import numpy as np
import pytest

from fleetgnn.cli.main import main
from fleetgnn.graph import open_dataset, write_dataset
from fleetgnn.graph.hetero import HeteroSchema, from_typed_edges
from tests.graph.test_loaders_ogb_hetero import _write_mag

CITES = ("paper", "cites", "paper")
WRITES = ("author", "writes", "paper")


@pytest.fixture
def typed(tmp_path):
    schema = HeteroSchema(("paper", "author"), (5, 3), (CITES, WRITES), target="paper")
    g = from_typed_edges(
        schema,
        {CITES: ([0, 1, 2, 3], [1, 2, 3, 4]), WRITES: ([0, 1, 2], [0, 0, 4])},
        x={"paper": np.ones((5, 4), np.float32)},
        y=np.array([0, 1, 2, 0, -1]),
        train_mask=np.array([True, True, False, False, False]),
        test_mask=np.array([False, False, True, True, False]),
        name="toy",
    )
    return write_dataset(g, tmp_path / "typed", source="test")


def test_info_json_shows_the_schema(typed, capsys):
    assert main(["info", str(typed), "--json"]) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert info["kind"] == "typed" and info["target"] == "paper" and info["num_classes"] == 3
    assert [{k: v for k, v in t.items() if k != "node_time"} for t in info["node_types"]] == [
        {"name": "paper", "num_nodes": 5, "features": 4, "feature_dtype": "float32"},
        {"name": "author", "num_nodes": 3, "features": None, "feature_dtype": None},
    ]  # an untimed dataset: no node times, no edge times anywhere
    for t in info["node_types"]:
        assert t.pop("node_time") is None
    assert info["edge_time"] is None and info["node_time"] is None
    assert all(r["edge_time"] is None for r in info["relations"])
    assert [(r["name"], r["num_edges"]) for r in info["relations"]] == [("cites", 4), ("writes", 3)]
    assert (info["num_train"], info["num_val"], info["num_test"]) == (2, 0, 2)
    assert info["labelled_nodes"] == 4 and info["source"] == "test" and info["stamp_valid"]


def test_info_table_names_types_relations_and_embeddings(typed, capsys):
    assert main(["info", str(typed)]) == 0
    out = capsys.readouterr().out
    for words in ("paper (target)", "learnable embedding", "author -writes-> paper", "3 classes"):
        assert words in out


def test_homogeneous_command_refuses_typed_data_in_one_line(typed, capsys):
    assert main(["partition", str(typed), "--parts", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "typed (heterogeneous) dataset" in err and "'fleetgnn info'" in err


def test_prepare_ogb_reads_the_typed_layout(tmp_path, capsys):
    _write_mag(tmp_path / "ogbn_mag")
    argv = ["prepare", "ogb", "--root", str(tmp_path / "ogbn_mag"), "--out", str(tmp_path / "d")]
    assert main([*argv, "--add-reverse"]) == 0
    assert "rev_writes" in capsys.readouterr().out  # the schema, printed by info
    g = open_dataset(tmp_path / "d")
    assert g.schema.target == "paper" and len(g.schema.relations) == 8
    assert main([*argv, "--overwrite", "--undirected"]) == 2
    assert "use --add-reverse instead of --undirected" in capsys.readouterr().err


def test_prepare_synthetic_typed_preset(tmp_path, capsys):
    out = tmp_path / "mag"
    argv = ["prepare", "synthetic", "--preset", "mag-like", "--scale", "0.001", "--out", str(out)]
    assert main(argv) == 0
    assert "learnable embedding" in capsys.readouterr().out
    assert open_dataset(out).schema.count("paper") == 736
    assert main(["prepare", "synthetic", "--preset", "nope", "--out", str(tmp_path / "n")]) == 2
    assert "mag-like, igbh-like" in capsys.readouterr().err


@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    """A tiny mag-like dataset (736 papers, 4 node types, 4 relations), written once."""
    out = tmp_path_factory.mktemp("typed") / "mag"
    argv = ["prepare", "synthetic", "--preset", "mag-like", "--scale", "0.001", "--out", str(out)]
    assert main(argv) == 0
    return out


def _train(mag, run, *extra):
    return ["train", "--dataset", str(mag), "--run-dir", str(run), "--quiet", *extra]


def _epochs(run):
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if '"epoch"' in x and '"event"' not in x]


@pytest.mark.parametrize("model", ["rgcn", "rgat"])
def test_train_on_a_typed_dataset_and_resume(mag, tmp_path, model):
    run = tmp_path / "run"
    argv = _train(mag, run, "--model", model, "--engine", "reference", "--epochs", "2")
    assert main(argv) == 0
    rows = _epochs(run)
    assert [r["epoch"] for r in rows] == [0, 1] and all(0 <= r["test_acc"] <= 1 for r in rows)
    cfg = (run / "config.yaml").read_text()
    assert f"name: {model}" in cfg and "hidden: 64" in cfg  # the typed model's defaults recorded
    assert main(["train", "--resume", str(run), "--epochs", "3", "--quiet"]) == 0
    assert [r["epoch"] for r in _epochs(run)] == [0, 1, 2]


def test_minibatch_with_relation_fanouts_matches_python_api(mag, tmp_path):
    """``train.relation_fanouts`` reaches the sampler: the CLI's losses are the API's."""
    from fleetgnn.graph import open_dataset
    from fleetgnn.train import engine_from_config, load_config

    fanouts = "{cites: [4, 2], writes: [3, 0], affiliated_with: [0, 2], has_topic: [2, 2]}"
    sets = ["train.batch_size=200", f"train.relation_fanouts={fanouts}", "train.dtype=float64"]
    run = tmp_path / "run"
    extra = ["--model", "rgcn", "--engine", "reference", "--mode", "minibatch", "--epochs", "1"]
    argv = _train(mag, run, *extra)
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 0
    cli_loss = _epochs(run)[0]["loss"]
    keys = [f"data.dataset={mag}", "model.name=rgcn", "train.engine=reference"]
    cfg = load_config(None, [*keys, "train.mode=minibatch", *sets])
    with engine_from_config(cfg, open_dataset(mag)) as engine:
        assert engine.sampler.fanouts[("author", "writes", "paper")] == (3, 0)
        stats = engine.run_epoch(0)
    api_loss = sum(s.loss_sum for s in stats) / sum(s.count for s in stats)
    assert api_loss == pytest.approx(cli_loss, rel=1e-9)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (
            ["--model", "rgcn", "--engine", "fullgraph"],
            "use engine reference or minibatch or split",
        ),
        (["--model", "rgat", "--engine", "split"], "cannot run HeteroGNN (R-GAT's attention"),
        (
            ["--model", "rgat", "--engine", "split", "--task", "link"]
            + ["--set", "train.link_relation=paper,cites,paper"],
            "cannot run LinkModel (R-GAT's attention",
        ),
        (["--model", "sage"], "choose one of rgcn, rgat, hetero-sage"),
        (["--model", "rgcn", "--set", "train.relation_fanouts={cites: [1, 1]}"], "no fanouts"),
        (["--model", "rgcn", "--task", "link"], "needs train.link_relation: one of"),
        (["--model", "rgcn", "--set", "train.relation_fanouts={cites: 3}"], "must map relation"),
    ],
)
def test_typed_run_refusals_are_one_line(mag, tmp_path, capsys, extra, words):
    assert main(_train(mag, tmp_path / "r", "--epochs", "1", *extra)) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and words in err


def test_typed_model_on_a_homogeneous_dataset_is_one_line(tmp_path, capsys):
    out = tmp_path / "tiny"
    argv = ["prepare", "synthetic", "--preset", "tiny", "--out", str(out)]
    assert main(argv) == 0
    assert main(_train(out, tmp_path / "r", "--model", "rgat")) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "is a typed model" in err


def test_predict_on_a_typed_run_is_refused_in_one_line(mag, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(_train(mag, run, "--model", "rgcn", "--engine", "reference", "--epochs", "1")) == 0
    assert main(["predict", str(run), "--out", str(tmp_path / "p.npy")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "typed (heterogeneous) dataset" in err and "'fleetgnn train'" in err


def test_plan_on_a_typed_dataset_names_only_typed_engines(mag, capsys):
    assert main(["plan", "--dataset", str(mag), "--model", "rgat", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert plan["choice"] in ("reference", "minibatch")
    assert set(plan["engines"]) <= {"reference", "minibatch"}  # split cannot host R-GAT
    assert "homogeneous view" in plan["workload"]["source"]
    assert main(["plan", "--dataset", str(mag), "--model", "rgcn", "--nproc", "2", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "split" in plan["engines"]


@pytest.mark.slow
def test_train_typed_split_at_two_processes(mag, tmp_path):
    """The split engine trains a typed dataset from the command line and reports accuracy."""
    run = tmp_path / "run"
    extra = ["--model", "rgcn", "--engine", "split", "--epochs", "1", "--nproc", "2"]
    assert main(_train(mag, run, *extra, "--set", "train.batch_size=128")) == 0
    (row,) = _epochs(run)
    assert 0 <= row["test_acc"] <= 1 and row["loss"] > 0
    assert "engine: split" in (run / "config.yaml").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("model", ["rgcn", "rgat"])
def test_train_typed_minibatch_at_two_processes(mag, tmp_path, model):
    run = tmp_path / "run"
    extra = ["--model", model, "--engine", "minibatch", "--epochs", "2"]
    argv = _train(mag, run, *extra, "--nproc", "2", "--set", "train.batch_size=128")
    assert main(argv) == 0
    rows = _epochs(run)
    assert [r["epoch"] for r in rows] == [0, 1] and rows[-1]["world_size"] == 2
    assert main(["train", "--resume", str(run), "--epochs", "3", "--quiet"]) == 0
    assert [r["epoch"] for r in _epochs(run)] == [0, 1, 2]


@pytest.mark.slow
def test_engine_auto_on_a_typed_dataset_plans_a_typed_engine(mag, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "--dataset", str(mag), "--run-dir", str(run), "--model", "rgcn"]
    assert main([*argv, "--engine", "auto", "--epochs", "1", "--nproc", "2"]) == 0
    plan = json.loads((run / "plan.json").read_text())
    assert plan["choice"] in ("reference", "minibatch")
