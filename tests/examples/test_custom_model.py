"""``examples/custom_model.py``: a user-written model trained through the Python API on real
Cora, single-process and under torchrun with 2 processes, for every available engine."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetgnn.config import ENGINES, available_engines
from fleetgnn.graph import write_dataset
from fleetgnn.graph.loaders.bundled import DATA_DIR
from fleetgnn.graph.loaders.planetoid import load_planetoid

ROOT = Path(__file__).resolve().parents[2]
PLANETOID = DATA_DIR / "planetoid"  # the Cora that ships with fleetgnn
EXAMPLE = ROOT / "examples" / "custom_model.py"


@pytest.fixture(scope="module")
def cora(tmp_path_factory):
    return write_dataset(load_planetoid(PLANETOID, "cora"), tmp_path_factory.mktemp("d") / "cora")


def _cases():
    """Every engine once: single-process engines alone, distributed ones under torchrun with 2
    processes (their one-process path runs in the engine tests), plus minibatch alone."""
    out = []
    for name in available_engines():
        spec = ENGINES[name]
        if not spec.distributed or name == "minibatch":
            out.append((name, 1))
        if spec.distributed:
            out.append((name, 2))
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("engine", "nproc"), _cases())
def test_custom_model_trains_on_cora(cora, tmp_path, engine, nproc):
    epochs = "60" if "full" in ENGINES[engine].modes else "30"
    args = [str(EXAMPLE), "--dataset", str(cora), "--engine", engine, "--epochs", epochs]
    args += ["--run-dir", str(tmp_path / "run")]
    if nproc > 1:  # torchrun, a free port on loopback
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += ["--nproc-per-node", str(nproc), *args]
    else:
        cmd = [sys.executable, *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == 1, done.stdout  # rank 0 only
    result = json.loads(lines[0])
    assert result["engine"] == engine and result["world_size"] == nproc
    assert result["test_acc"] >= 0.75
    assert result["final_train_loss"] < 1.0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["test_acc"] == result["test_acc"]


@pytest.mark.slow
def test_reference_refuses_torchrun(cora, tmp_path):
    env = {**os.environ, "WORLD_SIZE": "2", "RANK": "0"}
    cmd = [sys.executable, str(EXAMPLE), "--dataset", str(cora), "--engine", "reference"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2 and "one process" in done.stderr


@pytest.mark.slow
def test_announces_its_one_temporary_run_directory(cora, tmp_path):
    """Issue 25: without --run-dir the example left its run directory in /tmp unannounced, and
    rank 1 made a second, empty one; rank 0 alone makes it now and names it."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    args = [str(EXAMPLE), "--dataset", str(cora), "--engine", "minibatch", "--epochs", "1"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp)}
    done = subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    made = sorted(p for p in tmp.iterdir() if p.name.startswith("fleetgnn-example-"))
    assert len(made) == 1, made
    assert f"run directory: {made[0]}" in done.stderr
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    assert json.loads(line)["run_dir"] == str(made[0])
    assert (made[0] / "summary.json").is_file()
