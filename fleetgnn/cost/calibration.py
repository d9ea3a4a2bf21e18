"""The measured ``local`` hardware profile: a short calibration of this machine, cached.

:func:`local_profile` times copies, random row gathers, sparse aggregation, dense products, the
framework's fixed costs and a disk read on the current machine (CPU processes as devices), and
caches the numbers per machine (hostname, CPU model, torch version, processes, threads).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import platform
import socket
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetgnn.cost.hardware import (
    DEFAULT_SAMPLE_RATE,
    FIXED_OVERHEADS,
    NARROW_GEMM_WIDTHS,
    HardwareProfile,
    MiB,
    count_arg,
    positive_arg,
    uniform_peer,
)
from fleetgnn.errors import ConfigError
from fleetgnn.graph import Graph
from fleetgnn.ops import Adjacency, gspmm
from fleetgnn.sampling import GraphTopology, TemporalSampler


# ------------------------------------------------------------------------------- calibration
@dataclasses.dataclass(frozen=True)
class _Sizes:
    copy_bytes: int  # tensor copied for local/h2d/d2h
    table_bytes: int  # table random rows are gathered from
    gather_rows: int  # rows gathered per timing
    width: int  # feature width of gathers and SpMM (float32)
    spmm_nodes: int
    spmm_edges: int
    gemm_n: int  # n x n @ n x n
    narrow_rows: int  # [rows, k] @ [k, 16], k = gemm_n: a GNN layer's narrow transform
    disk_bytes: int
    repeats: int
    temporal_nodes: int = 20_000  # the temporal sampler's power-law graph (mean in-degree 20)
    temporal_seeds: int = 512  # seeds per batch, 4 batches per timing, fanouts (10, 10)


_FULL = _Sizes(64 * MiB, 64 * MiB, 131072, 64, 100_000, 1_000_000, 1024, 8192, 64 * MiB, 3)
_QUICK = _Sizes(4 * MiB, 4 * MiB, 8192, 64, 8_000, 50_000, 256, 2048, 4 * MiB, 2, 2_000, 64)
#: Mean in-degree, fanouts, batches per timing and distinct times of the temporal measurement.
_TEMPORAL_DEGREE, _TEMPORAL_FANOUTS, _TEMPORAL_BATCHES, _TEMPORAL_TIMES = 20.0, (10, 10), 4, 1000


def _best_time(fn: Callable[[], object], repeats: int) -> float:
    """Seconds of the fastest of ``repeats`` calls after one warm-up (positive)."""
    fn()
    best = math.inf
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return max(best, 1e-9)


def _measure_copy(nbytes: int, repeats: int) -> float:
    """Bytes/s copied by ``Tensor.copy_`` of ``nbytes`` (each byte read once, written once)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src).fill_(0.0)  # touch both so page faults stay out of the timing
    return src.numel() * 4 / _best_time(lambda: dst.copy_(src), repeats)


def _measure_gather(table_bytes: int, rows: int, width: int, repeats: int) -> float:
    """Bytes/s of ``index_select`` of ``rows`` random rows of ``width`` float32 (output bytes)."""
    g = torch.Generator().manual_seed(0)
    n = max(1, table_bytes // (4 * width))
    table = torch.rand(n, width, generator=g)
    idx = torch.randint(0, n, (rows,), generator=g)
    return rows * width * 4 / _best_time(lambda: torch.index_select(table, 0, idx), repeats)


def _measure_spmm(nodes: int, edges: int, width: int, repeats: int) -> float:
    """Multiply-adds/s of :func:`fleetgnn.ops.gspmm` (sum) on a uniform random graph."""
    g = torch.Generator().manual_seed(0)
    src = torch.randint(0, nodes, (edges,), generator=g)
    dst = torch.randint(0, nodes, (edges,), generator=g)
    adj = Adjacency.from_edges(src, dst, nodes, nodes)
    x = torch.rand(nodes, width, generator=g)
    with torch.no_grad():
        return edges * width / _best_time(lambda: gspmm(adj, x, "sum"), repeats)


def _measure_gemm(n: int, repeats: int) -> float:
    """Flop/s of ``torch.mm`` of two ``n x n`` float32 matrices (``2 n^3`` flop)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(n, n, generator=g), torch.rand(n, n, generator=g)
    return 2.0 * n**3 / _best_time(lambda: torch.mm(a, b), repeats)


def _measure_narrow_gemm(rows: int, k: int, repeats: int) -> float:
    """Flop/s of a layer's transform to 16 columns and of its weight gradient.

    ``[rows, k] @ [k, 16]`` and ``[k, rows] @ [rows, 16]`` (``2 x 2 rows k 16`` flop) over an
    input beyond the caches, as a layer's is; per flop slower than a square product on CPUs.
    """
    g = torch.Generator().manual_seed(0)
    w = NARROW_GEMM_WIDTHS[0]
    a, b = torch.rand(rows, k, generator=g), torch.rand(k, w, generator=g)
    gy = torch.rand(rows, w, generator=g)
    return 4.0 * rows * k * w / _best_time(lambda: (a @ b, a.t() @ gy), repeats)


def _timed_power_law(num_nodes: int, avg_degree: float, times: int, seed: int = 0) -> Graph:
    """A CSC graph with Pareto in-degrees, uniform sources and uniform integer edge times.

    The times are sorted within each node's in-edges (the format's invariant); the graph of
    ``benchmarks/bench_temporal_sampler.py``, built here without the benchmark package.
    """
    rng = np.random.default_rng(seed)
    raw = rng.pareto(1.5, num_nodes) + 1.0
    deg = np.minimum(np.floor(raw * avg_degree / raw.mean()), num_nodes).astype(np.int64)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(deg, out=indptr[1:])
    edges = int(indptr[-1])
    indices = rng.integers(0, num_nodes, edges, dtype=np.int32)
    t = rng.integers(0, times, edges, dtype=np.int64)
    segment = np.repeat(np.arange(num_nodes, dtype=np.int64), deg)
    return Graph(
        indptr=indptr,
        indices=indices,
        edge_time=t[np.lexsort((t, segment))],
        name="calibration-temporal",
        validate="structure",
    )


def measure_temporal_sampler(num_nodes: int, seeds: int, repeats: int) -> float:
    """Sampled edges/s of :class:`~fleetgnn.sampling.TemporalSampler` on the host.

    The engines' host path (numpy backend over a :class:`~fleetgnn.sampling.GraphTopology`,
    ``uniform``, fanouts ``(10, 10)``) on a power-law graph of ``num_nodes`` nodes and mean
    in-degree 20 with uniform edge times (:func:`_timed_power_law`): 4 batches of ``seeds``
    seeds at uniform times per timed call (each seed's own subtree, in-edges before its
    time); the rate counts every hop's sampled edges of the fastest call.
    """
    g = _timed_power_law(num_nodes, _TEMPORAL_DEGREE, _TEMPORAL_TIMES)
    sampler = TemporalSampler(
        GraphTopology(g), list(_TEMPORAL_FANOUTS), seed=0, backend="numpy", validate=False
    )
    rng = np.random.default_rng(1)
    batches = [
        (
            torch.from_numpy(rng.choice(num_nodes, seeds, replace=False).astype(np.int64)),
            torch.from_numpy(rng.integers(1, _TEMPORAL_TIMES, seeds, dtype=np.int64)),
        )
        for _ in range(_TEMPORAL_BATCHES)
    ]
    edges = 0

    def run() -> None:
        nonlocal edges
        edges = 0
        for step, (ids, t) in enumerate(batches):
            sample = sampler.sample_from_nodes(ids, seed_time=t, step=step)
            edges += sum(int(b.indices.numel()) for b in sample.blocks)

    best = _best_time(run, repeats)
    return edges / best


def measure_overheads(repeats: int, device: torch.device | str = "cpu") -> dict[str, float]:
    """Keyed dropout's elements/s on a 4M-element tensor, and the fixed costs of a step.

    ``layer``: forward and backward of one tiny layer (32 nodes, 128 edges, width 16: keyed
    dropout, a dense transform, :func:`fleetgnn.ops.gspmm`, ReLU), where the size costs
    nothing and Python and the framework everything. ``param``: Adam's step and ``zero_grad``
    over 16 tiny parameter tensors, per tensor. On ``device`` (the GPU check measures a GPU's
    with it); each timed call there ends with a synchronisation, so a time is the later of the
    host's launches and the device's work.
    """
    from fleetgnn.ops.random import keyed_dropout

    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def timed(fn: Callable[[], object], reps: int) -> float:
        return _best_time(lambda: (fn(), sync()), reps)

    g = torch.Generator().manual_seed(0)
    big = torch.rand(2048, 2048, generator=g).to(dev)  # 16 MiB: beyond the caches
    big_ids = torch.arange(2048, device=dev)
    rate = big.numel() / timed(lambda: keyed_dropout(big, 0.5, 0, 1, 0, big_ids), repeats)
    n, e, w = 32, 128, 16
    adj = Adjacency.from_edges(
        torch.randint(0, n, (e,), generator=g).to(dev),
        torch.randint(0, n, (e,), generator=g).to(dev),
        n,
        n,
    )
    x = torch.rand(n, w, generator=g).to(dev).requires_grad_()
    weight = torch.rand(w, w, generator=g).to(dev).requires_grad_()
    ids = torch.arange(n, device=dev)

    def layer() -> None:
        h = keyed_dropout(x, 0.5, 0, 1, 0, ids) @ weight
        gspmm(adj, h, "sum").relu().sum().backward()

    params = [torch.rand(4, generator=g).to(dev).requires_grad_() for _ in range(16)]
    # the engines' optimizer: fused on CUDA (train.setup.optimizer_from_config), torch's default
    # (foreach) on the CPU
    opt = torch.optim.Adam(params, fused=True if dev.type == "cuda" else None)
    for q in params:
        q.grad = torch.ones_like(q)

    def step() -> None:
        opt.step()
        opt.zero_grad(set_to_none=False)

    reps = max(repeats, 20)  # microsecond timings: more repeats against noise
    return {
        "keyed_dropout": rate,
        "layer_overhead": timed(layer, reps),
        "param_overhead": timed(step, reps) / len(params),
    }


def _read_file(path: str, buf: bytearray) -> int:
    view, total = memoryview(buf), 0
    with open(path, "rb", buffering=0) as f:
        while True:
            got = f.readinto(view)
            if not got:
                return total
            total += got


def _measure_disk(nbytes: int, directory: Path) -> tuple[float, str]:
    """Bytes/s reading back a fresh ``nbytes`` file, and how it was read (for ``source``).

    The file is written, fsync'ed and dropped from the page cache with
    ``posix_fadvise(POSIX_FADV_DONTNEED)`` (no root needed; the kernel drops clean pages where
    it honours the advice). When the cold read is not clearly slower than a second, cached
    read, the pages were not dropped (or the file system lives in memory): the rate is then a
    page-cache read and the note says so.
    """
    directory.mkdir(parents=True, exist_ok=True)
    block = os.urandom(min(nbytes, 4 * MiB))
    fd, path = tempfile.mkstemp(prefix="fleetgnn-disk-", dir=directory)
    try:
        written = 0
        while written < nbytes:
            written += os.write(fd, block[: nbytes - written])
        os.fsync(fd)
        advised = hasattr(os, "posix_fadvise")
        if advised:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        buf = bytearray(len(block))
        t = time.perf_counter()
        _read_file(path, buf)
        cold = nbytes / max(time.perf_counter() - t, 1e-9)
        warm = nbytes / _best_time(lambda: _read_file(path, buf), 1)
    finally:
        os.close(fd)
        os.unlink(path)
    size = f"{nbytes / MiB:.0f} MiB file in {directory}"
    if advised and cold < 0.8 * warm:
        return cold, f"read of a {size} after fsync + posix_fadvise(DONTNEED) (from the device)"
    return cold, (
        f"BUFFERED read of a {size}: the file stayed in the page cache (dropping it needs root "
        "or posix_fadvise, which this kernel/file system did not honour), so this is the "
        "page-cache rate and overstates the disk"
    )


def _calibrate(sizes: _Sizes, directory: Path) -> dict[str, Any]:
    """Run every measurement; returns raw rates and notes (the cache's ``measurements``)."""
    t0 = time.perf_counter()
    copy = _measure_copy(sizes.copy_bytes, sizes.repeats)
    gather = _measure_gather(sizes.table_bytes, sizes.gather_rows, sizes.width, sizes.repeats)
    spmm = _measure_spmm(sizes.spmm_nodes, sizes.spmm_edges, sizes.width, sizes.repeats)
    gemm = _measure_gemm(sizes.gemm_n, sizes.repeats)
    narrow = _measure_narrow_gemm(sizes.narrow_rows, sizes.gemm_n, sizes.repeats)
    disk, disk_note = _measure_disk(sizes.disk_bytes, directory)
    fixed = measure_overheads(sizes.repeats)
    temporal = measure_temporal_sampler(sizes.temporal_nodes, sizes.temporal_seeds, sizes.repeats)
    return {
        **fixed,
        "temporal_sample": temporal,
        "copy": copy,
        "gather": gather,
        "spmm": spmm,
        "gemm": gemm,
        "narrow_gemm": narrow,
        "disk": disk,
        "disk_note": disk_note,
        "sizes": dataclasses.asdict(sizes),
        "seconds": time.perf_counter() - t0,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def _temporal_sizes(sizes: _Sizes) -> dict[str, int]:
    """The temporal measurement's sizes, as the cache's ``sizes`` records them."""
    return {"temporal_nodes": sizes.temporal_nodes, "temporal_seeds": sizes.temporal_seeds}


def _probe(comm_probe: Callable[[], float]) -> float:
    value = comm_probe()
    try:
        return positive_arg("comm_probe()", value, "bytes/s (measured all-to-all rate)")
    except ConfigError as e:
        raise ConfigError(f"local_profile: {e}") from None


# ------------------------------------------------------------------------------ local machine
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpucount_arg() or 1


def _host_memory() -> tuple[int, str]:
    """Bytes of host memory and where the number comes from."""
    total, note = 0, ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total, note = int(line.split()[1]) * 1024, "/proc/meminfo MemTotal"
                break
    except (OSError, ValueError, IndexError):
        pass
    if not total:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        note = "sysconf physical pages"
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            limit = int(Path(limit_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if 0 < limit < total:
            total, note = limit, f"{note} capped by the cgroup limit in {limit_file}"
        break
    return total, note


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fleetgnn" / "hardware"


def _resolve_threads(threads: int | None, nproc: int) -> int:
    if threads is not None:
        return count_arg("threads", threads)
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) >= 1:
        return int(env)
    return max(1, _usable_cores() // nproc)


def _machine_key(nproc: int, threads: int, quick: bool) -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "cpu": _cpu_model(),
        "torch": torch.__version__,
        "nproc": nproc,
        "threads": threads,
        "quick": quick,
    }


def _cache_path(cache_dir: Path, key: Mapping[str, Any]) -> Path:
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(key["hostname"]))
    return cache_dir / f"{host[:40]}-n{key['nproc']}-{digest}.json"


def _read_cache(path: Path, key: Mapping[str, Any]) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != dict(key):
        return None
    m = data.get("measurements")
    needed = (
        "copy",
        "gather",
        "spmm",
        "gemm",
        "narrow_gemm",
        "disk",
        "keyed_dropout",
        "layer_overhead",
    )
    if not isinstance(m, dict) or not all(
        isinstance(m.get(k), (int, float)) and m[k] > 0 for k in needed
    ):
        return None
    return m


def _write_cache(
    path: Path, key: Mapping[str, Any], m: Mapping[str, Any], profile: HardwareProfile
) -> None:
    data = {"key": dict(key), "measurements": dict(m), "profile": profile.to_dict()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError as e:
        warnings.warn(
            f"local_profile: could not cache the calibration in {path} ({e}); it will run "
            "again next time",
            stacklevel=3,
        )


def _local_from(
    nproc: int, key: Mapping[str, Any], m: Mapping[str, Any], host_memory: int, mem_note: str
) -> HardwareProfile:
    copy = float(m["copy"])
    local = 2.0 * copy  # bytes read + written, the convention of every profile's "local"
    if "peer" in m:
        peer = float(m["peer"])
        peer_note = "peer = net = the comm_probe's all-to-all rate between 2 processes"
    else:
        peer = copy / 2.0
        peer_note = (
            "peer = net = copy rate / 2, an ESTIMATE (no comm_probe given: pass one to measure "
            "the all-to-all rate between processes)"
        )
    sizes = m.get("sizes", {})
    matrix = uniform_peer(nproc, local, peer)
    source = (
        f"measured on host {key['hostname']!r} ({key['cpu']}, {_usable_cores()} usable cores, "
        f"torch {key['torch']}) on {m.get('date', '?')}, one process with {key['threads']} "
        f"thread(s) (the share of each of nproc={nproc} ranks), in {m.get('seconds', 0):.1f} s"
        f"{' (quick sizes)' if key['quick'] else ''}: local = 2 x the copy rate of a "
        f"{sizes.get('copy_bytes', 0) / MiB:.0f} MiB tensor (bytes read + written); h2d = d2h "
        "= that copy rate (CPU: no separate device memory); gather = index_select of "
        f"{sizes.get('gather_rows', 0)} random rows of {4 * sizes.get('width', 0)} B; spmm = "
        f"fleetgnn.ops.gspmm sum over {sizes.get('spmm_edges', 0):,} random edges x width "
        f"{sizes.get('width', 0)}; gemm = torch.mm of {sizes.get('gemm_n', 0)}^2 float32; "
        f"narrow gemm = [{sizes.get('narrow_rows', 0)}, {sizes.get('gemm_n', 0)}] @ "
        f"[{sizes.get('gemm_n', 0)}, 16] and its weight gradient; "
        "elementwise = keyed dropout of 2048^2 float32; layer_overhead = forward + backward of "
        "a 32-node layer; param_overhead = Adam's step per parameter tensor; "
        f"disk = {m.get('disk_note', '?')}; {peer_note} (one host, no NIC between its "
        f"processes); device_memory = host_memory / {nproc} (processes share host memory); "
        f"host_memory from {mem_note}; sample_rate = {DEFAULT_SAMPLE_RATE:.3g} edges/s "
        "assumed (fleetgnn's numpy sampler, not measured here); temporal_sample_rate = "
        "TemporalSampler (numpy, uniform, fanouts 10,10) on a power-law graph of "
        f"{sizes.get('temporal_nodes', 0):,} nodes, mean in-degree 20, uniform edge times, "
        f"batches of {sizes.get('temporal_seeds', 0)} seeds at uniform times. Rates are one "
        "process's alone: concurrent ranks share memory bandwidth."
    )
    rates_from = (
        f"this machine's calibration ({key['hostname']}, torch {key['torch']}, "
        f"{str(m.get('date', '?'))[:10]}); sample rate assumed, temporal sample rate measured"
    )
    return HardwareProfile(
        name="local",
        kind="cpu",
        num_devices=nproc,
        device_memory=host_memory // nproc,
        host_memory=host_memory,
        bandwidth={
            "local": local,
            "peer": peer,
            "h2d": copy,
            "d2h": copy,
            "net": peer,
            "disk": float(m["disk"]),
        },
        peer=matrix,
        gather_rate=float(m["gather"]),
        spmm_rate=float(m["spmm"]),
        gemm_rate=float(m["gemm"]),
        narrow_gemm_rate=float(m["narrow_gemm"]),
        elementwise_rate=float(m["keyed_dropout"]),
        layer_overhead=float(m["layer_overhead"]),
        param_overhead=float(m.get("param_overhead", FIXED_OVERHEADS["cpu"]["param_overhead"])),
        sample_rate=DEFAULT_SAMPLE_RATE,
        temporal_sample_rate=float(m["temporal_sample"]),
        rates_from=rates_from,
        source=source,
    )


def local_profile(
    nproc: int,
    *,
    comm_probe: Callable[[], float] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    refresh: bool = False,
    quick: bool = False,
    threads: int | None = None,
) -> HardwareProfile:
    """The current machine, ``nproc`` CPU processes as devices, from a short calibration.

    Measures (about 2-5 s on a 2-core machine; ``quick=True`` shrinks every size, well under a
    second): the copy rate of a 64 MiB tensor (``local`` = 2x it, counting reads and writes;
    ``h2d`` = ``d2h`` = it), random row gathers, :func:`fleetgnn.ops.gspmm` on a random graph
    of 1M edges x width 64, ``torch.mm`` of 1024^2 float32, the temporal sampler's sampled
    edges/s (:func:`measure_temporal_sampler`, ``temporal_sample_rate``), and reading back a
    64 MiB temp file (dropped from the page cache with ``posix_fadvise`` where the kernel
    allows; otherwise a buffered read, and ``source`` says so). ``peer`` (every pair of
    processes) and ``net`` are ``comm_probe()`` if given, else the copy rate / 2 (an estimate,
    noted in ``source``).
    ``device_memory`` is ``host_memory // nproc``: the processes share host memory.

    The measurements are cached as JSON under ``cache_dir``, keyed by hostname, CPU model, torch
    version, ``nproc``, threads and ``quick``, and reused unless ``refresh``; a cached
    calibration without a peer measurement runs only ``comm_probe`` when one is given, one
    without the temporal sampler's rate measures only that.

    Args:
        nproc: Processes (ranks) this host will run, ``>= 1``.
        comm_probe: Returns the all-to-all bytes/s measured between 2 processes (e.g. over
            gloo); called at most once, and not at all when the cache holds its result.
        cache_dir: Cache directory (default ``$XDG_CACHE_HOME/fleetgnn/hardware``, i.e.
            ``~/.cache/fleetgnn/hardware``); the disk probe's temp file is written there too.
        refresh: Measure again even when a cached calibration exists.
        quick: Tiny sizes (tests): rates are noisier and lower than the full calibration's.
        threads: Torch intra-op threads to measure with (default ``$OMP_NUM_THREADS``, else
            the usable cores divided by ``nproc``, as ``fleetgnn train`` gives each rank).

    Returns:
        A ``kind="cpu"`` profile named ``"local"`` with ``nproc`` devices.

    Raises:
        ConfigError: ``nproc`` or ``threads`` below 1, or a non-positive probe result.
    """
    nproc = count_arg("nproc", nproc)
    threads = _resolve_threads(threads, nproc)
    directory = Path(cache_dir) if cache_dir is not None else _default_cache_dir()
    key = _machine_key(nproc, threads, bool(quick))
    path = _cache_path(directory, key)
    m = None if refresh else _read_cache(path, key)
    changed = m is None
    if m is None:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            m = _calibrate(_QUICK if quick else _FULL, directory)
        finally:
            torch.set_num_threads(before)
    if comm_probe is not None and "peer" not in m:
        m["peer"] = _probe(comm_probe)
        changed = True
    if not isinstance(m.get("temporal_sample"), (int, float)) or m["temporal_sample"] <= 0:
        # a calibration cached before the temporal sampler was measured: measure it alone
        sizes = _QUICK if quick else _FULL
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            m["temporal_sample"] = measure_temporal_sampler(
                sizes.temporal_nodes, sizes.temporal_seeds, sizes.repeats
            )
        finally:
            torch.set_num_threads(before)
        m["sizes"] = {**dict(m.get("sizes", {})), **_temporal_sizes(sizes)}
        changed = True
    host_memory, mem_note = _host_memory()
    profile = _local_from(nproc, key, m, host_memory, mem_note)
    if changed:
        _write_cache(path, key, m, profile)
    return profile
