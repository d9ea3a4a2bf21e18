"""Issue 13, defect 5: SIGTERM stops `prepare` and `train` like Ctrl-C, and what killed
processes left behind (temporary dataset directories, temporary checkpoint files, shared-memory
segments) is swept, and reported, when `prepare`, `train` and `--resume` start.

SIGTERM is sent by the process to itself at a chosen point (a patched function), so there is no
race and no sleep; those runs are subprocesses, since before the fix SIGTERM killed the process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from fleetgnn.cli.main import main
from fleetgnn.distributed import shm_dir
from fleetgnn.graph import write_dataset
from fleetgnn.graph.files import owner_tag
from fleetgnn.graph.synthetic import generate_graph, spec_for

ROOT = Path(__file__).resolve().parents[1]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _other_tag() -> str:
    return "0" * 8 if owner_tag() != "0" * 8 else "1" * 8


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(
        generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path_factory.mktemp("d") / "tiny"
    )


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


@pytest.mark.slow
def test_sigterm_during_prepare_stops_cleanly(tmp_path):
    done = _python(
        """
        import os, signal, sys
        from fleetgnn.graph.dataset import DatasetWriter
        from fleetgnn.cli.main import main

        real = DatasetWriter.create
        def create(self, name, *args):
            if name == "x":  # half-way through: some arrays written, others not
                os.kill(os.getpid(), signal.SIGTERM)
            return real(self, name, *args)
        DatasetWriter.create = create
        sys.exit(main(["prepare", "synthetic", "--preset", "tiny", "--out", "d"]))
        """,
        tmp_path,
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert done.stderr.strip() == "fleetgnn prepare: terminated"
    assert list(tmp_path.iterdir()) == []  # no dataset, no temporary directory


@pytest.mark.slow
def test_sigterm_during_train_leaves_a_resumable_run(tiny, tmp_path):
    run = tmp_path / "run"
    done = _python(
        f"""
        import os, signal, sys
        from fleetgnn.train.checkpoint import CheckpointDir
        from fleetgnn.cli.main import main

        real = CheckpointDir.save
        def save(self, *args, **kwargs):
            out = real(self, *args, **kwargs)
            os.kill(os.getpid(), signal.SIGTERM)  # right after the first checkpoint
            return out
        CheckpointDir.save = save
        sys.exit(main(["train", "--dataset", {str(tiny)!r}, "--epochs", "3", "--run-dir",
                       {str(run)!r}, "--no-progress", "--set", "model.hidden=8",
                       "--set", "train.checkpoint_interval=0"]))
        """,
        tmp_path,
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    resume = f"resume with: fleetgnn train --resume {run}"
    assert last == f"fleetgnn train: interrupted at epoch 1 step 0; {resume}"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.pt", "last.pt"]
    assert main(["train", "--resume", str(run), "--quiet"]) == 0
    assert (run / "summary.json").is_file()


@pytest.mark.slow
def test_prepare_sweeps_temporary_directories_of_dead_owners(tmp_path, capsys):
    dead, tag = _dead_pid(), owner_tag()
    stale = tmp_path / f".d.tmp-{dead}-{tag}-abcd1234"
    live = tmp_path / f".d.tmp-{os.getpid()}-{tag}-efgh5678"  # a prepare still running
    foreign = tmp_path / f".d.tmp-{dead}-{_other_tag()}-ijkl9012"  # another host's: unknown
    legacy_old = tmp_path / ".d.tmp-mnop3456"  # an older fleetgnn's, untouched for 2 hours
    legacy_new = tmp_path / ".d.tmp-qrst7890"
    legacy_other = tmp_path / ".e.tmp-uvwx1234"  # not named after this output: not ours to judge
    for d in (stale, live, foreign, legacy_old, legacy_new, legacy_other):
        d.mkdir()
        (d / "x.npy").write_bytes(b"\0" * 1000)
    two_hours_ago = time.time() - 7200
    os.utime(legacy_old, (two_hours_ago, two_hours_ago))
    os.utime(legacy_other, (two_hours_ago, two_hours_ago))
    argv = ["prepare", "synthetic", "--preset", "tiny", "--scale", "0.3"]
    assert main([*argv, "--out", str(tmp_path / "d")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [  # in name order
        f"fleetgnn prepare: removed stale temporary directory '{stale}' (1.0 KB; owner process "
        f"{dead} is gone)",
        f"fleetgnn prepare: removed stale temporary directory '{legacy_old}' (1.0 KB; no owner "
        f"recorded, untouched for 2.0 h)",
    ]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["d", live.name, foreign.name, legacy_new.name, legacy_other.name])


@pytest.mark.slow
def test_train_and_resume_sweep_temporary_checkpoints_and_segments(tiny, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "--dataset", str(tiny), "--epochs", "1", "--run-dir", str(run)]
    assert main([*argv, "--quiet", "--set", "model.hidden=8"]) == 0
    dead, tag = _dead_pid(), owner_tag()
    ckpt_tmp = run / "checkpoints" / f".last.pt.{dead}-{tag}-abc123.tmp"
    text_tmp = run / f".summary.json.{dead}-{tag}-def456.tmp"
    live_tmp = run / "checkpoints" / f".last.pt.{os.getpid()}-{tag}-ghi789.tmp"
    for f in (ckpt_tmp, text_tmp, live_tmp):
        f.write_bytes(b"\0" * 2000)
    segment = Path(shm_dir()) / f"fleetgnn-hostile{uuid.uuid4().hex[:8]}-r1-h{tag}-p{dead}"
    segment.write_bytes(b"\0" * 10)
    try:
        assert main(["train", "--resume", str(run), "--epochs", "2", "--no-progress"]) == 0
    finally:
        segment.unlink(missing_ok=True)
    err = capsys.readouterr().err
    assert f"removed stale temporary file '{ckpt_tmp}' (2.0 KB; owner process {dead}" in err
    assert f"removed stale temporary file '{text_tmp}'" in err
    assert f"removed stale shared-memory segment '{segment}'" in err
    assert not ckpt_tmp.exists() and not text_tmp.exists() and live_tmp.exists()
