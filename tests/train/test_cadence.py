"""Checkpoint cadence (steps, seconds, run end, interrupt) and cheap metrics replacement."""

from pathlib import Path
from typing import Any

import pytest
import torch

import fleetgnn.train.checkpoint as ckmod
import fleetgnn.train.trainer as trainer_mod
from fleetgnn.engines.base import StepStats
from fleetgnn.errors import ConfigError
from fleetgnn.train.checkpoint import CheckpointDir, load_checkpoint
from fleetgnn.train.metrics import MetricsWriter, read_metrics

from .test_trainer import (
    LogRegEngine,
    ScriptedEngine,
    _assert_bitwise_equal,
    _cfg,
    _fit,
    _params,
)


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Durability is not under test here (atomic renames are)."""
    monkeypatch.setattr(ckmod.os, "fsync", lambda fd: None)


def _record_saves(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, bool, Any]]:
    """Every ``CheckpointDir.save``: (epoch, next_step, best, best_state's epoch or None)."""
    saves: list[tuple[int, int, bool, Any]] = []
    real = CheckpointDir.save

    def save(self: CheckpointDir, state: Any, **kw: Any) -> Path:
        t = state["trainer"]
        b = kw.get("best_state")
        saves.append((t["epoch"], t["next_step"], kw.get("best", False), b and b["engine"]))
        return real(self, state, **kw)

    monkeypatch.setattr(CheckpointDir, "save", save)
    return saves


def _scripted(vals: list[float]) -> ScriptedEngine:
    evals = [
        {"train_acc": 0.9, "val_acc": v, "test_acc": 0.1 * e, "val_loss": 1.0}
        for e, v in enumerate(vals)
    ]
    return ScriptedEngine([StepStats(1.0, 1, 2)], evals)


def test_epoch_ends_wait_for_the_interval_and_best_is_written_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saves = _record_saves(monkeypatch)
    vals = [0.5, 0.7, 0.6, 0.6, 0.4, 0.3]  # best at epoch 1, never again
    cfg = _cfg("train.epochs=6", "train.checkpoint_every=0", "train.checkpoint_interval=3600")
    summary = _fit(_scripted(vals), cfg, tmp_path)
    # one save, at the run's end; it writes the best epoch kept in memory first
    assert saves == [(6, 0, False, {"epoch": 1})]
    best = load_checkpoint(tmp_path / "checkpoints" / "best.pt")
    assert summary["best_epoch"] == 1 and best["engine"] == {"epoch": 1}
    assert (best["trainer"]["epoch"], best["trainer"]["best_epoch"]) == (2, 1)
    assert load_checkpoint(tmp_path / "checkpoints" / "last.pt")["trainer"]["epoch"] == 6
    assert [r["epoch"] for r in read_metrics(tmp_path / "metrics.jsonl")] == list(range(6))


def test_interval_zero_saves_every_epoch_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saves = _record_saves(monkeypatch)
    cfg = _cfg("train.epochs=3", "train.checkpoint_every=0", "train.checkpoint_interval=0")
    _fit(_scripted([0.5, 0.7, 0.6]), cfg, tmp_path)
    assert saves == [(1, 0, True, None), (2, 0, True, None), (3, 0, False, None)]


def test_interval_is_measured_in_seconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saves = _record_saves(monkeypatch)
    now = [0.0]
    monkeypatch.setattr(trainer_mod, "_clock", lambda: now[0])

    class Slow(ScriptedEngine):
        def run_epoch(self, *a: Any, **k: Any) -> list[StepStats]:
            now[0] += 25.0  # each epoch takes 25 "seconds"
            return super().run_epoch(*a, **k)

    evals = [{"train_acc": 0, "val_acc": 0.5, "test_acc": 0, "val_loss": 1}] * 6
    cfg = _cfg("train.epochs=6", "train.checkpoint_every=0", "train.checkpoint_interval=60")
    _fit(Slow([StepStats(1.0, 1, 2)], evals), cfg, tmp_path)
    # ends at 25, 50, 75 (due: 75 s since the start), 100, 125, 150 (the run's end)
    assert [s[:2] for s in saves] == [(3, 0), (6, 0)]


def test_step_cadence_reaching_an_epoch_end_saves_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saves = _record_saves(monkeypatch)
    cfg = _cfg("train.epochs=3", "train.checkpoint_every=4", "train.checkpoint_interval=3600")
    _fit(LogRegEngine(), cfg, tmp_path)  # 4 steps per epoch: every 4th step is an epoch end
    assert [s[:2] for s in saves] == [(1, 0), (2, 0), (3, 0)]
    saves.clear()
    cfg = _cfg("train.epochs=3", "train.checkpoint_every=3", "train.checkpoint_interval=3600")
    _fit(LogRegEngine(), cfg, tmp_path / "b")  # steps 3, 6, 9 fall inside epochs
    assert [s[:2] for s in saves] == [(0, 3), (1, 2), (2, 1), (3, 0)]


def test_interrupt_writes_the_epoch_end_kept_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _cfg("train.epochs=4", "train.checkpoint_every=0", "train.checkpoint_interval=3600")
    ref = LogRegEngine()
    _fit(ref, cfg, tmp_path / "ref")
    saves = _record_saves(monkeypatch)
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        _fit(LogRegEngine(crash_before=(2, 1)), cfg, run)
    assert [s[:2] for s in saves] == [(2, 0)]  # nothing before the interrupt
    assert (run / "checkpoints" / "best.pt").is_file()
    torch.manual_seed(999)
    eng = LogRegEngine()
    _fit(eng, cfg, run, resume=True)
    assert eng.calls == [(2, 0), (3, 0)]
    _assert_bitwise_equal(_params(eng), _params(ref))
    assert [r["epoch"] for r in read_metrics(run / "metrics.jsonl")] == [0, 1, 2, 3]


def test_interrupt_after_a_newer_save_writes_nothing_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saves = _record_saves(monkeypatch)
    cfg = _cfg("train.epochs=3", "train.checkpoint_every=2", "train.checkpoint_interval=3600")
    with pytest.raises(KeyboardInterrupt):
        _fit(LogRegEngine(crash_before=(1, 3)), cfg, tmp_path)
    # steps 2, 4 (epoch 0's end), 6 = epoch 1 step 2; the interrupt adds nothing older
    assert [s[:2] for s in saves] == [(0, 2), (1, 0), (1, 2)]
    ck = CheckpointDir(tmp_path / "checkpoints").load_latest()
    assert ck is not None and (ck["trainer"]["epoch"], ck["trainer"]["next_step"]) == (1, 2)


def test_checkpoint_interval_must_be_non_negative() -> None:
    from fleetgnn.config import TrainerConfig

    assert _cfg().train.checkpoint_interval == 60.0 == TrainerConfig().checkpoint_interval
    assert _cfg("train.checkpoint_interval=5").trainer_config().checkpoint_interval == 5.0
    with pytest.raises(ConfigError, match=r"train\.checkpoint_interval=-1\.0 is invalid"):
        _cfg("train.checkpoint_interval=-1")
    with pytest.raises(ConfigError, match=r"checkpoint_interval=nan"):
        TrainerConfig(checkpoint_interval=float("nan"))


def test_replace_last_overwrites_in_place(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    with MetricsWriter(p) as w:
        w.write({"epoch": 0, "loss": 1.0, "evaluated": False})
        inode = p.stat().st_ino
        w.replace_last({"epoch": 0, "loss": 1.0, "evaluated": True, "val_acc": 0.75})
        assert p.stat().st_ino == inode  # no rewrite
        w.replace_last({"epoch": 0, "loss": 1.0})  # shorter: the tail is cut
        w.write({"epoch": 1, "loss": 0.5})
        w.replace_last({"epoch": 1, "loss": 0.25, "evaluated": True})
        assert p.stat().st_ino == inode
    assert read_metrics(p) == [
        {"epoch": 0, "loss": 1.0},
        {"epoch": 1, "loss": 0.25, "evaluated": True},
    ]
    assert len(p.read_text().splitlines()) == 2
    with MetricsWriter(p, resume_epoch=1) as w:
        w.write({"epoch": 1, "loss": 0.5})
        p.write_text(p.read_text() + '{"epoch": 9}\n')  # another writer appended
        with pytest.raises(RuntimeError, match="changed by another writer"):
            w.replace_last({"epoch": 1, "loss": 0.125})


def test_state_to_dict_is_asdict() -> None:
    """The hand-written ``to_dict`` (taken at every epoch end) covers every field."""
    import dataclasses

    from fleetgnn.train.resume import TrainState

    st = TrainState(epoch=3, best_epoch=1, best={"val_acc": 0.5}, epoch_times=[1.0, 2.0])
    st.partial.add(StepStats(2.0, 1, 3, {"forward": 0.5}, {"local": 7}))
    assert st.to_dict() == dataclasses.asdict(st)
    assert TrainState.from_dict(st.to_dict()) == st
