"""Graph convolution (Kipf & Welling 2017) with symmetric normalisation and implicit self loops."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fleetgnn.nn.aggregator import Aggregator, aggregates_raw, gcn_propagate


class GCNConv(nn.Module):
    r"""GCN layer with symmetric normalisation; the self loop is added inside the layer.

    .. math::
        h = x W, \qquad
        \mathrm{out}_i = \sum_{j \in N(i)} \frac{h_j}{\sqrt{(d_j + 1)(d_i + 1)}}
            + \frac{h_i}{d_i + 1} + b

    where :math:`d_j` is ``agg.src_degree()[j]``, the source's in-degree in the WHOLE graph,
    and :math:`d_i` is ``agg.dst_degree()[i]``, the number of in-edges aggregated for ``i``.
    On the full graph both are the graph's in-degrees (never a partition's or a chunk's). On a
    sampled block :math:`d_i` is the sampled neighbour count and :math:`d_j` the global degree;
    with fanout -1 (all neighbours) the layer equals full-graph GCN exactly. The graph is assumed
    to have no explicit self loops (an existing loop would be counted twice).

    The feature transform runs before aggregation when it shrinks the width and after it
    otherwise (the two orders are equal; the narrower one moves fewer bytes), and always after it
    when the aggregator asks for raw inputs (``agg.aggregate_raw``: it caches the aggregates).

    Shapes:
        - x_src: ``[S, in_channels]``; output: ``[M, out_channels]``.

    Args:
        in_channels: Input width.
        out_channels: Output width.
        bias: Add a learnable bias.
    """

    def __init__(self, in_channels: int, out_channels: int, bias: bool = True) -> None:
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        nn.init.xavier_uniform_(self.lin.weight)

    def forward(self, agg: Aggregator, x_src: Tensor, *, step: int = 0, layer: int = 0) -> Tensor:
        """Apply the layer; ``step``/``layer`` are unused (no randomness)."""
        transform_first = self.out_channels < self.in_channels and not aggregates_raw(agg)
        h = self.lin(x_src) if transform_first else x_src
        # an aggregator's own product (e.g. the normalised matrix, built once), unless it asks
        # for aggregate() calls on raw inputs (it caches them)
        fused = None if aggregates_raw(agg) else getattr(agg, "gcn_aggregate", None)
        out = fused(h) if callable(fused) else gcn_propagate(agg, h)
        if not transform_first:  # one fused matrix multiply-add with the bias
            return nn.functional.linear(out, self.lin.weight, self.bias)
        if self.bias is not None:
            out = out + self.bias
        return out

    def extra_repr(self) -> str:
        """Widths."""
        return f"{self.in_channels}, {self.out_channels}"
