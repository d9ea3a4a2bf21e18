"""The ``minibatch`` engine: data-parallel sampled training over the unified store.

Each of the ``W`` ranks (one per GPU, or one CPU process standing in for one) takes its slots of
the epoch's shuffled training nodes (:class:`~fleetgnn.sampling.SeedLoader`: every rank runs the
same number of steps, so the gradient all-reduce never deadlocks on uneven data), samples blocks
through the :class:`~fleetgnn.store.UnifiedStore` (topology split across device shards, peers,
host and disk), gathers the input features through the store, and trains a replicated model
through the engines' step (:func:`~fleetgnn.engines.step.train_step`).

Loss scaling: a step's loss on rank ``r`` is ``sum of its nodes' losses / B`` where ``B`` is
the number of training nodes in the step over all ranks (known on every rank from the loader, no
communication); after the backward the gradients are summed over ranks with one flat all-reduce
(:func:`~fleetgnn.engines.step.sync_gradients`), so the update equals the gradient of the mean
loss over the union of all ranks' batches — exactly what the reference engine computes for that
union of sampled blocks.

Overlap: a background thread samples and gathers the next step's batch while the current step
trains (WholeGraph/XGNN's pipeline). ``EpochStats.extra['prefetch_hidden_s']`` reports how much of
the sampling and gathering time was hidden behind training.

Memory: every rank holds the model, its device shard of the store and a mapping of its host's
host tier (one copy per host, at most ``host_budget`` bytes). Evaluation streams
(:func:`~fleetgnn.engines.inference.streaming_metrics`): each layer's output goes to a scratch file
(in the run directory, ``scratch_dir``) chunk by chunk, so it adds one chunk's rows
(:attr:`MinibatchEngine.chunking`), never an ``[N, hidden]`` array.

Hosts: with ``gather="auto"`` (default) peers' device shards are read one-sided from shared
memory when every rank runs on one host, and with the two-sided gather (all-to-all) when the ranks
span hosts (:attr:`DistContext.same_host <fleetgnn.distributed.DistContext.same_host>` is False;
rank 0 logs one line saying so on the ``fleetgnn`` logger). Device rows read from a rank on
another host are counted as ``net`` traffic, from another rank on this host as ``peer``.

Epoch numbers (``epoch_extra``, the ``extra`` field of metrics.jsonl), summed over ranks like the
traffic: ``hit_rates`` (feature rows) and ``topology_hit_rates`` (node IDs looked up) per source,
``store_requests`` (the counts behind them) and ``store_bytes`` (bytes served per link kind, per
kind). For feature rows, ``store_bytes["features"][link] == store_requests["features"][source] *
F * itemsize`` with ``link = SOURCE_LINKS[source]``; the epoch's ``traffic`` on ``local``, ``h2d``
and ``disk`` is the sum of every kind's ``store_bytes`` (``peer``/``net`` add the gradient
all-reduce).

Edge features (a model whose ``needs_edge_attr`` is True): the graph's ``edge_attr`` rows are a
table of the store keyed by edge ID (:class:`~fleetgnn.store.edge_table.EdgeTable`), tiered and
sharded like the node rows; each batch's blocks read theirs in the prefetch thread, right after
its node rows. The store's budgets are split between node rows and edge rows
(:func:`~fleetgnn.store.edge_table.split_budgets`, ``store.edge_share``; ``store_budgets`` in
the epoch's numbers says how), and the epoch reports ``edge_hit_rates`` and the ``"edges"`` kind
in ``store_requests`` / ``store_bytes`` (``D * itemsize`` bytes a row); ``peak_memory`` counts
both tables.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import numpy as np
import torch

from fleetgnn.config import MinibatchEngineConfig
from fleetgnn.config.units import budget_bytes
from fleetgnn.distributed import DistContext, TrafficMeter
from fleetgnn.engines.base import StepStats
from fleetgnn.engines.batch import MiniBatch
from fleetgnn.engines.chunks import Chunking
from fleetgnn.engines.common import (
    LossFn,
    check_fanouts,
    label_rows,
    normalize_rows,
    presample_seeds,
    seed_loader,
    setup_distributed,
    setup_model,
)
from fleetgnn.engines.edges import EdgeRows, block_aggregator, needs_edge_attr
from fleetgnn.engines.link import (
    EdgeBatches,
    check_link_model,
    edge_batch_loss,
    is_temporal,
    sampled_link_metrics,
    setup_task,
)
from fleetgnn.engines.sampled import SampledEngine
from fleetgnn.engines.step import Prefetcher, Prepared, StepLoss, run_step
from fleetgnn.engines.temporal_link import EVAL_CHUNK, sampled_temporal_metrics
from fleetgnn.engines.temporal_node import (
    check_node_times,
    is_temporal_node,
    sampled_temporal_node_metrics,
)
from fleetgnn.errors import ConfigError
from fleetgnn.graph import Graph
from fleetgnn.sampling import (
    DeviceTopology,
    NeighborSampler,
    TemporalSampler,
)
from fleetgnn.sampling.presample import presample_edge_counts, presample_hotness
from fleetgnn.store import (
    KINDS,
    SOURCE_LINKS,
    SOURCES,
    TierBudgets,
    UnifiedStore,
    resolve_sampling,
)
from fleetgnn.store.edge_table import BudgetSplit, EdgeTable, split_budgets
from fleetgnn.tasks import Task


def replica_bytes(graph: Graph) -> int:
    """Bytes of a device replica of ``graph``'s CSC (offsets, neighbours, edge weights)."""
    arrays = (graph.indptr, graph.indices, graph.edge_weight)
    return int(sum(a.size * a.dtype.itemsize for a in arrays if a is not None))


def sampling_place(choice: str, graph: Graph, device: torch.device, budget: int) -> str:
    """Resolve ``store.sampling``: ``"device"`` or ``"host"`` (see the config's docstring).

    Raises:
        ConfigError: ``device`` was asked for and the replica exceeds the device budget.
    """
    need = replica_bytes(graph)
    place = resolve_sampling(choice, device.type, need, budget)
    if place is None:
        raise ConfigError(
            f"store.sampling=device: the graph's CSC replica takes {need} bytes, more than "
            f"store.device_budget ({budget} bytes per rank); raise the budget or use "
            f"store.sampling=host"
        )
    return place


_LINKS: tuple[str, ...] = tuple(SOURCE_LINKS.values())
log = logging.getLogger(__name__)


def resolve_gather(gather: str, ctx: DistContext, hosts: tuple[int, ...]) -> str:
    """The device-tier gather to use: ``"one_sided"`` or ``"two_sided"``.

    ``"auto"`` is one-sided when every rank runs on one host and two-sided across hosts (rank 0
    logs one line saying so).

    Raises:
        ConfigError: ``"one_sided"`` asked for while the ranks span hosts.
    """
    if ctx.same_host:
        return "one_sided" if gather == "auto" else gather
    n = len(set(hosts))
    if gather == "one_sided":
        raise ConfigError(
            f"store.gather='one_sided' reads peers' shards from shared memory, which needs every "
            f"rank on one host, but the {ctx.world_size} ranks run on {n} hosts; use "
            f"store.gather=auto (two-sided across hosts) or store.gather=two_sided"
        )
    if gather == "auto" and ctx.rank == 0:
        log.info(
            "store.gather=auto: the %d ranks run on %d hosts, so peers' device shards are read "
            "with the two-sided gather (all-to-all) instead of shared memory",
            ctx.world_size,
            n,
        )
    return "two_sided"


class MinibatchEngine(SampledEngine):
    """Data-parallel mini-batch training over a unified store.

    Args:
        model: A layer-wise model (see :mod:`fleetgnn.nn.protocol`); moved to this rank's device
            and the config's dtype; rank 0's parameters are broadcast, so every rank starts from
            the same model.
        graph: The dataset (memory maps are fine: the store tiers it).
        ctx: This process's :class:`~fleetgnn.distributed.DistContext` (``None``:
            :func:`~fleetgnn.distributed.init` from the environment).
        config: A :class:`~fleetgnn.config.MinibatchEngineConfig`.
        optimizer: Over ``model``'s parameters (``None``: Adam, lr 0.01).
        loss: Per-node loss ``loss(logits, target) -> [B]`` (``None``: cross-entropy; for a
            link task, the task's pair loss).
        task: What to train (``None``: node classification). A
            :class:`~fleetgnn.tasks.LinkPrediction` trains on batches of its split's training
            edges over its message-passing graph (:class:`~fleetgnn.engines.link.EdgeBatches`);
            a :class:`~fleetgnn.tasks.TemporalLinkPrediction` on timed edges sampled at their
            times (the same builder, ``stream`` = the rank), evaluated at each query's time
            with the queries shared over the ranks and the metric sums all-reduced
            (:func:`~fleetgnn.engines.temporal_link.temporal_link_metrics`). A
            :class:`~fleetgnn.tasks.TemporalNodeClassification` samples every seed at its node
            time (``stream`` = the rank) and is evaluated with every split node at its node
            time, the nodes shared over the ranks and the metric sums all-reduced
            (:mod:`fleetgnn.engines.temporal_node`).
    """

    name = "minibatch"

    def __init__(
        self,
        model: torch.nn.Module,
        graph: Graph,
        ctx: DistContext | None = None,
        config: MinibatchEngineConfig | None = None,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        loss: LossFn | None = None,
        task: Task | None = None,
    ) -> None:
        mode = getattr(config, "mode", None) or "minibatch"
        graph, loss = setup_task(self, mode, task, graph, loss)
        dist = setup_distributed(self.name, graph, config, MinibatchEngineConfig, ctx, self.task)
        super().__init__(dist, graph)  # config, ctx, rank, device, clock, comm ...
        sc: MinibatchEngineConfig = dist.config
        check_fanouts(sc.fanouts, model)
        ctx = self.ctx
        self.hosts = ctx.hosts(self.comm)  # one all_gather_object when the ranks span hosts
        self.gather = resolve_gather(sc.gather, ctx, self.hosts)
        # the store's two-sided gathers run in the prefetch thread: give them their own group so
        # they never interleave with the gradient all-reduce on the training group
        # (with their own meter: the store reports what it serves per tier in store_meter)
        self.store_comm = self.comm.new_group(backend="gloo", meter=TrafficMeter())
        self.feature_norm = sc.feature_norm
        # the store meters bytes served per tier; the communicators meter bytes on the wire
        self.store_meter = TrafficMeter()
        device_budget = budget_bytes(sc.device_budget, "device_budget")  # errors name the key
        #: Where batches are sampled (``store.sampling`` resolved): ``host`` or ``device``.
        self.sampling = sampling_place(sc.sampling, graph, self.device, device_budget)
        replica = None
        if self.sampling == "device":
            replica = DeviceTopology.from_graph(graph, self.device)
        #: Bytes of the CSC replica the device sampler reads (out of the device budget).
        self.replica_bytes = replica_bytes(graph) if replica is not None else 0
        budgets = TierBudgets(
            device_budget - self.replica_bytes,
            budget_bytes(sc.host_budget, "host_budget"),
        )
        #: How the store's budgets are shared by node rows and edge rows (``None``: the model
        #: reads no edge features, the node rows get all of them).
        self.budget_split: BudgetSplit | None = None
        if needs_edge_attr(model) and graph.edge_attr is not None:
            self.budget_split = split_budgets(
                budgets,
                graph,
                sc.edge_share,
                feature_dtype=sc.feature_dtype,
                edge_feature_dtype=sc.edge_feature_dtype,
            )
            budgets = self.budget_split.nodes
        self.store = UnifiedStore.build(
            graph,
            self.store_comm,
            budgets,
            placement=(
                presample_hotness(
                    graph, presample_seeds(self.task, graph), sc.batch_size, sc.fanouts, sc.seed
                )
                if sc.placement == "presample"
                else "degree"
            ),
            order=sc.order,
            one_sided=self.gather == "one_sided",
            meter=self.store_meter,
            topology=sc.topology,
            hosts=self.hosts,
            device=self.device,  # gather returns rows there; feature shards live there on CUDA
            feature_dtype=sc.feature_dtype,  # compact rows in every tier, read back in gather
        )
        #: The seeds' labels, each batch reading its own rows (``None``: the task reads none).
        self.y = label_rows(self.task, graph)
        #: How evaluation cuts each rank's nodes into chunks (bounds its memory).
        self.chunking = Chunking()
        #: Temporal evaluation: queries (link) or nodes embedded at once (bounds its memory).
        self.eval_chunk = EVAL_CHUNK
        self.module = setup_model(self, model, optimizer, loss)  # rank 0's parameters everywhere
        self.model = self.module
        #: The store's table of edge rows, when the model reads edge features (else ``None``).
        self.edge_table: EdgeTable | None = None
        if self.budget_split is not None:
            fanouts = [int(f) for f in sc.fanouts]
            self.edge_table = EdgeTable.build(
                graph,
                self.store_comm,
                self.budget_split.edges,
                node_order=self.store.plan.topology.order,  # the node rows' hotness
                fanout=-1 if -1 in fanouts else max(fanouts),
                counts=(
                    presample_edge_counts(
                        graph,
                        presample_seeds(self.task, graph),
                        sc.batch_size,
                        sc.fanouts,
                        sc.seed,
                    )
                    if sc.placement == "presample"
                    else None
                ),
                one_sided=self.gather == "one_sided",
                meter=self.store_meter,
                name="store.edges",
                hosts=self.hosts,
                device=self.device,
                feature_dtype=sc.edge_feature_dtype,  # compact rows, read back in the gather
            )
        #: The graph's edge features by edge ID, read through the store's edge table, when the
        #: model reads them (``None``: not).
        self.edge_rows = (
            EdgeRows(graph, self.dtype, self.device, table=self.edge_table)
            if self.edge_table is not None
            else EdgeRows.of(self.module, graph, self.dtype, self.device)  # refuses: no edge_attr
        )
        #: The training nodes' loader (``None``: the task's seeds are edges, ``self.edges``).
        self.loader = seed_loader(
            self.task,
            graph,
            sc.batch_size,
            rank=self.rank,
            world_size=self.world_size,
            seed=self.seed,
        )
        topology = replica if replica is not None else self.store
        self.sampler = NeighborSampler(
            topology,
            list(sc.fanouts),
            seed=self.seed,
            with_edge_ids=self.edge_rows is not None,
            backend="torch" if replica is not None else "auto",  # the same blocks either way
        )
        if is_temporal_node(self.task):  # every seed sampled at its node time
            check_node_times(self.task, graph)  # type: ignore[arg-type]
        if is_temporal_node(self.task) or is_temporal(self.task):  # link: at the pairs' times
            self.sampler = self._temporal_sampler(topology, graph, sc, replica is not None)
        if self.link:
            check_link_model(self.module)
            self.edges = EdgeBatches(
                self.task,
                self.sampler,
                sc.batch_size,
                rank=self.rank,
                world_size=self.world_size,
                seed=self.seed,
            )
        self.eval_topology = topology
        self.prefetcher: Prefetcher[MiniBatch] = Prefetcher(
            self.prepare, enabled=sc.prefetch, name="fleetgnn-prefetch", device=self.device
        )
        self._extra: dict[str, Any] = {}
        self._prepared_s = 0.0

    def _temporal_sampler(
        self, topology: Any, graph: Graph, sc: MinibatchEngineConfig, on_device: bool
    ) -> TemporalSampler:
        """The temporal sampler over the batches' topology, the store or the device replica.

        The times are the (training) graph's ``edge_time`` (CSC positions, as the store's and
        the replica's edge IDs are); the replica reads them as a tensor on its device. The
        strategy is the temporal task's (link or node).
        """
        times: Any = np.asarray(graph.edge_time)
        if on_device:
            times = torch.from_numpy(times.astype(np.int64, copy=False)).to(self.device)
        return TemporalSampler(
            topology,
            list(sc.fanouts),
            seed=self.seed,
            edge_time=times,
            strategy=self.task.strategy,  # type: ignore[attr-defined]
            with_edge_ids=self.edge_rows is not None,
            backend="torch" if on_device else "auto",
            validate=False,  # the graph format checked the order
        )

    # ------------------------------------------------------------------ batches
    def steps_per_epoch(self) -> int:
        """Batches per epoch, equal on every rank."""
        return self.edges.num_batches if self.link else self.loader.num_batches

    def prepare(self, epoch: int, step: int) -> MiniBatch:
        """Sample and gather one step's batch (runs in the prefetch thread).

        Timed with the host clock: the thread's work is host-side, and a device synchronise here
        would wait for the training step it overlaps.
        """
        before = self.store_meter.snapshot()  # only this thread reads the store meanwhile
        t0 = time.perf_counter()
        batch = self._sample(epoch, step)  # on this rank's stream
        t1 = time.perf_counter()
        x = self._features(batch.blocks[0].src_ids)
        # edge rows through the store here, on the store's group, like the node rows
        attr = None if self.edge_rows is None else self.edge_rows.block_rows(batch.blocks)
        # the labels too: read on the host and copied here, not on the step's critical path
        target = None if self.link else self.y[batch.seeds].to(self.device, non_blocking=True)
        t2 = time.perf_counter()
        traffic = {k: v["bytes"] for k, v in self.store_meter.delta(before).items()}
        return dataclasses.replace(
            batch,
            x=x,
            target=target,
            edge_attr=attr,
            t_sample=t1 - t0,
            t_gather=t2 - t1,
            traffic=traffic,
        )

    # ------------------------------------------------------------------ training
    def _epoch_start(self) -> None:
        self.store.reset_stats()  # hit rates and reads per source of this epoch's training
        if self.edge_table is not None:
            self.edge_table.reset_stats()
        self._prepared_s = 0.0

    def _run_step(self, epoch: int, step: int, batch: MiniBatch, waited: float) -> StepStats:
        stats = self.train_step(epoch, step, batch, waited)
        self._prepared_s += batch.t_sample + batch.t_gather
        return stats

    def _epoch_end(self) -> None:
        prepared_s, waited_s = self._prepared_s, self.prefetcher.waited_s
        hidden = max(0.0, prepared_s - waited_s) if self.prefetcher.enabled else 0.0
        self._extra = {
            "prefetch_prepare_s": prepared_s,
            "prefetch_wait_s": waited_s,
            "prefetch_hidden_s": hidden,
            "sampling": self.sampling,
            "topology_replica_bytes": self.replica_bytes,
            **self._store_stats(),
        }

    def _store_stats(self) -> dict[str, Any]:
        """The epoch's store requests and bytes served per source, summed over ranks.

        Collective (one ``all_reduce_sum`` of ``2 * (5 + 5)`` int64 counts, ``3 * (5 + 5)``
        with an edge table) in multi-rank runs: every rank calls it at the end of
        :meth:`run_epoch`.
        """
        table = self.edge_table
        kinds = KINDS if table is None else (*KINDS, "edges")

        def requests_of(k: str) -> dict[str, int]:
            return table.requests() if k == "edges" else self.store.requests(k)  # type: ignore[union-attr]

        def served_of(k: str) -> dict[str, int]:
            return table.bytes_served() if k == "edges" else self.store.bytes_served(k)  # type: ignore[union-attr]

        counts = [requests_of(k)[src] for k in kinds for src in SOURCES]
        counts += [served_of(k)[link] for k in kinds for link in _LINKS]
        t = torch.tensor(counts, dtype=torch.int64)
        if self.world_size > 1:
            self.comm.all_reduce_sum(t)
        values = iter(t.tolist())
        requests = {k: {src: next(values) for src in SOURCES} for k in kinds}
        served = {k: {link: next(values) for link in _LINKS} for k in kinds}

        def rates(req: dict[str, int]) -> dict[str, float]:
            total = sum(req.values())
            return {src: (v / total if total else 0.0) for src, v in req.items()}

        return {
            "hit_rates": rates(requests["features"]),
            "topology_hit_rates": rates(requests["topology"]),
            "store_requests": requests,
            "store_bytes": served,
            "store_gather": self.gather,
            "hosts": len(set(self.hosts)),
            **(
                {}
                if self.budget_split is None
                else {
                    "edge_hit_rates": rates(requests["edges"]),
                    "store_budgets": self.budget_split.as_dict(),
                }
            ),
        }

    def train_step(self, epoch: int, step: int, batch: MiniBatch, waited: float) -> StepStats:
        """One data-parallel step on a prepared batch (gradients summed over ranks after it)."""

        def forward() -> StepLoss:
            attrs = batch.edge_attr or [None] * len(batch.blocks)
            aggs = [
                block_aggregator(b, self.dtype, self.device, self.edge_rows, attr=a)
                for b, a in zip(batch.blocks, attrs, strict=True)
            ]
            logits = self.module(aggs, batch.x, step=epoch * self.steps_per_epoch() + step)
            if self.link:
                return edge_batch_loss(self.module, self.task, logits, batch, self.loss)  # type: ignore[arg-type]
            return StepLoss.of(self.loss, logits, batch.target, batch.global_count)  # type: ignore[arg-type]

        # sample and gather: the work spent preparing this batch; how much of it was hidden
        # behind the previous step is the epoch's prefetch_hidden_s
        prepared = Prepared(batch.t_sample, batch.t_gather, inline=waited, traffic=batch.traffic)
        return run_step(
            self,
            forward,
            prepared=prepared,
        )

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> dict[str, float]:
        """Node task: accuracies (streaming); link task: AUC/AP/MRR/Hits from summed sums."""
        if is_temporal_node(self.task):  # every split node at its node time, shared over ranks
            return sampled_temporal_node_metrics(self)
        if is_temporal(self.task):  # every query embedded at its time, shared over ranks
            return sampled_temporal_metrics(self)
        if self.link:
            return sampled_link_metrics(self)
        return super().evaluate()

    def _features(self, ids: torch.Tensor) -> torch.Tensor:
        """Input rows through the store, cast and normalised like the reference engine's."""
        # the sampled blocks' IDs come from the topology (the seeds were checked): no range check
        x = self.store.gather(ids, checked=True).to(dtype=self.dtype)  # on self.device already
        return normalize_rows(x, self.feature_norm)

    # ------------------------------------------------------------------ state
    def epoch_extra(self) -> dict[str, Any]:
        """Prefetch overlap and the store's hit rates and bytes of the last epoch, over all ranks.

        See the module docstring for the keys (for metrics.jsonl).
        """
        return dict(self._extra)

    def rank_extra(self) -> dict[str, Any]:
        """This rank's reads per source shard (XGNN's placement plan at work) and feature hit rates.

        The Trainer gathers every rank's into ``extra["per_rank"]`` of metrics.jsonl.
        """
        reads = self.store.reads_by_source()
        out: dict[str, Any] = {
            "store_reads": {str(k): dict(v) for k, v in reads.items()},
            "hit_rates": self.store.hit_rates(),
        }
        if self.edge_table is not None:
            out["edge_hit_rates"] = self.edge_table.hit_rates()
        return out

    def peak_memory(self) -> dict[str, int]:
        """Bytes this rank holds per store tier.

        Node rows, edge rows (with edge features) and the sampler's CSC replica on the device.
        """
        out = dict(self.store.memory())
        if self.edge_table is not None:
            for tier, b in self.edge_table.memory().items():
                out[tier] = out.get(tier, 0) + b
        out["device"] = out.get("device", 0) + self.replica_bytes
        return out

    def _release(self) -> None:
        """Release the store's shared memory and the store's group (after the prefetch thread)."""
        if self.edge_table is not None:
            self.edge_table.close()
        self.store.close()
        self.store_comm.destroy()
