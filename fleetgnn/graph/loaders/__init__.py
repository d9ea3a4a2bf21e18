"""Dataset loaders: Planetoid, gnn-benchmark ``.npz``, OGB raw files, edge lists and PyG.

Every loader validates its input and fails only with :class:`~fleetgnn.errors.DatasetError` or
:class:`~fleetgnn.errors.GraphError`, naming the file (and line, for text) and the fix.

======================  ==========================================  ===========================
function                input                                       result
======================  ==========================================  ===========================
``load_planetoid``      ``ind.<name>.*`` pickles (safe unpickler)   in-memory ``Graph``
``load_npz``            gnn-benchmark ``.npz`` (no pickle)          in-memory ``Graph``
``prepare_ogb``         OGB ``raw/*.csv.gz`` + ``split/``           dataset directory (streamed)
``prepare_ogb_hetero``  OGB heterogeneous ``raw/`` (ogbn-mag)       typed dataset (streamed)
``load_edgelist``       text ``src dst [w]`` + ``.npy`` node data   in-memory ``Graph``
``from_pyg/to_pyg``     ``torch_geometric.data.Data``               ``Graph`` / ``Data``
``load_pyg_dataset``    PyG ``processed/*.pt`` (weights_only)       in-memory ``Graph``
``load_split_file``     ``.npz`` / ``.json`` train/val/test sets    bool masks
======================  ==========================================  ===========================
"""

from fleetgnn.graph.loaders.edgelist import load_edgelist
from fleetgnn.graph.loaders.npz import load_npz
from fleetgnn.graph.loaders.ogb import prepare_ogb
from fleetgnn.graph.loaders.ogb_hetero import is_hetero_layout, prepare_ogb_hetero
from fleetgnn.graph.loaders.planetoid import SafeUnpickler, load_planetoid
from fleetgnn.graph.loaders.pyg import from_pyg, to_pyg
from fleetgnn.graph.loaders.pyg_dataset import load_pyg_dataset
from fleetgnn.graph.loaders.splits import load_split_file, random_split

__all__ = [
    "SafeUnpickler",
    "from_pyg",
    "is_hetero_layout",
    "load_edgelist",
    "load_npz",
    "load_planetoid",
    "load_pyg_dataset",
    "load_split_file",
    "prepare_ogb",
    "prepare_ogb_hetero",
    "random_split",
    "to_pyg",
]
