"""Time to a target accuracy: epochs-to-target per training mode.

A full-graph epoch is one optimisation step over the whole graph, a mini-batch epoch is many
steps over sampled batches, so their epoch times do not compare: what does is the time to reach a
validation accuracy, ``epochs_to_target(mode) x epoch_s(engine)``. Every full-graph engine
(``reference`` in full mode, ``fullgraph``, ``offload``) computes the reference's full-graph loss
and gradients, and every mini-batch engine (``reference`` in minibatch mode, ``minibatch``,
``split``) the reference's mini-batch steps (same seeds, same sampler), so the epochs a run config
needs to reach a target are a property of its mode, not of its engine: two numbers cover every
engine. This module holds those numbers and how they are read from a run's epoch records; the
planner (:func:`fleetgnn.cost.make_plan`) ranks by them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from fleetgnn.errors import ConfigError

#: The training modes an estimate is for.
TARGET_MODES: tuple[str, ...] = ("full", "minibatch")


@dataclasses.dataclass(frozen=True)
class EpochsToTarget:
    """Epochs one mode needs to reach the target validation accuracy.

    Attributes:
        mode: ``full`` or ``minibatch``.
        epochs: The first epoch count at which validation accuracy reached the target, or, when
            ``reached`` is false, the epochs run without reaching it (a lower bound).
        reached: Whether the target was reached (``False``: ``epochs`` is a lower bound).
        source: Where the number comes from (stated in the plan's reason).
        cost_s: Seconds the measurement took (a probe run), ``None`` when not measured here.
    """

    mode: str
    epochs: int
    reached: bool = True
    source: str = "given"
    cost_s: float | None = None

    def __post_init__(self) -> None:
        if self.mode not in TARGET_MODES:
            raise ConfigError(
                f"epochs-to-target mode {self.mode!r} is not one of {', '.join(TARGET_MODES)}"
            )
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, int) or self.epochs < 1:
            raise ConfigError(f"epochs-to-target {self.mode}={self.epochs!r} must be an int >= 1")

    @property
    def text(self) -> str:
        """``"12"``, or ``"> 5"`` for a lower bound."""
        return str(self.epochs) if self.reached else f"> {self.epochs}"

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` form: ``{"mode", "epochs", "reached", "source", "cost_s"}``."""
        return dataclasses.asdict(self)


def check_target_acc(value: Any) -> float:
    """A validation accuracy target in ``(0, 1]`` from a number or its text.

    Raises:
        ConfigError: Not a number, or outside ``(0, 1]`` (a percentage gets a hint).
    """
    try:
        acc = float(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"--target-acc {value!r} is not a number; give a validation accuracy in (0, 1], "
            f"e.g. 0.8"
        ) from None
    if not math.isfinite(acc) or not 0.0 < acc <= 1.0:
        hint = f" (for {acc:g}% write {acc / 100:g})" if 1.0 < acc <= 100.0 else ""
        raise ConfigError(f"--target-acc {value} must be a validation accuracy in (0, 1]{hint}")
    return acc


def epochs_from_records(
    records: Iterable[Mapping[str, Any]], target_acc: float, mode: str, source: str
) -> EpochsToTarget | None:
    """Epochs to ``target_acc`` from a run's per-epoch records (``metrics.jsonl`` lines).

    The first record (by epoch) whose ``val_acc`` is at least the target gives ``epoch + 1``;
    a run that never reaches it gives a lower bound, the epochs it ran. Epochs that were not
    evaluated (``val_acc`` null) are skipped, so with ``train.eval_every > 1`` the count is the
    first evaluated epoch at or past the target.

    Args:
        records: Epoch records with ``epoch`` and ``val_acc`` keys.
        target_acc: The target, in ``(0, 1]``.
        mode: The run's mode (``full`` or ``minibatch``).
        source: Where the records come from.

    Returns:
        The estimate, or ``None`` when no record was evaluated.
    """
    ran, evaluated = 0, False
    for rec in sorted(records, key=lambda r: int(r.get("epoch", 0))):
        epoch = int(rec.get("epoch", 0))
        ran = max(ran, epoch + 1)
        acc = rec.get("val_acc")
        if acc is None:
            continue
        evaluated = True
        if float(acc) >= target_acc:
            return EpochsToTarget(mode, epoch + 1, True, source)
    return EpochsToTarget(mode, ran, False, source) if evaluated else None


def merge_estimates(estimates: Iterable[EpochsToTarget]) -> dict[str, EpochsToTarget]:
    """One estimate per mode from several (e.g. several earlier runs of one mode).

    Per mode: the largest epoch count among the runs that reached the target (conservative:
    runs of one config agree, runs of different seeds may not); when none reached it, the largest
    lower bound.
    """
    out: dict[str, EpochsToTarget] = {}
    for est in estimates:
        old = out.get(est.mode)
        if (
            old is None
            or (est.reached and not old.reached)
            or (est.reached == old.reached and est.epochs > old.epochs)
        ):
            out[est.mode] = est
    return out


def as_estimates(
    given: Mapping[str, EpochsToTarget | int] | None,
) -> dict[str, EpochsToTarget]:
    """``{mode: EpochsToTarget}`` from a mapping whose values may be plain epoch counts.

    Raises:
        ConfigError: A mode other than ``full``/``minibatch``, a count < 1, or an estimate
            filed under another mode's key.
    """
    out: dict[str, EpochsToTarget] = {}
    for mode, value in (given or {}).items():
        est = value if isinstance(value, EpochsToTarget) else EpochsToTarget(str(mode), value)
        if est.mode != mode:
            raise ConfigError(f"epochs_to_target[{mode!r}] holds an estimate for mode {est.mode!r}")
        out[mode] = est
    return out
