"""Checkpoint contents and resume checks: what a Trainer checkpoint holds and whether it fits.

:class:`TrainState` is the Trainer's own resumable state. :func:`check_checkpoint` checks a loaded
checkpoint's entries before any is used; :func:`checked_state` checks it against the run that
resumes it (its config, engine, world size and steps per epoch) and gives back the state to
continue from; :func:`check_resumable` runs the config checks without an engine (``fleetgnn train
--resume`` calls it before starting workers) and returns the trainer state it read, from which
:func:`finished_reason` says whether the resume would train anything. :func:`resume_point` and
:func:`finished_note` read a run directory's latest checkpoint for the same answers.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fleetgnn.config import Config
from fleetgnn.engines.base import Engine
from fleetgnn.errors import ConfigError
from fleetgnn.train.checkpoint import CheckpointDir, CheckpointError
from fleetgnn.train.resolve import model_section_resolved
from fleetgnn.train.sums import StepSums
from fleetgnn.types import PathLikeStr

#: Version of the checkpoint layout written by :class:`~fleetgnn.train.trainer.Trainer`.
CHECKPOINT_FORMAT = 1
#: ``train.*`` keys that must match between a checkpoint and the resuming config (the others,
#: e.g. ``epochs``, ``patience`` or ``checkpoint_every``, may change on resume).
RESUME_TRAIN_KEYS: tuple[str, ...] = (
    "engine",
    "mode",
    "batch_size",
    "fanouts",
    "seed",
    "dtype",
    "lr_scheduler",
    "lr_scheduler_args",
    "lr_scheduler_interval",
)

#: ``optim.*`` keys that may change on resume (the others must match): a changed ``lr`` scales
#: every learning rate the checkpoint holds (its optimizer's and its schedule's) by new / old, so
#: a schedule goes on from where it was; a changed ``weight_decay`` replaces the checkpoint's.
RESUME_OPTIM_KEYS: tuple[str, ...] = ("lr", "weight_decay")
#: Learning rates of an optimizer's parameter group (``torch.optim`` and its schedulers' keys).
_GROUP_LRS = ("lr", "initial_lr", "max_lr", "min_lr")
#: Learning rates in a scheduler's state.
_SCHEDULE_LRS = ("base_lrs", "_last_lr", "max_lrs", "min_lrs")


@dataclasses.dataclass
class TrainState:
    """The Trainer's own resumable state (everything besides the engine's and the RNGs').

    Attributes:
        epoch: The epoch in progress (or the next one to start).
        next_step: The next step of ``epoch`` to run.
        global_step: Optimisation steps taken over the whole run.
        partial: Summed stats of the steps of ``epoch`` already run.
        best_epoch: Epoch with the highest ``val_acc`` so far (``None`` before any evaluation).
        best: Evaluation metrics at ``best_epoch`` (``val_acc``, ``test_acc``, ...).
        stale_epochs: Early-stopping counter: epochs since ``best_epoch`` at the last evaluation.
        stopped_early: Training stopped because ``stale_epochs`` reached the patience.
        epoch_times: Training seconds of each finished epoch.
        last_train_loss: Training loss of the last finished epoch, or of the partial epoch
            ``train.max_steps`` stopped the run in.
    """

    epoch: int = 0
    next_step: int = 0
    global_step: int = 0
    partial: StepSums = dataclasses.field(default_factory=StepSums)
    best_epoch: int | None = None
    best: dict[str, float] = dataclasses.field(default_factory=dict)
    stale_epochs: int = 0
    stopped_early: bool = False
    epoch_times: list[float] = dataclasses.field(default_factory=list)
    last_train_loss: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A checkpoint-safe dict (primitives only; a copy, taken at every epoch end)."""
        return {
            "epoch": self.epoch,
            "next_step": self.next_step,
            "global_step": self.global_step,
            "partial": self.partial.to_dict(),
            "best_epoch": self.best_epoch,
            "best": dict(self.best),
            "stale_epochs": self.stale_epochs,
            "stopped_early": self.stopped_early,
            "epoch_times": list(self.epoch_times),
            "last_train_loss": self.last_train_loss,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainState:
        """Inverse of :meth:`to_dict`."""
        return cls(
            epoch=int(d["epoch"]),
            next_step=int(d["next_step"]),
            global_step=int(d["global_step"]),
            partial=StepSums.from_dict(d["partial"]),
            best_epoch=None if d["best_epoch"] is None else int(d["best_epoch"]),
            best={str(k): float(v) for k, v in d["best"].items()},
            stale_epochs=int(d["stale_epochs"]),
            stopped_early=bool(d["stopped_early"]),
            epoch_times=[float(t) for t in d["epoch_times"]],
            last_train_loss=None if d["last_train_loss"] is None else float(d["last_train_loss"]),
        )


def resume_point(run_dir: PathLikeStr) -> tuple[int, int] | None:
    """Where ``fit(resume=True)`` would continue the run in ``run_dir``: ``(epoch, step)``.

    Reads the trainer state of the latest loadable checkpoint (tensors memory-mapped, not read).

    Returns:
        ``None`` when there is no loadable checkpoint (a resume starts at epoch 0, step 0).
    """
    try:
        st = _latest_trainer_state(run_dir)
        return None if st is None else (int(st["epoch"]), int(st["next_step"]))
    except (KeyError, TypeError, ValueError):
        return None


def _latest_trainer_state(run_dir: PathLikeStr) -> Any:
    """The trainer state of the latest loadable checkpoint in ``run_dir`` (``None``: none).

    Tensors are memory-mapped, not read; a checkpoint that cannot be loaded counts as none.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a fallback is reported when the run resumes
            ckpt = CheckpointDir(Path(run_dir) / "checkpoints").load_latest(
                mmap=True, check=check_checkpoint
            )
    except CheckpointError:
        return None
    return None if ckpt is None else ckpt["trainer"]


def finished_note(run_dir: PathLikeStr, epochs: int, max_steps: int | None) -> str | None:
    """Why ``fit(resume=True)`` would train nothing in ``run_dir``, and how to continue it.

    :func:`finished_reason` of the latest loadable checkpoint's trainer state.

    Returns:
        One sentence, or ``None`` when the resume would train (or there is no checkpoint).
    """
    return finished_reason(_latest_trainer_state(run_dir), epochs, max_steps)


def finished_reason(state: Any, epochs: int, max_steps: int | None) -> str | None:
    """Why resuming from a checkpoint's trainer ``state`` would train nothing, and how to go on.

    The state against the resumed run's ``epochs`` and ``max_steps``: its epochs all run,
    stopped early (patience), or its steps all taken.

    Args:
        state: A checkpoint's ``"trainer"`` entry (``None``: no checkpoint).
        epochs: The resumed run's ``train.epochs``.
        max_steps: The resumed run's ``train.max_steps``.

    Returns:
        One sentence, or ``None`` when the resume would train (or there is no state).
    """
    if state is None:
        return None
    try:
        epoch, next_step = int(state["epoch"]), int(state["next_step"])
        steps = int(state["global_step"])
        stopped_early = bool(state.get("stopped_early", False))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if stopped_early:
        return (
            f"the run stopped early at epoch {epoch} (train.patience: no better validation "
            f"accuracy); nothing to train. To continue it, raise the patience (e.g. "
            f"--set train.patience=null)"
        )
    if epoch >= epochs:
        return (
            f"the run has finished its {epoch} epoch(s) (train.epochs={epochs}); nothing to "
            f"train. To continue it, pass a larger --epochs (e.g. --epochs {epoch + max(epoch, 1)})"
        )
    if max_steps is not None and steps >= max_steps:
        return (
            f"the run has taken its {steps} step(s) (train.max_steps={max_steps}, stopped at "
            f"epoch {epoch} step {next_step}); nothing to train. To continue it, raise it "
            f"(e.g. --set train.max_steps={2 * max_steps})"
        )
    return None


#: What a malformed checkpoint entry raises when it is read.
CONTENT_ERRORS = (KeyError, TypeError, ValueError, AttributeError, OverflowError)


def _malformed(what: str, err: BaseException) -> CheckpointError:
    detail = " ".join(str(err).split())[:200]
    return CheckpointError(
        f"malformed {what!r} entry ({type(err).__name__}: {detail}); it was not written by this "
        f"version of fleetgnn, or it is damaged"
    )


def check_checkpoint(ckpt: Mapping[str, Any]) -> None:
    """Check that a loaded checkpoint holds what :class:`Trainer` writes, before using any of it.

    Types and ranges of the trainer state, the config sections, the steps per epoch, the engine
    and RNG entries and the optional ones (``partials``, ``engine_config``, ``engine_name``,
    ``world_size``); whether the engine state fits the model is checked when it is loaded.

    Raises:
        CheckpointError: An entry is missing or malformed, or the format is not this version's.
    """
    try:
        fmt = ckpt["format"]
        if isinstance(fmt, bool) or not isinstance(fmt, int):
            raise TypeError(f"format is {type(fmt).__name__}, expected an integer")
    except CONTENT_ERRORS as e:
        raise _malformed("format", e) from e
    if fmt != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"format {fmt} is not supported (expected {CHECKPOINT_FORMAT}); start a fresh run "
            f"directory"
        )
    checks: dict[str, Any] = {
        "trainer": _check_trainer_state,
        "config": _check_config_entry,
        "steps_per_epoch": lambda v: _check_int(v, 1),
        "engine": lambda v: _check_mapping(v, nonempty=True),
        "rng": _check_mapping,
    }
    optional: dict[str, Any] = {
        "partials": lambda v: [_check_mapping(p) for p in _check_list(v)],
        "engine_config": _check_mapping,
        "callbacks": _check_mapping,
        "engine_name": lambda v: _check_type(v, str),
        "world_size": lambda v: _check_int(v, 1),
    }
    for key, check in checks.items():
        try:
            if key not in ckpt:
                raise KeyError(f"{key!r} is missing")
            check(ckpt[key])
        except CONTENT_ERRORS as e:
            raise _malformed(key, e) from e
    for key, check in optional.items():
        try:
            if ckpt.get(key) is not None:
                check(ckpt[key])
        except CONTENT_ERRORS as e:
            raise _malformed(key, e) from e


def _check_type(value: Any, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(value, kind):
        raise TypeError(f"{type(value).__name__}, expected {getattr(kind, '__name__', kind)}")
    return value


def _check_mapping(value: Any, nonempty: bool = False) -> Mapping[str, Any]:
    _check_type(value, Mapping)
    if nonempty and not value:
        raise ValueError("empty")
    return value


def _check_list(value: Any) -> list[Any]:
    return list(_check_type(value, (list, tuple)))


def _check_int(value: Any, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{type(value).__name__}, expected an integer")
    if int(value) < low:
        raise ValueError(f"{int(value)} is below {low}")
    return int(value)


def _check_trainer_state(value: Any) -> None:
    state = TrainState.from_dict(_check_mapping(value))
    for name in ("epoch", "next_step", "global_step", "stale_epochs"):
        if getattr(state, name) < 0:
            raise ValueError(f"{name} = {getattr(state, name)} is negative")


def _check_config_entry(value: Any) -> None:
    for section, body in _check_mapping(value).items():
        if section in ("data", "model", "optim", "train") and not isinstance(body, Mapping):
            raise TypeError(f"section {section!r} is {type(body).__name__}, expected a mapping")


def engine_config_dict(engine: Engine) -> dict[str, Any] | None:
    """The engine's typed config as a dict (what checkpoints record), or ``None`` without one."""
    cfg = engine.config  # EngineBase: None without one
    return None if cfg is None else cfg.to_dict()


def checked_state(
    ckpt: Mapping[str, Any], engine: Engine, run_config: Config | None, spe: int
) -> TrainState:
    """Check ``ckpt`` against the run resuming it; returns the Trainer state to continue from.

    The checkpoint's entries (:func:`check_checkpoint`), its config against ``run_config``
    where it matters, its engine and engine config against ``engine``, and a mid-epoch
    checkpoint's steps per epoch against ``spe``; the state's partial-epoch sums are this
    rank's (from ``partials`` when the world size is the checkpoint's).

    Raises:
        CheckpointError: The checkpoint's contents are malformed.
        ConfigError: The run's config differs from the checkpoint's where it matters.
    """
    check_checkpoint(ckpt)
    state = TrainState.from_dict(ckpt["trainer"])
    saved_cfg = ckpt["config"]
    saved_spe = int(ckpt["steps_per_epoch"])
    if run_config is not None and "train" in saved_cfg:
        _check_resumable(saved_cfg, run_config)
    _check_engine_resumable(ckpt, engine)
    partials = ckpt.get("partials")
    if partials is not None and len(partials) == int(engine.world_size):
        try:
            state.partial = StepSums.from_dict(partials[int(engine.rank)])
        except CONTENT_ERRORS as e:
            raise _malformed("partials", e) from e
    if state.next_step > 0 and saved_spe != spe:
        raise ConfigError(
            f"cannot resume mid-epoch: the checkpoint was taken at step {state.next_step} of "
            f"epoch {state.epoch} with {saved_spe} steps per epoch, but this run has {spe} "
            f"(different world size or batch size?); resume with the original settings"
        )
    return state


def check_resumable(run_dir: PathLikeStr, config: Config) -> Any:
    """Check, without building an engine, that ``config`` can resume the run in ``run_dir``.

    The checks :meth:`Trainer.fit` makes when it restores the latest checkpoint (same engine,
    same data, model and optimiser, same training keys that give the checkpoint its meaning),
    run early: ``fleetgnn train --resume`` calls it before starting any worker. Mid-epoch
    step-count checks need the engine and stay in :meth:`Trainer.fit`.

    Returns:
        The checked checkpoint's trainer state (its ``"trainer"`` entry, for
        :func:`finished_reason`), or ``None`` when there is no checkpoint.

    Raises:
        ConfigError: ``config`` differs from the checkpoint's where it matters.
        CheckpointError: Checkpoints exist but none can be loaded.
    """
    engine_cfg = config.engine_config()

    def check(ckpt: dict[str, Any]) -> None:
        check_checkpoint(ckpt)
        saved_cfg = ckpt.get("config")
        if isinstance(saved_cfg, Mapping) and "train" in saved_cfg:
            _check_resumable(saved_cfg, config)
        _check_engine_config_resumable(ckpt, config.train.engine, engine_cfg.to_dict(), engine_cfg)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a fallback to prev.pt is reported when the run resumes
        ckpt = CheckpointDir(Path(run_dir) / "checkpoints").load_latest(mmap=True, check=check)
    return None if ckpt is None else ckpt["trainer"]


def _check_engine_resumable(ckpt: Mapping[str, Any], engine: Engine) -> None:
    """Raise ConfigError when the checkpoint was taken by another engine or incompatible config."""
    _check_engine_config_resumable(ckpt, engine.name, engine_config_dict(engine), engine.config)


def _check_engine_config_resumable(
    ckpt: Mapping[str, Any], name: str, now: Mapping[str, Any] | None, config: Any
) -> None:
    saved_name = ckpt.get("engine_name")
    if saved_name is not None and saved_name != name:
        raise ConfigError(
            f"cannot resume: the checkpoint was written by engine {saved_name!r}, this run uses "
            f"{name!r}; resume with the same engine or start a fresh run directory"
        )
    saved = ckpt.get("engine_config")
    keys = getattr(config, "RESUME_KEYS", ())
    if not saved or now is None:
        return
    diffs = [
        f"{k}: checkpoint {saved.get(k)!r}, now {now.get(k)!r}"
        for k in keys
        if saved.get(k) != now.get(k)
    ]
    if diffs:
        raise ConfigError(
            "cannot resume: the engine config differs from the checkpoint's in "
            + "; ".join(diffs)
            + ". Resume with the original settings, or start a fresh run directory"
        )


def _check_resumable(saved: Mapping[str, Any], cfg: Config) -> None:
    """Raise ConfigError when ``cfg`` differs from the checkpoint's config where it matters."""
    now = cfg.to_dict()
    diffs: list[str] = []
    for section in ("data", "model", "optim"):
        a, b = saved.get(section, {}), now[section]
        # a null model field means the model's default: equal to that default written out
        ra, rb = (
            (model_section_resolved(a), model_section_resolved(b)) if section == "model" else (a, b)
        )
        free = RESUME_OPTIM_KEYS if section == "optim" else ()
        for k in b:
            if ra.get(k) != rb[k] and k not in free:
                diffs.append(f"{section}.{k}: checkpoint {a.get(k)!r}, now {b[k]!r}")
    for k in RESUME_TRAIN_KEYS:
        a = saved.get("train", {}).get(k)
        if a != now["train"][k]:
            diffs.append(f"train.{k}: checkpoint {a!r}, now {now['train'][k]!r}")
    if diffs:
        raise ConfigError(
            "cannot resume: the config differs from the checkpoint's in "
            + "; ".join(diffs)
            + ". Resume with the original config (of optim, only "
            + " and ".join(RESUME_OPTIM_KEYS)
            + " may change on resume), or start a fresh run directory"
        )


def apply_optim_changes(ckpt: Mapping[str, Any], run_config: Config | None) -> None:
    """Bring ``ckpt``'s optimizer settings to ``run_config``'s where they changed (in place).

    Only the :data:`RESUME_OPTIM_KEYS`: a new ``optim.lr`` scales the learning rates of the
    optimizer's parameter groups and of the schedule's state by new / old; a new
    ``optim.weight_decay`` is set on every group. An engine state without a ``torch.optim``
    state dict under ``"optimizer"`` is left as it is.
    """
    saved = ckpt.get("config")
    if run_config is None or not isinstance(saved, Mapping):
        return
    old, new = saved.get("optim", {}), run_config.optim
    engine = ckpt.get("engine")
    optim = engine.get("optimizer") if isinstance(engine, Mapping) else None
    groups = optim.get("param_groups") if isinstance(optim, Mapping) else None
    if not isinstance(groups, list):
        return
    was = old.get("lr")
    scalable = isinstance(was, float | int) and math.isfinite(was) and was > 0
    ratio = new.lr / was if scalable else 1.0
    for group in groups:
        if not scalable:  # a learning rate no validation would pass now: start from the new one
            group["lr"] = new.lr
        elif ratio != 1.0:
            for k in _GROUP_LRS:
                if isinstance(group.get(k), float | int):
                    group[k] = group[k] * ratio
        if old.get("weight_decay") != new.weight_decay and "weight_decay" in group:
            group["weight_decay"] = new.weight_decay
    schedule = (ckpt.get("callbacks") or {}).get("lr_scheduler")
    if ratio != 1.0 and isinstance(schedule, dict):
        for k in _SCHEDULE_LRS:
            if isinstance(schedule.get(k), list):
                schedule[k] = [v * ratio if isinstance(v, float | int) else v for v in schedule[k]]
