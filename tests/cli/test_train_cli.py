import json

import pytest
import torch

from fleetgnn.cli.main import main
from fleetgnn.train.checkpoint import load_checkpoint

SUMMARY_KEYS = {
    "test_acc",
    "val_acc",
    "best_epoch",
    "final_train_loss",
    "epochs",
    "mean_epoch_time_s",
    "engine",
    "world_size",
}


def _summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


def test_default_train_generates_and_caches_dataset(tmp_path, capsys):
    run = tmp_path / "run"
    argv = [
        "train",
        "--run-dir",
        str(run),
        "--epochs",
        "2",
        "--no-progress",
        "--set",
        "data.preset=tiny",
        "--set",
        f"data.cache_dir={tmp_path / 'cache'}",
    ]
    assert main(argv) == 0
    summary = _summary(run)
    assert SUMMARY_KEYS <= set(summary)
    assert summary["engine"] == "reference" and summary["world_size"] == 1
    assert summary["epochs"] == 2
    lines = (run / "metrics.jsonl").read_text().strip().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [0, 1]
    cached = list((tmp_path / "cache" / "datasets").glob("synthetic-tiny-x1-s0-*/meta.json"))
    assert len(cached) == 1
    assert "epoch   1" in capsys.readouterr().out


def test_resume_extends_a_finished_run(tmp_path):
    run = tmp_path / "run"
    common = [
        "--no-progress",
        "--set",
        "data.preset=tiny",
        "--set",
        f"data.cache_dir={tmp_path / 'cache'}",
    ]
    assert main(["train", "--run-dir", str(run), "--epochs", "1", *common]) == 0
    assert main(["train", "--resume", str(run), "--set", "train.epochs=2", "--no-progress"]) == 0
    assert _summary(run)["epochs"] == 2
    ckpt = load_checkpoint(run / "checkpoints" / "last.pt")
    assert all(torch.isfinite(v).all() for v in ckpt["engine"]["model"].values())
    # flags apply on resume: --epochs extends the run to that many epochs
    assert main(["train", "--resume", str(run), "--epochs", "4", "--no-progress"]) == 0
    assert _summary(run)["epochs"] == 4
    lines = (run / "metrics.jsonl").read_text().strip().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [0, 1, 2, 3]


def test_resume_refuses_flags_that_change_the_checkpoint(tmp_path, capsys):
    run = tmp_path / "run"
    common = ["--no-progress", "--set", "data.preset=tiny", "--set", f"data.cache_dir={tmp_path}"]
    assert main(["train", "--run-dir", str(run), "--epochs", "1", *common]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--model", "gcn", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "model.name" in err and "cannot resume" in err and "Traceback" not in err
    assert _summary(run)["epochs"] == 1


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["train", "--set", "model.nme=gcn"], "model.name"),
        (["train", "--set", "train.mode=sometimes"], "full"),
        (["train", "--engine", "offload"], "not available"),
        (["train", "--resume", "/nonexistent/run"], "config.yaml"),
        (["train", "--dataset", "/nonexistent/data"], "does not exist"),
    ],
)
def test_train_user_errors(argv, fragment, capsys):
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


def test_minibatch_engine_through_the_launcher(tmp_path):
    run = tmp_path / "mb"
    argv = [
        "train",
        "--engine",
        "minibatch",
        "--nproc",
        "2",
        "--epochs",
        "2",
        "--run-dir",
        str(run),
        "--no-progress",
        "--set",
        "data.preset=tiny",
        "--set",
        "data.scale=0.3",
        "--set",
        f"data.cache_dir={tmp_path / 'cache'}",
        "--set",
        "store.device_budget=8KB",
    ]
    assert main(argv) == 0
    summary = _summary(run)
    assert summary["engine"] == "minibatch" and summary["world_size"] == 2
    record = json.loads((run / "metrics.jsonl").read_text().strip().splitlines()[-1])
    assert set(record["extra"]["hit_rates"]) >= {"local", "peer", "host", "disk"}
    assert record["memory"]["device"] <= 8000


def test_fullgraph_engine_knobs_from_config(tmp_path):
    run = tmp_path / "fg"
    argv = [
        "train",
        "--engine",
        "fullgraph",  # implies full-graph mode: no --mode full needed
        "--nproc",
        "2",
        "--epochs",
        "2",
        "--model",
        "gcn",
        "--run-dir",
        str(run),
        "--no-progress",
        "--set",
        "data.preset=tiny",
        "--set",
        "data.scale=0.3",
        "--set",
        f"data.cache_dir={tmp_path / 'cache'}",
        "--set",
        "fullgraph.num_chunks=3",
        "--set",
        "fullgraph.depth=2",
        "--set",
        "fullgraph.tune=false",
    ]
    assert main(argv) == 0
    assert _summary(run)["engine"] == "fullgraph"
    for line in (run / "metrics.jsonl").read_text().strip().splitlines():
        extra = json.loads(line)["extra"]
        assert (extra["num_chunks"], extra["depth"]) == (3, 2)
        assert extra["volume_mgg_bytes"] >= extra["volume_dedup_bytes"] > 0
