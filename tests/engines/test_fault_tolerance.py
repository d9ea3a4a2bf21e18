"""A worker killed mid-epoch: the elastic launcher restarts the group, which resumes from the
latest checkpoint, ends with the parameters of an uninterrupted run, and records the restart (with
the rank that failed) in metrics.jsonl."""

import json
from pathlib import Path

import pytest
import torch

from fleetgnn.distributed import launch, shm_dir
from fleetgnn.graph import write_dataset
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.train import load_config, read_metrics, resume_point
from fleetgnn.train.checkpoint import load_checkpoint

from .fault_worker import crashing_worker


@pytest.mark.slow
def test_killed_worker_resumes_to_identical_parameters(tmp_path):
    data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=2), tmp_path / "data")
    cfg = load_config(
        None,
        [
            "train.engine=minibatch",
            "train.nproc=2",
            "train.epochs=3",
            "train.batch_size=16",
            "train.fanouts=[4,3]",
            "model.hidden=8",
            "train.checkpoint_every=2",
            "train.dtype=float64",
        ],
    ).to_dict()
    before = {p.name for p in Path(shm_dir()).iterdir()}
    launch(crashing_worker, args=(cfg, str(tmp_path / "a"), str(data), (-1, -1)), nproc=2)
    launch(
        crashing_worker,
        args=(cfg, str(tmp_path / "b"), str(data), (1, 3)),
        nproc=2,
        max_restarts=1,
    )
    assert (tmp_path / "b" / "killed-rank-1").read_text() == "1 3"  # the crash really happened
    assert not (tmp_path / "a" / "killed-rank-1").exists()
    a = load_checkpoint(tmp_path / "a" / "checkpoints" / "last.pt")
    b = load_checkpoint(tmp_path / "b" / "checkpoints" / "last.pt")
    for name, value in a["engine"]["model"].items():
        assert torch.equal(value, b["engine"]["model"][name]), name
    summary_a = json.loads((tmp_path / "a" / "summary.json").read_text())
    summary_b = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary_a["test_acc"] == summary_b["test_acc"]
    assert summary_b["epochs"] == 3
    lines = [json.loads(line) for line in open(tmp_path / "b" / "metrics.jsonl")]
    assert [r["epoch"] for r in lines if "event" not in r] == [0, 1, 2]
    (event,) = [r for r in lines if "event" in r]
    assert event["event"] == "restart" and event["attempt"] == 1
    assert event["failed_ranks"] == [1] and "SIGKILL" in event["failures"]["1"]
    # it continued from the last checkpoint before the crash at epoch 1, step 3
    assert (event["at_epoch"], event["at_step"]) == (1, 2)
    assert [r["epoch"] for r in read_metrics(tmp_path / "b" / "metrics.jsonl")] == [0, 1, 2]
    assert resume_point(tmp_path / "b") == (3, 0)
    assert not any("event" in r for r in map(json.loads, open(tmp_path / "a" / "metrics.jsonl")))
    after = {p.name for p in Path(shm_dir()).iterdir()}
    assert not {n for n in after - before if n.startswith("fleetgnn")}, "leaked shared memory"
