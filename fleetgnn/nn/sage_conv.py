"""GraphSAGE layer (Hamilton et al. 2017)."""

from __future__ import annotations

from torch import Tensor, nn

from fleetgnn.errors import ConfigError
from fleetgnn.nn.aggregator import Aggregator, aggregates_raw

SAGE_AGGRS: tuple[str, ...] = ("mean", "sum", "max")


class SAGEConv(nn.Module):
    r"""GraphSAGE layer.

    .. math::
        \mathrm{out}_i = W_l \operatorname*{aggr}_{j \in N(i)} p(x_j) + W_r x_i + b,
        \qquad p(x) = \mathrm{ReLU}(W_p x + b_p) \text{ if project else } x

    The projection applies to neighbours only (the root term uses the raw ``x_i``). A
    destination without neighbours aggregates to 0. For ``mean``/``sum`` without projection,
    :math:`W_l` runs before aggregation when it narrows the width (equal result, fewer bytes),
    unless the aggregator asks for raw inputs (``agg.aggregate_raw``: it caches the aggregates).

    Shapes:
        - x_src: ``[S, in_channels]``; output: ``[M, out_channels]``.

    Args:
        in_channels: Input width.
        out_channels: Output width.
        aggr: ``"mean"``, ``"sum"`` or ``"max"``.
        root_weight: Add the :math:`W_r x_i` term.
        project: Project neighbours with :math:`p` before aggregating.
        bias: Learnable bias :math:`b` (on :math:`W_l`).

    Raises:
        ConfigError: If ``aggr`` is unknown.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        aggr: str = "mean",
        root_weight: bool = True,
        project: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if aggr not in SAGE_AGGRS:
            raise ConfigError(f"SAGEConv 'aggr' must be one of {SAGE_AGGRS} (got {aggr!r})")
        self.in_channels, self.out_channels, self.aggr = in_channels, out_channels, aggr
        self.proj = nn.Linear(in_channels, in_channels) if project else None
        self.lin_l = nn.Linear(in_channels, out_channels, bias=bias)
        self.lin_r = nn.Linear(in_channels, out_channels, bias=False) if root_weight else None

    def forward(self, agg: Aggregator, x_src: Tensor, *, step: int = 0, layer: int = 0) -> Tensor:
        """Apply the layer; ``step``/``layer`` are unused (no randomness)."""
        x_dst = x_src[: agg.num_dst]
        h = x_src if self.proj is None else self.proj(x_src).relu()
        narrow = self.out_channels < self.in_channels and not aggregates_raw(agg)
        if self.aggr != "max" and narrow:
            out = agg.aggregate(nn.functional.linear(h, self.lin_l.weight), self.aggr)  # type: ignore[arg-type]
            if self.lin_l.bias is not None:
                out = out + self.lin_l.bias
        else:
            out = self.lin_l(agg.aggregate(h, self.aggr))  # type: ignore[arg-type]
        if self.lin_r is not None:
            out = out + self.lin_r(x_dst)
        return out

    def extra_repr(self) -> str:
        """Widths and aggregation."""
        return f"{self.in_channels}, {self.out_channels}, aggr={self.aggr!r}"
