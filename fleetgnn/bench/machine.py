"""Where benchmark numbers come from: CPU, cores, memory, GPU, versions, load, optional peers."""

from __future__ import annotations

import datetime
import os
import platform
from typing import Any

import numpy as np
import torch


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``), or the platform's processor string."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def memory_bytes() -> int | None:
    """Total memory of the machine in bytes (``/proc/meminfo``), or None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def loadavg() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, or None where unknown."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask; ``os.cpu_count()`` where unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS
        return os.cpu_count() or 1


def pyg_version() -> str | None:
    """``torch_geometric.__version__``, or None when it does not import."""
    try:
        import torch_geometric
    except ImportError:
        return None
    return str(torch_geometric.__version__)


def pyg_native() -> dict[str, bool]:
    """Which of PyG's compiled companions import (``pyg_lib``, ``torch_sparse``)."""
    out = {}
    for name in ("pyg_lib", "torch_sparse"):
        try:
            __import__(name)
            out[name] = True
        except (ImportError, OSError, RuntimeError):  # a wheel built for another torch fails
            out[name] = False
    return out


def gpu_name(device: torch.device | None = None) -> str | None:
    """The CUDA device's name, or None without CUDA."""
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(device if device is not None else 0)


def machine_info(device: torch.device | str = "cpu") -> dict[str, Any]:
    """A description of this machine and software, for the JSON of every benchmark.

    Args:
        device: The device the benchmark runs on (its GPU name is recorded for CUDA).

    Returns:
        Platform, CPU model, cores (all and usable), memory, GPU, versions of Python, torch,
        NumPy, torch_geometric and its compiled companions, torch's intra-op threads, the
        device, the date (UTC, ISO 8601) and the load average at the start.
    """
    device = torch.device(device)
    return {
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable_cpus(),
        "memory_bytes": memory_bytes(),
        "gpu": gpu_name(device) if device.type == "cuda" else gpu_name(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "torch_geometric": pyg_version(),
        **pyg_native(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "loadavg_start": loadavg(),
    }
