"""Issue 30, finding 4: a run records its dataset's fingerprint, and ``--resume`` refuses data
that changed since the run started (``prepare --overwrite`` with another seed, an edit) in one
line, unless ``--accept-changed-dataset`` says to continue on purpose."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from fleetgnn.cli.main import main
from fleetgnn.graph import write_dataset
from fleetgnn.graph.dataset import dataset_fingerprint
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.train import checkpoint

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


@pytest.mark.parametrize("last", ["other-config", "corrupt"])
def test_resume_falls_back_to_prev_when_last_is_foreign_or_corrupt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], last: str
):
    """Issue 30, finding 9: a ``last.pt`` from another config (or a corrupt one) is skipped with a
    one-line warning when ``prev.pt`` fits; only a config change that fits no checkpoint refuses."""
    data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path / "d")
    run = tmp_path / "run"
    argv = ["train", "--dataset", str(data), "--run-dir"]
    assert main([*argv, str(run), "--epochs", "2", *TRAIN]) == 0
    last_pt = run / "checkpoints" / "last.pt"
    if last == "other-config":
        other = tmp_path / "other"
        wide = [a.replace("model.hidden=8", "model.hidden=16") for a in TRAIN]
        assert main([*argv, str(other), "--epochs", "1", *wide]) == 0
        last_pt.write_bytes((other / "checkpoints" / "last.pt").read_bytes())
    else:
        last_pt.write_bytes(last_pt.read_bytes()[:300])
    capsys.readouterr()
    with pytest.warns(UserWarning, match="resuming from the previous checkpoint") as seen:
        assert main(["train", "--resume", str(run), "--epochs", "3", *TRAIN]) == 0
    messages = [str(w.message) for w in seen if "previous checkpoint" in str(w.message)]
    assert messages and all("\n" not in m and "last.pt" in m for m in messages), messages
    # issue 42: the fallback is done, so no advice to delete and fall back; no torch advice either
    assert not any("delete it" in m or "If you are seeing" in m for m in messages), messages
    if last == "other-config":
        assert "model.hidden: checkpoint 16, now 8" in messages[0]
    assert json.loads((run / "summary.json").read_text())["epochs"] == 3
    # a config that fits neither checkpoint is the user's change: refused in one line
    assert main(["train", "--resume", str(run), "--epochs", "4", *_wider(TRAIN)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot resume: the config differs" in err[0], err


def _wider(argv: list[str]) -> list[str]:
    return [a.replace("model.hidden=8", "model.hidden=32") for a in argv]


def test_resume_in_a_run_dir_whose_name_is_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Issue 42, finding 1: a run directory named with bytes that are not UTF-8 resumes (the
    checkpoints are opened bytes-safe), so nothing is called corrupt and nothing is lost."""
    data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path / "d")
    run = tmp_path / os.fsdecode(b"bad\xff")
    argv = ["train", "--dataset", str(data), "--run-dir", str(run), "--epochs", "2", *TRAIN]
    assert main(argv) == 0
    before = (run / "metrics.jsonl").read_text().splitlines()
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--epochs", "3", *TRAIN]) == 0
    assert capsys.readouterr().err == ""
    after = (run / "metrics.jsonl").read_text().splitlines()
    assert after[: len(before)] == before and len(after) > len(before)
    assert json.loads((run / "summary.json").read_text())["epochs"] == 3
    assert {p.name for p in (run / "checkpoints").iterdir()} >= {"last.pt", "prev.pt", "best.pt"}


def test_a_checkpoint_that_cannot_be_opened_is_not_called_corrupt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """Issue 42, finding 1: when the path, not the file, is at fault (here torch's memory map
    refusing a name it cannot encode), the one line says so and advises keeping the checkpoints."""
    data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path / "d")
    run = tmp_path / os.fsdecode(b"bad\xff")
    argv = ["train", "--dataset", str(data), "--run-dir", str(run), "--epochs", "2", *TRAIN]
    assert main(argv) == 0
    saved = {p.name: p.read_bytes() for p in (run / "checkpoints").iterdir()}
    monkeypatch.setattr(checkpoint, "_utf8_path", lambda path: True)  # as before the fix
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--epochs", "3", *TRAIN]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "last.pt' cannot be read (UnicodeEncodeError: 'utf-8' codec can't encode" in err[0]
    assert "its contents were not checked and may be intact, so keep it" in err[0]
    assert "corrupt" not in err[0] and "delete" not in err[0], err
    assert {p.name: p.read_bytes() for p in (run / "checkpoints").iterdir()} == saved


def test_a_dataset_path_that_is_not_utf8_is_refused_up_front(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Issue 42, finding 1: a dataset path is recorded in config.yaml, which holds UTF-8 text, so
    a path in other bytes is refused before anything is written, in one line naming the byte."""
    data = tmp_path / os.fsdecode(b"data\xfe")
    write_dataset(generate_graph(spec_for("tiny", 0.3), seed=1), data)
    run = tmp_path / "run"
    assert main(["train", "--dataset", str(data), "--run-dir", str(run), *TRAIN]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].endswith(
        "is not UTF-8 text (byte b'\\xfe' at offset "
        f"{len(os.fsencode(tmp_path)) + 5}); a path must have a UTF-8 name here: rename it, or "
        "link it under a UTF-8 name"
    ), err
    assert not run.exists()


DEFAULTS = ["--quiet", "--set", "model.hidden=8"]  # checkpoints at the default interval (60 s)


def _one_error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("fleetgnn train: error: "), lines
    return lines[0].removeprefix("fleetgnn train: error: ")


def test_a_diverging_run_keeps_its_summary_and_last_finite_checkpoints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Issue 42, finding 2: ``optim.lr=1e6`` with SGD reaches a NaN loss with the default
    checkpoint interval (nothing written yet); the stop writes summary.json with the reason,
    best.pt of the best evaluation and last.pt of the last finite epoch end."""
    data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path / "d")
    run = tmp_path / "run"
    diverge = ["--set", "optim.lr=1e6", "--set", "optim.optimizer=sgd"]
    argv = ["train", "--dataset", str(data), "--run-dir", str(run), "--epochs", "30"]
    line = _one_error_line(capsys, [*argv, *DEFAULTS, *diverge])
    assert line.startswith("the training loss is nan at epoch "), line
    assert line.endswith(
        f"else a learning rate too high for this model: continue from the last finite "
        f"checkpoint with a lower one (--resume {run} --set optim.lr=...)"
    ), line
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped"] == "non_finite" and summary["stop_reason"] == line
    stopped_at = int(line.split(" at epoch ")[1].split(",")[0])
    last = checkpoint.load_checkpoint(run / "checkpoints" / "last.pt")
    assert last["trainer"]["epoch"] == stopped_at == summary["epochs"] > 0
    assert checkpoint.first_non_finite(last["engine"]) is None
    best = checkpoint.load_checkpoint(run / "checkpoints" / "best.pt")
    assert best["trainer"]["best_epoch"] == summary["best_epoch"] == best["trainer"]["epoch"] - 1
    assert checkpoint.first_non_finite(best["engine"]) is None


def test_resume_with_the_advised_lower_lr_continues_from_the_last_finite_epoch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """Issue 42, finding 2: the stop's advice (a lower ``optim.lr`` on ``--resume``) is allowed;
    the resumed run continues from the last finite epoch end with the new learning rate, and
    keeps the metrics before it. Other optimizer changes are still refused in one line."""
    from fleetgnn.engines import common

    data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path / "d")
    run = tmp_path / "run"
    calls = [0]

    def poisoned(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        calls[0] += 1  # one call per training step (tiny: one step per epoch)
        loss = torch.nn.functional.cross_entropy(logits, target, reduction="none")
        return loss * float("nan") if calls[0] == 3 else loss

    monkeypatch.setattr(common, "cross_entropy", poisoned)
    argv = ["train", "--dataset", str(data), "--run-dir", str(run), *DEFAULTS]
    line = _one_error_line(capsys, [*argv, "--epochs", "5"])
    assert line.startswith("the training loss is nan at epoch 2, step 0; the run is stopped"), line
    monkeypatch.undo()
    before = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["epoch"] for r in before] == [0, 1]
    assert json.loads((run / "summary.json").read_text())["stopped"] == "non_finite"

    resume = ["train", "--resume", str(run), "--epochs", "4", *DEFAULTS]
    refused = _one_error_line(capsys, [*resume, "--set", "optim.optimizer=sgd"])
    assert refused == (
        "cannot resume: the config differs from the checkpoint's in optim.optimizer: checkpoint "
        "'adam', now 'sgd'. Resume with the original config (of optim, only lr and weight_decay "
        "may change on resume), or start a fresh run directory"
    )
    assert main([*resume, "--set", "optim.lr=0.005"]) == 0
    after = (run / "metrics.jsonl").read_text().splitlines()
    assert after[:2] == before and [json.loads(r)["epoch"] for r in after] == [0, 1, 2, 3]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped"] == "epochs" and "stop_reason" not in summary
    last = checkpoint.load_checkpoint(run / "checkpoints" / "last.pt")
    assert last["config"]["optim"]["lr"] == 0.005
    assert [g["lr"] for g in last["engine"]["optimizer"]["param_groups"]] == [0.005]


def test_an_infinite_learning_rate_is_refused_by_validation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Issue 42, finding 2: ``optim.lr=.inf`` used to pass validation and stop at a NaN loss."""
    run = tmp_path / "run"
    for value, shown in ((".inf", "inf"), (".nan", "nan")):
        line = _one_error_line(
            capsys, ["train", "--run-dir", str(run), "--set", f"optim.lr={value}"]
        )
        assert line == (
            f"optim.lr={shown} is invalid: must be a finite number > 0 (e.g. optim.lr=0.01)"
        ), line
    assert not run.exists()


def test_report_and_tensorboard_on_a_run_dir_whose_name_is_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Issue 42, finding 1, the same directory elsewhere: ``report`` drew the name into a plot
    title matplotlib could not encode (a traceback); TensorBoard cannot write under such a name,
    which is now one line naming the key, not a UnicodeEncodeError from its writer."""
    pytest.importorskip("matplotlib")
    pytest.importorskip("tensorboard")
    data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path / "d")
    run = tmp_path / os.fsdecode(b"bad\xff")
    argv = ["train", "--dataset", str(data), "--run-dir", str(run), "--epochs", "1", *TRAIN]
    assert main(argv) == 0
    assert main(["report", str(run)]) == 0
    assert (run / "report.png").stat().st_size > 0
    capsys.readouterr()
    resume = ["train", "--resume", str(run), "--epochs", "2", *TRAIN]
    assert main([*resume, "--set", "train.tensorboard=true"]) == 2
    shown = os.fsencode(run / "tensorboard").decode("utf-8", "backslashreplace")
    assert capsys.readouterr().err.strip() == (
        f"fleetgnn train: error: train.tensorboard=true cannot write under '{shown}': "
        f"TensorBoard takes only UTF-8 paths and this run directory's name is not UTF-8; set "
        f"train.tensorboard=false, or use a run directory with a UTF-8 name"
    )
    assert json.loads((run / "summary.json").read_text())["epochs"] == 1


def test_train_and_predict_print_a_non_utf8_run_dir_without_crashing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Issue 42, finding 1: on a UTF-8 stdout (strict, as here) printing the run directory's
    name was a UnicodeEncodeError after the run had started; it prints its bytes as \\xNN."""
    data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path / "d")
    run = tmp_path / os.fsdecode(b"bad\xff")
    argv = ["train", "--dataset", str(data), "--run-dir", str(run), "--epochs", "1"]
    assert main([*argv, "--set", "model.hidden=8"]) == 0
    shown = os.fsencode(run).decode("utf-8", "backslashreplace")
    assert f"run directory: {shown} (summary.json" in capsys.readouterr().out
    out = tmp_path / os.fsdecode(b"preds\xfe")
    assert main(["predict", str(run), "--out", str(out)]) == 0
    assert f"to '{os.fsencode(out).decode('utf-8', 'backslashreplace')}'" in capsys.readouterr().out
    assert (out / "predictions.npy").is_file()


def test_a_bad_metrics_line_is_not_a_reason_to_delete_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Issue 42: no message advises deleting data that is not known bad. A metrics.jsonl with one
    bad line advised deleting the whole file (the run's history); it now names that line."""
    data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path / "d")
    run = tmp_path / "run"
    assert (
        main(["train", "--dataset", str(data), "--run-dir", str(run), "--epochs", "2", *TRAIN]) == 0
    )
    good = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join([good[0], '{"epoch": "x"}', *good[1:]]) + "\n")
    capsys.readouterr()
    resume = ["train", "--resume", str(run), "--epochs", "3", *TRAIN]
    assert main(resume) == 2
    assert capsys.readouterr().err.strip() == (
        f"fleetgnn train: error: metrics file '{run / 'metrics.jsonl'}' line 2: 'epoch' is 'x', "
        f"not an integer; it is corrupt: remove or fix that line (the only one known bad), or "
        f"start a fresh run directory"
    )
    (run / "metrics.jsonl").write_text("\n".join(good) + "\n")  # the advice, followed
    assert main(resume) == 0
    assert json.loads((run / "summary.json").read_text())["epochs"] == 3
