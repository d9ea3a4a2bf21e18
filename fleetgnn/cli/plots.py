"""``fleetgnn report``: figures and a table of one or more training runs.

Reads each run directory's ``metrics.jsonl`` (one record per epoch, see
:mod:`fleetgnn.train.metrics`; restart events and a partial last epoch included) and its
``summary.json`` / ``config.yaml`` when present, and draws one figure of four panels:

==========================  ============================================================
panel                       what
==========================  ============================================================
loss                        training loss (solid) and validation loss (dashed) per epoch;
                            a dotted vertical line where a run restarted
accuracy                    train (dotted), val (dashed), test (solid) per epoch
time per phase              seconds in sample / gather / forward / backward /
                            communication / optimizer, stacked: per epoch for one run,
                            per run (mean of its full epochs) for several, side by side
bytes per link              bytes per epoch on each link kind (local, peer, h2d, d2h,
                            net, disk) that carried any (log scale when they are
                            orders of magnitude apart)
==========================  ============================================================

Several runs share each panel, one colour per run, labelled ``NAME (ENGINE)``. Drawing uses
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

from fleetgnn.config.textfile import MAX_YAML_BYTES, load_json_file, load_yaml_file
from fleetgnn.distributed.traffic import LINK_KINDS
from fleetgnn.errors import FleetgnnError
from fleetgnn.graph.loaders._io import human_bytes
from fleetgnn.train.metrics import read_metrics

#: The phases of an epoch's time breakdown, in drawing order (``times`` in ``metrics.jsonl``).
PHASES: tuple[str, ...] = ("sample", "gather", "forward", "backward", "communication", "optimizer")
PLOT_HINT = "pip install 'fleetgnn[plot]'"
_LINK_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 3)))
_LINK_MARKERS = ("o", "s", "^", "v", "D", "x")


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
    """

    path: Path
    name: str
    engine: str
    world_size: int
    model: str | None
    epochs: list[dict[str, Any]] = field(repr=False)
    events: list[dict[str, Any]] = field(repr=False)
    summary: dict[str, Any] | None = field(repr=False)

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
    for key in ("loss", "train_acc", "val_acc", "test_acc", "val_loss", "epoch_time_s"):
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


def _model_from_config(path: Path) -> str | None:
    if not path.is_file():
        return None
    cfg = load_yaml_file(path, "", error=FleetgnnError, fix="the file is damaged")
    model = cfg.get("model") if isinstance(cfg, dict) else None
    name = model.get("name") if isinstance(model, dict) else None
    return str(name) if name is not None else None


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
    model = (summary or {}).get("model") or _model_from_config(run / "config.yaml")
    return RunRecord(
        path=run,
        name=name if name is not None else (run.absolute().name or str(run)),
        engine=engine,
        world_size=int(world),
        model=None if model is None else str(model),
        epochs=epochs,
        events=events,
        summary=summary,
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


def final_metrics(run: RunRecord) -> dict[str, Any]:
    """The numbers of the report's table for one run.

    ``test_acc`` / ``val_acc`` / ``best_epoch`` come from ``summary.json`` (the best-validation
    epoch) when the run finished, else from the best-validation epoch recorded so far.
    """
    evaluated = [r for r in run.epochs if r.get("val_acc") is not None]
    best = max(evaluated, key=lambda r: r["val_acc"], default=None)
    s = run.summary or {}
    full = _full_epochs(run)
    traffic = [sum(float(v) for v in (r.get("traffic") or {}).values()) for r in full]
    return {
        "run": run.name,
        "engine": run.engine,
        "ranks": run.world_size,
        "model": run.model,
        "epochs": len(run.epochs),
        "final_loss": _number(run.epochs[-1].get("loss")),
        "best_epoch": s.get("best_epoch", None if best is None else best["epoch"]),
        "val_acc": _number(s.get("val_acc", None if best is None else best["val_acc"])),
        "test_acc": _number(s.get("test_acc", None if best is None else best.get("test_acc"))),
        "epoch_time_s": _mean([_number(r.get("epoch_time_s")) for r in full]),
        "bytes_per_epoch": _mean(traffic),
        "status": str(s.get("stopped", "done")) if run.summary is not None else "unfinished",
    }


def _fmt(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def render_table(runs: Sequence[RunRecord], console: Console | None = None) -> None:
    """Print one row of final metrics per run (rich table).

    Columns: the run, engine (``xN``: N ranks), model, epochs run (``*``: unfinished, no
    ``summary.json``), last training loss, best validation accuracy (its epoch), test accuracy
    at that epoch, mean seconds and bytes moved per full epoch.
    """
    console = console or Console()
    table = Table(title="fleetgnn runs", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("run")
    table.add_column("engine")
    table.add_column("model")
    for col in ("epochs", "loss", "val (ep)", "test", "s/ep", "bytes/ep"):
        table.add_column(col, justify="right")
    for run in runs:
        m = final_metrics(run)
        best = _fmt(m["val_acc"], ".3f")
        if m["best_epoch"] is not None and best != "-":
            best += f" ({m['best_epoch']})"
        epochs = str(m["epochs"]) + ("" if run.summary is not None else "*")
        engine = run.engine + (f" x{run.world_size}" if run.world_size > 1 else "")
        table.add_row(
            escape(run.name),
            escape(engine),
            escape(m["model"] or "-"),
            epochs,
            _fmt(m["final_loss"], ".3f"),
            best,
            _fmt(m["test_acc"], ".3f"),
            _fmt(m["epoch_time_s"], ".3f"),
            "-" if not math.isfinite(m["bytes_per_epoch"]) else human_bytes(m["bytes_per_epoch"]),
        )
    if any(run.summary is None for run in runs):
        table.caption = "* unfinished: no summary.json (still running or interrupted)"
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


def plot_runs(runs: Sequence[RunRecord]) -> Any:
    """Draw the report figure of ``runs`` (see the module docstring for the panels).

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
    from matplotlib.ticker import EngFormatter, MaxNLocator

    fig = Figure(figsize=(14, 9.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax_loss, ax_acc, ax_time, ax_bytes = fig.subplots(2, 2).ravel()
    colors = [f"C{i % 10}" for i in range(len(runs))]
    title = runs[0].label if len(runs) == 1 else f"{len(runs)} runs"
    fig.suptitle(f"fleetgnn report: {title}")

    restart_drawn = False
    for run, color in zip(runs, colors, strict=True):
        ep = [r["epoch"] for r in run.epochs]
        ax_loss.plot(
            ep, [_number(r.get("loss")) for r in run.epochs], "o-", color=color,
            label=f"{run.label} train", markersize=3,
        )  # fmt: skip
        val_loss = [_number(r.get("val_loss")) for r in run.epochs]
        if any(math.isfinite(v) for v in val_loss):
            ax_loss.plot(ep, val_loss, "s--", color=color, label=f"{run.label} val", markersize=3)
        for ev in run.events:
            if ev.get("event") == "restart" and isinstance(ev.get("at_epoch"), (int, float)):
                ax_loss.axvline(
                    float(ev["at_epoch"]), color=color, linestyle=":", linewidth=1,
                    label=None if restart_drawn else "restart",
                )  # fmt: skip
                restart_drawn = True
        for key, style in (("train_acc", "o:"), ("val_acc", "s--"), ("test_acc", "^-")):
            values = [_number(r.get(key)) for r in run.epochs]
            if any(math.isfinite(v) for v in values):
                ax_acc.plot(
                    ep, values, style, color=color, markersize=3,
                    label=f"{run.label} {key.removesuffix('_acc')}",
                )  # fmt: skip
    ax_loss.set(title="loss", xlabel="epoch", ylabel="loss")
    ax_acc.set(title="accuracy", xlabel="epoch", ylabel="accuracy")
    for ax in (ax_loss, ax_acc, ax_bytes):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))

    _plot_times(ax_time, runs)

    kinds = [
        k
        for k in LINK_KINDS
        if any(float((r.get("traffic") or {}).get(k, 0) or 0) for run in runs for r in run.epochs)
    ]
    for run, color in zip(runs, colors, strict=True):
        ep = [r["epoch"] for r in run.epochs]
        for k in kinds:
            values = [float((r.get("traffic") or {}).get(k, 0) or 0) for r in run.epochs]
            if not any(values):
                continue
            i = LINK_KINDS.index(k)
            ax_bytes.plot(
                ep, values, color=color, linestyle=_LINK_STYLES[i], marker=_LINK_MARKERS[i],
                markersize=3, label=f"{run.label} {k}",
            )  # fmt: skip
    ax_bytes.set(title="bytes per link kind per epoch", xlabel="epoch", ylabel="bytes")
    drawn = [v for line in ax_bytes.get_lines() for v in line.get_ydata() if v > 0]
    if drawn and max(drawn) > 100 * min(drawn):  # kinds orders of magnitude apart
        ax_bytes.set_yscale("log")
        ax_bytes.set_ylabel("bytes (log scale)")
    else:
        ax_bytes.set_ylim(bottom=0)
    ax_bytes.yaxis.set_major_formatter(EngFormatter(unit="B"))
    if not kinds:
        ax_bytes.text(0.5, 0.5, "no traffic recorded", ha="center", transform=ax_bytes.transAxes)
    for ax in (ax_loss, ax_acc, ax_time, ax_bytes):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="x-small")
        ax.grid(True, alpha=0.3)
    return fig


def _plot_times(ax: Any, runs: Sequence[RunRecord]) -> None:
    """Stacked bars of seconds per phase: per epoch (one run) or per run (several)."""
    if len(runs) == 1:
        recs = runs[0].epochs
        x = [float(r["epoch"]) for r in recs]
        ticks = [f"{r['epoch']}*" if r.get("partial") else str(r["epoch"]) for r in recs]
        rows = [[float((r.get("times") or {}).get(p, 0) or 0) for p in PHASES] for r in recs]
        ax.set(title="time per phase per epoch (s)", xlabel="epoch", ylabel="seconds")
        if any(r.get("partial") for r in recs):
            ax.set_title("time per phase per epoch (s; * = partial epoch)")
    else:
        x = [float(i) for i in range(len(runs))]
        ticks = [run.label for run in runs]
        rows = []
        for run in runs:
            full = _full_epochs(run)
            rows.append(
                [
                    _mean([float((r.get("times") or {}).get(p, 0) or 0) for r in full])
                    for p in PHASES
                ]
            )
        ax.set(title="mean time per phase per epoch (s)", ylabel="seconds")
    bottom = [0.0] * len(x)
    for j, phase in enumerate(PHASES):
        heights = [row[j] if math.isfinite(row[j]) else 0.0 for row in rows]
        if not any(heights):
            continue
        ax.bar(x, heights, bottom=bottom, color=f"C{j}", label=phase, width=0.7)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_xticks(x, ticks, rotation=0 if len(runs) == 1 else 15, fontsize="small")
    if not any(bottom):
        ax.text(0.5, 0.5, "no times recorded", ha="center", transform=ax.transAxes)


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
    console.print(f"report: {escape(str(path))}")
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
