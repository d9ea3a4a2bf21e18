"""Layers whose messages read edge features: GINE and an edge-conditioned convolution.

GINE is Hu et al. 2020's; the edge-conditioned convolution is NNConv (Gilmer et al. 2017,
Simonovsky & Komodakis 2017).

Both read the hop's edge features with :func:`~fleetgnn.nn.aggregator.edge_attr` and reduce their
per-edge messages with :func:`~fleetgnn.nn.aggregator.edge_reduce`, so they run on every engine
whose aggregators carry edge features
(:data:`~fleetgnn.nn.aggregator.EDGE_FEATURE_ENGINES`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fleetgnn.errors import ConfigError
from fleetgnn.nn.aggregator import Aggregator, edge_attr, edge_reduce
from fleetgnn.nn.gin_conv import gin_mlp, set_gin_eps
from fleetgnn.ops.spmm import REDUCES, Reduce


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"'{name}' must be a positive int (got {value!r})")
    return value


class GINEConv(nn.Module):
    r"""GIN with edge features (GINE, Hu et al. 2020, as PyG's ``GINEConv``).

    .. math::
        \mathrm{out}_i = \mathrm{MLP}\Big((1 + \epsilon)\, x_i
            + \sum_{j \in N(i)} \mathrm{ReLU}\big(x_j + W_e\, e_{ji} + b_e\big)\Big),
        \qquad \mathrm{MLP}(z) = W_2\, \mathrm{ReLU}\big(\mathrm{LN}(W_1 z + b_1)\big) + b_2

    ``W_e`` projects the ``edge_dim`` edge features onto the input width; ``LN`` is the layer
    norm of :class:`~fleetgnn.nn.GINConv` (``norm=False``: the plain MLP).

    Shapes:
        - x_src: ``[S, in_channels]``; edge features ``[E, edge_dim]``;
          output: ``[M, out_channels]``.

    Args:
        in_channels: Input width.
        out_channels: Output width.
        edge_dim: Width ``D`` of the edge features.
        hidden: MLP hidden width (default ``out_channels``).
        eps: Initial :math:`\epsilon`.
        train_eps: Learn :math:`\epsilon` (else a fixed buffer).
        norm: Layer-normalise the MLP's hidden layer (when it is wider than 1).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        edge_dim: int,
        hidden: int | None = None,
        eps: float = 0.0,
        train_eps: bool = True,
        norm: bool = True,
    ) -> None:
        super().__init__()
        for name, v in (("in_channels", in_channels), ("out_channels", out_channels)):
            _positive(name, v)
        self.edge_dim = _positive("edge_dim", edge_dim)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.edge_lin = nn.Linear(edge_dim, in_channels)
        self.mlp = gin_mlp(in_channels, out_channels, hidden, norm)
        set_gin_eps(self, eps, train_eps)

    def forward(self, agg: Aggregator, x_src: Tensor, *, step: int = 0, layer: int = 0) -> Tensor:
        """Apply the layer; ``step``/``layer`` are unused (no randomness)."""
        e = self.edge_lin(edge_attr(agg).to(x_src.dtype))  # [E, in_channels]
        msg = torch.relu(agg.src_to_edge(x_src) + e)  # [E, in_channels]
        z = edge_reduce(agg, msg, "sum") + (1.0 + self.eps.to(x_src.dtype)) * x_src[: agg.num_dst]
        return self.mlp(z)

    def extra_repr(self) -> str:
        """Widths."""
        return f"{self.in_channels}, {self.out_channels}, edge_dim={self.edge_dim}"


class EdgeConditionedConv(nn.Module):
    r"""Edge-conditioned convolution (NNConv): each edge's features choose its weight matrix.

    .. math::
        \mathrm{out}_i = \Theta\, x_i + b
            + \operatorname*{mean}_{j \in N(i)} x_j^{\top}\, f_\phi(e_{ji}),
        \qquad f_\phi(e) = \mathrm{reshape}_{[F_{in}, F_{out}]}\big(W_2\,
            \mathrm{ReLU}(W_1 e + b_1) + b_2\big)

    ``f`` is a two-layer MLP from the ``edge_dim`` features to an ``[F_in, F_out]`` matrix per
    edge, so the layer holds an ``[E, F_in, F_out]`` tensor per hop: keep the widths small.
    ``aggr`` may also be ``"sum"`` or ``"max"`` (a destination without in-edges gets 0).

    Shapes:
        - x_src: ``[S, in_channels]``; edge features ``[E, edge_dim]``;
          output: ``[M, out_channels]``.

    Args:
        in_channels: Input width ``F_in``.
        out_channels: Output width ``F_out``.
        edge_dim: Width ``D`` of the edge features.
        hidden: Hidden width of ``f`` (default 16).
        aggr: ``"mean"`` (default), ``"sum"`` or ``"max"``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        edge_dim: int,
        hidden: int = 16,
        aggr: Reduce = "mean",
    ) -> None:
        super().__init__()
        for name, v in (("in_channels", in_channels), ("out_channels", out_channels)):
            _positive(name, v)
        self.edge_dim = _positive("edge_dim", edge_dim)
        _positive("hidden", hidden)
        if aggr not in REDUCES:
            raise ConfigError(f"'aggr' must be one of {REDUCES} (got {aggr!r})")
        self.in_channels, self.out_channels, self.aggr = in_channels, out_channels, aggr
        self.edge_nn = nn.Sequential(
            nn.Linear(edge_dim, hidden), nn.ReLU(), nn.Linear(hidden, in_channels * out_channels)
        )
        self.root = nn.Linear(in_channels, out_channels)

    def forward(self, agg: Aggregator, x_src: Tensor, *, step: int = 0, layer: int = 0) -> Tensor:
        """Apply the layer; ``step``/``layer`` are unused (no randomness)."""
        e = edge_attr(agg).to(x_src.dtype)
        w = self.edge_nn(e).view(-1, self.in_channels, self.out_channels)  # [E, F_in, F_out]
        xj = agg.src_to_edge(x_src)  # [E, F_in]
        msg = torch.bmm(xj.unsqueeze(1), w).squeeze(1)  # [E, F_out]
        return edge_reduce(agg, msg, self.aggr) + self.root(x_src[: agg.num_dst])

    def extra_repr(self) -> str:
        """Widths and reduction."""
        return (
            f"{self.in_channels}, {self.out_channels}, edge_dim={self.edge_dim}, aggr={self.aggr!r}"
        )
