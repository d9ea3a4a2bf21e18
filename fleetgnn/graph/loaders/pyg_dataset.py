"""Datasets a PyTorch Geometric user already has on disk, in PyG's processed format.

A PyG ``InMemoryDataset`` (``Planetoid``, ``Amazon``, ``Coauthor``, ``CitationFull``, ``Reddit``,
OGB's ``PygNodePropPredDataset``, ...) keeps what it built from its raw files in
``ROOT/NAME/processed/*.pt`` (or ``ROOT/processed/*.pt``): a ``torch.save`` of ``(data dict,
slices, data class)`` (older releases: ``(Data, slices)``). :func:`load_pyg_dataset` reads that
file and converts its one graph with :func:`~fleetgnn.graph.loaders.pyg.from_pyg`.

Nothing is ever downloaded or processed: without the processed file the loader stops with one
line saying so. The file is read with ``torch.load(weights_only=True)``, which builds tensors and
the data classes PyG registers as safe and refuses every other Python object, so a hostile file
cannot run code. PyG's own dataset classes are not instantiated: their constructor also reads
``processed/pre_transform.pt`` with ``weights_only=False`` and its loader retries a refused file
with ``weights_only=False``, either of which runs whatever a hostile directory holds.

Memory (``max_bytes``, ``prepare --max-memory``): the file is memory-mapped (``mmap=True``), so
no tensor is read before the sizes its shapes declare (features, plus
:data:`~fleetgnn.graph.loaders._io.EDGE_BYTES` per edge and
:data:`~fleetgnn.graph.loaders._io.NODE_BYTES` per node) are checked; a file in PyG's old
(non-zip) serialisation cannot be mapped and counts its own size as well.
"""

from __future__ import annotations

import os
import pickle
import types
import warnings
from pathlib import Path
from typing import Any

from fleetgnn.errors import DatasetError, FleetgnnError
from fleetgnn.graph.csc import SPLITS, Graph
from fleetgnn.graph.loaders._io import (
    EDGE_BYTES,
    NODE_BYTES,
    READ_ERRORS,
    MemoryBudget,
    require_file,
    resolve_max_bytes,
)
from fleetgnn.graph.loaders.pyg import PYG_HINT, from_pyg
from fleetgnn.graph.loaders.splits import check_split_args, user_split

#: Files in ``processed/`` that are PyG's bookkeeping, not data (and never read here).
BOOKKEEPING: tuple[str, ...] = ("pre_transform.pt", "pre_filter.pt")
#: Datasets whose bag-of-words features are customarily row-normalised (PyG's examples apply
#: ``T.NormalizeFeatures()``; the GCN/GAT papers' preprocessing): Planetoid, CitationFull,
#: Amazon and Coauthor, by lower-case name.
ROW_NORM_DATASETS: frozenset[str] = frozenset(
    {"cora", "citeseer", "pubmed", "cora_ml", "dblp", "computers", "photo", "cs", "physics"}
)


def pyg_feature_norm(name: str) -> str:
    """The customary feature transform of the PyG dataset ``name``: ``"row"`` or ``"none"``.

    ``fleetgnn prepare pyg`` records it in ``meta.json`` as ``feature_norm`` (applying it again to
    features a ``pre_transform`` already normalised changes nothing).
    """
    return "row" if name.lower() in ROW_NORM_DATASETS else "none"


def find_processed(root: str | os.PathLike[str], name: str) -> Path:
    """The processed file of dataset ``name`` under ``root``, as PyG lays it out.

    Looks in ``ROOT/NAME/processed`` (``NAME`` matched without regard to case, and with ``-`` as
    ``_`` as OGB names its directories), then ``ROOT/processed`` (datasets such as ``Reddit``
    whose root is their own directory). In that directory it takes ``data.pt``, else the one
    ``.pt`` file besides PyG's bookkeeping (``pre_transform.pt``, ``pre_filter.pt``).

    Raises:
        DatasetError: If ``root`` is not a directory, no processed directory or file exists (the
            message says how to create one with PyG: fleetgnn never downloads), or the
            processed directory holds several candidate files.
    """
    base = Path(root)
    if not base.is_dir():
        raise DatasetError(f"PyG root '{base}' does not exist or is not a directory")
    wanted = {name.lower(), name.lower().replace("-", "_")}
    dirs = [base / name]
    dirs += sorted(p for p in base.iterdir() if p.name.lower() in wanted and p != base / name)
    dirs.append(base)
    looked = [d / "processed" for d in dirs]
    processed = next((p for p in looked if p.is_dir()), None)
    if processed is None:
        hint = ""
        raw = next((d / "raw" for d in dirs if (d / "raw").is_dir()), None)
        ind = sorted(raw.glob("ind.*.x")) if raw is not None else []
        if ind:  # Planetoid's raw files: fleetgnn reads those itself
            hint = (
                f"; or convert the raw files directly: fleetgnn prepare planetoid --root "
                f"'{raw}' --name {ind[0].name.split('.')[1]}"
            )
        raise DatasetError(
            f"no PyG processed files for {name!r} under '{base}' (looked for "
            f"{', '.join(repr(str(p)) for p in dict.fromkeys(looked))}); fleetgnn never "
            f"downloads or processes: load the dataset once with PyG (e.g. "
            f"torch_geometric.datasets.Planetoid('{base}', '{name}')) to create them{hint}"
        )
    if (processed / "data.pt").is_file():
        return processed / "data.pt"
    files = sorted(p for p in processed.glob("*.pt") if p.is_file() and p.name not in BOOKKEEPING)
    if not files:
        raise DatasetError(
            f"'{processed}' holds no processed .pt file; load the dataset once with PyG to "
            f"create it (fleetgnn never downloads or processes)"
        )
    if len(files) > 1:
        raise DatasetError(
            f"'{processed}' holds several processed files ({', '.join(p.name for p in files)}); "
            f"fleetgnn prepare pyg reads a dataset of one graph (node classification)"
        )
    return files[0]


def _torch_load(path: Path, budget: MemoryBudget) -> Any:
    """``torch.load(weights_only=True)``, memory-mapped where the format allows."""
    import torch

    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as e:
            if "mmap" not in str(e) and "zipfile" not in str(e):
                raise
        # PyG's old (non-zip) serialisation cannot be mapped: read it whole
        size = path.stat().st_size
        budget.take(f"'{path}' (old serialisation, read whole) is {size} bytes", size)
        return torch.load(path, map_location="cpu", weights_only=True)
    except FleetgnnError:
        raise
    except pickle.UnpicklingError as e:
        why = _reason(e)
        if "global" not in why.lower():
            raise DatasetError(
                f"'{path}' cannot be read as a PyG processed file ({why[:200]}); it is truncated "
                f"or corrupt, or not a torch.save file"
            ) from e
        raise DatasetError(
            f"'{path}' is refused: it needs Python objects beyond tensors and PyG's data classes "
            f"({why[:200]}); fleetgnn loads processed files with weights_only=True so that a "
            f"hostile file cannot run code"
        ) from e
    except (*READ_ERRORS, RuntimeError, ValueError, TypeError, AttributeError, KeyError) as e:
        raise DatasetError(
            f"'{path}' cannot be read as a PyG processed file ({type(e).__name__}: "
            f"{_reason(e)[:200]}); it is truncated or corrupt, or not a torch.save file"
        ) from e


def _reason(err: BaseException) -> str:
    """The informative part of a ``torch.load`` error, on one line (torch's advice left out)."""
    keep = []
    for line in str(err).splitlines():
        line = line.strip()
        if not line or line.startswith(("Weights only load failed", "Check the documentation")):
            continue
        if "WeightsUnpickler error:" in line:
            line = line.split("WeightsUnpickler error:", 1)[1].strip()
        if line:
            keep.append(line)
    return " ".join(keep) or type(err).__name__


def _graph_of(out: Any, path: Path) -> Any:
    """The one ``Data`` in what a processed file holds (checked)."""
    from torch_geometric.data import Data, HeteroData

    slices = None
    data_cls: Any = Data
    if isinstance(out, tuple) and len(out) in (2, 3):
        data, slices = out[0], out[1]
        if len(out) == 3:
            data_cls = out[2]
    else:
        data = out
    if data_cls is HeteroData or isinstance(data, HeteroData):
        raise DatasetError(
            f"'{path}' holds a heterogeneous graph (HeteroData); fleetgnn trains on graphs with "
            f"one node and one edge type: convert it with data.to_homogeneous() in PyG first"
        )
    if not (isinstance(data_cls, type) and issubclass(data_cls, Data)):
        raise DatasetError(f"'{path}' names data class {data_cls!r}, not a PyG Data")
    if isinstance(data, dict):
        data = data_cls.from_dict(data)
    if not isinstance(data, Data):
        raise DatasetError(
            f"'{path}' does not hold a PyG dataset (got {type(out).__name__}); expected what "
            f"InMemoryDataset saves: (data, slices[, data class])"
        )
    if slices is not None:
        if not isinstance(slices, dict):
            raise DatasetError(f"'{path}': slices must be a dict (got {type(slices).__name__})")
        counts = {int(v.numel()) - 1 for v in slices.values() if hasattr(v, "numel")}
        graphs = max(counts, default=1)
        if graphs != 1:
            raise DatasetError(
                f"'{path}' holds a dataset of {graphs} graphs; fleetgnn prepare pyg reads a "
                f"dataset of one graph (node classification)"
            )
    return data


def load_pyg_dataset(
    root: str | os.PathLike[str],
    name: str,
    *,
    train_mask: str | os.PathLike[str] | None = None,
    val_mask: str | os.PathLike[str] | None = None,
    test_mask: str | os.PathLike[str] | None = None,
    split: str | os.PathLike[str] | None = None,
    max_bytes: int | None = None,
) -> Graph:
    """Load the one graph of a PyG dataset from its processed file (no download, no processing).

    Finds the file with :func:`find_processed`, reads it with ``torch.load(weights_only=True,
    mmap=True)`` and converts it with :func:`~fleetgnn.graph.loaders.pyg.from_pyg`: edges
    (``edge_index``, row 0 = source) become in-neighbour CSC, ``x``, ``y`` and the split masks
    are kept, ``edge_weight``, ``edge_attr`` (edge features, in CSC order) and the edge times
    (``edge_time``, or ``time`` with one entry per edge; see ``from_pyg``) and node times
    (``node_time``, or ``time`` with one entry per node) too. A mask with
    several columns (``[N, K]``: ``K`` alternative splits, e.g. WikiCS or the Geom-GCN splits)
    gives its column 0, with a warning saying so.
    Your own split (``.npy`` mask files or one ``split`` file, read as
    :func:`~fleetgnn.graph.loaders.splits.user_split` reads them) replaces the file's masks; a
    dataset with neither (e.g. OGB's, whose split lives in ``split/``) gets a warning.

    Args:
        root: PyG root directory (what was passed to the PyG dataset class).
        name: Dataset name (e.g. ``Cora``; matched without regard to case).
        train_mask: ``.npy`` bool or 0/1 ``[N]``: your own training nodes.
        val_mask: ``.npy`` bool or 0/1 ``[N]``: validation nodes (with ``train_mask``).
        test_mask: ``.npy`` bool or 0/1 ``[N]``: test nodes (with ``train_mask``).
        split: One ``.npz`` / ``.json`` file holding the train, val and test sets.
        max_bytes: The memory the loader may use (``prepare --max-memory``; default: half of
            this machine's memory).

    Returns:
        The validated graph; its arrays may be memory maps of the processed file.

    Raises:
        DatasetError: PyG is not installed, the processed file is missing, refused (it needs
            objects beyond tensors and PyG's data classes), damaged, heterogeneous, holds
            several graphs, or declares more than ``max_bytes``; an invalid split given.
        GraphError: Attributes of the wrong type or shape (from
            :func:`~fleetgnn.graph.loaders.pyg.from_pyg`).
    """
    given = {
        k: v
        for k, v in (("train_mask", train_mask), ("val_mask", val_mask), ("test_mask", test_mask))
        if v is not None
    }
    check_split_args(given, {}, split_file=split)  # before anything is read
    budget = MemoryBudget(resolve_max_bytes(max_bytes))
    try:
        import torch_geometric.data  # noqa: F401  registers PyG's classes as safe to load
    except ImportError as e:
        raise DatasetError(
            f"prepare pyg needs PyTorch Geometric, an optional dependency; install it with "
            f"'{PYG_HINT}' ({e})"
        ) from e
    path = require_file(find_processed(root, name), "PyG processed file")
    data = _graph_of(_torch_load(path, budget), path)

    import torch

    fields: dict[str, Any] = {}
    keys = ("edge_index", "x", "y", "edge_weight", "edge_attr", "edge_time", "node_time", "time")
    for key in (*keys, *SPLITS):
        if key in data and data[key] is not None:
            fields[key] = data[key]
    several = {}
    for key in SPLITS:
        m = fields.get(key)
        if isinstance(m, torch.Tensor) and m.dim() == 2 and m.shape[1] > 1:
            several[key] = int(m.shape[1])
            fields[key] = m[:, 0]
    if several:
        which = ", ".join(f"{k} has {c}" for k, c in several.items())
        warnings.warn(
            f"'{path}' holds several splits ({which} columns); using split 0",
            stacklevel=2,
        )
    ei = fields.get("edge_index")
    x = fields.get("x")
    n = data["num_nodes"] if "num_nodes" in data else None  # else from_pyg infers it
    num_edges = int(ei.shape[-1]) if isinstance(ei, torch.Tensor) and ei.dim() == 2 else 0
    rows = n if isinstance(n, int) and n >= 0 else 0
    if isinstance(x, torch.Tensor) and x.dim() >= 1:
        rows = max(rows, int(x.shape[0]))
    budget.take(
        f"'{path}' declares {rows} nodes and {num_edges} edges",
        rows * NODE_BYTES + num_edges * EDGE_BYTES,
    )
    if isinstance(x, torch.Tensor):
        itemsize = x.element_size() if x.is_floating_point() else 4
        budget.take(
            f"'{path}' declares {' x '.join(map(str, x.shape))} features ({x.dtype})",
            x.numel() * itemsize,
        )
    attr = fields.get("edge_attr")
    if isinstance(attr, torch.Tensor):
        itemsize = attr.element_size() if attr.is_floating_point() else 4
        budget.take(
            f"'{path}' declares {' x '.join(map(str, attr.shape))} edge features ({attr.dtype})",
            2 * attr.numel() * itemsize,  # the rows and their copy in CSC order
        )
    fields["num_nodes"] = n
    try:
        graph = from_pyg(types.SimpleNamespace(**fields), name=name)
    except FleetgnnError as e:
        raise DatasetError(f"'{path}' does not give a valid graph: {e}") from e
    own = user_split(graph.y, given, split, labels_hint=f"labels ('y' in '{path}')")
    if own is not None:
        return graph.replace(**own)
    if graph.y is not None and all(getattr(graph, k) is None for k in SPLITS):
        warnings.warn(
            f"'{path}' holds no train/val/test masks, so the dataset has no split; give one with "
            f"--split FILE or --train-mask/--val-mask/--test-mask (an OGB dataset: fleetgnn "
            f"prepare ogb --root {Path(path).parent.parent} reads its official split)",
            stacklevel=2,
        )
    return graph
