"""The benchmark suite behind ``fleetgnn bench``: fleetgnn against its peers, in one run.

Every measurement times fleetgnn and its peers (PyG when ``torch_geometric`` imports, plain torch,
the machine's memcpy limit) interleaved within each repetition and reports medians and
fleetgnn's speed-up over each (> 1: fleetgnn faster); see :mod:`fleetgnn.bench.suite` for the
sections and :mod:`fleetgnn.bench.report` for the result format (one JSON file plus Markdown
tables, which can also replace a README's results section). Every workload is implemented here
once: the scripts in ``benchmarks/`` run a section's functions at other sizes and write the same
result format (:func:`~fleetgnn.bench.suite.results_document`). ``torch_geometric`` is imported
only inside the peers that need it (:mod:`fleetgnn.bench.peers`), so this package imports and
runs without PyG (its peers are then listed as skipped).

Example::

    fleetgnn bench --quick --only ops --out /tmp/bench
    fleetgnn bench --cora data/cora --out benchmarks/results/bench --readme benchmarks/README.md
"""

from fleetgnn.bench.report import markdown, measurement, read_results, update_readme, write_results
from fleetgnn.bench.suite import SECTIONS, BenchOptions, default_threads, parse_threads, run_suite

__all__ = [
    "SECTIONS",
    "BenchOptions",
    "default_threads",
    "markdown",
    "measurement",
    "parse_threads",
    "read_results",
    "run_suite",
    "update_readme",
    "write_results",
]
