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
(``host gather + copy to <device>``). Up to stop 35 the device-tier case on CUDA was a host
store too: its figure was a host gather and a copy, labelled as the device tier.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fleetgnn.bench.ops import memcpy_gbps
from fleetgnn.bench.report import measurement, progress_line
from fleetgnn.bench.timing import interleaved
from fleetgnn.graph import Graph
from fleetgnn.store import TierBudgets, UnifiedStore

SECTION = "gather"


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
    return rows
