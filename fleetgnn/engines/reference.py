"""The ``reference`` engine: single-process training, the ground truth for every other engine.

Two modes over the same model objects:

- ``full``: one step per epoch over the whole graph (every node's full in-neighbourhood); the loss
  is the mean cross-entropy over all training nodes.
- ``minibatch``: the training nodes are shuffled by ``(seed, epoch)`` and cut into batches;
  each step samples blocks with :class:`~fleetgnn.sampling.NeighborSampler` (randomness keyed
  by ``(seed, epoch, step)``), gathers the input rows and trains on the batch's mean loss. A
  link task's batches are training edges instead (:class:`~fleetgnn.engines.link.EdgeBatches`);
  a temporal link task's are timed edges sampled at their times with a
  :class:`~fleetgnn.sampling.TemporalSampler`, and its evaluation embeds every query at its
  time (:mod:`fleetgnn.engines.temporal_link`). A temporal node task's seeds are sampled at
  their node times, and its evaluation embeds every split node at its node time
  (:mod:`fleetgnn.engines.temporal_node`).

Dropout masks are keyed by ``(seed, global step, layer, node ID, feature)`` where the global step
is ``epoch * steps_per_epoch + step``, so a resumed run draws exactly the masks of an
uninterrupted one. Evaluation in mini-batch mode runs the model layer by layer over all nodes with
full neighbourhoods (no sampling noise), streaming chunks of destinations through per-layer
scratch files (:func:`~fleetgnn.engines.inference.streaming_metrics`); in full mode it is one
full-graph forward pass whose logits go to the same metric sink
(:class:`~fleetgnn.engines.metric_sums.MetricSums`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fleetgnn.config import ReferenceEngineConfig
from fleetgnn.engines.base import EngineBase, StepCallback, StepStats, run_steps
from fleetgnn.engines.chunks import Chunking
from fleetgnn.engines.common import (
    HeldBytes,
    LossFn,
    check_fanouts,
    node_features,
    node_labels,
    one_process_setup,
    process_memory,
    require_trainable,
    seed_loader,
    setup_model,
)
from fleetgnn.engines.edges import EdgeRows, block_aggregator
from fleetgnn.engines.inference import streaming_metrics
from fleetgnn.engines.link import (
    EdgeBatches,
    check_link_model,
    edge_batch_loss,
    full_graph_link_loss,
    is_temporal,
    setup_task,
)
from fleetgnn.engines.metric_sums import MetricSums
from fleetgnn.engines.step import Prepared, StepLoss, run_step
from fleetgnn.engines.temporal_link import temporal_link_metrics
from fleetgnn.engines.temporal_node import (
    check_node_times,
    is_temporal_node,
    node_blocks,
    temporal_node_metrics,
    temporal_node_rows,
)
from fleetgnn.graph import Graph
from fleetgnn.nn import LocalAggregator
from fleetgnn.sampling import (
    GraphTopology,
    NeighborSampler,
    TemporalSampler,
    full_neighbor_block,
)
from fleetgnn.tasks import Task


class ReferenceEngine(EngineBase):
    """Single-process full-graph or mini-batch training (CPU or one GPU).

    Args:
        model: A layer-wise model (see :mod:`fleetgnn.nn.protocol`); moved to the config's
            device and dtype.
        graph: The dataset (arrays may be memory maps; features are read into memory).
        ctx: Unused (the reference engine is single-process); accepted so every engine has one
            constructor signature.
        config: A :class:`~fleetgnn.config.ReferenceEngineConfig`.
        optimizer: Over ``model``'s parameters (``None``: Adam, lr 0.01).
        loss: Per-node loss ``loss(logits, target) -> [B]`` (``None``: cross-entropy; for a
            link task, the task's pair loss).
        task: What to train (``None``: node classification). A
            :class:`~fleetgnn.tasks.LinkPrediction` trains on its split's message-passing
            graph, in ``full`` mode on every training edge, in ``minibatch`` mode on edge
            batches (:mod:`fleetgnn.engines.link`). A
            :class:`~fleetgnn.tasks.TemporalNodeClassification` (``minibatch`` mode) samples
            every seed at its node time.
    """

    name = "reference"
    world_size = 1
    rank = 0
    comm = None

    def __init__(
        self,
        model: torch.nn.Module,
        graph: Graph,
        ctx: Any = None,
        config: ReferenceEngineConfig | None = None,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        loss: LossFn | None = None,
        task: Task | None = None,
    ) -> None:
        config = one_process_setup(self, config)
        graph, loss = setup_task(self, config.mode, task, graph, loss)
        require_trainable(graph, self.task)
        self.graph = graph
        self.x = node_features(graph, self.dtype, config.feature_norm, config.feature_dtype).to(
            self.device
        )
        #: The labels, masks and training nodes the task reads (none for link prediction).
        self.labels = node_labels(self.task, graph, self.device)
        self.y, self.masks = self.labels.y, self.labels.masks
        self.model = self.module = setup_model(self, model, optimizer, loss, broadcast=False)
        if self.link:
            check_link_model(self.model)
        #: The graph's edge features by edge ID, when the model reads them (``None``: not).
        self.edge_rows = EdgeRows.of(
            self.model, graph, self.dtype, self.device, config.edge_feature_dtype
        )
        self.topology = GraphTopology(graph)
        self.train_ids = self.labels.train  # lo = 0: the rows are the node IDs
        if self.mode == "minibatch":
            check_fanouts(config.fanouts, self.model)
            self.loader = seed_loader(
                self.task, graph, config.batch_size, seed=self.seed, shuffle=True
            )
            self.sampler = NeighborSampler(
                self.topology,
                list(config.fanouts),
                seed=self.seed,
                with_edge_ids=self.edge_rows is not None,
            )
            if is_temporal_node(self.task):  # every seed sampled at its node time
                check_node_times(self.task, graph)  # type: ignore[arg-type]
            if is_temporal_node(self.task) or is_temporal(self.task):  # link: the pairs' times
                self.sampler = TemporalSampler(
                    self.topology,
                    list(config.fanouts),
                    seed=self.seed,
                    strategy=self.task.strategy,  # type: ignore[attr-defined]
                    with_edge_ids=self.edge_rows is not None,
                )
            if self.link:
                task = self.task
                self.edges = EdgeBatches(task, self.sampler, config.batch_size, seed=self.seed)
        self._full_agg: LocalAggregator | None = None
        self._memory: dict[str, int] = {}
        #: How mini-batch-mode evaluation cuts the nodes into chunks (bounds its memory).
        self.chunking = Chunking()

    # ------------------------------------------------------------------ helpers
    @property
    def full_aggregator(self) -> LocalAggregator:
        """The whole graph as one aggregator (built once)."""
        if self._full_agg is None:
            self._full_agg = LocalAggregator.from_graph(
                self.graph,
                dtype=self.dtype,
                device=self.device,
                edge_attr=None  # the edge rows as stored (store.edge_feature_dtype)
                if self.edge_rows is None
                else self.edge_rows.rows(torch.arange(self.graph.num_edges)),
            )
        return self._full_agg

    def _local(self, block: Any) -> LocalAggregator:
        # sampler blocks are valid by construction; skip the per-edge check
        return block_aggregator(block, self.dtype, self.device, self.edge_rows)

    def steps_per_epoch(self) -> int:
        """One step per epoch in full mode; the number of batches in mini-batch mode."""
        if self.mode == "full":
            return 1
        return self.edges.num_batches if self.link else self.loader.num_batches

    def _global_step(self, epoch: int, step: int) -> int:
        return epoch * self.steps_per_epoch() + step

    # ------------------------------------------------------------------ training
    def run_epoch(
        self, epoch: int, start_step: int = 0, on_step: StepCallback | None = None
    ) -> list[StepStats]:
        """Run steps ``start_step..`` of ``epoch``; see :class:`~fleetgnn.engines.base.Engine`."""
        self.model.train()
        return run_steps(self, epoch, start_step, on_step)

    def batch(self, epoch: int, step: int) -> tuple[list[Any], torch.Tensor, torch.Tensor, float]:
        """Aggregators, input features and seeds of one step, plus the sampling time."""
        t0 = self.clock()
        if self.mode == "full":
            aggs = [self.full_aggregator] * self.num_layers
            return aggs, self.x, self.train_ids.to(self.device), 0.0
        seeds = self.loader.batch(epoch, step)
        blocks = node_blocks(self.sampler, self.task, seeds, epoch, step)
        aggs = [self._local(b) for b in blocks]
        t_sample = self.clock() - t0
        x = self.x[blocks[0].src_ids.to(self.device)]
        return aggs, x, seeds.to(self.device), t_sample

    def train_step(self, epoch: int, step: int) -> StepStats:
        """One optimisation step (:func:`~fleetgnn.engines.step.train_step`; no gradient sync)."""
        if self.link and self.mode == "minibatch":
            return self._edge_step(epoch, step)
        t_start = self.clock()
        aggs, x, seeds, t_sample = self.batch(epoch, step)
        t_gather = self.clock() - t_start - t_sample

        def forward() -> StepLoss:
            logits = self.model(aggs, x, step=self._global_step(epoch, step))
            if self.link:  # full mode: one step per epoch, negatives keyed by the epoch
                task = self.task
                return full_graph_link_loss(self.model, task, logits, self.loss, epoch)
            if self.mode == "full":
                logits = logits[seeds]
            return StepLoss.of(self.loss, logits, self.y[seeds], int(seeds.numel()))

        prepared = Prepared(
            t_sample,
            t_gather,
            inline=t_sample + t_gather,
            traffic={"local": int(x.numel() * x.element_size())},
        )
        return run_step(self, forward, prepared=prepared)

    def _edge_step(self, epoch: int, step: int) -> StepStats:
        """One step on a batch of training edges (:class:`~fleetgnn.engines.link.EdgeBatches`)."""
        t0 = self.clock()
        batch = self.edges.batch(epoch, step)
        t_sample = self.clock() - t0
        x = self.x[batch.blocks[0].src_ids.to(self.device)]
        t_gather = self.clock() - t0 - t_sample
        aggs = [self._local(b) for b in batch.blocks]

        def forward() -> StepLoss:
            h = self.model(aggs, x, step=self._global_step(epoch, step))
            return edge_batch_loss(self.model, self.task, h, batch, self.loss)  # type: ignore[arg-type]

        prepared = Prepared(
            t_sample,
            t_gather,
            inline=t_sample + t_gather,
            traffic={"local": int(x.numel() * x.element_size())},
        )
        return run_step(self, forward, prepared=prepared)

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def infer(self, chunk_size: int = 65536) -> torch.Tensor:
        """Logits of every node by layer-wise full-neighbour inference (eval mode, no dropout).

        In memory: every layer's ``[N, width]`` output is one tensor (the plain ground truth;
        :meth:`evaluate` streams instead in mini-batch mode). A temporal node task's rows are
        every node's at its node time, from sampled blocks
        (:func:`~fleetgnn.engines.temporal_node.temporal_node_rows`).
        """
        if is_temporal_node(self.task):
            n = self.graph.num_nodes
            out: list[torch.Tensor] = []
            temporal_node_rows(
                self.model,
                self.sampler,  # type: ignore[arg-type]
                self.task,  # type: ignore[arg-type]
                lambda ids: self.x[ids.to(self.device)],
                np.arange(n, dtype=np.int64),
                lambda ids, rows: out.append(rows),
                dtype=self.dtype,
                device=self.device,
                edges=self.edge_rows,
                chunk=chunk_size,
            )
            return torch.cat(out) if out else self.x.new_zeros(0, 0)
        self.model.eval()
        try:
            if self.mode == "full":
                return self.model([self.full_aggregator] * self.num_layers, self.x)
            h = self.x
            n = self.graph.num_nodes
            for layer in range(self.num_layers):
                parts = []
                for lo in range(0, n, chunk_size):
                    ids = torch.arange(lo, min(n, lo + chunk_size))
                    block = full_neighbor_block(
                        self.topology, ids, with_edge_ids=self.edge_rows is not None
                    )
                    parts.append(
                        self.model.layer_forward(
                            layer, self._local(block), h[block.src_ids.to(self.device)]
                        )
                    )
                h = torch.cat(parts)
            return h
        finally:
            self.model.train()

    def held_bytes(self) -> HeldBytes:
        """The engine's state now, walked once (see :meth:`peak_memory` for the parts)."""
        held = HeldBytes()
        params = list(self.module.parameters())
        held.add(
            self.x,
            self.y,
            self.masks,
            self.train_ids,
            self._full_agg,
            params,
            [p.grad for p in params],
            list(self.optimizer.state.values()),
        )
        return held

    def peak_memory(self) -> dict[str, int]:
        """What this process holds, the largest seen at any call (the trainer's epoch ends).

        ``device``: the bytes of the engine's state on its device (features, labels, masks,
        training IDs, the full-graph aggregator once built, parameters, gradients and optimizer
        state; each buffer once, memory maps left out: what the cost model's
        ``predict_reference`` predicts); ``host``: the CPU-resident part when the device is a
        GPU; ``rss_anon`` and ``rss_peak``: the process's anonymous and peak RSS (where
        ``/proc`` exists). Activations live only during a step and are not in ``device``.
        """
        held = self.held_bytes()
        live = sum(held.by_device.values())
        cpu = held.by_device.get("cpu", 0)
        now = {"device": live} if self.device.type == "cpu" else {"device": live - cpu, "host": cpu}
        now.update(process_memory())
        for key, value in now.items():
            self._memory[key] = max(self._memory.get(key, 0), int(value))
        return dict(self._memory)

    def evaluate(self) -> dict[str, float]:
        """Accuracy per split and validation loss, from full-neighbour inference.

        Full mode: one full-graph forward pass. Mini-batch mode: streaming layer-wise inference
        (:func:`~fleetgnn.engines.inference.streaming_metrics`; ``config.eval_nodes`` chooses the
        last layer's nodes), input rows taken from the engine's features. Both turn logits into
        metrics in one place: the :class:`~fleetgnn.engines.metric_sums.MetricSums` sink (the
        task's metric sums), fed chunk by chunk when streaming, all nodes at once in full mode.
        """
        if is_temporal_node(self.task):  # every split node embedded at its node time
            return temporal_node_metrics(
                self.model,
                self.sampler,  # type: ignore[arg-type]
                self.task,  # type: ignore[arg-type]
                lambda ids: self.x[ids.to(self.device)],
                self.graph,
                dtype=self.dtype,
                device=self.device,
                edges=self.edge_rows,
            )
        if is_temporal(self.task):  # every query embedded at its positive's time
            return temporal_link_metrics(
                self.task,  # type: ignore[arg-type]
                self.model,
                self.sampler,
                lambda ids: self.x[ids.to(self.device)],
                dtype=self.dtype,
                device=self.device,
            )
        if self.link:
            return self.task.evaluate(self.infer(), self.model.decoder)
        if self.mode == "full":  # every node's logits at once, through the streaming sink
            sums = MetricSums(self.graph, self.device)
            sums(np.arange(self.graph.num_nodes), self.infer())
            return sums.result()
        return streaming_metrics(
            self.model,
            self.graph,
            self.topology,
            lambda ids: self.x[ids.to(self.device)],
            device=self.device,
            dtype=self.dtype,
            eval_nodes=self.config.eval_nodes,
            chunking=self.chunking,
            scratch_dir=self.config.scratch_dir,
            edges=self.edge_rows,
        )

    # ------------------------------------------------------------------ state
