"""Pre-sampling (XGNN/GNNLab): a few sampled batches that rank nodes and edges by their reads.

The ``minibatch`` engine's ``store.placement=presample`` places the rows the batches read most
on the fastest tiers, and the planner's replay predicts the same placement; both draw the
batches here, so the two cannot drift apart. The batches are keyed like training's but on a
stream of their own (the run seed + 1, world size 1): deterministic and identical on every
rank, so every rank derives the same placement without communicating.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from fleetgnn.graph.csc import Graph
from fleetgnn.sampling.block import Block
from fleetgnn.sampling.loader import SeedLoader
from fleetgnn.sampling.neighbor import GraphTopology, NeighborSampler
from fleetgnn.store.hotness import HotnessRanking, hotness_order

#: Batches a pre-sampled ranking draws.
PRESAMPLE_BATCHES = 8


def presampled_blocks(
    graph: Graph,
    seeds: torch.Tensor,
    batch_size: int,
    fanouts: Sequence[int],
    seed: int,
    *,
    with_edge_ids: bool = False,
) -> Callable[[int], list[Block]]:
    """A function giving pre-sampled batch ``i``'s blocks.

    Seeds dealt from ``seeds`` in batches of ``batch_size``, sampled with ``fanouts`` on the
    run ``seed``'s pre-sampling stream (edge IDs kept if asked; the draws are the same).
    """
    loader = SeedLoader(seeds, batch_size, seed=seed + 1)
    sampler = NeighborSampler(
        GraphTopology(graph), list(fanouts), seed=seed + 1, with_edge_ids=with_edge_ids
    )

    def blocks(i: int) -> list[Block]:
        batch = loader.batch(0, i % loader.num_batches)
        return list(sampler.sample_from_nodes(batch, step=i).blocks)

    return blocks


def presample_hotness(
    graph: Graph,
    seeds: torch.Tensor,
    batch_size: int,
    fanouts: Sequence[int],
    seed: int,
    batches: int = PRESAMPLE_BATCHES,
) -> HotnessRanking:
    """Nodes ranked by how often ``batches`` pre-sampled batches read their input rows."""
    blocks = presampled_blocks(graph, seeds, batch_size, fanouts, seed)

    def sampled(i: int) -> np.ndarray:
        return blocks(i)[0].src_ids.cpu().numpy()

    return hotness_order(graph, "presample", sampler_fn=sampled, k=batches)


def presample_edge_counts(
    graph: Graph,
    seeds: torch.Tensor,
    batch_size: int,
    fanouts: Sequence[int],
    seed: int,
    batches: int = PRESAMPLE_BATCHES,
) -> np.ndarray:
    """Reads of each edge (int64 ``[E]``) over the batches :func:`presample_hotness` draws."""
    blocks = presampled_blocks(graph, seeds, batch_size, fanouts, seed, with_edge_ids=True)
    counts = np.zeros(graph.num_edges, np.int64)
    for i in range(batches):
        for block in blocks(i):
            ids, c = np.unique(block.edge_ids.cpu().numpy(), return_counts=True)
            counts[ids] += c
    return counts
