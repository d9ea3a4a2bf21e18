"""TensorBoard event files of a run (train.tensorboard: true): rank 0, one run per directory."""

import sys
from pathlib import Path

import pytest

from fleetgnn.config import load_config
from fleetgnn.errors import ConfigError
from fleetgnn.graph import write_dataset
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.train import Trainer, engine_from_config
from fleetgnn.train.hooks import check_trainer_settings


def _cfg(*extra: str):  # noqa: ANN202
    return load_config(
        overrides=[
            "train.epochs=3",
            "train.batch_size=64",
            "train.device=cpu",
            "train.tensorboard=true",
            "train.lr_scheduler=StepLR",
            "train.lr_scheduler_args={step_size: 1, gamma: 0.5}",
            "train.checkpoint_interval=0",
            *extra,
        ]
    )


def _scalars(path: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(path))
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def test_event_files_hold_the_epochs_phase_times_and_traffic(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    graph = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path / "d")
    from fleetgnn.graph import open_dataset

    g = open_dataset(graph)
    run = tmp_path / "run"
    with engine_from_config(_cfg(), g) as eng:
        Trainer.from_config(eng, _cfg(), run, quiet=True).fit()
    tb = run / "tensorboard"
    assert len(list(tb.glob("events.out.tfevents.*"))) == 1
    s = _scalars(tb)
    tags = ["train/loss", "train/acc", "eval/val_acc", "eval/test_acc", "time/epoch_s"]
    tags += ["time/forward", "time/backward", "time/total", "traffic/local", "optim/lr"]
    for tag in tags:
        assert [step for step, _ in s[tag]] == [0, 1, 2], tag
    assert [v for _, v in s["optim/lr"]] == pytest.approx([0.005, 0.0025, 0.00125])
    # a resumed run drops the points of the epochs it runs again and appends the rest
    (run / "checkpoints" / "last.pt").unlink()  # resumes from prev.pt: epoch 2 again
    with engine_from_config(_cfg(), g) as eng:
        Trainer.from_config(eng, _cfg("train.epochs=4"), run, quiet=True).fit(resume=True)
    s = _scalars(tb)
    assert [step for step, _ in s["train/loss"]] == [0, 1, 2, 3]
    # a fresh run over the directory replaces its event files
    with engine_from_config(_cfg(), g) as eng:
        Trainer.from_config(eng, _cfg("train.epochs=1"), run, quiet=True).fit(overwrite=True)
    assert [step for step, _ in _scalars(tb)["train/loss"]] == [0]


def test_missing_package_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    msg = r"^train\.tensorboard=true needs the tensorboard package: pip install 'fleetgnn\["
    with pytest.raises(ConfigError, match=msg):
        check_trainer_settings(_cfg())


def test_a_link_run_logs_its_auc_ap_mrr_and_hits(tmp_path: Path) -> None:
    """A link task's metrics reach TensorBoard as eval/ scalars, equal to metrics.jsonl's."""
    import json

    pytest.importorskip("tensorboard")
    from fleetgnn.graph import open_dataset

    g = open_dataset(write_dataset(generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path / "d"))
    cfg = _cfg("train.task=link", "train.mode=full", "train.epochs=2")
    run = tmp_path / "run"
    with engine_from_config(cfg, g, engine="reference") as eng:
        Trainer.from_config(eng, cfg, run, quiet=True).fit()
    s = _scalars(run / "tensorboard")
    records = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines() if ln]
    keys = ("val_auc", "test_auc", "val_ap", "test_ap", "val_mrr", "test_mrr", "val_hits@10")
    for key in keys:
        logged = [(r["epoch"], r[key]) for r in records if r.get(key) is not None]
        assert logged, key
        assert s[f"eval/{key}"] == [(e, pytest.approx(v)) for e, v in logged], key
