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


def _session_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    return write_dataset(
        generate_graph(spec_for("tiny", 0.3), seed=2), tmp_path_factory.mktemp("d") / "data"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "after_s"),
    [(signal.SIGINT, 0.0), (signal.SIGINT, 0.4), (signal.SIGINT, 1.2), (signal.SIGTERM, 0.8)],
    ids=["int-at-launch", "int-0.4s", "int-1.2s", "term-0.8s"],
)
def test_a_stop_during_start_up_ends_every_process_in_seconds(small_data, tmp_path, sig, after_s):
    """The launcher prints the run directory just before it starts the workers; a signal to the
    whole session from then on (workers rendezvousing, importing torch, joining the group) ends
    every process within seconds, with one line and 130 (SIGINT) or 143 (SIGTERM). It used to
    print spawn.py tracebacks, or wait 30 s for torch's shutdown timeout."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    argv = _fleetgnn(
        "train", "--engine", "minibatch", "--nproc", "2", "--dataset", str(small_data),
        "--epochs", "1000", "--run-dir", str(tmp_path / "run"), "--no-progress",
        "--set", "train.batch_size=16", "--set", "model.hidden=8",
    )  # fmt: skip
    env = {**os.environ, "TMPDIR": str(tmp)}
    err = tmp_path / "err.txt"
    with open(err, "w") as fe:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=fe, cwd=tmp_path, env=env, text=True,
            start_new_session=True,
        )  # fmt: skip
        try:
            line = proc.stdout.readline()  # the readiness signal: workers start right after it
            assert line.startswith("run directory:"), (line, err.read_text())
            time.sleep(after_s)
            os.killpg(proc.pid, sig)  # what a terminal's Ctrl-C does: every process of the job
            sent = time.monotonic()
            code = proc.wait(timeout=60)
            took = time.monotonic() - sent
            deadline = time.monotonic() + 10
            while _session_alive(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.05)  # workers the launcher stopped may take a moment to be reaped
            assert not _session_alive(proc.pid), "a worker outlived the launcher"
        finally:
            if _session_alive(proc.pid):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    stderr = err.read_text()
    assert code == (130 if sig == signal.SIGINT else 143), stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert stderr.startswith("fleetgnn train: interrupted "), stderr
    assert took < 15, f"took {took:.1f} s to stop"  # torch's default waits 30 s, then SIGKILL
    assert not [p.name for p in tmp.iterdir() if p.name.startswith("torchelastic_")]
