"""PyG models on fleetgnn's engines: :func:`from_pyg` adapts a ``torch_geometric`` model, unchanged.

The user builds the model with PyG (``torch_geometric.nn.GraphSAGE(...)``, ``GCN``, ``GAT``,
``GIN``, ``EdgeCNN``, or a list of ``MessagePassing`` layers) and passes ``from_pyg(model)`` to an
engine.
The adapter is a :class:`~fleetgnn.nn.LayerwiseModule` whose parameters ARE the PyG model's (no
copy: training updates the user's model in place). Per layer it asks the engine's aggregator for
the hop as PyG takes it (:func:`~fleetgnn.nn.aggregator.bipartite`: source rows, including the
halo or remote rows the engine holds, the destination rows, an ``edge_index`` over them and the
bipartite ``size``) and calls the PyG layer on it::

    out = conv((x_src, x_dst), edge_index, size=size)

then applies what ``BasicGNN.forward`` applies between layers (activation, norm, dropout; ``jk``
``None`` or ``'last'`` and its final ``lin``). On the whole graph this is PyG's own forward.

What it costs, and what differs from PyG:

- The layer aggregates inside itself, so the engine's optimised aggregation is bypassed: on
  ``fullgraph`` the halo is fetched whole before the layer runs (no chunked overlap with local
  edges), on ``split`` the remote source rows are exchanged (not pre-aggregated partial sums), and
  PyG's gather-scatter replaces fleetgnn's sparse products (measured in the Python API guide,
  "Your own PyG model").
- ``offload`` cannot host it: it caches and chunks aggregations, which a PyG layer does not
  expose. Engines outside :attr:`PygModel.hosts` refuse the model in one line.
- BasicGNN's ``torch.nn.Dropout`` between layers is replaced by
  :class:`~fleetgnn.nn.KeyedDropout` with the same ``p`` (masks keyed by global node ID, so every
  engine draws the same ones); dropout INSIDE a PyG layer stays torch's, drawn per process (PyG's
  ``GAT(dropout=p)`` passes ``p`` to its layers' attention too: it trains, but engines no longer
  agree bit for bit).
- ``GCNConv`` has no bipartite form; the adapter runs its parts (``lin``, ``propagate``,
  ``bias``) with PyG's normalisation built from the graph's degrees (``agg.src_degree()``, the
  whole graph's in-degree of every row, plus the self loop's weight as PyG gives it): rows are
  scaled by ``deg^-1/2`` before the hop (halo rows by their owner), each edge weighted by its
  destination's ``deg^-1/2``, one self loop added per destination. That is PyG's ``gcn_norm`` on
  the whole graph, on every engine; on a graph with self loops fleetgnn counts them in the degree
  (as :class:`fleetgnn.nn.GCNConv` does) where PyG does not.
- Refused in one line: other layers with no bipartite ``(x_src, x_dst)`` form, norms that take
  statistics over rows (``BatchNorm``: engines split rows), and ``jk`` modes that need every
  layer's output at the last layer.

``torch_geometric`` is imported only when :func:`from_pyg` is called (``pip install
'fleetgnn[pyg]'``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from fleetgnn.errors import ConfigError
from fleetgnn.nn.aggregator import Aggregator, bipartite
from fleetgnn.nn.protocol import KeyedDropout, LayerwiseModule

#: The engines whose aggregators offer ``bipartite`` (:func:`~fleetgnn.nn.aggregator.bipartite`).
PYG_HOSTS: tuple[str, ...] = ("reference", "minibatch", "split", "fullgraph")


class PygModel(LayerwiseModule):
    """A PyG model driven layer by layer through fleetgnn's aggregators (built by :func:`from_pyg`).

    Layer ``i`` (BasicGNN's order)::

        h = conv_i((x_src, x_dst), edge_index, size=size)
        if i < L - 1 or jk:  h = dropout(act(norm(act_first(h))))
        if i == L - 1 and lin:  h = lin(h)

    Args:
        pyg: The user's PyG module (``BasicGNN`` or a ``ModuleList`` of layers, checked by
            :func:`from_pyg`); its parameters are this model's (``self.pyg``).
        act: Activation between the layers of a ``ModuleList`` (a BasicGNN brings its own).
        dropout: Dropout between the layers of a ``ModuleList`` (a BasicGNN brings its own).
        seed: Seed of the dropout masks.

    Shapes:
        - layer ``i`` input: ``[agg.num_src, width_i]``; output ``[agg.num_dst, width_{i+1}]``.
    """

    hosts = PYG_HOSTS
    hosts_reason = (
        "it caches and chunks aggregations, and a PyG layer aggregates inside itself where the "
        "engine cannot reach"
    )

    def __init__(
        self,
        pyg: nn.Module,
        *,
        act: Callable[[Tensor], Tensor] | None = None,
        dropout: float = 0.0,
        seed: int = 0,
    ) -> None:
        basic = hasattr(pyg, "convs")
        super().__init__(len(pyg.convs) if basic else len(pyg))  # type: ignore[arg-type]
        self.pyg = pyg  # every parameter is registered here, once
        self._basic = basic
        if basic:  # BasicGNN brings its own act, norms, dropout and lin
            self._norm_on = [not isinstance(n, nn.Identity) for n in pyg.norms]  # type: ignore
            self._jk_last = pyg.jk_mode == "last"
            dropout = float(pyg.dropout.p)  # type: ignore[union-attr]
        else:
            self._norm_on = [False] * self.num_layers
            self._jk_last = False
            self.act = act  # a module with parameters (PReLU) trains with the layers
        self.drop = KeyedDropout(dropout, seed=seed)
        self._size_arg = [_takes(self._conv(i), "size") for i in range(self.num_layers)]
        # per GCNConv layer: the self loop's weight PyG's gcn_norm gives (None: not a GCNConv)
        self._gcn = [_gcn_fill(self._conv(i)) for i in range(self.num_layers)]

    def _conv(self, i: int) -> nn.Module:
        return self.pyg.convs[i] if self._basic else self.pyg[i]  # type: ignore[index]

    def in_width(self) -> int | None:
        """Input features per node the first layer was built for (its ``in_channels``).

        ``None`` when it does not say (a lazy layer, ``in_channels=-1``). A bipartite
        ``(src, dst)`` pair gives the source side's: the rows the model is called with.
        """
        width = getattr(self._conv(0), "in_channels", None)
        if isinstance(width, tuple | list):
            width = width[0] if width else None
        return int(width) if isinstance(width, int) and width > 0 else None

    def layer_forward(self, i: int, agg: Aggregator, h_src: Tensor, *, step: int = 0) -> Tensor:
        """Layer ``i`` on one hop: ``[agg.num_src, w_in] -> [agg.num_dst, w_out]``."""
        conv = self._conv(i)
        if self._gcn[i] is not None:
            h = _gcn_layer(conv, agg, h_src, self._gcn[i])
        elif self._size_arg[i]:
            hop = bipartite(agg, h_src)
            h = conv((hop.x_src, hop.x_dst), hop.edge_index, size=hop.size)
        else:
            hop = bipartite(agg, h_src)
            h = conv((hop.x_src, hop.x_dst), hop.edge_index)
        last = i == self.num_layers - 1
        act = self.pyg.act if self._basic else self.act
        act_first = self._basic and bool(self.pyg.act_first)
        if not last or self._jk_last:
            if act is not None and act_first:
                h = act(h)
            if self._norm_on[i]:
                h = self.pyg.norms[i](h)  # type: ignore[index]
            if act is not None and not act_first:
                h = act(h)
            h = self.drop(h, agg, step=step, key=i)
        lin = getattr(self.pyg, "lin", None) if self._basic else None
        if last and lin is not None:
            h = lin(h)
        return h


def _takes(module: nn.Module, name: str) -> bool:
    return name in inspect.signature(module.forward).parameters


def _is_gcn(conv: nn.Module) -> bool:
    """Whether ``conv`` is PyG's ``GCNConv`` (by class, without importing PyG here)."""
    return any(
        c.__name__ == "GCNConv" and c.__module__.startswith("torch_geometric")
        for c in type(conv).__mro__
    )


def _gcn_fill(conv: nn.Module) -> float | None:
    """The self loop's weight in PyG's ``gcn_norm`` for ``conv`` (``None``: not a GCNConv).

    Asked of PyG itself on the graph ``0 -> 1``: node 1's loop gets ``fill / (1 + fill)``. (PyG
    2.8 adds unweighted loops of weight 1 even when ``improved``, whose 2 applies only where the
    edges carry weights; asking keeps the adapter equal to the installed version.)
    """
    if not _is_gcn(conv):
        return None
    if not (conv.normalize and conv.add_self_loops):
        return 0.0
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    ei, w = gcn_norm(torch.tensor([[0], [1]]), None, 2, conv.improved, True, dtype=torch.float64)
    v = float(w[(ei[0] == 1) & (ei[1] == 1)].sum())
    return v / (1.0 - v)


def _gcn_layer(conv: Any, agg: Aggregator, h_src: Tensor, fill: float) -> Tensor:
    """PyG's ``GCNConv.forward`` on one hop, normalised by the graph's degrees.

    ``out_i = bias + sum_{j -> i} d_j^-1/2 d_i^-1/2 lin(h_j) + fill d_i^-1 lin(h_i)`` with
    ``d = in-degree + fill`` (``fill``: see :func:`_gcn_fill`; ``normalize=False``: the plain
    sum over the hop's edges, no loops). ``lin`` has no bias, so scaling the rows first is
    scaling ``lin``'s output.
    """
    m = agg.num_dst
    w: Tensor | None = None
    if conv.normalize:
        dis = (agg.src_degree().to(h_src.dtype) + fill).rsqrt()
        dis = dis.masked_fill(dis.isinf(), 0.0)  # as gcn_norm: a row of degree 0 sends nothing
        hop = bipartite(agg, h_src * dis[:, None])
        src, dst = hop.edge_index
        w = dis[:m].index_select(0, dst)
        if conv.add_self_loops:  # PyG replaces a node's loops by one of weight `fill`
            keep = src != dst  # destinations are the first source rows: a loop has src == dst
            loops = torch.arange(m, device=src.device)
            src = torch.cat([src[keep], loops])
            dst = torch.cat([dst[keep], loops])
            w = torch.cat([w[keep], dis[:m] * fill])
        edge_index = torch.stack([src, dst])
    else:
        hop = bipartite(agg, h_src)
        edge_index = hop.edge_index
    x = conv.lin(hop.x_src)
    out = conv.propagate(edge_index, x=(x, x[:m]), edge_weight=w, size=hop.size)
    return out if conv.bias is None else out + conv.bias


def _check_conv(conv: Any, i: int, mp: type) -> None:
    """Refuse a layer that is not a ``MessagePassing`` or has no bipartite form."""
    name = type(conv).__name__
    if not isinstance(conv, mp):
        raise ConfigError(
            f"layer {i} ({name}) is not a torch_geometric MessagePassing layer; from_pyg takes a "
            f"BasicGNN (GraphSAGE, GCN, GAT, GIN, EdgeCNN) or a list of MessagePassing layers"
        )
    annotation = str(inspect.signature(conv.forward).parameters["x"].annotation)
    if _is_gcn(conv):
        if getattr(conv, "cached", False):
            raise ConfigError(
                f"layer {i} (GCNConv) has cached=True, a normalised edge_index kept from the "
                f"first graph it saw, which differs per hop and per rank here; build it with "
                f"cached=False (fleetgnn's whole-graph aggregator caches its own)"
            )
    elif "Tuple" not in annotation and "tuple" not in annotation and "Pair" not in annotation:
        raise ConfigError(
            f"layer {i} ({name}) takes one node set, not PyG's bipartite (x_src, x_dst), so it "
            f"cannot run on an engine's hop; use a layer that does (SAGEConv, GATConv, GINConv, "
            f"GraphConv, GCNConv) or fleetgnn's own layers"
        )


def _check_norm(norm: nn.Module, i: int) -> None:
    """Refuse a norm that takes statistics over rows (identity and per-row norms pass)."""
    if isinstance(norm, (nn.Identity, nn.LayerNorm)) or getattr(norm, "mode", None) == "node":
        return
    raise ConfigError(
        f"norm {i} ({type(norm).__name__}) takes statistics over rows, which engines that split "
        f"the rows across ranks or batches would compute differently; use norm=None or "
        f"norm='layer_norm' with norm_kwargs={{'mode': 'node'}}"
    )


def from_pyg(
    model: Any,
    *,
    act: Callable[[Tensor], Tensor] | None = nn.functional.relu,
    dropout: float = 0.0,
    seed: int = 0,
) -> PygModel:
    """Adapt a PyG model, unchanged, to fleetgnn's engines (see the module docstring).

    Args:
        model: A ``torch_geometric.nn.models.basic_gnn.BasicGNN`` (``GraphSAGE``, ``GCN``, ``GAT``,
            ``GIN``, ``EdgeCNN``), a ``MessagePassing`` layer, or a sequence (``list``,
            ``ModuleList``) of them.
        act: For a layer or a sequence: the activation between layers (``None``: none). A
            BasicGNN brings its own.
        dropout: For a layer or a sequence: dropout between layers. A BasicGNN brings its own
            ``p``. Drawn by :class:`~fleetgnn.nn.KeyedDropout`.
        seed: Seed of the dropout masks.

    Returns:
        A :class:`PygModel` sharing ``model``'s parameters, for ``reference``, ``minibatch``,
        ``split`` and ``fullgraph``.

    Raises:
        ConfigError: If ``torch_geometric`` does not import, or the model is refused (one line
            naming the layer, norm or ``jk`` and what to use instead).
    """
    try:
        from torch_geometric.nn import MessagePassing
        from torch_geometric.nn.models.basic_gnn import BasicGNN
    except ImportError as exc:
        raise ConfigError(
            f"from_pyg needs torch_geometric ({exc}); install it with pip install 'fleetgnn[pyg]'"
        ) from None
    if isinstance(model, BasicGNN):
        return _from_basic_gnn(model, MessagePassing, seed)
    layers = [model] if isinstance(model, MessagePassing) else model
    if not isinstance(layers, (Sequence, nn.ModuleList)) or len(layers) == 0:
        raise ConfigError(
            f"'model' must be a torch_geometric BasicGNN (GraphSAGE, GCN, GAT, GIN, EdgeCNN), a "
            f"MessagePassing layer or a non-empty list of them (got {type(model).__name__})"
        )
    for i, conv in enumerate(layers):
        _check_conv(conv, i, MessagePassing)
    stack = layers if isinstance(layers, nn.ModuleList) else nn.ModuleList(layers)
    return PygModel(stack, act=act, dropout=dropout, seed=seed)


def _from_basic_gnn(model: Any, mp: type, seed: int) -> PygModel:
    for i, conv in enumerate(model.convs):
        _check_conv(conv, i, mp)
    jk = model.jk_mode
    if jk not in (None, "last"):
        raise ConfigError(
            f"jk={jk!r} combines every layer's output at the last layer, which engines that run "
            f"one layer at a time (layer-wise inference) cannot hold; use jk=None or jk='last'"
        )
    for i, norm in enumerate(model.norms):
        _check_norm(norm, i)
    return PygModel(model, seed=seed)
