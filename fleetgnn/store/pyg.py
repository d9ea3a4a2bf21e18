"""PyG interop: :class:`UnifiedStore` as ``torch_geometric.data.FeatureStore`` / ``GraphStore``.

Optional: ``torch_geometric`` is imported only when :func:`to_pyg` is called (install with
``pip install fleetgnn[pyg]``). The adapters are read-only views of one homogeneous graph:

- feature store: attribute ``"x"`` is read through :meth:`UnifiedStore.gather` (tiered, metered);
  ``"y"`` and the split masks come from the graph's arrays. ``group_name`` is ``None``.
- graph store: one edge type (``None``) in ``"csc"`` layout (``row`` = source IDs grouped by
  destination, ``colptr``) or ``"coo"``, read through :meth:`UnifiedStore.all_neighbors`; PyG
  converts to ``"csr"`` itself.

Example:
    >>> feature_store, graph_store = to_pyg(store)
    >>> # torch_geometric.loader.NeighborLoader((feature_store, graph_store), ...)
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fleetgnn.errors import FleetgnnError
from fleetgnn.graph.csc import SPLITS
from fleetgnn.store.store import UnifiedStore

__all__ = ["to_pyg"]

_NODE_ATTRS: tuple[str, ...] = ("x", "y", *SPLITS)


def _import_pyg() -> Any:
    try:
        import torch_geometric.data as pyg_data
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise FleetgnnError(
            f"the PyG interop needs torch_geometric ({exc}); install it with "
            "`pip install fleetgnn[pyg]`"
        ) from None
    return pyg_data


@functools.lru_cache(maxsize=1)
def _classes() -> tuple[type, type]:
    pyg = _import_pyg()

    class FleetgnnFeatureStore(pyg.FeatureStore):  # type: ignore[misc, name-defined]
        """Read-only PyG ``FeatureStore`` over a :class:`UnifiedStore`."""

        def __init__(self, store: UnifiedStore) -> None:
            super().__init__()
            self.__dict__["store"] = store

        def _attrs(self) -> list[str]:
            g = self.store.graph
            return [a for a in _NODE_ATTRS if getattr(g, a) is not None]

        def _index(self, index: Any) -> Tensor | None:
            if index is None or isinstance(index, slice):
                n = self.store.num_nodes
                return None if index is None else torch.arange(n)[index]
            return torch.as_tensor(index).reshape(-1).to(torch.int64)

        def _get_tensor(self, attr: Any) -> Tensor | None:
            name = attr.attr_name
            if name not in self._attrs():
                return None
            idx = self._index(attr.index)
            if name == "x":
                ids = torch.arange(self.store.num_nodes) if idx is None else idx
                return self.store.gather(ids)
            arr = getattr(self.store.graph, name)
            sel = arr if idx is None else arr[idx.numpy()]
            return torch.from_numpy(np.array(sel))

        def _get_tensor_size(self, attr: Any) -> tuple[int, ...] | None:
            name = attr.attr_name
            if name not in self._attrs():
                return None
            return tuple(getattr(self.store.graph, name).shape)

        def get_all_tensor_attrs(self) -> list[Any]:
            return [pyg.TensorAttr(group_name=None, attr_name=a) for a in self._attrs()]

        def _put_tensor(self, tensor: Tensor, attr: Any) -> bool:
            return False  # read-only: the store's tiers are planned at build time

        def _remove_tensor(self, attr: Any) -> bool:
            return False

    class FleetgnnGraphStore(pyg.GraphStore):  # type: ignore[misc, name-defined]
        """Read-only PyG ``GraphStore`` over a :class:`UnifiedStore`'s tiered topology."""

        def __init__(self, store: UnifiedStore) -> None:
            super().__init__()
            self.__dict__["store"] = store

        def _get_edge_index(self, edge_attr: Any) -> tuple[Tensor, Tensor] | None:
            layout = str(getattr(edge_attr.layout, "value", edge_attr.layout))
            if edge_attr.edge_type is not None or layout not in ("csc", "coo"):
                return None
            n = self.store.num_nodes
            counts, row = self.store.all_neighbors(torch.arange(n))
            if layout == "coo":
                return row, torch.repeat_interleave(torch.arange(n), counts)
            colptr = torch.zeros(n + 1, dtype=torch.int64)
            torch.cumsum(counts, 0, out=colptr[1:])
            return row, colptr

        def get_all_edge_attrs(self) -> list[Any]:
            n = self.store.num_nodes
            return [pyg.EdgeAttr(None, "csc", is_sorted=True, size=(n, n))]

        def _put_edge_index(self, edge_index: Any, edge_attr: Any) -> bool:
            return False

        def _remove_edge_index(self, edge_attr: Any) -> bool:
            return False

    return FleetgnnFeatureStore, FleetgnnGraphStore


def to_pyg(store: UnifiedStore) -> tuple[Any, Any]:
    """PyG ``(FeatureStore, GraphStore)`` views of ``store``.

    Args:
        store: A built :class:`UnifiedStore`.

    Returns:
        ``(feature_store, graph_store)``, instances of ``torch_geometric.data.FeatureStore`` and
        ``GraphStore`` subclasses; reads go through the store's tiers and meter.

    Raises:
        FleetgnnError: If torch_geometric is not installed (install ``fleetgnn[pyg]``) or
            ``store`` is not a :class:`UnifiedStore`.
    """
    if not isinstance(store, UnifiedStore):
        raise FleetgnnError(f"'store' must be a UnifiedStore (got {type(store).__name__})")
    feature_cls, graph_cls = _classes()
    return feature_cls(store), graph_cls(store)
