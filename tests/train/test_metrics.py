import json
import math
from pathlib import Path

import numpy as np
import pytest

from fleetgnn.errors import FleetgnnError
from fleetgnn.train.metrics import MetricsWriter, read_metrics, to_json


def test_lines_are_flushed_as_written(tmp_path: Path) -> None:
    p = tmp_path / "metrics.jsonl"
    with MetricsWriter(p) as w:
        w.write({"epoch": 0, "loss": 1.0})
        assert read_metrics(p) == [{"epoch": 0, "loss": 1.0}]  # visible before close
        w.write({"epoch": 1, "loss": 0.5, "times": {"total": np.float64(0.25)}})
        assert len(p.read_text().splitlines()) == 2
    assert read_metrics(p)[1]["times"] == {"total": 0.25}
    with pytest.raises(RuntimeError, match="closed"):
        w.write({"epoch": 2})


def test_non_finite_become_null() -> None:
    line = to_json({"loss": math.nan, "x": [math.inf, 1.0], "n": np.int64(3)})
    assert json.loads(line) == {"loss": None, "x": [None, 1.0], "n": 3}


def test_fresh_writer_replaces_file(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text('{"epoch": 0}\n{"epoch": 1}\n')
    MetricsWriter(p).close()
    assert read_metrics(p) == []


def test_resume_keeps_earlier_epochs_and_drops_torn_line(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text("".join(json.dumps({"epoch": e, "loss": e / 10}) + "\n" for e in range(4)))
    with open(p, "a") as f:
        f.write('{"epoch": 4, "lo')  # a crash in the middle of a line
    assert [r["epoch"] for r in read_metrics(p)] == [0, 1, 2, 3]
    with MetricsWriter(p, resume_epoch=2) as w:
        assert [r["epoch"] for r in read_metrics(p)] == [0, 1]
        w.write({"epoch": 2, "loss": 9.0})
    recs = read_metrics(p)
    assert [r["epoch"] for r in recs] == [0, 1, 2] and recs[2]["loss"] == 9.0
    assert recs[1]["loss"] == 0.1
    # every line is complete JSON again
    assert all(json.loads(line) for line in p.read_text().splitlines())


def test_corrupt_middle_line_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text('{"epoch": 0}\nnot json\n{"epoch": 2}\n')
    with pytest.raises(FleetgnnError, match="line 2 is not valid JSON"):
        read_metrics(p)


def test_event_lines_are_kept_on_resume_and_skipped_by_default(tmp_path: Path) -> None:
    p = tmp_path / "metrics.jsonl"
    with MetricsWriter(p) as w:
        w.write({"epoch": 0, "loss": 1.0})
        w.write({"epoch": 1, "loss": 0.9})
        w.write({"event": "restart", "attempt": 1, "at_epoch": 1, "at_step": 2})
        w.write({"epoch": 2, "loss": 0.8})
    assert [r["epoch"] for r in read_metrics(p)] == [0, 1, 2]
    assert [r.get("event") for r in read_metrics(p, events=True)] == [None, None, "restart", None]
    with MetricsWriter(p, resume_epoch=1) as w:  # epochs >= 1 are rerun; the event stays
        w.write({"epoch": 1, "loss": 0.85})
    recs = read_metrics(p, events=True)
    assert [(r.get("epoch"), r.get("event")) for r in recs] == [
        (0, None),
        (None, "restart"),
        (1, None),
    ]


def test_replace_last_rewrites_the_epoch_record_atomically(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    with MetricsWriter(p) as w:
        with pytest.raises(RuntimeError, match="no epoch record"):
            w.replace_last({"epoch": 0})
        w.write({"epoch": 0, "loss": 1.0, "evaluated": True})
        w.write({"epoch": 1, "loss": 0.5, "evaluated": False})
        w.write({"event": "restart", "attempt": 1})  # an event after the record is kept
        w.replace_last({"epoch": 1, "loss": 0.5, "evaluated": True, "val_acc": 0.75})
        w.write({"epoch": 2, "loss": 0.25, "evaluated": False})  # the writer appends again
        with pytest.raises(RuntimeError, match="epoch 2"):
            w.replace_last({"epoch": 3})
    recs = read_metrics(p, events=True)
    assert [r.get("epoch", r.get("event")) for r in recs] == [0, 1, "restart", 2]
    assert recs[1] == {"epoch": 1, "loss": 0.5, "evaluated": True, "val_acc": 0.75}
    assert len(p.read_text().splitlines()) == 4
    assert not [q for q in tmp_path.iterdir() if q.name != "m.jsonl"]  # no temporary file left
