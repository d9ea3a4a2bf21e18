"""Epochs to a target accuracy for ``fleetgnn plan --target-acc`` and ``train --engine auto``.

The planner ranks by time to a target validation accuracy when it knows how many epochs each
training mode needs (:mod:`fleetgnn.cost.target`: a property of the mode, not the engine). This
module finds those numbers, in order of precedence:

1. given by the user: ``--epochs-to-target full=K,minibatch=K``;
2. read from earlier runs: ``--history RUN_DIR ...`` (any engine; its ``config.yaml`` says the
   mode, its ``metrics.jsonl`` the first epoch whose ``val_acc`` reached the target; a run that
   never reached it gives a lower bound);
3. measured: ``--probe-epochs K`` trains the single-process ``reference`` engine with the plan's
   run config, once per mode still without an exact number, for at most ``K`` epochs (stopping
   at the first epoch that reaches the target) in a temporary directory, and states its cost.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetgnn.errors import ConfigError, FleetgnnError

if TYPE_CHECKING:  # the cost package imports torch; the parser's options need none of it
    from fleetgnn.cost import EpochsToTarget

#: Config keys whose value changes how many epochs a mode needs (compared with --history runs).
_COMPARED: tuple[str, ...] = (
    "model.name",
    "model.hidden",
    "model.num_layers",
    "model.heads",
    "model.dropout",
    "model.norm",
    "model.residual",
    "optim.optimizer",
    "optim.lr",
    "optim.weight_decay",
    "train.dtype",
)
#: Further keys compared for mini-batch runs (the sampler's).
_COMPARED_MINIBATCH: tuple[str, ...] = ("train.batch_size", "train.fanouts")


@dataclasses.dataclass(frozen=True)
class TargetRequest:
    """What ``--target-acc`` and its companions asked for.

    Attributes:
        target_acc: The validation accuracy, in ``(0, 1]``.
        given: Epochs to target given on the command line, by mode.
        history: Run directories to read epochs to target from.
        probe_epochs: Epochs a probe run may take per mode (``None``: no probe).
    """

    target_acc: float
    given: dict[str, EpochsToTarget] = dataclasses.field(default_factory=dict)
    history: tuple[Path, ...] = ()
    probe_epochs: int | None = None


def add_target_options(p: argparse.ArgumentParser, what: str = "rank the engines") -> None:
    """``--target-acc``, ``--epochs-to-target``, ``--history`` and ``--probe-epochs``."""
    g = p.add_argument_group(
        "time to accuracy",
        "full-graph and mini-batch epochs are different units; with a target accuracy and the "
        "epochs each mode needs to reach it the planner ranks by time to the target",
    )
    g.add_argument(
        "--target-acc",
        default=None,
        metavar="A",
        help=f"{what} by predicted time to this validation accuracy, in (0, 1]",
    )
    g.add_argument(
        "--epochs-to-target",
        default=None,
        metavar="MODE=K[,MODE=K]",
        help="epochs each mode needs to reach the target, e.g. full=120,minibatch=8",
    )
    g.add_argument(
        "--history",
        nargs="+",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="earlier runs (any engine) to read epochs to target from (metrics.jsonl)",
    )
    g.add_argument(
        "--probe-epochs",
        default=None,
        metavar="K",
        help="measure epochs to target with a short reference run of at most K epochs per mode "
        "still without an estimate (needs the dataset)",
    )


def parse_epochs_to_target(text: str) -> dict[str, EpochsToTarget]:
    """``full=K,minibatch=K`` (either or both) -> estimates by mode.

    Raises:
        ConfigError: An item that is not ``MODE=K``, an unknown or repeated mode, or ``K`` not
            a whole number >= 1.
    """
    from fleetgnn.cost import TARGET_MODES, EpochsToTarget

    out: dict[str, EpochsToTarget] = {}
    items = [i.strip() for i in str(text).split(",") if i.strip()]
    if not items:
        raise ConfigError(
            "--epochs-to-target is empty; give MODE=K items, e.g. full=120,minibatch=8"
        )
    for item in items:
        mode, sep, value = item.partition("=")
        mode = mode.strip()
        if not sep or mode not in TARGET_MODES:
            raise ConfigError(
                f"--epochs-to-target item {item!r}: expected MODE=K with MODE one of "
                f"{', '.join(TARGET_MODES)} (e.g. full=120,minibatch=8)"
            )
        if mode in out:
            raise ConfigError(f"--epochs-to-target gives mode {mode!r} twice")
        out[mode] = EpochsToTarget(mode, _whole(value, f"--epochs-to-target {mode}"), True, "given")
    return out


def _whole(value: Any, what: str) -> int:
    text = str(value).strip()
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{what} must be a whole number of epochs >= 1 (got {text!r})")
    return int(text)


def target_request(args: argparse.Namespace) -> TargetRequest | None:
    """The :class:`TargetRequest` of parsed arguments (``None``: no ``--target-acc``).

    Raises:
        ConfigError: A bad value, or an estimate option without ``--target-acc``.
    """
    acc = getattr(args, "target_acc", None)
    companions = {
        "--epochs-to-target": getattr(args, "epochs_to_target", None),
        "--history": getattr(args, "history", None),
        "--probe-epochs": getattr(args, "probe_epochs", None),
    }
    if acc is None:
        used = [k for k, v in companions.items() if v is not None]
        if used:
            raise ConfigError(
                f"{used[0]} estimates epochs to a target accuracy: add --target-acc A "
                f"(a validation accuracy in (0, 1])"
            )
        return None
    from fleetgnn.cost import check_target_acc  # imports torch: only when a target is asked

    given = companions["--epochs-to-target"]
    probe = companions["--probe-epochs"]
    return TargetRequest(
        target_acc=check_target_acc(acc),
        given=parse_epochs_to_target(given) if given is not None else {},
        history=tuple(companions["--history"] or ()),
        probe_epochs=_whole(probe, "--probe-epochs") if probe is not None else None,
    )


def _get(cfg: Any, key: str) -> Any:
    section, name = key.split(".")
    value = getattr(getattr(cfg, section), name)
    return list(value) if isinstance(value, tuple) else value


def _differences(run_cfg: Any, cfg: Any, mode: str) -> list[str]:
    """The config keys (that change epochs to target) where a history run differs from ``cfg``."""
    from fleetgnn.train import resolve_model_defaults

    mine, theirs = resolve_model_defaults(cfg), resolve_model_defaults(run_cfg)
    keys = _COMPARED + (_COMPARED_MINIBATCH if mode == "minibatch" else ())
    return [
        f"{k}={_get(theirs, k)} (plan: {_get(mine, k)})"
        for k in keys
        if _get(theirs, k) != _get(mine, k)
    ]


def history_estimates(
    run_dirs: Sequence[Path], target_acc: float, cfg: Any
) -> list[EpochsToTarget]:
    """Epochs to ``target_acc`` from earlier runs, one estimate per run directory.

    A run's mode comes from its ``config.yaml`` (``train.mode``, or its engine's default mode);
    its estimate's source names the run, its engine, and the config keys where it differs from
    ``cfg`` (the plan's run config).

    Raises:
        ConfigError: A directory without ``metrics.jsonl`` or ``config.yaml``, or whose metrics
            have no evaluated epoch.
    """
    from fleetgnn.cost import epochs_from_records
    from fleetgnn.train import load_config, read_metrics

    out = []
    for d in run_dirs:
        d = Path(d)
        if not d.is_dir():
            raise ConfigError(
                f"--history {d}: not a directory; give run directories written by 'fleetgnn train'"
            )
        for name in ("metrics.jsonl", "config.yaml"):
            if not (d / name).is_file():
                raise ConfigError(
                    f"--history {d}: no {name} there; give run directories written by "
                    f"'fleetgnn train'"
                )
        try:
            run_cfg = load_config(d / "config.yaml")
            records = read_metrics(d / "metrics.jsonl")
        except FleetgnnError as e:
            raise ConfigError(f"--history {d}: {e}") from None
        mode = run_cfg.mode
        source = f"run {d} ({run_cfg.train.engine}, {mode})"
        diffs = _differences(run_cfg, cfg, mode)
        if diffs:
            source += "; differs from the plan's config: " + ", ".join(diffs)
        est = epochs_from_records(records, target_acc, mode, source)
        if est is None:
            raise ConfigError(
                f"--history {d}: metrics.jsonl has no evaluated epoch (no val_acc); the run "
                f"stopped before its first evaluation"
            )
        out.append(est)
    return out


def probe_epochs_to_target(
    cfg: Any, graph: Any, dataset: Path | None, mode: str, max_epochs: int, target_acc: float
) -> EpochsToTarget:
    """Train ``reference`` in ``mode`` until it reaches ``target_acc`` or ``max_epochs``.

    The run is ``cfg`` (model, optimiser, batch size, fanouts, seed) with ``train.engine:
    reference``, one process, evaluation after every epoch, in a temporary directory removed
    afterwards; epoch ``k`` continues the run of epoch ``k - 1`` from its checkpoint, which
    reproduces the uninterrupted run. Threads: ``train.threads`` (``$OMP_NUM_THREADS`` or the
    usable cores when it is ``null``); the caller's thread count is restored.

    Args:
        cfg: The plan's run config.
        graph: The dataset.
        dataset: Its directory (its recorded feature transform applies), ``None``: none.
        mode: ``full`` or ``minibatch``.
        max_epochs: At most this many epochs.
        target_acc: The validation accuracy to reach.

    Returns:
        The estimate; its ``cost_s`` is the probe's wall time.
    """
    import torch

    from fleetgnn.cost import EpochsToTarget, epochs_from_records
    from fleetgnn.train import (
        Trainer,
        engine_from_config,
        read_metrics,
        resolve_feature_norm,
        resolve_model_defaults,
        resolve_threads,
    )

    train = dataclasses.replace(
        cfg.train,
        engine="reference",
        mode=mode,
        nproc=1,
        epochs=1,
        eval_every=1,
        patience=None,
        max_steps=None,
        checkpoint_every=0,
        checkpoint_interval=1e9,  # only the end of each epoch's fit saves one
    )
    data = dataclasses.replace(
        cfg.data, dataset=str(Path(dataset).absolute()) if dataset is not None else None
    )
    threads = resolve_threads(cfg.train.threads, 1, os.environ.get("OMP_NUM_THREADS"))
    saved_threads = torch.get_num_threads()
    t0 = time.perf_counter()
    est: EpochsToTarget | None = None
    try:
        torch.set_num_threads(threads)
        with tempfile.TemporaryDirectory(prefix="fleetgnn-probe-") as tmp:
            run_dir = Path(tmp) / mode
            probe = dataclasses.replace(cfg, train=train, data=data, run_dir=str(run_dir))
            probe = resolve_feature_norm(resolve_model_defaults(probe.validate()))
            with engine_from_config(probe, graph) as engine:
                for k in range(1, max_epochs + 1):
                    step = dataclasses.replace(probe, train=dataclasses.replace(train, epochs=k))
                    trainer = Trainer.from_config(engine, step, run_dir, quiet=True)
                    trainer.fit(resume=k > 1, overwrite=True)
                    records = read_metrics(run_dir / "metrics.jsonl")
                    est = epochs_from_records(records, target_acc, mode, "probe")
                    if est is not None and est.reached:
                        break
    finally:
        torch.set_num_threads(saved_threads)
    cost = time.perf_counter() - t0
    epochs = est.epochs if est is not None else max_epochs
    reached = est is not None and est.reached
    source = (
        f"probe: reference {mode}, {epochs} epoch(s) in {cost:.1f} s on this machine, "
        f"{threads} thread(s)"
    )
    return EpochsToTarget(mode, epochs, reached, source, cost)


def estimates_for(request: TargetRequest, cfg: Any) -> dict[str, EpochsToTarget]:
    """The given and history estimates by mode (given ones win), before any probe."""
    from fleetgnn.cost import merge_estimates

    found = merge_estimates(history_estimates(request.history, request.target_acc, cfg))
    return {**found, **request.given}


def modes_to_probe(plan: Any, request: TargetRequest) -> list[str]:
    """The modes of the engines that fit whose estimate is missing or only a lower bound."""
    from fleetgnn.cost import TARGET_MODES

    if not request.probe_epochs:
        return []
    modes = {plan.modes[n] for n in plan.ranking}
    have = plan.epochs_to_target
    return [m for m in TARGET_MODES if m in modes and not (m in have and have[m].reached)]


def with_probes(
    estimates: dict[str, EpochsToTarget], probes: Sequence[EpochsToTarget]
) -> dict[str, EpochsToTarget]:
    """``estimates`` with each mode's probe merged in (an exact number wins over a bound)."""
    from fleetgnn.cost import merge_estimates

    out = dict(estimates)
    for est in probes:
        out[est.mode] = merge_estimates([e for e in (out.get(est.mode), est) if e is not None])[
            est.mode
        ]
    return out


def check_request(request: TargetRequest | None, dataset: Path | None) -> None:
    """Refuse a probe without a dataset to run on.

    Raises:
        ConfigError: ``--probe-epochs`` with ``--shape`` (no data to train on).
    """
    if request is not None and request.probe_epochs and dataset is None:
        raise ConfigError(
            "--probe-epochs trains on the dataset: plan with --dataset DIR, or give "
            "--epochs-to-target / --history instead"
        )


__all__ = [
    "TargetRequest",
    "add_target_options",
    "check_request",
    "estimates_for",
    "history_estimates",
    "modes_to_probe",
    "parse_epochs_to_target",
    "probe_epochs_to_target",
    "target_request",
    "with_probes",
]
