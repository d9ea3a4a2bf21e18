"""Chunk-wise recomputation helpers: record and replay aggregates, count autograd's saved bytes.

A layer recomputed chunk by chunk (the ``offload`` engine's backward pass) may replay the
aggregates its forward pass cached instead of aggregating again (:class:`RecordingAggregator`,
then :class:`ReplayAggregator`). :class:`SavedBytesMeter` counts the bytes autograd keeps for
the backward pass of such a layer. The engine meters its live device bytes with them and the
cost models (:mod:`fleetgnn.cost`) measure the same bytes on small probe blocks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from fleetgnn.errors import ConfigError
from fleetgnn.nn.aggregator import LocalAggregator
from fleetgnn.ops import gspmm_vjp


class RecordingAggregator:
    """A chunk aggregator that keeps every ``aggregate()`` output (the forward of cached layers).

    Args:
        base: The chunk's aggregator.
    """

    aggregate_raw = True

    def __init__(self, base: LocalAggregator) -> None:
        self.base = base
        self.num_src, self.num_dst, self.src_ids = base.num_src, base.num_dst, base.src_ids
        self.outputs: list[torch.Tensor] = []

    def aggregate(self, x_src, reduce="sum", edge_weight=None):  # noqa: ANN001, ANN201
        """``base.aggregate``, keeping its output."""
        out = self.base.aggregate(x_src, reduce, edge_weight)
        self.outputs.append(out)
        return out

    def __getattr__(self, name: str) -> Any:
        if name == "gcn_aggregate":  # would bypass aggregate() above: layers must call it
            raise AttributeError(name)
        return getattr(self.base, name)


class _ReplayAggregate(torch.autograd.Function):
    """Forward: the cached aggregate. Backward: ``A^T grad`` (the aggregation is linear)."""

    @staticmethod
    def forward(ctx, x_src, cached, base, reduce, edge_weight):  # noqa: ANN001, ANN205
        ctx.base, ctx.reduce, ctx.edge_weight = base, reduce, edge_weight
        return cached.clone()

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        return gspmm_vjp(ctx.base, grad, ctx.reduce, ctx.edge_weight), None, None, None, None


class ReplayAggregator:
    """A chunk aggregator that returns the cached aggregates (the backward of cached layers).

    Only linear aggregations are replayable: ``sum``/``mean`` with weights that need no gradient.
    Anything else (``max``, learned edge weights, edge-wise ops) raises, naming the layer.

    Args:
        base: The chunk's aggregator.
        cached: The outputs a :class:`RecordingAggregator` kept, in call order.
        layer: The layer's index (for error messages).
    """

    aggregate_raw = True

    def __init__(self, base: LocalAggregator, cached: list[torch.Tensor], layer: int) -> None:
        self.base, self.cached, self.layer = base, cached, layer
        self.num_src, self.num_dst, self.src_ids = base.num_src, base.num_dst, base.src_ids
        self._next = 0

    def _refuse(self, what: str) -> None:
        raise ConfigError(
            f"layer {self.layer} declared its aggregation cacheable but uses {what}; return False "
            f"from cacheable_aggregation({self.layer}) or set offload.cache_aggregates=false"
        )

    def aggregate(self, x_src, reduce="sum", edge_weight=None):  # noqa: ANN001, ANN201
        """The next cached aggregate; its backward is ``A^T grad``."""
        if reduce not in ("sum", "mean"):
            self._refuse(f"aggregate(reduce={reduce!r})")
        if edge_weight is not None and edge_weight.requires_grad:
            self._refuse("edge weights that need a gradient")
        if self._next >= len(self.cached):
            self._refuse("more aggregate() calls in the backward pass than in the forward pass")
        cached = self.cached[self._next].to(x_src.device)
        self._next += 1
        return _ReplayAggregate.apply(x_src, cached, self.base, reduce, edge_weight)

    def src_to_edge(self, x_src):  # noqa: ANN001, ANN201
        """Refused: edge-wise ops are not replayable."""
        self._refuse("src_to_edge()")

    def edge_softmax(self, scores):  # noqa: ANN001, ANN201
        """Refused: edge-wise ops are not replayable."""
        self._refuse("edge_softmax()")

    def __getattr__(self, name: str) -> Any:
        if name == "gcn_aggregate":  # would bypass aggregate() above: layers must call it
            raise AttributeError(name)
        return getattr(self.base, name)


class SavedBytesMeter:
    """Bytes of the distinct storages autograd saves inside the context (``exclude``'s not).

    Args:
        exclude: Tensors whose storages are not counted (the parameters, the layer's input).
    """

    def __init__(self, exclude: list[torch.Tensor]) -> None:
        self._seen = {t.untyped_storage().data_ptr() for t in exclude}
        self.bytes = 0

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in self._seen:
            self._seen.add(s.data_ptr())
            self.bytes += s.nbytes()
        return t

    @contextlib.contextmanager
    def __call__(self) -> Iterator[SavedBytesMeter]:
        """Count the saved tensors of the autograd graph built inside the context."""
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
            yield self


#: Largest relative gradient difference :func:`replay_gradient_error` tolerates, per dtype.
REPLAY_TOLERANCE: dict[torch.dtype, float] = {
    torch.float64: 1e-8,
    torch.float32: 1e-3,
    torch.bfloat16: 5e-2,
    torch.float16: 5e-2,
}


def replay_gradient_error(
    module: torch.nn.Module,
    layer: int,
    agg: LocalAggregator,
    x: torch.Tensor,
    *,
    step: int = 0,
    seed: int = 0,
) -> float:
    """How far a cached layer's gradients are from recomputation's on one chunk (a probe).

    The recompute/cache hybrid (the ``offload`` engine) trusts a layer that declares its
    aggregation cacheable: its backward gives the layer only the chunk's own rows (the
    neighbour rows are zeros) and replays the cached aggregates, getting the neighbour gradients
    as ``A^T dL/da``. That is exact only when ``aggregate()`` receives the layer's input rows
    transformed by nothing with parameters or curvature (e.g. dropout or a degree scale); a layer
    that projects or activates its input before aggregating gets wrong gradients silently. This
    runs layer ``layer`` on ``agg`` both ways with inputs ``x`` and a random output gradient
    (training mode, the same keyed dropout) and compares the parameter and input gradients.

    Args:
        module: A layer-wise model (``layer_forward``).
        layer: The layer's index.
        agg: A chunk's aggregator (destinations are the first ``agg.num_dst`` source rows).
        x: ``[agg.num_src, width_in]`` inputs.
        step: Dropout key.
        seed: Seed of the random output gradient.

    Returns:
        The largest ``max|g_replay - g_recompute| / max|g_recompute|`` over the parameters'
        and the input's gradients (0 when all vanish).

    Raises:
        ConfigError: The layer uses what cannot be replayed (see :class:`ReplayAggregator`).
    """
    params = [p for p in module.parameters() if p.requires_grad]
    was_training = module.training
    module.train()
    try:
        h = x.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            out = module.layer_forward(layer, agg, h, step=step)
        gen = torch.Generator().manual_seed(seed)
        w = torch.randn(out.shape, generator=gen, dtype=out.dtype).to(out.device)
        full = torch.autograd.grad((out * w).sum(), [h, *params], allow_unused=True)
        rec = RecordingAggregator(agg)
        with torch.no_grad():
            module.layer_forward(layer, rec, x, step=step)
        own = torch.zeros_like(x)
        own[: agg.num_dst] = x[: agg.num_dst]
        own.requires_grad_(True)
        with torch.enable_grad():
            out = module.layer_forward(
                layer, ReplayAggregator(agg, rec.outputs, layer), own, step=step
            )
        replay = torch.autograd.grad((out * w).sum(), [own, *params], allow_unused=True)
    finally:
        module.train(was_training)
    worst = 0.0
    for a, b, ref in zip(full, replay, [h, *params], strict=True):
        a = torch.zeros_like(ref) if a is None else a
        b = torch.zeros_like(ref) if b is None else b
        scale = float(a.abs().max()) if a.numel() else 0.0
        diff = float((a - b).abs().max()) if a.numel() else 0.0
        if diff > 0:
            worst = max(worst, diff / scale if scale > 0 else float("inf"))
    return worst
