"""What a plan is for and what it says: the model's shape, the workload, one engine's prediction.

The types every cost model shares (:mod:`fleetgnn.cost.models` for the engines' epochs,
:mod:`fleetgnn.cost.store_model` for the feature cache), kept apart from both so that neither
imports the other to name them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from fleetgnn.config.knobs import FEATURE_DTYPES
from fleetgnn.errors import ConfigError
from fleetgnn.graph import Graph
from fleetgnn.graph.compact import feature_codec
from fleetgnn.graph.compact_rows import CompactRows
from fleetgnn.nn import build_model
from fleetgnn.nn.gat_conv import GATConv
from fleetgnn.nn.gcn_conv import GCNConv
from fleetgnn.nn.sage_conv import SAGEConv
from fleetgnn.sampling import SeedLoader
from fleetgnn.store.edge_table import edge_row_bytes
from fleetgnn.store.tiers import feature_row_bytes

__all__ = [
    "IDX_BYTES",
    "ModelShape",
    "NodeTimeSeeds",
    "Prediction",
    "TemporalSeeds",
    "Workload",
]

#: Bytes of one int64 index.
IDX_BYTES = 8


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """What the cost models need of a model: widths, heads, aggregation widths, parameters.

    Attributes:
        name: ``gcn``, ``sage``, ``gin``, ``gine`` or ``gat``.
        widths: ``[F, w_1, ..., C]``: each layer's input and output widths (GAT: heads x width).
        agg_widths: Width of the tensor each layer aggregates (what crosses edges).
        heads: Attention heads per layer (1 for other models).
        grad_through_agg: Per layer, whether the aggregated tensor needs a gradient (then the
            backward pass exchanges it too).
        cacheable: Per layer, whether the aggregation has no parameters (offload's hybrid).
        params: Number of parameters.
        elem: Bytes per element (4: float32, 8: float64).
        param_tensors: Number of parameter tensors (the optimizer's fixed cost is per tensor).
        edge_dim: Width ``D`` of the edge features the layers read (``gine``; 0: none).
    """

    name: str
    widths: tuple[int, ...]
    agg_widths: tuple[int, ...]
    heads: tuple[int, ...]
    grad_through_agg: tuple[bool, ...]
    cacheable: tuple[bool, ...]
    params: int
    elem: int = 4
    param_tensors: int = 0
    edge_dim: int = 0

    @property
    def tensors(self) -> int:
        """Parameter tensors the optimizer steps (two per layer when not recorded)."""
        return self.param_tensors or 2 * self.num_layers

    @property
    def num_layers(self) -> int:
        """Number of layers ``L``."""
        return len(self.widths) - 1

    @classmethod
    def build(
        cls, name: str, in_dim: int, classes: int, elem: int = 4, **kwargs: Any
    ) -> ModelShape:
        """The shape of :func:`~fleetgnn.nn.build_model` ``(name, in_dim, classes, **kwargs)``.

        A model that reads edge features (``gine``) takes their width as ``edge_dim``.
        """
        model = build_model(name, in_dim, classes, **kwargs)
        widths, aggw, heads, grad = [in_dim], [], [], []
        for i, conv in enumerate(model.convs):
            w_in = widths[-1]
            if isinstance(conv, GATConv):
                out, h = conv.out_width, conv.heads
                aggw.append(out)  # transformed rows cross edges, with their attention
                heads.append(h)
                grad.append(True)
            else:
                out = conv.out_channels
                heads.append(1)
                narrow = out < w_in
                if isinstance(conv, (GCNConv, SAGEConv)):
                    aggw.append(out if narrow else w_in)
                    grad.append(i > 0 or narrow)  # transformed first: parameters behind it
                else:  # GIN aggregates its input
                    aggw.append(w_in)
                    grad.append(i > 0)
            widths.append(out)
        return cls(
            name=name,
            widths=tuple(widths),
            agg_widths=tuple(aggw),
            heads=tuple(heads),
            grad_through_agg=tuple(grad),
            cacheable=tuple(bool(model.cacheable_aggregation(i)) for i in range(len(aggw))),
            params=sum(p.numel() for p in model.parameters()),
            elem=elem,
            param_tensors=len(list(model.parameters())),
            edge_dim=int(kwargs.get("edge_dim") or 0) if model.needs_edge_attr else 0,
        )

    def forward_flops(self, nodes: float, edges: float) -> tuple[float, float]:
        """``(spmm edge-features, gemm flops)`` of one forward pass over ``nodes``/``edges``."""
        spmm = gemm = 0.0
        for i in range(self.num_layers):
            w_in, w_out = self.widths[i], self.widths[i + 1]
            spmm += edges * self.agg_widths[i] * (2 if self.heads[i] > 1 else 1)
            gemm += 2.0 * nodes * w_in * w_out * (2 if self.mlp else 1)
            gemm += 2.0 * edges * self.edge_dim * w_in  # GINE's edge projection
        return spmm, gemm

    @property
    def mlp(self) -> bool:
        """Whether each layer's transform is GIN's two-layer MLP (``gin``, ``gine``)."""
        return self.name in ("gin", "gine")

    def edge_gemm_layers(self, edges: float) -> list[tuple[float, int]]:
        """``(flops, output width)`` of each layer's edge projection over ``edges`` (GINE).

        ``W_e`` maps every edge's ``D`` features onto the layer's input width; empty when the
        model reads no edge features.
        """
        if not self.edge_dim:
            return []
        return [
            (2.0 * edges * self.edge_dim * self.widths[i], int(self.widths[i]))
            for i in range(self.num_layers)
        ]

    def gemm_layers(self, nodes: float) -> list[tuple[float, int]]:
        """``(flops, output width)`` of each layer's dense transform over ``nodes`` rows."""
        return [
            (
                2.0 * nodes * self.widths[i] * self.widths[i + 1] * (2 if self.mlp else 1),
                int(self.widths[i + 1]),
            )
            for i in range(self.num_layers)
        ]

    def activation_bytes(self, nodes: float, edges: float) -> float:
        """Autograd's saved activations of one forward pass (per node and per edge terms)."""
        per_layer = 0.0
        for i in range(self.num_layers):
            w_in, w_out = self.widths[i], self.widths[i + 1]
            per_layer += nodes * (2 * w_in + 3 * w_out) * self.elem  # dropout mask, input, out
            if self.heads[i] > 1:
                per_layer += edges * self.heads[i] * 4 * self.elem  # scores, softmax, dropout
        return per_layer + edges * IDX_BYTES * 2  # the topology and its transpose


@runtime_checkable
class TemporalSeeds(Protocol):
    """A temporal task's training seeds, each with the time its subtree is sampled at.

    What the replay (:mod:`fleetgnn.cost.replay`) draws in place of a
    :class:`~fleetgnn.sampling.SeedLoader`'s nodes: the seeds of a step exactly as the engines
    hand them to their :class:`~fleetgnn.sampling.TemporalSampler`.

    Attributes:
        kind: ``"node"`` (each training node at its node time) or ``"link"`` (both endpoints
            and the negatives of every positive at the positive's time).
        graph: The graph the engines sample, with its ``edge_time`` (node: the dataset; link:
            the time split's training graph).
        strategy: The temporal sampler's strategy, ``"uniform"`` or ``"last"``.
        num_items: Training items per epoch: nodes (node) or positive edges (link).
    """

    kind: str
    graph: Graph
    strategy: str

    @property
    def num_items(self) -> int:
        """Training items per epoch: nodes (node) or positive edges (link)."""
        ...

    def num_steps(self, batch_size: int, world: int) -> int:
        """Steps per epoch with ``batch_size`` items (nodes or positives) per rank."""
        ...

    def seeds(
        self, batch_size: int, rank: int, world: int, epoch: int, step: int
    ) -> tuple[Tensor, Tensor]:
        """Rank ``rank``'s seeds of ``(epoch, step)`` and their times (int64 ``[B]`` each)."""
        ...


@dataclasses.dataclass(frozen=True)
class NodeTimeSeeds:
    """:class:`TemporalSeeds` of temporal node classification: each training node at its time.

    The engines' draw (:func:`~fleetgnn.engines.temporal_node.node_blocks`): rank ``r`` of
    ``W`` takes its :class:`~fleetgnn.sampling.SeedLoader` slots of the training nodes
    (``seed``: the run's), each seeded at ``graph.node_time``.
    """

    graph: Graph
    seed: int = 0
    strategy: str = "uniform"
    kind: str = "node"

    @property
    def num_items(self) -> int:
        """Training nodes."""
        return int(np.count_nonzero(np.asarray(self.graph.train_mask)))

    def _loader(self, batch_size: int, rank: int, world: int) -> SeedLoader:
        train = torch.from_numpy(np.flatnonzero(np.asarray(self.graph.train_mask)))
        return SeedLoader(train, batch_size, rank=rank, world_size=world, seed=self.seed)

    def num_steps(self, batch_size: int, world: int) -> int:
        """Steps per epoch (equal on every rank)."""
        return self._loader(batch_size, 0, world).num_batches

    def seeds(
        self, batch_size: int, rank: int, world: int, epoch: int, step: int
    ) -> tuple[Tensor, Tensor]:
        """The training nodes of rank ``rank``'s step and their node times."""
        ids = self._loader(batch_size, rank, world).batch(epoch, step)
        times = np.asarray(self.graph.node_time)[ids.numpy()]
        return ids, torch.from_numpy(np.asarray(times, dtype=np.int64))


@dataclasses.dataclass(frozen=True)
class Workload:
    """The graph and the training setup a plan is for.

    Attributes:
        num_nodes: ``N``.
        num_edges: ``E``.
        num_features: ``F``.
        num_classes: ``C``.
        num_train: Training nodes.
        model: The model's shape.
        batch_size: Seeds per step (mini-batch engines): per rank for ``minibatch`` (its
            ``SeedLoader`` slots), the global batch for ``split``.
        fanouts: Sampled neighbours per layer (mini-batch engines).
        graph: The dataset itself, for exact counts (``None``: modelled from the counts).
        source: Where the numbers come from (stated in reports).
        typed: The graph is typed (node and edge types): only the engines whose registry entry
            says ``typed`` are planned for (the counts are those of its homogeneous view).
        task: ``"node"`` (classification) or ``"link"`` (link prediction: ``num_train`` is
            then the training edges, ``batch_size`` edges per step, ``model``'s last width
            the embeddings' ``train.link_dim``).
        negatives: Negatives per positive (link).
        decoder: The pair decoder (link): ``dot``, ``mlp`` or ``distmult``.
        feature_norm: ``data.feature_norm`` resolved (``"row"``: the sampled engines normalise
            each batch's input rows, a pass over them a step).
        feature_dtype: ``store.feature_dtype``: the dtype the store's tiers hold feature rows
            in (:mod:`fleetgnn.graph.compact`; ``None``: as the dataset stores them). Store
            bytes (tiers, gathered traffic) count :meth:`feature_row_bytes`; the model's input
            rows stay ``model.elem`` bytes wide (the gather reads them back).
        temporal: The task samples in time (``None``: it does not): the mini-batch replays
            draw its seeds at their times with a :class:`~fleetgnn.sampling.TemporalSampler`
            over ``temporal.graph`` (disjoint per-seed subtrees), and the sampling is priced at
            the profile's ``temporal_sample_rate``.
        edge_feature_dtype: ``store.edge_feature_dtype``: the dtype the store's edge table holds
            edge rows in (``None``: as the dataset stores them). Only read when the model reads
            edge features (``model.edge_dim``): then every engine counts the edge rows
            (:meth:`edge_row_bytes` in the store's tiers and reads; the compute width in the
            full-graph engines, which hold the read-back values).
        edge_share: ``store.edge_share``: the edge rows' fraction of each store tier
            (``None``: in proportion to the bytes of node and edge rows, as
            :func:`~fleetgnn.store.edge_table.split_budgets` splits them).
    """

    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int
    num_train: int
    model: ModelShape
    batch_size: int = 1024
    fanouts: tuple[int, ...] = (10, 10)
    graph: Graph | None = None
    source: str = ""
    typed: bool = False
    task: str = "node"
    negatives: int = 1
    decoder: str = "dot"
    feature_norm: str = "none"
    feature_dtype: str | None = None
    temporal: TemporalSeeds | None = None
    edge_feature_dtype: str | None = None
    edge_share: float | None = None

    def __post_init__(self) -> None:
        for key in ("feature_dtype", "edge_feature_dtype"):
            name = getattr(self, key)
            if name is not None and name not in FEATURE_DTYPES:
                raise ConfigError(
                    f"workload {key} {name!r} is not a stored feature dtype; choose one of "
                    f"{', '.join(FEATURE_DTYPES)}, or None (as the dataset stores them)"
                )

    @property
    def edge_dim(self) -> int:
        """Width ``D`` of the edge rows the model reads (0: it reads none)."""
        return int(self.model.edge_dim)

    def edge_row_bytes(self) -> int:
        """Bytes of one edge row as the store's edge table holds it (0: no edge rows).

        With a dataset that has ``edge_attr``,
        :func:`~fleetgnn.store.edge_table.edge_row_bytes` (its dtype, or
        ``edge_feature_dtype``'s compact row); from the counts, ``D`` float32 elements (what
        ``prepare`` writes) or the compact row of ``edge_feature_dtype``.
        """
        d = self.edge_dim
        if not d:
            return 0
        if self.graph is not None and self.graph.edge_attr is not None:
            return edge_row_bytes(self.graph, self.edge_feature_dtype)
        codec = feature_codec(self.edge_feature_dtype)
        return codec.row_bytes(d) if codec is not None else 4 * d

    def edge_rows_text(self) -> str:
        """How the store holds an edge row, in words (``""`` when the model reads none)."""
        if not self.edge_dim:
            return ""
        row = self.edge_row_bytes()
        if self.edge_feature_dtype is not None:
            stored = f"{self.edge_feature_dtype} (store.edge_feature_dtype)"
        elif self.graph is not None and self.graph.edge_attr is not None:
            stored = f"the dataset's {self.graph.edge_attr.dtype}"
        else:
            stored = "float32"
        return (
            f"edge rows ({self.num_edges:,} of {self.edge_dim} features, read by "
            f"{self.model.name}) stored as {stored}, {row:,} B per row"
        )

    def feature_row_bytes(self, elem: int | None = None) -> int:
        """Bytes of one feature row as the store holds it.

        With ``feature_dtype`` the compact row's
        (:meth:`FeatureCodec.row_bytes <fleetgnn.graph.compact.FeatureCodec.row_bytes>`, e.g.
        ``2 F`` for bfloat16, ``F + 4`` for float8); else the dataset's stored row (``F *
        itemsize``, or a dataset written compact: its stored row); else (counts only) ``F *
        elem`` (default ``model.elem``).
        """
        if self.graph is not None and self.graph.x is not None:
            return feature_row_bytes(self.graph, self.feature_dtype)
        codec = feature_codec(self.feature_dtype)
        if codec is not None:
            return codec.row_bytes(self.num_features)
        return self.num_features * (self.model.elem if elem is None else int(elem))

    def stored_rows_text(self) -> str:
        """How the store holds a feature row, in words: its dtype and bytes (what tiers count)."""
        row = self.feature_row_bytes()
        computed = f"float{self.model.elem * 8}"
        if self.feature_dtype is None:
            if self.graph is not None and self.graph.x is not None:
                x = self.graph.x
                stored = x.codec.name if isinstance(x, CompactRows) else x.dtype
                return f"feature rows stored as the dataset's {stored}, {row:,} B per row"
            return f"feature rows stored as {computed} (as computed), {row:,} B per row"
        plain = self.num_features * self.model.elem
        return (
            f"feature rows stored as {self.feature_dtype} (store.feature_dtype): {row:,} B per "
            f"row, {plain / row:.2g}x the rows per byte of {plain:,} B {computed} rows"
        )

    @property
    def mean_degree(self) -> float:
        """``E / N``."""
        return self.num_edges / max(self.num_nodes, 1)

    @property
    def seeds_per_item(self) -> int:
        """Seed nodes per training item: 1 per node, ``2 + negatives`` per edge.

        An edge's two endpoints and its negatives' destinations (a corrupted pair keeps the
        source), not deduplicated: an upper bound, close on large sparse graphs.
        """
        return 1 if self.task != "link" else 2 + int(self.negatives)

    def decoder_flops(self) -> float:
        """Forward flops of the decoder over one epoch's pairs (positives and negatives)."""
        if self.task != "link":
            return 0.0
        d = float(self.model.widths[-1])
        per_pair = {"dot": 2 * d, "distmult": 3 * d, "mlp": 2 * d * d + 5 * d}.get(
            self.decoder, 2 * d
        )
        return float(self.num_train) * (1 + int(self.negatives)) * per_pair


@dataclasses.dataclass
class Prediction:
    """One engine's predicted epoch.

    Attributes:
        engine: The engine's name.
        fits: Whether every tier fits its capacity.
        epoch_s: Predicted seconds per epoch.
        traffic: Bytes per link kind per epoch, summed over ranks.
        memory: Peak bytes per rank and tier (``device``, ``host``), as the engine reports
            them (its ``peak_memory()``, the ``memory`` of ``metrics.jsonl``).
        knobs: The engine settings the prediction is for.
        steps: Optimisation steps per epoch.
        breakdown: Seconds per component (``compute``, each link kind, ``dropout``,
            ``overhead`` and ``latency`` of :mod:`fleetgnn.cost.models`).
        reasons: Why it does not fit, or notes on the model.
        workspace: Bytes per rank and tier the engine needs beyond what it reports in
            ``memory`` (the mini-batch engines report their store or cache; a step's input
            rows, activations and the model's state come on top). Fitting counts both.
    """

    engine: str
    fits: bool
    epoch_s: float
    traffic: dict[str, int]
    memory: dict[str, int]
    knobs: dict[str, Any]
    steps: int = 1
    breakdown: dict[str, float] = dataclasses.field(default_factory=dict)
    reasons: list[str] = dataclasses.field(default_factory=list)
    workspace: dict[str, int] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` form of one engine."""
        return {
            "fits": self.fits,
            "epoch_s": self.epoch_s,
            "traffic": dict(self.traffic),
            "memory": dict(self.memory),
            "knobs": dict(self.knobs),
            "steps": self.steps,
            "breakdown": dict(self.breakdown),
            "reasons": list(self.reasons),
            "workspace": dict(self.workspace),
        }
