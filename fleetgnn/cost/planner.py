"""The planner: rank the engines that fit, pick the fastest, say why.

:func:`make_plan` evaluates every engine's cost model (:mod:`fleetgnn.cost.models`) for a
workload, a hardware profile and a world size, searches each engine's knobs (the offload engine's
number of chunks: the smallest power of two that fits the device), drops the engines that do not
fit, and picks the one with the smallest predicted time for the run's epochs. When nothing fits
it refuses, naming the smallest change that would make something fit (more ranks, a smaller
hidden size, more device memory).

Full-graph and mini-batch epochs are different units (one optimisation step against many): in
``auto`` mode the planner compares the time of the same number of epochs and says so; restrict
the mode (``full`` / ``minibatch``) to compare like with like, or give a target validation
accuracy and the epochs each mode needs to reach it (:mod:`fleetgnn.cost.target`): the planner
then ranks by time to the target, ``epochs_to_target(mode) x epoch_s``, and ranks the engines
whose mode has no estimate after the others.

Link prediction (``train.task=link``): only the engines and modes that train it are considered
(:data:`~fleetgnn.config.run.LINK_ENGINES`; the others are named with the reason). Its time
model is the node model's with an edge batch as the seeds: ``batch_size`` edges per step are
``batch_size x (2 + negatives)`` seed nodes (the endpoints and the negatives' destinations, not
deduplicated: an upper bound, close on large sparse graphs), the training edges set the steps,
and on top come the decoder's flops over every pair (positives and negatives, forward and
backward) and, on ``fullgraph``, ``split`` and ``offload``, the exchange of the pairs' remote
endpoint rows. Mini-batch counts are then modelled, not replayed (the replay samples node seeds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fleetgnn.config import ENGINES
from fleetgnn.config.run import LINK_ENGINES, TYPED_LINK_ENGINES, link_refusal
from fleetgnn.cost.hardware import HardwareProfile
from fleetgnn.cost.models import MODELS, _bw, temporal_rate_text
from fleetgnn.cost.target import EpochsToTarget, as_estimates, check_target_acc
from fleetgnn.cost.workload import ModelShape, Prediction, TemporalSeeds, Workload
from fleetgnn.errors import ConfigError, DatasetError
from fleetgnn.graph.compact_rows import CompactRows
from fleetgnn.graph.hetero import HeteroGraph
from fleetgnn.nn.aggregator import EDGE_FEATURE_ENGINES
from fleetgnn.nn.models import EDGE_CONVS

#: The engines whose unified store holds feature rows as ``store.feature_dtype`` stores them.
STORE_ENGINES: tuple[str, ...] = ("minibatch", "split")
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
        target_acc: The validation accuracy the plan ranks by time to (``None``: none asked).
        epochs_to_target: Epochs each mode needs to reach ``target_acc``, by mode.
        ranked_by: ``"time_to_target"`` when the choice was ranked by time to the target,
            else ``"epoch_s"``.
        modes: The mode each engine would train in, by engine.
        ranking: The engines that fit, best first.
        rates_from: Where the profile's rates come from (its ``rates_from``, else a note that
            they are the built-in figures).
    """

    choice: str | None
    mode: str | None
    predictions: dict[str, Prediction]
    reason: str
    hardware: str
    nproc: int
    epochs: int
    workload: dict[str, Any]
    target_acc: float | None = None
    epochs_to_target: dict[str, EpochsToTarget] = dataclasses.field(default_factory=dict)
    ranked_by: str = "epoch_s"
    modes: dict[str, str] = dataclasses.field(default_factory=dict)
    ranking: list[str] = dataclasses.field(default_factory=list)
    rates_from: str = ""

    def estimate(self, name: str) -> EpochsToTarget | None:
        """The epochs-to-target estimate of ``name``'s mode (``None``: none, or no target)."""
        if self.target_acc is None:
            return None
        return self.epochs_to_target.get(self.modes.get(name, ""))

    def time_to_target(self, name: str) -> float | None:
        """Predicted seconds for ``name`` to reach the target (``None``: no exact estimate)."""
        est = self.estimate(name)
        if est is None or not est.reached:
            return None
        return est.epochs * self.predictions[name].epoch_s

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` object (choice, mode, reason, hardware, workload, engines, ...).

        Each engine also has ``mode``, ``epochs_to_target`` (an int when its mode reached the
        target, else ``null``) and ``time_to_target_s``; the top level has ``target_acc``,
        ``ranked_by`` (``"epoch_s"`` or ``"time_to_target"``), ``ranking`` and the estimates
        per mode under ``epochs_to_target``, and ``rates_from``.
        """
        engines = {}
        for n, p in self.predictions.items():
            est = self.estimate(n)
            engines[n] = p.to_dict() | {
                "mode": self.modes.get(n),
                "epochs_to_target": est.epochs if est is not None and est.reached else None,
                "time_to_target_s": self.time_to_target(n),
            }
        return {
            "choice": self.choice,
            "mode": self.mode,
            "reason": self.reason,
            "hardware": self.hardware,
            "rates_from": self.rates_from,
            "nproc": self.nproc,
            "epochs": self.epochs,
            "workload": dict(self.workload),
            "target_acc": self.target_acc,
            "ranked_by": self.ranked_by,
            "ranking": list(self.ranking),
            "epochs_to_target": {m: e.to_dict() for m, e in self.epochs_to_target.items()},
            "engines": engines,
        }

    def table(self) -> str:
        """A plain-text table of every engine, then the choice and its reason.

        ``device GiB`` is a rank's peak: ``memory`` plus ``workspace`` (``--json`` has both).

        With a target accuracy the table gains the columns ``to target`` (epochs: ``12``,
        ``> 5`` for a lower bound, ``?`` for no estimate) and ``target s`` (their time).
        """

        def gib(b: float) -> str:
            return f"{b / 2**30:.2f}"

        target = self.target_acc is not None
        extra_head = f" {'to target':>9} {'target s':>9}" if target else ""
        head = (
            f"{'engine':<10} {'fits':<5} {'epoch s':>9}{extra_head} {'device GiB':>11} "
            f"{'host GiB':>9} {'peer GB':>8} {'h2d GB':>8} {'net GB':>7}  knobs"
        )
        lines = [head, "-" * len(head)]
        for name, p in self.predictions.items():
            t = p.traffic
            knobs = ", ".join(
                f"{k}={_knob_text(k, v)}" for k, v in p.knobs.items() if k not in _LONG_KNOBS
            )  # the long ones are in --json and, for the choice, in the reason
            extra = ""
            if target:
                est, tt = self.estimate(name), self.time_to_target(name)
                epochs = est.text if est is not None else "?"
                if tt is not None:
                    secs = f"{tt:.3g}"
                elif est is not None:
                    secs = f"> {est.epochs * p.epoch_s:.3g}"
                else:
                    secs = "?"
                extra = f" {epochs:>9} {secs:>9}"
            lines.append(
                f"{name:<10} {'yes' if p.fits else 'no':<5} {p.epoch_s:>9.3g}{extra} "
                f"{gib(p.memory.get('device', 0) + p.workspace.get('device', 0)):>11} "
                f"{gib(p.memory.get('host', 0)):>9} "
                f"{t.get('peer', 0) / 1e9:>8.3g} {t.get('h2d', 0) / 1e9:>8.3g} "
                f"{t.get('net', 0) / 1e9:>7.3g}  {knobs}"
            )
        if target:
            lines.append(
                f"to target: epochs to validation accuracy {self.target_acc:g} of the engine's "
                f"mode; '> K': not reached in K epochs (a lower bound); '?': no estimate "
                f"(ranked after the others)"
            )
        lines.append("device GiB: per rank, what the engine holds plus its step's peak")
        if self.rates_from:
            lines.append(f"rates from: {self.rates_from}")
        lines += ["", f"choice: {self.choice or 'none fits'}", self.reason]
        return "\n".join(lines)


def _candidates(
    mode: str,
    nproc: int,
    engines: Sequence[str] | None,
    typed: bool = False,
    task: str = "node",
    model: str = "",
    edge_rows: bool = False,
) -> list[str]:
    names = []
    for name, spec in ENGINES.items():
        if not spec.available or name not in MODELS or (typed and not spec.typed):
            continue
        if engines and name not in engines:
            continue
        if mode != "auto" and mode not in spec.modes:
            continue
        if task == "link" and not _trains_link(name, mode):
            continue
        if typed and task == "link" and name not in TYPED_LINK_ENGINES:
            continue
        if typed and model in TYPED_UNHOSTED.get(name, ()):
            continue
        if edge_rows and name not in EDGE_FEATURE_ENGINES:
            continue
        if name == "reference" and mode == "minibatch":
            # its cost model is the full-graph mode's; sampled, it does one-rank minibatch's
            # work (without the store), which the minibatch engine's model prices
            continue
        # with nproc > 1 the reference stays a candidate: one process, which on a small graph
        # beats any split of it (it runs alone; `train --engine auto` then starts one)
        names.append(name)
    return names


def _trains_link(name: str, mode: str) -> bool:
    """Whether engine ``name`` trains link prediction in ``mode``.

    ``auto``: in the mode its cost model is for (``full`` for ``reference``, else its own).
    """
    if mode == "auto":
        mode = "full" if name == "reference" else ENGINES[name].modes[0]
    return (name, mode) in LINK_ENGINES


def _edge_refusal(wl: Workload, engine: str) -> str:
    """Why ``engine`` is not planned for a model that reads edge features."""
    return (
        f"model {wl.model.name!r} reads edge features, which the {engine} engine does not "
        f"carry; plan it on {', '.join(EDGE_FEATURE_ENGINES)}, or pick a model without them"
    )


def _edge_reason(wl: Workload, best: str, hw: HardwareProfile, skipped: Sequence[str]) -> str:
    """The reason's sentence on the edge rows (``wl.edge_dim`` set): their bytes, who holds them."""
    text = wl.edge_rows_text()
    if best in STORE_ENGINES:
        held = (
            "the store's edge table holds them in its tiers, sharing each tier's budget with "
            "the node rows (store.edge_share), and a step reads one per sampled edge"
        )
    else:
        width = wl.edge_dim * wl.model.elem
        held = (
            f"{best} holds its edges' rows read back at float{wl.model.elem * 8} width on the "
            f"{'device' if hw.kind == 'gpu' else 'process'}, {width:,} B per edge"
        )
    out = f"{text[0].upper()}{text[1:]}; {held}."
    if skipped:
        out += (
            f" Not planned: {' and '.join(skipped)} (they do not carry edge features; "
            f"{', '.join(EDGE_FEATURE_ENGINES)} do)."
        )
    return out


#: The plan's ``rates from`` of a profile that names no measurement.
BUILTIN_RATES = "the profile's built-in figures (datasheets, papers, estimates; see its source)"

#: Knobs too long for the table's column (shown by ``--json``; the choice's in its reason).
_LONG_KNOBS = frozenset({"order_reason", "stores", "edge_rows"})

#: Engines whose only gain is dividing one step's work between ranks, and the single-rank
#: engine doing the same work: on one rank they add their bookkeeping to it, so the planner
#: ranks them after the others there (a prediction within its error of the other's is no win).
SHARES_WORK: Mapping[str, str] = {"split": "minibatch", "fullgraph": "reference"}

#: What a breakdown component is spent on, for the reason's "Its time goes mostly to ...".
_SPENT_ON: Mapping[str, str] = {
    "compute": "the aggregations and transforms",
    "sample": "sampling",
    "gather": "gathering input rows",
    "peer": "communication between ranks over peer links",
    "net": "communication between ranks over the network",
    "h2d": "host-to-device copies",
    "d2h": "device-to-host copies",
    "dropout": "dropout over each layer's input",
    "overhead": "fixed per-layer and per-parameter-tensor work",
    "latency": "the fixed latency of collectives",
}


#: Knobs that are byte counts (the table shows them in units; ``--json`` keeps the bytes).
_BYTE_KNOBS = frozenset({"device_budget", "host_budget"})


def _knob_text(key: str, value: Any) -> str:
    """A knob as the table shows it: byte counts in binary units (``11.77 GiB``)."""
    from fleetgnn.graph.loaders._io import human_bytes

    if key in _BYTE_KNOBS and isinstance(value, (int, float)) and not isinstance(value, bool):
        return human_bytes(int(value), binary=True)
    return str(value)


def _one_rank_last(names: list[str], nproc: int) -> list[str]:
    """``names`` with, on one rank, the engines of :data:`SHARES_WORK` after the others."""
    if nproc != 1:
        return names
    return [n for n in names if n not in SHARES_WORK] + [n for n in names if n in SHARES_WORK]


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
    if wl.task == "link":
        return _link_prediction(name, wl, hw, nproc, knobs)
    if name == "offload":
        return _offload(wl, hw, nproc, knobs)
    if not ENGINES[name].distributed:  # the reference: one process, whatever nproc is
        nproc = 1
    return MODELS[name](wl, hw, nproc, **knobs)


def _link_prediction(
    name: str, wl: Workload, hw: HardwareProfile, nproc: int, knobs: dict[str, Any]
) -> Prediction:
    """A link-prediction epoch: the node model on the edge batches' seeds, plus the decoder.

    See the module docstring for the assumptions.
    """
    per = wl.seeds_per_item
    sampled = name in ("minibatch", "split")
    if sampled and wl.temporal is not None:
        # replayed: the task's timed edge batches (endpoints and negatives at each positive's
        # time) sampled in time over its training graph, the batch size in positives
        seeds = dataclasses.replace(wl, task="node", graph=wl.temporal.graph)
    else:  # the plain replay samples node seeds: an edge batch's seeds are modelled here
        seeds = dataclasses.replace(
            wl,
            task="node",
            num_train=wl.num_train * per,
            batch_size=wl.batch_size * per,
            graph=None if sampled else wl.graph,
        )
    pred = predict_engine(name, seeds, hw, nproc, knobs)
    # forward and backward (twice the forward) of the decoder's flops, at the dense rate
    decoder = 3.0 * wl.decoder_flops() / max(nproc, 1) / float(hw.gemm_rate)
    pred.breakdown["decoder"] = decoder
    pred.epoch_s += decoder
    if name in ("fullgraph", "split", "offload") and nproc > 1:
        # each rank fetches the rows of its pairs' other endpoints once per step (full mode:
        # one step; split: a step per global edge batch), each distinct node once, and returns
        # their gradients: 2 x rows x width
        steps = 1 if name in ("fullgraph", "offload") else pred.steps
        pairs = float(wl.num_train) / steps * (1 + int(wl.negatives)) / nproc
        rows = min(float(wl.num_nodes), pairs) * (nproc - 1) / nproc
        nbytes = int(2 * rows * wl.model.widths[-1] * wl.model.elem * nproc * steps)
        link = "peer" if nproc <= int(hw.num_devices) else "net"
        pred.traffic[link] = pred.traffic.get(link, 0) + nbytes
        seconds = nbytes / nproc / _bw(hw, link)
        pred.breakdown["endpoints"] = seconds
        pred.epoch_s += seconds
    pred.knobs.update({"task": "link", "negatives": int(wl.negatives), "decoder": wl.decoder})
    if sampled:
        pred.knobs["batch_size"] = wl.batch_size  # edges per step, as train.batch_size
    return pred


def _mode_of(name: str, mode: str, pred: Prediction | None = None) -> str:
    """The mode ``name`` trains in.

    The one asked for, else the one its prediction is for (the ``reference`` model is a
    full-graph one), else the engine's default.
    """
    modes = ENGINES[name].modes
    if mode in modes:
        return mode
    planned = pred.knobs.get("mode") if pred is not None else None
    return planned if planned in modes else modes[0]


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
    preds = [predict_engine(n, wl, hw, nproc) for n in names]
    need = min(p.memory.get("device", 0) + p.workspace.get("device", 0) for p in preds)
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
    target_acc: float | None = None,
    epochs_to_target: Mapping[str, EpochsToTarget | int] | None = None,
    predictions: Mapping[str, Prediction] | None = None,
) -> Plan:
    """Rank the engines for ``wl`` on ``hw`` with ``nproc`` ranks and pick one.

    Without a target the engines that fit are ranked by predicted epoch time. With
    ``target_acc`` and an estimate of the epochs a mode needs to reach it, they are ranked by
    time to the target, ``epochs_to_target[mode] x epoch_s``; engines whose mode has no estimate
    (or only a lower bound: not reached in K epochs) are ranked after them, by epoch time.

    Args:
        wl: The workload.
        hw: The hardware profile (restricted to ``nproc`` devices when it has more).
        nproc: Ranks (devices) to plan for.
        mode: ``auto``, ``full`` or ``minibatch``.
        engines: Only these engines (``None``: every available engine of the mode); for a
            typed workload (``wl.typed``) only those that train typed graphs.
        epochs: Epochs the times are compared over (``auto`` mode mixes full-graph and
            mini-batch epochs).
        knobs: Per-engine fixed knobs (e.g. ``{"offload": {"chunks": 8}}``).
        target_acc: Validation accuracy in ``(0, 1]`` to rank by time to (``None``: rank by
            epoch time).
        epochs_to_target: Epochs to ``target_acc`` per mode (``full``, ``minibatch``): plain
            counts or :class:`~fleetgnn.cost.target.EpochsToTarget` (which can be lower bounds
            and name their source).
        predictions: The engines' predictions of an earlier plan for the same workload,
            hardware and ranks (skips the cost models, e.g. to re-rank once estimates are in).

    Raises:
        ConfigError: A bad mode or engine name, ``nproc`` beyond the machine, a target outside
            ``(0, 1]``, or estimates for an unknown mode or without a target.
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
    if target_acc is not None:
        target_acc = check_target_acc(target_acc)
    estimates = as_estimates(epochs_to_target)
    if estimates and target_acc is None:
        raise ConfigError("epochs to target need a target accuracy (--target-acc)")
    if wl.task == "link":
        for e in engines or ():
            if not _trains_link(e, mode):
                asked = mode if mode != "auto" else ENGINES[e].modes[0]
                raise ConfigError("train.task=link: " + link_refusal(e, asked))
    if wl.edge_dim:
        for e in engines or ():
            if e not in EDGE_FEATURE_ENGINES:
                raise ConfigError(_edge_refusal(wl, e))
    names = _candidates(mode, nproc, engines, wl.typed, wl.task, wl.model.name, wl.edge_dim > 0)
    if not names and wl.typed:
        typed = [n for n, spec in ENGINES.items() if spec.typed]
        raise ConfigError(
            f"no engine among {list(engines or ENGINES)} trains typed graphs with mode={mode!r} "
            f"and {nproc} rank(s); typed graphs train on {' or '.join(typed)}"
        )
    if not names:
        raise ConfigError(f"no available engine runs mode={mode!r} with {nproc} rank(s)")
    hw_used = hw.with_devices(min(nproc, hw.num_devices)) if hw.num_hosts == 1 else hw
    knobs = knobs or {}
    given = predictions or {}
    preds = {
        n: given[n] if n in given else predict_engine(n, wl, hw_used, nproc, knobs.get(n))
        for n in names
    }
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
        "task": wl.task,
        "feature_dtype": wl.feature_dtype,
        "feature_row_bytes": wl.feature_row_bytes(),
    }
    if wl.edge_dim:  # the edge rows the model reads (a plan without them says nothing)
        info.update(
            edge_features=wl.edge_dim,
            edge_feature_dtype=wl.edge_feature_dtype,
            edge_row_bytes=wl.edge_row_bytes(),
            edge_share=wl.edge_share,
        )
    plan = Plan(
        None,
        None,
        preds,
        "",
        hw.name,
        nproc,
        epochs,
        info,
        target_acc=target_acc,
        epochs_to_target=estimates,
        modes={n: _mode_of(n, mode, preds[n]) for n in names},
        rates_from=hw.rates_from or BUILTIN_RATES,
    )
    if not fitting:
        change = _smallest_change(wl, hw, nproc, names)
        why = "; ".join(f"{n}: {' / '.join(preds[n].reasons)}" for n in names)
        plan.reason = (
            f"Nothing fits on {hw.name} with {nproc} rank(s) ({why}). Smallest change: {change}."
        )
        return plan
    by_epoch = _one_rank_last(sorted(fitting, key=lambda n: preds[n].epoch_s), nproc)
    timed = _one_rank_last(
        sorted(
            (n for n in fitting if plan.time_to_target(n) is not None),
            key=lambda n: plan.time_to_target(n) or 0.0,
        ),
        nproc,
    )
    if timed:
        plan.ranked_by = "time_to_target"
        plan.ranking = timed + [n for n in by_epoch if n not in timed]
        parts = _target_reason(plan, timed)
    else:
        plan.ranking = by_epoch
        parts = _epoch_reason(plan)
    best = plan.ranking[0]
    p = preds[best]
    demoted = _demoted(plan)
    if demoted:
        does = [f"{n} ({_time_text(plan, n)}) does {SHARES_WORK[n]}'s work" for n in demoted]
        parts.append(
            f"On one rank {' and '.join(does)}, {'each ' if len(does) > 1 else ''}plus its own "
            f"bookkeeping: ranked after the "
            f"others, as the gain of {' and '.join(demoted)} is dividing a step between ranks."
        )
    slow = max(p.breakdown, key=p.breakdown.get) if p.breakdown else None
    if slow:
        parts.append(
            f"Its time goes mostly to {_SPENT_ON.get(slow, slow)} "
            f"({p.breakdown[slow]:.3g} s per epoch)."
        )
    for n in names:
        if not preds[n].fits:
            parts.append(f"{n} does not fit: {' / '.join(preds[n].reasons)}.")
    if wl.temporal is not None:
        parts.append(_temporal_reason(wl, hw_used, p))
    if best == "offload":
        parts.append(f"Offload streams {p.knobs['chunks']} chunk(s) per rank through the device.")
    if "order_reason" in p.knobs:
        parts.append(f"Its store: {p.knobs['order_reason']}.")
    if wl.feature_dtype is not None:
        text = wl.stored_rows_text()
        held = (
            "its store's tiers hold them so"
            if best in STORE_ENGINES
            else f"{best} holds their read-back values at float{wl.model.elem * 8} width "
            f"(the store's tiers of {' and '.join(STORE_ENGINES)} hold the compact rows)"
        )
        parts.append(f"{text[0].upper()}{text[1:]}; {held}.")
    if wl.edge_dim:
        others = _candidates(mode, nproc, engines, wl.typed, wl.task, wl.model.name)
        parts.append(_edge_reason(wl, best, hw_used, [n for n in others if n not in names]))
    if (
        plan.ranked_by == "epoch_s"
        and mode == "auto"
        and {plan.modes[n] for n in fitting} == {"full", "minibatch"}
    ):
        parts.append(
            "Full-graph and mini-batch epochs differ (one step against many): times are "
            "compared per epoch; restrict --mode to compare like with like"
            + (
                ", or rank by time to a target accuracy (--target-acc)."
                if plan.target_acc is None
                else "."
            )
        )
    counts = "exact counts from the dataset" if wl.graph is not None else "modelled counts"
    parts.append(f"Hardware {hw.name}, {nproc} rank(s), {counts}.")
    plan.choice, plan.mode, plan.reason = best, plan.modes[best], " ".join(parts)
    return plan


def _temporal_reason(wl: Workload, hw: HardwareProfile, p: Prediction) -> str:
    """The reason's sentence on how a temporal task was priced (``wl.temporal`` set)."""
    t = wl.temporal
    assert t is not None
    seeds = (
        "each training node at its node time"
        if t.kind == "node"
        else "each positive's endpoints and negatives at the positive's time"
    )
    edges = p.knobs.get("sampled_edges")
    per = f"{int(edges):,} sampled edges per step and rank, " if edges is not None else ""
    if p.knobs.get("sampling") == "device":
        rate = (
            f"the device sampler's {float(hw.device_sample_rate or hw.sample_rate):.3g} edges/s "
            f"(store.sampling=device; the temporal sampler on the device is not measured)"
        )
    else:
        rate = temporal_rate_text(hw)
    return (
        f"Priced a temporal {t.kind} task: its batches were replayed with the temporal sampler "
        f"({t.strategy}; {seeds}, every seed's own subtree of in-edges before its time, not "
        f"deduplicated across seeds): {per}sampling at {rate}."
    )


def _demoted(plan: Plan) -> list[str]:
    """The engines :func:`_one_rank_last` put last while another engine was chosen."""
    if plan.nproc != 1 or not plan.ranking or plan.ranking[0] in SHARES_WORK:
        return []
    return [n for n in plan.ranking if n in SHARES_WORK]


def _time_text(plan: Plan, name: str) -> str:
    """``0.0609 s to target`` or ``0.0152 s per epoch``, as the plan ranks."""
    t = plan.time_to_target(name) if plan.ranked_by == "time_to_target" else None
    if t is not None:
        return f"{t:.3g} s to target"
    return f"{plan.predictions[name].epoch_s:.3g} s per epoch"


def _epoch_reason(plan: Plan) -> list[str]:
    """The reason's first sentences when the engines are ranked by epoch time."""
    preds, best = plan.predictions, plan.ranking[0]
    p = preds[best]
    demoted = _demoted(plan)
    others = [n for n in plan.ranking[1:] if n not in demoted]
    of = "single-rank engines" if demoted else "engines"
    parts = [
        f"{best} is predicted fastest of the {of} that fit: {p.epoch_s:.3g} s per epoch"
        + (
            " ("
            + ", ".join(
                f"{n} {preds[n].epoch_s:.3g} s, {preds[n].epoch_s / p.epoch_s:.2f}x" for n in others
            )
            + ")"
            if others
            else ""
        )
        + "."
    ]
    if plan.target_acc is not None:
        have = _estimates_text(plan)
        parts.append(
            f"Ranked by epoch time: no engine that fits has an estimate of the epochs to "
            f"validation accuracy {plan.target_acc:g} for its mode"
            + (f" ({have})" if have else "")
            + "; give --epochs-to-target, --history RUN_DIR or --probe-epochs K."
        )
    return parts


def _target_reason(plan: Plan, timed: list[str]) -> list[str]:
    """The reason's first sentences when the engines are ranked by time to the target."""
    preds, best = plan.predictions, timed[0]
    t_best = plan.time_to_target(best) or 0.0

    def cell(n: str) -> str:
        est = plan.estimate(n)
        k = est.epochs if est is not None else 0
        unit = "epoch" if k == 1 else "epochs"
        return f"{k} {unit} x {preds[n].epoch_s:.3g} s = {k * preds[n].epoch_s:.3g} s"

    others = ", ".join(
        f"{n} {cell(n)}, {(plan.time_to_target(n) or 0.0) / t_best:.2f}x" if t_best else cell(n)
        for n in timed[1:]
        if n not in _demoted(plan)
    )
    parts = [
        f"Ranked by time to validation accuracy {plan.target_acc:g} (epochs to target x "
        f"predicted epoch time; full-graph and mini-batch epochs are different units): {best} "
        f"gets there first{' of the single-rank engines' if _demoted(plan) else ''}, "
        f"{cell(best)}" + (f" ({others})" if others else "") + "."
    ]
    fastest_epoch = min(
        (n for n in plan.ranking if n not in _demoted(plan)), key=lambda n: preds[n].epoch_s
    )
    if fastest_epoch != best:
        parts.append(
            f"By epoch time alone {fastest_epoch} would win ({preds[fastest_epoch].epoch_s:.3g} s "
            f"against {preds[best].epoch_s:.3g} s per epoch), but its mode needs more epochs."
            if fastest_epoch in timed
            else f"By epoch time alone {fastest_epoch} would be faster "
            f"({preds[fastest_epoch].epoch_s:.3g} s against {preds[best].epoch_s:.3g} s per "
            f"epoch)."
        )
    rest = [n for n in plan.ranking if n not in timed]
    bounded = [n for n in rest if plan.estimate(n) is not None]
    unknown = [n for n in rest if plan.estimate(n) is None]
    if bounded:
        cells = []
        for n in bounded:
            est = plan.estimate(n)
            k = est.epochs if est is not None else 0
            low = k * preds[n].epoch_s
            cells.append(
                f"{n} (> {k} epochs, > {low:.3g} s"
                + ("" if low >= t_best else "; could still be faster, run it longer")
                + ")"
            )
        parts.append(
            "Ranked after, their mode did not reach the target in the epochs run: "
            + ", ".join(cells)
            + "."
        )
    if unknown:
        parts.append(
            "Ranked after, no estimate of epochs to target for their mode: "
            + ", ".join(f"{n} ({plan.modes[n]})" for n in unknown)
            + "."
        )
    parts.append(f"Epochs to target: {_estimates_text(plan)}.")
    return parts


def _estimates_text(plan: Plan) -> str:
    """``full 12 (given); minibatch > 5 (probe ...)``."""
    return "; ".join(f"{m} {e.text} ({e.source})" for m, e in sorted(plan.epochs_to_target.items()))


def knobs_from_config(cfg: Any) -> dict[str, dict[str, Any]]:
    """The engine knobs a run config fixes, for :func:`make_plan`'s ``knobs``.

    The run's seed (the replayed samples are the run's), the store's budgets where set (unset
    ones stay the planner's choice), its placement, topology and sampling; split's partition;
    fullgraph's partition, chunks and tuning (the aggregators it holds).
    """
    st, seed = cfg.store, int(cfg.train.seed)
    store: dict[str, Any] = {"seed": seed, "placement": st.placement, "topology": st.topology}
    store["sampling"] = st.sampling
    for key in ("device_budget", "host_budget"):
        if getattr(st, key) is not None:
            store[key] = getattr(st, key)
    split: dict[str, Any] = {"seed": seed, "partition": cfg.split.partition}
    if st.device_budget is not None:
        split["device_budget"] = st.device_budget
    fg = cfg.fullgraph
    fullgraph = {"seed": seed, "partition": fg.partition, "num_chunks": fg.num_chunks}
    fullgraph["tune"] = fg.tune
    return {"minibatch": store, "split": split, "fullgraph": fullgraph}


#: The homogeneous layer a typed model is priced as (its per-relation weights and sums aside).
TYPED_MODEL_TWINS: dict[str, str] = {"rgcn": "gcn", "rgat": "gat", "hetero-sage": "sage"}
#: Per engine, the typed models (by their twins' names, as a typed workload carries them) it
#: cannot host: R-GAT's fused per-type scores read whole bipartite relations, which the split
#: engine's per-relation exchange does not serve (:class:`~fleetgnn.nn.hetero.HeteroGNN`'s
#: ``hosts``).
TYPED_UNHOSTED: dict[str, tuple[str, ...]] = {"split": (TYPED_MODEL_TWINS["rgat"],)}


def _classes(graph: Any, task: str) -> int:
    """``graph``'s class count; 0 for a link task on a graph without labels.

    Link prediction reads no labels (its model's head is ``train.link_dim`` wide), so its
    workload needs none.

    Raises:
        DatasetError: A node task on a graph without labels.
    """
    if graph.num_classes:
        return int(graph.num_classes)
    if graph.y is not None:
        return int(np.max(np.asarray(graph.y))) + 1
    if task == "link":
        return 0
    raise DatasetError(
        f"dataset '{graph.name}' has no labels (y); node classification trains on them: "
        f"prepare it with labels, or plan link prediction (--task link), which reads none"
    )


def workload_from_config(
    cfg: Any,
    graph: Any = None,
    shape: dict[str, Any] | None = None,
    temporal: TemporalSeeds | None = None,
) -> Workload:
    """The workload of a run config, from a dataset (exact counts) or a shape (modelled).

    Args:
        cfg: A :class:`~fleetgnn.config.Config`.
        graph: The dataset (``None``: use ``shape``); a typed
            :class:`~fleetgnn.graph.hetero.HeteroGraph` gives a ``typed`` workload with the
            counts of its homogeneous view (:data:`TYPED_MODEL_TWINS`), its rows priced as
            the widest table stores them (a compact table without ``store.feature_dtype``:
            its stored rows).
        shape: ``{"nodes", "edges", "features", "classes"[, "train"]}``.
        temporal: The seeds of ``cfg``'s task on ``graph`` when it samples in time (the
            caller resolves ``train.temporal``; ``None``: it does not): the workload is then
            temporal, its training items (nodes or positives) are ``temporal.num_items``.

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
    name, typed = m.name, isinstance(graph, HeteroGraph)
    feature_dtype = cfg.store.feature_dtype  # the store's tiers count the stored rows
    if typed:  # counts of the homogeneous view, the typed model priced as its homogeneous twin
        name = TYPED_MODEL_TWINS.get(name, name)
        widths = [int(f.shape[1]) for f in graph.x.values()]
        widest = max(graph.x.values(), key=lambda f: int(f.shape[1]), default=None)
        if feature_dtype is None and isinstance(widest, CompactRows):  # its stored rows
            feature_dtype = widest.codec.name
        width = max(widths, default=int(m.hidden or 64))  # featureless: embedding rows
        num_train = int(np.asarray(graph.train_mask).sum()) if graph.train_mask is not None else 0
        counts = (graph.num_nodes, graph.num_edges, width, _classes(graph, cfg.train.task))
        s = graph.schema
        source = (
            f"typed dataset {graph.name!r} ({len(s.node_types)} node types, "
            f"{len(s.relations)} relations) as its homogeneous view: {m.name} priced as {name}, "
            f"F = the widest feature table, uniform random neighbours assumed"
        )
        graph = None
    elif graph is not None:
        num_train = int(graph.train_mask.sum()) if graph.train_mask is not None else 0
        classes = _classes(graph, cfg.train.task)
        counts = (graph.num_nodes, graph.num_edges, graph.num_features, classes)
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
            + (
                ""
                if "train" in shape or cfg.train.task == "link"
                else f" (train={num_train}: 10% of nodes, assumed)"
            )
            + "; uniform random neighbours assumed for halo and chunk counts"
        )
    else:
        raise ConfigError("plan for a dataset (--dataset DIR) or a shape (--shape nodes=...,...)")
    if not typed and name in EDGE_CONVS:  # the layers read edge rows: their width
        kwargs["edge_dim"] = _edge_dim(name, graph, shape)
    t = cfg.train
    link = t.task == "link"
    out_width = int(t.link_dim) if link else counts[3]
    if link and temporal is not None:  # the time split's training positives, counted
        num_train = int(temporal.num_items)
        source += (
            f"; link prediction: {num_train} training edges (the time split's), "
            f"{int(t.negatives)} negative(s) each, decoder {t.decoder}"
        )
    elif link:  # the training edges: one per undirected pair, less the held-out fractions
        num_train = max(1, int(counts[1] // 2 * (1.0 - float(t.val_edges) - float(t.test_edges))))
        source += (
            f"; link prediction: {num_train} training edges (undirected pairs, assumed, less "
            f"val/test), {int(t.negatives)} negative(s) each, decoder {t.decoder}"
        )
    if temporal is not None:
        if graph is None:
            raise ConfigError("a temporal workload needs the dataset (--dataset DIR)")
        num_train = int(temporal.num_items)
        what = (
            "training nodes, each sampled at its node time"
            if temporal.kind == "node"
            else "training positives, their endpoints and negatives sampled at their time"
        )
        source += (
            f"; temporal {temporal.kind} task: {num_train} {what} (temporal sampler, "
            f"{temporal.strategy})"
        )
    model = ModelShape.build(name, counts[2], out_width, elem=elem, **kwargs)
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
        typed=typed,
        task=str(t.task),
        negatives=int(t.negatives),
        decoder=str(t.decoder),
        # resolved by the caller (cli.plan.plan_for reads the dataset's); unset: none
        feature_norm=str(cfg.data.feature_norm or "none"),
        feature_dtype=feature_dtype,
        temporal=temporal,
        edge_feature_dtype=cfg.store.edge_feature_dtype,
        edge_share=cfg.store.edge_share,
    )


def _edge_dim(model: str, graph: Any, shape: dict[str, Any] | None) -> int:
    """Width of the edge rows ``model`` reads: the dataset's ``edge_attr``, or ``--shape``'s.

    Raises:
        ConfigError: The dataset has no ``edge_attr``, or the shape no ``edge_features``.
    """
    if graph is not None:
        if graph.edge_attr is None:
            raise ConfigError(
                f"model.name={model} reads edge features but '{graph.name}' has no edge_attr; "
                f"prepare a dataset with them (e.g. 'fleetgnn prepare synthetic "
                f"--edge-features 4') or pick another model"
            )
        return int(graph.num_edge_features)
    width = (shape or {}).get("edge_features")
    if not width:
        raise ConfigError(
            f"model.name={model} reads edge features: give their width in --shape "
            f"(edge_features=D, e.g. edge_features=4) or pick another model"
        )
    return int(width)
