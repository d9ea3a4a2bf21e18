"""launch(): torch's elastic launcher on loopback, return values by rank, one-line WorkerFailed
reports (a user error's message alone), and group restarts after a SIGKILLed worker that tell
the new workers which rank failed."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from fleetgnn.cli.main import main
from fleetgnn.distributed import DistError, WorkerFailed, destroy, init, launch, restart_info
from fleetgnn.distributed.launch import sweep_stale_launch_files
from fleetgnn.distributed.shm import shm_dir
from fleetgnn.errors import ConfigError
from fleetgnn.graph import write_dataset
from fleetgnn.graph.files import owner_tag
from fleetgnn.graph.synthetic import generate_graph, spec_for

ROOT = Path(__file__).resolve().parents[2]


def _job(mode: str) -> tuple:
    ctx = init(timeout_s=60)
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    comm = ctx.communicator()
    if mode == "kill" and attempt == 0 and ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # first attempt only
    total = comm.all_reduce_sum(torch.tensor([ctx.rank + 1.0], dtype=torch.float64)).item()
    info = restart_info()
    failures = None if info is None else {r: "SIGKILL" in m for r, m in info["failures"].items()}
    out = (ctx.rank, ctx.world_size, total, attempt, ctx.local_rank, ctx.local_world_size, failures)
    destroy(ctx)
    return out


def _raises_on_rank_1() -> int:
    if int(os.environ["RANK"]) == 1:
        raise RuntimeError("boom from the second worker")
    return 0


def _user_error_on_rank_1() -> int:
    if int(os.environ["RANK"]) == 1:
        raise ConfigError("train.thing=3 is invalid: must be <= 2 (e.g. train.thing=2)")
    return 0


def _user_error_everywhere() -> int:
    raise ConfigError(f"dataset '/nope' does not exist (seen by rank {0})")


@pytest.mark.slow
def test_restart_after_sigkill_then_results_by_rank():
    out = launch(_job, ("kill",), nproc=2, max_restarts=1)
    # (rank, world_size, all_reduce sum 1 + 2, attempt, local_rank, local_world_size, and what
    # restart_info() told the restarted workers: rank 1 was killed)
    killed = {1: True}
    assert out == {0: (0, 2, 3.0, 1, 0, 2, killed), 1: (1, 2, 3.0, 1, 1, 2, killed)}
    assert restart_info() is None  # the launcher's own environment is left as it was


@pytest.mark.slow
def test_worker_failure_names_the_rank_and_error():
    with pytest.raises(WorkerFailed) as info:
        launch(_raises_on_rank_1, nproc=2, max_restarts=0)
    err = info.value
    assert list(err.failures) == [1]
    assert "RuntimeError: boom from the second worker" in err.failures[1]
    msg = str(err)
    assert msg == "worker failed on rank 1: RuntimeError: boom from the second worker"
    assert err.messages == {1: "RuntimeError: boom from the second worker"}


@pytest.mark.slow
def test_user_error_in_a_worker_is_its_message_on_one_line():
    with pytest.raises(WorkerFailed) as info:
        launch(_user_error_on_rank_1, nproc=2, max_restarts=0)
    err = info.value
    assert str(err) == (
        "worker failed on rank 1: train.thing=3 is invalid: must be <= 2 (e.g. train.thing=2)"
    )
    assert ".failures" not in str(err) and "Traceback" not in str(err)
    # the full traceback, the original exception included, stays available (--verbose prints it)
    assert "ConfigError: train.thing=3" in err.failures[1] and "Traceback" in err.failures[1]


@pytest.mark.slow
def test_same_error_on_every_rank_is_reported_once():
    with pytest.raises(WorkerFailed) as info:
        launch(_user_error_everywhere, nproc=2, max_restarts=0)
    msg = str(info.value)
    assert len(msg.splitlines()) == 1
    # the agent may stop the second rank before it fails: one or both ranks, one message
    assert msg in (
        "worker failed on ranks 0, 1: dataset '/nope' does not exist (seen by rank 0)",
        "worker failed on rank 0: dataset '/nope' does not exist (seen by rank 0)",
        "worker failed on rank 1: dataset '/nope' does not exist (seen by rank 0)",
    )


def test_invalid_arguments_fail_before_spawning():
    with pytest.raises(DistError, match="pickled"):
        launch(lambda: 0, nproc=2)
    with pytest.raises(DistError, match="nproc"):
        launch(_raises_on_rank_1, nproc=0)
    with pytest.raises(DistError, match="max_restarts"):
        launch(_raises_on_rank_1, max_restarts=-1)


def _kill_the_group() -> int:
    """Rank 1 SIGKILLs the launcher's whole process group (launcher, resource tracker, workers)."""
    if int(os.environ["RANK"]) == 1:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    return 0


@pytest.mark.slow
def test_launch_leaves_nothing_of_its_own(tmp_path, capsys, monkeypatch):
    """Issue 30, finding 8: a worker that raised leaves no ``pytorch-errorfile-*.pickle``; a group
    killed as a whole leaves its error-file directory and named semaphores, which the next
    ``fleetgnn train`` removes (only those of dead fleetgnn launchers of this host)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    code = """
        import os, sys
        from fleetgnn.distributed import WorkerFailed, launch
        from tests.distributed.test_launch import _kill_the_group, _raises_on_rank_1
        try:
            launch(_raises_on_rank_1, nproc=2)
        except WorkerFailed:
            pass
        print(sorted(os.listdir(os.environ["TMPDIR"])), flush=True)  # after a raising worker
        launch(_kill_the_group, nproc=2)
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TMPDIR": str(temp)}
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group, which rank 1 kills
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, err
    assert out.splitlines()[0] == "[]", out  # no error file, no agent directory
    pid = proc.pid
    mine = f"fleetgnn-elastic-h{owner_tag()}-p{pid}-"
    sems = f"sem.mp-fleetgnn-sem-h{owner_tag()}-p{pid}-"
    left = [p.name for p in temp.iterdir()]
    assert len(left) == 1 and left[0].startswith(mine), left
    named = [n for n in os.listdir(shm_dir()) if n.startswith(sems)]
    assert named, "the killed launcher's semaphores are not named after it"
    # a foreign semaphore and a live launcher's directory are not ours to remove
    live = temp / f"fleetgnn-elastic-h{owner_tag()}-p{os.getpid()}-abc123"
    live.mkdir()
    foreign = Path(shm_dir()) / f"sem.mp-x{pid}"
    foreign.write_bytes(b"")
    try:
        monkeypatch.setattr("tempfile.tempdir", str(temp))
        data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path / "d")
        capsys.readouterr()
        run = ["train", "--dataset", str(data), "--epochs", "1", "--run-dir", str(tmp_path / "r")]
        assert main([*run, "--no-progress", "--set", "model.hidden=8"]) == 0
        err = capsys.readouterr().err
        assert f"removed stale launcher directory '{temp / left[0]}'" in err, err
        assert err.count("removed stale launcher semaphore") == len(named), err
        assert [p.name for p in temp.iterdir() if p.name.startswith("fleetgnn")] == [live.name]
        assert not [n for n in os.listdir(shm_dir()) if n.startswith(sems)]
        assert foreign.exists()
        assert sweep_stale_launch_files(str(temp)) == []
    finally:
        foreign.unlink()
