"""Link prediction on a relation of a typed dataset from the command line."""

import json

import pytest

from fleetgnn.cli.main import main
from fleetgnn.graph import open_dataset, write_dataset
from fleetgnn.graph.edge_split import load_edge_split
from fleetgnn.graph.hetero_toy import toy_mag


@pytest.fixture
def toy(tmp_path):
    g = toy_mag(num_papers=40, num_authors=20, num_fields=4, seed=1)
    return write_dataset(g, tmp_path / "toy", source="test")


def _train(data, run, *extra):
    return main(
        [
            "train",
            "--dataset",
            str(data),
            "--model",
            "rgcn",
            "--task",
            "link",
            "--run-dir",
            str(run),
            "--no-progress",
            "--quiet",
            "--set",
            "train.device=cpu",
            *extra,
        ]
    )


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--set", "train.link_relation=paper,writes,author"], "author,writes,paper"),
        ([], "needs train.link_relation"),
        (["--engine", "fullgraph", "--set", "train.link_relation=cites"], "does not train"),
    ],
    ids=["unknown-relation", "no-relation", "fullgraph"],
)
def test_refusals_are_one_line(toy, tmp_path, capsys, extra, words):
    assert _train(toy, tmp_path / "run", *extra) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err


@pytest.mark.slow
def test_mag_like_cites_trains_and_validation_auc_rises(tmp_path, capsys):
    data = tmp_path / "mag"
    argv = ["prepare", "synthetic", "--preset", "mag-like", "--scale", "0.002", "--out", str(data)]
    assert main(argv) == 0
    run = tmp_path / "run"
    extra = [
        "--mode",
        "minibatch",
        "--epochs",
        "3",
        "--set",
        "train.link_relation=paper,cites,paper",
        "--set",
        "train.fanouts=[5,5]",
        "--set",
        "train.batch_size=256",
    ]
    assert _train(data, run, *extra) == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    auc = [r["val_auc"] for r in rows if r.get("val_auc") is not None]
    assert len(auc) == 3 and auc[-1] > 0.6 and auc[-1] > auc[0]
    assert (data / "edge_splits" / "paper.cites.paper-val0.05-test0.1-seed0" / "meta.json").exists()


@pytest.mark.slow
def test_mag_like_link_on_split_at_two_processes_prints_test_auc(tmp_path, capfd):
    """The split engine trains link prediction on a typed relation from the command line."""
    data = tmp_path / "mag"
    argv = ["prepare", "synthetic", "--preset", "mag-like", "--scale", "0.01", "--out", str(data)]
    assert main(argv) == 0
    capfd.readouterr()
    run = tmp_path / "run"
    argv = ["train", "--dataset", str(data), "--task", "link", "--model", "rgcn"]
    argv += ["--engine", "split", "--nproc", "2", "--epochs", "1", "--run-dir", str(run)]
    for kv in ("link_relation=paper,cites,paper", "eval_edges=200", "batch_size=4096"):
        argv += ["--set", f"train.{kv}"]
    assert main(argv) == 0, capfd.readouterr().err
    out = capfd.readouterr().out  # rank 0's epoch line and summary (a worker's stdout)
    assert "test auc" in out and "test_auc" in out and "run summary (split)" in out
    (row,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert row["engine"] == "split" and row["world_size"] == 2
    assert 0.0 <= row["test_auc"] <= 1.0 and row["loss"] > 0
    split = load_edge_split(
        open_dataset(data), data / "edge_splits" / "paper.cites.paper-val0.05-test0.1-seed0"
    )  # every training pair scored once in the epoch, by the owner of its source
    assert sum(row["extra"]["per_rank"]["count"]) == split.pos["train"].shape[1]
