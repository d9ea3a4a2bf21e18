"""The planner: rank the engines that fit, pick the fastest, say why.

:func:`make_plan` evaluates every engine's cost model (:mod:`fleetgnn.cost.models`) for a
workload, a hardware profile and a world size, searches each engine's knobs (the offload engine's
number of chunks: the smallest power of two that fits the device), drops the engines that do not
fit, and picks the one with the smallest predicted time for the run's epochs. When nothing fits
it refuses, naming the smallest change that would make something fit (more ranks, a smaller
hidden size, more device memory).

Full-graph and mini-batch epochs are different units (one optimisation step against many): in
``auto`` mode the planner compares the time of the same number of epochs and says so; restrict
the mode (``full`` / ``minibatch``) to compare like with like.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from fleetgnn.config import ENGINES
from fleetgnn.cost.hardware import HardwareProfile
from fleetgnn.cost.models import MODELS, ModelShape, Prediction, Workload
from fleetgnn.errors import ConfigError

#: Chunk counts the offload model tries, smallest first.
OFFLOAD_CHUNKS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MODES: tuple[str, ...] = ("auto", "full", "minibatch")


@dataclasses.dataclass
class Plan:
    """The planner's answer.

    Attributes:
        choice: The chosen engine (``None``: nothing fits).
        mode: ``full`` or ``minibatch`` (of the choice).
        predictions: Every engine considered, by name.
        reason: One paragraph: why this engine.
        hardware: The profile's name.
        nproc: Ranks planned for.
        epochs: Epochs the times are compared over.
        workload: The counts the plan used and where they come from.
    """

    choice: str | None
    mode: str | None
    predictions: dict[str, Prediction]
    reason: str
    hardware: str
    nproc: int
    epochs: int
    workload: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` object (choice, mode, reason, hardware, workload, engines, ...)."""
        return {
            "choice": self.choice,
            "mode": self.mode,
            "reason": self.reason,
            "hardware": self.hardware,
            "nproc": self.nproc,
            "epochs": self.epochs,
            "workload": dict(self.workload),
            "engines": {n: p.to_dict() for n, p in self.predictions.items()},
        }

    def table(self) -> str:
        """A plain-text table of every engine, then the choice and its reason."""

        def gib(b: float) -> str:
            return f"{b / 2**30:.2f}"

        head = (
            f"{'engine':<10} {'fits':<5} {'epoch s':>9} {'device GiB':>11} {'host GiB':>9} "
            f"{'peer GB':>8} {'h2d GB':>8} {'net GB':>7}  knobs"
        )
        lines = [head, "-" * len(head)]
        for name, p in self.predictions.items():
            t = p.traffic
            knobs = ", ".join(f"{k}={v}" for k, v in p.knobs.items())
            lines.append(
                f"{name:<10} {'yes' if p.fits else 'no':<5} {p.epoch_s:>9.3g} "
                f"{gib(p.memory.get('device', 0)):>11} {gib(p.memory.get('host', 0)):>9} "
                f"{t.get('peer', 0) / 1e9:>8.3g} {t.get('h2d', 0) / 1e9:>8.3g} "
                f"{t.get('net', 0) / 1e9:>7.3g}  {knobs}"
            )
        lines += ["", f"choice: {self.choice or 'none fits'}", self.reason]
        return "\n".join(lines)


def _candidates(mode: str, nproc: int, engines: Sequence[str] | None) -> list[str]:
    names = []
    for name, spec in ENGINES.items():
        if not spec.available or name not in MODELS:
            continue
        if engines and name not in engines:
            continue
        if mode != "auto" and mode not in spec.modes:
            continue
        if name == "reference" and nproc > 1:
            continue
        names.append(name)
    return names


def _offload(wl: Workload, hw: HardwareProfile, nproc: int, knobs: dict[str, Any]) -> Prediction:
    """The smallest chunk count that fits (or the one given)."""
    given = knobs.get("chunks")
    most = max(1, wl.num_nodes // max(nproc, 1))  # one node per chunk
    tries = [int(given)] if given else [m for m in OFFLOAD_CHUNKS if m <= most] or [1]
    for m in tries:
        pred = MODELS["offload"](wl, hw, nproc, **{**knobs, "chunks": m})
        if pred.fits:
            break
    return pred


def predict_engine(
    name: str, wl: Workload, hw: HardwareProfile, nproc: int, knobs: dict[str, Any] | None = None
) -> Prediction:
    """One engine's prediction, its knobs searched where the engine has a search."""
    knobs = dict(knobs or {})
    if name == "offload":
        return _offload(wl, hw, nproc, knobs)
    return MODELS[name](wl, hw, nproc, **knobs)


def _mode_of(name: str, mode: str) -> str:
    modes = ENGINES[name].modes
    return mode if mode in modes else modes[0]


def _smallest_change(wl: Workload, hw: HardwareProfile, nproc: int, names: list[str]) -> str:
    """What would make some engine fit: more ranks, a smaller hidden size, more device memory."""
    for more in (2 * nproc, 4 * nproc, 8 * nproc):
        if more > hw.num_devices * hw.num_hosts:
            break
        if any(predict_engine(n, wl, hw, more).fits for n in names if n != "reference"):
            return f"--nproc {more}"
    m = wl.model
    hidden = max(m.widths[1:-1], default=0)
    if hidden > 1:
        half = dataclasses.replace(
            wl,
            model=dataclasses.replace(
                m,
                widths=(m.widths[0], *[max(1, w // 2) for w in m.widths[1:-1]], m.widths[-1]),
            ),
        )
        if any(predict_engine(n, half, hw, nproc).fits for n in names):
            return f"a smaller hidden size (model.hidden={max(1, hidden // 2)})"
    need = min(p.memory.get("device", 0) for p in (predict_engine(n, wl, hw, nproc) for n in names))
    return f"devices with at least {need / 2**30:.1f} GiB"


def make_plan(
    wl: Workload,
    hw: HardwareProfile,
    nproc: int,
    *,
    mode: str = "auto",
    engines: Sequence[str] | None = None,
    epochs: int = 1,
    knobs: dict[str, dict[str, Any]] | None = None,
) -> Plan:
    """Rank the engines for ``wl`` on ``hw`` with ``nproc`` ranks and pick one.

    Args:
        wl: The workload.
        hw: The hardware profile (restricted to ``nproc`` devices when it has more).
        nproc: Ranks (devices) to plan for.
        mode: ``auto``, ``full`` or ``minibatch``.
        engines: Only these engines (``None``: every available engine of the mode).
        epochs: Epochs the times are compared over (``auto`` mode mixes full-graph and
            mini-batch epochs).
        knobs: Per-engine fixed knobs (e.g. ``{"offload": {"chunks": 8}}``).

    Raises:
        ConfigError: A bad mode or engine name, or ``nproc`` beyond the machine.
    """
    if mode not in MODES:
        raise ConfigError(f"mode={mode!r} is not one of {', '.join(MODES)}")
    for e in engines or ():
        if e not in ENGINES:
            raise ConfigError(f"unknown engine {e!r}; choose one of: {', '.join(ENGINES)}")
    if nproc < 1 or nproc > hw.num_devices * hw.num_hosts:
        raise ConfigError(
            f"--nproc {nproc} does not fit hardware profile {hw.name!r} "
            f"({hw.num_hosts} host(s) x {hw.num_devices} devices)"
        )
    names = _candidates(mode, nproc, engines)
    if not names:
        raise ConfigError(f"no available engine runs mode={mode!r} with {nproc} rank(s)")
    hw_used = hw.with_devices(min(nproc, hw.num_devices)) if hw.num_hosts == 1 else hw
    knobs = knobs or {}
    preds = {n: predict_engine(n, wl, hw_used, nproc, knobs.get(n)) for n in names}
    fitting = [n for n in names if preds[n].fits]
    info = {
        "nodes": wl.num_nodes,
        "edges": wl.num_edges,
        "features": wl.num_features,
        "classes": wl.num_classes,
        "train": wl.num_train,
        "model": wl.model.name,
        "widths": list(wl.model.widths),
        "source": wl.source,
    }
    if not fitting:
        change = _smallest_change(wl, hw, nproc, names)
        why = "; ".join(f"{n}: {' / '.join(preds[n].reasons)}" for n in names)
        reason = (
            f"Nothing fits on {hw.name} with {nproc} rank(s) ({why}). Smallest change: {change}."
        )
        return Plan(None, None, preds, reason, hw.name, nproc, epochs, info)
    best = min(fitting, key=lambda n: preds[n].epoch_s)
    p = preds[best]
    others = [n for n in fitting if n != best]
    parts = [
        f"{best} is predicted fastest of the engines that fit: {p.epoch_s:.3g} s per epoch"
        + (
            " ("
            + ", ".join(
                f"{n} {preds[n].epoch_s:.3g} s, {preds[n].epoch_s / p.epoch_s:.2f}x"
                for n in sorted(others, key=lambda n: preds[n].epoch_s)
            )
            + ")"
            if others
            else ""
        )
        + "."
    ]
    slow = max(p.breakdown, key=p.breakdown.get) if p.breakdown else None
    if slow:
        parts.append(f"Its time goes mostly to {slow} ({p.breakdown[slow]:.3g} s).")
    for n in names:
        if not preds[n].fits:
            parts.append(f"{n} does not fit: {' / '.join(preds[n].reasons)}.")
    if best == "offload":
        parts.append(f"Offload streams {p.knobs['chunks']} chunk(s) per rank through the device.")
    if mode == "auto" and {ENGINES[n].modes[0] for n in fitting} == {"full", "minibatch"}:
        parts.append(
            "Full-graph and mini-batch epochs differ (one step against many): times are "
            "compared per epoch; restrict --mode to compare like with like."
        )
    counts = "exact counts from the dataset" if wl.graph is not None else "modelled counts"
    parts.append(f"Hardware {hw.name}, {nproc} rank(s), {counts}.")
    return Plan(best, _mode_of(best, mode), preds, " ".join(parts), hw.name, nproc, epochs, info)


def workload_from_config(
    cfg: Any, graph: Any = None, shape: dict[str, Any] | None = None
) -> Workload:
    """The workload of a run config, from a dataset (exact counts) or a shape (modelled).

    Args:
        cfg: A :class:`~fleetgnn.config.Config`.
        graph: The dataset (``None``: use ``shape``).
        shape: ``{"nodes", "edges", "features", "classes"[, "train"]}``.

    Raises:
        ConfigError: Neither given, or a shape without the four counts.
    """
    m = cfg.model
    kwargs: dict[str, Any] = {"num_layers": m.num_layers}
    if m.hidden is not None:
        kwargs["hidden_dim"] = m.hidden
    if m.heads is not None:
        kwargs["heads"] = m.heads
    elem = 8 if cfg.train.dtype == "float64" else 4
    if graph is not None:
        num_train = int(graph.train_mask.sum()) if graph.train_mask is not None else 0
        counts = (graph.num_nodes, graph.num_edges, graph.num_features, int(graph.num_classes))
        source = f"dataset {graph.name!r}"
    elif shape is not None:
        missing = [k for k in ("nodes", "edges", "features", "classes") if k not in shape]
        if missing:
            raise ConfigError(
                f"--shape needs nodes, edges, features and classes (missing {', '.join(missing)})"
            )
        counts = tuple(int(shape[k]) for k in ("nodes", "edges", "features", "classes"))
        num_train = int(shape.get("train", max(1, counts[0] // 10)))
        source = (
            "shape "
            + ",".join(f"{k}={v}" for k, v in shape.items())
            + ("" if "train" in shape else f" (train={num_train}: 10% of nodes, assumed)")
            + "; uniform random neighbours assumed for halo and chunk counts"
        )
    else:
        raise ConfigError("plan for a dataset (--dataset DIR) or a shape (--shape nodes=...,...)")
    model = ModelShape.build(m.name, counts[2], counts[3], elem=elem, **kwargs)
    return Workload(
        num_nodes=counts[0],
        num_edges=counts[1],
        num_features=counts[2],
        num_classes=counts[3],
        num_train=num_train,
        model=model,
        batch_size=int(cfg.train.batch_size),
        fanouts=tuple(int(f) for f in cfg.train.fanouts),
        graph=graph,
        source=source,
    )
