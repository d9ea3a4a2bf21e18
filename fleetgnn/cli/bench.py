"""``fleetgnn bench``: run the benchmark suite, write its JSON and tables, update a README.

Progress goes to stderr, one line per step and per measurement. The results go to
``--out DIR`` as ``bench.json`` (machine, versions, settings, every timing and every ratio) and
``bench.md`` (the tables); ``--readme FILE`` then replaces FILE's section between the markers of
:data:`fleetgnn.bench.report.BEGIN_MARK` and ``END_MARK`` with the tables. ``--from-json FILE``
skips the run and rewrites the tables (and the README) from an earlier ``bench.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

_SECTIONS = ("ops", "sampler", "gather", "epoch", "trainer", "engines")  # see fleetgnn.bench
#: Sections that run only when ``--only`` names them.
_NAMED_ONLY = ("link", "hetero")


def add_bench(sub: argparse._SubParsersAction) -> None:
    """Register ``fleetgnn bench``."""
    p = sub.add_parser(
        "bench",
        help="benchmark fleetgnn against PyG and plain torch (JSON + Markdown tables)",
        description="Run fleetgnn's benchmark suite against its peers (PyG when torch_geometric "
        "imports, plain torch, the memcpy limit), interleaved, median of --repeat, at 1 thread "
        "and all cores. Sections: "
        + ", ".join(_SECTIONS)
        + " (and, when --only names them, "
        + ", ".join(_NAMED_ONLY)
        + "); bench.json records the run's wall time. --quick runs small sizes at one thread.",
    )
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    p.add_argument(
        "--threads",
        default=None,
        help="torch thread counts, comma-separated (default: 1,all; --quick: 1; 'all' = the "
        "usable cores)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="timed repetitions per measurement, the median is kept (default 3; --quick 2)",
    )
    p.add_argument(
        "--only", default=None, help=f"comma-separated sections (default: {','.join(_SECTIONS)})"
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("fleetgnn-bench"),
        help="directory for bench.json and bench.md (default: ./fleetgnn-bench)",
    )
    p.add_argument(
        "--readme",
        type=Path,
        default=None,
        help="replace this file's results section (between the fleetgnn bench markers)",
    )
    p.add_argument(
        "--from-json",
        type=Path,
        default=None,
        metavar="BENCH_JSON",
        help="run nothing: write the tables (and --readme) from an earlier bench.json",
    )
    p.add_argument(
        "--cora",
        type=Path,
        default=None,
        help="Cora: a prepared dataset directory or Planetoid's ind.cora.* files (default: a "
        "Cora-sized synthetic graph)",
    )
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="where generated datasets are kept (default: $XDG_CACHE_HOME/fleetgnn/bench)",
    )
    p.add_argument(
        "--scale",
        type=float,
        default=None,
        help="products-like scale of the large graph (default 0.05; --quick 0.005)",
    )
    p.add_argument(
        "--typed-scale",
        type=float,
        default=None,
        help="igbh-like scale of the typed graph of --only hetero (default 0.1; --quick 0.01)",
    )


def run_bench(args: argparse.Namespace) -> int:
    """Run ``fleetgnn bench``; returns the exit status."""
    from fleetgnn.bench import (
        BenchOptions,
        default_threads,
        markdown,
        parse_threads,
        read_results,
        run_suite,
        update_readme,
        write_results,
    )
    from fleetgnn.bench.data import default_cache_dir
    from fleetgnn.bench.report import check_readme

    def log(line: str) -> None:
        print(f"fleetgnn bench: {line}", file=sys.stderr, flush=True)

    if args.readme is not None:
        check_readme(args.readme)  # before a run of minutes, not after it
    if args.from_json is not None:
        results = read_results(args.from_json)
    else:
        only = tuple(s.strip() for s in args.only.split(",")) if args.only else _SECTIONS
        opts = BenchOptions(
            quick=args.quick,
            threads=parse_threads(args.threads)
            if args.threads
            else ((1,) if args.quick else default_threads()),
            repeat=args.repeat if args.repeat is not None else (2 if args.quick else 3),
            only=only,
            cache_dir=args.cache_dir or default_cache_dir(),
            cora=args.cora,
            scale=args.scale,
            typed_scale=args.typed_scale,
        )
        results = run_suite(opts, log, command=_command(args))
    js, md = write_results(args.out, results)
    log(f"wrote {js} and {md} ({results['wall_s'] / 60:.1f} min)")
    if args.readme is not None:
        update_readme(args.readme, markdown(results))
        log(f"updated the results section of {args.readme}")
    return 0


def _command(args: argparse.Namespace) -> list[str]:
    """The options that shaped the run, as a command line (recorded in the results)."""
    out = ["fleetgnn", "bench"]
    if args.quick:
        out.append("--quick")
    for flag in ("threads", "repeat", "only", "cora", "scale", "typed_scale"):
        value = getattr(args, flag)
        if value is not None:
            out += [f"--{flag.replace('_', '-')}", str(value)]
    return out
