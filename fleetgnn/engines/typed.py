"""Typed (heterogeneous) graphs on the ``reference`` and ``minibatch`` engines.

Node classification on the schema's target type with a typed model
(:class:`~fleetgnn.nn.hetero.HeteroGNN`, or any layer-wise model taking dict-valued rows and
:class:`~fleetgnn.nn.hetero.TypedAggregator` hops):

- :class:`TypedReferenceEngine`: one process; ``minibatch`` mode samples typed blocks
  (:class:`~fleetgnn.sampling.hetero.HeteroNeighborSampler`, keyed by ``(seed, epoch, step)``)
  for batches of training nodes, ``full`` mode runs every layer on the whole typed graph.
- :class:`TypedMinibatchEngine`: ``W`` data-parallel ranks, each sampling its own slot of the
  step's seeds (:class:`~fleetgnn.sampling.SeedLoader`, ``stream = rank``), the loss of each
  divided by the step's global seed count and the gradients summed by the engines' one
  all-reduce, so a step equals the reference's step on the union of the ranks' batches.

Features: with ``store.device_budget`` or ``store.host_budget`` set, the minibatch engine reads
each batch's input rows through a :class:`~fleetgnn.store.keyed.KeyedStore` (one table per
featured type over device shards, the host tier and the dataset's arrays, the budgets shared by
all types by in-degree over every relation; ``store.gather`` picks one- or two-sided device
reads; ``store.placement``, ``store.order`` and ``store.topology`` apply to homogeneous graphs
only). Without budgets, and in the reference engine, each rank reads the typed graph's per-type
arrays (memory maps are fine) directly. The rows are the same either way, bit for bit.
Featureless types are the model's embedding tables, trained like every parameter (dense
gradients unless the model asks for sparse ones).

Evaluation streams (:func:`~fleetgnn.engines.inference.stream_typed_inference`): layer by
layer, each rank computes its range of every needed type's nodes in chunks, with all their
in-edges, hidden rows in per-type scratch files (``scratch_dir``) or in memory when small; the
target type's logits become the splits' sums chunk by chunk
(:class:`~fleetgnn.engines.metric_sums.MetricSums`), all-reduced. Features are read from the
typed graph's arrays directly. ``full`` mode trains on the whole graph in memory.

A :class:`~fleetgnn.tasks.TypedTemporalNodeClassification` (``task=``; ``minibatch`` mode of the
reference) samples each seed with a :class:`~fleetgnn.sampling.TypedTemporalSampler` at its node
time and evaluates every split node at its own time (:mod:`fleetgnn.engines.temporal_node`).

``split`` trains typed graphs through :class:`~fleetgnn.engines.split_relations.TypedSplitEngine`
(this minibatch engine with the reference's global batch split by a partition, relation by
relation); ``fullgraph`` and ``offload`` refuse them
(:func:`~fleetgnn.engines.common.refuse_typed`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import torch

from fleetgnn.config import MinibatchEngineConfig, ReferenceEngineConfig
from fleetgnn.config.units import budget_bytes
from fleetgnn.engines.base import (
    EngineBase,
    StepCallback,
    StepStats,
    run_steps,
)
from fleetgnn.engines.batch import MiniBatch
from fleetgnn.engines.chunks import Chunking
from fleetgnn.engines.common import (
    LossFn,
    dist_setup,
    engine_config,
    normalize_rows,
    one_process_setup,
    setup_model,
    stored_values,
)
from fleetgnn.engines.inference import TypedSink, stream_typed_inference
from fleetgnn.engines.metric_sums import MetricSums
from fleetgnn.engines.sampled import SampledEngine
from fleetgnn.engines.step import Prefetcher, Prepared, StepLoss, run_step
from fleetgnn.engines.temporal_link import EVAL_CHUNK
from fleetgnn.engines.temporal_node import (
    check_typed_temporal,
    is_typed_temporal_node,
    node_blocks,
    typed_temporal_node_metrics,
    typed_temporal_sampler,
)
from fleetgnn.errors import ConfigError, DatasetError
from fleetgnn.graph.compact_rows import applied_feature_dtypes
from fleetgnn.graph.hetero import HeteroGraph
from fleetgnn.nn.hetero import TypedAggregator
from fleetgnn.sampling import SeedLoader
from fleetgnn.sampling.hetero import HeteroBlock, HeteroNeighborSampler, full_hetero_block
from fleetgnn.store import KeyedStore, TierBudgets
from fleetgnn.tasks import check_label_range


def is_typed(graph: Any) -> bool:
    """Whether ``graph`` is a typed graph."""
    return isinstance(graph, HeteroGraph)


def _require_typed_trainable(graph: Any) -> HeteroGraph:
    if not is_typed(graph):
        raise ConfigError(f"expected a HeteroGraph (got {type(graph).__name__})")
    if graph.schema.target is None or graph.y is None or graph.train_mask is None:
        raise DatasetError(
            f"typed dataset '{graph.name}' has no target type, labels or train_mask; training "
            f"needs all three"
        )
    return graph


class _TypedData:
    """What both typed engines hold: per-type features, labels, splits and the training seeds."""

    graph: HeteroGraph
    device: torch.device
    dtype: torch.dtype
    seed: int
    num_layers: int
    #: How evaluation cuts each rank's nodes into chunks.
    chunking = Chunking()
    #: The task (``None``: node classification; a typed temporal node task samples in time).
    task: Any = None
    #: Temporal evaluation: nodes embedded at once (bounds its memory).
    eval_chunk = EVAL_CHUNK

    def _setup_data(
        self, graph: HeteroGraph, feature_norm: str | None, feature_dtype: str | None = None
    ) -> None:
        s = graph.schema
        self.schema = s
        self.feature_norm = feature_norm or "none"
        self.feature_dtype = feature_dtype  # store.feature_dtype: the rows' stored values
        # per type, what it still applies (a table written compact: as stored, or widened)
        self.applied_dtypes = applied_feature_dtypes(graph.x, feature_dtype)
        self.offsets = {t: s.type_range(t)[0] for t in s.node_types}
        self.num_classes = int(graph.num_classes or int(np.max(graph.y)) + 1)
        self.y = torch.from_numpy(np.array(graph.y, dtype=np.int64))
        self.masks = {
            m: torch.from_numpy(np.array(getattr(graph, f"{m}_mask"), dtype=bool))
            for m in ("train", "val", "test")
            if getattr(graph, f"{m}_mask") is not None
        }
        check_label_range(self.y, list(self.masks.values()), self.num_classes)
        self.target_offset = self.offsets[s.target]  # type: ignore[index]
        local = np.flatnonzero(np.asarray(graph.train_mask))
        self.train_ids = torch.from_numpy(local + self.target_offset)
        self._full: TypedAggregator | None = None

    def _setup_sampler(self, fanouts: Any, config_fanouts: Any) -> None:
        """The typed sampler: ``fanouts`` (per relation) if given, else the config's list.

        A typed temporal node task's is a :class:`~fleetgnn.sampling.TypedTemporalSampler`
        (its strategy; the same fanouts and keys).
        """
        fan = fanouts if fanouts is not None else list(config_fanouts)
        if is_typed_temporal_node(self.task):
            self.sampler: Any = typed_temporal_sampler(self.graph, fan, self.seed, self.task)
        else:
            self.sampler = HeteroNeighborSampler(self.graph, fan, seed=self.seed)
        _check_layers(self.sampler, self.module)  # type: ignore[attr-defined]

    def features(self, block: HeteroBlock) -> dict[str, torch.Tensor]:
        """Input rows of a block's featured types (cast, normalised, on the device)."""
        return {
            t: self.type_rows(t, (block.src_ids[t] - self.offsets[t]).numpy()) for t in self.graph.x
        }

    def labels(self, seeds: torch.Tensor) -> torch.Tensor:
        """Labels of target-type seeds (global IDs)."""
        return self.y[seeds - self.target_offset].to(self.device)

    def aggregators(self, blocks: list[HeteroBlock]) -> list[TypedAggregator]:
        """One typed aggregator per block, on the device."""
        # a step's hops: per-step patterns may be cached on them (the whole graph's are not)
        return [
            TypedAggregator(b.to(self.device), dtype=self.dtype, transient=True) for b in blocks
        ]

    @property
    def full_aggregator(self) -> TypedAggregator:
        """The whole typed graph as one hop (built once)."""
        if self._full is None:
            self._full = TypedAggregator(
                full_hetero_block(self.graph).to(self.device), dtype=self.dtype
            )
        return self._full

    @torch.no_grad()
    def infer(self) -> torch.Tensor:
        """Target-type logits ``[N_target, C]`` from one full-graph forward in memory (eval mode).

        For small graphs and tests; :meth:`evaluate` streams instead.
        """
        self.module.eval()  # type: ignore[attr-defined]
        try:
            full = self.full_aggregator
            x = self.features(full_hetero_block(self.graph))
            return self.module([full] * self.num_layers, x)  # type: ignore[attr-defined]
        finally:
            self.module.train()  # type: ignore[attr-defined]

    def type_rows(self, ntype: str, local: np.ndarray) -> torch.Tensor:
        """Input rows of type-local IDs ``local`` of a featured type (cast, normalised)."""
        rows = stored_values(
            torch.from_numpy(np.asarray(self.graph.x[ntype][local])), self.applied_dtypes[ntype]
        )
        return normalize_rows(rows.to(self.device, self.dtype), self.feature_norm)

    def evaluate(self) -> dict[str, float]:
        """Accuracy per split and validation loss on the target type (full neighbourhoods).

        Streaming, the ranks splitting every layer's nodes (collective; see
        :func:`~fleetgnn.engines.inference.stream_typed_inference`). A typed temporal node
        task embeds every split node at its node time instead, the ranks sharing the nodes
        (:func:`~fleetgnn.engines.temporal_node.typed_temporal_node_metrics`).
        """
        if is_typed_temporal_node(self.task):
            return typed_temporal_node_metrics(self)
        sums = MetricSums(self.graph, self.device)
        self.stream(lambda _, ids, rows: sums(ids, rows))
        return sums.result(self.comm)  # type: ignore[attr-defined]

    def stream(self, sink: TypedSink, outputs: list[str] | None = None) -> None:
        """Stream the layers into ``sink`` with this engine's settings (collective).

        :func:`~fleetgnn.engines.inference.stream_typed_inference` with the engine's model,
        features, communicator, device, chunking and scratch directory.
        """
        stream_typed_inference(
            self.module,  # type: ignore[attr-defined]
            self.graph,
            self.type_rows,
            sink,
            outputs=outputs,
            comm=self.comm,  # type: ignore[attr-defined]
            device=self.device,
            dtype=self.dtype,
            chunking=self.chunking,
            scratch_dir=self.config.scratch_dir,  # type: ignore[attr-defined]
            same_host=bool(getattr(getattr(self, "ctx", None), "same_host", True)),
        )


class TypedReferenceEngine(_TypedData, EngineBase):
    """Single-process training of a typed model on a typed graph (the typed ground truth).

    Args:
        model: A typed layer-wise model (:class:`~fleetgnn.nn.hetero.HeteroGNN`).
        graph: The :class:`~fleetgnn.graph.hetero.HeteroGraph`.
        ctx: Unused (single process).
        config: A :class:`~fleetgnn.config.ReferenceEngineConfig`; ``fanouts`` may also be
            given per relation by :attr:`relation_fanouts` (the Python API).
        optimizer: Over ``model``'s parameters (``None``: Adam, lr 0.01).
        loss: Per-node loss (``None``: cross-entropy).
        fanouts: Per-relation fanouts overriding ``config.fanouts`` (a mapping, see
            :func:`~fleetgnn.sampling.hetero.relation_fanouts`).
        task: ``None`` (node classification) or a
            :class:`~fleetgnn.tasks.TypedTemporalNodeClassification` (``minibatch`` mode:
            every seed sampled at its node time, :mod:`fleetgnn.engines.temporal_node`).
    """

    name = "reference"
    world_size = 1
    rank = 0
    comm = None

    def __init__(
        self,
        model: torch.nn.Module,
        graph: HeteroGraph,
        ctx: Any = None,
        config: ReferenceEngineConfig | None = None,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        loss: LossFn | None = None,
        fanouts: Any = None,
        task: Any = None,
    ) -> None:
        config = one_process_setup(self, config)
        check_typed_temporal(self.name, self.mode, task)
        self.task = task
        self.graph = _require_typed_trainable(graph)
        self._setup_data(graph, config.feature_norm, config.feature_dtype)
        self.model = self.module = setup_model(self, model, optimizer, loss, broadcast=False)
        if self.mode == "minibatch":
            self.loader = SeedLoader(
                self.train_ids, config.batch_size, seed=self.seed, shuffle=True
            )
            self._setup_sampler(fanouts, config.fanouts)

    def steps_per_epoch(self) -> int:
        """One step in full mode; the number of batches in mini-batch mode."""
        return 1 if self.mode == "full" else self.loader.num_batches

    def run_epoch(
        self, epoch: int, start_step: int = 0, on_step: StepCallback | None = None
    ) -> list[StepStats]:
        """Run steps ``start_step..`` of ``epoch``."""
        self.module.train()
        return run_steps(self, epoch, start_step, on_step)

    def train_step(self, epoch: int, step: int) -> StepStats:
        """One optimisation step."""
        t0 = self.clock()
        g_step = epoch * self.steps_per_epoch() + step
        if self.mode == "full":
            aggs = [self.full_aggregator] * self.num_layers
            x = self.features(full_hetero_block(self.graph))
            seeds = self.train_ids
        else:
            seeds = self.loader.batch(epoch, step)
            blocks = node_blocks(self.sampler, self.task, seeds, epoch, step)
            aggs = self.aggregators(blocks)
            x = self.features(blocks[0])
        t_prep = self.clock() - t0

        def forward() -> StepLoss:
            logits = self.module(aggs, x, step=g_step)
            if self.mode == "full":
                logits = logits[seeds - self.target_offset]
            return StepLoss.of(self.loss, logits, self.labels(seeds), int(seeds.numel()))

        return run_step(self, forward, prepared=Prepared(t_prep, 0.0, inline=t_prep))


class TypedMinibatchEngine(_TypedData, SampledEngine):
    """Data-parallel mini-batch training of a typed model (see the module docstring).

    Args:
        model: A typed layer-wise model; rank 0's parameters are broadcast.
        graph: The :class:`~fleetgnn.graph.hetero.HeteroGraph` (every rank opens it).
        ctx: This process's :class:`~fleetgnn.distributed.DistContext` (``None``: from the
            environment).
        config: A :class:`~fleetgnn.config.MinibatchEngineConfig`; ``store.device_budget`` /
            ``store.host_budget`` put the features in a keyed store (see the module docstring).
        optimizer: Over ``model``'s parameters (``None``: Adam, lr 0.01).
        loss: Per-node loss (``None``: cross-entropy).
        fanouts: Per-relation fanouts overriding ``config.fanouts``.
        task: ``None`` (node classification) or a
            :class:`~fleetgnn.tasks.TypedTemporalNodeClassification` (every seed sampled at its
            node time, ``stream`` = the rank; :mod:`fleetgnn.engines.temporal_node`).
    """

    name = "minibatch"
    #: The engine config this class takes.
    config_cls: type[Any] = MinibatchEngineConfig

    def __init__(
        self,
        model: torch.nn.Module,
        graph: HeteroGraph,
        ctx: Any = None,
        config: MinibatchEngineConfig | None = None,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        loss: LossFn | None = None,
        fanouts: Any = None,
        task: Any = None,
    ) -> None:
        from fleetgnn.distributed import TrafficMeter

        cfg = engine_config(self.name, config, self.config_cls)
        check_typed_temporal(self.name, "minibatch", task)
        self.task = task
        _require_typed_trainable(graph)
        super().__init__(dist_setup(self.name, cfg, ctx), graph)
        self._setup_data(graph, cfg.feature_norm, cfg.feature_dtype)
        self.store: KeyedStore | None = None
        self.store_comm: Any = None
        if graph.x and (cfg.device_budget is not None or cfg.host_budget is not None):
            self._build_store(cfg, TrafficMeter)
        self.module = self.model = setup_model(self, model, optimizer, loss)
        self.loader = self._seed_loader(cfg)
        self._setup_sampler(fanouts, cfg.fanouts)
        self._setup_prefetch(cfg)

    def _seed_loader(self, cfg: Any) -> SeedLoader:
        """This rank's slot of every step's training seeds (``stream = rank``)."""
        return SeedLoader(
            self.train_ids,
            cfg.batch_size,
            rank=self.rank,
            world_size=self.world_size,
            seed=self.seed,
        )

    def _setup_prefetch(self, cfg: MinibatchEngineConfig) -> None:
        """The thread that prepares step ``k + 1``'s batch while step ``k`` trains."""
        self.prefetcher: Prefetcher[MiniBatch] = Prefetcher(
            self.prepare, enabled=cfg.prefetch, name="fleetgnn-prefetch", device=self.device
        )

    def _build_store(self, cfg: MinibatchEngineConfig, meter_cls: Any) -> None:
        """The keyed store of the features (collective), on a group of its own."""
        from fleetgnn.engines.minibatch import resolve_gather

        hosts = self.ctx.hosts(self.comm)
        gather = resolve_gather(cfg.gather, self.ctx, hosts)
        budgets = TierBudgets(
            budget_bytes(cfg.device_budget, "device_budget"),
            budget_bytes(cfg.host_budget, "host_budget"),
        )
        self.store_comm = self.comm.new_group(backend="gloo", meter=meter_cls())
        try:
            self.store = KeyedStore.build(
                self.graph,
                self.store_comm,
                budgets,
                one_sided=gather == "one_sided",
                meter=meter_cls(),
                hosts=hosts,
                feature_dtype=cfg.feature_dtype,
            )
        except BaseException:
            self.store_comm.destroy()
            raise

    def train_features(self, block: HeteroBlock) -> dict[str, torch.Tensor]:
        """A training batch's input rows: through the keyed store when there is one."""
        if self.store is None:
            return self.features(block)
        # every table in schema order on every rank (two-sided reads are collectives)
        rows = {t: self.store.gather_type(t, block.src_ids[t]) for t in self.store.tables}
        return {
            t: normalize_rows(rows[t].to(self.device, self.dtype), self.feature_norm)
            for t in self.graph.x
        }

    def peak_memory(self) -> dict[str, int]:
        """Bytes this rank holds per store tier (all zero without a store)."""
        if self.store is None:
            return {"device": 0, "host": 0, "disk": 0}
        return dict(self.store.memory())

    def rank_extra(self) -> dict[str, Any]:
        """The keyed store's hit rates of the last epoch (none without a store)."""
        return {} if self.store is None else {"hit_rates": self.store.hit_rates()}

    def _release(self) -> None:
        """Release the keyed store's shared memory and its group (after the prefetch thread)."""
        if self.store is not None:
            self.store.close()
            self.store = None
        if self.store_comm is not None:
            self.store_comm.destroy()
            self.store_comm = None

    def steps_per_epoch(self) -> int:
        """Batches per epoch, equal on every rank."""
        return self.loader.num_batches

    def _epoch_start(self) -> None:
        if self.store is not None:
            self.store.reset_stats()  # hit rates of this epoch's training

    def _sample(self, epoch: int, step: int) -> MiniBatch:
        """A step's sampled batch: its blocks, seeds and count, and the seeds' labels."""
        seeds = self.loader.batch(epoch, step)
        blocks = node_blocks(self.sampler, self.task, seeds, epoch, step, self.rank)
        target = self.labels(seeds)
        return MiniBatch(
            blocks, {self.schema.target: seeds}, self.loader.global_count(step), target=target
        )

    def _step_loss(self, out: Any, batch: MiniBatch) -> StepLoss:
        """The step's loss of the model's output rows."""
        return StepLoss.of(self.loss, out, batch.target, batch.global_count)  # type: ignore[arg-type]

    def prepare(self, epoch: int, step: int) -> MiniBatch:
        """Sample and read one step's batch (in the prefetch thread while a step trains).

        Timed with the host clock: the sampling is host work, and a device clock would wait for
        the step it overlaps (on a GPU ``gather`` is the time to issue the reads).
        """
        t0 = time.perf_counter()
        batch = self._sample(epoch, step)
        t1 = time.perf_counter()
        before = None if self.store is None else self.store.meter.snapshot()
        x = self.train_features(batch.hops[0])
        t2 = time.perf_counter()
        if self.store is None or before is None:
            traffic = {"local": int(sum(v.numel() * v.element_size() for v in x.values()))}
        else:
            traffic = {k: v["bytes"] for k, v in self.store.meter.delta(before).items()}
        return dataclasses.replace(batch, x=x, t_sample=t1 - t0, t_gather=t2 - t1, traffic=traffic)

    def _run_step(self, epoch: int, step: int, batch: MiniBatch, waited: float) -> StepStats:
        g_step = epoch * self.steps_per_epoch() + step

        def forward() -> StepLoss:
            out = self.module(self.aggregators(batch.hops), batch.x, step=g_step)
            return self._step_loss(out, batch)

        prepared = Prepared(batch.t_sample, batch.t_gather, inline=waited, traffic=batch.traffic)
        return run_step(self, forward, prepared=prepared)

    def train_step(self, epoch: int, step: int) -> StepStats:
        """One data-parallel step, its batch prepared inline (gradients summed over ranks)."""
        batch = self.prepare(epoch, step)
        return self._run_step(epoch, step, batch, batch.t_sample + batch.t_gather)


def _check_layers(sampler: HeteroNeighborSampler, model: torch.nn.Module) -> None:
    n = int(getattr(model, "num_layers", 0))
    if sampler.num_layers != n:
        raise ConfigError(
            f"'fanouts' has {sampler.num_layers} hops but the model has {n} layers; give one "
            f"fanout per layer, e.g. fanouts={[10] * n}"
        )
