"""Issue 30, finding 4: a run records its dataset's fingerprint, and ``--resume`` refuses data
that changed since the run started (``prepare --overwrite`` with another seed, an edit) in one
line, unless ``--accept-changed-dataset`` says to continue on purpose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetgnn.cli.main import main
from fleetgnn.graph import write_dataset
from fleetgnn.graph.dataset import dataset_fingerprint
from fleetgnn.graph.synthetic import generate_graph, spec_for

TRAIN = ["--quiet", "--set", "model.hidden=8", "--set", "train.checkpoint_interval=0"]


def test_resume_refuses_a_changed_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path / "d")
    run = tmp_path / "run"
    assert (
        main(["train", "--dataset", str(data), "--epochs", "1", "--run-dir", str(run), *TRAIN]) == 0
    )
    record = json.loads((run / "dataset.json").read_text())
    assert record == {"dataset": str(data.absolute()), "fingerprint": dataset_fingerprint(data)}
    resume = ["train", "--resume", str(run), "--epochs", "2", *TRAIN]
    # prepared again with another seed: same shapes, other values
    write_dataset(generate_graph(spec_for("tiny", 0.3), seed=2), data, overwrite=True)
    capsys.readouterr()
    assert main(resume) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "changed since the run started" in err[0], err
    assert "--accept-changed-dataset" in err[0]
    assert main([*resume, "--accept-changed-dataset"]) == 0
    assert json.loads((run / "dataset.json").read_text())["fingerprint"] == dataset_fingerprint(
        data
    )
