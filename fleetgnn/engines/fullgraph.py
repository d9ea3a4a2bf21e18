"""The ``fullgraph`` engine (MGG): distributed full-graph training with a pipelined halo exchange.

Each of the ``W`` ranks owns one contiguous node range (edge-balanced by default, MGG Alg. 1; or
METIS parts relabelled contiguous) and the in-edges of its nodes, split into local and remote
edges (:mod:`fleetgnn.engines.halo`). Every layer's aggregation exchanges the remote rows in ``K``
chunked asynchronous all-to-alls, at most ``depth`` in flight, and aggregates the local edges
while they travel; the backward pass returns the halo rows' gradients to their owners the same
way (chunked reverse all-to-alls overlapped with the local backward). Parameters are
replicated; after the backward pass gradients are summed over ranks with one all-reduce (no DDP,
so the halo all-to-alls of the backward pass never race with gradient buckets on the same group).

Loss scaling: rank ``r``'s loss is the sum of its training nodes' cross-entropy divided by the
GLOBAL number of training nodes; the all-reduce SUMS gradients, so the update equals the gradient
of the mean loss over all training nodes, exactly what the reference engine's full mode computes.

Online tuning (MGG Sec. 4): with ``tune=True`` every epoch is one trial of ``(K, depth)`` chosen by
:class:`GreedyTuner` from the slowest rank's epoch time; after the search settles (at most
``max_trials`` epochs) the best configuration of its lookup table is used. The search's state is
part of the engine's checkpoint, so a resumed run continues it (same trials, same best) and ends
bit-identical to the uninterrupted run, given the same latencies.

Per-epoch stats (``epoch_extra()``): ``comm_s`` / ``wait_s`` / ``compute_s`` of the exchanges,
forward and pipelined backward (see :class:`~fleetgnn.engines.halo.ExchangeTimes`),
``hidden_fraction = 1 - wait_s / comm_s`` (share of communication time overlapped with
aggregation, both directions; 0 when unpipelined), ``exchanges`` / ``backward_exchanges`` (chunk
all-to-alls issued by the forward and by the pipelined backward), the volumes of
the forward exchanges (``volume_mgg_bytes``: one row per remote edge, as MGG fetches;
``volume_dedup_bytes``: one row per unique remote source, what is sent; ``dedup_saving`` =
``1 - dedup / mgg``), the chunking and the tuner state.

Memory per rank: the owned features ``[M, F]``, the topology of the owned in-edges (int32 IDs
and positions while ``N < 2**31``), at most two aggregators (the current ``(K, depth)`` and the
tuner's best; trials that lost are released), the halo buffers of one layer (``H`` rows) and the
activations of the owned rows for every layer. ``peak_memory()`` (the ``memory`` of
``metrics.jsonl``) reports what the process holds: ``device``, the bytes of every tensor and
array of the rank's state (features, labels and masks, layout, plans, aggregators, parameters,
gradients, optimizer state; each buffer once, memory maps left out; the largest seen at a step
end), on its device (``host``: the CPU-resident part when the device is a GPU); ``rss_anon``, the
largest anonymous RSS seen at a step end, and ``rss_peak``, the process's peak RSS (``VmHWM``,
file-backed pages of the mapped dataset included), both read from ``/proc/self/status`` where it
exists. ``epoch_extra()["held_bytes"]`` splits ``device`` by part.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from fleetgnn.config import FullGraphEngineConfig
from fleetgnn.distributed import DistContext
from fleetgnn.engines.base import DistributedEngine, FullGraphEngineBase, StepStats
from fleetgnn.engines.common import (
    HeldBytes,
    LossFn,
    autocast_dtype,
    node_labels,
    normalize_rows,
    process_memory,
    setup_distributed,
    setup_model,
    split_metrics,
    stored_values,
)
from fleetgnn.engines.edges import EdgeRows, needs_edge_attr
from fleetgnn.engines.halo import (
    HaloAggregator,
    HaloPlan,
    RankLayout,
    build_layout,
    build_plan,
    exchange_need_lists,
)
from fleetgnn.engines.link import OwnedPairs, check_link_model, owned_link_metrics, setup_task
from fleetgnn.engines.step import StepLoss, run_step
from fleetgnn.errors import ConfigError
from fleetgnn.graph import Graph
from fleetgnn.graph.compact_rows import applied_feature_dtype
from fleetgnn.nn import check_model
from fleetgnn.partition.chunks import contiguous_book
from fleetgnn.tasks import Task


# ---------------------------------------------------------------------------------- tuner
@dataclasses.dataclass(frozen=True)
class TunerSpace:
    """Candidate values of the two knobs, each sorted ascending.

    Attributes:
        chunks: Values of ``K`` (halo chunks per exchange; MGG's partition size analogue).
        depth: Values of the overlap depth (chunks in flight; MGG's interleave distance).
    """

    chunks: tuple[int, ...] = (1, 2, 4, 8, 16)
    depth: tuple[int, ...] = (1, 2, 3, 4)

    def __post_init__(self) -> None:
        for name, vals in (("chunks", self.chunks), ("depth", self.depth)):
            lo = 1 if name == "chunks" else 0
            if not vals or list(vals) != sorted(set(vals)) or min(vals) < lo:
                raise ConfigError(
                    f"TunerSpace '{name}' must be distinct ascending ints >= {lo} (got {vals})"
                )


class GreedyTuner:
    """MGG's online greedy search over ``(K, depth)``; one trial per iteration.

    Start at the smallest ``K`` and ``depth``; grow ``K`` while the latency falls, keep the best
    ``K``; then grow ``depth`` the same way; then stop. Every measured configuration enters a
    lookup table and :attr:`best` is its argmin (ties: the first measured). At most
    ``len(chunks) + len(depth) - 1`` trials, capped by ``max_trials``.

    Deterministic: the same latencies give the same trials and the same result. In a distributed
    job feed every rank the same latency (e.g. the slowest rank's) so all ranks agree.

    Args:
        space: Candidate values.
        max_trials: Cap on trials (>= 1).
    """

    def __init__(self, space: TunerSpace | None = None, max_trials: int = 10) -> None:
        if isinstance(max_trials, bool) or not isinstance(max_trials, int) or max_trials < 1:
            raise ConfigError(f"'max_trials' must be a positive int (got {max_trials!r})")
        self.space = space or TunerSpace()
        self.max_trials = max_trials
        self.table: dict[tuple[int, int], float] = {}
        self._order: list[tuple[int, int]] = []
        self._phase = 0  # 0: growing K, 1: growing depth, 2: done
        self._ki = 0
        self._di = 0
        self._phase_best = float("inf")

    @property
    def done(self) -> bool:
        """Whether the search has settled."""
        return self._phase >= 2 or len(self.table) >= self.max_trials

    @property
    def best(self) -> tuple[int, int]:
        """The argmin of the lookup table (the first candidate before any trial)."""
        if not self.table:
            return self.space.chunks[0], self.space.depth[0]
        return min(self._order, key=lambda c: self.table[c])

    def propose(self) -> tuple[int, int]:
        """The configuration to measure next (:attr:`best` once :attr:`done`)."""
        if self.done:
            return self.best
        return self.space.chunks[self._ki], self.space.depth[self._di]

    def report(self, config: tuple[int, int], latency: float) -> None:
        """Record the latency of ``config`` (a proposed one) and advance the search."""
        config, latency = (int(config[0]), int(config[1])), float(latency)
        if config not in self.table:
            self.table[config] = latency
            self._order.append(config)
        if self.done or config != (self.space.chunks[self._ki], self.space.depth[self._di]):
            return
        improved = latency < self._phase_best
        if improved:
            self._phase_best = latency
        if self._phase == 0:
            if improved and self._ki + 1 < len(self.space.chunks):
                self._ki += 1
                return
            self._ki = self.space.chunks.index(self.best[0])
            self._phase = 1
            self._phase_best = self.table[self.best]
            self._di = self.space.depth.index(self.best[1])
            if self._di + 1 < len(self.space.depth):
                self._di += 1
                return
            self._phase = 2
            return
        if improved and self._di + 1 < len(self.space.depth):
            self._di += 1
            return
        self._phase = 2

    def state_dict(self) -> dict[str, Any]:
        """The search's position and lookup table (plain Python values, for a checkpoint).

        A run restored from it (:meth:`load_state_dict`) proposes what the uninterrupted run
        would have: the same trials, then the same best configuration.
        """
        return {
            "space": {"chunks": list(self.space.chunks), "depth": list(self.space.depth)},
            "max_trials": self.max_trials,
            "trials": [[k, d, self.table[(k, d)]] for k, d in self._order],
            "phase": self._phase,
            "chunk_index": self._ki,
            "depth_index": self._di,
            "phase_best": float(self._phase_best),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue the search recorded by :meth:`state_dict`.

        Raises:
            ConfigError: The state was searched over other candidates or another trial cap (the
                config changed); the tuner is left as it was.
            ValueError: The state is malformed.
        """
        space = state["space"]
        saved = (tuple(int(v) for v in space["chunks"]), tuple(int(v) for v in space["depth"]))
        if saved != (self.space.chunks, self.space.depth) or int(state["max_trials"]) != (
            self.max_trials
        ):
            raise ConfigError(
                f"the checkpoint's tuner searched chunks {list(saved[0])} and depths "
                f"{list(saved[1])} with at most {int(state['max_trials'])} trials, this run "
                f"chunks {list(self.space.chunks)} and depths {list(self.space.depth)} with at "
                f"most {self.max_trials}; resume with the original fullgraph.tuner_* settings"
            )
        order = [(int(k), int(d)) for k, d, _ in state["trials"]]
        table = {(int(k), int(d)): float(t) for k, d, t in state["trials"]}
        phase, ki, di = int(state["phase"]), int(state["chunk_index"]), int(state["depth_index"])
        if (
            len(table) != len(order)
            or any(k not in saved[0] or d not in saved[1] for k, d in order)
            or not 0 <= phase <= 2
            or not 0 <= ki < len(saved[0])
            or not 0 <= di < len(saved[1])
        ):
            raise ValueError(f"malformed tuner state {dict(state)!r:.200}")
        self.table, self._order = table, order
        self._phase, self._ki, self._di = phase, ki, di
        self._phase_best = float(state["phase_best"])

    def __repr__(self) -> str:
        return f"GreedyTuner(trials={len(self.table)}, best={self.best}, done={self.done})"


# ---------------------------------------------------------------------------------- memory
def release_freed_memory() -> None:
    """Return the C heap's free memory to the system (glibc ``malloc_trim``; elsewhere nothing).

    The index arrays of an evicted aggregator are freed into the heap, where glibc keeps them
    (its mmap threshold grows after the first large free), so RSS would not fall without this.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


# ---------------------------------------------------------------------------------- engine
class FullGraphEngine(FullGraphEngineBase, DistributedEngine):
    """Distributed full-graph training with MGG's chunked, overlapped halo exchange.

    Args:
        model: A layer-wise model (see :mod:`fleetgnn.nn.protocol`); moved to this rank's device
            and the config's dtype; rank 0's parameters are broadcast to every rank.
        graph: The dataset in its original numbering (memory maps are fine: each rank reads its
            own slice of the topology and features).
        ctx: This process's :class:`~fleetgnn.distributed.DistContext` (``None``:
            :func:`~fleetgnn.distributed.init` from the environment).
        config: A :class:`~fleetgnn.config.FullGraphEngineConfig`: ``partition`` (``"range"``,
            MGG's edge-balanced contiguous ranges, or ``"metis"``, parts relabelled contiguous;
            dropout keys and ``edge_ids`` use the ORIGINAL node IDs, so both give the reference
            engine's trajectory), ``num_chunks`` ``K`` and ``depth`` (``None``: tuned online
            with :class:`GreedyTuner` when ``tune``, else 1; a single rank exchanges nothing and
            is never tuned), the tuner's candidates, ``overlap_backward`` (pipeline the halo
            exchange of the backward pass too; ``False``: one synchronous transposed exchange
            per chunk, same gradients).
        optimizer: Over ``model``'s parameters (``None``: Adam, lr 0.01).
        loss: Per-node loss ``loss(logits, target) -> [B]`` (``None``: cross-entropy; for a
            link task, the task's pair loss).
        task: What to train (``None``: node classification). A
            :class:`~fleetgnn.tasks.LinkPrediction` runs on its split's message-passing graph;
            each rank scores the training pairs whose source it owns, the other endpoints'
            rows fetched from their owners once per step (differentiably; see
            :class:`~fleetgnn.engines.link.OwnedPairs`).
    """

    name = "fullgraph"

    def __init__(
        self,
        model: torch.nn.Module,
        graph: Graph,
        ctx: DistContext | None = None,
        config: FullGraphEngineConfig | None = None,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        loss: LossFn | None = None,
        task: Task | None = None,
    ) -> None:
        check_model(model, self.name)
        graph, loss = setup_task(self, "full", task, graph, loss)
        if self.link:
            check_link_model(model)
        dist = setup_distributed(self.name, graph, config, FullGraphEngineConfig, ctx, self.task)
        super().__init__(dist, graph)  # config, ctx, rank, device, clock, comm ...
        fc: FullGraphEngineConfig = dist.config
        # ---- partition + layout (timed: MGG's preprocessing)
        t0 = self.clock()
        # METIS (if asked) runs on rank 0 only; each rank then reads its own part of the graph
        self.book = contiguous_book(graph, fc.partition, self.world_size, self.seed, comm=self.comm)
        identity = fc.partition == "range"
        self.orig_ids: np.ndarray | None = None if identity else np.asarray(self.book.perm)
        g = graph if identity else self.book.part_graph(graph, self.rank)
        self.layout: RankLayout = build_layout(g, np.asarray(self.book.offsets), self.rank)
        # edge features of the owned nodes' in-edges, in the layout's (CSC) order: an edge is
        # its destination's, so they are this rank's rows of the (relabelled) graph
        self.edge_attr: torch.Tensor | None = None
        if needs_edge_attr(model):
            lay = self.layout
            rows = EdgeRows(g, self.dtype, self.device, feature_dtype=fc.edge_feature_dtype)
            self.edge_attr = rows.rows(torch.arange(int(g.indptr[lay.lo]), int(g.indptr[lay.hi])))
        del g
        self._send_rows, self._send_counts = exchange_need_lists(self.layout, self.comm)
        self.preprocess_s = self.clock() - t0
        lo, hi = self.layout.lo, self.layout.hi
        # ---- node data of the owned range (rows perm[lo:hi] of the dataset's arrays)
        own = self.book.part_rows(graph, self.rank)
        stored = applied_feature_dtype(graph.x, fc.feature_dtype)  # as the dataset stores them
        x = stored_values(torch.from_numpy(own.x), stored)  # type: ignore[arg-type]
        self.x = normalize_rows(x.to(self.dtype), fc.feature_norm).to(self.device)
        # the labels, masks and training rows the task reads (none for link prediction)
        labels = node_labels(self.task, graph, self.device, rows=own)
        del own
        self.y, self.masks = labels.y, labels.masks
        self.train_idx = labels.train.to(self.device)
        self.global_train = labels.num_train
        self.module = setup_model(self, model, optimizer, loss)
        self.model = self.module
        if self.link:
            offsets = torch.from_numpy(np.asarray(self.book.offsets, dtype=np.int64))
            inv = None if identity else np.asarray(self.book.inv_perm)
            self.pairs = OwnedPairs(self.task, inv, offsets, self.rank)  # type: ignore[arg-type]
            self.own_ids = (
                torch.arange(lo, hi)
                if identity
                else torch.from_numpy(np.asarray(self.book.perm[lo:hi], dtype=np.int64))
            )
        self.comm_stream = torch.cuda.Stream() if self.device.type == "cuda" else None
        # ---- knobs
        num_chunks, depth = fc.num_chunks, fc.depth
        self.tuner: GreedyTuner | None = None
        if fc.tune and self.world_size > 1 and (num_chunks is None or depth is None):
            space = TunerSpace(
                chunks=(num_chunks,) if num_chunks is not None else fc.tuner_chunks,
                depth=(depth,) if depth is not None else fc.tuner_depths,
            )
            self.tuner = GreedyTuner(space)
        self.num_chunks = 1 if num_chunks is None else int(num_chunks)
        self.depth = 1 if depth is None else int(depth)
        self.overlap_backward = bool(fc.overlap_backward)
        self._plans: dict[int, HaloPlan] = {}
        self._aggs: dict[tuple[int, int], HaloAggregator] = {}
        self._extra: dict[str, Any] = {}
        self._memory: dict[str, int] = {}
        self._held: dict[str, int] = {}

    # ------------------------------------------------------------------ layout
    def plan(self, num_chunks: int) -> HaloPlan:
        """The halo plan for ``num_chunks`` chunks (built once per ``K``; collective)."""
        if num_chunks not in self._plans:
            self._plans[num_chunks] = build_plan(
                self.layout, self._send_rows, self._send_counts, num_chunks, self.comm
            )
        return self._plans[num_chunks]

    def aggregator(self, num_chunks: int | None = None, depth: int | None = None) -> HaloAggregator:
        """The rank's aggregator for ``(K, depth)`` (defaults: the current knobs; cached).

        At most two aggregators are held: the one asked for and the tuner's best so far. Every
        other cached aggregator (a tuner trial that lost) and every plan neither of the two uses
        are released first, so a tuned run holds at most two aggregators and two plans, not one
        per trial, and one of each once the search has settled. Rebuilding an evicted
        configuration gives identical structures (the build is deterministic); every rank
        evicts alike (the tuner sees the same latencies on every rank), so the collective plan
        builds stay matched.
        """
        key = (
            self.num_chunks if num_chunks is None else int(num_chunks),
            self.depth if depth is None else int(depth),
        )
        self._evict(keep=key)
        if key not in self._aggs:
            self._aggs[key] = HaloAggregator(
                self.layout,
                self.plan(key[0]),
                self.comm if self.world_size > 1 else None,
                orig_ids=self.orig_ids,
                depth=key[1],
                dtype=self.dtype,
                device=self.device,
                comm_stream=self.comm_stream,
                overlap_backward=self.overlap_backward,
                wire_dtype=autocast_dtype(self.config),
                edge_attr=self.edge_attr,
            )
        return self._aggs[key]

    def _evict(self, keep: tuple[int, int]) -> None:
        """Drop cached aggregators other than ``keep`` and the tuner's best, and unused plans."""
        best = self.tuner.best if self.tuner is not None and self.tuner.table else keep
        drop = [k for k in self._aggs if k not in (keep, best)]
        for key in drop:
            del self._aggs[key]
        chunks = {keep[0]} | {k[0] for k in self._aggs}
        for k in [c for c in self._plans if c not in chunks]:
            del self._plans[k]
        if drop:
            release_freed_memory()

    # ------------------------------------------------------------------ training

    def train_step(self, epoch: int) -> StepStats:
        """Forward, backward, gradient all-reduce and optimizer step over the whole graph."""
        if self.tuner is not None:
            self.num_chunks, self.depth = self.tuner.propose()
        agg = self.aggregator()
        agg.times.reset()
        times = agg.times

        def forward() -> StepLoss:
            logits = self.module([agg] * self.num_layers, self.x, step=epoch)
            if self.link:  # one step per epoch: negatives keyed by the epoch
                comm = self.comm if self.world_size > 1 else None
                return self.pairs.loss(self.module, comm, logits, self.loss, epoch)
            logits_t = logits.index_select(0, self.train_idx)
            target = self.y.index_select(0, self.train_idx)
            return StepLoss.of(self.loss, logits_t, target, self.global_train)

        stats = run_step(
            self,
            forward,
            hidden_comm=lambda: times.wait_s,  # the halo exchange's unhidden waits
        )
        latency = stats.times["total"]
        tuned: dict[str, Any] = {}
        if self.tuner is not None and not self.tuner.done:
            slowest = max(self.comm.all_gather_object(latency)) if self.world_size > 1 else latency
            self.tuner.report((self.num_chunks, self.depth), slowest)
            tuned = {"tuner_trial_s": slowest}
            self._evict(keep=(self.num_chunks, self.depth))  # the best so far may have lost
        mgg, dedup = times.mgg_bytes, times.dedup_bytes
        self._extra = {
            "num_chunks": self.num_chunks,
            "depth": self.depth,
            "comm_s": times.comm_s,
            "wait_s": times.wait_s,
            "compute_s": times.compute_s,
            "grad_allreduce_s": stats.times["communication"] - times.wait_s,
            "hidden_fraction": times.hidden_fraction,
            "exchanges": times.exchanges,
            "backward_exchanges": times.backward_exchanges,
            "volume_mgg_bytes": mgg,
            "volume_dedup_bytes": dedup,
            "dedup_saving": 1.0 - dedup / mgg if mgg else 0.0,
            "remote_edges": self.layout.num_remote_edges,
            "local_edges": self.layout.num_local_edges,
            "halo_rows": self.layout.num_halo,
            "preprocess_s": self.preprocess_s,
            **tuned,
        }
        if self.tuner is not None:
            self._extra["tuner"] = {
                "done": self.tuner.done,
                "best": list(self.tuner.best),
                "trials": len(self.tuner.table),
            }
        self._measure_memory()
        return stats

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def infer(self) -> torch.Tensor:
        """Logits of the owned nodes (eval mode, full neighbourhoods; collective)."""
        self.module.eval()
        try:
            agg = self.aggregator()
            return self.module([agg] * self.num_layers, self.x)
        finally:
            self.module.train()

    def evaluate(self) -> dict[str, float]:
        """Accuracy per split and validation loss, summed over ranks (numerators/denominators)."""
        logits = self.infer()
        reduce = self.comm.all_reduce_sum if self.world_size > 1 else None
        if self.link:  # each rank scores the pairs whose source it owns
            comm = self.comm if self.world_size > 1 else None
            with torch.no_grad():
                return owned_link_metrics(
                    self.task,  # type: ignore[arg-type]
                    self.module.decoder,
                    comm,
                    logits,
                    self.pairs.offsets,
                    self.pairs.inv,
                )
        return split_metrics(logits, self.y, self.masks, reduce)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Model and optimizer state (identical on every rank), the knobs and the tuner's search.

        With the search in the checkpoint a resumed run makes the uninterrupted run's choices
        instead of searching afresh.
        """
        state = {**super().state_dict(), "knobs": [self.num_chunks, self.depth]}
        if self.tuner is not None:
            state["tuner"] = self.tuner.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`.

        A checkpoint without a tuner state, or one searched over other candidates (a warning),
        starts a fresh search.
        """
        super().load_state_dict(state)
        if self.tuner is not None and state.get("tuner") is not None:
            try:
                self.tuner.load_state_dict(state["tuner"])
            except ConfigError as e:  # the candidates changed: a fresh search is still valid
                if self.rank == 0:
                    warnings.warn(f"{e}; the tuner searches afresh", stacklevel=2)
        knobs: Sequence[int] = state.get("knobs", (self.num_chunks, self.depth))
        self.num_chunks, self.depth = int(knobs[0]), int(knobs[1])

    def epoch_extra(self) -> dict[str, Any]:
        """Exchange timing, hidden fraction, volumes, knobs and held bytes of the last epoch."""
        return {**self._extra, "held_bytes": dict(self._held)}

    def held_bytes(self) -> dict[str, int]:
        """Bytes of the state this rank holds now, by part (each buffer counted once).

        Parts: ``features`` (owned ``x``, labels, masks, training rows), ``layout`` (the
        :class:`~fleetgnn.engines.halo.RankLayout` and the send lists), ``plans`` (the cached
        halo plans), ``aggregators`` (the cached aggregators' index structures, degrees and
        cached transposes, beyond the layout and plans), ``model`` (parameters, gradients,
        optimizer state), and ``aggregators_held`` (how many). Memory maps are left out.
        Activations and autograd buffers live only during a step and are not included
        (``rss_anon``/``rss_peak`` of :meth:`peak_memory` see them).
        """
        return self._held_parts()[0]

    def _held_parts(self) -> tuple[dict[str, int], int]:
        """:meth:`held_bytes` (plus ``aggregators_held``) and the CPU-resident bytes of it."""
        held = HeldBytes()
        opt_state = list(self.optimizer.state.values())
        params = list(self.module.parameters())
        parts = {
            "features": held.add(self.x, self.y, self.masks, self.train_idx, self.orig_ids),
            "layout": held.add(self.layout, self._send_rows, self._send_counts),
            "plans": held.add(self._plans),
            "aggregators": held.add(self._aggs),
            "model": held.add(params, [p.grad for p in params], opt_state),
        }
        parts["aggregators_held"] = len(self._aggs)
        return parts, held.by_device.get("cpu", 0)

    def _measure_memory(self) -> None:
        """Fold the held bytes and the process's RSS now into the run's maxima."""
        parts, cpu = self._held_parts()
        live = sum(v for k, v in parts.items() if k != "aggregators_held")
        now = {"device": live} if self.device.type == "cpu" else {"device": live - cpu, "host": cpu}
        now.update(process_memory())
        for key, value in now.items():
            self._memory[key] = max(self._memory.get(key, 0), int(value))
        if live >= sum(v for k, v in self._held.items() if k != "aggregators_held"):
            self._held = parts

    def peak_memory(self) -> dict[str, int]:
        """What this rank holds: its state's bytes and the process's RSS (see the module doc).

        ``device``: the largest (over step ends) bytes of the rank's state on its device
        (:meth:`held_bytes`, every part; before this change it counted only ``x`` and three
        layout arrays); ``host``: the CPU-resident part when the device is a GPU; ``rss_anon``:
        the largest anonymous RSS at a step end; ``rss_peak``: the peak RSS of the process
        (``VmHWM``, including file-backed pages of the mapped dataset). The RSS keys are left
        out where ``/proc/self/status`` does not exist.
        """
        self._measure_memory()
        return dict(self._memory)

    def rank_extra(self) -> dict[str, Any]:
        """This rank's :meth:`peak_memory` (gathered into ``extra["per_rank"]["memory"]``)."""
        return {"memory": self.peak_memory()}

    def close(self) -> None:
        """Release cached aggregators (nothing else is held)."""
        self._aggs.clear()
        self._plans.clear()

    def __repr__(self) -> str:
        return (
            f"FullGraphEngine(rank={self.rank}/{self.world_size}, layout={self.layout!r}, "
            f"num_chunks={self.num_chunks}, depth={self.depth})"
        )
