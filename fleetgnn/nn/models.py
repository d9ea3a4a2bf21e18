"""Layer stacks (:class:`GNN`) and the :func:`build_model` factory."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from torch import Tensor, nn

from fleetgnn.config.run import MODEL_DEFAULTS
from fleetgnn.errors import ConfigError
from fleetgnn.nn.aggregator import EDGE_FEATURE_ENGINES, Aggregator
from fleetgnn.nn.edge_conv import GINEConv
from fleetgnn.nn.gat_conv import GATConv
from fleetgnn.nn.gcn_conv import GCNConv
from fleetgnn.nn.gin_conv import GINConv
from fleetgnn.nn.protocol import LayerwiseModule
from fleetgnn.nn.sage_conv import SAGEConv
from fleetgnn.ops import keyed_dropout

CONVS: tuple[str, ...] = tuple(MODEL_DEFAULTS)
#: The convs whose messages read edge features (they need ``edge_dim``).
EDGE_CONVS: tuple[str, ...] = ("gine",)
NORMS: tuple[str | None, ...] = (None, "layer")
ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU}


class GNN(LayerwiseModule):
    """A stack of graph layers with keyed dropout, optional layer norm, residuals, activation.

    Layer ``i`` (see :meth:`layer_forward`) computes::

        h = keyed_dropout(h_src, p_i, key=(seed, step, i, global src ID, feature))
        out = conv_i(agg_i, h)                      # [num_dst_i, width_i]
        if i < num_layers - 1:                      # hidden layers only
            out = out + residual_i(h[:num_dst_i])   # if residual (identity or linear)
            out = activation(norm_i(out))           # norm: LayerNorm or none

    ``p_0`` is ``input_dropout`` (defaults to ``dropout``), the others ``dropout``. Dropout masks
    are keyed by global node IDs, so every engine, partitioning and batching draws the same mask
    for the same node. Batch norm is deliberately not offered: its batch statistics would differ
    between engines (a mini-batch, a partition, a chunk), breaking the rule that every engine
    computes the same function; use ``norm="layer"`` (per-node statistics).

    For ``conv="gat"`` hidden layers have ``heads`` heads of width ``hidden_dim``, concatenated
    (width ``heads * hidden_dim``); the output layer has ``out_heads`` heads, averaged.

    Shapes:
        - x: ``[num_src of aggs[0], in_dim]``.
        - output: ``[num_dst of aggs[-1], out_dim]`` logits.

    Args:
        in_dim: Input feature width.
        hidden_dim: Hidden width (per head for GAT).
        out_dim: Output width (classes).
        num_layers: Number of graph layers (>= 1).
        conv: ``"gcn"``, ``"sage"``, ``"gat"``, ``"gin"`` or ``"gine"`` (GIN with edge features:
            :class:`~fleetgnn.nn.edge_conv.GINEConv`, needs ``edge_dim``).
        dropout: Dropout on the input of every layer.
        input_dropout: Dropout on the first layer's input (default: ``dropout``).
        norm: ``None`` or ``"layer"``.
        residual: Add a residual connection around hidden layers.
        heads: GAT heads in hidden layers.
        out_heads: GAT heads in the output layer.
        attn_dropout: GAT attention dropout.
        seed: Seed of every dropout key.
        activation: ``"relu"``, ``"elu"`` or ``"gelu"`` (default ``"elu"`` for GAT, else
            ``"relu"``).
        conv_kwargs: Extra keyword arguments for every conv (e.g. ``{"aggr": "max"}`` for SAGE).
        edge_dim: Width of the graph's edge features, for a conv that reads them (``"gine"``;
            the model then sets ``needs_edge_attr`` and names the engines that host it).

    Raises:
        ConfigError: For an unknown conv, norm or activation, or non-positive sizes.
    """

    def __init__(
        self,
        in_dim: int,
        hidden_dim: int,
        out_dim: int,
        num_layers: int = 2,
        conv: str = "gcn",
        dropout: float = 0.5,
        input_dropout: float | None = None,
        norm: str | None = None,
        residual: bool = False,
        heads: int = 8,
        out_heads: int = 1,
        attn_dropout: float = 0.0,
        seed: int = 0,
        activation: str | None = None,
        conv_kwargs: Mapping[str, Any] | None = None,
        edge_dim: int | None = None,
    ) -> None:
        super().__init__(num_layers if isinstance(num_layers, int) and num_layers >= 1 else 1)
        if conv not in CONVS:
            raise ConfigError(f"'conv' must be one of {CONVS} (got {conv!r})")
        if norm not in NORMS:
            raise ConfigError(
                f"'norm' must be one of {NORMS} (got {norm!r}); batch norm is not offered"
            )
        activation = activation or ("elu" if conv == "gat" else "relu")
        if activation not in ACTIVATIONS:
            raise ConfigError(
                f"'activation' must be one of {tuple(ACTIVATIONS)} (got {activation!r})"
            )
        sizes = {
            "in_dim": in_dim,
            "hidden_dim": hidden_dim,
            "out_dim": out_dim,
            "num_layers": num_layers,
            "heads": heads,
            "out_heads": out_heads,
        }
        for name, value in sizes.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"'{name}' must be a positive int (got {value!r})")
        for name, p in (
            ("dropout", dropout),
            ("input_dropout", input_dropout),
            ("attn_dropout", attn_dropout),
        ):
            if p is not None and not 0.0 <= float(p) < 1.0:
                raise ConfigError(f"'{name}' must lie in [0, 1) (got {p!r})")
        self.needs_edge_attr = conv in EDGE_CONVS
        if self.needs_edge_attr:
            if isinstance(edge_dim, bool) or not isinstance(edge_dim, int) or edge_dim < 1:
                raise ConfigError(
                    f"conv {conv!r} reads edge features: 'edge_dim' must be their width, a "
                    f"positive int (got {edge_dim!r}); train it on a graph with edge_attr"
                )
            self.hosts = EDGE_FEATURE_ENGINES
            self.hosts_reason = "its layers read edge features, which that engine does not carry"
        self.conv_name, self.num_layers, self.seed = conv, num_layers, seed
        self.dropout = float(dropout)
        self.input_dropout = float(dropout if input_dropout is None else input_dropout)
        self.norm_name, self.residual = norm, residual
        kw = dict(conv_kwargs or {})
        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList()
        self.res = nn.ModuleList()
        width = in_dim
        for i in range(num_layers):
            last = i == num_layers - 1
            if conv == "gat":
                layer: nn.Module = GATConv(
                    width,
                    out_dim if last else hidden_dim,
                    heads=out_heads if last else heads,
                    concat=not last,
                    attn_dropout=attn_dropout,
                    seed=seed,
                    **kw,
                )
                out_w = layer.out_width  # type: ignore[assignment]
            elif conv == "gine":
                out_w = out_dim if last else hidden_dim
                layer = GINEConv(width, out_w, edge_dim=edge_dim, **kw)  # type: ignore[arg-type]
            else:
                out_w = out_dim if last else hidden_dim
                cls = {"gcn": GCNConv, "sage": SAGEConv, "gin": GINConv}[conv]
                layer = cls(width, out_w, **kw)
            self.convs.append(layer)
            if not last:
                self.norms.append(nn.LayerNorm(out_w) if norm == "layer" else nn.Identity())
                if residual:
                    same = width == out_w
                    self.res.append(nn.Identity() if same else nn.Linear(width, out_w, bias=False))
            width = out_w
        self.act = ACTIVATIONS[activation]()

    def layer_forward(self, i: int, agg: Aggregator, h_src: Tensor, *, step: int = 0) -> Tensor:
        """Run layer ``i`` (dropout, conv, residual, norm, activation) on one hop.

        Args:
            i: Layer index in ``[0, num_layers)``.
            agg: The hop's aggregator.
            h_src: ``[agg.num_src, width_in]`` inputs of layer ``i``.
            step: Optimisation step (dropout key).

        Returns:
            ``[agg.num_dst, width_out]``.
        """
        if not 0 <= i < self.num_layers:
            raise ConfigError(f"layer index 'i' must lie in [0, {self.num_layers}) (got {i})")
        p = self.input_dropout if i == 0 else self.dropout
        h = keyed_dropout(h_src, p, self.seed, step, i, agg.src_ids, self.training)
        out = self.convs[i](agg, h, step=step, layer=i)
        if i < self.num_layers - 1:
            if self.residual:
                out = out + self.res[i](h[: agg.num_dst])
            out = self.act(self.norms[i](out))
        return out

    def cacheable_aggregation(self, i: int) -> bool:
        """Whether layer ``i``'s aggregation has no parameters when it aggregates raw inputs.

        True for GCN, GIN and SAGE with ``mean``/``sum`` and no projection: their
        ``aggregate()`` inputs are the (dropped-out, degree-scaled) input rows, so an engine may
        cache the aggregates and get the input gradients as ``A^T dL/da`` (the ``offload``
        engine's recompute/cache hybrid). False for GAT (learned attention) and SAGE ``max``.
        """
        conv = self.convs[i]
        if isinstance(conv, (GCNConv, GINConv)):
            return True
        if isinstance(conv, SAGEConv):
            return conv.aggr in ("mean", "sum") and conv.proj is None
        return False


def build_model(name: str, in_dim: int, num_classes: int, **kwargs: Any) -> GNN:
    """Build a :class:`GNN` with the per-model defaults of :data:`MODEL_DEFAULTS`.

    Args:
        name: ``"gcn"``, ``"sage"``, ``"gat"`` or ``"gin"``.
        in_dim: Input feature width.
        num_classes: Output width.
        **kwargs: Overrides of any :class:`GNN` argument (e.g. ``hidden_dim=32``).

    Raises:
        ConfigError: For an unknown model name or keyword.
    """
    if name not in MODEL_DEFAULTS:
        raise ConfigError(f"unknown model {name!r}; choose one of {tuple(MODEL_DEFAULTS)}")
    allowed = set(inspect.signature(GNN.__init__).parameters) - {
        "self",
        "in_dim",
        "out_dim",
        "conv",
    }
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise ConfigError(
            f"unknown model option(s) {unknown} for {name!r}; valid options: {sorted(allowed)}"
        )
    args = {**MODEL_DEFAULTS[name], **kwargs}
    return GNN(in_dim, out_dim=num_classes, conv=name, **args)
