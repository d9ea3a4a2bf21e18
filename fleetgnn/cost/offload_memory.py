"""The ``offload`` engine's live device bytes per chunk, measured on probe blocks.

The engine meters, for every chunk of every layer (forward and backward pass), the bytes it
holds on the device beyond its epoch-long buffers: the neighbour rows, outputs and (backward)
their gradients, the chunk's topology, the cached aggregates (forward of cached layers) and the
tensors autograd saves for the recomputed layer. All but the last are fixed by the shapes;
autograd's share depends on the model's code. :func:`layer_memory` measures it by running
each layer on small probe blocks under ``torch.autograd.graph.saved_tensors_hooks`` (the
engine's :class:`~fleetgnn.nn.recompute.SavedBytesMeter`) and solving for its bytes per source
row, per edge, per destination and per training destination (the loss of the last layer):
saved bytes are linear in the four, so the coefficients reproduce the engine's meter on any
chunk. They are cached per model shape and dtype.
"""

from __future__ import annotations

import dataclasses
import functools
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from fleetgnn.errors import ConfigError
from fleetgnn.nn import LocalAggregator, build_model
from fleetgnn.nn.recompute import RecordingAggregator, ReplayAggregator, SavedBytesMeter

#: Bytes of one topology index (the engine's chunk topology is int64).
_IDX = 8
#: The probes' base block ``(rows, edges, destinations, training destinations)``, and the step
#: each count is raised by in turn (every probe keeps ``train <= dst <= rows``).
_BASE = (48, 160, 24, 12)
_STEP = (32, 96, 16, 8)


@dataclasses.dataclass(frozen=True)
class LayerMemory:
    """One layer's device bytes on a chunk, beyond the chunk's rows, outputs and topology.

    ``saved = const + per_row * rows + per_edge * edges + per_dst * dst + per_train * train``
    bytes of autograd's saved tensors when the layer is recomputed (its parameters and input
    excluded, as the engine counts them); ``cached_per_dst`` elements of cached aggregates per
    destination in the forward pass (0 for layers that recompute).

    Attributes:
        const: Bytes independent of the chunk's size.
        per_row: Bytes per source row ``|N(S)|``.
        per_edge: Bytes per in-edge.
        per_dst: Bytes per destination.
        per_train: Bytes per training destination (the last layer's loss).
        cached_per_dst: Elements of the cached aggregates per destination.
    """

    const: float
    per_row: float
    per_edge: float
    per_dst: float
    per_train: float
    cached_per_dst: float

    def saved(self, rows: Any, edges: Any, dst: Any, train: Any) -> Any:
        """Autograd's saved bytes on chunks of these counts (scalars or arrays)."""
        return (
            self.const
            + self.per_row * rows
            + self.per_edge * edges
            + self.per_dst * dst
            + self.per_train * train
        )


def probe_model(model: Any, dtype: torch.dtype) -> torch.nn.Module:
    """The :func:`~fleetgnn.nn.build_model` model of ``model``'s shape (a ``ModelShape``)."""
    w, layers = model.widths, model.num_layers
    kwargs: dict[str, Any] = {"num_layers": layers}
    if layers > 1:
        kwargs["hidden_dim"] = w[1] // model.heads[0]
        if model.name == "gat":
            kwargs["heads"] = model.heads[0]
    if model.edge_dim:
        kwargs["edge_dim"] = model.edge_dim
    with torch.random.fork_rng(devices=[]):  # the parameters' values do not matter
        net = build_model(model.name, w[0], w[-1], **kwargs)
    got = [w[0]] + [c.out_width if hasattr(c, "out_width") else c.out_channels for c in net.convs]
    if tuple(got) != tuple(w):
        raise ConfigError(
            f"cannot rebuild model {model.name!r} of widths {list(w)} to measure its saved "
            f"activations (rebuilt widths {got})"
        )
    return net.to(dtype).train()


def _block(
    rows: int,
    edges: int,
    dst: int,
    dtype: torch.dtype,
    reused: bool = False,
    edge_dim: int = 0,
) -> LocalAggregator:
    """A probe chunk: ``dst`` destinations with ``edges`` in-edges over ``rows`` source rows.

    ``reused``: with a whole-graph aggregator's caches (GCN's normalised matrix).
    ``edge_dim``: with ``[edges, edge_dim]`` edge features (a model that reads them).
    """
    indptr = np.linspace(0, edges, dst + 1).round().astype(np.int64)
    adj = SimpleNamespace(
        indptr=torch.from_numpy(indptr),
        indices=torch.arange(edges, dtype=torch.int64) % rows,
        src_ids=torch.arange(rows, dtype=torch.int64),
        num_dst=dst,
        src_degree=torch.ones(rows, dtype=dtype),
        reused=reused,
    )
    attr = torch.zeros(edges, edge_dim, dtype=dtype) if edge_dim else None
    return LocalAggregator(adj, dtype=dtype, validate=False, edge_attr=attr)


def _measure(
    net: torch.nn.Module,
    layer: int,
    counts: tuple[int, int, int, int],
    width: int,
    *,
    replay: bool,
    dtype: torch.dtype,
    reused: bool = False,
    edge_dim: int = 0,
) -> tuple[int, int]:
    """``(saved bytes, cached elements)`` of ``layer`` recomputed on one probe block.

    As the engine's backward pass: a cached layer replays the aggregates its forward pass
    recorded; the input needs a gradient except in the first layer; the last layer adds the
    per-node cross-entropy of its training destinations.
    """
    rows, edges, dst, train = counts
    agg: Any = _block(rows, edges, dst, dtype, reused, edge_dim)
    h = torch.zeros(rows, width, dtype=dtype)
    cached = 0
    if replay:
        rec = RecordingAggregator(agg)
        with torch.no_grad():
            net.layer_forward(layer, rec, h, step=0)
        cached = sum(a.numel() for a in rec.outputs)
        agg = ReplayAggregator(agg, rec.outputs, layer)
    h.requires_grad_(layer > 0)
    meter = SavedBytesMeter([*net.parameters(), h])
    with torch.enable_grad(), meter():
        out = net.layer_forward(layer, agg, h, step=0)
        if layer == net.num_layers - 1:
            idx = torch.arange(train, dtype=torch.int64)
            target = torch.zeros(train, dtype=torch.int64)
            torch.nn.functional.cross_entropy(
                out.index_select(0, idx), target, reduction="none"
            ).sum()
    del out
    return meter.bytes, cached


@functools.lru_cache(maxsize=64)
def layer_memory(
    model: Any, cached_layers: tuple[bool, ...], reused: bool = False
) -> tuple[LayerMemory, ...]:
    """Per layer, the saved-activation and cached-aggregate coefficients (measured, cached).

    Args:
        model: A :class:`~fleetgnn.cost.models.ModelShape` (its ``elem`` picks float32/64).
        cached_layers: Per layer, whether the engine caches its aggregates (then the backward
            pass replays them).
        reused: Probe with a whole-graph aggregator (the reference engine's).

    Raises:
        ConfigError: If the model cannot be rebuilt from its shape.
    """
    dtype = torch.float64 if model.elem == 8 else torch.float32
    net = probe_model(model, dtype)
    probes = [_BASE]  # the base block, then each count raised by its step in turn
    for j, step in enumerate(_STEP):
        raised = list(_BASE)
        raised[j] += step
        probes.append((raised[0], raised[1], raised[2], raised[3]))
    out = []
    for i in range(model.num_layers):
        measured = [
            _measure(
                net,
                i,
                p,
                model.widths[i],
                replay=cached_layers[i],
                dtype=dtype,
                reused=reused,
                edge_dim=int(model.edge_dim),
            )
            for p in probes
        ]
        base = measured[0][0]
        slopes = [(measured[j + 1][0] - base) / step for j, step in enumerate(_STEP)]
        const = base - sum(s * b for s, b in zip(slopes, _BASE, strict=True))
        out.append(LayerMemory(const, *slopes, cached_per_dst=measured[0][1] / _BASE[2]))
    return tuple(out)


def chunk_live_bytes(
    model: Any,
    layer: int,
    memory: LayerMemory,
    rows: Any,
    edges: Any,
    dst: Any,
    train: Any,
    *,
    cached: bool,
) -> Any:
    """The engine's live device bytes of ``layer`` on chunks of these counts (arrays welcome).

    The larger of the forward pass (neighbour rows, outputs, cached aggregates, topology) and
    the backward pass (neighbour rows and outputs with their gradients, topology, autograd's
    saved tensors), exactly as the engine meters them.
    """
    e = model.elem
    d_in, d_out = model.widths[layer], model.widths[layer + 1]
    topology = (rows + dst + 1 + edges) * _IDX
    stored = memory.cached_per_dst * dst if cached else 0
    forward = (rows * d_in + dst * d_out + stored) * e + topology
    backward = (
        (2 * rows * d_in + 2 * dst * d_out) * e
        + topology
        + memory.saved(rows, edges, dst, train if layer == model.num_layers - 1 else 0)
    )
    return np.maximum(forward, backward)
