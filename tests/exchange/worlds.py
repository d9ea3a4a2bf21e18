"""Scenarios with NON-contiguous ownership and one spawned gloo world per world size, shared by
test_pipeline and test_spmm (processes are the expensive part): each rank builds its layout from
a scenario, exchanges, aggregates and backpropagates every (K, depth) case and returns raw
results; the tests compare them with single-process truths computed from the same scenario.

Scenarios (all deterministic in ``(name, W, seed)``):

- ``graph``: a multigraph (self loops, duplicate edges, a hub, isolated nodes) whose nodes are
  owned by a random owner ARRAY; every rank computes its nodes from all of their in-edges
  (``row_ids == dst_ids``, sorted but not contiguous).
- ``empty``: the same graph with the last rank owning nothing.
- ``block``: a sampled-block-like bipartite hop (destinations a prefix of the sources) split by a
  hash owner FUNCTION of the global IDs; local rows are the owned sources in block order
  (unsorted global IDs), send lists derivable without communication.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import torch

from fleetgnn.distributed.testing import run_world
from fleetgnn.exchange import (
    ExchangeLayout,
    HaloSpmm,
    block_layout,
    build_exchange_layout,
    build_plan,
    exchange_need_lists,
    requests_from_edges,
    send_lists,
)
from fleetgnn.ops import Adjacency, gspmm
from fleetgnn.sampling import Block

CASES = [(k, d) for k in (1, 3) for d in (0, 1, 2)]
SCENARIOS = ("graph", "empty", "block")
F = (3, 2)  # trailing feature shape of the exchanged rows
ROW_BYTES = 3 * 2 * 8  # float64
SEED = 11


def hash_owner(world_size: int):
    """Hash ownership of global IDs (a function, not an array; not contiguous)."""
    return lambda u: (np.asarray(u, dtype=np.int64) * 7919 + 13) % world_size


@dataclasses.dataclass
class Scenario:
    """The whole problem, known to every process (what the single-process truth uses).

    ``indptr``/``indices`` are the CSC over all ``num_dst`` destinations with sources in
    ``[0, num_src)`` (positions of ``ids``); ``dst_owner`` is the rank computing each destination.
    """

    name: str
    world_size: int
    ids: np.ndarray  # [S] global ID of every source position
    num_dst: int
    indptr: np.ndarray
    indices: np.ndarray
    owner: object  # array over global IDs or function
    dst_owner: np.ndarray  # [num_dst]
    x: torch.Tensor  # [S, 3, 2]
    w: torch.Tensor  # [E, 3]
    up: torch.Tensor  # [num_dst, 3, 2] upstream gradient

    def owner_of(self, gids: np.ndarray) -> np.ndarray:
        """Owner rank of global IDs."""
        if callable(self.owner):
            return np.asarray(self.owner(gids))
        return np.asarray(self.owner)[gids]

    def rank_view(self, rank: int) -> dict:
        """Positions of the rank's destinations, rows and edges in the whole problem."""
        dst = np.flatnonzero(self.dst_owner == rank)
        starts, counts = self.indptr[dst], np.diff(self.indptr)[dst]
        eids = np.concatenate(
            [np.arange(s, s + c) for s, c in zip(starts, counts)] + [np.zeros(0, np.int64)]
        ).astype(np.int64)
        rows = np.flatnonzero(self.owner_of(self.ids) == rank)
        return {"dst": dst, "rows": rows, "eids": eids}

    def layout(self, rank: int) -> ExchangeLayout:
        """The rank's layout, through the public builders."""
        if self.name == "block":
            block = Block(
                indptr=torch.from_numpy(self.indptr),
                indices=torch.from_numpy(self.indices),
                src_ids=torch.from_numpy(self.ids),
                num_dst=self.num_dst,
            )
            return block_layout(block, self.owner, rank=rank, world_size=self.world_size)
        v = self.rank_view(rank)
        ptr = np.concatenate([[0], np.cumsum(np.diff(self.indptr)[v["dst"]])]).astype(np.int64)
        return build_exchange_layout(
            self.ids[v["dst"]],
            ptr,
            self.ids[self.indices[v["eids"]]],
            self.owner,
            rank=rank,
            world_size=self.world_size,
        )

    def edge_lists(self) -> tuple[np.ndarray, np.ndarray]:
        """Every edge's global source and the rank computing its destination."""
        dst_of_edge = np.repeat(np.arange(self.num_dst), np.diff(self.indptr))
        return self.ids[self.indices], self.dst_owner[dst_of_edge]

    def truth(self) -> dict:
        """Single-process weighted sum and its gradients (x, w) for upstream ``up``."""
        adj = Adjacency(
            torch.from_numpy(self.indptr), torch.from_numpy(self.indices), int(self.ids.size)
        )
        out = {}
        for weighted in (False, True):
            x = self.x.clone().requires_grad_(True)
            w = self.w.clone().requires_grad_(True) if weighted else None
            y = gspmm(adj, x, "sum", w)
            y.backward(self.up)
            out[weighted] = (y.detach(), x.grad, None if w is None else w.grad)
        return out


def _multigraph(n: int, e: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    isolated = 4
    src = np.concatenate([rng.integers(0, n - isolated, e - e // 5), np.full(e // 5, 3)])
    dst = rng.integers(0, n - isolated, e)
    src[:4], dst[:4] = np.arange(4), np.arange(4)  # self loops
    src[4:8], dst[4:8] = 5, 6  # a duplicate edge, 4 times
    order = np.argsort(dst, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    return indptr, src[order].astype(np.int64)


def scenario(name: str, world_size: int, seed: int = SEED) -> Scenario:
    """Build scenario ``name`` for ``world_size`` ranks (deterministic)."""
    rng = np.random.default_rng([seed, world_size, SCENARIOS.index(name)])
    if name in ("graph", "empty"):
        n = 40
        indptr, indices = _multigraph(n, 170, rng)
        hi = world_size - 1 if name == "empty" and world_size > 1 else world_size
        owner = rng.integers(0, hi, n).astype(np.int64)
        ids, num_dst, dst_owner = np.arange(n, dtype=np.int64), n, owner
    else:
        s, num_dst, e = 30, 12, 70
        ids = rng.permutation(100)[:s].astype(np.int64)  # global IDs, unsorted
        dst = np.sort(rng.integers(0, num_dst - 2, e))  # the last 2 destinations get no edge
        indptr = np.zeros(num_dst + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=num_dst), out=indptr[1:])
        indices = rng.integers(0, s, e).astype(np.int64)
        indices[:3] = indices[3]  # duplicate sources into one destination
        owner = hash_owner(world_size)
        dst_owner = owner(ids[:num_dst])
    e_all = int(indptr[-1])
    return Scenario(
        name=name,
        world_size=world_size,
        ids=ids,
        num_dst=num_dst,
        indptr=indptr,
        indices=indices,
        owner=owner,
        dst_owner=np.asarray(dst_owner, dtype=np.int64),
        x=torch.from_numpy(rng.standard_normal((ids.size, *F))),
        w=torch.from_numpy(rng.standard_normal((e_all, F[0]))),
        up=torch.from_numpy(rng.standard_normal((num_dst, *F))),
    )


# ---------------------------------------------------------------------------------- rank body
def _peer(delta: dict) -> tuple[int, int, int]:
    return delta["peer"]["bytes"], delta["peer"]["messages"], delta["local"]["bytes"]


def _rank_scenario(comm, sc: Scenario) -> dict:
    rank, w = comm.rank, comm.world_size
    lay = sc.layout(rank)
    view = sc.rank_view(rank)
    before = comm.meter.snapshot()
    send_rows, send_counts = exchange_need_lists(lay, comm)
    need_traffic = _peer(comm.meter.delta(before))
    src_all, dst_owner_all = sc.edge_lists()
    derived = send_lists(
        lay, *requests_from_edges(src_all, dst_owner_all, sc.owner, rank=rank, world_size=w)
    )
    x, wts = sc.x[view["rows"]], sc.w[view["eids"]]
    up = sc.up[view["dst"]]
    out = {
        "layout": lay,
        "view": view,
        "send": (send_rows, send_counts),
        "derived": derived,
        "need_traffic": need_traffic,
        "cases": {},
    }
    for k, depth in CASES:
        plan = build_plan(lay, send_rows, send_counts, k, comm)
        spmm = HaloSpmm(lay, plan, comm, depth=depth)
        before = comm.meter.snapshot()
        halo = spmm.halo_rows(x)
        gather_traffic = _peer(comm.meter.delta(before))
        case = {
            "plan": plan,
            "halo": halo,
            "gather_traffic": gather_traffic,
            "gather_exchanges": spmm.times.exchanges,
            "runs": {},
        }
        for overlap in (True, False):
            for weighted in (False, True):
                spmm.times.reset()
                xg = x.clone().requires_grad_(True)
                wg = wts.clone().requires_grad_(True) if weighted else None
                before = comm.meter.snapshot()
                y = spmm.sum(xg, wg, overlap_backward=overlap)
                fwd = _peer(comm.meter.delta(before))
                y.backward(up)
                both = _peer(comm.meter.delta(before))
                t = spmm.times
                case["runs"][(overlap, weighted)] = {
                    "y": y.detach(),
                    "gx": xg.grad,
                    "gw": None if wg is None else wg.grad,
                    "fwd_traffic": fwd,
                    "traffic": both,
                    "exchanges": t.exchanges,
                    "backward_exchanges": t.backward_exchanges,
                    "dedup_bytes": t.dedup_bytes,
                    "mgg_bytes": t.mgg_bytes,
                    "hidden": t.hidden_fraction,
                }
        out["cases"][(k, depth)] = case
    return out


def _rank_body(comm) -> dict:
    return {name: _rank_scenario(comm, scenario(name, comm.world_size)) for name in SCENARIOS}


@functools.cache
def world(ws: int) -> list[dict]:
    """Every rank's results for world size ``ws`` (one gloo world per size and session)."""
    return run_world(_rank_body, ws)
