"""Graph attention layer (Veličković et al. 2018), self attention term included."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fleetgnn.nn.aggregator import Aggregator
from fleetgnn.ops import keyed_edge_dropout

_EXP_CLAMP = 30.0  # exp(30) ~ 1e13: beyond it the self weight is below 1e-13 and rounds to 0

#: Glorot gain of the attention vectors' initialisation (see :class:`GATConv`).
ATT_INIT_GAIN = 0.1


def head_width(heads: int, out_channels: int, concat: bool) -> int:
    """Attention output width: ``heads * out_channels`` if ``concat``, else ``out_channels``."""
    return heads * out_channels if concat else out_channels


class GATConv(nn.Module):
    r"""Multi-head graph attention over :math:`N(i) \cup \{i\}`.

    .. math::
        h = x W \in \mathbb{R}^{S \times H \times D}, \qquad
        s_{ij} = \mathrm{LeakyReLU}\big(a_{src} \cdot h_j + a_{dst} \cdot h_i\big)

        \alpha_{ij} = \frac{\exp s_{ij}}{\exp s_{ii} + \sum_{k \in N(i)} \exp s_{ik}},
        \qquad
        \mathrm{out}_i = \big\Vert_{h=1}^{H} \Big(\alpha_{ii} h_i + \sum_{j \in N(i)}
            \alpha_{ij} h_j\Big) + b \quad (\text{or the mean over heads})

    As in the original GAT every node attends to itself. The self term is computed inside the
    layer (its own score :math:`s_{ii}`, normalised together with the in-edges), so graphs need
    no explicit self loops and must not contain any (a loop would be attended twice). The
    normalisation uses only the :class:`Aggregator` protocol: :math:`\alpha'` =
    ``edge_softmax`` over the in-edges (stable), :math:`S_i = \sum_{j} \exp(s_{ij} - s_{ii})`
    via ``aggregate`` of ones (clamped exponent, so it never overflows), then
    :math:`\alpha_{ij} = \alpha'_{ij} S_i / (1 + S_i)` and :math:`\alpha_{ii} = 1 / (1 + S_i)`.

    The attention vectors start small (Glorot-uniform with gain :data:`ATT_INIT_GAIN` = 0.1), so
    every layer starts close to a mean over :math:`N(i) \cup \{i\}` and learns where to attend.
    With plain Glorot and unit-variance features the scores spread over several units: attention
    starts peaked on random neighbours, and with dropout on features and coefficients a 2-layer
    GAT on a products-like graph started at a loss of ~8 for 47 classes (ln 47 = 3.85).

    Attention dropout zeroes :math:`\alpha_{ij}` (scaled by :math:`1/(1-p)`, no
    renormalisation) with a mask keyed by ``(seed, step, layer, src ID, dst ID, head)``; the
    self term is keyed by ``(i, i)``. Masks therefore do not depend on how edges are batched or
    distributed.

    Shapes:
        - x_src: ``[S, in_channels]``.
        - output: ``[M, heads * out_channels]`` if ``concat`` else ``[M, out_channels]``.

    Args:
        in_channels: Input width.
        out_channels: Width per head ``D``.
        heads: Number of heads ``H``.
        concat: Concatenate heads (else average them).
        negative_slope: LeakyReLU slope.
        attn_dropout: Dropout probability on attention coefficients.
        bias: Add a learnable bias.
        seed: Seed of the attention-dropout keys.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        attn_dropout: float = 0.0,
        bias: bool = True,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.concat, self.negative_slope = concat, negative_slope
        self.attn_dropout, self.seed = attn_dropout, seed
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(heads, out_channels))
        self.bias = nn.Parameter(torch.zeros(self.out_width)) if bias else None
        nn.init.xavier_uniform_(self.lin.weight)
        nn.init.xavier_uniform_(self.att_src, gain=ATT_INIT_GAIN)
        nn.init.xavier_uniform_(self.att_dst, gain=ATT_INIT_GAIN)

    @property
    def out_width(self) -> int:
        """Output width: ``heads * out_channels`` if ``concat`` else ``out_channels``."""
        return head_width(self.heads, self.out_channels, self.concat)

    def _attention(self, agg: Aggregator, h: Tensor) -> tuple[Tensor, Tensor]:
        m = agg.num_dst
        leaky = nn.functional.leaky_relu
        el = (h * self.att_src).sum(-1)  # [S, H]
        er = (h[:m] * self.att_dst).sum(-1)  # [M, H]
        s_edge = leaky(agg.src_to_edge(el) + agg.dst_to_edge(er), self.negative_slope)  # [E, H]
        s_self = leaky(el[:m] + er, self.negative_slope)  # [M, H]
        alpha_nb = agg.edge_softmax(s_edge)  # softmax over in-edges only
        t = (s_edge - agg.dst_to_edge(s_self)).clamp(max=_EXP_CLAMP)
        ones = h.new_ones((agg.num_src, self.heads))
        rel = agg.aggregate(ones, "sum", edge_weight=torch.exp(t))  # [M, H]: S_i
        alpha_self = 1.0 / (1.0 + rel)
        alpha_edge = alpha_nb * agg.dst_to_edge(rel * alpha_self)
        return alpha_edge, alpha_self

    def attention(self, agg: Aggregator, x_src: Tensor) -> tuple[Tensor, Tensor]:
        """Attention coefficients without dropout: ``(alpha_edge [E, H], alpha_self [M, H])``.

        For every destination and head, its in-edge coefficients plus its self coefficient sum
        to 1.
        """
        h = self.lin(x_src).view(-1, self.heads, self.out_channels)
        return self._attention(agg, h)

    def forward(self, agg: Aggregator, x_src: Tensor, *, step: int = 0, layer: int = 0) -> Tensor:
        """Apply the layer; ``step`` and ``layer`` key the attention-dropout masks."""
        m = agg.num_dst
        h = self.lin(x_src).view(-1, self.heads, self.out_channels)  # [S, H, D]
        alpha_edge, alpha_self = self._attention(agg, h)
        if self.training and self.attn_dropout > 0:
            src_gid, dst_gid = agg.edge_ids()
            dst_ids = agg.src_ids[:m]
            key = (self.attn_dropout, self.seed, step, layer)
            alpha_edge = keyed_edge_dropout(alpha_edge, *key, src_gid, dst_gid)
            alpha_self = keyed_edge_dropout(alpha_self, *key, dst_ids, dst_ids)
        out = agg.aggregate(h, "sum", edge_weight=alpha_edge) + alpha_self[:, :, None] * h[:m]
        # (explicit width: a rank or chunk may own no destination, m = 0)
        out = out.reshape(m, self.heads * self.out_channels) if self.concat else out.mean(1)
        if self.bias is not None:
            out = out + self.bias
        return out

    def extra_repr(self) -> str:
        """Widths and heads."""
        return f"{self.in_channels}, {self.out_channels}, heads={self.heads}, concat={self.concat}"
