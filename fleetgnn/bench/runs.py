"""Timed runs of ``fleetgnn train`` as a user types it: a child process tree, its epoch records.

For benchmarks that measure the whole command (launcher, preprocessing, every rank) rather than an
engine built in this process (:mod:`fleetgnn.bench.engines`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fleetgnn.train.metrics import read_metrics

#: Runs its argv as a child and prints the child tree's peak RSS (KiB) as the last line.
_RSS_WRAPPER = (
    "import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)"
)


def train_epochs(
    dataset: str | Path,
    engine: str,
    model: str,
    world: int,
    epochs: int,
    run_dir: Path,
    *,
    mode: str | None = None,
    sets: Sequence[str] = (),
    threads: int = 1,
    peak_rss: bool = False,
) -> tuple[list[dict[str, Any]], int | None]:
    """``fleetgnn train`` of one warm-up and ``epochs`` timed epochs, no evaluation, no checkpoint.

    Args:
        dataset: A prepared dataset directory.
        engine: ``--engine``.
        model: ``--model``.
        world: ``--nproc`` (1: a single process).
        epochs: Timed epochs (one warm-up epoch runs first).
        run_dir: ``--run-dir``; its ``metrics.jsonl`` holds the records.
        mode: ``--mode`` (``full`` or ``minibatch``), or None for the config's.
        sets: More ``--set`` overrides.
        threads: ``OMP_NUM_THREADS`` of every process.
        peak_rss: Also return the process tree's peak resident memory in bytes.

    Returns:
        The timed epochs' records (the warm-up dropped when there is more than one) and the peak
        RSS in bytes (None unless ``peak_rss``).

    Raises:
        RuntimeError: The command failed (with the end of its stderr).
    """
    cmd = [sys.executable, "-m", "fleetgnn", "train", "--engine", engine]
    if mode is not None:
        cmd += ["--mode", mode]
    if world > 1:
        cmd += ["--nproc", str(world)]
    cmd += ["--dataset", str(dataset), "--model", model, "--epochs", str(1 + epochs)]
    cmd += ["--run-dir", str(run_dir), "--no-progress", "--quiet"]
    for s in (f"train.eval_every={epochs + 1}", "train.checkpoint_every=0", *sets):
        cmd += ["--set", s]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    argv = [sys.executable, "-c", _RSS_WRAPPER, *cmd] if peak_rss else cmd
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{engine} {model} W={world} {list(sets)} failed:\n{done.stderr[-4000:]}"
        )
    rss = int(done.stdout.strip().splitlines()[-1]) * 1024 if peak_rss else None
    recs = read_metrics(Path(run_dir) / "metrics.jsonl")  # the per-epoch records
    return (recs[1:] if len(recs) > 1 else recs), rss
