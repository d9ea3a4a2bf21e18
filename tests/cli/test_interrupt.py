"""Ctrl-C on a real `fleetgnn train --nproc 2` run: one line saying where it stopped and how to
resume, exit status 130, no traceback, no leaked shared memory, and `--resume` finishes the run."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetgnn.distributed import shm_dir
from fleetgnn.graph import write_dataset
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.train import read_metrics, resume_point

TIMEOUT_S = 180


def _fleetgnn(*args):
    return [sys.executable, "-m", "fleetgnn", *args]


def _segments():
    return {p.name for p in Path(shm_dir()).iterdir() if p.name.startswith("fleetgnn")}


def _wait_for(path, proc, out):
    deadline = time.monotonic() + TIMEOUT_S
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"the run ended before its first checkpoint:\n{out.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no checkpoint after {TIMEOUT_S} s")
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["process_group", "launcher"])
def test_ctrl_c_on_a_distributed_run_then_resume(tmp_path, target):
    data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=2), tmp_path / "data")
    run = tmp_path / "run"
    before = _segments()
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    argv = _fleetgnn(
        "train",
        "--engine",
        "minibatch",
        "--nproc",
        "2",
        "--dataset",
        str(data),
        "--epochs",
        "1000",  # far more than it gets to run
        "--run-dir",
        str(run),
        "--no-progress",
        "--set",
        "train.batch_size=16",
        "--set",
        "train.checkpoint_every=1",
        "--set",
        "model.hidden=8",
    )
    with open(out, "w") as fo, open(err, "w") as fe:
        # a session of its own: the terminal's Ctrl-C reaches the launcher and its workers
        proc = subprocess.Popen(argv, stdout=fo, stderr=fe, cwd=tmp_path, start_new_session=True)
        try:
            _wait_for(run / "checkpoints" / "last.pt", proc, err)
            if target == "process_group":  # what a terminal does
                os.killpg(proc.pid, signal.SIGINT)
            else:  # `kill -INT <pid>` of the launcher alone
                proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=TIMEOUT_S)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    stderr = err.read_text()
    assert code == 130, stderr
    assert "Traceback" not in stderr and "SignalException" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    m = re.fullmatch(
        r"fleetgnn train: interrupted at epoch (\d+) step (\d+); resume with: "
        r"fleetgnn train --resume (\S+)",
        lines[0],
    )
    assert m is not None, lines[0]
    epoch, step = int(m.group(1)), int(m.group(2))
    assert m.group(3) == str(run)
    assert resume_point(run) == (epoch, step)  # the checkpoint it left is where it says
    assert not (run / "summary.json").exists()
    assert not (_segments() - before), "leaked shared memory"

    # the printed command continues the run (here up to the end of the epoch it stopped in)
    done = subprocess.run(
        _fleetgnn("train", "--resume", str(run), "--epochs", str(epoch + 1), "--quiet"),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "" and done.stderr == ""
    assert [r["epoch"] for r in read_metrics(run / "metrics.jsonl")] == list(range(epoch + 1))
    assert resume_point(run) == (epoch + 1, 0)
    assert (run / "summary.json").is_file() and (run / "checkpoints" / "best.pt").is_file()
