"""The Trainer's callbacks from its config: the schedule, TensorBoard and ``train.callbacks``.

:func:`trainer_callbacks` builds them for a :class:`~fleetgnn.train.Trainer` (in this order, the
user's own after them); :func:`check_trainer_settings` refuses bad settings before ``fleetgnn
train`` starts any worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fleetgnn.errors import ConfigError
from fleetgnn.train.callbacks import Callback, check_callbacks, load_callbacks
from fleetgnn.train.schedule import LRSchedule, build_scheduler, check_scheduler
from fleetgnn.train.tensorboard import TensorBoardLogger, summary_writer_class


def trainer_callbacks(config: Any, engine: Any, user: Sequence[Any] = ()) -> list[Callback]:
    """A Trainer's callbacks: its config's (schedule, TensorBoard, ``callbacks``), then ``user``.

    The scheduler is built here, over ``engine.optimizer``, before any checkpoint is restored.

    Raises:
        ConfigError: A bad schedule, TensorBoard without its package, a ``train.callbacks``
            entry that cannot be loaded, or a ``user`` entry that is not a :class:`Callback`.
    """
    out: list[Callback] = []
    optimizer = engine.optimizer  # EngineBase: None without one
    if config.lr_scheduler is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise ConfigError(
            f"train.lr_scheduler={config.lr_scheduler!r} needs the engine's optimizer, but engine "
            f"{engine.name!r} has no 'optimizer'"
        )
    scheduler = build_scheduler(config, optimizer)
    if scheduler is not None:
        out.append(LRSchedule(scheduler, config.lr_scheduler_interval))
    if config.tensorboard:
        out.append(TensorBoardLogger())
    out += load_callbacks(config.callbacks)
    return check_callbacks([*out, *user])


def check_trainer_settings(cfg: Any) -> None:
    """Refuse a bad schedule, TensorBoard without its package or a bad ``train.callbacks`` entry.

    What the Trainer would refuse in every worker, checked once before any starts
    (``fleetgnn train``); the scheduler is built over a throw-away optimizer of ``optim.optimizer``.

    Raises:
        ConfigError: One line, naming the key.
    """
    check_scheduler(cfg.train, cfg.optim.optimizer)
    if cfg.train.tensorboard:
        summary_writer_class()
    load_callbacks(cfg.train.callbacks)
