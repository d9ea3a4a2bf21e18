"""``fleetgnn report``: figures and a table of one or more training runs.

Reads each run directory's ``metrics.jsonl`` (one record per epoch, see
:mod:`fleetgnn.train.metrics`; restart events and a partial last epoch included) and its
``summary.json`` / ``config.yaml`` when present, and draws one figure of four panels:

==========================  ============================================================
panel                       what
==========================  ============================================================
loss                        training loss (solid) and validation loss (dashed) per epoch;
                            a dash-dot vertical line where a run restarted
accuracy / ranking          node runs: accuracy, train (solid), val (dashed), test
                            (dotted) per epoch; link runs: AUC, AP and MRR of val
                            (dashed) and test (dotted), and the training pairs ranked
                            right (solid)
time per phase              seconds in sample / gather / forward / backward /
                            communication / optimizer: stacked areas per epoch for one
                            run, one stacked bar per run (mean of its full epochs) for
                            several
bytes per link              bytes per epoch on each link kind (local, peer, h2d, d2h,
                            net, disk) that carried any: a line per kind for one run,
                            bars grouped by kind for several (a run's ``local`` only
                            beside other runs' ``local``); log scale when they are
                            orders of magnitude apart
==========================  ============================================================

Splits differ by line style (no markers), so a 200-epoch run stays readable; one run gives
each split (link runs: each metric) its own colour too, several runs one colour per run,
labelled ``NAME (ENGINE)``. The loss axis names the loss of the runs' task: cross-entropy per
labelled node, or a link run's BCE (or BPR) per positive training pair.
Every axis names what it counts and its unit. Drawing uses
matplotlib's Agg canvas directly (no pyplot, no display), from the optional ``plot`` extra.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fleetgnn.cli.messages import printable
from fleetgnn.config.textfile import MAX_YAML_BYTES, load_json_file, load_yaml_file
from fleetgnn.errors import FleetgnnError
from fleetgnn.graph.loaders._io import human_bytes

#: The phases of an epoch's time breakdown, in drawing order (``times`` in ``metrics.jsonl``).
PHASES: tuple[str, ...] = ("sample", "gather", "forward", "backward", "communication", "optimizer")
PLOT_HINT = "pip install 'fleetgnn[plot]'"
_LINK_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 3)))


@dataclass(frozen=True)
class RunRecord:
    """What ``fleetgnn report`` reads from one run directory.

    Attributes:
        path: The run directory.
        name: Its short name in legends and the table (the directory name, made unique).
        engine: The engine that ran it.
        world_size: Its number of ranks.
        model: The model name, when recorded.
        epochs: Epoch records from ``metrics.jsonl``, by epoch.
        events: Event records (e.g. restarts), in file order.
        summary: ``summary.json``, or ``None`` for a run that has not finished.
        task: ``"node"`` or ``"link"`` (read off its metrics, see
            :func:`fleetgnn.train.results.run_task`).
        link_loss: A link run's loss (``"bce"``, ``"bpr"``), from its config.
    """

    path: Path
    name: str
    engine: str
    world_size: int
    model: str | None
    epochs: list[dict[str, Any]] = field(repr=False)
    events: list[dict[str, Any]] = field(repr=False)
    summary: dict[str, Any] | None = field(repr=False)
    task: str = "node"
    link_loss: str | None = None

    @property
    def label(self) -> str:
        """``NAME (ENGINE)``, with the rank count when there are several."""
        ranks = f", {self.world_size} ranks" if self.world_size > 1 else ""
        return f"{self.name} ({self.engine}{ranks})"


def _number(value: Any) -> float:
    """A metrics value as a float (``nan`` for ``null``)."""
    return float("nan") if value is None else float(value)


def _check_record(rec: dict[str, Any], path: Path, i: int) -> None:
    """Refuse an epoch record whose fields have the wrong types (a damaged file)."""
    where = f"metrics file '{path}' (epoch record {i + 1})"
    epoch = rec.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise FleetgnnError(
            f"{where}: 'epoch' must be an integer >= 0 (got {epoch!r}); the file is damaged"
        )
    for key in ("loss", *_QUALITY_KEYS, "val_loss", "epoch_time_s"):
        v = rec.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise FleetgnnError(
                f"{where}: '{key}' must be a number or null (got {v!r}); the file is damaged"
            )
    for key in ("times", "traffic"):
        v = rec.get(key, {})
        if not isinstance(v, dict) or any(
            x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)))
            for x in v.values()
        ):
            raise FleetgnnError(
                f"{where}: '{key}' must map names to numbers (got {v!r}); the file is damaged"
            )


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    obj = load_json_file(
        path, "", max_bytes=MAX_YAML_BYTES, error=FleetgnnError, fix="the file is damaged"
    )
    if not isinstance(obj, dict):
        raise FleetgnnError(f"'{path}' must hold a JSON object; the file is damaged")
    return obj


def _config(run: Path, summary: dict[str, Any] | None) -> dict[str, Any]:
    """The run's config: ``summary.json``'s copy, else ``config.yaml`` (``{}`` if neither)."""
    cfg = (summary or {}).get("config")
    if cfg is None and (run / "config.yaml").is_file():
        path = run / "config.yaml"
        cfg = load_yaml_file(path, "", error=FleetgnnError, fix="the file is damaged")
    return cfg if isinstance(cfg, dict) else {}


def _section(cfg: dict[str, Any], key: str) -> dict[str, Any]:
    value = cfg.get(key)
    return value if isinstance(value, dict) else {}


def load_run(path: str | os.PathLike[str], name: str | None = None) -> RunRecord:
    """Read one run directory.

    Args:
        path: The run directory (``fleetgnn train --run-dir``).
        name: Its name in legends (default: the directory name).

    Raises:
        FleetgnnError: The directory is missing, has no ``metrics.jsonl`` or no finished
            epoch in it, or a file is damaged.
    """
    run = Path(path)
    if not run.is_dir():
        raise FleetgnnError(f"run directory '{run}' does not exist or is not a directory")
    metrics = run / "metrics.jsonl"
    if not metrics.is_file():
        raise FleetgnnError(
            f"'{run}' has no metrics.jsonl; is it a run directory (fleetgnn train --run-dir)?"
        )
    from fleetgnn.train.metrics import read_metrics  # the train package imports torch

    try:
        records = read_metrics(metrics, events=True)
    except (OSError, UnicodeDecodeError, RecursionError) as e:
        raise FleetgnnError(
            f"metrics file '{metrics}' cannot be read ({type(e).__name__}); the file is damaged"
        ) from e
    epochs = [r for r in records if "event" not in r]
    events = [r for r in records if "event" in r]
    if not epochs:
        raise FleetgnnError(f"'{metrics}' has no finished epoch yet; nothing to report")
    for i, rec in enumerate(epochs):
        _check_record(rec, metrics, i)
    by_epoch = {int(r["epoch"]): r for r in epochs}  # the last record of an epoch wins
    epochs = [by_epoch[e] for e in sorted(by_epoch)]
    summary = _read_json(run / "summary.json")
    last = epochs[-1]
    engine = str((summary or {}).get("engine") or last.get("engine") or "?")
    world = (summary or {}).get("world_size") or last.get("world_size") or 1
    cfg = _config(run, summary)
    model = (summary or {}).get("model") or _section(cfg, "model").get("name")
    from fleetgnn.train.results import run_task

    link = any(run_task(r) == "link" for r in [*([summary] if summary else []), *epochs])
    link_loss = _section(cfg, "train").get("link_loss") if link else None
    return RunRecord(
        path=run,
        # shown in tables and plots: a name in bytes that are not UTF-8 gets \xNN for them
        name=printable(name if name is not None else (run.absolute().name or str(run))),
        engine=engine,
        world_size=int(world),
        model=None if model is None else str(model),
        epochs=epochs,
        events=events,
        summary=summary,
        task="link" if link else "node",
        link_loss=None if link_loss is None else str(link_loss),
    )


def load_runs(paths: Sequence[str | os.PathLike[str]]) -> list[RunRecord]:
    """Read several run directories, giving each a distinct name (more of its path if needed)."""
    if not paths:
        raise FleetgnnError("give at least one run directory")
    full = [Path(p).absolute().parts for p in paths]
    names = []
    for parts in full:
        depth = 1
        while depth < len(parts) and sum(q[-depth:] == parts[-depth:] for q in full) > 1:
            depth += 1
        names.append("/".join(parts[-depth:]))
    seen: dict[str, int] = {}
    for i, n in enumerate(names):  # the same directory given twice
        seen[n] = seen.get(n, 0) + 1
        if seen[n] > 1:
            names[i] = f"{n} #{seen[n]}"
    return [load_run(p, n) for p, n in zip(paths, names, strict=True)]


def _full_epochs(run: RunRecord) -> list[dict[str, Any]]:
    full = [r for r in run.epochs if not r.get("partial")]
    return full or run.epochs


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else float("nan")


#: The per-epoch quality numbers of either task (``metrics.jsonl``; a task leaves the others null).
_QUALITY_KEYS: tuple[str, ...] = (
    "train_acc", "val_acc", "test_acc",
    "val_auc", "val_ap", "val_mrr", "test_auc", "test_ap", "test_mrr",
)  # fmt: skip


def final_metrics(run: RunRecord) -> dict[str, Any]:
    """The numbers of the report's table for one run.

    The validation and test metrics (a node run's ``val_acc`` / ``test_acc``, a link run's
    ``val_auc`` / ``val_ap`` / ``test_auc`` / ``test_ap`` / ``test_mrr``) and ``best_epoch``
    come from ``summary.json`` (the best-validation epoch) when the run finished, else from the
    best-validation epoch recorded so far (highest ``val_acc``, or ``val_auc`` for links).
    """
    select = "val_auc" if run.task == "link" else "val_acc"
    evaluated = [r for r in run.epochs if r.get(select) is not None]
    best = max(evaluated, key=lambda r: r[select], default=None)
    s = run.summary or {}
    full = _full_epochs(run)
    traffic = [sum(float(v) for v in (r.get("traffic") or {}).values()) for r in full]
    kinds: dict[str, float] = {}
    for r in full:
        for kind, v in (r.get("traffic") or {}).items():
            kinds[kind] = kinds.get(kind, 0.0) + float(v)
    out = {
        "run": run.name,
        "task": run.task,
        "engine": run.engine,
        "ranks": run.world_size,
        "model": run.model,
        "epochs": len(run.epochs),
        "final_loss": _number(run.epochs[-1].get("loss")),
        "best_epoch": s.get("best_epoch", None if best is None else best["epoch"]),
        "epoch_time_s": _mean([_number(r.get("epoch_time_s")) for r in full]),
        "bytes_per_epoch": _mean(traffic),
        # the link kind that moved the most bytes (None: nothing moved)
        "main_link": max(kinds, key=kinds.__getitem__) if any(kinds.values()) else None,
        "status": str(s.get("stopped", "done")) if run.summary is not None else "unfinished",
    }
    for key in _QUALITY_KEYS:
        if key != "train_acc":  # the table shows the validation and test metrics only
            out[key] = _number(s.get(key, None if best is None else best.get(key)))
    return out


def _fmt(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


#: The table's note when runs' bytes are of different link kinds.
BYTES_NOTE = (
    "bytes/ep: the traffic meter per epoch, named by its largest kind (local: rows read where "
    "they live; peer, net: between ranks; h2d, disk: from host memory or disk); engines meter "
    "different things (fullgraph: its halo exchange only), so compare bytes of one kind"
)


def _bytes_cell(total: float, link: str | None) -> str:
    if not math.isfinite(total):
        return "-"
    return human_bytes(total) + ("" if link is None else f" {link}")


def render_table(runs: Sequence[RunRecord], console: Console | None = None) -> None:
    """Print one row of final metrics per run (rich table).

    Columns: the run, engine (``xN``: N ranks), model, epochs run (``*``: unfinished, no
    ``summary.json``), last training loss, the best-validation epoch and the metrics there
    (node runs: validation and test accuracy; link runs: validation and test AUC, and test AP),
    and mean seconds and bytes moved per full epoch (runs whose bytes are mostly of different
    link kinds name each run's kind, with a note on what the meters count). Node and link runs
    together share the ``val`` and ``test`` columns (accuracy or AUC), and a ``task`` column
    says which each is.
    """
    console = console or Console()
    metrics = [final_metrics(run) for run in runs]
    tasks = {m["task"] for m in metrics}
    # headers on two lines and columns one space apart: a link run's row fits 80 columns;
    # node and link runs together share the val and test columns, and a task column says which
    metric = {"node": "\nacc", "link": "\nauc"}[next(iter(tasks))] if len(tasks) == 1 else ""
    table = Table(
        title="fleetgnn runs",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 0),
        caption_justify="left",
    )
    table.add_column("run")
    table.add_column("engine", no_wrap=True)
    table.add_column("model")
    if len(tasks) > 1:
        table.add_column("task")
    for col in ("epochs", "loss", "best\nepoch", f"val{metric}", f"test{metric}"):
        table.add_column(col, justify="right")
    if "link" in tasks:
        table.add_column("test\nap", justify="right")
    table.add_column("s/ep", justify="right")
    table.add_column("bytes/ep", justify="right", no_wrap=True)
    # runs whose bytes are of different kinds: each cell names its kind, and a note says why
    mixed = len({m["main_link"] for m in metrics if m["main_link"]}) > 1
    for run, m in zip(runs, metrics, strict=True):
        epochs = str(m["epochs"]) + ("" if run.summary is not None else "*")
        engine = run.engine + (f" x{run.world_size}" if run.world_size > 1 else "")
        key = "auc" if m["task"] == "link" else "acc"
        table.add_row(
            escape(run.name),
            escape(engine),
            escape(m["model"] or "-"),
            *([m["task"]] if len(tasks) > 1 else []),
            epochs,
            _fmt(m["final_loss"], ".3f"),
            "-" if m["best_epoch"] is None else str(m["best_epoch"]),
            _fmt(m[f"val_{key}"], ".3f"),
            _fmt(m[f"test_{key}"], ".3f"),
            *([_fmt(m["test_ap"], ".3f")] if "link" in tasks else []),
            _fmt(m["epoch_time_s"], ".3f"),
            _bytes_cell(m["bytes_per_epoch"], m["main_link"] if mixed else None),
        )
    notes = ["val, test: accuracy of node runs, AUC of link runs"] if len(tasks) > 1 else []
    if mixed:
        notes.append(BYTES_NOTE)
    if any(run.summary is None for run in runs):
        notes.append("* unfinished: no summary.json (still running or interrupted)")
    table.caption = "\n".join(notes) or None
    console.print(table)


def _matplotlib() -> Any:
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError as e:
        raise FleetgnnError(
            f"fleetgnn report draws with matplotlib, which is not installed: {PLOT_HINT}"
        ) from e
    return matplotlib


#: Line style of each split in the loss and accuracy panels: the split is read from the dash
#: pattern alone (no markers, which hide the dashes of a long run).
SPLIT_STYLES: dict[str, Any] = {"train": "-", "val": "--", "test": ":"}
#: Colour of each split when the figure shows one run (several runs: one colour per run).
_SPLIT_COLORS = {"train": "C0", "val": "C1", "test": "C2"}
#: One colour per phase, the same in every figure.
_PHASE_COLORS = {p: f"C{j}" for j, p in enumerate(PHASES)}
_MAX_TICKS = 10  # x ticks per panel, whatever the number of epochs


def plot_runs(runs: Sequence[RunRecord]) -> Any:
    """Draw the report figure of ``runs`` (see the module docstring for the panels).

    Each split has its own line style (train solid, val dashed, test dotted), so it reads
    without markers at any number of epochs; one run also gives each split its own colour,
    several runs give each run one colour. Every axis names what it counts and its unit.

    Args:
        runs: The runs, from :func:`load_runs`.

    Returns:
        A ``matplotlib.figure.Figure`` on an Agg canvas; its axes are, in order, loss,
        accuracy, time per phase, bytes per link.

    Raises:
        FleetgnnError: matplotlib is not installed.
    """
    _matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(14, 9.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax_loss, ax_acc, ax_time, ax_bytes = fig.subplots(2, 2).ravel()
    single = len(runs) == 1
    colors = [f"C{i % 10}" for i in range(len(runs))]
    title = runs[0].label if single else f"{len(runs)} runs"
    fig.suptitle(f"fleetgnn report: {title}")

    def style(split: str, color: str) -> dict[str, Any]:
        return {
            "color": _SPLIT_COLORS[split] if single else color,
            "linestyle": SPLIT_STYLES[split],
            "linewidth": 1.6 if split == "train" else 1.4,
        }

    restart_drawn = False
    val_drawn = False
    for run, color in zip(runs, colors, strict=True):
        ep = [r["epoch"] for r in run.epochs]
        name = f"{run.label} " if not single else ""
        ax_loss.plot(
            ep, [_number(r.get("loss")) for r in run.epochs], label=f"{name}train",
            **style("train", color),
        )  # fmt: skip
        val_loss = [_number(r.get("val_loss")) for r in run.epochs]
        if any(math.isfinite(v) for v in val_loss):
            ax_loss.plot(ep, val_loss, label=f"{name}val", **style("val", color))
            val_drawn = True
        for ev in run.events:
            if ev.get("event") == "restart" and isinstance(ev.get("at_epoch"), (int, float)):
                ax_loss.axvline(
                    float(ev["at_epoch"]), color="0.4" if single else color, linestyle="-.",
                    linewidth=1, label=None if restart_drawn else "restart",
                )  # fmt: skip
                restart_drawn = True
        if run.task == "link":
            _plot_ranking(ax_acc, run, name, color, single)
            continue
        for split in ("train", "val", "test"):
            values = [_number(r.get(f"{split}_acc")) for r in run.epochs]
            if any(math.isfinite(v) for v in values):
                ax_acc.plot(ep, values, label=f"{name}{split}", **style(split, color))
    ax_loss.set(
        # a link run records no validation loss: the title names only what is drawn
        title="loss per epoch (train: during the epoch"
        + (", val: evaluated after it)" if val_drawn else ")"),
        xlabel="epoch", ylabel=loss_label(runs),
    )  # fmt: skip
    tasks = {run.task for run in runs}
    ax_acc.set(
        title={
            frozenset({"node"}): "accuracy per epoch (train: during the epoch, in training mode)",
            frozenset({"link"}): "link ranking per epoch (val dashed, test dotted; "
            "train: during the epoch)",
        }.get(frozenset(tasks), "accuracy (node runs) and link ranking (link runs) per epoch"),
        xlabel="epoch", ylabel="\n".join(_QUALITY_LABELS[t] for t in sorted(tasks, reverse=True)),
        ylim=(0, 1.02),
    )  # fmt: skip
    for ax in (ax_loss, ax_acc):
        ax.xaxis.set_major_locator(MaxNLocator(nbins=_MAX_TICKS, integer=True))

    _plot_times(ax_time, runs)
    _plot_bytes(ax_bytes, runs, colors)
    # where the curves seldom are: loss falls, accuracy rises
    places = ("upper right", "lower right", "upper left", "upper right")
    for ax, loc in zip((ax_loss, ax_acc, ax_time, ax_bytes), places, strict=True):
        handles = ax.get_legend_handles_labels()[0]
        if handles:
            ax.legend(fontsize="x-small", loc=loc, ncols=2 if len(handles) > 6 else 1)
        ax.grid(True, alpha=0.3)
    return fig


#: The loss axis's label for each task (a link run's by its ``train.link_loss``).
_LOSS_LABELS = {
    "node": "cross-entropy loss (nats per labelled node)",
    "bce": "binary cross-entropy (nats per positive training pair)",
    "bpr": "BPR loss (nats per positive training pair)",
}
#: The quality axis's label for each task.
_QUALITY_LABELS = {
    "node": "accuracy (fraction of the split's nodes correct)",
    "link": "AUC, AP, MRR (fraction; of the split's pairs)",
}
#: The colour of each link metric when the figure shows one run.
_METRIC_COLORS = {"auc": "C0", "ap": "C1", "mrr": "C2", "train": "C3"}


def loss_label(runs: Sequence[RunRecord]) -> str:
    """The loss axis's label: the runs' losses, each with its unit (several: one a line)."""
    kinds = dict.fromkeys(
        "node" if run.task == "node" else (run.link_loss or "bce") for run in runs
    )  # the runs' order, without repeats
    return "\n".join(_LOSS_LABELS.get(k, f"{k} loss (nats per positive pair)") for k in kinds)


def _plot_ranking(ax: Any, run: RunRecord, name: str, color: str, single: bool) -> None:
    """A link run's AUC, AP and MRR per epoch (val dashed, test dotted), and training pairs.

    The solid line is the fraction of the epoch's positive training pairs scored above all
    their negatives, in training mode (an epoch line's ``train``).

    One run gives each metric its own colour; several give each run one colour and draw AP
    and MRR fainter than AUC (the metric that selects the best epoch).
    """
    ep = [r["epoch"] for r in run.epochs]
    train = [_number(r.get("train_acc")) for r in run.epochs]
    if any(math.isfinite(v) for v in train):
        ax.plot(
            ep, train, label=f"{name}train (positive above its negatives)",
            color=_METRIC_COLORS["train"] if single else color, linestyle="-", linewidth=1.2,
            alpha=1.0 if single else 0.5,
        )  # fmt: skip
    for metric in ("auc", "ap", "mrr"):
        for split in ("val", "test"):
            values = [_number(r.get(f"{split}_{metric}")) for r in run.epochs]
            if not any(math.isfinite(v) for v in values):
                continue
            ax.plot(
                ep, values, label=f"{name}{split} {metric.upper()}",
                color=_METRIC_COLORS[metric] if single else color,
                linestyle=SPLIT_STYLES[split], linewidth=1.4,
                alpha=1.0 if single or metric == "auc" else 0.55,
            )  # fmt: skip


def _phase_rows(recs: Sequence[dict[str, Any]]) -> list[list[float]]:
    return [[float((r.get("times") or {}).get(p, 0) or 0) for p in PHASES] for r in recs]


def _plot_times(ax: Any, runs: Sequence[RunRecord]) -> None:
    """Seconds per phase: stacked areas per epoch (one run), one stacked bar per run (several).

    The x axis of one run has at most ``_MAX_TICKS`` ticks at any number of epochs; several
    runs' bars are the mean of each run's full epochs (a partial last epoch is left out).
    """
    from matplotlib.ticker import EngFormatter, MaxNLocator

    ax.yaxis.set_major_formatter(EngFormatter(unit="s"))
    if len(runs) == 1:
        recs = runs[0].epochs
        x = [float(r["epoch"]) for r in recs]
        rows = _phase_rows(recs)
        drawn = [j for j in range(len(PHASES)) if any(row[j] for row in rows)]
        series = [[row[j] for row in rows] for j in drawn]
        if drawn and len(x) > 1:
            ax.stackplot(
                x, *series, labels=[PHASES[j] for j in drawn], alpha=0.85,
                colors=[_PHASE_COLORS[PHASES[j]] for j in drawn],
            )  # fmt: skip
        elif drawn:  # one epoch: an area needs two points, a bar does not
            bottom = 0.0
            for j, h in zip(drawn, series, strict=True):
                ax.bar(x, h, bottom=bottom, color=_PHASE_COLORS[PHASES[j]], label=PHASES[j])
                bottom += h[0]
        title = "time per phase per epoch (stacked)"
        partial = [float(r["epoch"]) for r in recs if r.get("partial")]
        for e in partial:
            ax.axvline(e, color="0.3", linestyle=":", linewidth=1)
        if partial:
            title += "; dotted: partial epoch"
        ax.set(title=title, xlabel="epoch", ylabel="seconds per epoch (training steps)")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=_MAX_TICKS, integer=True))
        ax.set_ylim(bottom=0)
        if not drawn:
            ax.text(0.5, 0.5, "no times recorded", ha="center", transform=ax.transAxes)
        return
    x = [float(i) for i in range(len(runs))]
    rows = []
    for run in runs:
        full = _full_epochs(run)
        rows.append([_mean([row[j] for row in _phase_rows(full)]) for j in range(len(PHASES))])
    bottom = [0.0] * len(x)
    for j, phase in enumerate(PHASES):
        heights = [row[j] if math.isfinite(row[j]) else 0.0 for row in rows]
        if not any(heights):
            continue
        ax.bar(x, heights, bottom=bottom, color=_PHASE_COLORS[phase], label=phase, width=0.6)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    for xi, total in zip(x, bottom, strict=True):
        if total:
            ax.annotate(
                f"{total * 1e3:.1f} ms", (xi, total), ha="center", va="bottom", fontsize="small",
                xytext=(0, 2), textcoords="offset points",
            )  # fmt: skip
    ax.set_xticks(x, [_wrap(run.label) for run in runs], fontsize="small")
    ax.set(
        title="mean time per phase per epoch (full epochs; stacked, total on top)",
        xlabel="run", ylabel="seconds per epoch (training steps)",
    )  # fmt: skip
    ax.set_ylim(0, max(bottom, default=0) * 1.12 or 1)
    if not any(bottom):
        ax.text(0.5, 0.5, "no times recorded", ha="center", transform=ax.transAxes)


def _wrap(label: str) -> str:
    """A run label on two lines (name, then engine), so several fit under their bars."""
    return label.replace(" (", "\n(", 1)


def _link_kinds(runs: Sequence[RunRecord]) -> list[str]:
    """The link kinds (:data:`fleetgnn.distributed.traffic.LINK_KINDS` order) any run used."""
    from fleetgnn.distributed.traffic import LINK_KINDS

    return [
        k
        for k in LINK_KINDS
        if any(float((r.get("traffic") or {}).get(k, 0) or 0) for run in runs for r in run.epochs)
    ]


def _plot_bytes(ax: Any, runs: Sequence[RunRecord], colors: Sequence[str]) -> None:
    """Bytes moved per epoch on each link kind.

    One run: a line per link kind over the epochs. Several: bars grouped by link kind, one bar
    per run (the mean of its full epochs), so a run's ``local`` bytes stand only beside other
    runs' ``local`` bytes, never beside ``peer`` ones; a run that moved nothing on a kind
    has no bar there, and the x axis names each kind's meaning.
    """
    from matplotlib.ticker import EngFormatter, MaxNLocator

    from fleetgnn.distributed.traffic import LINK_KINDS

    kinds = _link_kinds(runs)
    ax.yaxis.set_major_formatter(EngFormatter(unit="B"))
    values: list[float] = []
    if len(runs) == 1:
        (run,) = runs
        ep = [r["epoch"] for r in run.epochs]
        for k in kinds:
            series = [float((r.get("traffic") or {}).get(k, 0) or 0) for r in run.epochs]
            i = LINK_KINDS.index(k)
            ax.plot(ep, series, color=f"C{i}", linestyle=_LINK_STYLES[i], label=k, linewidth=1.5)
            values += [v for v in series if v > 0]
        ax.set(title="bytes moved per epoch, per link kind", xlabel="epoch")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=_MAX_TICKS, integer=True))
    else:
        from matplotlib.transforms import blended_transform_factory

        below = blended_transform_factory(ax.transData, ax.transAxes)
        width = 0.8 / len(runs)
        for n, (run, color) in enumerate(zip(runs, colors, strict=True)):
            full = _full_epochs(run)
            means = [
                _mean([float((r.get("traffic") or {}).get(k, 0) or 0) for r in full]) for k in kinds
            ]
            xs = [i + (n - (len(runs) - 1) / 2) * width for i in range(len(kinds))]
            kept = [(x, v) for x, v in zip(xs, means, strict=True) if math.isfinite(v) and v > 0]
            for x, v in zip(xs, means, strict=True):
                if not (math.isfinite(v) and v > 0):  # said, not left as a gap to guess at
                    ax.text(
                        x, 0.01, "none", transform=below, ha="center", va="bottom",
                        fontsize="x-small", color=color, rotation=90,
                    )  # fmt: skip
            if not kept:
                continue
            bars = ax.bar(
                [x for x, _ in kept], [v for _, v in kept], width=width * 0.95, color=color,
                label=run.label,
            )  # fmt: skip
            ax.bar_label(bars, [human_bytes(v) for _, v in kept], fontsize="x-small", padding=1)
            values += [v for _, v in kept]
        ax.set_xticks(range(len(kinds)), [f"{k}\n({_LINK_MEANING[k]})" for k in kinds])
        ax.set(
            title="mean bytes moved per epoch, by link kind (only like kinds side by side)",
            xlabel="link kind",
        )  # fmt: skip
    if values and max(values) > 100 * min(values):  # kinds orders of magnitude apart
        ax.set_yscale("log")
        ax.set_ylabel("bytes per epoch (log scale)")
        ax.set_ylim(min(values) / 3, max(values) * (8 if len(runs) > 1 else 3))
    else:
        ax.set_ylabel("bytes per epoch")
        ax.set_ylim(0, max(values, default=1) * 1.15)
    if not kinds:
        ax.text(0.5, 0.5, "no traffic recorded", ha="center", transform=ax.transAxes)


#: What each link kind carries (see :mod:`fleetgnn.distributed.traffic`), under its bars.
_LINK_MEANING = {
    "local": "copies in own memory",
    "peer": "between ranks, one host",
    "h2d": "host to device",
    "d2h": "device to host",
    "net": "between hosts",
    "disk": "from disk",
}


def save_figure(fig: Any, out: str | os.PathLike[str]) -> Path:
    """Write ``fig`` to ``out`` atomically, in the format its suffix names (``.png``, ...).

    Raises:
        FleetgnnError: An unknown suffix, or a folder that does not exist.
    """
    path = Path(out)
    formats = fig.canvas.get_supported_filetypes()
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in formats:
        raise FleetgnnError(
            f"--out '{path}' must end in an image suffix: {', '.join('.' + f for f in formats)} "
            f"(got {path.suffix or 'none'!r})"
        )
    if not path.parent.is_dir():
        raise FleetgnnError(f"--out '{path}': folder '{path.parent}' does not exist")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        fig.savefig(tmp, format=fmt, dpi=100)
        os.replace(tmp, path)
    except OSError as e:
        raise FleetgnnError(f"cannot write --out '{path}' ({e})") from e
    finally:
        tmp.unlink(missing_ok=True)
    return path


def report(
    run_dirs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str] | None = None,
    console: Console | None = None,
) -> tuple[Path, Any]:
    """Read runs, print their table, draw and save their figure (``fleetgnn report``).

    Args:
        run_dirs: Run directories.
        out: The image file; default ``RUN_DIR/report.png`` for one run (required for several).
        console: Where the table goes (default: stdout).

    Returns:
        ``(path written, figure)``.

    Raises:
        FleetgnnError: matplotlib missing, ``out`` missing for several runs or invalid, or a
            run directory missing, without metrics, or damaged.
    """
    _matplotlib()  # before any work: the figure is what was asked for
    if out is None:
        if len(run_dirs) != 1:
            raise FleetgnnError(
                f"--out FILE.png is required with {len(run_dirs)} run directories (one run "
                f"writes RUN_DIR/report.png by default)"
            )
        if not Path(run_dirs[0]).is_dir():
            raise FleetgnnError(
                f"run directory '{run_dirs[0]}' does not exist or is not a directory"
            )
        out = Path(run_dirs[0]) / "report.png"
    runs = load_runs(run_dirs)
    fig = plot_runs(runs)
    path = save_figure(fig, out)
    console = console or Console()
    render_table(runs, console)
    console.print(f"report: {escape(printable(str(path)))}")
    return path, fig


def add_report(sub: Any) -> None:
    """Register ``fleetgnn report``."""
    p = sub.add_parser(
        "report",
        help="plot and tabulate training runs (loss, accuracy, time per phase, bytes per link)",
        description="Draw one figure of one or more run directories: loss and accuracy per "
        "epoch, time per phase, bytes per link kind per epoch (several runs overlaid, engines "
        f"side by side), and print a table of final metrics. Needs matplotlib: {PLOT_HINT}.",
    )
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="FILE.png",
        help="image to write (.png, .pdf, .svg, ...); default RUN_DIR/report.png for one run, "
        "required for several",
    )


def run_report(args: argparse.Namespace) -> int:
    """``fleetgnn report``: the command behind :func:`add_report`."""
    report(args.run_dirs, args.out)
    return 0
