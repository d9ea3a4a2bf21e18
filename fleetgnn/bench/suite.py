"""The suite behind ``fleetgnn bench``: every section, at every thread count, into one result.

Sections (``--only`` picks some): ``ops`` (``gspmm``, keyed dropout), ``sampler``, ``gather``
(the unified store), ``epoch`` (reference engine vs PyG, full-graph and mini-batch), ``link``
(link-prediction steps, reference engine vs PyG's ``LinkNeighborLoader``), ``hetero`` (R-GAT
mini-batch steps on ``igbh-like``, the typed reference engine vs PyG's ``NeighborLoader`` +
``HeteroConv``), ``trainer``
(a whole ``Trainer.fit`` epoch, evaluation included, vs PyG's loop) and ``engines`` (every
distributed engine with 2 processes vs the reference). The single-process sections run once per
thread count (``torch.set_num_threads``; by default 1 and all usable cores); ``engines`` runs once,
with 1 thread per process.

Datasets: ``products-like --scale 0.05`` (``0.005`` with ``--quick``) and, for ``hetero``,
``igbh-like --scale 0.1`` (``0.01`` with ``--quick``) with every relation's reverse, generated
once into the cache directory; Cora from ``--cora`` (a prepared dataset or Planetoid's
``ind.cora.*`` files), else a synthetic graph of Cora's shape. Nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from fleetgnn.bench import engines, epoch, gather, hetero, link, ops, sampler, trainer
from fleetgnn.bench.data import (
    cached_dataset,
    cached_typed_dataset,
    cora,
    cora_sized,
    dataset_dir,
    default_cache_dir,
)
from fleetgnn.bench.machine import loadavg, machine_info, usable_cpus
from fleetgnn.bench.report import RESULTS_FORMAT
from fleetgnn.errors import ConfigError
from fleetgnn.graph import Graph
from fleetgnn.graph.hetero import HeteroGraph

#: Every section, in the order they run.
SECTIONS: tuple[str, ...] = (
    "ops",
    "sampler",
    "gather",
    "epoch",
    "link",
    "hetero",
    "trainer",
    "engines",
)
#: Sections that run once (their own processes), not once per thread count.
ONCE: frozenset[str] = frozenset({"engines"})


@dataclasses.dataclass(frozen=True)
class BenchOptions:
    """What ``fleetgnn bench`` runs.

    Attributes:
        quick: Small sizes and graphs (a smoke run of about a minute); leaves out ``engines``
            unless ``only`` names it.
        threads: torch intra-op thread counts, each a separate pass over the sections.
        repeat: Timed repetitions per measurement (the median is reported).
        only: The sections to run (default: all).
        cache_dir: Where generated datasets are kept.
        cora: Cora (a prepared dataset directory or Planetoid's raw files), or None for a
            Cora-sized synthetic graph.
        scale: ``products-like`` scale of the large graph (default 0.05; 0.005 quick).
        typed_scale: ``igbh-like`` scale of the typed graph (default 0.1; 0.01 quick).
    """

    quick: bool = False
    threads: tuple[int, ...] = (1,)
    repeat: int = 3
    only: tuple[str, ...] = SECTIONS
    cache_dir: Path = dataclasses.field(default_factory=default_cache_dir)
    cora: Path | None = None
    scale: float | None = None
    typed_scale: float | None = None

    def __post_init__(self) -> None:
        bad = [s for s in self.only if s not in SECTIONS]
        if bad or not self.only:
            raise ConfigError(
                f"--only {','.join(self.only) or '(empty)'}: unknown section "
                f"{', '.join(map(repr, bad)) or '(none given)'}; choose from {', '.join(SECTIONS)}"
            )
        if not self.threads or any(t < 1 for t in self.threads):
            raise ConfigError(f"--threads {self.threads}: need thread counts >= 1, e.g. 1,2")
        if self.repeat < 1:
            raise ConfigError(f"--repeat {self.repeat}: need at least 1 repetition")
        if self.scale is not None and not 0 < self.scale <= 1:
            raise ConfigError(f"--scale {self.scale}: need a products-like scale in (0, 1]")
        if self.typed_scale is not None and not 0 < self.typed_scale <= 10:
            raise ConfigError(
                f"--typed-scale {self.typed_scale}: need an igbh-like scale in (0, 10]"
            )

    @property
    def large_scale(self) -> float:
        """The ``products-like`` scale of the large graph."""
        return self.scale if self.scale is not None else (0.005 if self.quick else 0.05)

    @property
    def typed_graph_scale(self) -> float:
        """The ``igbh-like`` scale of the typed graph."""
        if self.typed_scale is not None:
            return self.typed_scale
        return 0.01 if self.quick else 0.1

    @property
    def sections(self) -> tuple[str, ...]:
        """The sections that run, in order (``--quick`` drops ``engines`` unless named)."""
        named = set(self.only) != set(SECTIONS)
        return tuple(
            s for s in SECTIONS if s in self.only and (s != "engines" or not self.quick or named)
        )


def parse_threads(text: str) -> tuple[int, ...]:
    """``"1,2"`` -> ``(1, 2)``; ``"all"`` stands for the usable cores.

    Raises:
        ConfigError: A part is not a positive integer or ``all``.
    """
    out: list[int] = []
    for part in text.split(","):
        part = part.strip().lower()
        if part == "all":
            out.append(usable_cpus())
        elif part.isdigit() and int(part) >= 1:
            out.append(int(part))
        else:
            raise ConfigError(
                f"--threads {text!r}: {part!r} is not a thread count; give integers >= 1 or "
                f"'all', separated by commas (e.g. 1,all)"
            )
    return tuple(dict.fromkeys(out))


def default_threads() -> tuple[int, ...]:
    """One thread and all usable cores (one entry on a one-core machine)."""
    return tuple(dict.fromkeys((1, usable_cpus())))


def run_suite(
    opts: BenchOptions, log: Callable[[str], None], command: Sequence[str] = ("fleetgnn", "bench")
) -> dict[str, Any]:
    """Run the selected sections; returns the JSON-ready results (see :mod:`~fleetgnn.bench`).

    Args:
        opts: What to run.
        log: Receives one line per step and per measurement (progress).
        command: The command line, recorded in the results.
    """
    for message in (
        "Sparse CSR tensor support is in beta",
        "Sparse invariant checks are implicitly disabled",
    ):
        warnings.filterwarnings("ignore", message=message)
    t_start = time.perf_counter()
    sections = opts.sections
    machine = machine_info("cpu")
    datasets: dict[str, Any] = {}
    large: tuple[Graph, str] | None = None
    small: tuple[Graph, str] | None = None
    if {"sampler", "gather", "epoch", "link", "engines"} & set(sections):
        graph, gen_s = cached_dataset(opts.cache_dir, "products-like", opts.large_scale)
        large = (graph, f"products-like x{opts.large_scale:g}")
        datasets["large"] = describe(graph, large[1], gen_s)
        origin = f"generated in {gen_s:.1f} s" if gen_s else "cached"
        log(f"dataset {large[1]}: {graph!r} ({origin})")
    typed: tuple[HeteroGraph, str] | None = None
    if "hetero" in sections:
        tgraph, gen_s = cached_typed_dataset(opts.cache_dir, "igbh-like", opts.typed_graph_scale)
        typed = (tgraph, f"igbh-like x{opts.typed_graph_scale:g}")
        datasets["typed"] = describe(tgraph, typed[1], gen_s)
        origin = f"generated in {gen_s:.1f} s" if gen_s else "cached"
        log(
            f"dataset {typed[1]}: {tgraph.num_nodes:,} nodes, {tgraph.num_edges:,} edges, "
            f"{len(tgraph.schema.relations)} relations ({origin})"
        )
    if {"epoch", "trainer"} & set(sections):
        if opts.cora is not None:
            small = (cora(opts.cora, opts.cache_dir), "Cora")
        else:
            small = (cora_sized(), "Cora-sized synthetic")
        datasets["small"] = describe(small[0], small[1], 0.0)
        log(f"dataset {small[1]}: {small[0]!r}")
    steps = [(s, t) for t in opts.threads for s in sections if s not in ONCE]
    steps += [(s, 1) for s in sections if s in ONCE]
    rows: list[dict[str, Any]] = []
    section_s: dict[str, float] = {}
    saved_threads = torch.get_num_threads()
    try:
        for i, (section, threads) in enumerate(steps, 1):
            log(f"[{i}/{len(steps)}] {section}, {threads} thread(s) ...")
            torch.set_num_threads(threads)
            t0 = time.perf_counter()
            if section == "hetero":
                assert typed is not None
                rows += hetero.run(opts, threads, log, typed)
            else:
                rows += _run_section(section, opts, threads, log, small, large)
            dt = time.perf_counter() - t0
            section_s[f"{section}@{threads}"] = dt
            log(f"[{i}/{len(steps)}] {section}, {threads} thread(s): {dt:.1f} s")
    finally:
        torch.set_num_threads(saved_threads)
    settings = {
        "quick": opts.quick,
        "threads": list(opts.threads),
        "repeat": opts.repeat,
        "sections": list(sections),
        "cache_dir": str(opts.cache_dir),
        "cora": None if opts.cora is None else str(opts.cora),
        "large_scale": opts.large_scale,
        "typed_scale": opts.typed_graph_scale if typed is not None else None,
    }
    return results_document(
        rows,
        command=command,
        machine=machine,
        settings=settings,
        sections=sections,
        datasets=datasets,
        started=t_start,
        section_wall_s=section_s,
    )


def results_document(
    rows: list[dict[str, Any]],
    *,
    command: Sequence[str],
    machine: dict[str, Any],
    settings: dict[str, Any],
    sections: Sequence[str],
    started: float,
    datasets: dict[str, Any] | None = None,
    section_wall_s: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The JSON-ready results of a run (what :func:`~fleetgnn.bench.report.write_results` writes).

    Args:
        rows: The measurements (:func:`~fleetgnn.bench.report.measurement`).
        command: The command line, recorded.
        machine: :func:`~fleetgnn.bench.machine.machine_info` taken at the start.
        settings: The options that shaped the run.
        sections: The sections, in table order.
        started: ``time.perf_counter()`` at the start (for the wall time).
        datasets: Name -> description of the graphs measured.
        section_wall_s: ``section@threads`` -> seconds.
    """
    return {
        "format": RESULTS_FORMAT,
        "command": " ".join(command),
        "date": machine["date"],
        "machine": machine,
        "settings": settings,
        "sections": list(sections),
        "datasets": datasets or {},
        "rows": rows,
        "section_wall_s": section_wall_s or {},
        "wall_s": time.perf_counter() - started,
        "loadavg_end": loadavg(),
    }


def script_options(p: Any, repeat_help: str = "timed calls per implementation") -> None:
    """Add the options every ``benchmarks/`` training script takes to parser ``p``.

    ``--repeat``, ``--threads``, ``--device`` and ``--out`` (read back by :func:`script_start`
    and :func:`script_results`).
    """
    p.add_argument("--repeat", type=int, default=3, help=repeat_help)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", type=Path, default=None, help="directory for bench.json and bench.md")


def script_start(args: Any) -> tuple[float, dict[str, Any], int]:
    """A script's start: its clock, ``--threads`` applied; ``(started, machine, threads)``."""
    import time

    import torch

    from fleetgnn.bench.machine import machine_info

    started = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    return started, machine_info(args.device), torch.get_num_threads()


def script_results(
    script: str,
    argv: Sequence[str] | None,
    args: Any,
    rows: list[dict[str, Any]],
    *,
    machine: dict[str, Any],
    sections: Sequence[str],
    started: float,
    extra_settings: dict[str, Any] | None = None,
    datasets: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """How a ``benchmarks/`` script ends: its results document, printed and written.

    The script's options (``args``, an argparse namespace; paths as strings, plus
    ``extra_settings``) are the settings; the command line is ``python SCRIPT ARGV`` (``argv``
    ``None``: ``sys.argv[1:]``). The Markdown tables are printed, and with ``args.out`` the JSON
    and Markdown files are written there.
    """
    import sys

    from fleetgnn.bench.report import markdown, write_results

    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    results = results_document(
        rows,
        command=["python", script, *(sys.argv[1:] if argv is None else argv)],
        machine=machine,
        settings={**settings, **(extra_settings or {})},
        sections=sections,
        started=started,
        datasets=datasets,
    )
    print(markdown(results))
    if getattr(args, "out", None) is not None:
        js, md = write_results(args.out, results)
        print(f"wrote {js} and {md}")
    return results


def describe(graph: Graph | HeteroGraph, name: str, gen_s: float) -> dict[str, Any]:
    """A dataset as the results record it (``gen_s``: seconds it took to generate, 0 cached).

    A typed graph records its feature width per type and its node and edge counts per type and
    relation as well.
    """
    out = {
        "name": name,
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "num_classes": graph.num_classes,
        "generate_s": gen_s or None,
    }
    if isinstance(graph, HeteroGraph):
        s = graph.schema
        out["num_features"] = {t: graph.feature_width(t) for t in s.node_types}
        out["type_nodes"] = {t: s.count(t) for t in s.node_types}
        out["relation_edges"] = {"__".join(r): graph.num_relation_edges(r) for r in s.relations}
    else:
        out["num_features"] = graph.num_features
    return out


def _run_section(
    section: str,
    opts: BenchOptions,
    threads: int,
    log: Callable[[str], None],
    small: tuple[Graph, str] | None,
    large: tuple[Graph, str] | None,
) -> list[dict[str, Any]]:
    if section == "ops":
        return ops.run(opts, threads, log)
    if section == "trainer":
        assert small is not None
        return trainer.run(opts, threads, log, *small)
    assert large is not None
    if section == "sampler":
        return sampler.run(opts, threads, log, *large)
    if section == "gather":
        return gather.run(opts, threads, log, *large)
    if section == "epoch":
        assert small is not None
        return epoch.run(opts, threads, log, small, large)
    path = dataset_dir(opts.cache_dir, "products-like", opts.large_scale)
    if section == "link":
        return link.run(opts, threads, log, large, path)
    return engines.run(opts, log, large[0], path, large[1])
