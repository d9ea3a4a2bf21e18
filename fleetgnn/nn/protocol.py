"""The model protocol every engine drives, a base class that provides it, and keyed dropout.

An engine never builds the model: it takes any :class:`torch.nn.Module` that is layer-wise, i.e.

- ``num_layers: int``: the number of message-passing hops, and
- ``layer_forward(i, agg, h_src, *, step) -> Tensor``: apply layer ``i`` to one hop, where ``agg``
  is an :class:`~fleetgnn.nn.Aggregator` (``num_src`` input rows, the first ``num_dst`` of which
  are the output rows) and ``h_src`` is ``[agg.num_src, width]``; returns ``[agg.num_dst, out]``;
- ``forward(aggs, x, *, step) -> Tensor``: all layers, one aggregator per layer (for the full
  graph the same one repeated). :class:`LayerwiseModule` provides it from ``layer_forward``.

Optionally ``hosts: tuple[str, ...]``, the engines that can drive it (with ``hosts_reason``, why
not the others): an engine outside it refuses the model when it is built (:func:`check_model`).
A model that needs an optional aggregator method (:func:`~fleetgnn.nn.from_pyg`'s models need
``bipartite``) declares it so.

Layer-wise engines rely on this: the full-graph engines put communication inside the aggregator,
layer-wise inference runs one layer over all nodes at a time, and host-offloaded training
recomputes a layer from its saved input. Anything that crosses edges must go through ``agg``;
anything per-node (MLPs, norms, residuals, jumping knowledge over a layer's rows) is free.

Randomness: draw dropout with :class:`KeyedDropout` (or :func:`~fleetgnn.ops.keyed_dropout`) keyed
by the rows' global IDs (``agg.src_ids``), the ``step`` the engine passes in and a per-module key,
so every engine, world size and partitioning draws the same masks and computes the same function.
``torch.nn.Dropout`` would draw per-process masks: the model would still train, but engines would
no longer agree bit for bit.

Example (a user model with a residual MLP head)::

    class MyModel(fleetgnn.nn.LayerwiseModule):
        def __init__(self, d_in, d_hid, n_cls):
            super().__init__(num_layers=2)
            self.convs = nn.ModuleList([SAGEConv(d_in, d_hid), SAGEConv(d_hid, d_hid)])
            self.drop = KeyedDropout(0.5, seed=0)
            self.head = nn.Sequential(nn.Linear(d_hid, d_hid), nn.ReLU(), nn.Linear(d_hid, n_cls))

        def layer_forward(self, i, agg, h, *, step=0):
            h = self.drop(h, agg, step=step, key=i)
            h = self.convs[i](agg, h).relu()
            return self.head(h) if i == self.num_layers - 1 else h
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from torch import Tensor, nn

from fleetgnn.errors import ConfigError
from fleetgnn.nn.aggregator import Aggregator
from fleetgnn.ops import keyed_dropout


@runtime_checkable
class LayerwiseModel(Protocol):
    """What an engine needs from a model (see the module docstring)."""

    num_layers: int

    def layer_forward(self, i: int, agg: Aggregator, h_src: Tensor, *, step: int = 0) -> Tensor:
        """Layer ``i`` on one hop: ``[agg.num_src, w_in] -> [agg.num_dst, w_out]``."""
        ...

    def __call__(self, aggs: Sequence[Aggregator], x: Tensor, *, step: int = 0) -> Tensor:
        """All layers, ``aggs[i]`` for layer ``i``."""
        ...


class LayerwiseModule(nn.Module):
    """Base class of layer-wise models: subclasses implement :meth:`layer_forward`.

    Args:
        num_layers: Number of message-passing layers (>= 1).
    """

    def __init__(self, num_layers: int) -> None:
        super().__init__()
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
            raise ConfigError(f"'num_layers' must be a positive int (got {num_layers!r})")
        self.num_layers = num_layers

    def layer_forward(self, i: int, agg: Aggregator, h_src: Tensor, *, step: int = 0) -> Tensor:
        """Layer ``i`` on one hop (override this).

        Shapes:
            - h_src: ``[agg.num_src, width_in]``.
            - output: ``[agg.num_dst, width_out]``.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement layer_forward")

    def forward(self, aggs: Sequence[Aggregator], x: Tensor, *, step: int = 0) -> Tensor:
        """Chain :meth:`layer_forward` over one aggregator per layer.

        Args:
            aggs: ``num_layers`` aggregators, outermost hop first (full graph: the same one
                repeated).
            x: ``[aggs[0].num_src, in_dim]`` input features.
            step: Optimisation step (dropout key).

        Returns:
            ``[aggs[-1].num_dst, out_dim]``.
        """
        if len(aggs) != self.num_layers:
            raise ConfigError(
                f"'aggs' must hold one aggregator per layer, {self.num_layers} (got {len(aggs)}); "
                f"for the full graph repeat the same aggregator"
            )
        h = x
        for i, agg in enumerate(aggs):
            h = self.layer_forward(i, agg, h, step=step)
        return h


class KeyedDropout(nn.Module):
    """Dropout whose mask depends only on ``(seed, step, key, global row ID, column)``.

    The rows of ``h`` are the first ``h.shape[0]`` rows of ``agg`` (its source rows, or the
    destination rows, which are their prefix), so the mask of a node's row is the same on every
    engine, rank, partition and chunk. Use a distinct ``key`` for every dropout site of a step
    (e.g. the layer index, plus an offset for a second site in the same layer).

    Args:
        p: Drop probability in ``[0, 1)``.
        seed: Seed of the masks.
    """

    def __init__(self, p: float, seed: int = 0) -> None:
        super().__init__()
        if not 0.0 <= float(p) < 1.0:
            raise ConfigError(f"'p' must lie in [0, 1) (got {p!r})")
        self.p, self.seed = float(p), int(seed)

    def forward(self, h: Tensor, agg: Aggregator, *, step: int, key: int) -> Tensor:
        """``h`` with dropout applied (identity in eval mode).

        Shapes:
            - h: ``[R, *feat]`` with ``R <= agg.num_src`` (the first ``R`` rows of the hop).
            - output: like ``h``.
        """
        return keyed_dropout(
            h, self.p, self.seed, step, key, agg.src_ids[: h.shape[0]], self.training
        )

    def extra_repr(self) -> str:
        """``p`` and ``seed`` in the module's repr."""
        return f"p={self.p}, seed={self.seed}"


def check_model(model: Any, engine: str | None = None) -> nn.Module:
    """Return ``model`` if it follows the layer protocol, else raise a clear error.

    Args:
        model: The model.
        engine: The engine that will drive it (``None``: any); refused unless it is among the
            model's ``hosts`` (when it declares them).

    Raises:
        ConfigError: If ``model`` is not an ``nn.Module``, has no positive int ``num_layers`` or
            no ``layer_forward`` method, or ``engine`` cannot host it.
    """
    if type(model).__module__.startswith("torch_geometric") or (
        isinstance(model, (list, nn.ModuleList))
        and any(type(m).__module__.startswith("torch_geometric") for m in model)
    ):
        raise ConfigError(
            f"{type(model).__name__} is a PyG model, which engines drive through an adapter: "
            f"pass fleetgnn.nn.from_pyg(model) (the same parameters, trained in place)"
        )
    if not isinstance(model, nn.Module):
        raise ConfigError(
            f"'model' must be a torch.nn.Module following fleetgnn's layer protocol (got "
            f"{type(model).__name__}); subclass fleetgnn.nn.LayerwiseModule"
        )
    n = getattr(model, "num_layers", None)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(
            f"model {type(model).__name__} must have a positive int attribute 'num_layers' "
            f"(got {n!r}); subclass fleetgnn.nn.LayerwiseModule(num_layers=...)"
        )
    if not callable(getattr(model, "layer_forward", None)):
        raise ConfigError(
            f"model {type(model).__name__} must implement layer_forward(i, agg, h_src, *, step); "
            f"see fleetgnn.nn.LayerwiseModule"
        )
    hosts = getattr(model, "hosts", None)
    if engine is not None and hosts is not None and engine not in hosts:
        why = getattr(model, "hosts_reason", "")
        raise ConfigError(
            f"the {engine} engine cannot run {type(model).__name__}{f' ({why})' if why else ''}; "
            f"use engine {' | '.join(hosts)}"
        )
    return model
