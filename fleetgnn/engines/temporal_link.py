"""Temporal link prediction on the sampled engines: edge batches and evaluation at each edge's time.

A :class:`~fleetgnn.tasks.temporal_link.TemporalLinkPrediction` trains on the engines and modes
of :data:`TEMPORAL_ENGINES`; every other one refuses it in one line (:func:`temporal_refusal`):
a full graph has no "now", every node's embedding there is computed from every edge.

- Training (the one edge builder, :class:`~fleetgnn.engines.link.EdgeBatches`): a step's
  positives are training events ``(src, dst, t)`` dealt like the static task's
  (:class:`~fleetgnn.sampling.PositionLoader`); their negatives are the static task's keyed
  ones. The task gives the times, and the :class:`~fleetgnn.sampling.TemporalSampler`'s
  ``sample_from_edges`` seeds the distinct ``(node, time)`` pairs of the endpoints and
  negatives, each at its positive's time, and samples their disjoint subtrees (strict ``<``:
  no block holds an edge of a positive's time or later). A node seeded twice at one time is one
  seed: its subtree is a pure function of ``(key, node, time)``, so the copies would be equal.
- Evaluation (:func:`temporal_link_metrics`): each query (a positive, its negative pair and its
  ``K`` negative destinations) is embedded at the positive's time in chunks of queries, with
  the training fanouts and one fixed sampling key (``epoch=0, step=0``, stream
  :data:`EVAL_STREAM`), so a seed's subtree does not depend on the chunking or on how the
  queries are shared between ranks; the model runs in eval mode (no dropout). The task's metric
  sums are added over chunks (and ranks: ``reduce``). Every rank runs as many chunks as the
  largest share needs (a shorter share's last ones are empty), so a store whose reads are
  collective (the two-sided gather) is read the same number of times on every rank.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fleetgnn.engines.edges import block_aggregator
from fleetgnn.engines.link import EdgeBatches
from fleetgnn.sampling import TemporalSample, TemporalSampler, pair_seeds, timed_seeds
from fleetgnn.tasks.temporal_link import TemporalLinkPrediction

#: The sampler stream of evaluation (training streams are ranks, far below it).
EVAL_STREAM = 1 << 30
#: Evaluation queries embedded per chunk.
EVAL_CHUNK = 2048


class LinkTimeSeeds:
    """The training seeds of a temporal link task, for the planner's replay.

    A :class:`~fleetgnn.cost.workload.TemporalSeeds`: rank ``r`` of ``W``'s step is the
    :func:`~fleetgnn.sampling.pair_seeds` of its edge batch's pairs
    (:meth:`~fleetgnn.engines.link.EdgeBatches.pairs`: ``batch_size`` positives per rank, the
    run's ``seed``), the seeds the engines' temporal sampler samples.

    Args:
        task: The temporal link task (its time split's training graph is :attr:`graph`).
        seed: The run's seed (the edges' order per epoch).
    """

    kind = "link"

    def __init__(self, task: TemporalLinkPrediction, seed: int = 0) -> None:
        self.task, self.seed = task, int(seed)
        self.graph = task.split.train_graph
        self.strategy = task.strategy
        self._batches: dict[tuple[int, int, int], EdgeBatches] = {}

    @property
    def num_items(self) -> int:
        """Training positives."""
        return self.task.num_train_pairs()

    def _edges(self, batch_size: int, rank: int, world: int) -> EdgeBatches:
        key = (int(batch_size), int(rank), int(world))
        if key not in self._batches:
            self._batches[key] = EdgeBatches(
                self.task,
                None,  # seeds only: the replay samples them
                int(batch_size),
                rank=int(rank),
                world_size=int(world),
                seed=self.seed,
            )
        return self._batches[key]

    def num_steps(self, batch_size: int, world: int) -> int:
        """Steps per epoch (equal on every rank)."""
        return self._edges(batch_size, 0, world).num_batches

    def seeds(
        self, batch_size: int, rank: int, world: int, epoch: int, step: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rank ``rank``'s distinct ``(node, time)`` seeds of ``(epoch, step)``."""
        seeds, seed_time, _ = pair_seeds(*self._edges(batch_size, rank, world).pairs(epoch, step))
        return seeds, seed_time  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"LinkTimeSeeds(positives={self.num_items}, strategy={self.strategy!r})"


def embed_at(
    model: Any,
    sampler: TemporalSampler,
    features: Callable[[torch.Tensor], torch.Tensor],
    seeds: torch.Tensor,
    seed_time: torch.Tensor,
    *,
    dtype: torch.dtype,
    device: torch.device,
    on_sample: Callable[[TemporalSample], None] | None = None,
) -> torch.Tensor:
    """Output rows ``[len(seeds), D]`` of ``seeds`` at ``seed_time`` (evaluation's fixed key)."""
    sample = sampler.sample_from_nodes(seeds, seed_time=seed_time, stream=EVAL_STREAM)
    if on_sample is not None:
        on_sample(sample)
    aggs = [block_aggregator(b, dtype, device) for b in sample.blocks]
    return model(aggs, features(sample.blocks[0].src_ids))


@torch.no_grad()
def temporal_link_metrics(
    task: TemporalLinkPrediction,
    model: Any,
    sampler: TemporalSampler,
    features: Callable[[torch.Tensor], torch.Tensor],
    *,
    dtype: torch.dtype,
    device: torch.device,
    share: tuple[int, int] = (0, 1),
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
    chunk: int = EVAL_CHUNK,
    on_sample: Callable[[TemporalSample], None] | None = None,
) -> dict[str, float]:
    """Validation and test metrics, every query embedded at its positive's time.

    Args:
        task: The temporal link task.
        model: A link model (encoder layers and ``decoder``); put in eval mode, then back.
        sampler: The temporal sampler over the training graph.
        features: Input rows of node IDs (repeats allowed), on ``device``.
        dtype: The compute dtype.
        device: Where the model runs.
        share: ``(r, W)``: score part ``r`` of the queries (:meth:`LinkPrediction.eval_positions`);
            every part runs the largest part's number of chunks (the module docstring).
        reduce: Sums a tensor over ranks (``None``: one process). Collective when given.
        chunk: Queries embedded at once (bounds memory; the result does not depend on it).
        on_sample: Called with every evaluation sample (tests check their times).
    """
    was_training = model.training
    model.eval()
    sums: dict[str, torch.Tensor] = {}
    try:
        for s in ("val", "test"):
            pos, neg, nd, t = task.eval_queries(s, share)
            hist, ranks = task.query_sums(
                torch.zeros(0, dtype=dtype), torch.zeros(0, dtype=dtype), torch.zeros(0, 1)
            )
            # as many chunks on every rank (the largest share's): equal store reads per rank
            most = max(task.eval_positions(s, (r, share[1])).size for r in range(share[1]))
            for lo in range(0, int(most), chunk):
                hi = max(lo, min(int(t.size), lo + chunk))  # lo >= t.size: an empty chunk
                m, k = hi - lo, int(nd.shape[1])
                tt = torch.from_numpy(t[lo:hi])
                nodes = torch.from_numpy(
                    np.concatenate([pos[0, lo:hi], pos[1, lo:hi], neg[0, lo:hi], neg[1, lo:hi]])
                )
                nodes = torch.cat(
                    [nodes, torch.from_numpy(np.asarray(nd[lo:hi], np.int64)).reshape(-1)]
                )
                times = torch.cat([tt.repeat(4), tt.repeat_interleave(k)])
                seeds, seed_time, inv = timed_seeds(nodes, times)
                h = embed_at(
                    model,
                    sampler,
                    features,
                    seeds,
                    seed_time,
                    dtype=dtype,
                    device=device,
                    on_sample=on_sample,
                )
                inv = inv.to(h.device)
                rows = [h[inv[i * m : (i + 1) * m]] for i in range(4)]
                ps = model.decoder(rows[0], rows[1])
                ns = model.decoder(rows[2], rows[3])
                rn = model.decoder(rows[0].repeat_interleave(k, dim=0), h[inv[4 * m :]]).view(m, k)
                dh, dr = task.query_sums(ps, ns, rn)
                hist, ranks = hist + dh.cpu(), ranks + dr.cpu()
            sums[f"{s}_hist"], sums[f"{s}_rank"] = hist, ranks
    finally:
        model.train(was_training)
    if reduce is not None:
        sums = {key: reduce(v.to(device)).cpu() for key, v in sums.items()}
    return task.metrics_from_sums(sums)


def sampled_temporal_metrics(engine: Any) -> dict[str, float]:
    """:func:`temporal_link_metrics` of a sampled distributed engine; collective over ranks.

    Rank ``r`` of ``W`` embeds and scores share ``(r, W)`` of the queries with its replica of
    the model (the parameters are equal on every rank), reading input rows through the engine's
    ``_features`` (any node's, from the engine's store); the metric sums are all-reduced, so
    every rank returns the one-process result.

    ``engine``: a ``minibatch`` or ``split`` engine training a temporal link task (its
    ``task``, ``module``, ``sampler``, ``_features``, ``dtype``, ``device``, ``rank``,
    ``world_size``, ``comm`` and ``eval_chunk``).
    """
    return temporal_link_metrics(
        engine.task,
        engine.module,
        engine.sampler,
        engine._features,
        dtype=engine.dtype,
        device=engine.device,
        share=(engine.rank, engine.world_size),
        reduce=engine.comm.all_reduce_sum if engine.world_size > 1 else None,
        chunk=engine.eval_chunk,
    )
