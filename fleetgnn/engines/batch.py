"""One batch type for every sampled step: node or link task, homogeneous or typed graph.

GraphBolt's ``MiniBatch`` is the model: a builder samples a step into a :class:`MiniBatch`
(node seeds: the engines' ``prepare``; pairs: :class:`~fleetgnn.engines.link.EdgeBatches`,
from the sampler's :class:`~fleetgnn.sampling.EdgeSample`, :meth:`MiniBatch.from_edges`), and
the engine's ``prepare`` fills in what the step reads (``dataclasses.replace``: input rows,
labels, timings).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from fleetgnn.sampling import EdgeSample


@dataclasses.dataclass(frozen=True, repr=False)
class MiniBatch:
    """One rank's sampled step: seeds or pairs, blocks, input rows, targets and their cost.

    A homogeneous graph is the one-type case: where a typed graph has a dict keyed by node type
    (``seeds``, ``x``), a homogeneous one has the tensor.

    ================  ===================================================  ====================
    field             what                                                 set for, by
    ================  ===================================================  ====================
    ``blocks``        the sampled blocks, input layer first (``Block``;    all: the builder
                      typed: ``HeteroBlock``); the last one's
                      destinations are ``seeds``
    ``seeds``         int64 output nodes: a node task's seeds, a link      all: the builder
                      task's sorted distinct endpoints (temporal: the
                      nodes of distinct ``(node, time)`` seeds)
    ``global_count``  items of the step over every rank (nodes, or         all: the builder
                      positive edges): the loss's denominator
    ``src``, ``dst``  int64 ``[P]`` positions of the positives' ends in    link: edge builders
                      ``seeds`` (typed: in their end type's seeds)
    ``neg``           int64 ``[P, K]`` positions of their negatives        link: edge builders
    ``sample``        the sampler's ``NodeSample`` (temporal: each         link: edge builders
                      seed's time and each source's seed)
    ``splits``        this rank's share of each block (``LayerSplit``;     split engines
                      typed: ``TypedSplit``)
    ``x``             input rows of :attr:`hops` ``[0]``, on the device    every ``prepare``
    ``target``        labels of the rank's output rows, on the device      node task ``prepare``
    ``edge_attr``     each block's edge rows                               minibatch, edge
                                                                           features
    ``t_sample``,     seconds sampling and reading rows (host clock)       every ``prepare``
    ``t_gather``
    ``traffic``       bytes the store served per link kind                 every ``prepare``
    ``counters``      split quality and input rows per store source        split (homogeneous)
    ================  ===================================================  ====================
    """

    blocks: list[Any]
    seeds: Any  # torch.Tensor, or dict[str, torch.Tensor] per node type
    global_count: int
    src: torch.Tensor | None = None
    dst: torch.Tensor | None = None
    neg: torch.Tensor | None = None
    sample: Any = None
    splits: list[Any] | None = None
    x: Any = None  # torch.Tensor, or dict[str, torch.Tensor] per node type
    target: torch.Tensor | None = None
    edge_attr: list[torch.Tensor] | None = None
    t_sample: float = 0.0
    t_gather: float = 0.0
    traffic: dict[str, int] = dataclasses.field(default_factory=dict)
    counters: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_edges(cls, sample: EdgeSample, global_count: int) -> MiniBatch:
        """The link batch of a sampled :class:`~fleetgnn.sampling.EdgeSample`."""
        return cls(
            list(sample.blocks),
            sample.seeds,
            global_count,
            sample.src,
            sample.dst,
            sample.neg,
            sample=sample.sample,
        )

    @property
    def hops(self) -> list[Any]:
        """What this rank runs each layer on: its ``splits`` (split engines), else ``blocks``."""
        return self.blocks if self.splits is None else self.splits

    def __repr__(self) -> str:
        kind = "node" if self.src is None else f"link, {int(self.src.numel())} positives"
        return f"MiniBatch({kind}, layers={len(self.blocks)}, global_count={self.global_count})"
