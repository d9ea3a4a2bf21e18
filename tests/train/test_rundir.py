"""The run directory's lock (issue 30, finding 7): a second run on a directory in use is refused
in one line naming the holder's pid, by ``fleetgnn train`` and by the Python API alike."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from fleetgnn.cli.main import main
from fleetgnn.errors import ConfigError
from fleetgnn.train import Trainer
from fleetgnn.train.rundir import LOCK_FILE, acquire_run_dir, release_run_dir, run_dir_lock


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """``(run_dir, pid)``: a forked process holding ``run_dir``'s lock until the test ends."""
    run = tmp_path / "run"
    ready_r, ready_w = os.pipe()
    stop_r, stop_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        code = 1
        try:
            os.close(ready_r)
            os.close(stop_w)
            acquire_run_dir(run)
            os.write(ready_w, b"x")
            os.read(stop_r, 1)  # returns when the parent closes its end
            code = 0
        finally:
            os._exit(code)
    os.close(ready_w)
    os.close(stop_r)
    assert os.read(ready_r, 1) == b"x"
    try:
        yield run, pid
    finally:
        os.close(stop_w)
        os.waitpid(pid, 0)
        os.close(ready_r)


def test_second_run_is_refused_naming_the_holder(held, capsys):
    run, pid = held
    says = f"run directory '{run}' is in use by another fleetgnn run (pid {pid})"
    with pytest.raises(ConfigError) as e:
        acquire_run_dir(run)
    assert str(e.value).startswith(says)
    assert main(["train", "--run-dir", str(run), "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not (run / "config.yaml").exists()  # nothing written into the other run's directory


def test_api_trainer_takes_the_lock_too(held):
    from fleetgnn.config import load_config
    from tests.train.test_trainer import LogRegEngine

    run, pid = held
    trainer = Trainer.from_config(
        LogRegEngine(), load_config(overrides=["train.epochs=1"]), run,
        console=Console(file=io.StringIO()), show_progress=False,
    )  # fmt: skip
    with pytest.raises(ConfigError, match=rf"in use by another fleetgnn run \(pid {pid}\)"):
        trainer.fit()


def test_lock_is_reentrant_and_tidies_a_directory_it_made(tmp_path: Path):
    run = tmp_path / "fresh"
    with run_dir_lock(run):
        with run_dir_lock(run):  # the CLI holds it while its Trainer takes it again
            assert (run / LOCK_FILE).read_text() == f"{os.getpid()}\n"
        assert (run / LOCK_FILE).exists()
    assert not run.exists()  # made by the lock, left empty: removed
    kept = tmp_path / "kept"
    acquire_run_dir(kept)
    (kept / "config.yaml").write_text("{}\n")
    release_run_dir(kept)
    assert sorted(os.listdir(kept)) == [LOCK_FILE, "config.yaml"]
    acquire_run_dir(kept)  # free again
    release_run_dir(kept)
