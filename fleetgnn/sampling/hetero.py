"""Typed neighbour sampling: per-relation fanouts and :class:`HeteroBlock`, one per layer.

A typed mini-batch is a stack of :class:`HeteroBlock`s. Each holds, per node type, the layer's
source nodes (global IDs, the destinations of that type first) and, per relation
``(src_type, name, dst_type)``, the sampled edges in CSC over the destination type's rows with
local positions into the source type's rows:

=======================  =====================  ==============================================
field                    dtype / shape          meaning
=======================  =====================  ==============================================
``src_ids[t]``           int64 ``[S_t]``        global IDs of type ``t``'s sources; the first
                                                ``num_dst[t]`` are the destinations
``num_dst[t]``           int ``D_t``            destinations of type ``t`` (``D_t <= S_t``)
``edges[r]``             ``(indptr, indices)``  relation ``r = (s, name, d)``: int64
                                                ``[D_d + 1]`` offsets, int64 ``[E_r]`` positions
                                                in ``src_ids[s]``
=======================  =====================  ==============================================

Sampling follows the homogeneous :class:`~fleetgnn.sampling.NeighborSampler`: without
replacement (WholeGraph's Algorithm 1 on each destination's in-edges of a relation), keyed
randomness (hop ``h`` of relation ``r`` draws from the keyed hash with the key
``(seed, epoch, step, stream, h, r)`` and each destination's global ID, as the homogeneous
sampler draws), and :func:`~fleetgnn.sampling.append_unique` per source
type, the relations in schema order. Seeds are global IDs of the target type.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph.edge_split import reverse_of
from fleetgnn.graph.hetero import HeteroGraph, HeteroSchema, Relation
from fleetgnn.keyhash import base_key
from fleetgnn.sampling.base import EdgeSample, NodeSample, Sampler, check_pairs, edge_seeds, no_time
from fleetgnn.sampling.neighbor import (
    _SALT_SAMPLE,
    _check_fanout,
    _check_key,
    _sample_offsets,
    append_unique,
)

__all__ = [
    "HeteroBlock",
    "HeteroNeighborSampler",
    "full_hetero_block",
    "relation_fanouts",
    "typed_edge_keys",
]


@dataclasses.dataclass(frozen=True, eq=False)
class HeteroBlock:
    """One layer of a typed mini-batch (see the module docstring for the fields)."""

    schema: HeteroSchema
    src_ids: Mapping[str, Tensor]
    num_dst: Mapping[str, int]
    edges: Mapping[Relation, tuple[Tensor, Tensor]]

    def __post_init__(self) -> None:
        for t in self.schema.node_types:
            ids = self.src_ids.get(t)
            if not isinstance(ids, Tensor) or ids.dim() != 1 or ids.dtype != torch.int64:
                raise GraphError(f"HeteroBlock src_ids[{t!r}] must be a 1-D int64 tensor")
            if not 0 <= int(self.num_dst.get(t, -1)) <= ids.numel():
                raise GraphError(
                    f"HeteroBlock num_dst[{t!r}] must lie in [0, {ids.numel()}] (got "
                    f"{self.num_dst.get(t)})"
                )
        for rel, (indptr, _) in self.edges.items():
            if indptr.numel() != self.num_dst[rel[2]] + 1:
                raise GraphError(
                    f"HeteroBlock edges[{rel}]: indptr must have num_dst[{rel[2]!r}] + 1 = "
                    f"{self.num_dst[rel[2]] + 1} entries (got {indptr.numel()})"
                )

    def dst_ids(self, ntype: str) -> Tensor:
        """Global IDs of type ``ntype``'s destinations (a view)."""
        return self.src_ids[ntype][: self.num_dst[ntype]]

    @property
    def num_edges(self) -> int:
        """Edges of every relation together."""
        return int(sum(int(ix.numel()) for _, ix in self.edges.values()))

    def to(self, device: torch.device | str) -> HeteroBlock:
        """A copy with every tensor on ``device``."""
        return HeteroBlock(
            self.schema,
            {t: v.to(device) for t, v in self.src_ids.items()},
            dict(self.num_dst),
            {r: (p.to(device), ix.to(device)) for r, (p, ix) in self.edges.items()},
        )

    def __repr__(self) -> str:
        dst = {t: n for t, n in self.num_dst.items() if n}
        src = {t: int(v.numel()) for t, v in self.src_ids.items() if v.numel()}
        return f"HeteroBlock(num_dst={dst}, num_src={src}, num_edges={self.num_edges})"


def full_hetero_block(graph: HeteroGraph) -> HeteroBlock:
    """The whole typed graph as one block: every node a destination and a source, every edge.

    Used by full-graph training and evaluation (the same block for every layer).
    """
    s = graph.schema
    src_ids = {t: torch.arange(*s.type_range(t), dtype=torch.int64) for t in s.node_types}
    edges = {
        rel: (
            torch.from_numpy(np.array(graph.csc[rel][0], dtype=np.int64)),
            torch.from_numpy(np.asarray(graph.csc[rel][1]).astype(np.int64)),
        )
        for rel in s.relations
    }
    return HeteroBlock(s, src_ids, {t: s.count(t) for t in s.node_types}, edges)


def relation_fanouts(
    schema: HeteroSchema,
    fanouts: Sequence[int] | Mapping[Relation | str, Sequence[int]],
) -> dict[Relation, tuple[int, ...]]:
    """Per relation, its fanout per hop: one list for all relations, or one list per relation.

    A mapping is keyed by relation triples or by names unique in the schema, and must name every
    relation with lists of one length (``0`` samples no edge of that relation at that hop).

    Raises:
        ConfigError: For a missing or unknown relation, lists of different lengths or a bad
            fanout.
    """
    example = "e.g. fanouts=[15, 10] or {'cites': [15, 10], 'writes': [5, 5], ...}"
    if isinstance(fanouts, Mapping):
        out: dict[Relation, tuple[int, ...]] = {}
        for key, fs in fanouts.items():
            try:
                rel = schema.relations[schema.relation_index(key)]  # type: ignore[arg-type]
            except GraphError as e:
                raise ConfigError(f"'fanouts': {e}") from None
            out[rel] = _fanout_list(f"fanouts[{key!r}]", fs, example)
        missing = [r for r in schema.relations if r not in out]
        if missing:
            raise ConfigError(f"'fanouts' gives no fanouts for relations {missing}; {example}")
        if len({len(v) for v in out.values()}) != 1:
            lens = {r[1]: len(v) for r, v in out.items()}
            raise ConfigError(f"'fanouts' must give one length of list per relation (got {lens})")
        return {r: out[r] for r in schema.relations}
    one = _fanout_list("fanouts", fanouts, example)
    return {r: one for r in schema.relations}


def _fanout_list(name: str, fanouts: object, example: str) -> tuple[int, ...]:
    if isinstance(fanouts, (str, bytes)) or not isinstance(fanouts, Sequence) or not fanouts:
        raise ConfigError(
            f"'{name}' must be a non-empty list of ints per hop (got {fanouts!r}); {example}"
        )
    return tuple(_check_fanout(f"{name}[{i}]", f) for i, f in enumerate(fanouts))


def sample_typed_edges(
    sampler: Any,
    src: Tensor,
    dst: Tensor,
    neg: Tensor,
    *,
    time: Tensor | None = None,
    relation: Relation | None = None,
    exclude_targets: bool = False,
    epoch: int = 0,
    step: int = 0,
    stream: int = 0,
) -> EdgeSample:
    """A typed sampler's :meth:`~fleetgnn.sampling.Sampler.sample_from_edges` (its method).

    The pairs are type-local IDs of ``relation``'s end types; the seeds are the distinct
    endpoints per end type (sources: the source type's; destinations and negatives: the
    destination type's; one set when the two types are one), with ``time`` distinct
    ``(node, time)`` pairs. The target edges are dropped from ``relation`` and from its
    reverse relation (:func:`~fleetgnn.graph.edge_split.reverse_of`).
    """
    schema = sampler.schema
    if relation is None or tuple(relation) not in schema.relations:
        raise GraphError(
            f"'relation' must name the pairs' relation, one of {list(schema.relations)} (got "
            f"{relation!r})"
        )
    rel: Relation = tuple(relation)  # type: ignore[assignment]
    src, dst, neg, times = check_pairs(src, dst, neg, time)
    s_t, _, d_t = rel
    gs = src + schema.type_range(s_t)[0]
    gd, gn = dst + schema.type_range(d_t)[0], neg + schema.type_range(d_t)[0]
    seeds: dict[str, Tensor] = {}
    seed_time: dict[str, Tensor] | None = None if times is None else {}
    if s_t == d_t:
        ids, at, (ps, pd, pn) = edge_seeds([gs, gd, gn], times)
        seeds[s_t] = ids
        if seed_time is not None and at is not None:
            seed_time[s_t] = at
    else:
        ids, at, (ps,) = edge_seeds([gs], None if times is None else times[:1])
        ids_d, at_d, (pd, pn) = edge_seeds([gd, gn], None if times is None else times[1:])
        seeds[s_t], seeds[d_t] = ids, ids_d
        if seed_time is not None and at is not None and at_d is not None:
            seed_time[s_t], seed_time[d_t] = at, at_d
    exclude = None
    if exclude_targets:
        edges = {rel: (gs, gd)}
        reverse = reverse_of(sampler.graph, rel)
        if reverse is not None:
            edges[reverse] = (gd, gs)
        exclude = typed_edge_keys(schema.total_nodes, edges)
    sample = sampler.sample_from_nodes(
        seeds, seed_time=seed_time, epoch=epoch, step=step, stream=stream, exclude=exclude
    )
    return EdgeSample(seeds, ps, pd, pn, sample)


class HeteroNeighborSampler(Sampler):
    """Multi-layer typed uniform neighbour sampler producing one :class:`HeteroBlock` per layer.

    Hop ``h`` samples, for every relation ``r = (s, name, d)``, ``fanouts[r][h]`` in-edges of
    each destination of type ``d`` without replacement (``-1``: all), then adds the new sources
    of each type after that type's destinations (:func:`~fleetgnn.sampling.append_unique`). As
    in :class:`~fleetgnn.sampling.NeighborSampler`, fanouts are listed from the seeds outwards
    and the blocks returned from the input layer to the output layer.

    Args:
        graph: The typed graph (its relations' CSCs are read, never copied).
        fanouts: One list for every relation, or one list per relation (see
            :func:`relation_fanouts`).
        seed: Base seed (>= 0).

    Raises:
        ConfigError: For bad fanouts or seed.
        GraphError: If ``graph`` is not a typed graph.
    """

    def __init__(
        self,
        graph: HeteroGraph,
        fanouts: Sequence[int] | Mapping[Relation | str, Sequence[int]],
        seed: int = 0,
    ) -> None:
        if not isinstance(graph, HeteroGraph):
            raise GraphError(f"'graph' must be a HeteroGraph (got {type(graph).__name__})")
        self.graph = graph
        self.schema = graph.schema
        self.fanouts = relation_fanouts(graph.schema, fanouts)
        self.seed = _check_key("seed", seed)
        self._offsets = {t: self.schema.type_range(t)[0] for t in self.schema.node_types}

    @property
    def num_layers(self) -> int:
        """Number of blocks each sample returns."""
        return len(next(iter(self.fanouts.values())))

    def key(self, epoch: int, step: int, hop: int, relation: int, stream: int = 0) -> int:
        """The 64-bit key relation ``relation`` (its ID) draws with at hop ``hop``."""
        return base_key(_SALT_SAMPLE, self.seed, epoch, step, stream, hop, relation)

    def sample_from_nodes(
        self,
        seeds: Tensor | Mapping[str, Tensor],
        *,
        seed_time: None = None,
        epoch: int = 0,
        step: int = 0,
        stream: int = 0,
        exclude: Mapping[Relation, Tensor] | None = None,
    ) -> NodeSample:
        """Sample the typed blocks of one mini-batch.

        Args:
            seeds: int64 ``[B]`` distinct global IDs of target-type nodes, or per node type
                its distinct global IDs (a typed link batch's endpoints of both types).
            seed_time: ``None`` (this sampler has no time: :class:`TypedTemporalSampler` has).
            epoch: Epoch index (>= 0), part of the random key.
            step: Step index (>= 0), part of the random key.
            stream: Extra key, e.g. the data-parallel rank (>= 0).
            exclude: Per relation, sorted keys ``dst * N + src`` (global IDs, ``N`` every
                type's nodes; :func:`typed_edge_keys`) of edges dropped from every hop's
                sampled edges after the draws (a link batch's target edges), so the other
                edges' draws do not change.

        Returns:
            A :class:`NodeSample` of ``num_layers`` blocks, input layer first; the last block's
            destinations are the seeds, and ``blocks[i].dst_ids(t) == blocks[i + 1].src_ids[t]``
            for every type.

        Raises:
            GraphError: If a seed is not a node of its type or repeats, or ``seed_time`` is
                given.
        """
        no_time(self, seed_time)
        key = [_check_key(n, v) for n, v in (("epoch", epoch), ("step", step), ("stream", stream))]
        s = self.schema
        empty = torch.zeros(0, dtype=torch.int64)
        dst = {t: empty for t in s.node_types}
        if isinstance(seeds, Mapping):
            for t, ids in seeds.items():
                dst[t] = self._check_seeds(t, ids)
        elif s.target is None:
            raise GraphError("the typed graph names no target type; give seeds per node type")
        else:
            dst[s.target] = self._check_seeds(s.target, seeds, "target type")
        blocks = []
        for hop in range(self.num_layers):
            fan = {r: f[hop] for r, f in self.fanouts.items()}
            keys = {r: self.key(key[0], key[1], hop, i, key[2]) for i, r in enumerate(s.relations)}
            block = self._hop(dst, fan, keys, exclude or {})
            blocks.append(block)
            dst = dict(block.src_ids)
        blocks.reverse()
        return NodeSample(tuple(blocks))

    #: A typed link batch's blocks (:meth:`Sampler.sample_from_edges`; no ``time``): the pairs
    #: are type-local IDs of ``relation``'s end types, the seeds global IDs per end type.
    sample_from_edges = sample_typed_edges

    def _check_seeds(self, ntype: str, seeds: Tensor, what: str = "node type") -> Tensor:
        s = self.schema
        if ntype not in s.node_types:
            raise GraphError(f"seeds given for unknown node type {ntype!r}; {list(s.node_types)}")
        ids = torch.as_tensor(seeds).to("cpu", torch.int64)
        lo, hi = s.type_range(ntype)
        if ids.dim() != 1 or (ids.numel() and (ids.min() < lo or ids.max() >= hi)):
            raise GraphError(f"'seeds' must be global IDs of the {what} {ntype!r}, in [{lo}, {hi})")
        return ids

    def _hop(
        self,
        dst: Mapping[str, Tensor],
        fanouts: Mapping[Relation, int],
        keys: Mapping[Relation, int],
        exclude: Mapping[Relation, Tensor],
    ) -> HeteroBlock:
        s, off = self.schema, self._offsets
        indptrs: dict[Relation, Tensor] = {}
        nbrs: dict[Relation, np.ndarray] = {}
        for rel in s.relations:
            dst_t = rel[2]
            d_global = dst[dst_t].numpy()
            indptr = self.graph.csc[rel][0]
            d_local = d_global - off[dst_t]
            deg = np.asarray(indptr[d_local + 1] - indptr[d_local], dtype=np.int64)
            indptr_s, row, offsets = _sample_offsets(d_global, deg, fanouts[rel], keys[rel])
            nb = read_relation(self.graph, rel, d_local, row, offsets, off[rel[0]])
            drop = exclude.get(rel)
            if drop is not None and drop.numel() and nb.size:  # after the draws
                n_all = s.total_nodes
                keep = ~np.isin(d_global[row] * n_all + nb, drop.numpy(), assume_unique=False)
                if not keep.all():
                    nb, row = nb[keep], row[keep]
                    indptr_s = np.zeros_like(indptr_s)
                    np.cumsum(np.bincount(row, minlength=d_global.size), out=indptr_s[1:])
            nbrs[rel] = nb
            indptrs[rel] = torch.from_numpy(indptr_s)
        src_ids, edges = group_sources(s, dst, nbrs, indptrs)
        num_dst = {t: int(dst[t].numel()) for t in s.node_types}
        return HeteroBlock(s, src_ids, num_dst, edges)

    def __repr__(self) -> str:
        fan = {r[1]: list(f) for r, f in self.fanouts.items()}
        return f"HeteroNeighborSampler(fanouts={fan}, seed={self.seed})"


def read_relation(
    graph: HeteroGraph,
    rel: Relation,
    d_local: np.ndarray,
    row: np.ndarray,
    offsets: np.ndarray,
    src_offset: int,
) -> np.ndarray:
    """int64 global source IDs of relation ``rel``'s in-edges picked by ``(row, offsets)``.

    Edge ``i`` is in-edge ``offsets[i]`` (within the segment) of destination ``d_local[row[i]]``
    (a type-local ID); ``src_offset`` is the source type's first global ID.
    """
    indptr, indices = graph.csc[rel]
    pos = np.asarray(indptr[d_local[row]], dtype=np.int64) + offsets
    return np.asarray(indices[pos], dtype=np.int64) + src_offset


def group_sources(
    schema: HeteroSchema,
    dst: Mapping[str, Tensor],
    nbrs: Mapping[Relation, np.ndarray],
    indptrs: Mapping[Relation, Tensor],
) -> tuple[dict[str, Tensor], dict[Relation, tuple[Tensor, Tensor]]]:
    """A typed block's sources and edges from its destinations and sampled neighbours.

    Per source type: its destinations, then the new neighbours in order of first appearance
    (:func:`~fleetgnn.sampling.append_unique`, relations in schema order). ``dst[t]`` are type
    ``t``'s distinct destination keys and ``nbrs[r]`` relation ``r``'s sampled source keys
    (grouped by destination as ``indptrs[r]``); a key is a global ID, or any other int64 naming
    a node within the batch (the temporal sampler's ``seed index * N + global ID``).

    Returns:
        ``(src_keys per type, edges per relation)``: ``edges[r] = (indptrs[r], positions of
        nbrs[r] in src_keys[r[0]])``, relations in schema order.
    """
    src_ids: dict[str, Tensor] = {}
    edges: dict[Relation, tuple[Tensor, Tensor]] = {}
    for t in schema.node_types:
        rels = [r for r in schema.relations if r[0] == t]
        cat = np.concatenate([nbrs[r] for r in rels]) if rels else np.zeros(0, np.int64)
        ids, local, _ = append_unique(dst[t], torch.from_numpy(cat))
        src_ids[t] = ids
        start = 0
        for r in rels:
            n = nbrs[r].size
            edges[r] = (indptrs[r], local[start : start + n])
            start += n
    return src_ids, {r: edges[r] for r in schema.relations}


def typed_edge_keys(
    num_nodes: int, edges: Mapping[Relation, tuple[Tensor, Tensor]]
) -> dict[Relation, Tensor]:
    """Per relation, sorted unique keys ``dst * N + src`` of its edges ``(src, dst)`` (global IDs).

    What :meth:`HeteroNeighborSampler.sample_from_nodes`'s ``exclude`` takes.
    """
    return {
        rel: torch.unique(d.cpu().long() * int(num_nodes) + s.cpu().long())
        for rel, (s, d) in edges.items()
    }
