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


def test_resume_of_a_finished_run_says_so_and_how_to_continue(tmp_path, capsys):
    """Issue 25: ``--resume`` of a finished run exited 0 having trained nothing, without a word
    (with ``--quiet``); it now says the run is finished and which flag continues it."""
    run = tmp_path / "run"
    common = ["--no-progress", "--set", "data.preset=tiny"]
    common += ["--set", f"data.cache_dir={tmp_path / 'cache'}"]
    assert main(["train", "--run-dir", str(run), "--epochs", "2", "--quiet", *common]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "has finished its 2 epoch(s) (train.epochs=2); nothing to train" in err
    assert "pass a larger --epochs (e.g. --epochs 4)" in err
    # a resume that trains says nothing of the kind
    assert main(["train", "--resume", str(run), "--epochs", "3", "--quiet"]) == 0
    assert "nothing to train" not in capsys.readouterr().err
    assert _summary(run)["epochs"] == 3
    # stopped by train.max_steps: names that key
    steps = tmp_path / "steps"
    argv = ["train", "--run-dir", str(steps), "--set", "train.max_steps=1", "--quiet", *common]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(steps), "--quiet"]) == 0
    assert "--set train.max_steps=2" in capsys.readouterr().err


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
        (["train", "--resume", "/nonexistent/run"], "config.yaml"),
        (["train", "--dataset", "/nonexistent/data"], "does not exist"),
    ],
)
def test_train_user_errors(argv, fragment, capsys):
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


@pytest.mark.slow
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
    assert set(record["extra"]["hit_rates"]) >= {"local", "peer", "net", "host", "disk"}
    assert record["extra"]["store_gather"] == "one_sided"  # one host: shared memory
    assert record["traffic"]["net"] == 0
    assert record["memory"]["device"] <= 8000


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_minibatch_across_two_torchrun_nodes(tmp_path):
    """Two `torchrun --nnodes 2` on loopback (the issue's multi-host run): the default gather
    becomes two-sided (one log line on rank 0), cross-host bytes are `net`, and the host tier
    of each host stays within store.host_budget."""
    import os
    import subprocess
    import sys

    from fleetgnn.graph import write_dataset
    from fleetgnn.graph.synthetic import generate_graph, spec_for

    data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=2), tmp_path / "data")
    run = tmp_path / "run"
    port = _free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2"]
    cmd += ["--nproc-per-node", "1", "--rdzv-backend", "c10d"]
    cmd += ["--rdzv-endpoint", f"127.0.0.1:{port}", "-m", "fleetgnn", "train"]
    cmd += ["--engine", "minibatch", "--dataset", str(data), "--epochs", "2"]
    cmd += ["--run-dir", str(run), "--no-progress", "--set", "train.batch_size=32"]
    cmd += ["--set", "store.device_budget=4KB", "--set", "store.host_budget=6KB"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
        assert "Traceback" not in err and "one_sided=False" not in err
    logged = [ln for _, err in outs for ln in err.splitlines() if "two-sided gather" in ln]
    assert len(logged) == 1 and "2 ranks run on 2 hosts" in logged[0]
    record = json.loads((run / "metrics.jsonl").read_text().strip().splitlines()[-1])
    assert record["world_size"] == 2 and record["extra"]["store_gather"] == "two_sided"
    assert record["traffic"]["net"] > 0 and record["traffic"]["peer"] == 0
    requests = record["extra"]["store_requests"]
    assert requests["topology"]["net"] > 0 and requests["topology"]["peer"] == 0
    assert 0 < record["memory"]["host"] <= 6000


@pytest.mark.slow
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


@pytest.mark.slow
def test_offload_engine_with_a_budget_through_the_launcher(tmp_path, capsys):
    """``--engine offload --nproc 2 --set offload.device_budget=...`` (README): the chunk count
    comes from the budget, every rank's peak stays within it, and rows per channel add up."""
    common = ["train", "--engine", "offload", "--nproc", "2", "--epochs", "2", "--model", "gcn"]
    common += ["--no-progress", "--set", "data.preset=tiny", "--set", "data.scale=0.3"]
    common += ["--set", f"data.cache_dir={tmp_path / 'cache'}"]
    # a budget no chunking can meet: one line naming the setting, exit status 2
    no = [*common, "--run-dir", str(tmp_path / "no"), "--set", "offload.device_budget=1KB"]
    assert main(no) == 2
    assert "offload.device_budget" in capsys.readouterr().err
    run = tmp_path / "off"
    argv = [*common, "--run-dir", str(run), "--set", "offload.device_budget=200KB"]
    assert main(argv) == 0
    summary = _summary(run)
    assert summary["engine"] == "offload" and summary["world_size"] == 2
    for line in (run / "metrics.jsonl").read_text().strip().splitlines():
        rec = json.loads(line)
        extra = rec["extra"]
        assert extra["chunks"] >= 1 and extra["budget_bytes"] == 200_000
        peaks = extra["per_rank"]["peak_device_bytes"]
        assert len(peaks) == 2 and 0 < max(peaks) <= 200_000
        assert rec["memory"]["device"] <= 200_000
        vol = extra["volume_rows"]
        assert vol["baseline"] >= vol["inter"] >= vol["intra"] > 0
        rows = extra["per_rank"]["rows"]
        assert sum(r["peer"] for r in rows) > 0  # ranks read one another's buffers


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_max_steps_through_the_cli_with_resume(tmp_path):
    """``--set train.max_steps=N`` stops the run after N steps in all, resumed steps included."""
    run = tmp_path / "run"
    common = ["--no-progress", "--set", "data.preset=tiny", "--set", f"data.cache_dir={tmp_path}"]
    argv = ["train", "--run-dir", str(run), "--epochs", "3", "--set", "train.batch_size=128"]
    assert main([*argv, "--set", "train.max_steps=7", *common]) == 0
    summary = _summary(run)
    assert summary["steps_per_epoch"] == 5  # 600 training nodes in batches of 128
    assert summary["total_steps"] == 7 and summary["stopped"] == "max_steps"
    assert summary["test_acc"] is not None
    recs = _records(run)
    assert [(r["epoch"], r["num_steps"], r["evaluated"]) for r in recs] == [
        (0, 5, True),
        (1, 2, True),
    ]
    assert load_checkpoint(run / "checkpoints" / "last.pt")["trainer"]["global_step"] == 7
    resume = ["train", "--resume", str(run), "--no-progress"]
    assert main([*resume, "--set", "train.max_steps=12"]) == 0
    summary = _summary(run)
    assert summary["total_steps"] == 12 and summary["stopped"] == "max_steps"
    assert [(r["epoch"], r["num_steps"]) for r in _records(run)] == [(0, 5), (1, 5), (2, 2)]


@pytest.mark.slow
def test_max_steps_with_two_minibatch_processes(tmp_path):
    """Every rank stops at the same global step, mid-epoch (with a batch prefetched)."""
    run = tmp_path / "mb"
    argv = ["train", "--engine", "minibatch", "--nproc", "2", "--epochs", "3"]
    argv += ["--run-dir", str(run), "--no-progress", "--set", "data.preset=tiny"]
    argv += ["--set", "data.scale=0.3", "--set", f"data.cache_dir={tmp_path / 'cache'}"]
    argv += ["--set", "train.batch_size=32", "--set", "train.max_steps=4"]
    assert main(argv) == 0
    summary = _summary(run)
    assert summary["world_size"] == 2 and summary["steps_per_epoch"] == 3
    assert summary["total_steps"] == 4 and summary["stopped"] == "max_steps"
    assert summary["test_acc"] is not None
    recs = _records(run)
    assert [(r["epoch"], r["num_steps"], r["evaluated"]) for r in recs] == [
        (0, 3, True),
        (1, 1, True),
    ]
    assert len(recs[1]["extra"]["per_rank"]["count"]) == 2
    ckpt = load_checkpoint(run / "checkpoints" / "last.pt")
    assert (ckpt["trainer"]["epoch"], ckpt["trainer"]["next_step"]) == (1, 1)
    assert ckpt["trainer"]["global_step"] == 4 and len(ckpt["partials"]) == 2


def test_an_engine_not_in_this_build_is_refused_before_any_work(monkeypatch, capsys, tmp_path):
    """A registry entry without an implementation (a planned engine) is one line, exit 2."""
    import dataclasses

    from fleetgnn.config import engines as registry

    spec = dataclasses.replace(registry.ENGINES["offload"], impl="")
    monkeypatch.setitem(registry.ENGINES, "offload", spec)
    argv = ["train", "--engine", "offload", "--run-dir", str(tmp_path / "r"), "--no-progress"]
    assert main(argv) == 2
    assert "not available" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_offload_engine_trains_link_prediction_through_the_launcher(tmp_path):
    """``fleetgnn train --task link --engine offload --mode full --nproc 2``: the decoder and
    loss on the host-resident last layer; every rank scores its owned pairs (all of them
    together), and the link metrics are reported and select the best epoch."""
    run = tmp_path / "link"
    argv = ["train", "--task", "link", "--engine", "offload", "--mode", "full", "--nproc", "2"]
    argv += ["--epochs", "2", "--model", "sage", "--no-progress", "--run-dir", str(run)]
    argv += ["--set", "data.preset=tiny", "--set", "data.scale=0.3", "--set", "offload.chunks=2"]
    argv += ["--set", f"data.cache_dir={tmp_path / 'cache'}"]
    assert main(argv) == 0
    summary = _summary(run)
    assert summary["engine"] == "offload" and summary["world_size"] == 2
    assert 0.0 <= summary["test_auc"] <= 1.0 and 0.0 < summary["test_mrr"] <= 1.0
    recs = _records(run)
    assert len(recs) == 2 and all(r["extra"]["chunks"] == 2 for r in recs)
    for rec in recs:  # both ranks score pairs; their rows cross between ranks
        per_rank = rec["extra"]["per_rank"]
        assert rec["loss"] > 0 and 0.0 <= rec["val_auc"] <= 1.0
        assert len(per_rank["count"]) == 2 and min(per_rank["count"]) > 0
        assert sum(r["peer"] for r in per_rank["rows"]) > 0
