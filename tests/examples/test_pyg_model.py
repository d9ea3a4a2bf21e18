"""``examples/pyg_model.py``: PyG's own GraphSAGE, built by the user, trained on real Cora with
``reference``, ``minibatch`` (2 processes) and ``fullgraph`` (2 processes); ``offload`` refuses."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch_geometric")

from fleetgnn.graph import write_dataset  # noqa: E402
from fleetgnn.graph.loaders.bundled import DATA_DIR  # noqa: E402
from fleetgnn.graph.loaders.planetoid import load_planetoid  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pyg_model.py"


@pytest.fixture(scope="module")
def cora(tmp_path_factory):
    path = tmp_path_factory.mktemp("d") / "cora"
    return write_dataset(load_planetoid(DATA_DIR / "planetoid", "cora"), path)


def _run(args, nproc, timeout=300):
    if nproc > 1:  # torchrun, a free port on loopback
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += ["--nproc-per-node", str(nproc), str(EXAMPLE), *args]
    else:
        cmd = [sys.executable, str(EXAMPLE), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("engine", "nproc"), [("reference", 1), ("minibatch", 2), ("fullgraph", 2)]
)
def test_pyg_graphsage_trains_on_cora(cora, tmp_path, engine, nproc):
    epochs = "60" if engine == "fullgraph" else "30"
    args = ["--dataset", str(cora), "--engine", engine, "--epochs", epochs]
    done = _run([*args, "--run-dir", str(tmp_path / "run")], nproc)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == 1, done.stdout  # rank 0 only
    result = json.loads(lines[0])
    assert result["model"] == "pyg" and result["engine"] == engine
    assert result["world_size"] == nproc
    assert result["test_acc"] >= 0.75
    assert result["final_train_loss"] < 1.0


@pytest.mark.slow
def test_offload_refuses_in_one_line(cora, tmp_path):
    args = ["--dataset", str(cora), "--engine", "offload", "--run-dir", str(tmp_path / "run")]
    done = _run(args, 1)
    assert done.returncode == 2
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert "offload engine cannot run PygModel" in line and "fullgraph" in line
