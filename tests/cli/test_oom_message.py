"""A SIGKILLed worker of `fleetgnn train --nproc 2` is one line saying whether the kernel's OOM
killer counted a kill during the run, and, when it may have been out of memory, the memory the
planner predicted per rank."""

import importlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fleetgnn.cli import oom
from fleetgnn.cli.oom import predicted_memory
from fleetgnn.graph import write_dataset
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.train import load_config

TIMEOUT_S = 180
launch_mod = importlib.import_module("fleetgnn.distributed.launch")  # the package exports a
# function of the same name


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_oom_kills_reads_the_cgroup_then_the_machine(tmp_path):
    v2 = tmp_path / "v2"
    _write(v2, "proc/self/cgroup", "0::/user.slice/run-1.scope\n")
    _write(v2, "sys/fs/cgroup/user.slice/run-1.scope/memory.events", "low 0\noom 3\noom_kill 2\n")
    _write(v2, "proc/vmstat", "nr_free_pages 1\noom_kill 9\n")
    assert launch_mod.oom_kills(str(v2)) == ("this cgroup", 2)
    v1 = tmp_path / "v1"
    _write(v1, "proc/self/cgroup", "4:memory:/process_api/abc\n0::/\n")
    _write(
        v1, "sys/fs/cgroup/memory/process_api/abc/memory.oom_control", "under_oom 0\noom_kill 5\n"
    )
    assert launch_mod.oom_kills(str(v1)) == ("this cgroup", 5)
    machine = tmp_path / "machine"  # no readable cgroup counter
    _write(machine, "proc/self/cgroup", "0::/\n")
    _write(machine, "proc/vmstat", "oom_kill 7\n")
    assert launch_mod.oom_kills(str(machine)) == ("this machine", 7)
    assert launch_mod.oom_kills(str(tmp_path / "nothing")) is None


@pytest.mark.parametrize(
    ("before", "now", "line", "predicted"),
    [
        (
            ("this cgroup", 3),
            ("this cgroup", 4),
            "rank 1 was killed by SIGKILL (exit -9): out of memory (the kernel's OOM killer killed "
            "1 process in this cgroup during the run)",
            True,
        ),
        (
            ("this cgroup", 4),
            ("this cgroup", 4),
            "rank 1 was killed by SIGKILL (exit -9), not by the kernel's OOM killer (it counted no "
            "OOM kill in this cgroup during the run): another process or a person sent it",
            False,
        ),
        (  # nothing readable, or not the same counter: no claim either way
            None,
            ("this cgroup", 4),
            "rank 1 was killed by SIGKILL (exit -9): out of memory, or another process (the "
            "kernel's OOM kill count is not readable here)",
            True,
        ),
        (
            ("this machine", 1),
            ("this cgroup", 4),
            "rank 1 was killed by SIGKILL (exit -9): out of memory, or another process (the "
            "kernel's OOM kill count is not readable here)",
            True,
        ),
    ],
)
def test_sigkill_is_out_of_memory_only_when_the_kernel_counted_it(
    monkeypatch, before, now, line, predicted
):
    """Issue 30, finding 9: every SIGKILLed worker was "out of memory?", whatever killed it."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    monkeypatch.setattr(launch_mod, "oom_kills", lambda: now)
    dead = ProcessFailure(local_rank=1, pid=4242, exitcode=-9, error_file="/nonexistent")
    cause = launch_mod._sigkill_cause(before)
    err = launch_mod._worker_failed(
        {1: launch_mod._failure_text(dead)}, {1: launch_mod._failure_message(dead, cause)}
    )
    assert str(err) == line
    monkeypatch.setattr(oom, "predicted_memory", lambda *a: "the planner predicted about 3 MB")
    cfg = load_config(None, ["train.engine=minibatch", "train.nproc=2"])
    explained = str(oom.explain_sigkill(err, cfg, "d", "r"))
    assert explained.endswith("; the planner predicted about 3 MB") == predicted, explained


def test_no_prediction_when_planning_fails_or_hangs(tmp_path, monkeypatch):
    cfg = load_config(None, ["train.engine=minibatch", "train.nproc=2"])
    assert predicted_memory(cfg, tmp_path / "missing", tmp_path) is None
    release = threading.Event()
    monkeypatch.setattr(oom, "_predict", lambda *a: release.wait() and ({"device": 1}, {}))
    monkeypatch.setattr(oom, "PLAN_TIMEOUT_S", 0.05)
    try:
        assert predicted_memory(cfg, tmp_path, tmp_path) is None  # reported without it
    finally:
        release.set()
    monkeypatch.setattr(oom, "_predict", lambda *a: ({"device": 2_000_000}, {"device": 10**6}))
    note = predicted_memory(cfg, tmp_path, tmp_path)
    assert note.startswith("the planner predicted about 3.0 MB per rank for minibatch (device")


def _workers(pid: int) -> list[int]:
    """PIDs of the spawned worker processes below ``pid`` (multiprocessing ``spawn_main``)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            for child in task.read_text().split():
                todo.append(int(child))
                cmd = Path(f"/proc/{child}/cmdline").read_bytes()
                if b"spawn_main" in cmd and b"resource_tracker" not in cmd:
                    found.append(int(child))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc")
def test_sigkilled_worker_says_what_the_kernel_counted(tmp_path):
    data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=2), tmp_path / "data")
    run = tmp_path / "run"
    err = tmp_path / "err.txt"
    argv = [sys.executable, "-m", "fleetgnn", "train", "--engine", "minibatch", "--nproc", "2"]
    argv += ["--dataset", str(data), "--epochs", "1000", "--run-dir", str(run), "--no-progress"]
    for kv in ("train.batch_size=16", "train.checkpoint_every=1", "model.hidden=8"):
        argv += ["--set", kv]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}  # the planner's calibration
    with open(err, "w") as fe:
        proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=fe, cwd=tmp_path, env=env,
            start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while not (run / "checkpoints" / "last.pt").exists():  # both workers are training
                assert proc.poll() is None, err.read_text()[-3000:]
                assert time.monotonic() < deadline, "no checkpoint in time"
                time.sleep(0.05)
            workers = _workers(proc.pid)
            assert len(workers) == 2, workers
            os.kill(max(workers), signal.SIGKILL)  # what the OOM killer sends
            code = proc.wait(timeout=TIMEOUT_S)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    stderr = err.read_text()
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    line = lines[0]
    assert re.match(r"fleetgnn train: error: rank [01] was killed by SIGKILL \(exit -9\)", line)
    if launch_mod.oom_kills() is not None:  # the kernel counted no OOM kill: no memory note
        assert "not by the kernel's OOM killer (it counted no OOM kill in this " in line, line
        assert "out of memory" not in line and "planner" not in line, line
        return
    assert ": out of memory, or another process (the kernel's OOM kill count is not" in line
    m = re.search(
        r"; the planner predicted about ([\d.]+) (KB|MB|GB) per rank for minibatch \(", line
    )
    assert m is not None, line
    assert "device " in line and "workspace " in line
