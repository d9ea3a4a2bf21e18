"""What the launcher says while it starts workers: one line when they outnumber the cores (or
GPUs), progress as they become ready, one line when they are not ready in time; and a start that
is interrupted or gives up leaves no stub run directory."""

import importlib
import os
import threading

import pytest

import fleetgnn.distributed
from fleetgnn.cli.main import main
from fleetgnn.distributed.launch import (
    WorkerStartTimeout,
    launch,
    oversubscription,
    start_timeout,
)
from fleetgnn.graph import write_dataset
from fleetgnn.graph.synthetic import generate_graph, spec_for

# the module (the package's ``launch`` attribute is the function)
launch_mod = importlib.import_module("fleetgnn.distributed.launch")

#: Set for the workers of the give-up test: importing this module then never finishes.
HANG_ENV = "FLEETGNN_TEST_HANG_ON_IMPORT"
if os.environ.get(HANG_ENV):  # in a spawned worker, while it unpickles its function
    threading.Event().wait()


def never_called() -> None:
    """A worker function whose module import hangs in the workers (:data:`HANG_ENV`)."""
    raise AssertionError("a hung worker ran its function")


def test_more_workers_than_cores_or_gpus_is_one_line_with_the_counts():
    line = oversubscription(16, "cpu", cores=2)
    assert line is not None and "\n" not in line
    assert line.startswith("--nproc 16 starts 16 worker processes on 2 CPU cores")
    assert line.endswith("going on") and "--nproc 2" in line
    assert oversubscription(2, "cpu", cores=2) is None
    assert oversubscription(1, "cpu", cores=1) is None
    gpu = oversubscription(16, "cuda", gpus=8)
    assert gpu is not None and "16 workers on 8 GPUs" in gpu and "2 share each GPU" in gpu
    assert "--nproc 8" in gpu and oversubscription(8, "cuda:0", gpus=8) is None
    # the stated give-up time grows with the workers beyond one per core
    # (the numbers docs/training.md gives: 300 s, 10 s a worker beyond one per core, after 3 s)
    assert start_timeout(2, cores=2) == 300 and start_timeout(16, cores=2) == 440
    assert launch_mod.PROGRESS_AFTER_S == 3.0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_dataset(
        generate_graph(spec_for("tiny", 0.3), seed=2), tmp_path_factory.mktemp("d") / "tiny"
    )


def _train(tiny, run_dir, nproc, monkeypatch, launched):
    """``fleetgnn train --nproc N`` on 2 cores, with a launcher stand-in that does ``launched``."""
    calls = []

    def fake_launch(fn, **kw):
        calls.append(kw)
        return launched()

    monkeypatch.setattr(launch_mod, "usable_cores", lambda: 2)
    monkeypatch.setattr(fleetgnn.distributed, "launch", fake_launch)
    argv = ["train", "--engine", "minibatch", "--nproc", str(nproc), "--dataset", str(tiny)]
    return main([*argv, "--epochs", "1", "--no-progress", "--run-dir", str(run_dir)]), calls


def test_train_says_workers_outnumber_cores_before_starting_them(
    tiny, tmp_path, capsys, monkeypatch
):
    rc, calls = _train(tiny, tmp_path / "r16", 16, monkeypatch, dict)
    err = capsys.readouterr().err
    assert rc == 0 and len(calls) == 1
    assert err.startswith("fleetgnn train: warning: --nproc 16 starts 16 worker processes on 2 CPU")
    assert err.count("\n") == 1
    assert callable(calls[0]["on_progress"])  # start-up progress, on stdout
    rc, _ = _train(tiny, tmp_path / "r2", 2, monkeypatch, dict)
    assert rc == 0 and "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("stop", ["interrupt", "timeout"])
def test_a_start_that_never_trained_leaves_no_run_directory(
    tiny, tmp_path, capsys, monkeypatch, stop
):
    def launched():
        if stop == "interrupt":
            raise KeyboardInterrupt
        raise WorkerStartTimeout("only 3 of 16 workers were ready after 440 s; gave up")

    run_dir = tmp_path / "run"
    rc, _ = _train(tiny, run_dir, 16, monkeypatch, launched)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == (130 if stop == "interrupt" else 2)
    assert "before training started" in err[-1] or "gave up" in err[-1]
    assert not run_dir.exists()


@pytest.mark.slow
def test_start_up_progress_counts_ready_workers(monkeypatch):
    monkeypatch.setattr(launch_mod, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(launch_mod, "PROGRESS_EVERY_S", 0.0)
    lines = []
    out = launch(os.getpid, nproc=2, on_progress=lines.append, next_step="then it works")
    assert sorted(out) == [0, 1]
    counts = [int(line.split(" of ")[0]) for line in lines]
    assert counts == sorted(counts) and counts[-1] == 2, lines
    assert lines[-1].startswith("2 of 2 workers ready (") and lines[-1].endswith("); then it works")
    assert all(" s, giving up at " in line and line.endswith(" s)") for line in lines[:-1])


@pytest.mark.slow
def test_workers_not_ready_in_time_give_up_in_one_line(monkeypatch):
    monkeypatch.setenv(HANG_ENV, "1")  # the workers' import of this module never finishes
    lines = []
    with pytest.raises(WorkerStartTimeout) as info:
        launch(never_called, nproc=2, on_progress=lines.append, start_timeout_s=2)
    msg = str(info.value)
    assert msg.startswith("only 0 of 2 workers were ready after 2 s; gave up and stopped them")
    assert "\n" not in msg and "--nproc" in msg
