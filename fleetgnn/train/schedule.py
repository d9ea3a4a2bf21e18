"""The learning-rate schedule: any ``torch.optim.lr_scheduler`` class, stepped and checkpointed.

``train.lr_scheduler`` names the class, ``train.lr_scheduler_args`` its keyword arguments and
``train.lr_scheduler_interval`` when it steps (:class:`~fleetgnn.config.knobs.Schedule`).
:class:`LRSchedule` is the Trainer's built-in callback that runs it:

========== =====================================================================================
interval   the scheduler steps
========== =====================================================================================
``step``   after every optimisation step (before a checkpoint that step triggers)
``epoch``  at every epoch end (not at the end of a partial epoch ``train.max_steps`` stops
           early: the resumed run steps it when the epoch completes); ``ReduceLROnPlateau``
           steps on ``val_loss``, at the epoch ends that evaluate
========== =====================================================================================

The scheduler is built over the engine's optimizer when the Trainer is, before a checkpoint
restores the optimizer (its learning rates) and then the scheduler's own state, so a resumed
run continues the schedule exactly where the uninterrupted one was.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from fleetgnn.config.suggest import nearest
from fleetgnn.errors import ConfigError
from fleetgnn.train.callbacks import Callback, Trainer

if TYPE_CHECKING:
    from fleetgnn.config.knobs import Schedule
    from fleetgnn.engines.base import StepStats

_KEY = "train.lr_scheduler"
_ABSTRACT = {"LRScheduler", "_LRScheduler"}


def scheduler_names() -> list[str]:
    """The class names of ``torch.optim.lr_scheduler`` that ``train.lr_scheduler`` accepts."""
    mod = torch.optim.lr_scheduler
    base = (mod.LRScheduler, mod.ReduceLROnPlateau)
    return sorted(
        n
        for n, c in vars(mod).items()
        if isinstance(c, type) and issubclass(c, base) and n not in _ABSTRACT and n[0] != "_"
    )


def scheduler_class(name: str) -> type:
    """The ``torch.optim.lr_scheduler`` class ``name``.

    Raises:
        ConfigError: ``name`` is not one, with the closest valid name.
    """
    names = scheduler_names()
    if name not in names:
        close = nearest(name, names)
        hint = f"; did you mean {_KEY}={close}?" if close else f"; one of: {', '.join(names)}"
        raise ConfigError(f"{_KEY}={name!r} is not a torch.optim.lr_scheduler class{hint}")
    return getattr(torch.optim.lr_scheduler, name)


def build_scheduler(schedule: Schedule, optimizer: torch.optim.Optimizer) -> Any:
    """The scheduler ``schedule`` names, over ``optimizer`` (``None``: no schedule).

    Building one sets the optimizer's learning rates to the schedule's first (e.g. a warm-up's).

    Raises:
        ConfigError: An unknown class, arguments its constructor refuses, arguments without a
            class, or ``ReduceLROnPlateau`` stepped per step (one line, naming the key).
    """
    name, args = schedule.lr_scheduler, dict(schedule.lr_scheduler_args)
    if name is None:
        if args:
            raise ConfigError(
                f"train.lr_scheduler_args={args!r} is set but {_KEY} is null; name the scheduler "
                f"(e.g. {_KEY}=StepLR) or drop the arguments"
            )
        return None
    cls = scheduler_class(name)
    plateau = issubclass(cls, torch.optim.lr_scheduler.ReduceLROnPlateau)
    if plateau and schedule.lr_scheduler_interval != "epoch":
        raise ConfigError(
            f"{_KEY}=ReduceLROnPlateau steps on the validation loss, at epoch ends: set "
            f"train.lr_scheduler_interval=epoch"
        )
    _check_args(name, args)
    where = f"train.lr_scheduler_args={args!r} do not fit {name}"
    try:
        inspect.signature(cls).bind(optimizer, **args)
    except TypeError as e:
        params = [p for p in inspect.signature(cls).parameters if p != "optimizer"]
        raise ConfigError(f"{where}: {e}; its arguments: {', '.join(params)}") from None
    try:
        return cls(optimizer, **args)
    except (TypeError, ValueError, KeyError, ZeroDivisionError) as e:
        detail = " ".join(str(e).split())[:200]
        raise ConfigError(f"{where}: {detail}") from None


#: Scheduler arguments that count steps or epochs (``T_mult``: a factor of them): ints >= 1.
_COUNTS = ("step_size", "T_max", "T_0", "T_mult", "total_steps", "epochs", "steps_per_epoch")
#: Scheduler arguments that multiply a learning rate or are one: numbers > 0.
_POSITIVE = ("gamma", "max_lr", "base_lr", "factor")
#: Scheduler arguments that floor a learning rate or count from zero: numbers >= 0.
_NONNEGATIVE = ("eta_min", "min_lr", "total_iters", "patience", "cooldown")


def _check_args(name: str, args: Mapping[str, Any]) -> None:
    """Refuse scheduler arguments torch takes but that make the learning rate NaN, inf or < 0.

    Torch checks few of them (``StepLR(step_size=-1, gamma=nan)`` builds, and every parameter
    becomes NaN); here every number must be finite, counts ints >= 1, factors > 0 and floors
    >= 0, each refused in one line naming the argument.
    """
    for key, value in args.items():
        where = f"train.lr_scheduler_args.{key}={value!r} is invalid for {name}"
        numbers = value if isinstance(value, list | tuple) else [value]
        for v in numbers:
            if isinstance(v, bool) or not isinstance(v, int | float):
                continue
            if not math.isfinite(v):
                raise ConfigError(f"{where}: it must be a finite number")
            if key in _COUNTS and (not isinstance(v, int) or v < 1):
                raise ConfigError(f"{where}: it must be an int >= 1 (e.g. {key}: 10)")
            if key in _POSITIVE and v <= 0:
                raise ConfigError(f"{where}: it must be a number > 0 (e.g. {key}: 0.5)")
            if key in _NONNEGATIVE and v < 0:
                raise ConfigError(f"{where}: it must be a number >= 0")


def check_scheduler(schedule: Schedule, optimizer_name: str = "sgd") -> None:
    """Build the schedule over a throw-away optimizer, to refuse bad settings before a run starts.

    Args:
        schedule: The ``train`` section (or a Trainer config).
        optimizer_name: ``optim.optimizer`` (``adam``, ``adamw`` or ``sgd``): some schedulers
            need the optimizer's momentum or betas.

    Raises:
        ConfigError: As :func:`build_scheduler`.
    """
    classes = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
    param = torch.zeros(1, requires_grad=True)
    build_scheduler(schedule, classes.get(optimizer_name, torch.optim.SGD)([param], lr=0.1))


class LRSchedule(Callback):
    """The Trainer's built-in callback that steps a learning-rate scheduler (see the module).

    Args:
        scheduler: A ``torch.optim.lr_scheduler`` object over the engine's optimizer.
        interval: ``"step"`` or ``"epoch"``.
    """

    key = "lr_scheduler"  # type: ignore[assignment]

    def __init__(self, scheduler: Any, interval: str) -> None:
        self.scheduler = scheduler
        self.interval = interval
        self.plateau = isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)

    def on_step_end(self, trainer: Trainer, epoch: int, step: int, stats: StepStats) -> None:
        """Step a per-step scheduler."""
        if self.interval == "step":
            self.scheduler.step()

    def on_epoch_end(self, trainer: Trainer, record: Mapping[str, Any]) -> None:
        """Step a per-epoch scheduler at a whole epoch's end (a plateau one on ``val_loss``)."""
        if self.interval != "epoch" or record.get("partial"):
            return
        if not self.plateau:
            self.scheduler.step()
        elif record.get("val_loss") is not None:
            self.scheduler.step(float(record["val_loss"]))

    def state_dict(self) -> Any:
        """The scheduler's state."""
        return self.scheduler.state_dict()

    def load_state_dict(self, state: Any) -> None:
        """Restore the scheduler's state."""
        self.scheduler.load_state_dict(state)

    def last_lr(self) -> float:
        """The first parameter group's current learning rate."""
        return float(self.scheduler.optimizer.param_groups[0]["lr"])
