"""AppendUnique: a hop's sources, the targets first, then each new neighbour once.

Two CPU ways to deduplicate, with identical results: a sort of the IDs, or arrays over the IDs'
range where that range is small next to the number of IDs (typed batches, small graphs); and a
torch way on the IDs' device (:func:`_append_unique_torch`). Tested equal in
``tests/sampling/test_neighbor.py``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from fleetgnn.errors import GraphError

__all__ = ["append_unique"]


def append_unique(targets: Tensor, neighbors: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Deduplicate ``targets`` followed by ``neighbors``, keeping targets first and in order.

    New nodes follow the targets in the order of their first appearance in ``neighbors``, so the
    result depends only on the inputs. Each ID's first position (a minimum over its positions)
    is marked and the marks are numbered in position order; the first positions come from
    arrays over the IDs' range where it is small next to ``n = T + K`` (linear), else from a
    sort (``O(n log n)``). CPU tensors go through numpy, others stay in torch; every way gives
    identical results.

    Args:
        targets: int64 ``[T]`` distinct node IDs (a block's destinations).
        neighbors: int64 ``[K]`` sampled neighbour IDs (any repeats).

    Returns:
        ``(unique_ids [U], local_nbr_index [K], dup_counts [U])``: ``unique_ids[:T] == targets``,
        ``unique_ids[local_nbr_index] == neighbors``, and ``dup_counts[u]`` is how many entries
        of ``neighbors`` equal ``unique_ids[u]`` (sums to ``K``).

    Raises:
        GraphError: If ``targets`` repeats an ID or an input is not a 1-D integer tensor.
    """
    for name, t in (("targets", targets), ("neighbors", neighbors)):
        if not isinstance(t, Tensor) or t.dim() != 1 or t.is_floating_point():
            raise GraphError(
                f"'{name}' must be a 1-D integer tensor (got {type(t).__name__} "
                f"{getattr(t, 'dtype', '')} with shape {tuple(getattr(t, 'shape', ()))})"
            )
    if targets.device.type == "cpu" and neighbors.device.type == "cpu":
        return _append_unique_numpy(targets, neighbors)
    return _append_unique_torch(targets, neighbors.to(targets.device))


def _duplicate_target_error(targets: Tensor, is_first: Tensor) -> GraphError:
    pos = int(torch.nonzero(~is_first[: targets.numel()].cpu())[0])
    return GraphError(
        f"'targets' must hold distinct node IDs (ID {int(targets[pos])} repeats at position "
        f"{pos}); deduplicate the seeds, e.g. with torch.unique"
    )


#: :func:`_append_unique_numpy` maps IDs through arrays over their range when the range is at
#: most this many times the IDs it dedups (measured, one thread: 0.4 ms against 2.8 ms for the
#: sort, 45k IDs over a range of 22.5k; 0.85 against 9.6 ms, 125k over 10k).
DENSE_RANGE_FACTOR = 4
#: The same for :func:`_append_unique_torch` on an accelerator, where filling an array over the
#: range is a memset at device bandwidth and the scatter replaces a radix sort of every ID (the
#: sort path's ``torch.unique``); its host syncs are as many either way (the range, the
#: distinct-targets check, the count of distinct IDs). Not yet timed on a GPU.
DENSE_RANGE_FACTOR_DEVICE = 64
#: Per device type, overriding :data:`DENSE_RANGE_FACTOR_DEVICE` for the torch path. The CPU:
#: never (products-like 0.05, fanouts 15,10,5, batch 1024, one thread: the torch sampler drew
#: 7.44 M edges/s with the arrays where they fit against 7.71 with the sort; numpy's path, 8.54
#: against 4.99, is the CPU's default).
DENSE_RANGE_FACTOR_TORCH: dict[str, int] = {"cpu": 0}


def _append_unique_dense(
    both: np.ndarray, num_targets: int, targets: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`_append_unique_numpy` through arrays over the IDs' range (no sort)."""
    n = both.size
    lo = int(both.min())
    rel = both - lo
    span = int(rel.max()) + 1
    pos = np.arange(n, dtype=np.int64)
    first = np.full(span, n, dtype=np.int64)
    np.minimum.at(first, rel, pos)  # first position of each ID
    is_first = first[rel] == pos
    if not is_first[:num_targets].all():
        raise _duplicate_target_error(targets, torch.from_numpy(is_first))
    unique_ids = both[is_first]
    rank_at = np.cumsum(is_first) - 1  # at a first position: the rank of its ID
    local = rank_at[first[rel[num_targets:]]]
    dup_counts = np.bincount(local, minlength=unique_ids.size)
    return torch.from_numpy(unique_ids), torch.from_numpy(local), torch.from_numpy(dup_counts)


def _append_unique_numpy(targets: Tensor, neighbors: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    num_targets = targets.numel()
    both = np.concatenate([targets.numpy(), neighbors.numpy()]).astype(np.int64, copy=False)
    n = both.size
    if n and int(both.max()) - int(both.min()) < DENSE_RANGE_FACTOR * n:
        return _append_unique_dense(both, num_targets, targets)
    perm = np.argsort(both)  # any sort: first positions come from a min-reduction below
    sorted_vals = both[perm]
    new_run = np.ones(n, dtype=bool)
    np.not_equal(sorted_vals[1:], sorted_vals[:-1], out=new_run[1:])
    first = np.minimum.reduceat(perm, np.flatnonzero(new_run)) if n else perm  # [U]
    is_first = np.zeros(n, dtype=bool)
    is_first[first] = True
    if not is_first[:num_targets].all():
        raise _duplicate_target_error(targets, torch.from_numpy(is_first))
    rank_at = np.cumsum(is_first) - 1  # position -> rank of its value if it is a first position
    local_sorted = rank_at[first][np.cumsum(new_run) - 1]  # rank of each sorted element's value
    local_all = np.empty(n, dtype=np.int64)
    local_all[perm] = local_sorted
    unique_ids = both[is_first]
    local = local_all[num_targets:]
    dup_counts = np.bincount(local, minlength=unique_ids.size)
    return torch.from_numpy(unique_ids), torch.from_numpy(local), torch.from_numpy(dup_counts)


def _append_unique_torch_dense(
    both: Tensor,
    num_targets: int,
    targets: Tensor,
    lo: int,
    span: int,
    check: bool = True,
    counts: bool = True,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """:func:`_append_unique_torch` through arrays over the IDs' range (no sort)."""
    n, dev = both.numel(), both.device
    rel = both - lo
    pos = torch.arange(n, dtype=torch.int64, device=dev)
    first = torch.full((span,), n, dtype=torch.int64, device=dev)
    first.scatter_reduce_(0, rel, pos, reduce="amin")  # first position of each ID
    is_first = first[rel] == pos
    if check and not bool(is_first[:num_targets].all()):
        raise _duplicate_target_error(targets, is_first)
    unique_ids = both[is_first]  # the one sync this path needs (the count of distinct IDs)
    rank_at = torch.cumsum(is_first, 0) - 1  # at a first position: the rank of its ID
    local = rank_at[first[rel[num_targets:]]]
    dup_counts = torch.bincount(local, minlength=unique_ids.numel()) if counts else None
    return unique_ids, local, dup_counts


def _append_unique_torch(
    targets: Tensor,
    neighbors: Tensor,
    *,
    num_nodes: int | None = None,
    distinct_targets: bool = False,
    counts: bool = True,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """:func:`append_unique` in torch on the IDs' device.

    ``num_nodes``: every ID is known to lie in ``[0, num_nodes)`` (a sampler's topology), so the
    arrays over the range need no pass for it (a host sync on a GPU). ``distinct_targets``: the
    targets are known distinct (a sampler's later hops: the previous hop's unique IDs), so the
    check, another sync, is skipped. ``counts=False``: no ``dup_counts`` (``None``; a sampler
    does not read them, and ``bincount`` finds its output's size with a sync on a GPU).
    """
    num_targets = targets.numel()
    both = torch.cat([targets.long(), neighbors.long()])
    n = both.numel()
    dev = both.device
    check = not distinct_targets
    factor = DENSE_RANGE_FACTOR_TORCH.get(dev.type, DENSE_RANGE_FACTOR_DEVICE)
    if n and factor > 0:
        if num_nodes is not None and num_nodes <= factor * n:
            return _append_unique_torch_dense(
                both, num_targets, targets, 0, num_nodes, check, counts
            )
        lo, hi = torch.stack(torch.aminmax(both)).tolist()
        if hi - lo < factor * n:
            return _append_unique_torch_dense(
                both, num_targets, targets, lo, hi - lo + 1, check, counts
            )
    uniq, inv = torch.unique(both, sorted=True, return_inverse=True)
    pos = torch.arange(n, dtype=torch.int64, device=dev)
    first = torch.full((uniq.numel(),), n, dtype=torch.int64, device=dev)
    first.scatter_reduce_(0, inv, pos, reduce="amin")  # first position of each value
    is_first = torch.zeros(n, dtype=torch.bool, device=dev)
    is_first[first] = True
    if check and not bool(is_first[:num_targets].all()):
        raise _duplicate_target_error(targets, is_first)
    rank = (torch.cumsum(is_first, 0) - 1)[first]  # [U] rank of each sorted value
    unique_ids = both[is_first]
    local = rank[inv[num_targets:]]
    dup_counts = torch.bincount(local, minlength=unique_ids.numel()) if counts else None
    return unique_ids, local, dup_counts
