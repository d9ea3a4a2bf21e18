"""Timing: interleaved A/B repetitions and medians.

On a shared machine the background load drifts; timing every implementation once per repetition,
in turn (fleetgnn, peer, peer, fleetgnn, peer, ...), gives them the same load on average, and
the median of the repetitions drops the outliers a burst of load causes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch


def sync(device: torch.device | str | None) -> None:
    """Wait for queued work on a CUDA device (nothing on the CPU)."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device | str | None = None) -> float:
    """Seconds one call of ``fn`` takes (device work included)."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def median_time(
    fn: Callable[[], Any], repeat: int, device: torch.device | str | None = None, warmup: int = 1
) -> float:
    """Median seconds of ``repeat`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    return statistics.median(timed(fn, device) for _ in range(max(1, repeat)))


def interleaved(
    fns: Mapping[str, Callable[[], Any]],
    repeat: int,
    device: torch.device | str | None = None,
    warmup: int = 1,
) -> dict[str, list[float]]:
    """Seconds of every call, implementations alternating within each repetition.

    Args:
        fns: Implementation name -> a call to time (the first is fleetgnn by convention).
        repeat: Timed repetitions (each times every implementation once, in order).
        device: Synchronised around each call when it is a CUDA device.
        warmup: Untimed rounds first (caches, lazy initialisation, allocator).

    Returns:
        Name -> the ``repeat`` times in seconds, in the order they ran.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    out: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(max(1, repeat)):
        for name, fn in fns.items():
            out[name].append(timed(fn, device))
    return out
