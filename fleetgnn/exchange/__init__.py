"""Distributed exchange of node rows between owners, shared by the fullgraph and split engines.

Three pieces, bottom up:

- :mod:`~fleetgnn.exchange.plan`: from a rank's destinations, its edges over GLOBAL source IDs and
  an owner (array or function), the local/remote edge split, the deduplicated need lists per
  owner (the halo), the send lists (one all-to-all of the need lists, or derived without
  communication), and the cut into ``K`` chunks (:class:`HaloPlan`).
- :mod:`~fleetgnn.exchange.pipeline`: :class:`ChunkPipeline`, one scheduler running the ``K``
  chunk all-to-alls, at most ``depth`` in flight, around local work, forward and transposed
  (backward), with timing (:class:`ExchangeTimes`) and volume accounting (:class:`HaloVolume`).
- :mod:`~fleetgnn.exchange.spmm`: :class:`HaloSpmm`, the pipelined weighted sum over local and
  exchanged rows with its pipelined backward, the kernel of the engines' aggregators.
- :mod:`~fleetgnn.exchange.transition`: HongTu's host-offload plan (transition sets, slots,
  deduplicated volumes, Eq. 4 cost and chunk reorganisation) of the ``offload`` engine.
"""

from fleetgnn.exchange.pipeline import ChunkPipeline, ExchangeTimes, HaloVolume
from fleetgnn.exchange.plan import (
    ExchangeLayout,
    HaloPlan,
    block_layout,
    build_exchange_layout,
    build_plan,
    exchange_need_lists,
    owner_function,
    range_owner,
    requests_from_edges,
    send_lists,
)
from fleetgnn.exchange.spmm import HaloSpmm
from fleetgnn.exchange.transition import (
    HONGTU_BANDWIDTHS,
    ChunkHop,
    TransitionPlan,
    Volumes,
    build_transition_plan,
    chunk_hop,
    chunk_rows,
    reorganize,
)

__all__ = [
    "HONGTU_BANDWIDTHS",
    "ChunkHop",
    "TransitionPlan",
    "Volumes",
    "build_transition_plan",
    "chunk_hop",
    "chunk_rows",
    "reorganize",
    "ChunkPipeline",
    "ExchangeLayout",
    "ExchangeTimes",
    "HaloPlan",
    "HaloSpmm",
    "HaloVolume",
    "block_layout",
    "build_exchange_layout",
    "build_plan",
    "exchange_need_lists",
    "owner_function",
    "range_owner",
    "requests_from_edges",
    "send_lists",
]
