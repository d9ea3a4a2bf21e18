"""Conversion to and from PyTorch Geometric's ``torch_geometric.data.Data``.

PyTorch Geometric is an optional dependency (``pip install fleetgnn[pyg]``) and is imported only
inside :func:`to_pyg` (torch too, so importing the loaders stays cheap). :func:`from_pyg` never
imports either: it reads attributes, so it also accepts any object with a ``Data``-like interface
(``edge_index``, ``x``, ``y``, masks, ``edge_weight``, ``edge_attr``, ``edge_time``,
``node_time`` or ``time``) holding torch tensors or numpy arrays.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from fleetgnn.errors import FleetgnnError, GraphError
from fleetgnn.graph.csc import SPLITS, Graph, from_edges

PYG_HINT = "pip install fleetgnn[pyg]"


def _array(value: object, what: str) -> np.ndarray:
    """A torch tensor or numpy array as a numpy array (copied off the device)."""
    torch = sys.modules.get("torch")  # a tensor implies torch is imported; never import it here
    if torch is not None and isinstance(value, torch.Tensor):
        if value.is_sparse or value.layout != torch.strided:
            raise GraphError(f"'{what}' must be a dense tensor (got layout {value.layout})")
        t = value.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.numpy()
    if isinstance(value, np.ndarray):
        return value
    raise GraphError(f"'{what}' must be a torch.Tensor or numpy array (got {type(value).__name__})")


def from_pyg(data: Any, *, name: str = "pyg", num_classes: int | None = None) -> Graph:
    """Build a :class:`Graph` from a PyG ``Data`` object (or anything with its attributes).

    Reads ``edge_index`` (int ``[2, E]``, row 0 = source, row 1 = destination), and when present
    ``x`` ``[N, F]``, ``y`` ``[N]`` or ``[N, 1]`` (integer classes, ``-1`` = unlabelled),
    ``train_mask`` / ``val_mask`` / ``test_mask`` (bool ``[N]``), ``edge_weight`` ``[E]`` and
    ``edge_attr`` (edge features ``[E, D]``, or ``[E]`` read as ``D = 1``; integer or bool values
    become float32), which follows its edges into CSC order (``Graph.edge_attr[e]`` belongs to
    CSC edge ``e``), and the edge times: ``edge_time``, else ``time`` when it has one entry per
    edge (PyG's ``time_attr`` convention), integers ``>= 0`` (or integral floats), which sort
    each node's in-edges by time (:func:`~fleetgnn.graph.csc.from_edges`); and the node times
    (``node_time``): ``node_time``, else ``time`` when it has one entry per node (PyG's
    ``NeighborLoader(time_attr=...)`` of a node task). A ``time`` with as many entries as there
    are nodes and edges is refused as ambiguous (name it ``edge_time`` or ``node_time``), and
    so is one with neither count. The node count is ``data.num_nodes`` when the object has it,
    else inferred from ``x`` or the largest ID. Edges keep their order within each destination;
    nothing is symmetrised or deduplicated.

    Args:
        data: A ``torch_geometric.data.Data`` or a duck-typed object.
        name: Graph name.
        num_classes: Class count (default ``max(y) + 1``).

    Returns:
        The validated graph (numpy arrays, copied to the CPU).

    Raises:
        GraphError: If an attribute is missing, of the wrong type or shape, or out of range.
    """
    ei = getattr(data, "edge_index", None)
    if ei is None:
        raise GraphError(
            "'data.edge_index' is missing; from_pyg needs an int [2, E] edge_index (convert a "
            "SparseTensor 'adj_t' to edge_index first)"
        )
    edge_index = _array(ei, "edge_index")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2 or edge_index.dtype.kind not in "iu":
        raise GraphError(
            f"'edge_index' must be an integer array of shape [2, E] (got {edge_index.dtype} "
            f"{tuple(edge_index.shape)}); transpose an [E, 2] list with .t()"
        )
    node_data: dict[str, np.ndarray] = {}
    x = getattr(data, "x", None)
    if x is not None:
        arr = _array(x, "x")
        if arr.ndim != 2:
            raise GraphError(f"'x' must be 2-D [N, F] (got shape {tuple(arr.shape)})")
        node_data["x"] = arr if arr.dtype.kind == "f" else arr.astype(np.float32)
    y = getattr(data, "y", None)
    if y is not None:
        arr = _array(y, "y")
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise GraphError(
                f"'y' must hold one integer class per node, shape [N] or [N, 1] (got {arr.dtype} "
                f"{tuple(arr.shape)}); multi-label or regression targets are not supported"
            )
        node_data["y"] = arr.astype(np.int64)
    for mask_name in SPLITS:
        m = getattr(data, mask_name, None)
        if m is not None:
            arr = _array(m, mask_name)
            if arr.dtype != np.bool_:
                raise GraphError(
                    f"'{mask_name}' must be a bool [N] mask (got {arr.dtype}); turn an index "
                    f"tensor into a mask with torch.zeros(N, dtype=torch.bool).index_fill_(0, "
                    f"idx, True)"
                )
            node_data[mask_name] = arr
    weight = getattr(data, "edge_weight", None)
    edge_weight = None
    if weight is not None:
        edge_weight = _array(weight, "edge_weight")
        if edge_weight.dtype.kind != "f":
            edge_weight = edge_weight.astype(np.float32)
    attr = getattr(data, "edge_attr", None)
    edge_attr = None
    if attr is not None:
        edge_attr = _array(attr, "edge_attr")
        if edge_attr.ndim == 1:
            edge_attr = edge_attr[:, None]
        if edge_attr.ndim != 2 or edge_attr.shape[0] != edge_index.shape[1]:
            raise GraphError(
                f"'edge_attr' must hold one row per edge of 'edge_index', shape "
                f"[{edge_index.shape[1]}, D] (got {tuple(edge_attr.shape)})"
            )
        if edge_attr.dtype.kind in "biu":
            edge_attr = edge_attr.astype(np.float32)
        elif edge_attr.dtype.kind != "f":
            raise GraphError(f"'edge_attr' must be numeric (got {edge_attr.dtype})")
    num_nodes = getattr(data, "num_nodes", None)
    if num_nodes is not None and (
        isinstance(num_nodes, bool) or not isinstance(num_nodes, (int, np.integer))
    ):
        raise GraphError(f"'num_nodes' must be an integer (got {num_nodes!r})")
    edge_time, time_of_nodes = _times(data, edge_index, num_nodes, node_data)
    node_time = getattr(data, "node_time", None)
    if node_time is not None:
        node_data["node_time"] = _array(node_time, "node_time")
    elif time_of_nodes is not None:
        node_data["node_time"] = time_of_nodes
    return from_edges(
        edge_index[0],
        edge_index[1],
        None if num_nodes is None else int(num_nodes),
        edge_weight=edge_weight,
        edge_attr=edge_attr,
        edge_time=edge_time,
        node_data=node_data,
        num_classes=num_classes,
        name=name,
    )


def _times(
    data: Any, edge_index: np.ndarray, num_nodes: int | None, node_data: dict[str, np.ndarray]
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(edge times, node times read from 'time')``: ``edge_time``, or ``time`` by its length.

    ``time`` is the edges' with ``E`` entries and the nodes' with ``N`` (``data.num_nodes``, else
    the rows of ``x`` or the largest ID + 1, as :func:`from_pyg` counts them); it is read only
    where ``edge_time`` (for edges) or ``node_time`` (for nodes) is absent.
    """
    num_edges = int(edge_index.shape[1])
    value = getattr(data, "edge_time", None)
    edge_time = None if value is None else _array(value, "edge_time")
    has_node_time = getattr(data, "node_time", None) is not None
    value = getattr(data, "time", None)
    if value is None or (edge_time is not None and has_node_time):
        return edge_time, None
    t = _array(value, "time")
    n = num_nodes
    if n is None:
        rows = [int(v.shape[0]) for v in node_data.values()]
        n = max([int(edge_index.max()) + 1 if edge_index.size else 0, *rows])
    n = int(n)
    per_edge = edge_time is None and t.ndim == 1 and t.shape[0] == num_edges
    per_node = not has_node_time and t.ndim == 1 and t.shape[0] == n
    if per_edge and per_node:
        raise GraphError(
            f"'time' has {num_edges} entries, as many as there are nodes and edges, so it may be "
            f"either's; name edge times 'edge_time' (data.edge_time = data.time) or node times "
            f"'node_time'"
        )
    if per_edge:
        return t, None
    if per_node:
        return edge_time, t
    raise GraphError(
        f"'time' must hold one time per edge ({num_edges}) or per node ({n}) (got shape "
        f"{tuple(t.shape)}); name the times 'edge_time' or 'node_time'"
    )


def to_pyg(graph: Graph) -> Any:
    """Convert a :class:`Graph` to ``torch_geometric.data.Data``.

    ``edge_index`` (int64 ``[2, E]``, in CSC order: grouped by destination) and ``num_nodes`` are
    always set; ``x``, ``y``, the split masks, ``node_time``, ``edge_weight``, ``edge_attr`` and
    ``edge_time`` when present.
    Arrays are copied, so a graph backed by read-only memory maps converts too (at the cost of
    loading it).

    Args:
        graph: The graph.

    Returns:
        A ``torch_geometric.data.Data``.

    Raises:
        FleetgnnError: If PyTorch Geometric is not installed.
    """
    import torch

    try:
        from torch_geometric.data import Data
    except ImportError as e:
        raise FleetgnnError(
            f"to_pyg needs PyTorch Geometric, an optional dependency; install it with "
            f"'{PYG_HINT}' ({e})"
        ) from e
    src, dst = graph.edges()
    kw: dict[str, Any] = {
        "edge_index": torch.from_numpy(np.stack([src, dst]).astype(np.int64)),
        "num_nodes": graph.num_nodes,
    }
    for key, arr in graph.node_data().items():
        kw[key] = torch.from_numpy(np.array(arr))
    if graph.edge_weight is not None:
        kw["edge_weight"] = torch.from_numpy(np.array(graph.edge_weight))
    if graph.edge_attr is not None:
        kw["edge_attr"] = torch.from_numpy(np.array(graph.edge_attr))
    if graph.edge_time is not None:
        kw["edge_time"] = torch.from_numpy(np.array(graph.edge_time))
    return Data(**kw)
