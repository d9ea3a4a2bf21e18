"""Section ``gather``: feature rows read through the unified store against plain indexing.

One process, :class:`~fleetgnn.store.UnifiedStore` over ``products-like``'s features, random
node IDs (the size of a sampled batch's input), two placements:

- every row on the device tier (in memory): against ``torch.index_select`` on a plain tensor
  holding the features;
- every row on the disk tier (the dataset's memory map, page-cached after the first call):
  against NumPy fancy indexing of the same memory map, and ``index_select`` in memory;

and the memcpy limit: the seconds ``copy_`` needs to read and write the gathered bytes at the
bandwidth measured in the same run. Rates are gathered GB per second.

On a CUDA device (``device=``) the plain tensor, the IDs and the copy limit live on the device
(``index_select`` there against a device-to-device copy). The device-tier store is built on the
device (every row there, read with IDs on the device: an engine's read of its device tier); the
disk-tier one stays on the host, its rows gathered there and copied to the device, and says so
(``host gather + copy to <device>``).

Per stored dtype (``store.feature_dtype``, :mod:`fleetgnn.graph.compact`; on the CPU): the
store's gather of the same random IDs, every row on the device tier, with the rows stored as
the dataset's (``None``), ``bfloat16``, ``float16`` and ``float8_e4m3`` and read back to the
dataset's dtype (:func:`dtype_rows`), into a fresh output each call and into one output
buffer reused call after call: rows per second, stored bytes per row, GB per second counted in
stored bytes, and the rate over the dataset's rows with the same output (``ratio_to_dataset``,
the ``speedup`` over the ``dataset rows`` baseline), and beside the reused output the read
alone (``index_select`` of the stored rows, not decoded). The calls are timed interleaved.
``benchmarks/bench_gather_dtypes.py`` runs the same measurement on a table of a chosen size.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fleetgnn.bench.ops import memcpy_gbps
from fleetgnn.bench.report import measurement, progress_line
from fleetgnn.bench.timing import interleaved
from fleetgnn.graph import Graph
from fleetgnn.graph.compact import feature_codec
from fleetgnn.store import TierBudgets, UnifiedStore

SECTION = "gather"
#: The stored feature dtypes :func:`dtype_rows` compares (``None``: the dataset's own rows).
FEATURE_DTYPES: tuple[str | None, ...] = (None, "bfloat16", "float16", "float8_e4m3")
#: The name of the baseline in :func:`dtype_rows`' rows: the store of the dataset's rows.
DATASET_ROWS = "dataset rows (feature_dtype None)"
#: The limit beside :func:`dtype_rows`' reused-output rows: the read alone, ``index_select`` of
#: the stored rows (a tensor of the stored dtype) into a reused buffer, without decoding.
STORED_ROWS = "index_select of the stored rows alone (no decode)"
#: :func:`dtype_rows`' outputs: a fresh tensor each call, or one buffer given as ``out``.
OUTPUTS: tuple[str, ...] = ("fresh", "reused")
OUTPUT_WORDS = {"fresh": "into a fresh output", "reused": "into a reused output buffer"}


def run(
    opts: Any,
    threads: int,
    log: Callable[[str], None],
    graph: Graph,
    name: str,
    device: torch.device | str = "cpu",
) -> list[dict[str, Any]]:
    """Both gather measurements on ``graph`` (named ``name`` in the table), on ``device``."""
    x_map = graph.x
    if x_map is None:
        raise ValueError(f"{name} has no features to gather")
    device = torch.device(device)
    on_host = device.type == "cpu"
    x = torch.from_numpy(np.array(x_map))  # a private in-memory copy
    n_ids = min(graph.num_nodes, 20_000 if opts.quick else 200_000)
    ids = torch.from_numpy(np.random.default_rng(2).integers(0, graph.num_nodes, n_ids))
    np_ids = ids.numpy()
    x_dev, ids_dev = x.to(device), ids.to(device)
    nbytes = n_ids * x.shape[1] * x.element_size()
    bw = memcpy_gbps((32 if opts.quick else 256) << 20, opts.repeat, device)
    limit = {"memcpy of the gathered bytes": 2 * nbytes / (bw * 1e9)}
    rows = []
    everything = int(np.asarray(graph.indptr).nbytes + np.asarray(graph.indices).nbytes) + int(
        x.numel() * x.element_size()
    )
    placements = {
        "device tier (in memory)" if on_host else f"device tier (on {device})": TierBudgets(
            device=2 * everything, host=0
        ),
        "disk tier (page-cached memory map)"
        if on_host
        else f"disk tier (page-cached memory map), host gather + copy to {device}": TierBudgets(),
    }
    for where, budgets in placements.items():
        on_device = not on_host and where.startswith("device tier")
        store = UnifiedStore.build(
            graph,
            budgets=budgets,
            name=f"bench{threads}",
            **({"device": device} if on_device else {}),
        )
        read_ids = ids_dev if on_device else ids
        try:
            if not torch.equal(store.gather(read_ids[:100]).cpu(), x[ids[:100]]):
                raise RuntimeError("the store's rows differ from the features")
            calls = {
                "fleetgnn": lambda store=store, read_ids=read_ids: store.gather(read_ids).to(
                    device
                ),
                "torch index_select": lambda: torch.index_select(x_dev, 0, ids_dev),
            }
            if "disk" in where:
                calls["NumPy fancy index of the memory map"] = lambda: x_map[np_ids]
            times = interleaved(calls, opts.repeat, device)
        finally:
            store.close()
        work = dict.fromkeys(calls, nbytes / 1e9)
        row = measurement(
            SECTION,
            f"store gather of {n_ids:,} random rows x {x.shape[1]} float32, {where}, {name}"
            + ("" if on_host else f"; index_select and limit on {device}"),
            threads,
            times,
            work=work,
            unit="GB/s",
            limits=limit,
            extra={"bytes": nbytes, "memcpy_gbps": bw, "device": str(device)},
        )
        rows.append(row)
        log(progress_line(row))
    if on_host:
        rows += dtype_rows(graph, name, ids, opts.repeat, threads, log)
    return rows


def dtype_rates(
    times: dict[str | None, list[float]], n_ids: int, row_bytes: dict[str | None, int]
) -> dict[str | None, dict[str, float]]:
    """Per stored dtype: ``rows_per_s``, ``row_bytes``, ``stored_gbps``, ``ratio_to_dataset``.

    From the median of each dtype's gather seconds (``times``) of ``n_ids`` rows; the ratio is
    the dtype's rows per second over those of ``None`` (the dataset's rows), which ``times``
    must hold.
    """
    if None not in times:
        raise ValueError("dtype_rates needs the dataset's rows (feature_dtype None) to compare")
    out: dict[str | None, dict[str, float]] = {}
    for d, ts in times.items():
        median = statistics.median(ts)
        if not median > 0:
            raise ValueError(f"gather times of feature_dtype {d} must be > 0 (median {median})")
        rate = n_ids / median
        out[d] = {
            "rows_per_s": rate,
            "row_bytes": int(row_bytes[d]),
            "stored_gbps": rate * row_bytes[d] / 1e9,
        }
    for d in out:
        out[d]["ratio_to_dataset"] = out[d]["rows_per_s"] / out[None]["rows_per_s"]
    return out


def dtype_rows(
    graph: Graph,
    name: str,
    ids: torch.Tensor,
    repeat: int,
    threads: int,
    log: Callable[[str], None],
    dtypes: tuple[str | None, ...] = FEATURE_DTYPES,
) -> list[dict[str, Any]]:
    """The store's gather of ``ids`` per stored feature dtype and output, on the CPU.

    One store per dtype over ``graph`` (every row on the device tier, in memory), each checked
    first to read back ``round_trip`` of the dataset's rows, into a fresh output and into a
    given one; then the gathers of ``ids`` timed interleaved, every dtype in both
    :data:`OUTPUTS` (a fresh output tensor each call; one buffer per store, passed as ``out``
    on every call, as a training loop that keeps its input buffer would). One row per output
    and dtype: million rows per second; ``extra`` has the ``output``, the stored dtype,
    ``row_bytes``, ``rows_per_s``, ``stored_gbps`` (GB/s of stored bytes) and
    ``ratio_to_dataset``, the rate over :data:`DATASET_ROWS` (``None``'s gather) with the
    same output, which is that row's speed-up over its baseline. A reused-output row also
    has the limit :data:`STORED_ROWS`, timed in the same rounds: what reading the stored rows
    costs without writing the decoded output.
    """
    x_map = graph.x
    if x_map is None:
        raise ValueError(f"{name} has no features to gather")
    if None not in dtypes:
        raise ValueError("dtype_rows compares with the dataset's rows: dtypes must hold None")
    width = int(x_map.shape[1])
    everything = int(np.asarray(graph.indptr).nbytes + np.asarray(graph.indices).nbytes) + int(
        np.asarray(x_map).nbytes
    )
    check = ids[:100]
    expected = torch.from_numpy(np.asarray(x_map[check.numpy()]))
    stores: dict[str | None, UnifiedStore] = {}
    try:
        calls: dict[tuple[str, str | None], Callable[[], Any]] = {}
        for d in dtypes:
            store = UnifiedStore.build(
                graph,
                budgets=TierBudgets(device=2 * everything, host=0),
                name=f"bench{threads}{d or 'x'}",
                feature_dtype=d,
            )
            stores[d] = store
            codec = feature_codec(d)
            want = expected if codec is None else codec.round_trip(expected)
            buf = torch.empty((int(ids.numel()), width), dtype=want.dtype)
            if not (
                torch.equal(store.gather(check), want)
                and torch.equal(store.gather(check, out=buf[: check.numel()]), want)
            ):
                raise RuntimeError(f"the {d or 'dataset'} store's rows differ from round_trip(x)")
            calls["fresh", d] = lambda s=store: s.gather(ids)
            calls["reused", d] = lambda s=store, buf=buf: s.gather(ids, out=buf)
            # the read alone: the stored rows gathered into a reused buffer, not decoded
            stored = torch.from_numpy(np.asarray(x_map)) if codec is None else codec.encode(x_map)
            into = stored.new_empty((int(ids.numel()), int(stored.shape[1])))
            calls["stored", d] = lambda t=stored, o=into: torch.index_select(t, 0, ids, out=o)
        times = interleaved(calls, repeat, "cpu")  # type: ignore[arg-type]
        row_bytes = {d: s.row_bytes() for d, s in stores.items()}
    finally:
        for s in stores.values():
            s.close()
    n_ids = int(ids.numel())
    dataset_dtype = str(np.asarray(x_map[:0]).dtype)
    out = []
    for output in OUTPUTS:
        mine = {d: times[output, d] for d in dtypes}  # type: ignore[index]
        rates = dtype_rates(mine, n_ids, row_bytes)
        for d in dtypes:
            r = rates[d]
            impls = {"fleetgnn": mine[d]}
            if d is not None:
                impls[DATASET_ROWS] = mine[None]
            if output == "reused":
                impls[STORED_ROWS] = times["stored", d]  # type: ignore[index]
            stored = d or f"{dataset_dtype} (the dataset's)"
            row = measurement(
                SECTION,
                f"store gather of {n_ids:,} random rows x {width} stored as {stored} "
                f"({r['row_bytes']} B/row), read back as {dataset_dtype} {OUTPUT_WORDS[output]}, "
                f"device tier, {name}",
                threads,
                impls,
                work=dict.fromkeys(impls, n_ids / 1e6),
                unit="M rows/s",
                kinds={DATASET_ROWS: "baseline", STORED_ROWS: "limit"},
                extra={
                    "output": output,
                    "feature_dtype": d,
                    "dataset_dtype": dataset_dtype,
                    "rows": n_ids,
                    "table_rows": int(graph.num_nodes),
                    **r,
                },
            )
            out.append(row)
            log(
                progress_line(row)
                + f"; {r['stored_gbps']:.3g} GB/s stored, x{r['ratio_to_dataset']:.2f} of the "
                "dataset's rows/s"
            )
    return out
