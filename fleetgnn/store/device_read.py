"""The store's feature read path on the engine's device: locate, account and assemble there.

:meth:`UnifiedStore.gather <fleetgnn.store.UnifiedStore.gather>` on a store built for a CUDA
device reads through :func:`gather_on_device`; on the CPU the host path (numpy bucketing) stays,
bit-identical and faster there. Both return the same rows and record the same counters.

=========  ==============================================  =====================================
tier       read (store on a device)                        ids crossing to the host
=========  ==============================================  =====================================
device     :class:`ShardedTensor` gather with the ids on   none (the shard is on the device;
           the device: the own shard, peers' through CUDA  peers' mapped through CUDA IPC)
           IPC (one-sided) or the two-sided exchange
host       ``index_select`` of the shared host tier into   the host tier's local rows (the host
           a pinned staging buffer, async copy on a copy   indexes its own memory)
           stream (:class:`~fleetgnn.distributed.transfer
           .Transfers`); the step's stream waits on its
           event
disk       the disk read, staged through a pinned buffer,  the disk tier's node IDs
           async copy as the host tier
=========  ==============================================  =====================================

One rank whose device shard holds every row (a world of one, a device budget over the whole
graph) skips locating and counting: its counters are the id count, and the gather reads each
id's shard row through the plan's ``rank_of`` in the same pass (``gather_rows(..., via=)``), so
the read synchronises with the host once (the ids' range check).

Otherwise locating the ids (tier, owner, local row) runs on the device from a copy of the
feature plan's ``rank_of`` (``V`` entries of the plan's ID dtype, made on the first read); one
``bincount`` of a per-row code (the owner rank on the device tier, ``N`` for the host tier,
``N + 1`` for disk) and one ``.tolist()`` give every counter (requests, bytes, messages, reads per
source), so a read synchronises with the host once for its counts and once per tier it reads
(``nonzero``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from fleetgnn.errors import GraphError
from fleetgnn.store.tiers import DEVICE, DISK, HOST, TierPlan

#: A :class:`~fleetgnn.store.UnifiedStore` (the store imports this module, not the reverse).
UnifiedStore = Any

__all__ = ["DeviceIndex", "gather_on_device", "record_counts"]


class DeviceIndex:
    """:meth:`TierPlan.locate` in torch on one device (same results, tensors on ``device``).

    Args:
        plan: The tier plan (features).
        reader: The reading rank (its routes, with a placement).
        device: Where the ids are and the lookups run.
    """

    def __init__(self, plan: TierPlan, reader: int, device: torch.device) -> None:
        self.device = torch.device(device)
        self.world_size = plan.world_size
        self.num_device, self.num_host = plan.num_device, plan.num_host
        self.rank_of = torch.from_numpy(np.array(plan.rank_of)).to(self.device)
        starts = plan.device_starts  # the block layout (a partition-aware plan), or None
        self.starts = None if starts is None else torch.from_numpy(np.array(starts)).to(device)
        routes = plan._routes(reader) if plan.placement is not None else None
        self.routes = (
            None if routes is None else tuple(torch.from_numpy(r).to(device) for r in routes)
        )
        #: One rank whose shard holds every row: a node's shard row is its hot rank.
        self.all_local = (
            plan.world_size == 1
            and plan.num_device == plan.num_rows
            and self.routes is None
            and (starts is None or int(starts[0]) == 0)
        )

    def locate(self, ids: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(tier, owner, local, code)`` of int64 ``ids`` on the device (:meth:`TierPlan.locate`).

        ``code``: the owner rank on the device tier, ``N`` on the host tier, ``N + 1`` on disk.
        """
        n, nd = self.world_size, self.num_device
        k = self.rank_of[ids].long()
        dev = k < nd
        host = ~dev & (k < nd + self.num_host)
        tier = torch.where(dev, DEVICE, torch.where(host, HOST, DISK))
        if self.starts is None:
            part, row = k % n, torch.div(k, n, rounding_mode="floor")
        else:  # rank r's block of hot ranks [starts[r], starts[r + 1])
            part = (torch.searchsorted(self.starts, k, right=True) - 1).clamp_(0, n - 1)
            row = k - self.starts[part]
        if self.routes is None:
            owner, dev_local = part, row
        else:
            source, offset = self.routes
            owner, dev_local = source[part], offset[part] + row
        owner = torch.where(dev, owner, -1)
        local = torch.where(dev, dev_local, torch.where(host, k - nd, ids))
        code = torch.where(dev, owner, n - 1 + tier)  # host tier -> N, disk -> N + 1
        return tier, owner, local, code


def record_counts(
    store: UnifiedStore,
    counts: list[int],
    nbytes: int,
    kind: str,
    *,
    disk_bytes: int | None = None,
) -> None:
    """Record one read's counters from the ``bincount`` of :meth:`DeviceIndex.locate`'s code.

    The same requests, bytes, messages and reads per source as the host path records
    (``disk_bytes``: bytes per disk-tier entry where they differ from ``nbytes``).
    """
    n = store.world_size
    per_owner = np.asarray(counts[:n], dtype=np.int64)
    store._reads[kind][0] += per_owner
    store._reads[kind][1] += per_owner * nbytes
    here = store._host_of == store._host_of[store.rank]
    mine = np.zeros(n, dtype=bool)
    mine[store.rank] = True
    groups = {"local": mine, "peer": here & ~mine, "net": ~here}
    sources = {s: int(per_owner[m].sum()) for s, m in groups.items()}
    sources["host"], sources["disk"] = int(counts[n]), int(counts[n + 1])
    links = {"local": "local", "peer": "peer", "net": "net", "host": "h2d", "disk": "disk"}
    for source, count in sources.items():
        store._hits[kind][source] += count
        if count == 0:
            continue
        link = links[source]
        msgs = int((per_owner[groups[source]] > 0).sum()) if link in ("peer", "net") else 1
        size = disk_bytes if source == "disk" and disk_bytes is not None else nbytes
        store.meter.record(link, count * size, messages=msgs)
        store._bytes[kind][link] += count * size


def device_ids(
    name: str, ids: object, device: torch.device, num_nodes: int, *, checked: bool = False
) -> Tensor:
    """``ids`` as int64 on ``device``, checked with one min/max (no copy of the ids to the host).

    ``checked=True``: the range is known valid (no min/max, no sync); the shape and dtype are
    still checked.
    """
    t = ids if isinstance(ids, Tensor) else torch.as_tensor(ids)
    if t.dim() != 1 or t.is_floating_point() or t.dtype == torch.bool or t.is_complex():
        raise GraphError(
            f"'{name}' must be a 1-D integer tensor of node IDs (got {t.dtype} with shape "
            f"{tuple(t.shape)})"
        )
    t = t.detach().to(device, torch.int64)
    if t.numel() and not checked:
        lo, hi = torch.stack([t.min(), t.max()]).tolist()
        if lo < 0 or hi >= num_nodes:
            raise GraphError(
                f"'{name}' holds node ID {lo if lo < 0 else hi}, outside the valid interval "
                f"[0, {num_nodes}); pass global IDs of this graph"
            )
    return t


def gather_on_device(store: UnifiedStore, ids: object, *, checked: bool = False) -> Tensor:
    """Feature rows of ``ids`` on ``store.device`` (see the module docstring).

    Host- and disk-tier rows are copied while the device tier is read; every rank calls the
    device tier's gather once (two-sided mode is collective), as the host path does.
    ``checked``: the ids' range is known valid (:meth:`UnifiedStore.gather`).
    """
    x, fp = store.graph.x, store.plan.features
    if x is None or fp is None:
        raise GraphError("the graph has no node features 'x'; nothing to gather")
    dev = store.device
    idt = device_ids("ids", ids, dev, store.graph.num_nodes, checked=checked)
    dtype = store.x_dtype
    feat_device: Any = store._feat_device
    n, width = idt.numel(), int(x.shape[1])
    row_bytes, disk_bytes = store.row_bytes(), store.disk_row_bytes
    read = store._read_back  # stored rows (compact or not) as x's dtype, on the device
    if not n and feat_device is None:
        return torch.empty((0, width), dtype=dtype, device=dev)
    index = store._device_index()
    if index.all_local and feat_device is not None:
        # one rank, every row in its shard: no locating or counting on the device (no sync);
        # the node -> shard row lookup is read inside the gather (table[rank_of[ids]])
        record_counts(store, [n, 0, 0], row_bytes, "features")
        return read(feat_device.rows_via(index.rank_of, idt))
    tier, owner, local, code = index.locate(idt)
    counts = (
        torch.bincount(code, minlength=store.world_size + 2).tolist()
        if n
        else [0] * (store.world_size + 2)
    )
    record_counts(store, counts, row_bytes, "features", disk_bytes=disk_bytes)
    on_device = sum(counts[: store.world_size])
    if on_device == n and feat_device is not None:  # all hits (or nothing): no scatter
        return read(feat_device.gather(owner, local, checked=True).to(dev))  # located by the plan
    transfers = store._transfers
    pending = []  # issued before the device tier is read, so the copies overlap it
    if counts[-2]:
        sel = torch.nonzero(tier == HOST).squeeze(1)
        loaded = transfers.load(store._feat_host, local[sel].cpu(), key="host")
        pending.append((sel, loaded, True))
    if counts[-1]:
        sel = torch.nonzero(tier == DISK).squeeze(1)
        rows = store._disk_rows_read(idt[sel].cpu().numpy())  # read back on the host
        pending.append((sel, transfers.load(rows, key="disk"), False))
    if len(pending) == 1 and on_device == 0 and feat_device is None:
        _, p, stored = pending[0]  # one tier serves every row: no scatter
        return read(p.wait()) if stored else p.wait()
    out = torch.empty((n, width), dtype=dtype, device=dev)
    if feat_device is not None:
        sel = torch.nonzero(tier == DEVICE).squeeze(1)
        out[sel] = read(feat_device.gather(owner[sel], local[sel], checked=True).to(dev))
    for sel, p, stored in pending:
        out[sel] = read(p.wait()) if stored else p.wait()
    return out
