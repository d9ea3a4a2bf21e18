"""The Trainer reads a step's numbers once the device has run it, never waiting between steps.

An engine on an accelerator hands ``on_step`` stats still in flight
(:class:`~fleetgnn.engines.marks.PendingStepStats`). Here the "device" is a fake whose marks
complete two steps after they are recorded: the Trainer must resolve steps as they complete,
wait only where it needs every number (a checkpoint, the epoch's end), keep the sums of an
eager run, and still stop on a non-finite loss at the step that produced it.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import pytest
import torch
from rich.console import Console

from fleetgnn.engines.base import EngineBase, resolve_steps
from fleetgnn.engines.marks import HostMarks, PendingStepStats
from fleetgnn.errors import NonFiniteLossError
from fleetgnn.train import Trainer, load_config, read_metrics

LAG = 2  # steps the fake device runs behind the host


class LaggingMarks(HostMarks):
    """Marks numbered by step; the device has passed mark ``m`` once ``m <= device_at``."""

    def __init__(self) -> None:
        self.device_at = -1
        self.waits: list[int] = []

    def done(self, mark: Any) -> bool:
        return mark <= self.device_at

    def wait(self, mark: Any) -> None:
        if mark > self.device_at:
            self.waits.append(mark)
            self.device_at = mark

    def seconds(self, start: Any, end: Any) -> float:
        return 0.5


class LaggingEngine(EngineBase):
    name = "lagging"
    rank = 0
    world_size = 1

    def __init__(self, losses: list[float], count: int = 4) -> None:
        self.losses, self.count = losses, count
        self.marks = LaggingMarks()
        self.epoch = -1

    def steps_per_epoch(self) -> int:
        return len(self.losses)

    def run_epoch(self, epoch: int, start_step: int = 0, on_step: Any = None) -> list[Any]:
        self.epoch = epoch
        out = []
        for step in range(start_step, len(self.losses)):
            base = epoch * len(self.losses) + step  # marks grow across epochs
            self.marks.device_at = max(self.marks.device_at, base - LAG)
            staged = torch.tensor([self.losses[step], step % self.count], dtype=torch.float64)
            spans = {"forward": [(base, base)]}
            pending = PendingStepStats(self.marks, staged, self.count, spans, {}, {}, base)
            out.append(pending)
            if on_step is not None:
                on_step(step, pending)
        return resolve_steps(out)

    def evaluate(self) -> dict[str, float]:
        return {"val_acc": 0.5, "test_acc": 0.5, "train_acc": 0.5}

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.epoch = int(state["epoch"])


def _fit(engine: LaggingEngine, tmp_path, *items: str) -> dict[str, Any]:
    cfg = load_config(overrides=["train.epochs=1", *items])
    trainer = Trainer.from_config(
        engine, cfg, tmp_path / "run", console=Console(file=io.StringIO()), show_progress=False
    )
    return trainer.fit(False, False)


def test_steps_are_read_as_the_device_finishes_them(tmp_path):
    losses = [4.0, 3.0, 2.0, 1.0, 1.0, 1.0, 1.0]
    eng = LaggingEngine(losses)
    _fit(eng, tmp_path, "train.checkpoint_every=3")
    # waited only before the checkpoints after steps 2 and 5 and at the epoch's end (step 6)
    assert eng.marks.waits == [2, 5, 6]
    rec = read_metrics(tmp_path / "run" / "metrics.jsonl")[-1]
    assert rec["loss"] == pytest.approx(sum(losses) / (4 * len(losses)))
    assert rec["times"]["forward"] == pytest.approx(0.5 * len(losses))


def test_without_checkpoints_the_epoch_end_is_the_one_wait(tmp_path):
    eng = LaggingEngine([1.0] * 6)
    _fit(eng, tmp_path, "train.checkpoint_every=0")
    assert eng.marks.waits == [5]


def test_a_non_finite_loss_still_stops_at_its_step(tmp_path):
    eng = LaggingEngine([1.0, 1.0, float("nan"), 1.0, 1.0, 1.0])
    with pytest.raises(NonFiniteLossError, match="epoch 0, step 2"):
        _fit(eng, tmp_path, "train.checkpoint_every=0")
