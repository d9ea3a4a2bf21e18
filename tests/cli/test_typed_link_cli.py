"""Link prediction on a relation of a typed dataset from the command line."""

import json

import pytest

from fleetgnn.cli.main import main
from fleetgnn.graph import write_typed_dataset
from fleetgnn.graph.hetero_toy import toy_mag


@pytest.fixture
def toy(tmp_path):
    g = toy_mag(num_papers=40, num_authors=20, num_fields=4, seed=1)
    return write_typed_dataset(g, tmp_path / "toy", source="test")


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
