"""Graph isomorphism network layer (Xu et al. 2019)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fleetgnn.nn.aggregator import Aggregator


class GINConv(nn.Module):
    r"""GIN layer with a two-layer MLP whose hidden layer is normalised.

    .. math::
        \mathrm{out}_i = \mathrm{MLP}\Big((1 + \epsilon)\, x_i + \sum_{j \in N(i)} x_j\Big),
        \qquad \mathrm{MLP}(z) = W_2\, \mathrm{ReLU}\big(\mathrm{LN}(W_1 z + b_1)\big) + b_2

    The sum grows with the degree (hundreds of neighbours on a power-law graph), so without a
    normalisation the outputs scale with it: a 2-layer GIN on a products-like graph started at a
    loss of ~30 for 47 classes (ln 47 = 3.85). The GIN paper normalises every hidden MLP layer
    with batch norm; ``LN`` is a layer norm instead (per-node statistics, so every engine,
    batch and partition computes the same function). ``norm=False`` gives the plain MLP.

    Shapes:
        - x_src: ``[S, in_channels]``; output: ``[M, out_channels]``.

    Args:
        in_channels: Input width.
        out_channels: Output width.
        hidden: MLP hidden width (default ``out_channels``).
        eps: Initial :math:`\epsilon`.
        train_eps: Learn :math:`\epsilon` (else a fixed buffer).
        norm: Layer-normalise the MLP's hidden layer (when it is wider than 1: the layer norm of
            a single value is always 0).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden: int | None = None,
        eps: float = 0.0,
        train_eps: bool = True,
        norm: bool = True,
    ) -> None:
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.mlp = gin_mlp(in_channels, out_channels, hidden, norm)
        set_gin_eps(self, eps, train_eps)

    def forward(self, agg: Aggregator, x_src: Tensor, *, step: int = 0, layer: int = 0) -> Tensor:
        """Apply the layer; ``step``/``layer`` are unused (no randomness)."""
        z = agg.aggregate(x_src, "sum") + (1.0 + self.eps.to(x_src.dtype)) * x_src[: agg.num_dst]
        return self.mlp(z)

    def extra_repr(self) -> str:
        """Widths."""
        return f"{self.in_channels}, {self.out_channels}"


def gin_mlp(in_channels: int, out_channels: int, hidden: int | None, norm: bool) -> nn.Sequential:
    """GIN's two-layer MLP (hidden width ``out_channels`` unless given; see :class:`GINConv`)."""
    hidden = out_channels if hidden is None else hidden
    return nn.Sequential(
        nn.Linear(in_channels, hidden),
        nn.LayerNorm(hidden) if norm and hidden > 1 else nn.Identity(),
        nn.ReLU(),
        nn.Linear(hidden, out_channels),
    )


def set_gin_eps(module: nn.Module, eps: float, train_eps: bool) -> None:
    """Give ``module`` GIN's ``eps``: a learnt parameter, or a fixed buffer."""
    eps_t = torch.tensor([float(eps)])
    if train_eps:
        module.eps = nn.Parameter(eps_t)
    else:
        module.register_buffer("eps", eps_t)
