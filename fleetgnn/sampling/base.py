"""One sampler protocol for every graph: ``sample_from_nodes`` and ``sample_from_edges``.

PyG's ``BaseSampler`` is the model: one sampler serves a node task and a link task through two
entry points, and a typed graph through the same two (seeds as a dict per node type). Every
sampler of this package implements :class:`Sampler`:

=========================  ===========  ====================================  ===============
class                      graph        times (``seed_time``, ``time``)       blocks
=========================  ===========  ====================================  ===============
``NeighborSampler``        homogeneous  none: pass ``None``                   ``Block``
``TemporalSampler``        homogeneous  edge times: required                  ``Block``
``HeteroNeighborSampler``  typed        none: pass ``None``                   ``HeteroBlock``
``TypedTemporalSampler``   typed        edge times: ``seed_time=None`` reads  ``HeteroBlock``
                                        the seeds' node times
=========================  ===========  ====================================  ===============

(All four are exported by :mod:`fleetgnn.sampling`.)

- :meth:`Sampler.sample_from_nodes` samples the blocks of seed nodes (typed: a tensor of
  target-type IDs or a dict per node type; temporal: each seed at its ``seed_time``) into a
  :class:`NodeSample`.
- :meth:`Sampler.sample_from_edges` samples the blocks of a link batch: positives
  ``(src, dst)`` and their negative destinations ``neg``. Their endpoints are deduplicated into
  seeds (:func:`edge_seeds`: sorted distinct IDs; with times, distinct ``(node, time)`` pairs,
  every endpoint at its positive's time), sampled with :meth:`~Sampler.sample_from_nodes`, and
  the pairs come back as positions in those seeds (:class:`EdgeSample`).

Every draw is keyed by ``(seed, epoch, step, stream)`` and the nodes' IDs (each sampler's
``key``), so both entry points give the same blocks for the same seeds and keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from fleetgnn.errors import GraphError

__all__ = [
    "EdgeSample",
    "NodeSample",
    "Sampler",
    "edge_keys",
    "edge_seeds",
    "pair_seeds",
    "timed_seeds",
]

Seeds = Tensor | Mapping[str, Tensor]


@dataclasses.dataclass(frozen=True, eq=False)
class NodeSample:
    """The blocks of one mini-batch's seeds (what :meth:`Sampler.sample_from_nodes` returns).

    Attributes:
        blocks: ``num_layers`` blocks from the input layer to the output layer (``Block``;
            typed: ``HeteroBlock``); the last one's destinations are the seeds.
        seed_index: Temporal samplers: per block, the seed (its position in the batch) whose
            disjoint subtree each source belongs to (typed: per node type); else ``None``.
        seed_time: Temporal samplers: int64 ``[B]``, the seeds' times; else ``None``.
    """

    blocks: tuple[Any, ...]
    seed_index: Any = None
    seed_time: Tensor | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(blocks={list(self.blocks)})"


@dataclasses.dataclass(frozen=True, eq=False)
class EdgeSample:
    """A sampled link batch (what :meth:`Sampler.sample_from_edges` returns).

    Attributes:
        seeds: int64 sampled seeds: the sorted distinct endpoints of the positives and
            negatives (temporal: the nodes of the distinct ``(node, time)`` seeds, sorted by
            time then node); typed: a dict per end type of global IDs.
        src: int64 ``[P]`` positions of the positives' sources in ``seeds`` (typed: in the
            source type's seeds).
        dst: int64 ``[P]`` positions of their destinations (typed: in the destination type's).
        neg: int64 ``[P, K]`` positions of their negatives (as ``dst``).
        sample: The :class:`NodeSample` of ``seeds`` (with times: their ``seed_time``).
    """

    seeds: Any  # torch.Tensor, or dict[str, torch.Tensor] per node type
    src: Tensor
    dst: Tensor
    neg: Tensor
    sample: NodeSample

    @property
    def blocks(self) -> tuple[Any, ...]:
        """The sampled blocks, input layer first (:attr:`NodeSample.blocks`)."""
        return self.sample.blocks

    def __repr__(self) -> str:
        return f"EdgeSample(positives={int(self.src.numel())}, blocks={list(self.blocks)})"


@runtime_checkable
class Sampler(Protocol):
    """A multi-layer neighbour sampler (module docstring: which class serves which graph)."""

    @property
    def num_layers(self) -> int:
        """Number of blocks each sample returns."""
        ...

    def sample_from_nodes(
        self,
        seeds: Seeds,
        *,
        seed_time: Seeds | None = None,
        epoch: int = 0,
        step: int = 0,
        stream: int = 0,
        exclude: Any = None,
    ) -> NodeSample:
        """Sample the blocks of seed nodes.

        Args:
            seeds: int64 ``[B]`` global IDs of the output nodes (typed: of the target type,
                or a dict per node type). Distinct, except for temporal samplers (the same
                node at two times is two seeds).
            seed_time: Temporal samplers: integer ``[B]`` times of the seeds (typed: also a
                dict per node type; ``None`` reads the graph's node times). Others: ``None``.
            epoch: Epoch index (>= 0), part of the random key.
            step: Step index (>= 0), part of the random key.
            stream: Extra key, e.g. the data-parallel rank (>= 0).
            exclude: Sorted keys of edges dropped from every hop after the draws (homogeneous:
                :func:`~fleetgnn.sampling.edge_keys`; typed: per relation,
                :func:`~fleetgnn.sampling.hetero.typed_edge_keys`); ``None``: none.
        """
        ...

    def sample_from_edges(
        self,
        src: Tensor,
        dst: Tensor,
        neg: Tensor,
        *,
        time: Tensor | None = None,
        relation: tuple[str, str, str] | None = None,
        exclude_targets: bool = False,
        epoch: int = 0,
        step: int = 0,
        stream: int = 0,
    ) -> EdgeSample:
        """Sample the blocks of a link batch: its endpoints as seeds, the pairs as positions.

        Args:
            src: int64 ``[P]`` the positives' sources (typed: type-local IDs of the
                relation's source type, as PyG's typed edge input).
            dst: int64 ``[P]`` their destinations (typed: of the destination type).
            neg: int64 ``[P, K]`` negative destinations of each positive.
            time: Temporal samplers: int64 ``[P]`` the positives' times, every endpoint and
                negative sampled at its positive's time. Others: ``None``.
            relation: Typed samplers: the relation of the pairs. Homogeneous: ``None``.
            exclude_targets: Drop the positives' edges and their reverses (typed: in the
                relation and its reverse relation) from every hop's blocks.
            epoch: Epoch index (>= 0), part of the random key.
            step: Step index (>= 0), part of the random key.
            stream: Extra key, e.g. the data-parallel rank (>= 0).
        """
        ...


def timed_seeds(nodes: Tensor, times: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Distinct ``(node, time)`` seeds: ``(seeds, seed_time, inverse)``, sorted by time, node.

    ``seeds[inverse] == nodes`` and ``seed_time[inverse] == times``.
    """
    pairs, inverse = torch.unique(torch.stack([times, nodes]), dim=1, return_inverse=True)
    return pairs[1].contiguous(), pairs[0].contiguous(), inverse


def edge_seeds(
    parts: Sequence[Tensor], times: Sequence[Tensor] | None = None
) -> tuple[Tensor, Tensor | None, list[Tensor]]:
    """The distinct seeds of ``parts`` and every part's positions among them.

    Without ``times``: the sorted distinct IDs of all parts. With ``times`` (one tensor per
    part, of its shape): the distinct ``(node, time)`` pairs (:func:`timed_seeds`).

    Returns:
        ``(seeds, seed_time or None, positions)``: ``positions[i]`` has ``parts[i]``'s shape
        and ``seeds[positions[i]] == parts[i]``.
    """
    nodes = torch.cat([p.reshape(-1) for p in parts])
    if times is None:
        seeds = torch.unique(nodes)
        return seeds, None, [torch.searchsorted(seeds, p) for p in parts]
    seeds, seed_time, inv = timed_seeds(nodes, torch.cat([t.reshape(-1) for t in times]))
    out, start = [], 0
    for p in parts:
        out.append(inv[start : start + p.numel()].view(p.shape))
        start += p.numel()
    return seeds, seed_time, out


def check_pairs(
    src: Tensor, dst: Tensor, neg: Tensor, time: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, list[Tensor] | None]:
    """Validated int64 pairs, and the times of ``[src, dst, neg]`` (``None`` without ``time``).

    Raises:
        GraphError: For pairs of different lengths, ``neg`` not ``[P, K]`` or ``time`` not
            ``[P]`` integers.
    """
    src, dst, neg = (torch.as_tensor(v).to(torch.int64) for v in (src, dst, neg))
    p = int(src.numel())
    if src.dim() != 1 or dst.shape != src.shape or neg.dim() != 2 or neg.shape[0] != p:
        raise GraphError(
            f"sample_from_edges takes src [P], dst [P] and neg [P, K] (got shapes "
            f"{tuple(src.shape)}, {tuple(dst.shape)}, {tuple(neg.shape)}); pass neg with one "
            f"row per positive, e.g. neg.view(P, -1)"
        )
    if time is None:
        return src, dst, neg, None
    time = torch.as_tensor(time)
    if time.shape != src.shape or time.is_floating_point() or time.dtype == torch.bool:
        raise GraphError(
            f"'time' must be integer times [P] = [{p}] of the positives (got dtype {time.dtype}, "
            f"shape {tuple(time.shape)})"
        )
    t = time.to(torch.int64)
    return src, dst, neg, [t, t, t.unsqueeze(1).expand_as(neg)]


def pair_seeds(
    src: Tensor, dst: Tensor, neg: Tensor, time: Tensor | None = None
) -> tuple[Tensor, Tensor | None, list[Tensor]]:
    """The seeds of a homogeneous link batch and the positions of ``[src, dst, neg]`` in them.

    :func:`edge_seeds` of the endpoints, each at its positive's ``time`` when given (what
    :meth:`Sampler.sample_from_edges` samples; the planner's replay takes them alone).
    """
    src, dst, neg, times = check_pairs(src, dst, neg, time)
    return edge_seeds([src, dst, neg], times)


def edge_keys(src: Tensor, dst: Tensor, num_nodes: int, *, reverse: bool = True) -> Tensor:
    """Sorted unique keys ``dst * N + src`` of edges ``src -> dst`` (and ``dst -> src``).

    What a homogeneous sampler's ``sample_from_nodes`` takes as ``exclude``: a link batch's
    target pairs and their reverses, so neither carries a message in the batch's own blocks.
    """
    src, dst = src.cpu().long(), dst.cpu().long()
    keys = dst * int(num_nodes) + src
    if reverse:
        keys = torch.cat([keys, src * int(num_nodes) + dst])
    return torch.unique(keys)


def sample_edges(
    sampler: Sampler,
    src: Tensor,
    dst: Tensor,
    neg: Tensor,
    *,
    time: Tensor | None = None,
    relation: object = None,
    exclude_targets: bool = False,
    epoch: int = 0,
    step: int = 0,
    stream: int = 0,
) -> EdgeSample:
    """A homogeneous sampler's :meth:`Sampler.sample_from_edges` (its method).

    The seeds are the distinct endpoints (:func:`~fleetgnn.sampling.base.edge_seeds`; with
    ``time``, distinct ``(node, time)`` pairs), the target edges' keys :func:`edge_keys`.
    """
    if relation is not None:  # the keys below name global IDs of one node type
        raise GraphError(
            f"a homogeneous graph has one relation: pass relation=None (got {relation!r})"
        )
    seeds, seed_time, (s, d, n) = pair_seeds(src, dst, neg, time)
    num_nodes = sampler.topology.num_nodes  # type: ignore[attr-defined]
    exclude = edge_keys(src, dst, num_nodes) if exclude_targets else None
    sample = sampler.sample_from_nodes(
        seeds, seed_time=seed_time, epoch=epoch, step=step, stream=stream, exclude=exclude
    )
    return EdgeSample(seeds, s, d, n, sample)


def no_time(sampler: object, seed_time: object, what: str = "seed_time") -> None:
    """Raise :class:`GraphError` if a sampler without time is given times."""
    if seed_time is not None:
        raise GraphError(
            f"{type(sampler).__name__} samples without time (got {what}); use "
            f"TemporalSampler or TypedTemporalSampler to sample seeds at their times"
        )
