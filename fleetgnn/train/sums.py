"""Sums of an epoch's steps: numerators and denominators, never averages of averages.

:class:`StepSums` adds the :class:`~fleetgnn.engines.base.StepStats` of one rank's steps (loss and
correct-prediction numerators, the count denominator, seconds per phase, bytes per link kind) and
turns them into an :class:`~fleetgnn.engines.base.EpochStats`; the Trainer checkpoints a partial
epoch's sums and sums them over ranks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from fleetgnn.engines.base import LINK_KINDS, TIME_KEYS, EpochStats, StepStats


@dataclasses.dataclass
class StepSums:
    """Running sums of an epoch's :class:`StepStats` (numerators and denominators).

    Attributes:
        loss_sum: Sum of per-node losses.
        correct: Correctly classified training nodes.
        count: Training nodes.
        num_steps: Steps added.
        times: Seconds per phase (all :data:`TIME_KEYS` present).
        traffic: Bytes per link kind (all :data:`LINK_KINDS` present).
        elapsed_s: Wall-clock seconds spent in the epoch so far (across interruptions).
    """

    loss_sum: float = 0.0
    correct: int = 0
    count: int = 0
    num_steps: int = 0
    times: dict[str, float] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(TIME_KEYS, 0.0)
    )
    traffic: dict[str, int] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(LINK_KINDS, 0)
    )
    elapsed_s: float = 0.0

    def add(self, s: StepStats) -> None:
        """Add one step's stats."""
        self.loss_sum += float(s.loss_sum)
        self.correct += int(s.correct)
        self.count += int(s.count)
        self.num_steps += 1
        for k, v in s.times.items():
            self.times[k] = self.times.get(k, 0.0) + float(v)
        for k, v in s.traffic.items():
            self.traffic[k] = self.traffic.get(k, 0) + int(v)

    def to_epoch_stats(
        self,
        epoch: int,
        memory: Mapping[str, int] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> EpochStats:
        """The epoch's stats: ``loss = loss_sum / count``, ``train_acc = correct / count``.

        Both are NaN when the epoch had no training nodes.
        """
        loss = self.loss_sum / self.count if self.count else math.nan
        acc = self.correct / self.count if self.count else math.nan
        return EpochStats(
            epoch=epoch,
            loss=loss,
            train_acc=acc,
            num_steps=self.num_steps,
            times=dict(self.times),
            traffic=dict(self.traffic),
            memory=dict(memory or {}),
            extra=dict(extra or {}),
        )

    def to_dict(self) -> dict[str, Any]:
        """A checkpoint-safe dict (primitives only; a copy)."""
        return {
            "loss_sum": self.loss_sum,
            "correct": self.correct,
            "count": self.count,
            "num_steps": self.num_steps,
            "times": dict(self.times),
            "traffic": dict(self.traffic),
            "elapsed_s": self.elapsed_s,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StepSums:
        """Inverse of :meth:`to_dict`."""
        return cls(
            loss_sum=float(d["loss_sum"]),
            correct=int(d["correct"]),
            count=int(d["count"]),
            num_steps=int(d["num_steps"]),
            times={str(k): float(v) for k, v in d["times"].items()},
            traffic={str(k): int(v) for k, v in d["traffic"].items()},
            elapsed_s=float(d["elapsed_s"]),
        )


def aggregate_steps(epoch: int, steps: Sequence[StepStats]) -> EpochStats:
    """Aggregate step stats into epoch stats from sums (not averages of averages)."""
    sums = StepSums()
    for s in steps:
        sums.add(s)
    return sums.to_epoch_stats(epoch)
