"""Typed temporal neighbour sampling: per relation, a seed at time ``t`` sees edges before ``t``.

The typed counterpart of :class:`~fleetgnn.sampling.TemporalSampler`, over a
:class:`~fleetgnn.graph.hetero.HeteroGraph` with edge times (``graph.edge_time[r]``: every
relation's in-edges sorted by time within each destination's segment). Semantics, relation by
relation, as the homogeneous sampler's:

- **Candidates.** A node reached from a seed at time ``t`` may take, in relation ``r``, its
  in-edges of ``r`` with ``time < t`` (``inclusive=True``: ``<= t``): the first ``c_r`` of its
  segment, ``c_r`` found by :func:`~fleetgnn.sampling.temporal.bisect_counts` (the homogeneous
  sampler's binary search over every ragged segment at once).
- **Time is inherited.** Every node of a seed's subtree, at every hop and in every relation,
  uses the seed's ``t``.
- **Disjoint subtrees.** A node's identity within a batch is ``(seed index, node)``: each
  block's sources of type ``s`` are distinct pairs, destinations first; ``src_ids[s]`` holds
  their global IDs (one node may appear once per subtree that reached it), and
  :attr:`TypedTemporalSample.seed_index` gives, per block and node type, each source's seed.
- **Strategies.** ``"uniform"``: ``min(k, c_r)`` distinct candidates, drawn exactly as
  :class:`~fleetgnn.sampling.hetero.HeteroNeighborSampler` draws (its key per ``(seed, epoch,
  step, stream, hop, relation)``, the destination's global ID as row key, ``c_r`` as its degree),
  so with every time after every edge each subtree's sample equals the plain typed sampler's.
  ``"last"``: the last ``min(k, c_r)`` candidates (most recent; equal times: later in CSC order).
  Fanout ``-1`` takes every candidate, ``0`` none. A block lists a node's edges in CSC
  (oldest-first) order.

Seeds: global IDs of the target type (``seed_time`` ``[B]``), or per node type (seed index =
position in the concatenation in schema order); the same node may be a seed several times.
``seed_time=None`` takes each seed's ``graph.node_time`` of its type. One backend (host numpy
and torch CPU ops), as the typed sampler has; no edge exclusion (typed temporal link prediction
is not trained: :mod:`fleetgnn.train.setup` refuses it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph.hetero import HeteroGraph, Relation
from fleetgnn.sampling.base import NodeSample, Sampler
from fleetgnn.sampling.hetero import (
    HeteroBlock,
    HeteroNeighborSampler,
    group_sources,
    read_relation,
    sample_typed_edges,
)
from fleetgnn.sampling.neighbor import _check_key, _sample_offsets
from fleetgnn.sampling.temporal import STRATEGIES, Strategy, _as_times, _last_offsets, bisect_counts

__all__ = ["TypedTemporalSample", "TypedTemporalSampler"]


@dataclasses.dataclass(frozen=True, eq=False)
class TypedTemporalSample(NodeSample):
    """The typed blocks of one temporal mini-batch and the subtree every source belongs to.

    Attributes:
        blocks: ``num_layers`` :class:`HeteroBlock`s, input layer first (as
            :meth:`HeteroNeighborSampler.sample_from_nodes` returns them).
        seed_index: Per block, per node type, int64 ``[S_t]``: the seed (its position in the
            batch) whose subtree each source of type ``t`` belongs to.
        seed_time: int64 ``[B]``: the seeds' times.
    """

    blocks: tuple[HeteroBlock, ...]
    seed_index: tuple[dict[str, Tensor], ...]
    seed_time: Tensor

    def src_time(self, layer: int, ntype: str) -> Tensor:
        """int64 ``[S_t]``: the time every source of type ``ntype`` of ``blocks[layer]`` saw."""
        return self.seed_time[self.seed_index[layer][ntype]]

    def __repr__(self) -> str:
        return (
            f"TypedTemporalSample(num_seeds={self.seed_time.numel()}, blocks={list(self.blocks)})"
        )


class TypedTemporalSampler(Sampler):
    """Multi-layer typed temporal neighbour sampler (module docstring: the semantics).

    Fanouts and keys are :class:`HeteroNeighborSampler`'s: hop ``h`` of relation ``r`` draws with
    :meth:`key` ``(epoch, step, h, r's ID, stream)``, ``blocks[L - 1 - h]`` was sampled with
    ``fanouts[r][h]``.

    Args:
        graph: A typed graph with edge times (every relation's, :attr:`HeteroGraph.edge_time`).
        fanouts: One list for every relation, or one list per relation
            (:func:`~fleetgnn.sampling.hetero.relation_fanouts`).
        seed: Base seed (>= 0).
        strategy: ``"uniform"`` or ``"last"``.
        inclusive: Candidates are edges with ``time <= t`` instead of ``time < t``.

    Raises:
        GraphError: If ``graph`` is not typed or has no edge times.
        ConfigError: For bad fanouts, seed or strategy.
    """

    def __init__(
        self,
        graph: HeteroGraph,
        fanouts: Sequence[int] | Mapping[Relation | str, Sequence[int]],
        seed: int = 0,
        *,
        strategy: Strategy = "uniform",
        inclusive: bool = False,
    ) -> None:
        # the plain typed sampler checks the graph, fanouts and seed, and owns the keys
        self._plain = HeteroNeighborSampler(graph, fanouts, seed)
        if not graph.edge_time:
            raise GraphError(
                f"typed graph '{graph.name}' has no edge times: temporal sampling needs every "
                f"relation's edge_time (from_typed_edges(..., edge_time=...), or a typed dataset "
                f"prepared with times)"
            )
        if strategy not in STRATEGIES:
            raise ConfigError(
                f"'strategy' must be one of {', '.join(map(repr, STRATEGIES))} (got "
                f"{strategy!r}); 'last' takes the most recent candidates"
            )
        self.graph, self.schema = graph, graph.schema
        self.fanouts, self.seed = self._plain.fanouts, self._plain.seed
        self.strategy: Strategy = strategy
        self.inclusive = bool(inclusive)

    @property
    def num_layers(self) -> int:
        """Number of blocks each sample returns."""
        return self._plain.num_layers

    def key(self, epoch: int, step: int, hop: int, relation: int, stream: int = 0) -> int:
        """The 64-bit key relation ``relation`` (its ID) draws with at hop ``hop`` (the plain's)."""
        return self._plain.key(epoch, step, hop, relation, stream)

    def count_before(self, rel: Relation, d_local: np.ndarray, t: Tensor) -> np.ndarray:
        """int64 ``[len(d_local)]``: in-edges of ``rel`` before ``t[i]`` of each destination.

        ``d_local``: type-local IDs of ``rel``'s destination type; ``t``: int64 times.
        """
        indptr = self.graph.csc[rel][0]
        times = self.graph.edge_time[rel]
        start = np.asarray(indptr[d_local], dtype=np.int64)
        deg = np.asarray(indptr[d_local + 1], dtype=np.int64) - start

        def read(pos: Tensor) -> Tensor:
            return torch.from_numpy(np.asarray(times[pos.numpy()], dtype=np.int64))

        cnt = bisect_counts(read, torch.from_numpy(start), torch.from_numpy(deg), t, self.inclusive)
        return cnt.numpy()

    def sample_from_nodes(
        self,
        seeds: Tensor | Mapping[str, Tensor],
        *,
        seed_time: Tensor | Mapping[str, Tensor] | None = None,
        epoch: int = 0,
        step: int = 0,
        stream: int = 0,
        exclude: None = None,
    ) -> TypedTemporalSample:
        """Sample the typed blocks of one temporal mini-batch.

        Args:
            seeds: int64 ``[B]`` global IDs of target-type nodes, or per node type its global
                IDs (repeats allowed: one subtree each).
            seed_time: Integer times aligned with ``seeds`` (a tensor, or per node type);
                ``None``: the seeds' ``graph.node_time``.
            epoch: Epoch index (>= 0), part of the random key.
            step: Step index (>= 0), part of the random key.
            stream: Extra key, e.g. the data-parallel rank (>= 0).
            exclude: ``None`` (no edge exclusion: the module docstring).

        Returns:
            A :class:`TypedTemporalSample`; ``blocks[-1].dst_ids(t)`` are type ``t``'s seeds.

        Raises:
            GraphError: A seed that is not a node of its type, times of the wrong shape, or
                ``seed_time=None`` for a type without node times.
            ConfigError: ``exclude`` given.
        """
        if exclude is not None:
            raise ConfigError(
                "TypedTemporalSampler excludes no edges (got exclude=); its seeds see only the "
                "edges before their times"
            )
        key = [_check_key(n, v) for n, v in (("epoch", epoch), ("step", step), ("stream", stream))]
        s, n = self.schema, max(self.schema.total_nodes, 1)
        per_type = self._seeds(seeds)
        times = self._times(per_type, seed_time)
        b = sum(int(v.numel()) for v in per_type.values())
        if b * n >= 1 << 63:
            raise GraphError(
                f"a batch of {b} seeds over {n} nodes overflows the int64 keys (seed index, "
                f"node) of disjoint sampling; use smaller batches"
            )
        dst: dict[str, Tensor] = {}
        first = 0
        for t in s.node_types:  # seed index: position in the concatenation, schema order
            ids = per_type.get(t, torch.zeros(0, dtype=torch.int64))
            owner = torch.arange(first, first + ids.numel(), dtype=torch.int64)
            dst[t] = owner * n + ids
            first += ids.numel()
        blocks: list[HeteroBlock] = []
        index: list[dict[str, Tensor]] = []
        for hop in range(self.num_layers):
            keys = {r: self.key(key[0], key[1], hop, i, key[2]) for i, r in enumerate(s.relations)}
            block, owners = self._hop(
                dst, {r: f[hop] for r, f in self.fanouts.items()}, keys, times
            )
            blocks.append(block)
            index.append(owners)
            dst = {t: owners[t] * n + block.src_ids[t] for t in s.node_types}
        blocks.reverse()
        index.reverse()
        return TypedTemporalSample(blocks=tuple(blocks), seed_index=tuple(index), seed_time=times)

    #: A typed link batch's blocks at the pairs' ``time`` (:meth:`Sampler.sample_from_edges`);
    #: ``time=None`` takes the ends' node times; ``exclude_targets`` must be ``False``.
    sample_from_edges = sample_typed_edges

    def _seeds(self, seeds: Tensor | Mapping[str, Tensor]) -> dict[str, Tensor]:
        s = self.schema
        if not isinstance(seeds, Mapping):
            if s.target is None:
                raise GraphError("the typed graph names no target type; give seeds per node type")
            seeds = {s.target: seeds}
        out = {}
        for t, ids in seeds.items():
            if t not in s.node_types:
                raise GraphError(f"seeds given for unknown node type {t!r}; {list(s.node_types)}")
            out[t] = self._plain._check_seeds(t, ids)
        return out

    def _times(
        self, seeds: Mapping[str, Tensor], seed_time: Tensor | Mapping[str, Tensor] | None
    ) -> Tensor:
        """int64 ``[B]``: the seeds' times in batch order (node types in schema order)."""
        order = [t for t in self.schema.node_types if t in seeds]
        if seed_time is None:
            parts = []
            for t in order:
                if t not in self.graph.node_time:
                    raise GraphError(
                        f"seed_time not given and node type {t!r} of '{self.graph.name}' has "
                        f"no node times; pass seed_time= (one integer time per seed)"
                    )
                lo = self.schema.type_range(t)[0]
                local = (seeds[t] - lo).numpy()
                parts.append(torch.from_numpy(np.asarray(self.graph.node_time[t][local])))
        elif isinstance(seed_time, Mapping):
            missing = [t for t in order if t not in seed_time]
            if missing:
                raise GraphError(f"seed_time gives no times for the seeds of types {missing}")
            parts = [
                _as_times(f"seed_time[{t!r}]", seed_time[t], seeds[t].numel(), torch.device("cpu"))
                for t in order
            ]
        else:
            if len(order) != 1:
                raise GraphError("seeds of several node types need seed_time per node type")
            parts = [
                _as_times("seed_time", seed_time, seeds[order[0]].numel(), torch.device("cpu"))
            ]
        if not parts:
            return torch.zeros(0, dtype=torch.int64)
        return torch.cat([p.to(torch.int64) for p in parts])

    def _hop(
        self,
        dst: Mapping[str, Tensor],
        fanouts: Mapping[Relation, int],
        keys: Mapping[Relation, int],
        times: Tensor,
    ) -> tuple[HeteroBlock, dict[str, Tensor]]:
        """One hop from the destination keys ``dst`` (``seed index * N + global ID`` per type)."""
        s = self.schema
        n = max(s.total_nodes, 1)
        nbrs: dict[Relation, np.ndarray] = {}
        indptrs: dict[Relation, Tensor] = {}
        for rel in s.relations:
            src_t, _, dst_t = rel
            dkeys = dst[dst_t].numpy()
            d_global, owner = dkeys % n, dkeys // n
            d_local = d_global - s.type_range(dst_t)[0]
            cnt = self.count_before(rel, d_local, times[torch.from_numpy(owner)])
            if self.strategy == "uniform":
                indptr_s, row, offsets = _sample_offsets(d_global, cnt, fanouts[rel], keys[rel])
            else:
                ptr, r, off = _last_offsets(torch.from_numpy(cnt), fanouts[rel])
                indptr_s, row, offsets = ptr.numpy(), r.numpy(), off.numpy()
            src_off = s.type_range(src_t)[0]
            nb = read_relation(self.graph, rel, d_local, row, offsets, src_off)
            nbrs[rel] = owner[row] * n + nb
            indptrs[rel] = torch.from_numpy(indptr_s)
        src_keys, edges = group_sources(s, dst, nbrs, indptrs)
        block = HeteroBlock(
            s,
            {t: v % n for t, v in src_keys.items()},
            {t: int(dst[t].numel()) for t in s.node_types},
            edges,
        )
        return block, {t: v // n for t, v in src_keys.items()}

    def __repr__(self) -> str:
        fan = {r[1]: list(f) for r, f in self.fanouts.items()}
        return (
            f"TypedTemporalSampler(fanouts={fan}, strategy={self.strategy!r}, "
            f"inclusive={self.inclusive}, seed={self.seed})"
        )
